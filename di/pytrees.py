"""Pytrees: nested tuples, lists, dicts, namedtuples and registered dataclasses with
array leaves, handled with ``optree``.

Backends whose engine takes pytrees receive them as they are. For the others
:class:`Raveler` flattens a pytree into one vector, so every operator works on
every backend, and unflattens results back into the structure of ``x``, leaf by
leaf in each leaf's own dtype.

On a prep's hot path, pytrees shaped like the prepared ``x`` are flattened and
rebuilt by a :class:`Structure`: plain Python made once from ``x`` at
preparation, which an engine's compiler tracing the call (``torch.compile``)
follows as it follows ``f``, where ``optree``'s compiled functions would stop it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from di.errors import InvalidInputError, PreparationMismatchError
from di.families import families, family_of, get_family, is_floating_dtype

__all__ = [
    "Raveler",
    "Structure",
    "check_flattens",
    "check_floating_leaves",
    "is_pytree",
    "leaf_paths",
    "nesting_depth",
    "register_traced_leaves",
    "tree_flatten",
    "tree_leaves",
    "tree_map",
    "traced_by",
    "tree_unflatten",
]


def _optree() -> Any:
    # Imported on first use of a pytree, so that ``import di`` stays light.
    import optree

    return optree


def tree_flatten(tree: Any) -> tuple[list[Any], Any]:
    """Leaves and structure of a pytree (``None`` is an empty subtree)."""
    return _optree().tree_flatten(tree)  # type: ignore[no-any-return]


def tree_unflatten(spec: Any, leaves: Any) -> Any:
    """The pytree of structure ``spec`` with these leaves."""
    return _optree().tree_unflatten(spec, leaves)


def tree_leaves(tree: Any) -> list[Any]:
    """The leaves of a pytree, in ``tree_flatten``'s order."""
    return _optree().tree_leaves(tree)  # type: ignore[no-any-return]


def tree_map(function: Callable[..., Any], tree: Any, *rest: Any) -> Any:
    """Apply ``function`` to every leaf (and the matching leaves of ``rest``)."""
    return _optree().tree_map(function, tree, *rest)


def check_flattens(value: Any, name: str) -> None:
    """Refuse an argument ``optree`` cannot flatten: a container that holds itself
    (directly or deeper), or one nested deeper than ``optree`` goes.

    Args:
        value: the argument (``x``, a context's value, a tangent).
        name: how the error names it (``"x"``, ``"context 1"``, ``"tx[0]"``).

    Raises:
        InvalidInputError: naming ``name``, with ``optree``'s ``RecursionError``
            as its cause.

    Examples:
        >>> import numpy as np
        >>> from di.pytrees import check_flattens
        >>> check_flattens({"w": np.ones(2)}, "x")
        >>> cycle = [np.ones(2)]
        >>> cycle.append(cycle)
        >>> check_flattens(cycle, "x")
        Traceback (most recent call last):
        ...
        di.errors.InvalidInputError: x cannot be flattened as a pytree: ...
    """
    try:
        tree_leaves(value)
    except RecursionError as err:
        raise InvalidInputError(
            f"{name} cannot be flattened as a pytree: it holds itself (a list, tuple or dict inside itself, "
            f"directly or deeper), or nests deeper than optree goes. Pass it without the cycle."
        ) from err


def is_pytree(value: Any) -> bool:
    """Whether ``value`` is a container of arrays (not an array, not a scalar).

    Examples:
        >>> import numpy as np
        >>> from di.pytrees import is_pytree
        >>> is_pytree({"w": np.ones(2)}), is_pytree(np.ones(2)), is_pytree(1.0)
        (True, False, False)
    """
    if family_of(value) is not None or isinstance(value, (float, int, complex, str, bytes)) or value is None:
        return False
    leaves, spec = tree_flatten(value)
    if spec.is_leaf():
        return foreign_pytree(value) is not None
    return any(family_of(leaf) is not None for leaf in leaves)


def traced_by(value: Any) -> str:
    """The engine transform tracing ``value`` or one of its leaves (``"jax.vmap"``,
    ``"torch.func.grad"``), as the leaf's array family says; ``""`` when every
    leaf is a concrete array (or no array).

    Examples:
        >>> import numpy as np
        >>> from di.pytrees import traced_by
        >>> traced_by({"w": np.ones(2)})
        ''
    """
    family = family_of(value)
    if family is not None:
        return get_family(family).traced_by(value)
    if not is_pytree(value):
        return ""
    for leaf in tree_leaves(value):
        family = family_of(leaf)
        transform = get_family(family).traced_by(leaf) if family is not None else ""
        if transform:
            return transform
    return ""


def foreign_pytree(value: Any) -> str | None:
    """The display name of the array family whose library registers ``value`` as a
    container of arrays that ``optree`` does not know (a dataclass registered
    with ``jax.tree_util`` only), or ``None``; such pytrees work with that
    library's engine only."""
    for family in families():
        leaves = family.foreign_leaves(value)
        if leaves is not None and any(family_of(leaf) is not None for leaf in leaves):
            return family.display
    return None


def leaf_paths(tree: Any, root: str = "x") -> list[str]:
    """Python expressions naming each leaf, such as ``x['weights'][1]``."""
    return [accessor.codify(root) for accessor in _optree().tree_accessors(tree)]


class _Node:
    """One node of a :class:`Structure`: how to take its children out of a tree of
    this shape (in ``optree``'s order) and how to put them back. ``children``
    holds a node per child (``None`` for a leaf), filled in by :func:`_plan`."""

    __slots__ = ("children", "handler", "keys", "kind", "metadata", "order", "type")

    def __init__(self, tree: Any, metadata: Any) -> None:
        optree = _optree()
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
    return tree is not None and _optree().register_pytree_node.get(type(tree), namespace="") is None


def _plan(tree: Any) -> _Node | None:
    """The node of ``tree`` (``None`` for a leaf, as ``optree`` decides it), built
    without recursion: a tree may nest as deep as ``optree`` flattens it."""
    if _is_leaf(tree):
        return None
    flatten_one_level = _optree().tree_flatten_one_level
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
        >>> from di.pytrees import nesting_depth
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
        >>> from di.pytrees import Structure
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
        code = compile(source, "<di.pytrees.Structure>", "exec")
    except (RecursionError, MemoryError, SyntaxError):  # nested deeper than Python's parser goes
        return None
    exec(code, namespace)  # our own source; keys and types are constants
    functions: tuple[Callable[[Any], Any], Callable[[Any], Any]] = namespace["written"](tuple(constants))
    for function in functions:
        function.__module__ = __name__
    return functions  # type: ignore[return-value]


def _result_dtype(dtypes: list[Any], family: str) -> Any:
    """The dtype the family promotes ``dtypes`` to (64-bit ones kept)."""
    record = get_family(family)
    with record.scope(dtypes):
        return record.namespace().result_type(*dtypes)


def check_floating_leaves(leaves: Sequence[Any], paths: Sequence[str]) -> None:
    """Refuse a pytree ``x`` with a leaf that is not a real floating-point array
    (an int, bool or complex array, a Python number): no backend differentiates
    it, and an engine that takes pytrees as they are would return its own kind of
    answer (JAX's ``float0`` cotangents, or a complex gradient in JAX's convention).

    Args:
        leaves: the leaves of ``x``.
        paths: their paths (:func:`leaf_paths`).

    Raises:
        InvalidInputError: naming the first bad leaf by its path.

    Examples:
        >>> import numpy as np
        >>> from di.pytrees import check_floating_leaves
        >>> try:
        ...     check_floating_leaves([np.ones(2), np.arange(2)], ["x['a']", "x['b']"])
        ... except Exception as err:
        ...     print(str(err).split(";")[0])
        every leaf of x must be a real floating-point array, but x['b'] is an array of dtype int64
    """
    for leaf, path in zip(leaves, paths):
        if family_of(leaf) is None or not is_floating_dtype(leaf.dtype):
            kind = type(leaf).__name__ if family_of(leaf) is None else f"an array of dtype {leaf.dtype}"
            remedy = "convert it (np.asarray(..., dtype=float)) or pass it as a di.Constant"
            if "complex" in str(getattr(leaf, "dtype", type(leaf).__name__)):
                remedy = "pass its real and imaginary parts as two real leaves, or pass it as a di.Constant"
            raise InvalidInputError(
                f"every leaf of x must be a real floating-point array, but {path} is {kind}; {remedy}."
            )


class Raveler:
    """Flattens pytrees shaped like ``x`` into one vector and back.

    Args:
        x: a pytree whose leaves are real floating arrays of one family.

    Raises:
        InvalidInputError: leaves of several families, or a leaf that is not a
            real floating array (named by its path).

    Examples:
        >>> import numpy as np
        >>> from di.pytrees import Raveler
        >>> raveler = Raveler({"a": np.ones(2), "b": np.zeros((1, 2))})
        >>> raveler.ravel({"a": np.ones(2), "b": np.zeros((1, 2))})
        array([1., 1., 0., 0.])
        >>> raveler.unravel(np.arange(4.0))["b"]
        array([[2., 3.]])
    """

    def __init__(self, x: Any) -> None:
        leaves, self.spec = tree_flatten(x)
        self.structure = Structure(x)
        paths = leaf_paths(x)
        families = {family_of(leaf) for leaf in leaves}
        foreign = foreign_pytree(x) if self.spec.is_leaf() else None
        if foreign is not None:
            raise InvalidInputError(
                f"x is a {type(x).__name__}, a pytree registered with {foreign} only: use a {foreign} backend, or "
                f"register "
                f"{type(x).__name__} with optree (optree.register_pytree_node or optree.dataclasses) so every "
                f"backend can take it."
            )
        check_floating_leaves(leaves, paths)
        if len(families) > 1:
            raise InvalidInputError(
                f"the leaves of x mix array families ({', '.join(sorted(str(f) for f in families))}); "
                f"convert them to one family first."
            )
        self.family: str = families.pop() or "numpy" if families else "numpy"
        self.shapes = [tuple(leaf.shape) for leaf in leaves]
        self.sizes = [math.prod(shape) for shape in self.shapes]
        self.dtypes = [leaf.dtype for leaf in leaves]
        self.size = sum(self.sizes)
        self.dtype = _result_dtype(self.dtypes, self.family) if leaves else np.dtype(np.float64)
        self.offsets = [sum(self.sizes[:i]) for i in range(len(self.sizes))]
        self.mixed = len({str(d) for d in self.dtypes}) > 1

    def ravel(self, tree: Any) -> Any:
        """One vector (the family of the leaves, their common dtype) from a pytree
        shaped like ``x``."""
        record = get_family(self.family)
        xp = record.namespace()
        leaves = self.structure.leaves(tree)
        if leaves is None:  # another structure: optree's leaves, which the caller's check refuses
            leaves = tree_leaves(tree)
        try:
            shapes = [tuple(leaf.shape) for leaf in leaves]
        except AttributeError:  # a Python number: a 0-d leaf (a tangent {"v": 1.0, ...})
            leaves = _numbers_as_arrays(leaves, xp, self.dtype)
            shapes = [tuple(getattr(leaf, "shape", (None,))) for leaf in leaves]
        if shapes != self.shapes:
            raise PreparationMismatchError(
                "this prep was made for a pytree x whose leaves have other shapes "
                f"({', '.join(str(s) for s in self.shapes)}); this backend computes on x flattened into one "
                "vector of the prepared layout, so a prep made with strict=False cannot take them either. "
                "Prepare again for the new x."
            )
        with record.scope([self.dtype]):  # 64-bit leaves stay 64-bit
            if len(leaves) == 1:  # one copy (the vector is the engine's, never the caller's memory)
                return xp.astype(xp.reshape(leaves[0], (-1,)), self.dtype, copy=True)
            flat = [xp.astype(xp.reshape(leaf, (-1,)), self.dtype, copy=False) for leaf in leaves]
            return xp.concat(flat) if flat else xp.zeros(0, dtype=self.dtype)

    def unravel(
        self, vector: Any, cast: bool = True, split: Callable[[Any, list[int]], list[Any] | None] | None = None
    ) -> Any:
        """The pytree shaped like ``x`` from one vector, in the vector's family (an
        engine's traced vector works too), each leaf in its own dtype unless
        ``cast`` is false (the vector's dtype then). ``split``: the engine's way to
        take a traced vector apart in one operation (see ``Adapter.split_vector``)."""
        leaves = []
        pieces = split(vector, self.offsets) if split is not None else None
        whole = len(self.sizes) == 1  # one leaf is the whole vector: no slice (a traced slice costs a pass)
        for index, (offset, size, shape, dtype) in enumerate(zip(self.offsets, self.sizes, self.shapes, self.dtypes)):
            if pieces is not None:
                piece = pieces[index]
            else:
                piece = vector if whole else vector[offset : offset + size]
            leaf = _reshape(piece, shape)
            if self.mixed and cast:
                leaf = _cast_like(leaf, dtype)
            leaves.append(leaf)
        return self.structure.unflatten(leaves)

    def unravel_leading(self, array: Any, lead: tuple[int, ...], dtype: Any = None) -> Any:
        """Split the last axis of ``array`` (shape ``lead + (size,)``) into a pytree
        shaped like ``x`` whose leaves have shape ``lead + leaf.shape``, each in its
        leaf's dtype, or all in ``dtype`` when given."""
        leaves = []
        for offset, size, shape, own in zip(self.offsets, self.sizes, self.shapes, self.dtypes):
            leaf = _reshape(array[..., offset : offset + size], (*lead, *shape))
            leaves.append(_cast_like(leaf, own if dtype is None else dtype) if self.mixed else leaf)
        return self.structure.unflatten(leaves)

    def unravel_hessian(self, matrix: Any) -> Any:
        """A ``(size, size)`` matrix as a pytree of pytrees: block ``[i][j]`` has
        shape ``leaf_i.shape + leaf_j.shape`` and leaf ``i``'s dtype (the dtype of
        the gradient's leaf ``i`` it differentiates), as a pytree-native engine
        returns it."""
        rows = []
        for offset, size, shape, dtype in zip(self.offsets, self.sizes, self.shapes, self.dtypes):
            block = _reshape(matrix[offset : offset + size], (*shape, self.size))
            rows.append(self.unravel_leading(block, shape, dtype))
        return self.structure.unflatten(rows)


def _numbers_as_arrays(leaves: list[Any], xp: Any, dtype: Any) -> list[Any]:
    """``leaves`` with each Python number (``int``, ``float``) as a 0-d array of the
    namespace ``xp``, on the device of the array leaves; other leaves as they are."""
    import array_api_compat  # (here only: import di stays light)

    arrays = [leaf for leaf in leaves if hasattr(leaf, "shape")]
    on = {"device": array_api_compat.device(arrays[0])} if arrays else {}
    return [
        xp.asarray(leaf, dtype=dtype, **on) if isinstance(leaf, (int, float)) and not hasattr(leaf, "shape") else leaf
        for leaf in leaves
    ]


def _reshape(array: Any, shape: tuple[int, ...]) -> Any:
    """``array`` (of any family, or a traced value) reshaped: by its own ``reshape``
    method, else its engine's (:func:`register_traced_leaves`), else its family's."""
    method = getattr(array, "reshape", None)
    if method is not None:
        return method(shape)
    family = family_of(array)
    reshape = _TRACED_RESHAPES.get(array.__class__) if family is None else None
    if reshape is not None:  # (NumPy's would box the traced value in an object array)
        return reshape(array, shape)
    return get_family(family or "numpy").namespace().reshape(array, shape)


def _cast_like(leaf: Any, dtype: Any) -> Any:
    """Cast an engine array (possibly traced) to the dtype named like ``dtype``,
    whatever family ``dtype`` comes from."""
    name = _dtype_name(dtype)
    if _dtype_name(leaf.dtype) == name:
        return leaf
    family = family_of(leaf)
    if family is None:  # a traced value: its engine's cast, else its own astype
        cast = _TRACED_CASTS.get(leaf.__class__)
        return leaf.astype(name) if cast is None else cast(leaf, name)
    return get_family(family).astype(leaf, name)


_TRACED_CASTS: dict[type, Callable[[Any, str], Any]] = {}
_TRACED_RESHAPES: dict[type, Callable[[Any, tuple[int, ...]], Any]] = {}


def register_traced_leaves(
    cls: type,
    cast: Callable[[Any, str], Any] | None = None,
    reshape: Callable[[Any, tuple[int, ...]], Any] | None = None,
) -> None:
    """How pytree leaves are rebuilt from an engine's traced values of ``cls``, of no
    family (boxes): ``cast(value, dtype_name)``, differentiable in every mode (their
    ``astype`` may not be), and ``reshape(value, shape)``, for values without the
    method. The registry registers them from the engine's record (``traced``)."""
    if cast is not None:
        _TRACED_CASTS[cls] = cast
    if reshape is not None:
        _TRACED_RESHAPES[cls] = reshape


def _dtype_name(dtype: Any) -> str:
    return str(getattr(dtype, "name", dtype)).rsplit(".", 1)[-1]
