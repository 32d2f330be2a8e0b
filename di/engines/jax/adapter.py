"""JAX adapter: JAX's own transforms for every operator, eager or under ``jax.jit``
(:class:`JAXAdapter`), and what composes inside JAX's transforms
(:data:`COMPOSITIONS`).

Each operator is written as two pure JAX functions of ``(x, [tangents,]
*context_values)``, which :class:`~di.engines.jax.builder.ProgramBuilder` makes
programs of: compiled with ``jit``, in the x64 scope the inputs need.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from di.backends.aux import outputs
from di.backends.capabilities import AUX_FAMILIES, OPERATOR_FAMILIES, Capabilities
from di.backends.outputs import output_leaf_shapes
from di.backends.protocol import Programs, plain_from_full
from di.backends.transforms import Composition
from di.contexts import Context
from di.engines.jax.builder import ProgramBuilder, traced_inputs
from di.engines.jax.hessians import hessian_programs
from di.engines.jax.meshes import MeshScope, explicit_mesh
from di.engines.jax.programs import (
    AuxTracing,
    apply_vjp,
    cast_like,
    engine_tangents,
    first_argument,
    result,
    size,
    split,
    stack,
    unstack,
    value_only,
)
from di.engines.jax.selector import AutoJAX
from di.engines.jax.x64 import keep_constants_per_scope, needs_x64, x64_scope
from di.errors import InvalidOutputError
from di.families import converter, family_of, identity

__all__ = ["COMPOSITIONS", "JAXAdapter"]

keep_constants_per_scope()

_SAME_POINT = frozenset({"same point"})
_MEASURED = "measured"
"""The jacobian mode that compiles both candidates and keeps the one XLA's cost analysis favours."""
_JACOBIAN_SPELLINGS = {
    "forward": "jax.jacfwd (forward mode: jvp batched over the standard basis)",
    "reverse": "jax.jacrev (reverse mode: vjp batched over the output basis)",
}
_CONTROL_FLOW = (jax.errors.TracerBoolConversionError, jax.errors.TracerIntegerConversionError)
COMPOSITIONS = (
    Composition(
        "jax.jit",
        _SAME_POINT,
        run="di.engines.jax.inside:jit",
        note="One compiled program: AutoJAX(jit=True)'s program is a nested jit, traced into the caller's. "
        "An unprepared call prepares at each trace (once per compile).",
    ),
    Composition(
        "jax.vmap",
        _SAME_POINT,
        run="di.engines.jax.inside:vmap",
        note="A strict prep compares the per-example shape: prepare with one example.",
    ),
    Composition(
        "jax.grad", _SAME_POINT, note="Higher order: jax.grad of a function calling di.gradient gives JAX's own HVPs."
    ),
    Composition("jax.jacfwd", _SAME_POINT),
    Composition("jax.jacrev", _SAME_POINT),
    Composition("jax.lax.scan", _SAME_POINT, note="Also fori_loop and cond bodies: staged like jax.jit."),
    Composition("jax.lax.while_loop", _SAME_POINT),
    Composition(
        "jax.shard_map",
        _SAME_POINT,
        note="x is the per-device block: prepare with its shape. Sharded inputs under jax.jit keep their sharding.",
    ),
)
"""What composes inside each JAX transform: every operator, prepared (strict) or
not; same-point preps are refused (they compare the point by value)."""


class JAXAdapter(ProgramBuilder):
    """Adapter for :class:`di.AutoJAX`.

    Native: every operator, with JAX's transforms (``jvp``/``linearize`` and
    ``vmap`` for batched pushforwards and hvps, ``vjp`` for pullbacks,
    ``jacfwd``/``jacrev``, forward-over-reverse hvp, the hessian of
    :mod:`di.engines.jax.hessians`). Eager
    (``jit=False``) runs op by op on every call, so Python control flow on values
    works; compiled (``jit=True``) compiles one program per operator family at
    preparation, with contexts traced or compiled in as
    :func:`di.backends.protocol.is_static_context` says. ``Cache`` values are
    passed as immutable JAX arrays: ``f`` must build new arrays.
    """

    capabilities = Capabilities(
        family="jax",
        compile_option="jit",
        pytrees=frozenset(OPERATOR_FAMILIES),
        aux=AUX_FAMILIES,
        cache_note="JAX arrays are immutable: f receives the cache as an array it must not write into.",
        differentiates="own",  # it traces the programs of JAX adapters; others cannot take its tracers
        compositions=COMPOSITIONS,
    )

    def tree_map(self, function: Callable[[Any], Any], tree: Any) -> Any:
        return jax.tree_util.tree_map(function, tree)

    def takes_pytree(self, tree: Any) -> bool:
        """JAX takes pytrees whose nodes it knows (its own registry, which has
        tuples, lists, dicts, namedtuples); a node registered with optree only is
        flattened by ``di`` instead."""
        leaves = jax.tree_util.tree_leaves(tree)
        return not (len(leaves) == 1 and leaves[0] is tree) and all(family_of(leaf) is not None for leaf in leaves)

    def _input_converter(self, value: Any) -> Callable[[Any], Any]:
        leaves = jax.tree_util.tree_leaves(value)
        if len(leaves) == 1 and leaves[0] is value:
            return super()._input_converter(value)
        if all(family_of(leaf) in (None, "jax") for leaf in leaves):
            return identity

        def convert_leaves(tree: Any) -> Any:
            return jax.tree_util.tree_map(lambda leaf: converter(family_of(leaf), "jax")(leaf), tree)

        return convert_leaves

    def scope(self, values: Sequence[Any]) -> Callable[[], contextlib.AbstractContextManager[Any]]:
        x64 = needs_x64([np.asarray(v) if isinstance(v, float) and i == 0 else v for i, v in enumerate(values)])
        mesh = explicit_mesh(values)
        if mesh is not None:  # eager JAX computes on such arrays inside their mesh's context only
            return MeshScope(mesh, x64)
        return x64_scope if x64 else contextlib.nullcontext

    # --- operators --------------------------------------------------------------------

    def prepare_gradient_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], *, has_aux: bool = False
    ) -> Programs:
        aux = self._aux(contexts, has_aux)
        checked = self._checked(f, "gradient", aux)
        names = ("gradient", "value_and_gradient")
        if aux is None:
            return self._plain_and_full(jax.grad(checked), jax.value_and_grad(checked), x, None, contexts, names)
        value_and_grad = jax.value_and_grad(checked, has_aux=True)

        def value_and_gradient(x: Any, *values: Any) -> Any:
            (y, arrays), g = value_and_grad(x, *values)
            return (y, g), arrays

        return self._plain_and_full(jax.grad(checked, has_aux=True), value_and_gradient, x, None, contexts, names, aux)

    def prepare_pushforward_programs(
        self,
        f: Callable[..., Any],
        x: Any,
        tx: Sequence[Any],
        contexts: Sequence[Context],
        *,
        has_aux: bool = False,
    ) -> Programs:
        aux = self._aux(contexts, has_aux)
        checked = self._checked(f, "pushforward", aux)

        def core(x: Any, tx: Sequence[Any], *values: Any) -> Any:
            fx = functools.partial(first_argument, checked, values)
            tx = [cast_like(t, x) for t in tx]
            if not tx:
                y, *arrays = outputs(fx(x), has_aux)
                return result(has_aux, (y, ()), *arrays)
            if len(tx) == 1:
                y, dy, *arrays = jax.jvp(fx, (x,), (tx[0],), has_aux=has_aux)
                return result(has_aux, (y, (dy,)), *arrays)
            y, linear, *arrays = jax.linearize(fx, x, has_aux=has_aux)  # type: ignore[call-overload]
            return result(has_aux, (y, unstack(jax.vmap(linear)(stack(tx)), len(tx))), *arrays)

        names = ("pushforward", "value_and_pushforward")
        return self._plain_and_full(plain_from_full(core, has_aux), core, x, tx, contexts, names, aux)

    def prepare_pullback_programs(
        self,
        f: Callable[..., Any],
        x: Any,
        ty: Sequence[Any],
        contexts: Sequence[Context],
        *,
        has_aux: bool = False,
    ) -> Programs:
        aux = self._aux(contexts, has_aux)
        checked = self._checked(f, "pullback", aux)

        def core(x: Any, ty: Sequence[Any], *values: Any) -> Any:
            fx = functools.partial(first_argument, checked, values)
            y, vjp, *arrays = jax.vjp(fx, x, has_aux=has_aux)  # type: ignore[call-overload]
            return result(has_aux, (y, apply_vjp(vjp, ty, y)), *arrays)

        names = ("pullback", "value_and_pullback")
        return self._plain_and_full(plain_from_full(core, has_aux), core, x, ty, contexts, names, aux)

    def prepare_pullback_same_point_programs(
        self, f: Callable[..., Any], x: Any, ty: Sequence[Any], contexts: Sequence[Context]
    ) -> Programs:
        checked = self._checked(f, "pullback")
        values = [c.value for c in contexts]
        scope = self.scope([x, *values])
        with scope():
            engine_inputs = [convert(v) for convert, v in zip(self.input_converters([x, *values]), [x, *values])]
            y, vjp = jax.vjp(functools.partial(first_argument, checked, engine_inputs[1:]), engine_inputs[0])
        apply = jax.jit(apply_vjp) if self.compiled else apply_vjp

        def value_and_pullback(x: Any, ty: Sequence[Any], *values: Any) -> Any:
            with scope():
                return y, apply(vjp, engine_tangents(ty), y)

        return split(value_and_pullback, "pullback", "value_and_pullback")

    def prepare_jacobian_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], *, has_aux: bool = False
    ) -> Programs:
        aux = self._aux(contexts, has_aux)
        checked = self._checked(f, "jacobian", aux)
        mode = self._jacobian_mode(value_only(checked) if aux else checked, x, contexts)
        if mode != _MEASURED or has_aux:
            # (f's aux is recorded by the one trace of its program: one candidate, forward, as before)
            return self._jacobian_programs(checked, mode != "reverse", x, contexts, aux, has_aux)
        # A square jacobian under jit: which mode is faster depends on f (forward for elementwise
        # and banded f, reverse where the batched jvp's dot splits XLA's fusions), so both are
        # compiled and XLA's cost analysis of the two executables decides (memory traffic)
        traffic, candidates = {}, {}
        for candidate in ("forward", "reverse"):
            compiled: list[Any] = []
            aux = self._aux(contexts, has_aux)
            candidates[candidate] = self._jacobian_programs(
                checked, candidate == "forward", x, contexts, aux, has_aux, compiled
            )
            traffic[candidate] = bytes_accessed(compiled[0]) if compiled else None
        chosen = jacobian_mode_by_traffic(traffic["forward"], traffic["reverse"])
        note = (
            f"{_JACOBIAN_SPELLINGS[chosen]}, chosen by XLA's cost analysis of both compiled programs "
            f"(bytes accessed: forward {_count(traffic['forward'])}, reverse {_count(traffic['reverse'])})"
        )
        programs = candidates[chosen]
        for program in programs.values():
            program.spelling = note  # type: ignore[attr-defined]
        return programs

    def _jacobian_programs(
        self,
        checked: Callable[..., Any],
        forward: bool,
        x: Any,
        contexts: Sequence[Context],
        aux: AuxTracing | None,
        has_aux: bool,
        compiled_now: list[Any] | None = None,
    ) -> Programs:
        transform = jax.jacfwd if forward else jax.jacrev

        def value_and_jacobian(x: Any, *values: Any) -> Any:
            def y_twice(x: Any) -> Any:  # y comes out of the jacobian's own evaluation of f
                y, *arrays = outputs(checked(x, *values), has_aux)
                return y, (y, *arrays)

            jac, (y, *arrays) = transform(y_twice, has_aux=True)(x)
            return result(has_aux, (y, jac), *arrays)

        def jacobian(x: Any, *values: Any) -> Any:
            return transform(functools.partial(first_argument, checked, values), has_aux=has_aux)(x)

        names = ("jacobian", "value_and_jacobian")
        return self._plain_and_full(jacobian, value_and_jacobian, x, None, contexts, names, aux, compiled_now)

    def output_shapes(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Any:
        """Shapes from tracing ``f`` abstractly (``jax.eval_shape``): nothing is computed."""
        values = [c.value for c in contexts]
        with self.scope([x, *values])():
            inputs = [convert(v) for convert, v in zip(self.input_converters([x, *values]), [x, *values])]
            try:
                y = jax.eval_shape(functools.partial(first_argument, f, inputs[1:]), inputs[0])
            except Exception:  # f's own error is the programs' to raise, at the call
                return None
        return output_leaf_shapes(y, self.tree_map)

    def _jacobian_mode(self, checked: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> str:
        """``"forward"`` or ``"reverse"``: the selector's mode, else forward when x
        has fewer elements than f's output (one pass per input versus one per
        output), reverse when it has more; for a square jacobian of at least
        :data:`MEASURED_MIN_SIZE` elements under jit, :data:`_MEASURED` (both are
        compiled and compared)."""
        assert isinstance(self.backend, AutoJAX)
        if self.backend.mode is not None:
            return self.backend.mode
        values = [c.value for c in contexts]
        with self.scope([x, *values])():
            inputs = [convert(v) for convert, v in zip(self.input_converters([x, *values]), [x, *values])]
            # the context values closed over, as the programs take them: a bool or int
            # Constant that f branches or slices on stays a Python value
            try:
                y = jax.eval_shape(functools.partial(first_argument, checked, inputs[1:]), inputs[0])
            except InvalidOutputError as err:
                # f branches on x's value, which eval_shape does not give: evaluate f once. A
                # conversion (.item(), which eager JAX lets through with a wrong derivative) stays refused
                if not isinstance(err.__cause__, _CONTROL_FLOW):
                    raise
                y = checked(*inputs)
        n_in, n_out = size(inputs[0]), size(y)
        if n_in == n_out >= MEASURED_MIN_SIZE and self.compiled and not traced_inputs([x, *values], None):
            return _MEASURED
        return "forward" if n_in <= n_out else "reverse"

    def prepare_derivative_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], *, has_aux: bool = False
    ) -> Programs:
        aux = self._aux(contexts, has_aux)
        checked = self._checked(f, "derivative", aux)

        def core(x: Any, *values: Any) -> Any:
            fx = functools.partial(first_argument, checked, values)
            y, dy, *arrays = jax.jvp(fx, (x,), (jnp.ones_like(x),), has_aux=has_aux)
            return result(has_aux, (y, dy), *arrays)

        names = ("derivative", "value_and_derivative")
        return self._plain_and_full(plain_from_full(core, has_aux), core, x, None, contexts, names, aux)

    def prepare_second_derivative_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]
    ) -> Programs:
        checked = self._checked(f, "second_derivative")

        def core(x: Any, *values: Any) -> Any:
            fx = functools.partial(first_argument, checked, values)
            one = jnp.ones_like(x)

            def value_and_derivative(x: Any) -> Any:
                return jax.jvp(fx, (x,), (one,))

            (y, dy), (_, d2y) = jax.jvp(value_and_derivative, (x,), (one,))
            return y, dy, d2y

        return self._plain_and_full(
            plain_from_full(core, False),
            core,
            x,
            None,
            contexts,
            ("second_derivative", "value_derivative_and_second_derivative"),
        )

    def prepare_hvp_programs(
        self, f: Callable[..., Any], x: Any, tx: Sequence[Any], contexts: Sequence[Context]
    ) -> Programs:
        checked = self._checked(f, "hvp")

        def core(x: Any, tx: Sequence[Any], *values: Any) -> Any:
            grad = jax.grad(functools.partial(first_argument, checked, values))
            tx = [cast_like(t, x) for t in tx]
            if len(tx) == 1:
                g, hv = jax.jvp(grad, (x,), (tx[0],))
                return g, (hv,)
            if not tx:
                return grad(x), ()
            g, linear = jax.linearize(grad, x)
            return g, unstack(jax.vmap(linear)(stack(tx)), len(tx))

        return self._plain_and_full(plain_from_full(core, False), core, x, tx, contexts, ("hvp", "gradient_and_hvp"))

    def prepare_hvp_same_point_programs(
        self, f: Callable[..., Any], x: Any, tx: Sequence[Any], contexts: Sequence[Context]
    ) -> Programs:
        checked = self._checked(f, "hvp")
        values = [c.value for c in contexts]
        scope = self.scope([x, *values])
        with scope():
            engine_inputs = [convert(v) for convert, v in zip(self.input_converters([x, *values]), [x, *values])]
            grad = jax.grad(functools.partial(first_argument, checked, engine_inputs[1:]))
            # The Hessian is symmetric, so the vjp of the gradient is the hvp; unlike
            # linearize's function, vjp's is a pytree that jit can take as an argument.
            g, linear = jax.vjp(grad, engine_inputs[0])
        apply = jax.jit(apply_vjp) if self.compiled else apply_vjp

        def gradient_and_hvp(x: Any, tx: Sequence[Any], *values: Any) -> Any:
            with scope():
                return g, apply(linear, engine_tangents(tx), g)

        return split(gradient_and_hvp, "hvp", "gradient_and_hvp")

    def stacked_products(
        self, primitive: str, f: Callable[..., Any], x: Any, contexts: Sequence[Context]
    ) -> Callable[..., Any] | None:
        """``linearize`` (``vjp`` for pullbacks) once, then ``vmap`` of the linear
        map over each stack of seeds: one seed array, not a tangent per seed."""
        checked = self._checked(f, primitive)

        def at(x: Any, *values: Any) -> Any:
            fx = functools.partial(first_argument, checked, values)
            if primitive == "pullback":
                y, vjp = jax.vjp(fx, x)
                return y, lambda seeds: jax.vmap(vjp)(cast_like(seeds, y))[0]
            value, linear = jax.linearize(jax.grad(fx) if primitive == "hvp" else fx, x)
            return value, lambda seeds: jax.vmap(linear)(cast_like(seeds, x))

        return at

    def prepare_hessian_programs(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Programs:
        checked = self._checked(f, "hessian")
        values = [c.value for c in contexts]

        def build(forward: bool, compiled_now: list[Any]) -> Programs:
            outer = jax.jacfwd if forward else jax.jacrev

            def core(x: Any, *values: Any) -> Any:
                value_and_grad = jax.value_and_grad(functools.partial(first_argument, checked, values))

                def gradient_with_aux(x: Any) -> Any:
                    y, g = value_and_grad(x)
                    return g, (y, g)

                hessian, (y, g) = outer(gradient_with_aux, has_aux=True)(x)
                return y, g, hessian

            def hessian(x: Any, *values: Any) -> Any:
                fx = functools.partial(first_argument, checked, values)
                return jax.hessian(fx)(x) if forward else jax.jacrev(jax.jacrev(fx))(x)

            names = ("hessian", "value_gradient_and_hessian")
            return self._plain_and_full(hessian, core, x, None, contexts, names, None, compiled_now)

        return hessian_programs(build, x, values, self.compiled and not traced_inputs([x, *values], None))


MEASURED_MIN_SIZE = 64
"""The least size of a square jacobian whose mode is measured (both programs compiled):
below it both modes run in microseconds and a second compile at preparation costs more
than it can save; smaller square jacobians run forward mode."""

REVERSE_TRAFFIC_RATIO = 0.9
"""A square jacobian runs in reverse mode when XLA's cost analysis gives its
program at most this fraction of the forward program's bytes accessed; ties and
near-ties keep forward mode (``jax.jacfwd``, what ``jax.hessian`` and JAX's docs
use for square matrices)."""


def bytes_accessed(compiled: Any) -> float | None:
    """XLA's estimate of the memory traffic of a compiled executable (its cost
    analysis's ``bytes accessed``); ``None`` where this JAX or device gives none."""
    try:
        analysis = compiled.cost_analysis()
    except Exception:  # pragma: no cover - a backend without cost analysis
        return None
    if isinstance(analysis, (list, tuple)):  # (older JAX: one dict per device program)
        analysis = analysis[0] if analysis else None
    value = analysis.get("bytes accessed") if isinstance(analysis, dict) else None
    return float(value) if value is not None else None


def jacobian_mode_by_traffic(forward: float | None, reverse: float | None) -> str:
    """``"reverse"`` where the reverse program's estimated memory traffic is at most
    :data:`REVERSE_TRAFFIC_RATIO` of the forward one's, else ``"forward"``.

    Square jacobians of n = 1e3 on the CPU, float32, timed against XLA's
    estimate: the coupled cubic ``x**3 - x sum(x**2) / n`` reads 4.4e7 bytes
    forward, 2.8e7 reverse (forward 4.3x slower: the batched jvp's dot, ``x``
    against the 1e3 x 1e3 tangents, splits the elementwise fusion around it into
    more passes over the matrix); ``tanh(A @ x)`` 2.8e7 / 2.0e7 (forward 1.1x
    slower); ``softmax`` 1.2e7 / 2.0e7 (forward 0.7x); ``cumsum(x**2)``,
    ``sin(x) x`` and the Rosenbrock gradient tie (forward 0.02-0.7x).

    Examples:
        >>> from di.engines.jax.adapter import jacobian_mode_by_traffic
        >>> jacobian_mode_by_traffic(4.4e7, 2.8e7)
        'reverse'
        >>> jacobian_mode_by_traffic(4.0e6, 4.0e6)
        'forward'
        >>> jacobian_mode_by_traffic(None, 1.0)
        'forward'
    """
    if forward is None or reverse is None or reverse > REVERSE_TRAFFIC_RATIO * forward:
        return "forward"
    return "reverse"


def _count(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.3g}"
