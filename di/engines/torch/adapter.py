"""PyTorch adapter: ``torch.autograd.grad`` for eager reverse mode, ``torch.func`` for
the rest, and ``torch.compile`` of ``torch.func`` programs when asked.

The adapter decides once, from the contexts, which family of programs serves a
prep: with a ``Cache`` (which ``torch.func`` cannot write traced values into)
every operator is built from eager reverse mode (:mod:`.eager`, over the one
reverse-mode sequence of :mod:`.reverse`), otherwise from ``torch.func``
(:mod:`.func`), whose eager gradient and pullback are that reverse mode all the
same (the faster path). :mod:`.compile` compiles and watches recompiles. What the
programs share has a module per concern: where the call runs
(:mod:`.transforms`), tensors as autograd takes them (:mod:`.tensors`), results
the caller owns (:mod:`.ownership`), torch's output rules and refusals
(:mod:`.rules`), and what the programs ask of the adapter (:mod:`.base`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from di.backends.capabilities import AUX_FAMILIES, OPERATOR_FAMILIES, Capabilities
from di.backends.protocol import Program, Programs
from di.backends.transforms import Composition
from di.contexts import Cache, Context
from di.engines.torch.base import TorchBase
from di.engines.torch.checks import refuse_what_compiling_drops
from di.engines.torch.compile import TorchCompiler
from di.engines.torch.compiled_call import Fusible
from di.engines.torch.distributed import refuse_sharded_parameters, watching
from di.engines.torch.eager import EagerPrograms
from di.engines.torch.func import FuncPrograms
from di.engines.torch.ownership import addresses, owned_results, owning, unshared
from di.engines.torch.rules import overwritten_error, version_of
from di.engines.torch.selector import AutoTorch
from di.engines.torch.tensors import requires_grad
from di.engines.torch.transforms import refusing_caches_inside_transforms

__all__ = ["COMPOSITIONS", "TorchAdapter"]

_UNCOMPILED = "AutoTorch(compile=True) runs its torch.func programs uncompiled here: compiled code cannot run inside."
_FUNC = frozenset({"same point", "Cache"})
_PLAIN = frozenset(plain for plain, _ in OPERATOR_FAMILIES.values())
"""The plain operators' names: a program of one with tangents returns its products."""
COMPOSITIONS = (
    Composition(
        "torch.func.vmap",
        _FUNC,
        run="di.engines.torch.inside:vmap",
        note=f"A strict prep compares the per-example shape. {_UNCOMPILED}",
    ),
    Composition("torch.func.grad", _FUNC, note=f"Higher order, as torch.func.grad(torch.func.grad(f)). {_UNCOMPILED}"),
    Composition("torch.func.jacrev", _FUNC, note=_UNCOMPILED),
    Composition("torch.func.jvp", _FUNC, note=_UNCOMPILED),
    Composition("torch.func.jacfwd", _FUNC, note=_UNCOMPILED),
    Composition(
        "torch.autograd.grad",
        frozenset({"same point"}),
        note="x, a Constant or a tangent that requires grad: results carry the caller's graph, as with "
        "create_graph=True (AutoTorch(create_graph=False) detaches them).",
    ),
    Composition("torch.no_grad", note="Derivatives are computed all the same; results carry no graph."),
    Composition("torch.inference_mode", note="Inference tensors are taken too."),
    Composition(
        "torch.compile",
        breaks=frozenset({"same point", "Cache", "unprepared"}),
        note="Around the caller's code calling prepared operators: one graph with fullgraph=True, as "
        "torch.func's own transforms give.",
    ),
)
"""What composes inside each torch transform and mode."""


def _with_caches(run: Callable[..., Any], caches: Sequence[int], x: Any, values: Sequence[Any]) -> Any:
    """``run(x, *values)`` with the ``Cache`` buffers (at positions ``caches``) as
    the operators give them to ``f``: a value that keeps the caller's graph (``x``
    or a ``Constant`` requires grad) saves what ``f`` writes, so ``f`` fills a copy
    and the caller's buffer is left as it was; otherwise ``f`` fills the caller's
    buffer, detached afterwards so that it holds no graph (``numpy()`` works on it)."""
    if torch.is_grad_enabled() and (
        requires_grad(x) or any(requires_grad(v) for i, v in enumerate(values) if i not in caches)
    ):
        copies = list(values)
        for i in caches:
            if isinstance(copies[i], torch.Tensor):
                copies[i] = copies[i].clone()
        return run(x, *copies)
    try:
        return run(x, *values)
    finally:
        for i in caches:
            if isinstance(values[i], torch.Tensor):
                values[i].detach_()


class TorchAdapter(TorchBase):
    """Adapter for :class:`di.AutoTorch`.

    ``Cache`` tensors are passed to ``f`` as the caller's buffer (numpy buffers
    through ``torch.from_numpy``, sharing memory) and detached after the call, so
    they hold no graph. Compiled (``compile=True``): ``torch.compile`` is applied
    once at preparation (``fullgraph=True`` unless ``compile_options`` says
    otherwise) and run there, so compilation happens then; Python float contexts
    are passed as 0-d tensors so a new value does not recompile; ints and other
    hashable values are compiled in.
    """

    capabilities = Capabilities(
        family="torch",
        compile_option="compile",
        pytrees=frozenset({"gradient"}),
        compiled_pytrees=frozenset({"gradient"}),
        aux=AUX_FAMILIES,
        complex_native=frozenset({"gradient", "hvp"}),
        cache_note=(
            "f receives the caller's buffer (numpy buffers through torch.from_numpy, sharing memory), detached after "
            "the call; operators torch.func cannot run on buffers are built from reverse mode."
        ),
        compositions=COMPOSITIONS,
    )

    def __init__(self, backend: AutoTorch) -> None:  # type: ignore[override]
        super().__init__(backend)
        self.selector = backend
        self.compiler = TorchCompiler(backend)
        self._eager = EagerPrograms(self)
        self._func = FuncPrograms(self)
        self._preparing_now = threading.local()  # (the operator each thread prepares: :meth:`_preparing`)

    def _programs_for(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], has_aux: bool = False
    ) -> EagerPrograms | FuncPrograms:
        """The family of programs serving these contexts: eager reverse mode with a
        ``Cache``, ``torch.func`` otherwise. Before ``torch.func`` programs are
        compiled, ``f`` is checked for what dynamo's trace would silently get wrong
        (:func:`~di.engines.torch.checks.refuse_what_compiling_drops`); compiling
        ``f`` alone, as the programs with a ``Cache`` do, gets both right."""
        if any(isinstance(c, Cache) for c in contexts):
            return self._eager
        if self.compiles_now():
            operator = getattr(self._preparing_now, "operator", "")
            refuse_what_compiling_drops(self, f, x, contexts, operator, has_aux)
        return self._func

    def _composing(
        self, programs: Programs, contexts: Sequence[Context], has_aux: bool = False, lead: int = 1
    ) -> Programs:
        """The programs, refusing up front to run inside a ``torch.func`` transform
        when they write into a ``Cache`` (the ``torch.func`` programs, which
        compose with transforms, cannot write into buffers). The ``torch.func``
        programs' values and ``aux`` are copied where they share an input's memory
        (:func:`~di.engines.torch.ownership.owning`); the eager reverse-mode ones
        (every program with a ``Cache``, the eager gradient and pullback) see to
        it themselves."""
        programs = watching(programs, self.selector, has_aux)  # DDP: averaged gradients, or refusals
        if any(isinstance(c, Cache) for c in contexts):
            return {
                name: refusing_caches_inside_transforms(program, self.selector) for name, program in programs.items()
            }
        eager = not self.compiled and (
            "gradient" in programs
            or "pullback" in programs
            or all(getattr(program, "owns_results", False) for program in programs.values())
        )
        if eager:
            return programs
        owned = {name: self._owned(name, program, has_aux, lead) for name, program in programs.items()}
        for name, program in programs.items():
            spelling = getattr(program, "spelling", None)
            if spelling is not None and owned[name] is not program:
                owned[name].spelling = spelling  # type: ignore[attr-defined]
        return owned

    def _owned(self, name: str, program: Program, has_aux: bool, lead: int) -> Program:
        """``program`` (named ``name``) with its results owned (:func:`owning`);
        a compiled one offering it (:class:`Fusible`, not since wrapped) makes its
        common call in one frame."""
        # with tangents, every program: its products may be the tangents themselves
        with_value = name.startswith("value_")
        owns = has_aux or lead == 2 or with_value
        products_at = None if name in _PLAIN else 1
        parts = (lead, with_value, has_aux, products_at)
        general = owning(program, *parts) if owns else program
        fusible: Fusible | None = getattr(program, "fusible", None)
        if fusible is None or fusible.layered is not program:  # (a DDP wrapper copies the attribute)
            return general
        products_alone = lead == 2 and not (with_value or has_aux) and products_at is None
        return fusible.fused(general, owned_results(*parts) if owns else None, products_alone)

    def check_inputs(self, operator: str, x: Any) -> None:
        """Refuse FSDP2's DTensor parameters in ``x`` before anything runs."""
        refuse_sharded_parameters(x, operator, self.selector)

    def prepare_value_program(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Any:
        """``f``'s value, copied where it is an input or a view of one. ``f`` runs
        untraced, so nothing stops a write into ``x``: one is found after ``f``
        ran (its version counter moved) and refused with what became of ``x``,
        naming the operator being prepared. A ``Cache`` is treated as the
        operators treat it: detached after ``f`` ran, so it holds no graph, or,
        where ``x`` or a ``Constant`` requires grad (the value keeps the caller's
        graph, which saves what ``f`` wrote), left as it was, ``f`` filling a copy."""
        written: list[Any] = []
        caches = tuple(i for i, c in enumerate(contexts) if isinstance(c, Cache))
        operator = getattr(self._preparing_now, "operator", "")

        def watched(x: Any, *values: Any) -> Any:
            if caches:
                return _with_caches(run, caches, x, values)
            return run(x, *values)

        def run(x: Any, *values: Any) -> Any:
            version = version_of(x)
            try:
                y = f(x, *values)
            except Exception:  # (a KeyboardInterrupt passes unchanged, whatever f wrote)
                if version is not None and x._version != version:
                    written.append(x)
                raise
            if version is not None and x._version != version:
                written.append(x)
            return y

        value = super().prepare_value_program(watched, x, contexts)
        backend = self.backend

        def owned_value(x: Any, *values: Any) -> Any:
            try:
                y = value(x, *values)
            except Exception as err:
                if written:  # f raised after the write: its error is the cause
                    raise overwritten_error(backend, operator, x, written.pop(), untraced=True) from err
                raise
            if written:
                raise overwritten_error(backend, operator, x, written.pop(), untraced=True)
            if isinstance(y, torch.Tensor):
                y = unshared(y, addresses(x, values))
            return y

        return owned_value

    def output_shapes(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Any:
        """As :meth:`Adapter.output_shapes`: asked for a pullback's cotangents."""
        with self._preparing("pullback"):
            return super().output_shapes(f, x, contexts)

    @contextlib.contextmanager
    def _preparing(self, operator: str) -> Iterator[None]:
        """Name ``operator`` in the errors of the value programs prepared meanwhile
        in this thread (:meth:`prepare_value_program`): the outermost one, the
        operator the caller asked for, when one is built from another."""
        local = self._preparing_now
        outermost = not getattr(local, "operator", "")
        if outermost:
            local.operator = operator
        try:
            yield
        finally:
            if outermost:
                local.operator = ""

    # --- operators ----------------------------------------------------------------------------

    def prepare_gradient_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], *, has_aux: bool = False
    ) -> Programs:
        with self._preparing("gradient"):
            return self._composing(
                self._programs_for(f, x, contexts, has_aux).gradient(f, x, contexts, has_aux), contexts, has_aux
            )

    def prepare_pullback_programs(
        self,
        f: Callable[..., Any],
        x: Any,
        ty: Sequence[Any],
        contexts: Sequence[Context],
        *,
        has_aux: bool = False,
    ) -> Programs:
        with self._preparing("pullback"):
            return self._composing(
                self._programs_for(f, x, contexts, has_aux).pullback(f, x, ty, contexts, has_aux), contexts, has_aux, 2
            )

    def prepare_pushforward_programs(
        self,
        f: Callable[..., Any],
        x: Any,
        tx: Sequence[Any],
        contexts: Sequence[Context],
        *,
        has_aux: bool = False,
    ) -> Programs:
        with self._preparing("pushforward"):
            return self._composing(
                self._programs_for(f, x, contexts, has_aux).pushforward(f, x, tx, contexts, has_aux),
                contexts,
                has_aux,
                2,
            )

    def prepare_jacobian_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], *, has_aux: bool = False
    ) -> Programs:
        with self._preparing("jacobian"):
            return self._composing(
                self._programs_for(f, x, contexts, has_aux).jacobian(f, x, contexts, has_aux), contexts, has_aux
            )

    def prepare_derivative_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], *, has_aux: bool = False
    ) -> Programs:
        with self._preparing("derivative"):
            return self._composing(
                self._programs_for(f, x, contexts, has_aux).derivative(f, x, contexts, has_aux), contexts, has_aux
            )

    def prepare_second_derivative_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]
    ) -> Programs:
        with self._preparing("second_derivative"):
            return self._composing(self._programs_for(f, x, contexts).second_derivative(f, x, contexts), contexts)

    def prepare_hvp_programs(
        self, f: Callable[..., Any], x: Any, tx: Sequence[Any], contexts: Sequence[Context]
    ) -> Programs:
        with self._preparing("hvp"):
            return self._composing(self._programs_for(f, x, contexts).hvp(f, x, tx, contexts), contexts, lead=2)

    def prepare_hessian_programs(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Programs:
        with self._preparing("hessian"):
            return self._composing(self._programs_for(f, x, contexts).hessian(f, x, contexts), contexts)
