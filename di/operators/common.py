"""What every operator module shares: argument parsing and preparation steps."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from di.backends import fallbacks
from di.backends.aux import aux_converter, value_only
from di.backends.fallbacks import with_aux
from di.backends.protocol import OPERATOR_FAMILIES, Adapter
from di.backends.registry import get_adapter
from di.errors import InvalidInputError
from di.families import converter, family_of, get_family, identity
from di.prep.base import Prep, write_out
from di.prep.signature import check_contexts_wrapped, check_x
from di.pytrees import Raveler, is_pytree, tree_flatten, tree_leaves, tree_map, tree_unflatten

__all__ = ["adapter_for", "float_x_program", "prepare_operator", "run_operator", "split_call"]


def split_call(operator: str, args: tuple[Any, ...]) -> tuple[Prep | None, Any, Any, tuple[Any, ...]]:
    """Split ``(prep, backend, x, *contexts)`` or ``(backend, x, *contexts)``.

    Raises:
        InvalidInputError: too few arguments.
    """
    if args and isinstance(args[0], Prep):
        if len(args) < 3:
            raise InvalidInputError(f"{operator}(f, prep, backend, x, *contexts): backend and x are missing")
        return args[0], args[1], args[2], args[3:]
    if len(args) < 2:
        raise InvalidInputError(
            f"{operator}(f, backend, x, *contexts) or {operator}(f, prep, backend, x, *contexts): "
            f"backend and x are required"
        )
    return None, args[0], args[1], args[2:]


def adapter_for(operator: str, f: Any, backend: Any, x: Any, contexts: Sequence[Any]) -> Adapter:
    """Validate the arguments of ``prepare_<operator>`` and return the adapter.

    Raises:
        InvalidInputError: ``f`` not callable, ``x`` not differentiable, a raw
            value where a context is expected, ``backend`` not a selector.
        BackendNotInstalledError: the engine is missing.
        UnsupportedContextError: the engine cannot use one of the contexts.
    """
    if not callable(f):
        raise InvalidInputError(f"f must be callable, not {type(f).__name__}")
    adapter = get_adapter(backend)
    if is_pytree(x):
        if operator in ("derivative", "second_derivative"):
            raise InvalidInputError(f"{operator} needs a scalar x (a 0-d array or a float), not a pytree")
        if type(adapter).tree_map is Adapter.tree_map:
            Raveler(x)  # checks every leaf; JAX checks its own (JAX-registered) pytrees
    else:
        check_x(x, operator)
    check_contexts_wrapped(contexts)
    adapter.check_contexts(contexts)
    return adapter


def float_x_program(x: Any, program: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a program so a Python float ``x`` is computed as a 0-d float64 array."""
    if not isinstance(x, float):
        return program

    def from_float(x: Any, *values: Any) -> Any:
        return program(np.asarray(x, dtype=np.float64), *values)

    return from_float


# --- the generic operator machinery ---------------------------------------------------

_WITH_TANGENTS = {"pushforward": "tx", "pullback": "ty", "hvp": "tx"}


def check_tangents(tangents: Any, label: str, operator: str) -> tuple[Any, ...]:
    """Validate a tuple of tangents (``tx``) or cotangents (``ty``).

    Raises:
        InvalidInputError: not a tuple or list of arrays.
    """
    if not isinstance(tangents, (tuple, list)):
        raise InvalidInputError(
            f"{label} must be a tuple of arrays for {operator} (one {operator} per element), not "
            f"{type(tangents).__name__}; wrap a single one as ({label[1]},)."
        )
    for index, tangent in enumerate(tangents):
        if family_of(tangent) is None and not isinstance(tangent, float) and not is_pytree(tangent):
            raise InvalidInputError(f"{label}[{index}] must be an array or pytree, not {type(tangent).__name__}")
    return tuple(tangents)


def check_cotangent_shapes(
    adapter: Adapter, f: Callable[..., Any], x: Any, ty: Sequence[Any], contexts: Sequence[Any], has_aux: bool
) -> None:
    """Refuse, at preparation, cotangents that are not shaped like ``f``'s output
    (an engine would raise its own error or, like autograd, return a result of
    the wrong shape).

    Raises:
        InvalidInputError: naming the cotangent, its shape and the output's.
    """
    if has_aux:
        f = value_only(f, adapter.backend, "pullback")
    expected = adapter.output_shapes(f, x, contexts)
    if expected is None:
        return
    for index, cotangent in enumerate(ty):
        leaves: list[Any] = []
        adapter.tree_map(leaves.append, cotangent)
        given = [tuple(getattr(leaf, "shape", ())) for leaf in leaves]  # a Python float is 0-d
        if given != expected:
            shown, wanted = (given[0], expected[0]) if len(given) == len(expected) == 1 else (given, expected)
            raise InvalidInputError(
                f"ty[{index}] must have the shape of f(x), {wanted}, not {shown}: cotangents live in f's output "
                f"space (one cotangent per output element)."
            )


def _nested_converter(to_caller: Callable[[Any], Any]) -> Callable[[Any], Any]:
    if to_caller is identity:
        return identity

    def convert(result: Any) -> Any:
        if isinstance(result, tuple):
            return tuple(convert(item) for item in result)
        if family_of(result) is None and not isinstance(result, float):
            return tree_map(to_caller, result)  # a pytree output (JAX)
        return to_caller(result)

    return convert


def _restoring_bfloat16(adapter: Adapter, x: Any, to_caller: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """numpy engines compute bfloat16 inputs in float32 (numpy has no bfloat16):
    bring their float32 results back to ``x``'s bfloat16."""
    if adapter.family != "numpy" or not str(getattr(x, "dtype", "")).endswith("bfloat16"):
        return to_caller
    dtype = x.dtype
    convert = _nested_converter(lambda r: r if str(r.dtype) == str(dtype) else _cast(r, dtype))

    def restoring(result: Any) -> Any:
        return convert(to_caller(result))

    return restoring


def _cast(array: Any, dtype: Any) -> Any:
    family = family_of(array)
    if family is None:
        return array.astype(dtype)
    record = get_family(family)
    return record.astype(array, record.describe_dtype(dtype))


def _leaf_family(adapter: Adapter, x: Any) -> str:
    """The array family of a pytree's leaves, as the engine flattens it.

    Raises:
        InvalidInputError: leaves of several families.
    """
    families: set[str | None] = set()
    adapter.tree_map(lambda leaf: families.add(family_of(leaf)), x)
    families.discard(None)
    if len(families) > 1:
        raise InvalidInputError(
            f"the leaves of x mix array families ({', '.join(sorted(str(f) for f in families))}); "
            f"convert them to one family first."
        )
    return families.pop() or "numpy" if families else "numpy"


def _tree_converter(adapter: Adapter, family: str) -> Callable[[Any], Any]:
    """Results of a pytree-native engine, leaf by leaf into the caller's family."""
    leaf_converter = converter(adapter.family, family)
    if leaf_converter is identity:
        return identity

    def convert(result: Any) -> Any:
        return adapter.tree_map(leaf_converter, result)

    return convert


def _to_caller_family(
    program: Callable[..., Any], convert: Callable[[Any], Any], has_aux: bool = False
) -> Callable[..., Any]:
    if convert is identity:
        return program
    convert = with_aux(has_aux, convert)

    def converted(*args: Any) -> Any:
        return convert(program(*args))

    return converted


# Which results of each program are shaped like x: None for the result itself, an
# index into the result tuple, or (index, "each") for every element of a tuple there.
_SHAPED_LIKE_X: dict[str, tuple[Any, ...]] = {
    "gradient": (None,),
    "value_and_gradient": (1,),
    "pullback": ("each",),
    "value_and_pullback": ((1, "each"),),
    "hvp": ("each",),
    "gradient_and_hvp": (0, (1, "each")),
    "value_gradient_and_hessian": (1,),
}


def _in_x_order(
    programs: dict[str, Callable[..., Any]], x: Any, has_aux: bool = False
) -> dict[str, Callable[..., Any]]:
    """Give results shaped like a pytree ``x`` its exact structure (an engine such
    as JAX rebuilds dicts with sorted keys; the caller's key order is kept)."""
    spec = tree_flatten(x)[1]
    if spec.is_leaf():  # a node only the engine knows: keep the engine's structure
        return programs

    def restructure(tree: Any) -> Any:
        return tree_unflatten(spec, tree_leaves(tree))

    def fix(result: Any, where: Any) -> Any:
        if where is None:
            return restructure(result)
        if where == "each":
            return tuple(restructure(item) for item in result)
        if isinstance(where, tuple):
            index, _ = where
            return (*result[:index], tuple(restructure(item) for item in result[index]), *result[index + 1 :])
        return (*result[:where], restructure(result[where]), *result[where + 1 :])

    def wrap(name: str, program: Callable[..., Any]) -> Callable[..., Any]:
        places = _SHAPED_LIKE_X.get(name)
        if places is None:
            return program

        def in_order(result: Any) -> Any:
            for where in places:
                result = fix(result, where)
            return result

        finish = with_aux(has_aux, in_order)

        def ordered(*args: Any) -> Any:
            return finish(program(*args))

        return ordered

    return {name: wrap(name, program) for name, program in programs.items()}


def _raveled_programs(
    family: str,
    operator: str,
    adapter: Adapter,
    f: Callable[..., Any],
    x: Any,
    tangents: Any,
    contexts: Sequence[Any],
    has_aux: bool = False,
) -> dict[str, Callable[..., Any]]:
    """Programs for a pytree ``x`` on an engine that takes arrays only: ``x`` (and
    tangents shaped like it) are flattened into one vector, ``f`` sees the pytree
    again, and results shaped like ``x`` are unflattened leaf by leaf."""
    raveler = Raveler(x)
    cast_leaves = not adapter.evaluates_in_float64

    def flat_f(vector: Any, *values: Any) -> Any:
        return f(raveler.unravel(vector, cast=cast_leaves), *values)

    x_tangents = family in ("pushforward", "hvp")
    flat_tangents = tangents
    if tangents is not None and x_tangents:
        flat_tangents = tuple(raveler.ravel(t) for t in tangents)
    flat_x = raveler.ravel(x)
    engine = fallbacks.programs(adapter, operator, flat_f, flat_x, contexts, flat_tangents, has_aux=has_aux)
    to_caller = _nested_converter(converter(adapter.family, raveler.family))
    unravel = raveler.unravel

    def unravel_all(results: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(unravel(r) for r in results)

    def jacobian(jac: Any) -> Any:
        return raveler.unravel_leading(jac, tuple(jac.shape[:-1]))

    post: dict[str, Callable[[Any], Any]] = {
        "gradient": unravel,
        "value_and_gradient": lambda r: (r[0], unravel(r[1])),
        "jacobian": jacobian,
        "value_and_jacobian": lambda r: (r[0], jacobian(r[1])),
        "pushforward": lambda r: r,
        "value_and_pushforward": lambda r: r,
        "pullback": unravel_all,
        "value_and_pullback": lambda r: (r[0], unravel_all(r[1])),
        "hvp": unravel_all,
        "gradient_and_hvp": lambda r: (unravel(r[0]), unravel_all(r[1])),
        "hessian": raveler.unravel_hessian,
        "value_gradient_and_hessian": lambda r: (r[0], unravel(r[1]), raveler.unravel_hessian(r[2])),
    }

    def wrap(name: str) -> Callable[..., Any]:
        program, unravel_result = engine[name], post[name]
        finish = with_aux(has_aux, lambda result: unravel_result(to_caller(result)))
        if tangents is None:

            def run(x: Any, *values: Any) -> Any:
                return finish(program(raveler.ravel(x), *values))

            return run

        def run_with_tangents(x: Any, t: Any, *values: Any) -> Any:
            t = tuple(raveler.ravel(item) for item in t) if x_tangents else t
            return finish(program(raveler.ravel(x), t, *values))

        return run_with_tangents

    return {name: wrap(name) for name in OPERATOR_FAMILIES[family]}


def _aux_layout(
    family: str, programs: dict[str, Callable[..., Any]], engine_family: str, caller_family: str
) -> dict[str, Callable[..., Any]]:
    """Programs returning ``(result, aux)`` in JAX's layout: the plain operator
    returns ``(result, aux)``, the combined form ``((y, aux), result)``; the arrays
    of ``aux`` are brought into the caller's family, its other leaves untouched."""
    aux_to_caller = aux_converter(engine_family, caller_family)
    plain_name = OPERATOR_FAMILIES[family][0]

    def wrap(name: str, program: Callable[..., Any]) -> Callable[..., Any]:
        if name == plain_name:

            def plain(*args: Any) -> Any:
                result, aux = program(*args)
                return result, aux_to_caller(aux)

            return plain

        def combined(*args: Any) -> Any:
            (y, result), aux = program(*args)
            return (y, aux_to_caller(aux)), result

        return combined

    return {name: wrap(name, program) for name, program in programs.items()}


def prepare_operator(
    family: str,
    f: Callable[..., Any],
    backend: Any,
    x: Any,
    tangents: Any,
    contexts: Sequence[Any],
    strict: bool,
    *,
    same_point: bool = False,
    has_aux: bool = False,
) -> Prep:
    """Prepare every program of an operator family (the body of each ``prepare_<op>``)."""
    has_aux = bool(has_aux)
    label = _WITH_TANGENTS.get(family)
    adapter = adapter_for(family, f, backend, x, contexts)
    if label is not None:
        tangents = check_tangents(tangents, label, family)
        if label == "tx" and family_of(x) is not None:
            for index, tangent in enumerate(tangents):
                if tuple(getattr(tangent, "shape", ())) != tuple(x.shape):
                    raise InvalidInputError(
                        f"tx[{index}] must have the shape of x, {tuple(x.shape)}, not "
                        f"{tuple(getattr(tangent, 'shape', ()))}: tangents live in x's space."
                    )
    if family in ("derivative", "second_derivative") and tuple(getattr(x, "shape", ())) != ():
        raise InvalidInputError(
            f"{family} needs a scalar x (a 0-d array or a float), not shape {tuple(x.shape)}; "
            f"use jacobian (or hessian) for array inputs."
        )
    prepare_whole = getattr(adapter, "prepare_whole", None)
    if prepare_whole is not None:
        # A backend that chooses among other backends' whole preps (di.AutoFastest): its adapter's
        # prepare_whole(prepare_with, family, f, x, tangents, contexts, strict, same_point) returns
        # the complete Prep, preparing each candidate through prepare_with(candidate).
        def prepare_with(candidate: Any) -> Prep:
            return prepare_operator(
                family, f, candidate, x, tangents, contexts, strict, same_point=same_point, has_aux=has_aux
            )

        prep: Prep = prepare_whole(prepare_with, family, f, x, tangents, contexts, strict, same_point, has_aux=has_aux)
        return prep
    operator = f"{family}_same_point" if same_point else family

    x_given, x = x, (np.asarray(x, dtype=np.float64) if isinstance(x, float) else x)
    if label == "ty":
        check_cotangent_shapes(adapter, f, x, tangents, contexts, has_aux)
    sparse = None
    caller_family = _leaf_family(adapter, x) if is_pytree(x) else family_of(x) or "numpy"
    if is_pytree(x) and not (family in adapter.native_pytrees and adapter.takes_pytree(x)):
        programs = _raveled_programs(family, operator, adapter, f, x, tangents, contexts, has_aux)
    else:
        engine_programs = fallbacks.programs(adapter, operator, f, x, contexts, tangents, has_aux=has_aux)
        sparse = getattr(engine_programs, "sparse", None)  # di.AutoSparse: results already in the caller's family
        to_caller: Callable[[Any], Any]
        if sparse is not None:
            to_caller = identity
        elif is_pytree(x):
            to_caller = _tree_converter(adapter, caller_family)
        else:
            to_caller = _nested_converter(converter(adapter.family, caller_family))
        if sparse is None:
            to_caller = _restoring_bfloat16(adapter, x, to_caller)
        programs = {
            name: _to_caller_family(float_x_program(x_given, engine_programs[name]), to_caller, has_aux)
            for name in OPERATOR_FAMILIES[family]
        }
        if is_pytree(x):
            programs = _in_x_order(programs, x, has_aux)
    if has_aux:
        programs = _aux_layout(family, programs, adapter.family, caller_family)
    point_check = same_point_check(x_given, contexts) if same_point else None
    return Prep(
        family,
        f,
        backend,
        x_given,
        contexts,
        programs,
        strict,
        tangents,
        label or "tx",
        point_check,
        sparse_info=sparse,
        has_aux=has_aux,
    )


def same_point_check(x: Any, contexts: Sequence[Any]) -> Callable[[Any, Sequence[Any]], bool]:
    """A by-value check that a call is at the prepared point (``x`` and every
    ``Constant``), for same-point preps. Holds numpy copies of the point."""
    from di.contexts import Constant

    def snapshot(value: Any) -> Any:
        family = family_of(value)
        if family is None:
            return value
        return np.array(converter(family, "numpy")(value), copy=True)

    x_copy = snapshot(x)
    constants = [(i, snapshot(c.value)) for i, c in enumerate(contexts) if isinstance(c, Constant)]

    def equal(a: Any, b: Any) -> bool:
        if isinstance(b, np.ndarray):
            return family_of(a) is not None and np.array_equal(snapshot(a), b, equal_nan=True)
        return bool(a == b)

    def at_point(x: Any, given: Sequence[Any]) -> bool:
        return equal(x, x_copy) and all(equal(given[i].value, value) for i, value in constants)

    return at_point


def run_operator(
    family: str,
    name: str,
    f: Callable[..., Any],
    args: tuple[Any, ...],
    out: Any,
    prepare: Callable[..., Prep],
    has_aux: Any = False,
) -> Any:
    """Run program ``name`` of operator ``family`` for a prepared or unprepared call.

    ``out`` receives the operator's own result (the last element of a
    ``value_and_*`` tuple, the first of a plain operator's ``(result, aux)``)
    after it has been checked against it.
    """
    label = _WITH_TANGENTS.get(family)
    if out is None and len(args) >= 3:
        prep = args[0]
        if prep.__class__ is Prep and prep.operator == family and prep.same_point is None and prep.has_aux is has_aux:
            if label is None:
                return prep.runners[name](f, args[1], args[2], args[3:])
            if len(args) >= 4:
                return prep.runners[name](f, args[1], args[2], args[3], args[4:])
    prep, backend, x, rest = split_call(name, args)
    if label is not None:
        if not rest:
            raise InvalidInputError(f"{name}(f, [prep,] backend, x, {label}, *contexts): {label} is missing")
        tangents, contexts = rest[0], rest[1:]
    else:
        tangents, contexts = None, rest
    if prep is None:
        if getattr(backend, "prepared_only", ""):
            arguments = f"x, {label}, *contexts" if label else "x, *contexts"
            raise InvalidInputError(
                f"{backend!r} serves prepared calls only: {backend.prepared_only}. Prepare once with "
                f"prep = di.prepare_{family}(f, backend, {arguments}), then call di.{name}(f, prep, backend, "
                f"{arguments})."
            )
        aux_option = {"has_aux": True} if has_aux else {}
        prep = prepare(f, backend, x, *((tangents,) if label else ()), *contexts, strict=False, **aux_option)
    else:
        prep.check_operator(family)
        prep.check_has_aux(has_aux)
        if label is not None and not isinstance(tangents, (tuple, list)):
            check_tangents(tangents, label, family)  # raises: say to wrap it in a tuple
        if prep.strict:
            prep.check(f, backend, x, contexts)
            if label is not None:
                prep.check_tangents(tangents)
            if prep.same_point is not None:
                prep.check_same_point(x, contexts)
    if out is not None and family == "gradient":
        prep.check_out(out, name)  # shaped like x: refuse a bad buffer before computing
    program = prep.programs[name]
    values = [c.value for c in contexts]
    result = program(x, tangents, *values) if label is not None else program(x, *values)
    if out is None:
        return result
    if prep.has_aux and name == family:
        own, aux = result
        return _write_result(prep, out, name, own), aux
    return _write_result(prep, out, name, result)


def _write_result(prep: Prep, out: Any, name: str, result: Any) -> Any:
    """Check ``out`` against the operator's own result and copy it there."""
    if isinstance(result, tuple):
        prep.check_out(out, name, result[-1])
        return (*result[:-1], write_out(out, result[-1]))
    prep.check_out(out, name, result)
    return write_out(out, result)
