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
import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from di.backends.aux import AuxSplits, outputs, split_aux, split_output
from di.backends.compile import compiled_on_first_use
from di.backends.protocol import (
    OPERATOR_FAMILIES,
    Adapter,
    Program,
    Programs,
    counting_static_values,
    is_real_floating_array,
    is_real_scalar,
    output_leaf_shapes,
    plain_from_full,
    raise_bad_output,
    static_positions,
)
from di.backends.selectors import AutoJAX
from di.contexts import Context
from di.families import converter, family_of, identity
from di.families.jax import is_64_bit

__all__ = ["JAXAdapter", "needs_x64"]


def needs_x64(values: Sequence[Any]) -> bool:
    """Whether any value (or pytree leaf) is a 64-bit array (float64 only exists
    in JAX inside ``jax.enable_x64``)."""
    for value in jax.tree_util.tree_leaves(list(values)):
        if family_of(value) is not None and is_64_bit(value.dtype):
            return True
    return False


_X64 = jax.enable_x64  # the x64 state: ``_X64.value`` reads it, ``_X64(True)`` scopes it


def _x64_scope() -> contextlib.AbstractContextManager[Any]:
    """``enable_x64(True)``, or nothing when the caller's scope already enables it
    (entering a nested scope costs a jitted call about 4 us)."""
    return contextlib.nullcontext() if _X64.value else _X64(True)  # type: ignore[no-any-return]


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

    family = "jax"
    native_pytrees = frozenset(OPERATOR_FAMILIES)
    cache_note = "JAX arrays are immutable: f receives the cache as an array it must not write into."

    def tree_map(self, function: Callable[[Any], Any], tree: Any) -> Any:
        return jax.tree_util.tree_map(function, tree)

    def differentiates_programs_of(self, inner: Adapter) -> bool:
        """JAX traces the programs of JAX adapters (eager or jitted); other engines'
        programs cannot take JAX tracers."""
        return isinstance(inner, JAXAdapter)

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

    @property
    def compiled(self) -> bool:  # type: ignore[override]
        assert isinstance(self.backend, AutoJAX)
        return self.backend.jit

    def scope(self, values: Sequence[Any]) -> Callable[[], contextlib.AbstractContextManager[Any]]:
        if needs_x64([np.asarray(v) if isinstance(v, float) and i == 0 else v for i, v in enumerate(values)]):
            return _x64_scope
        return contextlib.nullcontext

    # --- building programs ----------------------------------------------------------

    def _checked(
        self, f: Callable[..., Any], operator: str, scalar: bool, aux: _AuxTracing | None = None
    ) -> Callable[..., Any]:
        """``f`` with its output checked for ``operator``; with ``aux``, ``f`` returns
        ``(y, aux)`` and the function returns ``(y, aux's arrays)`` (the rest of
        ``aux`` is recorded by ``aux``)."""
        backend = self.backend

        def checked(x: Any, *values: Any) -> Any:
            y = f(x, *values)
            if aux is not None:
                y, tree = split_output(y, backend, operator)
                return check(y, x), aux.split(tree, values)
            return check(y, x)

        def check(y: Any, x: Any) -> Any:
            if isinstance(y, float):
                y = jnp.asarray(y, dtype=getattr(x, "dtype", None))
            if scalar and not is_real_scalar(y):
                raise_bad_output(y, backend, operator)
            if not scalar:
                leaves = jax.tree_util.tree_leaves(y)
                if not leaves or not all(is_real_floating_array(leaf) for leaf in leaves):
                    raise_bad_output(y, backend, operator)
            return y

        return checked

    def _program(
        self,
        core: Callable[..., Any],
        x: Any,
        tangents: Sequence[Any] | None,
        contexts: Sequence[Context],
        *,
        on_first_use: bool = False,
        aux: _AuxTracing | None = None,
        bare_single: bool = False,
    ) -> Program:
        """``core(x, [tangents,] *values)`` taking caller-family inputs and running in
        the x64 scope it needs; with jit, compiled now or, ``on_first_use``, by its
        first call (once, under a lock). With ``aux``, ``core`` returns ``(result,
        aux's arrays)`` and the program ``(result, aux)``."""
        values = [c.value for c in contexts]
        x64 = self.scope([x, *values]) is _x64_scope
        lead = 1 if tangents is None else 2
        inputs = [x, *values]
        function: Callable[..., Any]
        if self.compiled:
            statics = static_positions(contexts, self.backend)
            function = jax.jit(core, static_argnums=tuple(lead + i for i in statics))
            # jit takes numpy input itself (one transfer); only torch needs DLPack.
            converters = [
                identity if family_of(v) == "numpy" else convert
                for v, convert in zip(inputs, self.input_converters(inputs))
            ]
        else:
            statics, function, converters = (), core, self.input_converters(inputs)
        program = _wrap(function, converters, tangents is not None, x64, bare_single)
        if aux is not None:
            program = aux.joining(program, lead, self.compiled)
        if not self.compiled:
            return program
        if on_first_use:
            program = compiled_on_first_use(program)
        else:
            with _x64_scope() if x64 else contextlib.nullcontext():
                args = [convert(v) for convert, v in zip(converters, inputs)]
                if tangents is not None:
                    args.insert(1, _engine_tangents(tangents))
                function.lower(*args).compile()  # type: ignore[attr-defined]
        return counting_static_values(program, tuple(lead - 1 + i for i in statics), self.backend)

    def _plain_and_full(
        self,
        plain_core: Callable[..., Any],
        full_core: Callable[..., Any],
        x: Any,
        tangents: Sequence[Any] | None,
        contexts: Sequence[Context],
        names: tuple[str, str],
        aux: _AuxTracing | None = None,
    ) -> Programs:
        """The two programs of an operator family: the plain operator's, returning
        its result alone (compiled at preparation), and the ``value_and_*`` one
        (compiled on its first call). One program for both would make the plain
        call pay for outputs it drops: each output of a compiled call costs
        microseconds, and a jacobian returned beside the value is copied out of
        the layout XLA computed it in. For one tangent the compiled plain program
        returns the bare array, put in a tuple in Python."""
        bare_single = tangents is not None and aux is None and self.compiled
        if bare_single:
            plain_core = _bare_single(plain_core)
        return {
            names[0]: self._program(plain_core, x, tangents, contexts, aux=aux, bare_single=bare_single),
            names[1]: self._program(full_core, x, tangents, contexts, on_first_use=True, aux=aux),
        }

    def _aux(self, contexts: Sequence[Context], has_aux: bool) -> _AuxTracing | None:
        if not has_aux:
            return None
        return _AuxTracing(static_positions(contexts, self.backend) if self.compiled else ())

    # --- operators --------------------------------------------------------------------

    def prepare_gradient_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], *, has_aux: bool = False
    ) -> Programs:
        aux = self._aux(contexts, has_aux)
        checked = self._checked(f, "gradient", scalar=True, aux=aux)
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
        checked = self._checked(f, "pushforward", scalar=False, aux=aux)

        def core(x: Any, tx: Sequence[Any], *values: Any) -> Any:
            fx = functools.partial(_first_argument, checked, values)
            tx = [_cast_like(t, x) for t in tx]
            if not tx:
                y, *arrays = outputs(fx(x), has_aux)
                return _result(has_aux, (y, ()), *arrays)
            if len(tx) == 1:
                y, dy, *arrays = jax.jvp(fx, (x,), (tx[0],), has_aux=has_aux)
                return _result(has_aux, (y, (dy,)), *arrays)
            y, linear, *arrays = jax.linearize(fx, x, has_aux=has_aux)  # type: ignore[call-overload]
            return _result(has_aux, (y, _unstack(jax.vmap(linear)(_stack(tx)), len(tx))), *arrays)

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
        checked = self._checked(f, "pullback", scalar=False, aux=aux)

        def core(x: Any, ty: Sequence[Any], *values: Any) -> Any:
            fx = functools.partial(_first_argument, checked, values)
            y, vjp, *arrays = jax.vjp(fx, x, has_aux=has_aux)  # type: ignore[call-overload]
            return _result(has_aux, (y, _apply_vjp(vjp, ty, y)), *arrays)

        names = ("pullback", "value_and_pullback")
        return self._plain_and_full(plain_from_full(core, has_aux), core, x, ty, contexts, names, aux)

    def prepare_pullback_same_point_programs(
        self, f: Callable[..., Any], x: Any, ty: Sequence[Any], contexts: Sequence[Context]
    ) -> Programs:
        checked = self._checked(f, "pullback", scalar=False)
        values = [c.value for c in contexts]
        scope = self.scope([x, *values])
        with scope():
            engine_inputs = [convert(v) for convert, v in zip(self.input_converters([x, *values]), [x, *values])]
            y, vjp = jax.vjp(functools.partial(_first_argument, checked, engine_inputs[1:]), engine_inputs[0])
        apply = jax.jit(_apply_vjp) if self.compiled else _apply_vjp

        def value_and_pullback(x: Any, ty: Sequence[Any], *values: Any) -> Any:
            with scope():
                return y, apply(vjp, _engine_tangents(ty), y)

        return _split(value_and_pullback, "pullback", "value_and_pullback")

    def prepare_jacobian_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], *, has_aux: bool = False
    ) -> Programs:
        aux = self._aux(contexts, has_aux)
        checked = self._checked(f, "jacobian", scalar=False, aux=aux)
        forward = self._forward_jacobian(_value_only(checked) if aux else checked, x, contexts)
        transform = jax.jacfwd if forward else jax.jacrev

        def value_and_jacobian(x: Any, *values: Any) -> Any:
            def y_twice(x: Any) -> Any:  # y comes out of the jacobian's own evaluation of f
                y, *arrays = outputs(checked(x, *values), has_aux)
                return y, (y, *arrays)

            jac, (y, *arrays) = transform(y_twice, has_aux=True)(x)
            return _result(has_aux, (y, jac), *arrays)

        def jacobian(x: Any, *values: Any) -> Any:
            return transform(functools.partial(_first_argument, checked, values), has_aux=has_aux)(x)

        names = ("jacobian", "value_and_jacobian")
        return self._plain_and_full(jacobian, value_and_jacobian, x, None, contexts, names, aux)

    def output_shapes(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> list[tuple[int, ...]] | None:
        """Shapes from tracing ``f`` abstractly (``jax.eval_shape``): nothing is computed."""
        values = [c.value for c in contexts]
        with self.scope([x, *values])():
            inputs = [convert(v) for convert, v in zip(self.input_converters([x, *values]), [x, *values])]
            try:
                y = jax.eval_shape(functools.partial(_first_argument, f, inputs[1:]), inputs[0])
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
            y = jax.eval_shape(checked, *inputs)
        return _size(inputs[0]) <= _size(y)

    def prepare_derivative_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], *, has_aux: bool = False
    ) -> Programs:
        aux = self._aux(contexts, has_aux)
        checked = self._checked(f, "derivative", scalar=False, aux=aux)

        def core(x: Any, *values: Any) -> Any:
            fx = functools.partial(_first_argument, checked, values)
            y, dy, *arrays = jax.jvp(fx, (x,), (jnp.ones_like(x),), has_aux=has_aux)
            return _result(has_aux, (y, dy), *arrays)

        names = ("derivative", "value_and_derivative")
        return self._plain_and_full(plain_from_full(core, has_aux), core, x, None, contexts, names, aux)

    def prepare_second_derivative_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]
    ) -> Programs:
        checked = self._checked(f, "second_derivative", scalar=False)

        def core(x: Any, *values: Any) -> Any:
            fx = functools.partial(_first_argument, checked, values)
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
        checked = self._checked(f, "hvp", scalar=True)

        def core(x: Any, tx: Sequence[Any], *values: Any) -> Any:
            grad = jax.grad(functools.partial(_first_argument, checked, values))
            tx = [_cast_like(t, x) for t in tx]
            if len(tx) == 1:
                g, hv = jax.jvp(grad, (x,), (tx[0],))
                return g, (hv,)
            if not tx:
                return grad(x), ()
            g, linear = jax.linearize(grad, x)
            return g, _unstack(jax.vmap(linear)(_stack(tx)), len(tx))

        return self._plain_and_full(plain_from_full(core, False), core, x, tx, contexts, ("hvp", "gradient_and_hvp"))

    def prepare_hvp_same_point_programs(
        self, f: Callable[..., Any], x: Any, tx: Sequence[Any], contexts: Sequence[Context]
    ) -> Programs:
        checked = self._checked(f, "hvp", scalar=True)
        values = [c.value for c in contexts]
        scope = self.scope([x, *values])
        with scope():
            engine_inputs = [convert(v) for convert, v in zip(self.input_converters([x, *values]), [x, *values])]
            grad = jax.grad(functools.partial(_first_argument, checked, engine_inputs[1:]))
            # The Hessian is symmetric, so the vjp of the gradient is the hvp; unlike
            # linearize's function, vjp's is a pytree that jit can take as an argument.
            g, linear = jax.vjp(grad, engine_inputs[0])
        apply = jax.jit(_apply_vjp) if self.compiled else _apply_vjp

        def gradient_and_hvp(x: Any, tx: Sequence[Any], *values: Any) -> Any:
            with scope():
                return g, apply(linear, _engine_tangents(tx), g)

        return _split(gradient_and_hvp, "hvp", "gradient_and_hvp")

    def prepare_hessian_programs(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Programs:
        checked = self._checked(f, "hessian", scalar=True)

        def core(x: Any, *values: Any) -> Any:
            value_and_grad = jax.value_and_grad(functools.partial(_first_argument, checked, values))

            def gradient_with_aux(x: Any) -> Any:
                y, g = value_and_grad(x)
                return g, (y, g)

            hessian, (y, g) = jax.jacfwd(gradient_with_aux, has_aux=True)(x)
            return y, g, hessian

        def hessian(x: Any, *values: Any) -> Any:
            return jax.hessian(functools.partial(_first_argument, checked, values))(x)

        return self._plain_and_full(hessian, core, x, None, contexts, ("hessian", "value_gradient_and_hessian"))


# --- helpers (module level, so jit sees the same function objects) -----------------------


def _first_argument(f: Callable[..., Any], values: Sequence[Any], x: Any) -> Any:
    return f(x, *values)


def _size(tree: Any) -> int:
    return sum(int(np.prod(leaf.shape)) for leaf in jax.tree_util.tree_leaves(tree))


def _cast_like(tangent: Any, like: Any) -> Any:
    """A tangent (pytree) as JAX arrays with the dtypes of ``like``'s leaves."""
    return jax.tree_util.tree_map(lambda t, ref: jnp.asarray(t, dtype=ref.dtype), tangent, like)


def _stack(trees: Sequence[Any]) -> Any:
    return jax.tree_util.tree_map(lambda *leaves: jnp.stack(leaves), *trees)


def _unstack(stacked: Any, count: int) -> tuple[Any, ...]:
    return tuple(jax.tree_util.tree_map(lambda leaf, i=i: leaf[i], stacked) for i in range(count))


def _apply_vjp(vjp: Any, ty: Sequence[Any], like: Any) -> tuple[Any, ...]:
    ty = [_cast_like(t, like) for t in ty]
    if len(ty) == 1:
        return (vjp(ty[0])[0],)
    if not ty:
        return ()
    return _unstack(jax.vmap(vjp)(_stack(ty))[0], len(ty))


def _engine_tangents(tangents: Sequence[Any]) -> tuple[Any, ...]:
    """Tangents (pytrees) of any family, as jit accepts them (torch via DLPack);
    arrays jit takes as they are pass straight through (the common case)."""
    if all(family_of(t) in ("jax", "numpy") for t in tangents):
        return tangents if tangents.__class__ is tuple else tuple(tangents)
    to_jax = converter("torch", "jax")
    return tuple(
        jax.tree_util.tree_map(lambda leaf: to_jax(leaf) if family_of(leaf) == "torch" else leaf, t) for t in tangents
    )


def _wrap(
    function: Callable[..., Any],
    converters: Sequence[Callable[[Any], Any]],
    with_tangents: bool,
    x64: bool,
    bare_single: bool = False,
) -> Program:
    """``function`` taking caller-family inputs, in the x64 scope it needs, adding
    nothing on the hot path when neither conversion nor scope is needed.
    ``bare_single``: for one tangent, ``function`` returns its result as a bare
    array, which the program puts in the tuple it returns (a tuple out of a jitted
    call costs it more than one built in Python)."""
    plain = all(convert is identity for convert in converters)
    convert_x, convert_values = converters[0], converters[1:]
    program: Program
    if with_tangents and plain:
        # Classes of tangents jit takes as they are (JAX and numpy arrays, the common
        # case): one set lookup per tangent; anything else goes through _engine_tangents.
        taken: set[type] = {np.ndarray}

        def with_t_plain(x: Any, tangents: Sequence[Any], *values: Any) -> Any:
            for tangent in tangents:
                if tangent.__class__ not in taken:
                    if family_of(tangent) not in ("jax", "numpy"):
                        tangents = _engine_tangents(tangents)
                        break
                    taken.add(tangent.__class__)
            return function(x, tangents, *values)

        program = with_t_plain
        if bare_single:

            def with_one_t_plain(x: Any, tangents: Sequence[Any], *values: Any) -> Any:
                if len(tangents) == 1:
                    if tangents[0].__class__ in taken:  # the hot path
                        return (function(x, tangents, *values),)
                    return (with_t_plain(x, tangents, *values),)
                return with_t_plain(x, tangents, *values)

            program = with_one_t_plain
    elif with_tangents:

        def with_t(x: Any, tangents: Sequence[Any], *values: Any) -> Any:
            result = function(
                convert_x(x), _engine_tangents(tangents), *[convert(v) for convert, v in zip(convert_values, values)]
            )
            return (result,) if bare_single and len(tangents) == 1 else result

        program = with_t
    elif plain:
        program = function
    else:

        def converted(x: Any, *values: Any) -> Any:
            return function(convert_x(x), *[convert(v) for convert, v in zip(convert_values, values)])

        program = converted
    return _in_x64(program) if x64 else program


def _in_x64(program: Program) -> Program:
    """``program`` run inside ``jax.enable_x64(True)`` (conversions included: a
    float64 torch tensor only stays float64 in JAX there), entering no scope when
    the caller's already enables x64."""
    state = _X64

    def in_x64(*args: Any) -> Any:
        if state.value:
            return program(*args)
        with state(True):
            return program(*args)

    return in_x64


def _value_only(checked: Callable[..., Any]) -> Callable[..., Any]:
    """A checked ``f`` that returns ``(y, aux's arrays)`` as one returning ``y``."""

    def value(*args: Any) -> Any:
        return checked(*args)[0]

    return value


def _result(has_aux: bool, result: Any, *arrays: Any) -> Any:
    """A core function's return: ``result``, or ``(result, aux's arrays)``."""
    return (result, arrays[0]) if has_aux else result


def _is_traced_array(leaf: Any) -> bool:
    """Whether an ``aux`` leaf must travel through the engine (JAX arrays and
    tracers, numpy arrays); other leaves stay in Python."""
    return isinstance(leaf, jax.Array) or family_of(leaf) is not None


class _AuxTracing:
    """``has_aux`` on JAX: ``aux``'s arrays travel as outputs of the traced (and
    compiled) function, and the rest of ``aux`` (strings, numbers, ``None``, its
    structure) is recorded at trace time and joined back after each call.

    Under jit the non-array part can depend only on the static contexts (all else
    is a tracer), so it is kept per value of those; eager, it is per thread."""

    def __init__(self, statics: tuple[int, ...]) -> None:
        self._splits = AuxSplits()
        self._statics = statics

    def _key(self, values: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(values[i] for i in self._statics)

    def split(self, tree: Any, values: Sequence[Any]) -> tuple[Any, ...]:
        """``aux``'s arrays; the rest is recorded for :meth:`joining`."""
        arrays, split = split_aux(tree, _is_traced_array)
        self._splits.record(split, self._key(values))
        return arrays

    def joining(self, program: Program, lead: int, compiled: bool) -> Program:
        """``program`` returning ``(result, aux)`` where it returned ``(result, aux's arrays)``."""
        splits, key = self._splits, self._key
        if not compiled or not self._statics:
            latest = splits.last if not compiled else splits.for_static

            def joined_without_statics(*args: Any) -> Any:
                result, arrays = program(*args)
                return result, latest().join(arrays)

            return joined_without_statics

        def joined(*args: Any) -> Any:
            result, arrays = program(*args)
            return result, splits.for_static(key(args[lead:])).join(arrays)

        return joined


def _bare_single(plain_core: Callable[..., Any]) -> Callable[..., Any]:
    """A plain operator's function returning, for one tangent, its one result as a
    bare array rather than a tuple of one (decided at trace time)."""

    def bare(*args: Any) -> Any:
        results = plain_core(*args)
        return results[0] if len(results) == 1 else results

    return bare


def _split(program: Program, plain: str, full: str) -> Programs:
    """The plain operator is the last element of the ``value_and_*`` tuple."""

    def last(*args: Any) -> Any:
        return program(*args)[-1]

    return {plain: last, full: program}
