"""Results in the caller's order: an engine that rebuilds pytrees in an order of
its own (JAX sorts a dict's keys) has its results given the exact structure of
``x`` and of ``f``'s output wherever they hold them."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

from di.backends.aux import with_aux
from di.families import family_of
from di.operators.aux_layout import AS_BUILT, AuxLayout, joined_and_laid_out, split_flat_join
from di.operators.table import Operator
from di.prep.finish import finished, split_finish
from di.pytrees import is_pytree, tree_flatten, tree_unflatten

__all__ = ["OutputOrder", "in_caller_order"]

Programs = dict[str, Callable[..., Any]]


class OutputOrder:
    """``f``'s output structure (dict key order included), read from its first call
    by an engine that rebuilds outputs in an order of its own (JAX sorts dicts)."""

    def __init__(self) -> None:
        self.spec: Any = None

    def recording(self, f: Callable[..., Any], has_aux: bool) -> Callable[..., Any]:
        @functools.wraps(f)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            output = f(*args, **kwargs)
            if self.spec is None:
                y = output[0] if has_aux and isinstance(output, tuple) and len(output) == 2 else output
                try:
                    self.spec = tree_flatten(y)[1]
                except Exception:  # (f's output is then checked, and refused, by the engine)
                    pass
            return output

        return recorded


def in_caller_order(
    operator: Operator,
    programs: Programs,
    x: Any,
    has_aux: bool,
    output: OutputOrder | None,
    aux_layout: AuxLayout | None = None,
) -> Programs:
    """Give results the exact structure of ``x`` and of ``f``'s output wherever they
    hold them, at any depth (a Jacobian of a pytree output is ``f``'s structure
    holding ``x``'s, a Hessian ``x``'s holding ``x``'s): an engine such as JAX
    rebuilds dicts with sorted keys; the caller's key order is kept. ``f``'s
    order is known from ``output`` (engines that keep it need none). With
    ``aux_layout``, a program given a key order step has its ``aux`` laid out by
    that step too (one call, not two), and is marked ``laid_out``."""
    x_spec = tree_flatten(x)[1] if is_pytree(x) else None
    if x_spec is not None and x_spec.is_leaf():  # a node only the engine knows: the engine's structure
        return programs
    x_skeleton = 0 if x_spec is None else _skeleton(x_spec)
    x_in_order = x_spec is None or _sorted_layout(_layout(x_skeleton))  # as any engine returns it

    def skeleton(part: str, given: Any) -> Any:
        """A tree of the structure ``part`` of the result must have (``given``: that part)."""
        if part == "-":
            return 0
        if part == "X":
            return x_skeleton
        if part == "X*":
            return tuple(x_skeleton for _ in given)
        if part == "XX":
            return x_skeleton if x_spec is None else _skeleton(x_spec, x_skeleton)
        y_spec = None if output is None else output.spec
        if y_spec is None:  # f's order unknown: kept by the engine (YX: of an array output)
            return x_skeleton if part == "YX" else given
        if part == "Y":
            return _skeleton(y_spec)
        if part == "Y*":
            return tuple(_skeleton(y_spec) for _ in given)
        return _skeleton(y_spec, x_skeleton)  # YX

    def expected(layout: tuple[str, ...], result: Any) -> Any:
        if len(layout) == 1:
            return tree_flatten(skeleton(layout[0], result))[1]
        if not isinstance(result, tuple) or len(result) != len(layout):
            raise _OtherStructure
        return tree_flatten(tuple(skeleton(part, given) for part, given in zip(layout, result)))[1]

    def wrap(name: str, program: Callable[..., Any]) -> Callable[..., Any]:
        layout = operator.layout(name)
        follows_f = output is not None and any(part.startswith("Y") for part in layout)
        if not layout or getattr(program, "keeps_x_structure", False):
            return program
        if x_in_order and (not follows_f or _known_in_order(output)):
            return program
        specs: dict[Any, Any] = {}  # the expected structure, by tangent count
        rebuilders: dict[Any, Callable[[Any], Any] | None] = {}  # its rebuilder (_rebuilder), by tangent count

        def restructure(result: Any, convert_leaf: Callable[[Any], Any] | None = None) -> Any:
            count = None
            if layout[-1].endswith("*"):  # one tangent or more
                items = result if len(layout) == 1 else result[-1] if isinstance(result, tuple) else None
                count = len(items) if isinstance(items, tuple) else None
            spec = specs.get(count) if output is None or output.spec is not None else None
            if spec is None:
                spec = specs[count] = expected(layout, result)
                rebuilders[count] = _rebuilder(_skeleton(spec))
            rebuild = rebuilders.get(count) if convert_leaf is None else None
            if rebuild is not None:  # dicts, lists and tuples: rebuilt by key, no flattening
                try:
                    return rebuild(result)
                except (KeyError, IndexError, TypeError):
                    raise _OtherStructure from None
            leaves, result_spec = tree_flatten(result)
            if result_spec != spec:  # (equal specs may differ in dict key order, which is what is fixed)
                raise _OtherStructure
            if convert_leaf is not None:
                leaves = [convert_leaf(leaf) for leaf in leaves]
            return tree_unflatten(spec, leaves)

        inner, convert = split_finish(program)
        convert_leaf = getattr(convert, "convert_leaf", None)
        if convert_leaf is not None and not has_aux:
            # results converted leaf by leaf: converted and put in order in one pass

            def converted_in_order(result: Any) -> Any:
                try:
                    return restructure(result, convert_leaf)
                except _OtherStructure:  # a non-strict prep called with another x: converted as it is
                    return convert(result)  # type: ignore[misc]

            return finished(inner, converted_in_order)

        lay = None if aux_layout is None else aux_layout.steps.get(name)
        # a last step that joins aux from the engine's flat result (joins_flat): taken into
        # this step, which then builds the caller's result from the flat one at once
        flat = split_flat_join(program) if has_aux and lay is not None else None
        finish = with_aux(has_aux, restructure)
        # An engine that keeps the structures needs no rebuilding: the first result says
        # so, for every later one (the program's output structure follows its input's,
        # which the prep fixes).
        rebuild: list[bool | None] = [None]
        # Once the first result has fixed the rebuilder of a layout of one structure
        # (no tangent count, f's order known), later calls call it directly.
        direct: list[Callable[[Any], Any] | None] = [None]
        fixed_layout = output is None and not layout[-1].endswith("*")

        def ordered(result: Any) -> Any:  # (the runner calls it through its cell)
            fixed = in_order(result)
            return fixed if lay is None else lay(fixed)

        def in_order(result: Any) -> Any:
            fast = direct[0]
            if fast is not None:
                try:
                    return fast(result)
                except (KeyError, IndexError, TypeError, ValueError, _OtherStructure):  # (a non-strict prep, another x)
                    pass
            if rebuild[0] is False:
                return result
            try:
                fixed = finish(result)
            except _OtherStructure:  # a non-strict prep called with another x: as the engine returns it
                return result
            if rebuild[0] is None:
                rebuild[0] = _layout(fixed) != _layout(result)
                rebuilder = rebuilders.get(None)
                if rebuild[0] and fixed_layout and rebuilder is not None:
                    direct[0] = _with_aux_kept(rebuilder) if has_aux else rebuilder
                    skeleton = _skeleton(specs[None])
                    # from now on one generated function, this one its fallback (where the
                    # flat join's step calls this one, that step generates its own instead)
                    if flat is not None:
                        fast = None
                    elif lay is not None and aux_layout is not None:
                        fast = _generated_laid_out(skeleton, ordered, aux_layout, name in aux_layout.combined)
                    else:
                        fast = _generated_rebuilder((skeleton, 0) if has_aux else skeleton, ordered)
                    if fast is not None:
                        cell[0] = fast
            return fixed

        cell: list[Callable[[Any], Any]] = [ordered]
        if flat is not None:
            rest, join = flat

            def skeleton() -> Any:  # (known once the first result has fixed the rebuilder, or found none needed)
                if rebuild[0] is None:
                    return None
                if rebuild[0] is False:
                    return AS_BUILT
                return _skeleton(specs[None]) if direct[0] is not None and None in specs else False

            laid_out = joined_and_laid_out(join, ordered, aux_layout, name, skeleton)  # type: ignore[arg-type]
            ordered_program = finished(rest, laid_out)
        else:
            ordered.cell = cell  # type: ignore[attr-defined]
            ordered_program = finished(program, ordered)
        if lay is not None:
            ordered_program.laid_out = True  # type: ignore[attr-defined]
        return ordered_program

    return {name: wrap(name, program) for name, program in programs.items()}


def _with_aux_kept(rebuild: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``rebuild`` applied to a ``(result, aux)`` pair's result."""

    def rebuilt(output: Any) -> Any:
        result, aux = output
        return rebuild(result), aux

    return rebuilt


def _known_in_order(output: OutputOrder | None) -> bool:
    """Whether ``f``'s output is known, at preparation, to be as any engine returns it."""
    if output is None:
        return True
    spec = output.spec
    return spec is not None and _sorted_layout(_layout(_skeleton(spec)))


def _skeleton(spec: Any, leaf: Any = 0) -> Any:
    """The tree of structure ``spec`` with ``leaf`` in every place (``0``, or another
    skeleton: ``x``'s in each place of a Hessian)."""
    return tree_unflatten(spec, [leaf] * spec.num_leaves)


def _rebuilder(skeleton: Any) -> Callable[[Any], Any] | None:
    """A function giving a result of the structure of ``skeleton`` (a tree of dicts,
    lists and tuples, ``None`` and leaves) the skeleton's dict key order, node by
    node (a dict comprehension per dict: far cheaper than flattening the result and
    building it again); ``None`` when the skeleton holds another node, or nests
    deeper than a rebuilder should recurse. It raises ``KeyError``, ``IndexError``
    or ``TypeError`` (:class:`_OtherStructure` for a node of another kind or size)
    for a result of another structure.

    Examples:
        >>> from di.operators.order import _rebuilder
        >>> _rebuilder({"w": 0, "b": [0, 0]})({"b": [1, 2], "w": 3})
        {'w': 3, 'b': [1, 2]}
    """
    return _node_rebuilder(skeleton, 0)


def _node_rebuilder(skeleton: Any, depth: int) -> Callable[[Any], Any] | None:
    kind = skeleton.__class__
    if depth > 32:
        return None
    if kind is dict:
        parts = [(key, _node_rebuilder(child, depth + 1)) for key, child in skeleton.items()]
        if any(part is None for _, part in parts):
            return None
        size, keys = len(parts), [key for key, _ in parts]
        if all(part is _leaf for _, part in parts):  # (a dict of leaves: the common node)

            def rebuild_leaves(value: Any) -> Any:
                if value.__class__ is not dict or len(value) != size:
                    raise _OtherStructure
                return {key: value[key] for key in keys}

            return rebuild_leaves

        def rebuild_dict(value: Any) -> Any:
            if value.__class__ is not dict or len(value) != size:
                raise _OtherStructure
            return {key: part(value[key]) for key, part in parts}  # type: ignore[misc]

        return rebuild_dict
    if kind is list or kind is tuple:
        items = [_node_rebuilder(child, depth + 1) for child in skeleton]
        if any(item is None for item in items):
            return None
        length = len(items)

        def rebuild_sequence(value: Any) -> Any:
            if value.__class__ is not kind or len(value) != length:
                raise _OtherStructure
            return kind([child if item is _leaf else item(child) for item, child in zip(items, value)])  # type: ignore[misc]

        return rebuild_sequence
    if skeleton is None:
        return _none
    if kind is int:  # a leaf's place in a skeleton
        return _leaf
    return None


def _generated_rebuilder(skeleton: Any, fallback: Callable[[Any], Any]) -> Callable[[Any], Any] | None:
    """What :func:`_rebuilder` does for ``skeleton``, as one generated function
    (each node checked and rebuilt inline: one Python call where the rebuilder
    makes one per node and per comprehension); a result of another structure
    goes to ``fallback``. ``None`` for a skeleton :func:`_rebuilder` refuses.

    Examples:
        >>> from di.operators.order import _generated_rebuilder
        >>> rebuild = _generated_rebuilder((0, {"w": 0, "b": 0}), lambda value: "other")
        >>> rebuild((1, {"b": 2, "w": 3})), rebuild((1, {"b": 2}))
        ((1, {'w': 3, 'b': 2}), 'other')
    """
    if _rebuilder(skeleton) is None:
        return None
    checks: list[str] = []
    constants: dict[str, Any] = {}
    built = _node_source(skeleton, "value", checks, constants)
    source = "\n".join(
        [
            "def rebuilt(value):",
            "    try:",
            f"        if {' and '.join(checks) or 'True'}:",
            f"            return {built}",
            "    except (KeyError, IndexError, TypeError):",
            "        pass",
            "    return fallback(value)",
        ]
    )
    namespace: dict[str, Any] = {"fallback": fallback, **constants}
    # (named beside this module, as the runners are: a traceback shows where it was made)
    exec(compile(source, os.path.join(os.path.dirname(__file__), "<rebuilt>"), "exec"), namespace)
    return namespace["rebuilt"]  # type: ignore[no-any-return]


def _node_source(skeleton: Any, expression: str, checks: list[str], constants: dict[str, Any]) -> str:
    """The source rebuilding the node ``expression`` of a result as ``skeleton`` says
    (see :func:`_generated_rebuilder`), adding the tests of its nodes' kinds and
    sizes to ``checks`` (each node bound to a name ``n<i>``) and the keys that are
    no literal to ``constants``."""

    def key(value: Any) -> str:
        if value.__class__ in (str, int):
            return repr(value)
        name = f"k{len(constants)}"
        constants[name] = value
        return name

    def node(skeleton: Any, expression: str) -> str:
        kind = skeleton.__class__
        if kind is int:
            return expression
        if skeleton is None:
            checks.append(f"{expression} is None")
            return "None"
        name = f"n{len(checks)}"
        size = len(skeleton)
        checks.append(f"({name} := {expression}).__class__ is {kind.__name__} and len({name}) == {size}")
        if kind is dict:
            items = [(key(k), child) for k, child in skeleton.items()]
            return "{" + ", ".join(f"{k}: {node(child, f'{name}[{k}]')}" for k, child in items) + "}"
        parts = [node(child, f"{name}[{index}]") for index, child in enumerate(skeleton)]
        if kind is tuple:
            return "(" + "".join(f"{part}, " for part in parts) + ")"
        return "[" + ", ".join(parts) + "]"

    return node(skeleton, expression)


_AUX = "\x00"
"""Where ``aux`` goes in a laid-out result's source (a character no key's ``repr`` holds)."""


def _generated_laid_out(
    skeleton: Any, fallback: Callable[[Any], Any], aux_layout: AuxLayout, combined: bool
) -> Callable[[Any], Any] | None:
    """:func:`_generated_rebuilder` of a ``(result, aux)`` pair whose result has the
    structure of ``skeleton``, laying the pair out as :class:`AuxLayout` says in
    the same function: ``(result, aux)``, or ``((y, aux), result)`` for a combined
    form (``result`` a ``(y, result)`` pair), ``aux`` in the caller's family (a flat
    dict of ``own_classes`` tested inline, as ``to_caller`` would). A result of
    another structure goes to ``fallback``, which lays it out too. ``None`` for a
    skeleton :func:`_rebuilder` refuses, or a combined result that is no pair.

    Examples:
        >>> from di.operators.aux_layout import AuxLayout
        >>> from di.operators.order import _generated_laid_out
        >>> layout = AuxLayout({}, frozenset(), lambda aux: ("converted", aux), {int})
        >>> rebuild = _generated_laid_out((0, {"w": 0, "b": 0}), lambda value: "other", layout, True)
        >>> rebuild(((1, {"b": 2, "w": 3}), {"n": 4})), rebuild(((1, {"b": 2, "w": 3}), {"n": 4.0}))
        (((1, {'n': 4}), {'w': 3, 'b': 2}), ((1, ('converted', {'n': 4.0})), {'w': 3, 'b': 2}))
    """
    if _rebuilder(skeleton) is None or (combined and not (skeleton.__class__ is tuple and len(skeleton) == 2)):
        return None
    checks: list[str] = ["(n0 := value).__class__ is tuple and len(n0) == 2"]
    constants: dict[str, Any] = {"fallback": fallback, "to_caller": aux_layout.to_caller}
    if combined:
        checks.append("(n1 := n0[0]).__class__ is tuple and len(n1) == 2")
        y = _node_source(skeleton[0], "n1[0]", checks, constants)
        result = _node_source(skeleton[1], "n1[1]", checks, constants)
        laid = f"(({y}, {_AUX}), {result})"
    else:
        result = _node_source(skeleton, "n0[0]", checks, constants)
        laid = f"({result}, {_AUX})"
    body = ["        if " + " and ".join(checks) + ":", "            aux = n0[1]"]
    if aux_layout.own_classes is not None:
        constants["own_classes"] = aux_layout.own_classes
        body += [
            "            if aux.__class__ is dict:",
            "                for item in aux.values():",
            "                    if item.__class__ not in own_classes:",
            "                        break",
            "                else:",
            "                    return " + laid.replace(_AUX, "aux"),
        ]
    body.append("            return " + laid.replace(_AUX, "to_caller(aux)"))
    source = "\n".join(
        [
            "def laid_out(value):",
            "    try:",
            *body,
            "    except (KeyError, IndexError, TypeError):",
            "        pass",
            "    return fallback(value)",
        ]
    )
    namespace: dict[str, Any] = dict(constants)
    exec(compile(source, os.path.join(os.path.dirname(__file__), "<laid_out>"), "exec"), namespace)
    return namespace["laid_out"]  # type: ignore[no-any-return]


def _leaf(value: Any) -> Any:
    return value


def _none(value: Any) -> Any:
    if value is not None:
        raise _OtherStructure
    return value


class _Opaque:
    """The layout of a node :func:`_layout` does not read: unequal to everything."""

    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = None  # type: ignore[assignment]


class _OtherStructure(Exception):
    """A result whose structure is not the prepared ``x``'s (other keys, other
    leaves): it is not given the prepared key order, which would rename its keys."""


def _sorted_layout(layout: tuple[Any, ...]) -> bool:
    """Whether a :func:`_layout` has dict, list and tuple nodes only, each dict's keys
    in sorted order."""
    for node in layout:
        if node is None:
            continue
        if node.__class__ is not tuple:  # opaque
            return False
        kind, keys = node
        if kind is dict:
            try:
                if list(keys) != sorted(keys):
                    return False
            except TypeError:  # keys that do not compare
                return False
    return True


def _layout(tree: Any) -> tuple[Any, ...]:
    """The container types and dict key orders of a result, leaves left out, node by
    node in depth-first order (a walk without recursion, so that trees nest as deep
    as the engines take them; a node of another kind is opaque: the result is then
    always rebuilt)."""
    layout: list[Any] = []
    pending = [tree]
    while pending:
        node = pending.pop()
        kind = node.__class__
        if kind is dict:
            layout.append((dict, tuple(node)))
            pending.extend(reversed(node.values()))
        elif kind is list or kind is tuple:
            layout.append((kind, len(node)))
            pending.extend(reversed(node))
        elif node is None or family_of(node) is not None or isinstance(node, (float, int)):
            layout.append(None)
        else:
            layout.append(_Opaque())
    return tuple(layout)
