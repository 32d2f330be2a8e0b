"""From a source's programs to a prep's: the caller's array family, pytrees, aux.

A source's programs take caller-family inputs and return arrays of the engine's
family. The programs a prep holds return what the caller gets: arrays of the
caller's family, dtype and device; pytrees shaped (and ordered) like ``x``;
``aux`` in JAX's layout. Everything here is decided at preparation, so the
wrappers add a function call or two per prepared call and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from di.backends.aux import aux_converter, with_aux
from di.backends.source import ProgramSource
from di.contexts import Context
from di.errors import InvalidInputError
from di.families import converter, family_of, get_family, identity
from di.operators.aux_layout import AuxLayout, joined_and_laid_out, split_flat_join
from di.operators.order import OutputOrder, in_caller_order
from di.operators.table import Operator
from di.prep.facts import ArgumentFacts, Facts
from di.prep.finish import finished
from di.prep.own_checks import checks_arguments
from di.prep.traces import refuse_foreign_traces
from di.pytrees import tree_map
from di.pytrees.ravel import Raveler

__all__ = ["caller_family", "caller_programs"]

Programs = dict[str, Callable[..., Any]]


def caller_family(source: ProgramSource, x: Any, facts: Facts | None = None) -> str:
    """The array family results go back in: ``x``'s, or its leaves' (as the engine
    flattens the pytree); ``facts``, when given, are ``x``'s.

    Raises:
        InvalidInputError: leaves of several families.
    """
    if facts is None:
        facts = Facts("x", x)
    if not facts.pytree:
        return facts.family or "numpy"
    families: set[str | None] = set()
    source.tree_map(lambda leaf: families.add(family_of(leaf)), x)
    families.discard(None)
    if len(families) > 1:
        raise InvalidInputError(
            f"the leaves of x mix array families ({', '.join(sorted(str(f) for f in families))}); "
            f"convert them to one family first."
        )
    return families.pop() or "numpy" if families else "numpy"


def caller_programs(
    operator: Operator,
    source: ProgramSource,
    key: str,
    f: Callable[..., Any],
    x: Any,
    tangents: tuple[Any, ...] | None,
    contexts: Sequence[Context],
    has_aux: bool,
    facts: ArgumentFacts,
) -> Programs:
    """The programs of a prep of ``operator`` (``key`` is the operator family, or
    its same-point form) from ``source``: results in the caller's family, shaped
    like ``x``, ``aux`` in JAX's layout. ``facts`` are those of ``x`` and the
    contexts' values."""
    label = operator.tangents or "tx"
    tangent_facts = [Facts(f"{label}[{i}]", t) for i, t in enumerate(tangents or ())]
    arguments = [facts.x, *tangent_facts, *facts.values]
    _refuse_foreign_traces(source, arguments)
    source.adapter.check_inputs(operator.family, x)
    _refuse_trees_the_engine_cannot_flatten(source, arguments)
    family = caller_family(source, x, facts.x)
    pytree = facts.x.pytree
    if pytree and not source.takes_pytree(operator.family, x):
        programs = _raveled(operator, source, key, f, x, tangents, contexts, has_aux)
    else:
        output = None
        if source.checks_own_pytrees and any(
            part.startswith("Y") for name in operator.names for part in operator.layout(name)
        ):
            output = OutputOrder()  # an engine with a pytree registry of its own may sort f's dicts
            f = output.recording(f, has_aux)
        engine = source.programs(key, f, _as_array(x), contexts, tangents, has_aux=has_aux)
        to_caller: Callable[[Any], Any] = identity
        if source.converts_results:
            if pytree:
                to_caller = _tree_converter(source, family)
            else:
                placed = _placed(converter(source.family, family), x, facts.x.family)
                to_caller = _restoring_bfloat16(source, x, _nested(placed))
        programs = {name: _converted(_from_float(x, engine[name]), to_caller, has_aux) for name in operator.names}
        if to_caller is not identity and not pytree and not has_aux and operator.family in _ARRAY_RESULTS:
            # the plain operator's result is one array like x (or its square): converted at once
            plain = operator.names[0]
            placed = _placed(converter(source.family, family), x, facts.x.family)
            array_to_caller = _restoring_bfloat16(source, x, placed)
            programs[plain] = _converted(_from_float(x, engine[plain]), array_to_caller, False)
        layout = _aux_layout_of(operator, source.family, family) if has_aux else None
        if pytree or output is not None:
            programs = in_caller_order(operator, programs, x, has_aux, output, layout)
        if layout is not None:
            programs = _aux_layout(programs, layout)
        for name in operator.names:  # the runner then leaves x's check to the program
            if checks_arguments(engine[name]):
                programs[name].checks_arguments = True  # type: ignore[attr-defined]
            spelling = getattr(engine[name], "spelling", None)
            if spelling is not None:  # what the engine chose for this call (the prep's info says it)
                programs[name].spelling = spelling  # type: ignore[attr-defined]
        return programs
    if has_aux:
        programs = _aux_layout(programs, _aux_layout_of(operator, source.family, family))
    return programs


def _refuse_foreign_traces(source: ProgramSource, arguments: Sequence[Facts]) -> None:
    """Refuse, at preparation, values traced by another engine's transform
    (:func:`di.prep.traces.refuse_foreign_traces`, which a prep asks again when a call
    fails); an array its family says is concrete needs no asking."""
    backend = source.adapter.backend
    named = [
        (argument.name, argument.value)
        for argument in arguments
        if argument.family is None or get_family(argument.family).traced_by(argument.value)
    ]
    if named:
        refuse_foreign_traces(backend, source.takes, named)


def _refuse_trees_the_engine_cannot_flatten(source: ProgramSource, arguments: Sequence[Facts]) -> None:
    """Refuse, at preparation, a pytree argument that an engine flattening pytrees
    with a registry of its own cannot flatten (one that sorts a dict's keys, given
    keys that do not sort, such as ``1`` and ``"a"``); other engines take any
    pytree ``di`` flattens.

    Raises:
        InvalidInputError: naming the backend and the argument, the engine's error
            as its cause.
    """
    if not source.checks_own_pytrees:
        return
    for argument in arguments:
        if not argument.pytree:
            continue
        name, value = argument.name, argument.value
        try:
            source.tree_map(identity, value)
        except (ValueError, TypeError) as err:
            raise InvalidInputError(
                f"{source.adapter.backend!r} cannot flatten {name} as a pytree ({err}). Its engine sorts a "
                f"dict's keys, and keys that do not sort (1 and 'a') are the usual cause: use keys of one type "
                f"(all strings, say), or a backend whose engine takes pytrees as di flattens them."
            ) from err


_ARRAY_RESULTS = frozenset({"gradient", "hessian"})
"""Operator families whose plain result, for an array ``x``, is one array."""


def _as_array(x: Any) -> Any:
    """A Python float ``x`` is prepared as a 0-d float64 array."""
    return np.asarray(x, dtype=np.float64) if isinstance(x, float) else x


def _from_float(x: Any, program: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a program so a Python float ``x`` is computed as a 0-d float64 array."""
    if not isinstance(x, float):
        return program

    def from_float(x: Any, *values: Any) -> Any:
        if isinstance(x, float):  # (an engine's traced scalar passes as it is)
            x = np.asarray(x, dtype=np.float64)
        return program(x, *values)

    return from_float


def _nested(to_caller: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``to_caller`` applied to every array of a result (tuples and pytrees)."""
    if to_caller is identity:
        return identity
    arrays: set[type] = set()  # classes met as arrays: the next one is converted at once

    def convert(result: Any) -> Any:
        if result.__class__ in arrays:
            return to_caller(result)
        if isinstance(result, tuple):
            return tuple(convert(item) for item in result)
        if family_of(result) is None:
            if isinstance(result, float):
                return to_caller(result)
            return tree_map(to_caller, result)  # a pytree output
        arrays.add(result.__class__)
        return to_caller(result)

    return convert


def _placed(to_caller: Callable[[Any], Any], x: Any, family: str | None) -> Callable[[Any], Any]:
    """``to_caller`` (a conversion from an engine of another family), followed by
    the placement of the caller's family: results go where the array ``x`` lives
    (its device, its sharding), not where the conversion puts them. Unchanged
    where the family needs none (one place, or ``x`` there already), and for a
    pytree ``x`` (its leaves may live in several places: results keep the
    conversion's). ``family`` is ``x``'s."""
    if to_caller is identity or family is None:
        return to_caller
    place = get_family(family).placement(x)
    if place is None:
        return to_caller

    def placed(result: Any) -> Any:
        return place(to_caller(result))

    return placed


def _restoring_bfloat16(source: ProgramSource, x: Any, to_caller: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """NumPy engines compute bfloat16 inputs in float32 (NumPy has no bfloat16):
    bring their float32 results back to ``x``'s bfloat16."""
    if source.family != "numpy" or not str(getattr(x, "dtype", "")).endswith("bfloat16"):
        return to_caller
    dtype = x.dtype
    convert = _nested(lambda r: r if str(r.dtype) == str(dtype) else _cast(r, dtype))

    def restoring(result: Any) -> Any:
        return convert(to_caller(result))

    return restoring


def _cast(array: Any, dtype: Any) -> Any:
    family = family_of(array)
    if family is None:
        return array.astype(dtype)
    record = get_family(family)
    return record.astype(array, record.describe_dtype(dtype))


def _tree_converter(source: ProgramSource, family: str) -> Callable[[Any], Any]:
    """Results of a pytree-native engine, leaf by leaf into the caller's family."""
    leaf_converter = converter(source.family, family)
    if leaf_converter is identity:
        return identity

    def convert(result: Any) -> Any:
        return source.tree_map(leaf_converter, result)

    convert.convert_leaf = leaf_converter  # type: ignore[attr-defined]
    return convert


def _converted(program: Callable[..., Any], convert: Callable[[Any], Any], has_aux: bool) -> Callable[..., Any]:
    if convert is identity:
        return program
    return finished(program, with_aux(has_aux, convert))


def _raveled(
    operator: Operator,
    source: ProgramSource,
    key: str,
    f: Callable[..., Any],
    x: Any,
    tangents: tuple[Any, ...] | None,
    contexts: Sequence[Context],
    has_aux: bool,
) -> Programs:
    """Programs for a pytree ``x`` on an engine that takes arrays only: ``x`` (and
    tangents shaped like it) are flattened into one vector, ``f`` sees the pytree
    again, and results shaped like ``x`` are unflattened leaf by leaf."""
    raveler = Raveler(x)
    cast_leaves = not source.adapter.capabilities.float64

    split = source.adapter.split_vector if len(raveler.sizes) > 1 else None

    def flat_f(vector: Any, *values: Any) -> Any:
        return f(raveler.unravel(vector, cast=cast_leaves, split=split), *values)

    x_tangents = operator.tangents == "tx"
    flat_tangents = tuple(raveler.ravel(t) for t in tangents) if tangents is not None and x_tangents else tangents
    engine = source.programs(key, flat_f, raveler.ravel(x), contexts, flat_tangents, has_aux=has_aux)
    to_caller = _nested(converter(source.family, raveler.family)) if source.converts_results else identity
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

    return {name: wrap(name) for name in operator.names}


def _aux_layout(programs: Programs, layout: AuxLayout) -> Programs:
    """Programs returning ``(result, aux)`` in JAX's layout (:func:`_aux_layout_of`),
    where their key order step does not lay it out already (``laid_out``)."""

    def wrap(name: str, program: Callable[..., Any]) -> Callable[..., Any]:
        if getattr(program, "laid_out", False):
            return program
        flat = split_flat_join(program)
        if flat is not None:  # aux joined and laid out in one step
            rest, join = flat
            return finished(rest, joined_and_laid_out(join, layout.steps[name], layout, name))
        return finished(program, layout.steps[name])

    return {name: wrap(name, program) for name, program in programs.items()}


def _aux_layout_of(operator: Operator, engine_family: str, family: str) -> AuxLayout:
    """JAX's layout of ``aux``: the plain operator returns ``(result, aux)``, the
    combined form ``((y, aux), result)``; the arrays of ``aux`` are brought into the
    caller's family, its other leaves untouched. Each program's step, by name."""
    aux_to_caller = aux_converter(engine_family, family)
    plain_name = operator.names[0]
    own_classes: set[type] | None = getattr(aux_to_caller, "own_classes", None)

    # (finishing steps of the program's result, which a prep's runner calls in its own frame)
    if own_classes is None:

        def plain(output: Any) -> Any:
            result, aux = output
            return result, aux_to_caller(aux)

        def combined(output: Any) -> Any:
            (y, result), aux = output
            return (y, aux_to_caller(aux)), result

    else:
        # aux in the caller's family already when its engine's is (the usual aux, a flat
        # dict of the engine's arrays): recognised inline, as aux_to_caller would, a call fewer

        def plain(output: Any) -> Any:
            result, aux = output
            if aux.__class__ is dict:
                for item in aux.values():
                    if item.__class__ not in own_classes:
                        break
                else:
                    return output
            return result, aux_to_caller(aux)

        def combined(output: Any) -> Any:
            (y, result), aux = output
            if aux.__class__ is dict:
                for item in aux.values():
                    if item.__class__ not in own_classes:
                        break
                else:
                    return (y, aux), result
            return (y, aux_to_caller(aux)), result

    steps: dict[str, Callable[[Any], Any]] = {
        name: plain if name == plain_name else combined for name in operator.names
    }
    return AuxLayout(steps, frozenset(operator.names[1:]), aux_to_caller, own_classes)
