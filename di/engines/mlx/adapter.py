"""MLX adapter: MLX's own transforms for every operator, eager or under
``mx.compile`` (:class:`MLXAdapter`), and what composes inside MLX's transforms
(:data:`COMPOSITIONS`).

Each operator is written as pure MLX functions of ``(x, [tangents,]
*context_values)`` (:mod:`di.engines.mlx.operators`), which
:class:`~di.engines.mlx.programs.ProgramMaker` makes programs of: inputs
converted (float64 kept), results evaluated, under ``mx.compile`` with
``AutoMLX(compile=True)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import mlx.core as mx

from di.backends.capabilities import AUX_FAMILIES, Capabilities
from di.backends.choosing import timed_choice
from di.backends.outputs import SCALAR_OPERATORS, checking
from di.backends.protocol import Adapter, Programs
from di.backends.transforms import Composition
from di.contexts import Cache, Context
from di.engines.mlx import operators
from di.engines.mlx.programs import RULES, AuxHolder, ProgramMaker, array_output, scalar_output
from di.engines.mlx.selector import AutoMLX

__all__ = ["COMPOSITIONS", "FORWARD_TIME_RATIO", "JACOBIAN_SPELLINGS", "MEASURED_MIN_SIZE", "MLXAdapter"]

MEASURED_MIN_SIZE = 256
"""The least size of ``x`` (and ``f(x)``, of the same size) whose eager Jacobian
programs are both timed at preparation: below it reverse mode was as fast or
faster for every ``f`` tried; from it, forward mode was up to 1.3x faster in
float64 (MLX's CPU float64 pullbacks: 26 against 38 ms for the coupled cubic at
n = 1e3). Compiled programs are not timed (each would compile; reverse mode was
the faster compiled, in both precisions)."""

FORWARD_TIME_RATIO = 0.9
"""Forward mode is chosen when its best time is at most this fraction of reverse
mode's."""

JACOBIAN_SPELLINGS = {
    False: "mx.vmap over mx.vjp (reverse mode: one pullback per row, vectorised)",
    True: "mx.vmap over mx.jvp (forward mode: one pushforward per column, vectorised)",
}

_SAME_POINT = frozenset({"same point"})
COMPOSITIONS = (
    Composition(
        "mx.grad",
        _SAME_POINT,
        note="Also mx.value_and_grad, mx.vjp, mx.jvp: AutoMLX's programs are MLX functions, traced by the "
        "caller's transform (higher order: mx.grad of a function calling di.gradient).",
    ),
    Composition(
        "mx.vmap",
        _SAME_POINT,
        run="di.engines.mlx.inside:vmap",
        note="A strict prep compares the per-example shape: prepare with one example. The program must not "
        "evaluate inside vmap: AutoMLX(compile=True) or AutoMLX() alike.",
    ),
    Composition(
        "mx.compile",
        _SAME_POINT,
        run="di.engines.mlx.inside:compile",
        note="One compiled program: the di call is traced into the caller's. An unprepared call prepares "
        "at each trace (once per compile).",
    ),
)
"""What composes inside each MLX transform: every operator, prepared (strict) or
not; same-point preps are refused (they compare the point by value)."""


def _has_cache(contexts: Sequence[Context]) -> bool:
    return any(isinstance(c, Cache) for c in contexts)


class MLXAdapter(Adapter):
    """Adapter for :class:`di.AutoMLX`.

    Native: every operator, with MLX's transforms (``mx.value_and_grad``,
    ``mx.jvp`` and ``mx.vjp``, ``mx.vmap`` over them for jacobians and
    hessians, ``mx.jvp`` of ``mx.grad`` for hvps). Eager (``compile=False``)
    runs op by op on every call; compiled (``compile=True``) runs each program
    under ``mx.compile``, traced once per signature. ``Cache`` values are MLX
    arrays ``f`` may write into (``buf[...] = ...``, traced like any operation).
    """

    capabilities = Capabilities(
        family="mlx",
        compile_option="compile",
        aux=AUX_FAMILIES,
        complex_native=frozenset({"gradient", "hvp"}),
        differentiates="own",  # it differentiates the programs of MLX adapters (MLX functions)
        # x[i] = ... inside f is an operation of MLX's graph on the array f is given (MLX's own,
        # never the caller's): f is a function of x like any other
        x_writes="own copy",
        compositions=COMPOSITIONS,
    )

    def __init__(self, backend: Any) -> None:
        super().__init__(backend)
        self.maker = ProgramMaker(backend, self.compiled, self.input_converters)

    def _checked(self, f: Callable[..., Any], operator: str, aux: AuxHolder | None = None) -> Callable[..., Any]:
        accept = scalar_output if operator in SCALAR_OPERATORS else array_output
        if aux is None:
            return checking(f, self.backend, operator, RULES, accept=accept)
        return checking(f, self.backend, operator, RULES, has_aux=True, aux=aux.split, accept=accept)

    def _pair(
        self,
        plain: Callable[..., Any],
        full: Callable[..., Any],
        x: Any,
        tangents: Sequence[Any] | None,
        contexts: Sequence[Context],
        names: tuple[str, str],
        aux: AuxHolder | None = None,
    ) -> Programs:
        return {
            names[0]: self.maker.program(plain, x, tangents, contexts, aux=aux),
            names[1]: self.maker.program(full, x, tangents, contexts, aux=aux),
        }

    @staticmethod
    def _aux(has_aux: bool) -> AuxHolder | None:
        return AuxHolder() if has_aux else None

    # --- operators --------------------------------------------------------------------

    def prepare_gradient_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], *, has_aux: bool = False
    ) -> Programs:
        aux = self._aux(has_aux)
        plain, full = operators.gradient(self._checked(f, "gradient", aux), has_aux, _has_cache(contexts))
        return self._pair(plain, full, x, None, contexts, ("gradient", "value_and_gradient"), aux)

    def prepare_pushforward_programs(
        self,
        f: Callable[..., Any],
        x: Any,
        tx: Sequence[Any],
        contexts: Sequence[Context],
        *,
        has_aux: bool = False,
    ) -> Programs:
        aux = self._aux(has_aux)
        plain, full = operators.pushforward(self._checked(f, "pushforward", aux), has_aux)
        return self._pair(plain, full, x, tx, contexts, ("pushforward", "value_and_pushforward"), aux)

    def prepare_pullback_programs(
        self,
        f: Callable[..., Any],
        x: Any,
        ty: Sequence[Any],
        contexts: Sequence[Context],
        *,
        has_aux: bool = False,
    ) -> Programs:
        aux = self._aux(has_aux)
        plain, full = operators.pullback(self._checked(f, "pullback", aux), has_aux)
        return self._pair(plain, full, x, ty, contexts, ("pullback", "value_and_pullback"), aux)

    def prepare_derivative_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], *, has_aux: bool = False
    ) -> Programs:
        aux = self._aux(has_aux)
        plain, full = operators.derivative(self._checked(f, "derivative", aux), has_aux)
        return self._pair(plain, full, x, None, contexts, ("derivative", "value_and_derivative"), aux)

    def prepare_jacobian_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], *, has_aux: bool = False
    ) -> Programs:
        aux = self._aux(has_aux)
        bases = operators.Bases()  # (one for both candidates: the same matrices)
        forward, sizes = self._jacobian_mode(f, x, contexts, has_aux, bases)

        def build(forward: bool) -> Programs:
            plain, full = operators.jacobian(self._checked(f, "jacobian", aux), has_aux, forward, bases)
            return self._pair(plain, full, x, None, contexts, ("jacobian", "value_and_jacobian"), aux)

        measured = (
            sizes is not None
            and sizes[0] == sizes[1] >= MEASURED_MIN_SIZE
            and not self.compiled
            and not has_aux
            and not _has_cache(contexts)
        )
        if not measured:
            return _spelled(build(forward), _jacobian_reason(forward, sizes, self.backend))
        values = [c.value for c in contexts]

        def run(programs: Programs) -> Callable[[], Any]:
            program = programs["jacobian"]
            return lambda: program(x, *values)

        return timed_choice(
            build(False),
            build(True),
            run,
            FORWARD_TIME_RATIO,
            lambda chosen_forward, ratio: (
                f"{JACOBIAN_SPELLINGS[chosen_forward]}, chosen by timing both at preparation (x and f(x) of "
                f"equal sizes; forward mode took {ratio:.2f} of reverse mode's time)"
            ),
        )  # (an error of f at x keeps reverse mode: the calls will raise it)

    def prepare_hvp_programs(
        self, f: Callable[..., Any], x: Any, tx: Sequence[Any], contexts: Sequence[Context]
    ) -> Programs:
        plain, full = operators.hvp(self._checked(f, "hvp"), _has_cache(contexts))
        return self._pair(plain, full, x, tx, contexts, ("hvp", "gradient_and_hvp"))

    def prepare_hessian_programs(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Programs:
        bases = operators.Bases()
        _prime_x(bases, x, self.input_converters)
        plain, full = operators.hessian(self._checked(f, "hessian"), bases)
        return self._pair(plain, full, x, None, contexts, ("hessian", "value_gradient_and_hessian"))

    def prepare_second_derivative_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]
    ) -> Programs:
        plain, full = operators.second_derivative(self._checked(f, "second_derivative"))
        names = ("second_derivative", "value_derivative_and_second_derivative")
        return self._pair(plain, full, x, None, contexts, names)

    def _jacobian_mode(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], has_aux: bool, bases: operators.Bases
    ) -> tuple[bool, tuple[int, int] | None]:
        """Whether the Jacobian runs in forward mode by default, and the sizes of
        ``x`` and ``f(x)`` (``None`` where they were not looked at): forward mode
        when the selector says so, or when ``x`` has fewer elements than ``f``'s
        output (one pass per input versus one per output; at equal sizes reverse
        mode, which :meth:`prepare_jacobian_programs` may time against forward
        mode). ``f`` is evaluated once, here, for its output's size; the basis
        the default mode pushes or pulls is made now (``bases``: that of ``x``
        forward, of ``f(x)`` reverse; at equal sizes and dtypes, the same)."""
        assert isinstance(self.backend, AutoMLX)
        if self.backend.mode is not None:
            if self.backend.mode == "forward":
                _prime_x(bases, x, self.input_converters)
            return self.backend.mode == "forward", None
        inputs = [x, *[c.value for c in contexts]]
        converted = [convert(v) for convert, v in zip(self.input_converters(inputs), inputs)]
        try:
            y = f(*converted)
        except Exception:  # f's own error is the programs' to raise, at the call
            return True, None
        if has_aux and isinstance(y, tuple) and len(y) == 2:
            y = y[0]
        x_size, y_size = int(getattr(converted[0], "size", 1)), int(getattr(y, "size", 1))
        forward = x_size < y_size
        _prime(bases, converted[0] if forward else y)
        return forward, (x_size, y_size)


def _prime_x(bases: operators.Bases, x: Any, input_converters: Callable[..., Any]) -> None:
    """The basis of ``x`` (as the programs convert it) made now."""
    try:
        _prime(bases, input_converters([x])[0](x))
    except Exception:  # (an x the programs refuse: they say why, at the call)
        pass


def _prime(bases: operators.Bases, value: Any) -> None:
    """The basis of ``value`` made now, where it is an MLX floating array (a pytree
    ``x`` is flattened by the layers above: its programs see one array)."""
    if value.__class__ is mx.array and mx.issubdtype(value.dtype, mx.floating):
        bases.prime(value.shape, value.dtype)


def _jacobian_reason(forward: bool, sizes: tuple[int, int] | None, backend: Any) -> str:
    """The spelling of an untimed Jacobian program and why it runs (``prep.info``)."""
    if sizes is None:
        why = f"mode={backend.mode!r}" if backend.mode is not None else "f failed at the prepared point"
    elif sizes[0] != sizes[1]:
        why = f"x has {sizes[0]} elements, f(x) {sizes[1]}"
    else:
        why = "x and f(x) of equal sizes"
    return f"{JACOBIAN_SPELLINGS[forward]} ({why})"


def _spelled(programs: Programs, spelling: str) -> Programs:
    for program in programs.values():
        program.spelling = spelling  # type: ignore[attr-defined]
    return programs
