"""``prepare_<operator>``: argument checks, dispatch to a strategy or an engine,
and the prep.

Every ``prepare_*`` function is :func:`prepare_operator` with its row of the
operator table. A backend whose selector names a strategy (AutoSparse,
SecondOrder, AutoFastest) gets the request through its one hook,
:meth:`di.prep.strategy.Strategy.prepare`; any other backend's adapter provides
the programs (:class:`di.backends.source.ProgramSource`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from di.backends.aux import value_only
from di.backends.compile import compiling_combined_first
from di.backends.protocol import Adapter
from di.backends.registry import get_adapter, get_strategy
from di.backends.selectors import AbstractBackend, check_flag
from di.backends.source import ProgramSource
from di.complex import prepare_complex
from di.complex.strategy import native_at_complex_x
from di.complex.view import is_complex_value, refuse_complex
from di.errors import InvalidInputError
from di.families import family_of, get_family
from di.operators.programs import caller_programs
from di.operators.same_point import same_point_check
from di.operators.table import OPERATORS, Operator
from di.prep.arguments import check_tangent_dtypes, refuse_array_kinds, refuse_storage_leaves, refuse_x, wrapped_values
from di.prep.base import Prep
from di.prep.description import describe_value
from di.prep.facts import ArgumentFacts, Facts
from di.prep.info import NO_INFO, StrategyInfo
from di.prep.strategy import PrepareRequest, Strategy
from di.prep.traced import concrete
from di.pytrees import check_flattens, is_pytree, leaf_paths, tree_flatten, tree_map
from di.pytrees.ravel import Raveler, check_floating_leaves

__all__ = ["check_tangents", "prepare_operator", "prepare_request"]

Resolved = tuple[Strategy | None, Adapter | None]
"""What a selector resolves to: its strategy, or its adapter (the other ``None``)."""


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
    value: bool = False,
) -> Prep:
    """The body of every ``prepare_<operator>``: check the arguments, then prepare.

    Raises:
        InvalidInputError: ``f`` not callable, ``x`` not differentiable (or
            holding itself), a raw value where a context is expected, bad
            tangents, ``backend`` not a selector.
        InvalidOptionTypeError: ``strict``, ``has_aux`` or ``value`` not
            ``True`` or ``False``.
        BackendNotInstalledError: the engine is missing.
        UnsupportedContextError: the engine cannot use one of the contexts.
    """
    operator = OPERATORS[family]
    owner = f"prepare_{family}_same_point" if same_point else f"prepare_{family}"
    strict = check_flag(owner, "strict", strict)  # bool("no") is True: a string would quietly mean yes
    has_aux = check_flag(owner, "has_aux", has_aux)
    value = check_flag(owner, "value", value)
    if not callable(f):
        raise InvalidInputError(f"f must be callable, not {type(f).__name__}")
    resolved = _resolve(backend)  # a selector, and installed: said before anything about x
    check_flattens(x, "x")
    x_facts = Facts("x", x)  # what the preparation asks of x, and below of each context's value
    complex_x = _check_x(operator, x_facts)
    values = wrapped_values(contexts)
    if operator.tangents is not None:
        tangents = check_tangents(tangents, operator.tangents, family, complex_ok=complex_x)
        if operator.tangents == "tx":
            _check_tangent_shapes(tangents, x_facts)
    facts = ArgumentFacts(x_facts, values)
    request = PrepareRequest(family, f, x, tangents, tuple(contexts), strict, same_point, has_aux, value, facts)
    if complex_x:
        return _prepare_complex(backend, resolved, request)
    return _prepare(backend, resolved, request)


def _prepare_complex(backend: AbstractBackend, resolved: Resolved, request: PrepareRequest) -> Prep:
    """The prep of a request at a complex ``x``: its real view's (:mod:`di.complex`),
    prepared on the same backend, behind programs that take the complex ``x``;
    on an engine whose own programs of the operator give the convention
    (``Capabilities.complex_native``), those, at the complex ``x`` itself."""
    strategy, adapter = resolved
    if strategy is None and native_at_complex_x(request, adapter.capabilities):  # type: ignore[union-attr]
        return prepare_from_source(ProgramSource(adapter), backend, request)  # type: ignore[arg-type]
    programs, info = prepare_complex(request, OPERATORS, lambda real: _prepare(backend, resolved, real))
    return _prep_of(request, backend, programs, info, request.facts)


def _prep_of(
    request: PrepareRequest,
    backend: AbstractBackend,
    programs: dict[str, Any],
    info: StrategyInfo,
    facts: ArgumentFacts | None,
    explain: Callable[..., str] | None = None,
    traces: tuple[AbstractBackend, tuple[str, ...]] | None = None,
) -> Prep:
    """The :class:`Prep` of ``request`` running ``programs``, answering to
    ``backend``: the one construction of an engine's prep and of a complex ``x``'s."""
    x, contexts = request.x, request.contexts
    return Prep(
        request.operator,
        request.f,
        backend,
        x,
        contexts,
        programs,
        request.strict,
        request.tangents,
        OPERATORS[request.operator].tangents or "tx",
        same_point_check(x, contexts) if request.same_point else None,
        info=info,
        has_aux=request.has_aux,
        explain_failure=explain,
        traces=traces,
        facts=facts,
    )


def prepare_request(backend: AbstractBackend, request: PrepareRequest) -> Prep:
    """Prepare a checked request: through the selector's strategy if it names
    one, else from its adapter's programs."""
    return _prepare(backend, _resolve(backend), request)


def _prepare(backend: AbstractBackend, resolved: Resolved, request: PrepareRequest) -> Prep:
    """:func:`prepare_request` with the selector's strategy or adapter found."""
    strategy, adapter = resolved
    if strategy is not None:
        return strategy.prepare(backend, request, _Preparer(request))
    return prepare_from_source(ProgramSource(adapter), backend, request)  # type: ignore[arg-type]


def prepare_from_source(
    source: ProgramSource, backend: AbstractBackend, request: PrepareRequest, info: StrategyInfo | None = None
) -> Prep:
    """The prep of ``request`` from ``source``'s programs, answering to ``backend``."""
    operator = OPERATORS[request.operator]
    x, contexts, tangents = request.x, request.contexts, request.tangents
    facts = _facts(request)
    source.check_contexts(contexts)
    refuse_complex(request.f, backend, source.adapter.capabilities)
    _check_engine_dtypes(source, backend, facts)
    if facts.x.pytree:  # every leaf checked, the first bad one named
        if source.checks_own_pytrees:
            _check_engine_leaves(x)
        else:
            Raveler(x)
    explain = None
    if operator.tangents == "ty":
        _check_cotangent_shapes(source, request)
        explain = _cotangent_explainer(source, request)
    with compiling_combined_first(request.value):
        programs = caller_programs(
            operator, source, request.operator_key, request.f, x, tangents, contexts, request.has_aux, facts
        )
    info = info or _chosen(programs, operator.names[0])
    return _prep_of(request, backend, programs, info, facts, explain, (source.adapter.backend, source.takes))


def _chosen(programs: dict[str, Any], plain: str) -> StrategyInfo:
    """The info of an engine prep: which program the engine chose for the call
    (:attr:`StrategyInfo.program`), where it has several for the operator."""
    spelling = getattr(programs.get(plain), "spelling", None)
    return NO_INFO if spelling is None else StrategyInfo(program=spelling)


def _facts(request: PrepareRequest) -> ArgumentFacts:
    """The facts of the request's ``x`` and context values: those its preparation
    found, unless the request was made otherwise (or changed since)."""
    facts = request.facts
    if (
        facts is None
        or facts.x.value is not request.x
        or len(facts.values) != len(request.contexts)
        or any(value.value is not context.value for value, context in zip(facts.values, request.contexts))
    ):
        return ArgumentFacts.of(request.x, request.contexts)
    return facts


class _Preparer:
    """The operator layer's preparation, offered to a strategy for one request."""

    def __init__(self, request: PrepareRequest) -> None:
        self.request = request

    def with_backend(self, backend: AbstractBackend) -> Prep:
        return prepare_request(backend, self.request)

    def with_source(self, source: ProgramSource, backend: AbstractBackend, info: StrategyInfo | None = None) -> Prep:
        return prepare_from_source(source, backend, self.request, info)

    def runner(self, prep: Prep, backend: AbstractBackend) -> Callable[[], Any]:
        request = self.request
        name = OPERATORS[request.operator].names[0]
        run, f, x, contexts = prep.runners[name], request.f, request.x, request.contexts
        values = [c.value for c in contexts]
        if prep.same_point is not None:  # same-point runners are the bare programs
            arguments = (x,) if request.tangents is None else (x, request.tangents)
            call = lambda: run(*arguments, *values)
        elif request.tangents is None:
            call = lambda: run(f, backend, x, contexts)
        else:
            tangents = request.tangents
            call = lambda: run(f, backend, x, tangents, contexts)
        if request.has_aux:  # timed with aux, which f computes anyway; compared on the result alone
            return lambda: call()[0]
        return call


def _resolve(backend: Any) -> Resolved:
    """``(strategy, None)`` for a selector that names a strategy, else ``(None,
    adapter)``: asked once per preparation, and first (the error for no selector,
    or for an engine that is not installed, comes before anything about ``x``).

    Raises:
        InvalidInputError: ``backend`` is not a backend selector.
        BackendNotInstalledError: the engine is not installed.
    """
    strategy = get_strategy(backend)
    return (None, get_adapter(backend)) if strategy is None else (strategy, None)


def _check_x(operator: Operator, facts: Facts) -> bool:
    """Refuse an ``x`` that ``operator`` cannot differentiate; answer whether it is
    a complex array or a pytree with complex leaves (differentiated through its
    real view, :mod:`di.complex`)."""
    x = facts.value
    refuse_array_kinds(facts)  # (a pytree's leaves too)
    if facts.pytree:
        if operator.scalar_x:
            raise InvalidInputError(f"{operator.family} needs a scalar x (a 0-d array or a float), not a pytree")
        refuse_storage_leaves(facts, operator.family)
        return any(family is not None and is_complex_value(leaf) for _, leaf, family in facts.leaves)
    complex_x = refuse_x(facts, operator.family, complex_ok=True)
    if operator.scalar_x and _shape_of(x) != ():
        raise InvalidInputError(
            f"{operator.family} needs a scalar x (a 0-d array or a float), not shape {tuple(x.shape)}; "
            f"use jacobian (or hessian) for array inputs."
        )
    return complex_x


def check_tangents(tangents: Any, label: str, operator: str, complex_ok: bool = False) -> tuple[Any, ...]:
    """Validate a tuple of tangents (``tx``) or cotangents (``ty``); complex ones
    only with ``complex_ok`` (those of a complex ``x``).

    Raises:
        InvalidInputError: not a tuple or list of arrays, one that holds itself,
            or an array of complex numbers or of no numbers (object, strings).
    """
    if not isinstance(tangents, (tuple, list)):
        raise InvalidInputError(
            f"{label} must be a tuple of arrays for {operator} (one {operator} per element), not "
            f"{type(tangents).__name__}; pass a single one as a tuple of one, (v,)."
        )
    # an engine's traced value (autograd's box, inside its grad of the caller) is
    # judged by the array inside it, as a prep's check judges it
    values = [concrete(tangent) for tangent in tangents]
    for index, tangent in enumerate(values):
        check_flattens(tangent, f"{label}[{index}]")
        if family_of(tangent) is None and not isinstance(tangent, float) and not is_pytree(tangent):
            raise InvalidInputError(f"{label}[{index}] must be an array or pytree, not {type(tangent).__name__}")
    check_tangent_dtypes(values, label, complex_ok)
    return tuple(tangents)


def _check_tangent_shapes(tangents: Sequence[Any], facts: Facts) -> None:
    """Refuse tangents not shaped like ``x``: of another shape than an array ``x``,
    of another structure than a pytree ``x`` or with a leaf of another shape than
    ``x``'s (an engine would raise its own error, a flattening one a prep's).

    Raises:
        InvalidInputError: naming ``tx[i]`` (and the leaf), what it is and what
            ``x`` is (``facts`` are ``x``'s).
    """
    x = facts.value
    if facts.pytree:
        _check_tangent_trees(tangents, x)
        return
    if facts.family is None:  # a Python float, or an engine's traced value: no shape to compare with
        return
    x_shape = tuple(x.shape)
    for index, tangent in enumerate(tangents):
        shape = _shape_of(tangent)
        if shape == x_shape:
            continue
        if family_of(tangent) is None and not isinstance(tangent, float):  # a list, a tuple, ...
            raise InvalidInputError(
                f"tx[{index}] must be an array shaped like x, {x_shape}, not {describe_value(tangent)}: "
                f"tangents live in x's space; convert it (np.asarray(...)) or pass an array of x's family."
            )
        raise InvalidInputError(
            f"tx[{index}] must have the shape of x, {x_shape}, not {shape}: tangents live in x's space."
        )


def _shape_of(value: Any) -> tuple[int, ...]:
    """The shape of an array, or ``()`` for a Python number (0-d)."""
    return tuple(getattr(value, "shape", ()))


def _shapes(tree: Any) -> Any:
    """``tree`` with each leaf replaced by its shape (:func:`_shape_of`)."""
    return tree_map(_shape_of, tree)


def _check_tangent_trees(tangents: Sequence[Any], x: Any) -> None:
    """:func:`_check_tangent_shapes` for a pytree ``x``: each tangent has ``x``'s
    structure, and each leaf the shape of ``x``'s leaf at the same path (leaf
    paths are spelled out only for the error)."""
    x_leaves, spec = tree_flatten(x)
    if spec.is_leaf():  # a pytree registered with one engine only: that engine reads it, and checks it
        return
    x_shapes = [_shape_of(leaf) for leaf in x_leaves]
    for index, tangent in enumerate(tangents):
        name = f"tx[{index}]"
        leaves, given = tree_flatten(tangent)
        if given != spec:
            raise InvalidInputError(
                f"{name} must have the structure of x, {_shapes(x)}, not {_unlike(tangent, x, name)}: tangents live "
                f"in x's space, one array per leaf of x, shaped like it."
            )
        shapes = [_shape_of(leaf) for leaf in leaves]
        if shapes != x_shapes:
            path, x_path, shape, x_shape = next(
                found
                for found in zip(leaf_paths(tangent, name), leaf_paths(x), shapes, x_shapes)
                if found[2] != found[3]
            )
            raise InvalidInputError(
                f"{path} must have the shape of {x_path}, {x_shape}, not {shape}: tangents live in x's space."
            )


def _unlike(tangent: Any, x: Any, name: str) -> str:
    """A tangent ``name`` of another structure than ``x``, described: its leaves'
    shapes, and the leaves of ``x`` it lacks and those it has that ``x`` has not."""
    if not is_pytree(tangent):
        return describe_value(tangent)
    wanted, paths = leaf_paths(x, name), leaf_paths(tangent, name)
    differences = [
        f"{what} {', '.join(these)}"
        for what, these in (
            ("it lacks", [path for path in wanted if path not in paths]),
            ("x has no", [path for path in paths if path not in wanted]),
        )
        if these
    ]
    return f"{_shapes(tangent)} ({'; '.join(differences)})" if differences else str(_shapes(tangent))


def _check_engine_leaves(x: Any) -> None:
    """Refuse a pytree ``x`` with an array leaf that is not real floating-point,
    for an engine that takes pytrees as they are (its own flattening then meets
    the other leaves: a node registered with it only, or a Python number it
    refuses itself).

    Raises:
        InvalidInputError: naming the first bad leaf by its path.
    """
    leaves, paths = tree_flatten(x)[0], leaf_paths(x)
    arrays = [(leaf, path) for leaf, path in zip(leaves, paths) if family_of(leaf) is not None]
    check_floating_leaves([leaf for leaf, _ in arrays], [path for _, path in arrays])


def _check_engine_dtypes(source: ProgramSource, backend: AbstractBackend, facts: ArgumentFacts) -> None:
    """Refuse, at preparation, arrays (``x``, context values) of a dtype the
    engine's family cannot hold (NumPy's extended precision on an engine that
    computes in another family), which would reach the engine as its own error.

    Raises:
        InvalidInputError: naming the backend, the argument, the dtype and the fix.
    """
    engine = get_family(source.adapter.capabilities.family)
    for argument in (facts.x, *facts.values):
        for _, leaf, family in argument.leaves:
            if family is None or family == engine.name or engine.takes_dtype(leaf.dtype):
                continue
            dtype, display = get_family(family).describe_dtype(leaf.dtype), engine.display or engine.name
            if argument is facts.x and facts.x.pytree and "complex" in dtype:
                continue  # a complex leaf of x: its real view (di/complex/tree.py) is what the engine takes
            name = argument.name
            array = name if " " not in name else "value"
            cast = "complex64" if "complex" in dtype else "float64"
            raise InvalidInputError(
                f"{backend!r} cannot take {name} of dtype {dtype}: its engine computes in {display} arrays, which "
                f"have no {dtype}. Cast it to {cast} ({array}.astype(np.{cast})), or use a backend whose engine "
                f"computes in {get_family(family).display} arrays."
            )


def _check_cotangent_shapes(source: ProgramSource, request: PrepareRequest) -> None:
    """Refuse, at preparation, cotangents that are not shaped like ``f``'s output
    (an engine would raise its own error or, like autograd, return a result of
    the wrong shape).

    Raises:
        InvalidInputError: naming the cotangent, its shape and the output's.
    """
    explain = _cotangent_explainer(source, request)
    message = explain(request.x, [c.value for c in request.contexts], request.tangents, False)
    if message:
        raise InvalidInputError(message)


def _cotangent_explainer(source: ProgramSource, request: PrepareRequest) -> Callable[..., str]:
    """``explain(x, values, ty, quiet=True)``: why cotangents ``ty`` do not fit
    ``f``'s output at ``x`` and these context values (``""`` when they fit, or
    when ``f``'s output is no array, or when ``f`` raises and ``quiet``: the error
    being explained is then the caller's). Made at preparation; a prep asks it
    only when its program failed (an int Constant that ``f`` slices with changes
    the output's shape from one call to the next). It holds ``f``, the source and
    the contexts' classes, none of the caller's arrays."""
    f = value_only(request.f, source.adapter.backend, "pullback") if request.has_aux else request.f
    wrappers = [type(c) for c in request.contexts]

    def explain(x: Any, values: Any, cotangents: Any, quiet: bool = True) -> str:
        x = np.asarray(x, dtype=np.float64) if isinstance(x, float) else x
        contexts = [wrap(v) for wrap, v in zip(wrappers, values)]
        try:
            expected = source.output_shapes(f, x, contexts)
        except Exception:
            if not quiet:
                raise
            return ""  # f's own error: the failed call's error is raised
        if expected is None:
            return ""
        for index, cotangent in enumerate(cotangents or ()):
            # the cotangent's structure with its leaves' shapes (a Python float is 0-d)
            shown = source.tree_map(_shape_of, cotangent)
            if shown != expected:
                wanted = expected
                if not quiet:
                    return (
                        f"ty[{index}] must have the shape of f(x), {wanted}, not {shown}: cotangents live in f's "
                        f"output space (one cotangent per output element)."
                    )
                return (
                    f"ty[{index}] must have the shape of f(x) at this call's arguments, {wanted}, not {shown}: "
                    f"cotangents live in f's output space, whose shape changed since preparation (the context "
                    f"values change it). Pass cotangents of shape {wanted}, or prepare again for these arguments."
                )
        return ""

    return explain
