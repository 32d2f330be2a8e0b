"""JAX adapter: JAX's own transforms for every operator, eager or under ``jax.jit``.

Each operator family is two pure JAX functions of ``(x, [tangents,] *context_values)``:
the plain operator's, returning its result alone, and the ``value_and_*`` one,
returning the tuple. With ``AutoJAX(jit=True)`` the plain one is compiled at
preparation and the other on its first call (an output nobody reads still costs
a compiled call its transfer and dispatch), with the static contexts as
``static_argnums``; without jit, each runs op by op every call.

float64 is kept by running inside a scoped ``jax.enable_x64(True)`` whenever an
input is 64-bit (the global flag is never touched); a call already inside such a
scope enters none.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from di.backends.aux import outputs
from di.backends.capabilities import AUX_FAMILIES, OPERATOR_FAMILIES, Capabilities
from di.backends.compile import (
    combined_first,
    compiled_on_first_use,
    counting_static_values,
    has_static_leaves,
    static_positions,
)
from di.backends.outputs import checking, output_leaf_shapes
from di.backends.protocol import Adapter, Program, Programs, plain_from_full
from di.backends.registry import get_adapter
from di.backends.selectors import AbstractBackend
from di.backends.transforms import Composition
from di.contexts import Context
from di.engines.jax.programs import (
    RULES,
    AuxTracing,
    StaticLeaves,
    apply_vjp,
    bare_single,
    cast_like,
    engine_tangents,
    first_argument,
    named,
    result,
    size,
    split,
    stack,
    unstack,
    value_only,
    wrap,
)
from di.engines.jax.selector import AutoJAX
from di.engines.jax.x64 import keep_constants_per_scope, needs_x64, x64_scope
from di.errors import InvalidOutputError
from di.families import converter, family_of, identity
from di.prep.own_checks import checked_by_executable, checks_arguments
from di.pytrees import is_pytree

__all__ = ["COMPOSITIONS", "JAXAdapter"]

keep_constants_per_scope()

_SAME_POINT = frozenset({"same point"})
_CONTROL_FLOW = (jax.errors.TracerBoolConversionError, jax.errors.TracerIntegerConversionError)
COMPOSITIONS = (
    Composition(
        "jax.jit",
        _SAME_POINT,
        note="One compiled program: AutoJAX(jit=True)'s program is a nested jit, traced into the caller's. "
        "An unprepared call prepares at each trace (once per compile).",
    ),
    Composition(
        "jax.vmap", _SAME_POINT, note="A strict prep compares the per-example shape: prepare with one example."
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


def _traced(inputs: Sequence[Any], tangents: Sequence[Any] | None) -> bool:
    """Whether an input is traced by a JAX transform (a preparation inside one: an
    unprepared call in a jitted or vmapped function), where compiling now would
    compile a program no call runs."""
    leaves = jax.tree_util.tree_leaves([list(inputs), list(tangents or ())])
    return any(isinstance(leaf, jax.core.Tracer) for leaf in leaves)


def _abstract(args: Sequence[Any]) -> list[Any]:
    """The prepared arguments as abstract values (shape, dtype, weak type): what an
    executable is compiled for, without holding the caller's arrays."""

    def spec(leaf: Any) -> Any:
        aval = jax.typeof(leaf)
        return jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type)

    return [jax.tree_util.tree_map(spec, arg) for arg in args]


def _direct_call(compiled: Any) -> Callable[..., Any]:
    """The C++ dispatch of an ahead-of-time compiled executable, which JAX's
    ``Compiled.__call__`` (a Python method) builds on its first call and then
    calls on every one: built now, it saves a Python call per prepared call. It
    refuses other arguments as ``Compiled`` does (a ``TypeError``). Where this JAX
    builds it otherwise, or not at all, the ``Compiled`` itself."""
    try:
        call = compiled._executable.create_cpp_call(compiled._params)
    except Exception:  # pragma: no cover - another JAX layout
        call = None
    return compiled if call is None else call


def _compiled_when_first_used(function: Any, specs: Sequence[Any], x64: bool) -> Callable[..., Any]:
    """The executable of ``function`` for the prepared arguments ``specs``,
    compiled by its first call (once, under a lock)."""
    lock = threading.Lock()
    compiled: list[Any] = []

    def executable(*args: Any) -> Any:
        if not compiled:
            with lock:
                if not compiled:
                    with x64_scope() if x64 else contextlib.nullcontext():
                        compiled.append(_direct_call(function.lower(*specs).compile()))
        return compiled[0](*args)

    return executable


def _lowered(function: Any, args: Sequence[Any], backend: AbstractBackend, operator: str, values: Sequence[Any]) -> Any:
    """``function`` lowered for ``args``. Some of JAX's refusals of ``f`` come only
    now, not while ``f`` ran (forward mode through a ``jax.custom_vjp`` function
    under ``jax.jit`` is a primitive that refuses to be lowered): they are
    explained here as the output rules explain them inside ``f``."""
    try:
        return function.lower(*args)
    except (TypeError, NotImplementedError) as err:
        explained = RULES.translate(err, backend, operator, values)
        if explained is None:
            raise
        raise explained from err


def _taken_by_jit(value: Any) -> bool:
    """Whether ``jax.jit`` takes ``value`` as it is: a numpy array, or a pytree of
    numpy and JAX arrays (converting them first would copy each leaf in Python)."""
    if family_of(value) == "numpy":
        return True
    if not is_pytree(value):
        return False
    leaves = jax.tree_util.tree_leaves(value)
    return bool(leaves) and all(family_of(leaf) in ("numpy", "jax") for leaf in leaves)


def _holds_numpy(values: Sequence[Any]) -> bool:
    """Whether a NumPy array is among ``values``' leaves. Outside ``enable_x64``, JAX
    reads a NumPy float64 array as float32 before an executable compares it: a
    float32 executable takes it, where a strict prep must refuse it (and the
    result would be float32). Such arguments are compared by their family's
    matcher instead."""
    return any(family_of(leaf) == "numpy" for leaf in jax.tree_util.tree_leaves(list(values)))


def _mark(program: Program) -> Program:
    """``program``, a wrapper of one that checks its own arguments, marked as such."""
    program.checks_arguments = True  # type: ignore[attr-defined]
    return program


class JAXAdapter(Adapter):
    """Adapter for :class:`di.AutoJAX`.

    Native: every operator, with JAX's transforms (``jvp``/``linearize`` and
    ``vmap`` for batched pushforwards and hvps, ``vjp`` for pullbacks,
    ``jacfwd``/``jacrev``, forward-over-reverse hvp and hessian). Eager
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
        if needs_x64([np.asarray(v) if isinstance(v, float) and i == 0 else v for i, v in enumerate(values)]):
            return x64_scope
        return contextlib.nullcontext

    # --- compiling programs of this engine into one ---------------------------------------

    def traceable_twin(self) -> Adapter | None:
        """``AutoJAX(jit=False)``'s adapter for ``AutoJAX(jit=True)``: its programs are
        pure JAX functions that ``jax.jit`` traces into one program; ``None`` eager."""
        if not self.compiled:
            return None
        assert isinstance(self.backend, AutoJAX)
        return get_adapter(dataclasses.replace(self.backend, jit=False))

    def compiled_twin(self) -> Adapter | None:
        """``AutoJAX(jit=True)``'s adapter for ``AutoJAX(jit=False)``; ``None`` compiled."""
        if self.compiled:
            return None
        assert isinstance(self.backend, AutoJAX)
        return get_adapter(dataclasses.replace(self.backend, jit=True))

    def compile_program(
        self,
        core: Callable[..., Any],
        x: Any,
        tangents: Sequence[Any] | None,
        contexts: Sequence[Context],
        *,
        on_first_use: bool = False,
    ) -> Program:
        """``core`` under ``jax.jit`` (eager: as it is), taking the caller's inputs,
        static contexts compiled in, in the x64 scope its inputs need; compiled now
        or, ``on_first_use``, by its first call."""
        return self._program(core, x, tangents, contexts, on_first_use=on_first_use)

    # --- building programs ----------------------------------------------------------

    def _checked(self, f: Callable[..., Any], operator: str, aux: AuxTracing | None = None) -> Callable[..., Any]:
        """``f`` with its output checked for ``operator``; with ``aux``, ``f`` returns
        ``(y, aux)`` and the function returns ``(y, aux's arrays)`` (the rest of
        ``aux`` is recorded by ``aux``)."""
        if aux is None:
            return checking(f, self.backend, operator, RULES)
        return checking(f, self.backend, operator, RULES, has_aux=True, aux=aux.split)

    def _program(
        self,
        core: Callable[..., Any],
        x: Any,
        tangents: Sequence[Any] | None,
        contexts: Sequence[Context],
        *,
        on_first_use: bool = False,
        aux: AuxTracing | None = None,
        bare: bool = False,
        operator: str = "",
    ) -> Program:
        """``core(x, [tangents,] *values)`` taking caller-family inputs and running in
        the x64 scope it needs; with jit, compiled now or, ``on_first_use``, by its
        first call (once, under a lock). With ``aux``, ``core`` returns ``(result,
        aux's arrays)`` and the program ``(result, aux)``. ``operator``: the one
        whose refusals of ``f`` found while compiling are explained."""
        values = [c.value for c in contexts]
        x64 = self.scope([x, *values]) is x64_scope
        lead = 1 if tangents is None else 2
        inputs = [x, *values]
        function: Callable[..., Any]
        if self.compiled:
            statics = static_positions(contexts, self.backend)
            # pytree contexts with leaves compiled in (ints, strings): their static leaves travel
            # in the pytree's structure, one program per distinct set, counted as static values
            partly = tuple(
                i
                for i, c in enumerate(contexts)
                if i not in statics and has_static_leaves(c, jax.tree_util.tree_leaves(c.value))
            )
            if aux is not None:
                core = aux.carrying(core)
            # named: JAX's messages then cite x and values[i], which RULES.translate maps to f's arguments
            function = jax.jit(named(core, lead), static_argnums=tuple(lead + i for i in statics))
            # jit takes numpy input itself (one transfer; pytrees of numpy leaves too): only torch
            # needs DLPack.
            converters = [
                identity if _taken_by_jit(v) else convert for v, convert in zip(inputs, self.input_converters(inputs))
            ]
            for i in partly:
                converters[1 + i] = StaticLeaves.split
        else:
            statics, partly, function, converters = (), (), core, self.input_converters(inputs)
        traced = self.compiled and _traced(inputs, tangents)
        executable: Callable[..., Any] | None = None
        if self.compiled and not traced:  # (inside a transform, the caller's trace compiles it instead)
            with x64_scope() if x64 else contextlib.nullcontext():
                args = [convert(v) for convert, v in zip(converters, inputs)]
                if tangents is not None:
                    args.insert(1, engine_tangents(tangents))
                if not on_first_use:  # compiled now
                    executable = _direct_call(_lowered(function, args, self.backend, operator, values).compile())
                elif not statics and not partly and tangents is None and is_pytree(x):
                    executable = _compiled_when_first_used(function, _abstract(args), x64)
        by_executable = not statics and not partly and tangents is None and is_pytree(x)
        if executable is not None and by_executable and not _holds_numpy(inputs):
            # A pytree x is taken as it is by the compiled executable, which flattens it in
            # C++ and refuses another structure, shape or dtype itself: the strict check of
            # x costs nothing more (an array x is compared faster by its family's matcher).
            function = checked_by_executable(executable, function)
        program = wrap(function, converters, tangents is not None, x64, bare)
        if aux is not None:
            program = aux.joining(program, self.compiled)
        if not self.compiled:
            return program
        if on_first_use:
            program = compiled_on_first_use(program)
        if checks_arguments(function):
            program = _mark(program)
        counted = sorted(statics + partly)
        return counting_static_values(
            program,
            tuple(lead - 1 + i for i in counted),
            self.backend,
            prepared=[values[i] for i in counted],
            first_context=lead - 1,
            keys={lead - 1 + i: StaticLeaves.key for i in partly},
        )

    def _plain_and_full(
        self,
        plain_core: Callable[..., Any],
        full_core: Callable[..., Any],
        x: Any,
        tangents: Sequence[Any] | None,
        contexts: Sequence[Context],
        names: tuple[str, str],
        aux: AuxTracing | None = None,
    ) -> Programs:
        """The two programs of an operator family: the plain operator's, returning
        its result alone (compiled at preparation), and the ``value_and_*`` one
        (compiled on its first call). One program for both would make the plain
        call pay for outputs it drops: each output of a compiled call costs
        microseconds, and a jacobian returned beside the value is copied out of
        the layout XLA computed it in. For one tangent the compiled plain program
        returns the bare array, put in a tuple in Python. A preparation for the
        combined form (``value=True``) compiles the two the other way round."""
        bare = tangents is not None and aux is None and self.compiled
        if bare:
            plain_core = bare_single(plain_core)
        combined = combined_first()  # prepare_*(..., value=True): the value_and_* program now
        return {
            names[0]: self._program(
                plain_core, x, tangents, contexts, on_first_use=combined, aux=aux, bare=bare, operator=names[0]
            ),
            names[1]: self._program(
                full_core, x, tangents, contexts, on_first_use=not combined, aux=aux, operator=names[0]
            ),
        }

    def _aux(self, contexts: Sequence[Context], has_aux: bool) -> AuxTracing | None:
        if not has_aux:
            return None
        return AuxTracing(self.compiled)

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
        forward = self._forward_jacobian(value_only(checked) if aux else checked, x, contexts)
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
        return self._plain_and_full(jacobian, value_and_jacobian, x, None, contexts, names, aux)

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

    def _forward_jacobian(self, checked: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> bool:
        """Forward mode when the selector says so, or when x has no more elements
        than f's output (one pass per input versus one per output)."""
        assert isinstance(self.backend, AutoJAX)
        if self.backend.mode is not None:
            return self.backend.mode == "forward"
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
        return size(inputs[0]) <= size(y)

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

    def prepare_hessian_programs(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Programs:
        checked = self._checked(f, "hessian")

        def core(x: Any, *values: Any) -> Any:
            value_and_grad = jax.value_and_grad(functools.partial(first_argument, checked, values))

            def gradient_with_aux(x: Any) -> Any:
                y, g = value_and_grad(x)
                return g, (y, g)

            hessian, (y, g) = jax.jacfwd(gradient_with_aux, has_aux=True)(x)
            return y, g, hessian

        def hessian(x: Any, *values: Any) -> Any:
            return jax.hessian(functools.partial(first_argument, checked, values))(x)

        return self._plain_and_full(hessian, core, x, None, contexts, ("hessian", "value_gradient_and_hessian"))
