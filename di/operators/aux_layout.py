"""How ``(result, aux)`` is laid out for the caller (:class:`AuxLayout`), and the
one finishing step that does it where an engine returns its result's leaves flat.

A compiled JAX program with ``has_aux`` returns the leaves of ``(result, aux's
arrays)`` as one tuple, then the trace's ``aux`` record
(:meth:`di.engines.jax.programs.AuxTracing.carrying`); its last finishing step
(marked ``joins_flat``) joins ``aux`` from them. The key order step
(:mod:`di.operators.order`), or ``aux``'s layout step, takes that step into its
own here, and after the first result one generated function builds the
caller's result from the flat tuple at once: no structure is built in between.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, NamedTuple

from di.prep.finish import finish_steps, with_steps

__all__ = ["AS_BUILT", "AuxLayout", "joined_and_laid_out", "split_flat_join"]


class AuxLayout(NamedTuple):
    """How the programs of a prep with ``has_aux`` lay their ``(result, aux)`` out
    for the caller (:func:`di.operators.programs`' ``_aux_layout``), for a key order
    step to do it in the same call: ``steps``, each program's layout step by name;
    ``combined``, the names whose result is ``((y, aux), result)`` (the others'
    ``(result, aux)``); ``to_caller``, ``aux`` brought into the caller's family;
    ``own_classes``, the classes of a flat dict's values that ``to_caller`` gives back
    as they are (``None``: it always converts)."""

    steps: dict[str, Callable[[Any], Any]]
    combined: frozenset[str]
    to_caller: Callable[[Any], Any]
    own_classes: set[type] | None


_AUX = "\x00"
"""Where ``aux`` goes in a generated result's source (a character no key's ``repr`` holds)."""


class _OtherFlatStructure(Exception):
    """A flat result whose structure is not the one the generated step was made for."""


AS_BUILT = object()
"""A skeleton meaning: the result's structure as the engine builds it (no key order to give)."""


def joined_and_laid_out(
    join: Callable[[Any], Any],
    then: Callable[[Any], Any],
    aux_layout: AuxLayout,
    name: str,
    skeleton: Callable[[], Any] = lambda: AS_BUILT,
) -> Callable[[Any], Any]:
    """One finishing step doing what ``join`` (an engine's step joining ``aux`` from
    its flat result: :func:`split_flat_join`) and then ``then`` (the layout of ``aux``, and
    the key order where there is one) do, called by the runner through its cell:
    after the first result, a function generated for the flat result of that trace
    (:func:`_generated_flat`) takes the cell's place, this one its fallback.
    ``skeleton`` gives the result's structure in the caller's order once ``then``
    has fixed it (``None`` while it has not, ``False`` for one no function is
    generated for), by default the engine's own."""
    tried: list[bool] = [False]

    def joined_laid_out(result: Any) -> Any:
        fixed = then(join(result))
        if not tried[0]:
            wanted = skeleton()
            if wanted is not None:
                tried[0] = True
                fast = None
                if wanted is not False:
                    combined = name in aux_layout.combined
                    fast = _generated_flat(wanted, result, join, joined_laid_out, aux_layout, combined)
                if fast is not None:
                    cell[0] = fast
        return fixed

    cell: list[Callable[[Any], Any]] = [joined_laid_out]
    joined_laid_out.cell = cell  # type: ignore[attr-defined]
    return joined_laid_out


def split_flat_join(
    program: Callable[..., Any],
) -> tuple[Callable[..., Any], Callable[[Any], Any]] | None:
    """``program`` without its last finishing step, and that step, when it joins
    ``aux`` from an engine's flat result (marked ``joins_flat``); else ``None``."""
    inner, steps = finish_steps(program)
    last = steps[-1] if steps else None
    if not callable(last) or not getattr(last, "joins_flat", False):  # (a cell is no such step)
        return None
    return with_steps(inner, steps[:-1]), last


def _generated_flat(
    skeleton: Any,
    flat: Any,
    join: Callable[[Any], Any],
    fallback: Callable[[Any], Any],
    aux_layout: AuxLayout,
    combined: bool,
) -> Callable[[Any], Any] | None:
    """What ``join`` followed by ``di.operators.order``'s generated layout step do, as one generated
    function of an engine's flat result ``flat``: a tuple of the leaves of
    ``(result, aux's arrays)``, then a dict whose one key is the record of the trace
    whose program ran (:meth:`di.engines.jax.programs.AuxTracing.carrying`). For a
    result of that trace (its record, by identity), each leaf is put where the
    caller's structure wants it (``skeleton``: the result's, in the caller's key
    order; :data:`AS_BUILT`: as the engine builds it) and ``aux`` built as
    ``join`` builds it, with no structure built in between; any other result
    goes to ``fallback``. ``None`` where ``join`` puts anything but the flat
    leaves in ``aux`` (constants, strings), or a node of another kind than dict,
    list, tuple and ``None``.

    Examples:
        >>> from di.operators.aux_layout import AuxLayout, _generated_flat
        >>> record = object()
        >>> def join(flat):
        ...     return ((flat[0], {"b": flat[1], "w": flat[2]}), {"n": flat[3]})
        >>> layout = AuxLayout({}, frozenset(), lambda aux: ("converted", aux), {int})
        >>> rebuild = _generated_flat((0, {"w": 0, "b": 0}), (1, 2, 3, 4, {record: ()}), join, len, layout, True)
        >>> rebuild((1, 2, 3, 4, {record: ()})), rebuild((1, 2, 3, 4.0, {record: ()})), rebuild((1, {}))
        (((1, {'n': 4}), {'w': 3, 'b': 2}), ((1, ('converted', {'n': 4.0})), {'w': 3, 'b': 2}), 2)
    """
    try:
        marks = flat[-1]
        [record] = marks
        size = len(flat) - 1
        indexed = join((*range(size), marks))  # (result, aux) with each leaf's index in flat
        output, aux = indexed
        if skeleton is AS_BUILT:
            skeleton = output
        if combined:
            (y_index, result_index) = output
            y = _flat_source(skeleton[0], y_index)
            result = _flat_source(skeleton[1], result_index)
        else:
            result = _flat_source(skeleton, output)
        aux_source = _flat_source(aux, aux)
    except (TypeError, ValueError, KeyError, IndexError, _OtherFlatStructure):
        return None
    laid = f"(({y}, {_AUX}), {result})" if combined else f"({result}, {_AUX})"
    body = [f"if value.__class__ is tuple and len(value) == {size + 1}:", f"    [mark] = value[{size}]"]
    body.append("    if mark is record:")
    own_classes = aux_layout.own_classes
    if own_classes is not None and aux.__class__ is dict and all(i.__class__ is int for i in aux.values()):
        # (a flat dict of the caller's arrays, the usual aux, as the layout step tests it)
        tests = " and ".join(f"value[{index}].__class__ in own_classes" for index in aux.values()) or "True"
        body += [f"        if {tests}:", "            return " + laid.replace(_AUX, aux_source)]
    body.append("        return " + laid.replace(_AUX, f"to_caller({aux_source})"))
    source = "\n".join(
        [
            "def laid_out(value):",
            "    try:",
            *[f"        {line}" for line in body],
            "    except (TypeError, ValueError):",
            "        pass",
            "    return fallback(value)",
        ]
    )
    namespace: dict[str, Any] = {
        "record": record,
        "fallback": fallback,
        "to_caller": aux_layout.to_caller,
        "own_classes": own_classes,
    }
    exec(compile(source, os.path.join(os.path.dirname(__file__), "<laid_out>"), "exec"), namespace)
    return namespace["laid_out"]  # type: ignore[no-any-return]


def _flat_source(skeleton: Any, indexed: Any) -> str:
    """The source building the node of ``skeleton`` from a flat result ``value``,
    ``indexed`` being that node as the engine builds it with each leaf's index in
    ``value`` (dicts read by key: ``skeleton`` fixes the key order). Raises
    :class:`_OtherFlatStructure` where the two differ, or for another kind of node."""
    kind = skeleton.__class__
    if kind is int:
        if indexed.__class__ is not int:
            raise _OtherFlatStructure
        return f"value[{indexed}]"
    if skeleton is None:
        if indexed is not None:
            raise _OtherFlatStructure
        return "None"
    if indexed.__class__ is not kind or len(indexed) != len(skeleton):
        raise _OtherFlatStructure
    if kind is dict:
        if any(key.__class__ not in (str, int) for key in skeleton):
            raise _OtherFlatStructure  # (a key with no literal: the general path)
        return "{" + ", ".join(f"{key!r}: {_flat_source(child, indexed[key])}" for key, child in skeleton.items()) + "}"
    if kind is tuple or kind is list:
        parts = [_flat_source(child, part) for child, part in zip(skeleton, indexed)]
        return ("(" + "".join(f"{part}, " for part in parts) + ")") if kind is tuple else "[" + ", ".join(parts) + "]"
    raise _OtherFlatStructure
