"""The structure of a pytree, flattened and rebuilt by plain Python
(:class:`Structure`), which a prep's hot path uses on pytrees shaped like the
prepared ``x``: an engine's compiler tracing the call (``torch.compile``) follows
it as it follows ``f``, where ``optree``'s compiled functions would stop it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from di.pytrees import load_optree, tree_flatten

__all__ = ["Structure", "nesting_depth"]


class _Node:
    """One node of a :class:`Structure`: how to take its children out of a tree of
    this shape (in ``optree``'s order) and how to put them back. ``children``
    holds a node per child (``None`` for a leaf), filled in by :func:`_plan`."""

    __slots__ = ("children", "handler", "keys", "kind", "metadata", "order", "type")

    def __init__(self, tree: Any, metadata: Any) -> None:
        optree = load_optree()
        self.type = type(tree)
        self.metadata = metadata
        self.handler = None
        self.keys: tuple[Any, ...] = ()
        self.order: tuple[Any, ...] = ()
        self.children: list[_Node | None] = []
        if tree is None:
            self.kind = "none"
        elif self.type in (tuple, list):
            self.kind = self.type.__name__
        elif self.type is dict:
            self.kind = "dict"
            self.keys = tuple(metadata)  # optree's order (sorted keys where they sort)
            self.order = tuple(tree)  # the caller's order, which a rebuilt dict keeps
        elif optree.is_namedtuple_class(self.type):
            self.kind = "namedtuple"
        else:  # dataclasses, OrderedDict, deque, nodes registered with optree: their own functions
            self.kind = "custom"
            self.handler = optree.register_pytree_node.get(self.type, namespace="")


def _is_leaf(tree: Any) -> bool:
    """Whether ``optree`` takes ``tree`` as a leaf (``None`` is an empty node)."""
    return tree is not None and load_optree().register_pytree_node.get(type(tree), namespace="") is None


def _plan(tree: Any) -> _Node | None:
    """The node of ``tree`` (``None`` for a leaf, as ``optree`` decides it), built
    without recursion: a tree may nest as deep as ``optree`` flattens it."""
    if _is_leaf(tree):
        return None
    flatten_one_level = load_optree().tree_flatten_one_level
    level = flatten_one_level(tree)
    root = _Node(tree, level.metadata)
    pending = [(root, level.children)]
    while pending:
        node, children = pending.pop()
        for child in children:
            if _is_leaf(child):
                node.children.append(None)
                continue
            level = flatten_one_level(child)
            inner = _Node(child, level.metadata)
            node.children.append(inner)
            pending.append((inner, level.children))
    return root


def _depth(root: _Node | None) -> int:
    """How many nodes deep ``root`` nests (0 for a leaf)."""
    deepest, pending = 0, [(root, 1)] if root is not None else []
    while pending:
        node, depth = pending.pop()
        deepest = max(deepest, depth)
        pending.extend((child, depth + 1) for child in node.children if child is not None)
    return deepest


def nesting_depth(tree: Any) -> int:
    """How many containers deep ``tree`` nests, as ``optree`` reads it (0 for a leaf).

    Examples:
        >>> import numpy as np
        >>> from di.pytrees.structure import nesting_depth
        >>> nesting_depth(np.ones(2)), nesting_depth({"a": [np.ones(2)], "b": np.ones(1)})
        (0, 2)
    """
    return _depth(_plan(tree))


def _flatten(root: _Node | None, tree: Any, leaves: list[Any]) -> bool:
    """Append the leaves of ``tree`` (shaped like ``root``) to ``leaves``; ``False``
    when ``tree`` has another structure. A walk without recursion, depth first."""
    pending = [(root, tree)]
    take, put, leaf = pending.pop, pending.append, leaves.append
    while pending:
        node, tree = take()
        if node is None:
            leaf(tree)
            continue
        if type(tree) is not node.type:
            return False
        kind, children = node.kind, node.children
        if kind == "none":
            continue
        if kind == "dict":
            if len(tree) != len(children):
                return False
            try:
                items = [tree[key] for key in node.keys]
            except KeyError:
                return False
        elif kind != "custom":
            if len(tree) != len(children):
                return False
            items = tree
        else:
            found, metadata = node.handler.flatten_func(tree)[:2]  # type: ignore[union-attr]
            items = list(found)
            if len(items) != len(children) or metadata != node.metadata:
                return False
        for i in range(len(children) - 1, -1, -1):  # the first child is taken next
            put((children[i], items[i]))
    return True


def _unflatten(root: _Node | None, leaves: Any) -> Any:
    """The tree of ``root``'s shape with the next leaves of the iterator ``leaves``,
    built without recursion: each node once its children are."""
    if root is None:
        return next(leaves)
    pending: list[tuple[_Node, list[Any]]] = [(root, [])]
    while True:
        node, built = pending[-1]
        children = node.children
        index, count = len(built), len(children)
        while index < count and children[index] is None:  # leaves, taken in a row
            built.append(next(leaves))
            index += 1
        if index < count:
            pending.append((children[index], []))  # type: ignore[arg-type]
            continue
        pending.pop()
        tree = _rebuilt(node, built)
        if not pending:
            return tree
        pending[-1][1].append(tree)


def _rebuilt(node: _Node, children: list[Any]) -> Any:
    """The tree of ``node``'s kind around its rebuilt ``children``."""
    kind = node.kind
    if kind == "none":
        return None
    if kind == "tuple":
        return tuple(children)
    if kind == "list":
        return children
    if kind == "dict":
        by_key = dict(zip(node.keys, children))
        return {key: by_key[key] for key in node.order}
    if kind == "namedtuple":
        return node.type(*children)
    return node.handler.unflatten_func(node.metadata, children)  # type: ignore[union-attr]


class Structure:
    """The structure of a pytree, flattened and rebuilt by plain Python.

    Made once from a pytree (at preparation), it takes the leaves out of trees of
    the same structure, in ``optree``'s order, and builds such trees from leaves,
    as ``optree.tree_flatten`` and ``tree_unflatten`` do. Its code is Python an
    engine's compiler can trace (``torch.compile`` follows it; it stops at
    ``optree``'s compiled functions), which is what a prep's hot path needs.

    Trees of dicts, lists, tuples, namedtuples and ``None`` (parameters, nested
    or not) get two functions written for their shape at preparation, one Python
    frame each, with no walk over the structure at the call (the generic walk
    costs a call per node and per leaf); trees holding other registered nodes
    (dataclasses, ``OrderedDict``) are walked node by node.

    Attributes:
        leaves: ``leaves(tree)``, the leaves of ``tree`` in ``optree``'s order, or
            ``None`` when its structure is another.
        unflatten: ``unflatten(leaves)``, the tree of this structure with these
            leaves (a list or tuple of as many as it has); a dict keeps the
            prepared tree's key order.
        num_leaves: how many leaves the structure has.
        spec: ``optree``'s tree spec of it.

    Args:
        tree: a pytree of the structure.

    Examples:
        >>> import numpy as np
        >>> from di.pytrees.structure import Structure
        >>> structure = Structure({"b": np.zeros(2), "a": (np.ones(1), None)})
        >>> [leaf.shape for leaf in structure.leaves({"a": (np.ones(1), None), "b": np.zeros(2)})]
        [(1,), (2,)]
        >>> structure.unflatten([1, 2])
        {'b': 2, 'a': (1, None)}
        >>> structure.leaves([np.zeros(2)]) is None
        True
    """

    __slots__ = ("leaves", "num_leaves", "spec", "unflatten")

    leaves: Callable[[Any], list[Any] | None]
    unflatten: Callable[[Any], Any]

    def __init__(self, tree: Any) -> None:
        flat, self.spec = tree_flatten(tree)
        self.num_leaves = len(flat)
        root = _plan(tree)
        written = _written(root)
        if written is not None:
            self.leaves, self.unflatten = written
            return

        def leaves(given: Any) -> list[Any] | None:
            found: list[Any] = []
            return found if _flatten(root, given, found) else None

        def unflatten(given: Any) -> Any:
            return _unflatten(root, iter(given))

        self.leaves, self.unflatten = leaves, unflatten


_WRITTEN_MOST = 2048
"""The most nodes and leaves a tree may have for :func:`_written` to write its
functions (larger ones are walked: their source would take long to compile)."""

_WRITTEN_DEEPEST = 64
"""The deepest a tree may nest for :func:`_written` to write its functions (deeper
ones are walked: Python's parser refuses expressions nested about 200 deep)."""


def _written(root: _Node | None) -> tuple[Callable[[Any], list[Any] | None], Callable[[Any], Any]] | None:
    """``(leaves, unflatten)`` written as Python source for the shape of ``root``
    and compiled, when its nodes are dicts, lists, tuples, namedtuples and
    ``None``; else ``None``. Keys and types reach the code as constants ``K[i]``
    (a key may be any hashable), never as text."""
    constants: list[Any] = []
    checks: list[str] = []
    names = itertools.count()

    def constant(value: Any) -> str:
        constants.append(value)
        return f"K[{len(constants) - 1}]"

    def items(node: _Node) -> list[str]:
        # the accessor of each child of a node bound to a name, in optree's order
        if node.kind == "dict":
            return [f"[{constant(key)}]" for key in node.keys]
        return [f"[{i}]" for i in range(len(node.children))]

    def take(node: _Node | None, name: str) -> list[str] | None:
        # checks of the node named `name` appended to `checks`; its leaves' expressions
        if node is None:
            return [name]
        if node.kind == "none":
            checks.append(f"if {name} is not None: return None")
            return []
        if node.kind not in ("dict", "list", "tuple", "namedtuple"):
            return None
        checks.append(
            f"if {name}.__class__ is not {constant(node.type)} or len({name}) != {len(node.children)}: return None"
        )
        found: list[str] = []
        for child, accessor in zip(node.children, items(node)):
            if child is None:
                found.append(name + accessor)
                continue
            inner = f"t{next(names)}"
            checks.append(f"{inner} = {name}{accessor}")
            leaves = take(child, inner)
            if leaves is None:
                return None
            found += leaves
        return found

    counter = itertools.count()

    def build(node: _Node | None) -> str:
        # the expression of the node rebuilt from the list L of leaves
        if node is None:
            return f"L[{next(counter)}]"
        if node.kind == "none":
            return "None"
        parts = [build(child) for child in node.children]
        if node.kind == "dict":  # the caller's key order, each key with its leaf
            by_key = dict(zip(node.keys, parts))
            return "{" + ", ".join(f"{constant(key)}: {by_key[key]}" for key in node.order) + "}"
        if node.kind == "list":
            return "[" + ", ".join(parts) + "]"
        if node.kind == "tuple":
            return "(" + "".join(part + ", " for part in parts) + ")"
        return f"{constant(node.type)}(" + ", ".join(parts) + ")"  # a namedtuple

    if root is None or _depth(root) > _WRITTEN_DEEPEST:
        return None
    leaves = take(root, "t")
    if leaves is None or len(checks) + len(leaves) > _WRITTEN_MOST:
        return None
    body = "\n".join("            " + line for line in checks)
    source = (
        "def written(K):\n"  # the constants reach the code as a closure, which a compiler follows
        "    def leaves(t):\n"
        "        try:\n"
        f"{body}\n"
        f"            return [{', '.join(leaves)}]\n"
        "        except KeyError:\n"
        "            return None\n"
        "    def unflatten(L):\n"
        "        if L.__class__ is not list and L.__class__ is not tuple:\n"
        "            L = list(L)\n"
        f"        return {build(root)}\n"
        "    return leaves, unflatten\n"
    )
    namespace: dict[str, Any] = {}
    try:
        code = compile(source, "<di.pytrees.structure.Structure>", "exec")
    except (RecursionError, MemoryError, SyntaxError):  # nested deeper than Python's parser goes
        return None
    exec(code, namespace)  # our own source; keys and types are constants
    functions: tuple[Callable[[Any], Any], Callable[[Any], Any]] = namespace["written"](tuple(constants))
    for function in functions:
        function.__module__ = __name__
    return functions  # type: ignore[return-value]
