"""``test_differentiation``: check backends against scenarios' references.

Every combination of backend x scenario x preparation mode is one *case*. A case
calls the scenario's operator and its combined form (``gradient`` and
``value_and_gradient``, ``hvp`` and ``gradient_and_hvp``, ...), compares every
result with the analytic references, checks the results' array family, shape and
dtype against ``x``, and checks that ``x``, the ``Constant`` values and the
tangents were not mutated.

Preparation modes:

* ``"unprepared"``: ``di.gradient(f, backend, x, *contexts)``.
* ``"prepared"``: ``prep = di.prepare_gradient(f, backend, x0, *contexts0)`` on
  different values (default: zeros-like ``x`` and negated ``Constant`` values),
  then ``di.gradient(f, prep, backend, x, *contexts)`` on the real ones, so a prep
  that kept stale values is caught.
* ``"prepared-twice"``: the same, calling each prepared form twice.

A case is *skipped*, never passed, when the operator is not in this version of
``di``, when the backend declares the context or operator unsupported
(``UnsupportedContextError``, ``UnsupportedOperatorError``), when its engine is
missing, or when ``x`` is a pytree and this version of ``di`` does not take pytrees.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from di.backends.selectors import AbstractBackend, AutoAutograd, AutoFiniteDiff, AutoJAX, AutoTorch
from di.contexts import Cache, Constant, Context
from di.testing.scenarios import Scenario, copy_tree, default_scenarios, pytree_leaves, to_numpy

__all__ = [
    "PREP_MODES",
    "Case",
    "CaseResult",
    "DifferentiationReport",
    "backend_label",
    "default_tolerances",
    "iter_cases",
    "parse_backend",
    "pytrees_supported",
    "run_case",
    "test_differentiation",
]

PREP_MODES: tuple[str, ...] = ("unprepared", "prepared", "prepared-twice")

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
NOT_AVAILABLE = "not available in this di version"


# --- backend names ---------------------------------------------------------------------

_SHORT_NAMES: dict[type, str] = {
    AutoJAX: "jax",
    AutoTorch: "torch",
    AutoAutograd: "autograd",
    AutoFiniteDiff: "finitediff",
}
_ALIASES: dict[str, AbstractBackend] = {
    "jax-jit": AutoJAX(jit=True),
    "torch-compile": AutoTorch(compile=True),
    "finitediff-forward": AutoFiniteDiff(method="forward"),
}


def backend_label(backend: Any) -> str:
    """A short, readable name for a backend selector, used in tables and test ids.

    Default selectors get their engine's name (``"jax"``, ``"torch"``,
    ``"autograd"``, ``"finitediff"``); a few common variants have aliases
    (``"jax-jit"``, ``"torch-compile"``, ``"finitediff-forward"``); other options
    are spelled out (``"jax(mode='forward')"``). :func:`parse_backend` reads every
    label back.

    Args:
        backend: a backend selector (or anything, which gets its ``repr``).

    Returns:
        The label.

    Examples:
        >>> import di
        >>> from di.testing import backend_label
        >>> backend_label(di.AutoJAX(jit=True)), backend_label(di.AutoFiniteDiff())
        ('jax-jit', 'finitediff')
    """
    for alias, selector in _ALIASES.items():
        if backend == selector:
            return alias
    base = _SHORT_NAMES.get(type(backend))
    if base is None or not dataclasses.is_dataclass(backend):
        return repr(backend)
    changed = [
        f"{f.name}={getattr(backend, f.name)!r}"
        for f in dataclasses.fields(backend)
        if f.default is not dataclasses.MISSING and getattr(backend, f.name) != f.default
    ]
    return f"{base}({', '.join(changed)})" if changed else base


def parse_backend(text: str) -> AbstractBackend:
    """Build a selector from a label: ``"jax"``, ``"jax-jit"``, ``"torch(compile=True)"``.

    Args:
        text: a label as :func:`backend_label` writes it, or any name
            :func:`di.backend` knows, optionally followed by ``(option=value, ...)``
            with Python literals as values.

    Returns:
        The backend selector.

    Raises:
        ValueError: an unknown name or a malformed option list.

    Examples:
        >>> from di.testing import parse_backend
        >>> parse_backend("jax(jit=True)")
        AutoJAX(jit=True, mode=None)
    """
    import di

    text = text.strip()
    if text.lower() in _ALIASES:
        return _ALIASES[text.lower()]
    name, _, rest = text.partition("(")
    options: dict[str, Any] = {}
    if rest:
        if not rest.endswith(")"):
            raise ValueError(f"malformed backend {text!r}: expected name(option=value, ...)")
        try:
            call = ast.parse(f"f({rest[:-1]})", mode="eval").body
            assert isinstance(call, ast.Call) and not call.args
            options = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg is not None}
        except (SyntaxError, ValueError, AssertionError) as err:
            raise ValueError(f"malformed backend options in {text!r}: use name(option=value, ...)") from err
    try:
        return di.backend(name.strip(), **options)
    except TypeError as err:
        raise ValueError(f"bad option for backend {name!r}: {err}") from err


# --- tolerances ------------------------------------------------------------------------


def _finite_difference_methods(backend: Any) -> list[str]:
    """The finite-difference methods a backend (or a combination of backends) uses."""
    if isinstance(backend, AutoFiniteDiff):
        return [backend.method]
    methods: list[str] = []
    for attribute in ("outer", "inner"):
        inner = getattr(backend, attribute, None)
        if inner is not None and inner is not backend:
            methods += _finite_difference_methods(inner)
    return methods


def _dtype_name(dtype: Any) -> str:
    return str(dtype).replace("torch.", "")


def default_tolerances(backend: Any, dtype: Any, order: int = 1) -> tuple[float, float]:
    """The default ``(rtol, atol)`` for a backend, a dtype and a derivative order.

    Automatic differentiation is exact up to rounding: float64 gets ``rtol=1e-9``,
    float32 ``2e-4``, float16/bfloat16 ``1e-2``. Finite differences add their
    truncation and cancellation error, more for forward than central differences
    and more for second order; the looser of the two applies. A result passes
    when ``max|result - reference| <= atol + rtol * max|reference|``.

    Args:
        backend: the backend selector (finite differences are recognised inside
            combinations with ``outer``/``inner`` attributes too).
        dtype: the dtype of ``x`` (numpy, torch or jax, or its name).
        order: 1 for first-order operators, 2 for second-order ones.

    Returns:
        ``(rtol, atol)``.

    Examples:
        >>> import numpy as np, di
        >>> from di.testing import default_tolerances
        >>> default_tolerances(di.AutoJAX(), np.float64), default_tolerances(di.AutoFiniteDiff(), np.float64)
        ((1e-09, 1e-12), (1e-06, 1e-09))
    """
    name = _dtype_name(dtype)
    if "16" in name:
        rtol, atol = 1e-2, 1e-4
    elif "32" in name:
        rtol, atol = 2e-4, 1e-7
    else:
        rtol, atol = 1e-9, 1e-12
    for method in _finite_difference_methods(backend):
        if method == "forward":
            fd_rtol, fd_atol = (1e-5, 1e-8) if order == 1 else (1e-3, 1e-6)
        else:
            fd_rtol, fd_atol = (1e-6, 1e-9) if order == 1 else (1e-4, 1e-7)
        rtol, atol = max(rtol, fd_rtol), max(atol, fd_atol)
    return rtol, atol


# --- cases and results -------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One combination: a backend, a scenario and a preparation mode.

    Attributes:
        backend: the backend selector.
        scenario: the :class:`~di.testing.Scenario`.
        prep_mode: ``"unprepared"``, ``"prepared"`` or ``"prepared-twice"``.

    Examples:
        >>> import di
        >>> from di.testing import Case, default_scenarios
        >>> Case(di.AutoFiniteDiff(), default_scenarios()[0], "prepared").id
        'finitediff-derivative/sin_exp/f64-prepared'
    """

    backend: Any
    scenario: Scenario
    prep_mode: str

    @property
    def id(self) -> str:
        """``backend-scenario-mode``, usable as a pytest id."""
        return f"{backend_label(self.backend)}-{self.scenario.name}-{self.prep_mode}"


@dataclass
class CaseResult:
    """The outcome of one :class:`Case`.

    Attributes:
        backend: the backend's label (:func:`backend_label`).
        scenario: the scenario's name.
        operator: the operator's name.
        prep_mode: the preparation mode.
        status: ``"passed"``, ``"failed"`` or ``"skipped"``.
        message: why it failed or was skipped (empty when it passed).
        max_abs_error: the largest ``|result - reference|`` over every result
            compared (``nan`` when nothing was compared).
        max_rel_error: that divided by the largest ``|reference|`` (norm-wise).
        rtol: the relative tolerance used.
        atol: the absolute tolerance used.
        error: the exception raised, if any.
    """

    backend: str
    scenario: str
    operator: str
    prep_mode: str
    status: str
    message: str = ""
    max_abs_error: float = math.nan
    max_rel_error: float = math.nan
    rtol: float = math.nan
    atol: float = math.nan
    error: BaseException | None = field(default=None, repr=False)

    @property
    def passed(self) -> bool:
        """Whether the case passed."""
        return self.status == PASSED

    def line(self) -> str:
        """One line: ``backend | scenario | mode | message``."""
        return f"{self.backend} | {self.scenario} | {self.prep_mode} | {self.message}"

    def as_dict(self) -> dict[str, Any]:
        """The result as a JSON-friendly dict (the exception as its text)."""
        row = dataclasses.asdict(self)
        row["error"] = None if self.error is None else f"{type(self.error).__name__}: {self.error}"
        return row


@dataclass
class DifferentiationReport:
    """What :func:`test_differentiation` returns: every case's result.

    Attributes:
        results: one :class:`CaseResult` per case, in the order run.

    Examples:
        >>> import di
        >>> from di.testing import test_differentiation, default_scenarios
        >>> report = test_differentiation([di.AutoFiniteDiff()], default_scenarios(operators=["gradient"])[:2])
        >>> len(report.passed)
        6
    """

    __test__ = False  # not a pytest test class
    results: list[CaseResult] = field(default_factory=list)

    @property
    def passed(self) -> list[CaseResult]:
        """The cases that passed."""
        return [r for r in self.results if r.status == PASSED]

    @property
    def failed(self) -> list[CaseResult]:
        """The cases that failed."""
        return [r for r in self.results if r.status == FAILED]

    @property
    def skipped(self) -> list[CaseResult]:
        """The cases that were skipped (operator missing, unsupported by the backend, ...)."""
        return [r for r in self.results if r.status == SKIPPED]

    def summary(self) -> str:
        """``"N passed, M failed, K skipped"``."""
        return f"{len(self.passed)} passed, {len(self.failed)} failed, {len(self.skipped)} skipped"

    def __str__(self) -> str:
        return self.summary()


def iter_cases(
    backends: AbstractBackend | Iterable[AbstractBackend],
    scenarios: Iterable[Scenario] | None = None,
    prep_modes: Sequence[str] = PREP_MODES,
) -> Iterator[Case]:
    """Every combination, backend by backend, scenario by scenario, mode by mode.

    Args:
        backends: one selector or several.
        scenarios: the scenarios (default: :func:`~di.testing.default_scenarios`).
        prep_modes: a subset of :data:`PREP_MODES`.

    Yields:
        :class:`Case` objects.

    Raises:
        ValueError: an unknown preparation mode.

    Examples:
        >>> import di
        >>> from di.testing import iter_cases
        >>> len(list(iter_cases(di.AutoFiniteDiff()))) % 3
        0
    """
    for mode in prep_modes:
        if mode not in PREP_MODES:
            raise ValueError(f"unknown preparation mode {mode!r}; known: {', '.join(PREP_MODES)}")
    backend_list = [backends] if isinstance(backends, AbstractBackend) else list(backends)
    scenario_list = default_scenarios() if scenarios is None else list(scenarios)
    for backend in backend_list:
        for scenario in scenario_list:
            for mode in prep_modes:
                yield Case(backend, scenario, mode)


@functools.lru_cache(maxsize=1)
def pytrees_supported() -> bool:
    """Whether this version of ``di`` differentiates with respect to a pytree ``x``.

    Checked by trying: a finite-difference gradient with respect to a dict of one
    array. Scenarios tagged ``"pytree"`` are skipped while this is ``False``.

    Returns:
        ``True`` once ``di`` takes pytrees.
    """
    import di

    try:
        g = di.gradient(lambda x: (x["a"] * x["a"]).sum(), di.AutoFiniteDiff(), {"a": np.ones(2)})
    except di.DIError:
        return False
    return isinstance(g, dict) and "a" in g


# --- one case --------------------------------------------------------------------------


def _x_leaf(x: Any) -> Any:
    leaves = pytree_leaves(x)
    return leaves[0] if leaves else x


def _family(value: Any) -> str | None:
    from di.families import family_of

    return family_of(value)


def _expected_family_and_dtype(x: Any) -> tuple[str, str]:
    leaf = _x_leaf(x)
    if isinstance(leaf, float):
        return "numpy", "float64"
    return _family(leaf) or "numpy", _dtype_name(leaf.dtype)


def _compare(
    label: str, value: Any, reference: Any, rtol: float, atol: float, x: Any, check_types: bool, is_value: bool
) -> tuple[float, float, list[str]]:
    """Compare one result with its reference; return the errors and the problems.
    References that are not numbers or arrays (strings, ``None``, ints of an
    ``aux``) must be returned as they are."""
    problems: list[str] = []
    if reference is None or isinstance(reference, (str, bytes, int)):
        if type(value) is not type(reference) or value != reference:
            return math.nan, math.nan, [f"{label}: expected {reference!r}, got {value!r}"]
        return 0.0, 0.0, []
    if isinstance(reference, tuple):
        if not isinstance(value, (tuple, list)) or len(value) != len(reference):
            kind = type(value).__name__
            size = f" of length {len(value)}" if isinstance(value, (tuple, list)) else ""
            return math.nan, math.nan, [f"{label}: expected a tuple of {len(reference)}, got a {kind}{size}"]
        worst_abs, worst_rel = 0.0, 0.0
        for i, (item, ref) in enumerate(zip(value, reference)):
            a, r, p = _compare(f"{label}[{i}]", item, ref, rtol, atol, x, check_types, is_value)
            worst_abs, worst_rel = _max(worst_abs, a), _max(worst_rel, r)
            problems += p
        return worst_abs, worst_rel, problems
    if isinstance(reference, dict):
        if not isinstance(value, dict) or set(value) != set(reference):
            keys = sorted(value) if isinstance(value, dict) else type(value).__name__
            return math.nan, math.nan, [f"{label}: expected a dict with keys {sorted(reference)}, got {keys}"]
        worst_abs, worst_rel = 0.0, 0.0
        x_tree = x if isinstance(x, dict) else {}
        for key in sorted(reference):
            a, r, p = _compare(
                f"{label}[{key!r}]", value[key], reference[key], rtol, atol, x_tree.get(key, x), check_types, is_value
            )
            worst_abs, worst_rel = _max(worst_abs, a), _max(worst_rel, r)
            problems += p
        return worst_abs, worst_rel, problems
    family, dtype = _expected_family_and_dtype(x)
    sparse_family, value = _densified(value, reference)
    got_family = sparse_family or _family(value)
    if sparse_family is not None:
        if check_types and sparse_family != family:
            problems.append(f"{label}: expected {_SPARSE_KINDS[family]} for a {family} x, got a {sparse_family} one")
        elif check_types and _dtype_name(value.dtype) != dtype:
            problems.append(f"{label}: expected dtype {dtype} like x, got {_dtype_name(value.dtype)}")
    elif check_types:
        if got_family != family:
            problems.append(f"{label}: expected a {family} array like x, got {got_family or type(value).__name__}")
        elif not is_value and _dtype_name(value.dtype) != dtype:
            problems.append(f"{label}: expected dtype {dtype} like x, got {_dtype_name(value.dtype)}")
        if got_family == "torch" and (value.requires_grad or value.grad_fn is not None):
            problems.append(f"{label}: the torch result is still attached to an autograd graph")
    try:
        got = np.asarray(to_numpy(value), dtype=np.float64)
    except Exception as err:
        return math.nan, math.nan, [*problems, f"{label}: not an array of numbers ({type(value).__name__}: {err})"]
    ref = np.asarray(reference, dtype=np.float64)
    if got.shape != ref.shape:
        if check_types or got.size != ref.size:
            return math.nan, math.nan, [*problems, f"{label}: expected shape {ref.shape}, got {got.shape}"]
        got = got.reshape(ref.shape)
    difference = np.abs(got - ref)
    abs_error = float(np.max(difference, initial=0.0)) if np.all(np.isfinite(got)) else math.inf
    scale = float(np.max(np.abs(ref), initial=0.0))
    rel_error = abs_error / scale if scale > 0 else (0.0 if abs_error == 0 else math.inf)
    if not abs_error <= atol + rtol * scale:
        problems.append(
            f"{label}: max abs error {abs_error:.3g} (rel {rel_error:.3g}) exceeds atol {atol:.3g} + "
            f"rtol {rtol:.3g} x max|reference| {scale:.3g}"
        )
    return abs_error, rel_error, problems


_SPARSE_KINDS = {"numpy": "a scipy.sparse array", "torch": "a torch sparse tensor", "jax": "a jax BCOO matrix"}


def backend_for(backend: Any, scenario: Scenario) -> Any:
    """The backend a scenario runs on: ``di.AutoSparse(backend)`` for the scenarios
    tagged ``"sparse"`` (unless it already is one), ``backend`` for the others.

    Examples:
        >>> import di
        >>> from di.testing.runner import backend_for
        >>> from di.testing import default_scenarios
        >>> sparse = [s for s in default_scenarios() if "sparse" in s.tags]
        >>> backend_for(di.AutoFiniteDiff(), sparse[0]).dense
        AutoFiniteDiff(method='central', step=None)
    """
    if "sparse" not in scenario.tags:
        return backend
    from di.backends.selectors import AutoSparse

    return backend if isinstance(backend, AutoSparse) else AutoSparse(backend)


def _densified(value: Any, reference: Any) -> tuple[str | None, Any]:
    """A sparse result (scipy, torch sparse, jax BCOO) as ``(family, dense numpy
    array shaped like the reference)``; ``(None, value)`` for anything else."""
    kind = type(value).__module__
    if kind.startswith("scipy.sparse"):
        family, dense = "numpy", value.toarray()
    elif kind.startswith("jax.experimental.sparse"):
        import jax

        with jax.enable_x64(np.dtype(value.dtype).itemsize == 8):  # float64 outside x64 would be truncated
            family, dense = "jax", np.asarray(value.todense())
    elif _family(value) == "torch" and str(value.layout) != "torch.strided":
        family, dense = "torch", value.to_dense().detach().cpu().numpy()
    else:
        return None, value
    shape = np.shape(reference)
    return family, dense.reshape(shape) if dense.size == int(np.prod(shape)) else dense


def _max(a: float, b: float) -> float:
    if math.isnan(b):
        return a
    if math.isnan(a):
        return b
    return max(a, b)


def _same(a: Any, b: Any) -> bool:
    """Whether two values (arrays of any family, numbers, pytrees) are identical."""
    if isinstance(a, dict) or isinstance(b, dict):
        return (
            isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
        )
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(p, q) for p, q in zip(a, b))
    if _family(a) is not None and _family(b) is not None:
        a_np, b_np = to_numpy(a), to_numpy(b)
        return bool(a_np.shape == b_np.shape and np.array_equal(a_np, b_np, equal_nan=a_np.dtype.kind == "f"))
    try:
        return bool(a == b) or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))
    except Exception:
        return a is b


def _copy_contexts(contexts: Sequence[Context]) -> tuple[Context, ...]:
    copies: list[Context] = []
    for context in contexts:
        if isinstance(context, Constant):
            copies.append(Constant(copy_tree(context.value), static=context.static))
        else:
            copies.append(type(context)(copy_tree(context.value)))
    return tuple(copies)


def _skip_reason(case: Case) -> str | None:
    import di

    missing = case.scenario.spec.missing(di)
    if missing:
        return f"{NOT_AVAILABLE} ({', '.join('di.' + name for name in missing)} missing)"
    if case.scenario.is_pytree and not pytrees_supported():
        return "pytree x is not supported in this di version"
    return None


def _execute(case: Case, f: Callable[..., Any], x: Any, tangents: Any, contexts: tuple[Context, ...]) -> list[Any]:
    """Run the case's calls; return ``(label, result, reference names)`` triples."""
    import di

    spec = case.scenario.spec
    call = getattr(di, spec.call)
    value_and = getattr(di, spec.value_and)
    backend = backend_for(case.backend, case.scenario)
    t_args = (tangents,) if spec.takes_tangents else ()
    aux_option = {"has_aux": True} if case.scenario.has_aux else {}
    outputs: list[Any] = []

    def record(label: str, result: Any, references: tuple[str, ...], plain: bool) -> None:
        if aux_option:  # JAX's layout: (result, aux) and ((y, aux), result)
            if plain:
                result, aux = result
            else:
                (y, aux), rest = result
                result = (y, rest)
            outputs.append((f"{label} aux", aux, ("aux",)))
        outputs.append((label, result, references))

    if case.prep_mode == "unprepared":
        record(spec.call, call(f, backend, x, *t_args, *contexts, **aux_option), (spec.call_result,), True)
        record(
            spec.value_and, value_and(f, backend, x, *t_args, *contexts, **aux_option), spec.value_and_results, False
        )
        return outputs
    preparation = case.scenario.preparation()
    p_tangents = preparation.tangents if preparation.tangents is not None else tangents
    p_args = (copy_tree(p_tangents),) if spec.takes_tangents else ()
    prep = getattr(di, spec.prepare)(
        f, backend, copy_tree(preparation.x), *p_args, *_copy_contexts(preparation.contexts), **aux_option
    )
    repeats = 2 if case.prep_mode == "prepared-twice" else 1
    for attempt in range(1, repeats + 1):
        suffix = f" (call {attempt})" if repeats > 1 else ""
        plain = call(f, prep, backend, x, *t_args, *contexts, **aux_option)
        record(spec.call + suffix, plain, (spec.call_result,), True)
        combined = value_and(f, prep, backend, x, *t_args, *contexts, **aux_option)
        record(spec.value_and + suffix, combined, spec.value_and_results, False)
    return outputs


def _describe_error(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


def run_case(
    case: Case,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    check_mutation: bool = True,
    check_types: bool = True,
) -> CaseResult:
    """Run one combination and say how it went (never raises for the case's own errors).

    Args:
        case: the :class:`Case`.
        rtol: relative tolerance; default from :func:`default_tolerances`.
        atol: absolute tolerance; default from :func:`default_tolerances`.
        check_mutation: check that ``x``, ``Constant`` values and tangents are unchanged.
        check_types: check each result's array family, shape and dtype against ``x``.

    Returns:
        A :class:`CaseResult`.

    Examples:
        >>> import di
        >>> from di.testing import Case, run_case, default_scenarios
        >>> scenario = default_scenarios(operators=["gradient"])[0]
        >>> run_case(Case(di.AutoFiniteDiff(), scenario, "prepared")).status
        'passed'
    """
    import di

    scenario = case.scenario
    spec = scenario.spec
    label = backend_label(case.backend)
    base = CaseResult(label, scenario.name, scenario.operator, case.prep_mode, PASSED)
    dtype = _expected_family_and_dtype(scenario.x)[1]
    default_rtol, default_atol = default_tolerances(case.backend, dtype, spec.order)
    base.rtol = default_rtol if rtol is None else rtol
    base.atol = default_atol if atol is None else atol
    reason = _skip_reason(case)
    if reason is not None:
        return dataclasses.replace(base, status=SKIPPED, message=reason)
    x = copy_tree(scenario.x)
    tangents = None if scenario.tangents is None else copy_tree(scenario.tangents)
    contexts = _copy_contexts(scenario.contexts)
    x_before = copy_tree(x)
    tangents_before = copy_tree(tangents)
    constants_before = [copy_tree(c.value) if isinstance(c, Constant) else None for c in contexts]
    try:
        outputs = _execute(case, scenario.f, x, tangents, contexts)
    except (di.UnsupportedContextError, di.UnsupportedOperatorError, di.BackendNotInstalledError) as err:
        return dataclasses.replace(base, status=SKIPPED, message=_describe_error(err), error=err)
    except Exception as err:
        return dataclasses.replace(base, status=FAILED, message=_describe_error(err), error=err)
    problems: list[str] = []
    worst_abs, worst_rel = math.nan, math.nan
    for name, result, references in outputs:
        if len(references) > 1:
            if not isinstance(result, tuple) or len(result) != len(references):
                got = f"a tuple of {len(result)}" if isinstance(result, tuple) else f"a {type(result).__name__}"
                problems.append(f"{name}: expected a tuple ({', '.join(references)}), got {got}")
                continue
            pairs = list(zip(result, references))
        else:
            pairs = [(result, references[0])]
        for value, which in pairs:
            reference = scenario.reference(which)
            if reference is None:
                continue
            what = name if len(references) == 1 else f"{name} {which}"
            a, r, p = _compare(what, value, reference, base.rtol, base.atol, x, check_types, which in ("y", "aux"))
            worst_abs, worst_rel = _max(worst_abs, a), _max(worst_rel, r)
            problems += p
    if check_mutation:
        if not _same(x, x_before):
            problems.append("x was mutated")
        if tangents is not None and not _same(tangents, tangents_before):
            problems.append("the tangents were mutated")
        for i, (context, before) in enumerate(zip(contexts, constants_before), start=1):
            if isinstance(context, Constant) and not _same(context.value, before):
                problems.append(f"Constant {i} was mutated")
            if isinstance(context, Cache) and _family(context.value) == "torch" and context.value.grad_fn is not None:
                problems.append(f"Cache {i} still holds an autograd graph")
    base.max_abs_error, base.max_rel_error = worst_abs, worst_rel
    if problems:
        return dataclasses.replace(base, status=FAILED, message="; ".join(problems))
    return base


# --- the runner --------------------------------------------------------------------------


def test_differentiation(
    backends: AbstractBackend | Iterable[AbstractBackend],
    scenarios: Iterable[Scenario] | None = None,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    prep_modes: Sequence[str] = PREP_MODES,
    check_mutation: bool = True,
    check_types: bool = True,
    on_result: Callable[[CaseResult], None] | None = None,
) -> DifferentiationReport:
    """Check backends against scenarios: every backend x scenario x preparation mode.

    Each case calls the operator and its combined form, compares every result
    with the analytic references, checks family/shape/dtype and that no input
    was mutated (see the module documentation). Every case runs, then an
    ``AssertionError`` lists every failure.

    Args:
        backends: one backend selector or several.
        scenarios: the scenarios (default: :func:`~di.testing.default_scenarios`).
        rtol: relative tolerance for every case; default per backend, dtype and
            order from :func:`default_tolerances` (looser for finite differences
            and float32).
        atol: absolute tolerance, likewise.
        prep_modes: a subset of ``("unprepared", "prepared", "prepared-twice")``.
        check_mutation: check that ``x``, ``Constant`` values and tangents are unchanged.
        check_types: check that results have ``x``'s array family, dtype and the
            operator's shape.
        on_result: called with each :class:`CaseResult` as it comes (progress bars).

    Returns:
        A :class:`DifferentiationReport` with the ``passed``, ``failed`` and
        ``skipped`` cases (skipped: the operator is not in this ``di``, the backend
        declares the context or operator unsupported, or the engine is missing).

    Raises:
        AssertionError: some case failed; the message has one line per failure:
            ``backend | scenario | mode | error``.

    Examples:
        >>> import di
        >>> from di.testing import test_differentiation
        >>> report = test_differentiation([di.AutoFiniteDiff()])
        >>> len(report.failed)
        0
    """
    report = DifferentiationReport()
    for case in iter_cases(backends, scenarios, prep_modes):
        result = run_case(case, rtol=rtol, atol=atol, check_mutation=check_mutation, check_types=check_types)
        report.results.append(result)
        if on_result is not None:
            on_result(result)
    failed = report.failed
    if failed:
        lines = [f"di.testing: {len(failed)} of {len(report.results)} cases failed ({report.summary()}):"]
        lines += [f"  {result.line()}" for result in failed]
        error = AssertionError("\n".join(lines))
        error.report = report  # type: ignore[attr-defined]
        raise error
    return report


test_differentiation.__test__ = False  # type: ignore[attr-defined]  # not a pytest test when imported
