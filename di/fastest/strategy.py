"""The strategy behind :class:`di.AutoFastest`: a planner choosing among whole preps.

It implements no derivative itself. At preparation (its one hook,
:meth:`FastestStrategy.prepare`) it prepares the operator on every candidate
backend, runs each once on the given arguments, keeps those whose results agree
with the majority's, times them (whole prepared ``di`` calls, in interleaved
rounds, median per candidate) and returns the winner's
:class:`~di.prep.base.Prep`, answering to the AutoFastest selector, so every call
on it is exactly a call of the winner's prep. How results are compared is
:mod:`di.fastest.agreement`; how calls are timed, :mod:`di.fastest.timing`; the
plans and their cache, :mod:`di.fastest.plan`. The engines know nothing of it.
"""

from __future__ import annotations

import datetime
import itertools
import math
import statistics
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from di.backends.capabilities import OPERATOR_FAMILIES
from di.backends.processes import Processes, processes_of
from di.backends.selectors import AbstractBackend
from di.errors import BackendNotInstalledError, DistributedError
from di.families import family_of
from di.fastest.agreement import agree, default_tolerances, float64_leaves, leaf_differences, relative_difference
from di.fastest.plan import (
    CandidatesDisagreeError,
    Plan,
    PlanCache,
    PlanRow,
    cache_key,
    engine_versions,
    function_fingerprint,
    function_name,
    selector_label,
)
from di.fastest.selector import AutoFastest
from di.fastest.timing import time_interleaved, waiting
from di.prep.base import Prep
from di.prep.description import describe_value
from di.prep.info import StrategyInfo
from di.prep.strategy import Preparer, PrepareRequest, Strategy
from di.pytrees import is_pytree, tree_leaves

__all__ = ["FastestInfo", "FastestStrategy"]

PrepareWith = Callable[[AbstractBackend], Prep]


@dataclass(frozen=True)
class FastestInfo(StrategyInfo):
    """What an AutoFastest prep records: the plan (``prep.plan``)."""

    plan: Plan


class FastestStrategy(Strategy):
    """The preparation hook of :class:`di.AutoFastest`.

    Examples:
        >>> import numpy as np, di
        >>> backend = di.AutoFastest([di.AutoFiniteDiff(), di.AutoFiniteDiff(method="forward")], budget_s=0.01)
        >>> prep = di.prepare_gradient(lambda x: (x * x).sum(), backend, np.ones(2))
        >>> prep.plan.chosen in backend.candidates
        True
    """

    def support(self, backend: AbstractBackend) -> dict[str, str]:
        return dict.fromkeys(OPERATOR_FAMILIES, "as the chosen candidate")

    def prepare(self, backend: AbstractBackend, request: PrepareRequest, preparer: Preparer) -> Prep:
        """Plan (or read the plan from the cache) and return a prep running the winner.

        Raises:
            CandidatesDisagreeError: the candidates' results differ and no
                majority agrees.
            Exception: the first candidate's error, when every candidate fails.
        """
        assert isinstance(backend, AutoFastest)
        call = _Call(request, preparer)
        candidates = _candidates(backend)
        cache = _CacheEntry(backend, call, candidates) if backend.cache is not None else None
        if cache is not None:
            processes = processes_of(call.values())
            # across processes, process 0's cache decides (another's may hold another plan, or none)
            cached = cache.read(preparer.with_backend, processes)
            if cached is not None:
                plan, winner = cached
                return winner.with_backend(backend, FastestInfo(plan))
        plan, winner = _plan(call, candidates, preparer.with_backend, backend)
        if cache is not None:
            cache.write(plan)
        return winner.with_backend(backend, FastestInfo(plan))


def _candidates(selector: AutoFastest) -> tuple[AbstractBackend, ...]:
    """The selectors to choose among.

    Raises:
        BackendNotInstalledError: no candidate given and no automatic
            differentiation engine installed.
    """
    candidates = tuple(selector.candidates) if selector.candidates is not None else selector.default_candidates()
    if not candidates:
        raise BackendNotInstalledError(
            "AutoFastest() chooses among the installed automatic-differentiation engines, and none of them is "
            "installed.\n  pip install 'differentiation-interface[all]'\n"
            "or list candidates yourself, such as AutoFastest([AutoFiniteDiff()])."
        )
    return candidates


class _Call:
    """One operator call at the prepared arguments, as the planner makes it."""

    def __init__(self, request: PrepareRequest, preparer: Preparer) -> None:
        self.request = request
        self.preparer = preparer
        self.family = request.operator
        self.f = request.f
        self.tangents = request.tangents
        self.operator_key = request.operator_key

    @property
    def name(self) -> str:
        """The operator timed and compared: the family's plain one (``gradient``, ``hvp``, ...)."""
        return OPERATOR_FAMILIES[self.family][0]

    def runner(self, prep: Prep, backend: AbstractBackend) -> Callable[[], Any]:
        """A zero-argument prepared call of the plain operator on ``prep``: the
        whole call a user makes, conversions to and from the caller's family included."""
        return self.preparer.runner(prep, backend)

    def signature(self) -> str:
        """The arguments, described as in mismatch reports, without values (a plan
        serves every value of a Python float or a static context)."""
        request = self.request
        parts = [f"x {_describe(request.x)}"]
        if request.tangents is not None:
            parts.append(f"{'ty' if self.family == 'pullback' else 'tx'} {describe_value(request.tangents)}")
        parts += [f"{type(context).__name__} {_describe(context.value)}" for context in request.contexts]
        if request.has_aux:
            parts.append("has_aux")
        return ", ".join(parts)

    def values(self) -> list[Any]:
        """``x``, the tangents and the context values."""
        request = self.request
        return [request.x, request.tangents, *(context.value for context in request.contexts)]

    def leaves_signature(self) -> list[str]:
        """Every array leaf of ``x``, the tangents and the contexts, described (for
        cache keys: pytrees of equal structure but other leaf shapes differ)."""
        request = self.request
        values = [request.x, request.tangents, *(context.value for context in request.contexts)]
        return [describe_value(leaf) for leaf in tree_leaves(values) if family_of(leaf) is not None]


def _describe(value: Any) -> str:
    if family_of(value) is None and not is_pytree(value):
        return type(value).__name__
    return describe_value(value)


# --- the plan ------------------------------------------------------------------------------


@dataclass
class _Candidate:
    backend: AbstractBackend
    prep: Prep | None = None
    run: Callable[[], Any] | None = None
    leaves: list[np.ndarray] | None = None
    dtypes: list[str] | None = None
    status: str = ""
    reason: str = ""
    samples: list[float] | None = None


def _plan(
    call: _Call, candidates: Sequence[AbstractBackend], prepare_with: PrepareWith, selector: AutoFastest
) -> tuple[Plan, Prep]:
    """Prepare, check and time every candidate; the plan and the winner's prep."""
    entries = [_Candidate(backend) for backend in candidates]
    processes = processes_of(call.values())
    first_error: BaseException | None = None
    for entry in entries:
        error = _prepare_and_check(entry, call, prepare_with, processes)
        if error is not None and first_error is None:
            first_error = error
        del error
    ran = [entry for entry in entries if entry.status == ""]
    if not ran:
        assert first_error is not None
        _raise_with_plan(first_error, _make_plan(call, entries, selector))
    del first_error
    _vote(ran, selector.rtol, selector.atol)
    if processes is not None:
        _agree_on_candidates(entries, processes)
    agreed = [entry for entry in ran if entry.status == ""]
    if not agreed:
        plan = _make_plan(call, entries, selector)
        raise CandidatesDisagreeError(
            f"the AutoFastest candidates give different {call.name} results and no majority of them agrees, so "
            f"none can be trusted:\n{plan}\nCheck f on each backend (python -m di check MODULE:FUNCTION), or list "
            f"the candidates that agree as AutoFastest([...]).",
            plan,
        )
    runs = [entry.run for entry in agreed]
    shared = None if processes is None else processes.broadcast
    samples, errors = time_interleaved(runs, selector.budget_s, shared)  # type: ignore[arg-type]
    for entry, entry_samples, error in zip(agreed, samples, errors):
        entry.samples = entry_samples
        if error is not None:
            entry.status, entry.reason = "failed", f"timing: {type(error).__name__}: {error}"
            entry.prep = entry.run = entry.samples = None
    timed = [entry for entry in agreed if entry.status == ""]
    if not timed:
        _raise_with_plan(next(error for error in errors if error is not None), _make_plan(call, entries, selector))
    del errors
    winner = min(timed, key=lambda entry: statistics.median(entry.samples or [math.inf]))
    if processes is not None:  # process 0's measurement decides for every process
        winner = timed[processes.broadcast(timed.index(winner))]
    for entry in timed:
        entry.status = "chosen" if entry is winner else "slower"
    plan = _make_plan(call, entries, selector)
    assert winner.prep is not None
    return plan, winner.prep


def _raise_with_plan(error: BaseException, plan: Plan) -> NoReturn:
    """Raise a candidate's error unchanged, the plan added as a note: no candidate is left."""
    if hasattr(error, "add_note"):
        error.add_note(f"Every AutoFastest candidate failed:\n{plan}")
    raise error


def _prepare_and_check(
    entry: _Candidate, call: _Call, prepare_with: PrepareWith, processes: Processes | None = None
) -> BaseException | None:
    """Prepare one candidate and run it once (which also warms it up); on failure
    mark it ``failed`` and return the error. A result spanning ``processes`` is
    compared by this process's part of it (no process can read it whole)."""
    stage = "preparing"
    try:
        entry.prep = prepare_with(entry.backend)
        stage = "first call"
        run = call.runner(entry.prep, entry.backend)
        result = run()
        entry.run = waiting(run, result)
        stage = "reading the result"
        entry.leaves, entry.dtypes = float64_leaves(result if processes is None else processes.local(result))
    except Exception as err:
        entry.status, entry.reason = "failed", f"{stage}: {type(err).__name__}: {err}"
        entry.prep = entry.run = None
        return err
    return None


def _agree_on_candidates(entries: Sequence[_Candidate], processes: Processes) -> None:
    """Keep the candidates process 0 keeps (each process voted on its own part of
    the results); a candidate kept there that failed here cannot be timed in step.

    Raises:
        DistributedError: a candidate process 0 keeps failed or disagreed here.
    """
    kept = processes.broadcast([i for i, entry in enumerate(entries) if entry.status == ""])
    for i, entry in enumerate(entries):
        if i in kept and entry.status:
            raise DistributedError(
                f"AutoFastest: {selector_label(entry.backend)} {entry.status} on process {processes.index} of this "
                f"{processes.runtime} run ({entry.reason}) but not on process 0, so the processes cannot time the "
                f"same candidates. List the candidates that work on every process as AutoFastest([...])."
            )
        if i not in kept and not entry.status:
            entry.status, entry.reason = "disagreed", "not kept on process 0, which decides for every process"
            entry.prep = entry.run = None


def _vote(ran: list[_Candidate], rtol: float | None, atol: float | None) -> None:
    """Mark ``disagreed`` the candidates whose result differs from the majority's.
    The reference is the candidate agreeing with the most others (the first listed
    on a tie); when it and those agreeing with it are not a strict majority, every
    candidate is marked ``disagreed``."""
    default_rtol, default_atol = default_tolerances([d for entry in ran for d in entry.dtypes or ()])
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    count = len(ran)
    agreeing = [[True] * count for _ in range(count)]
    for i, j in itertools.combinations(range(count), 2):
        same = ran[i].dtypes == ran[j].dtypes and agree(ran[i].leaves or [], ran[j].leaves or [], rtol, atol)
        agreeing[i][j] = agreeing[j][i] = same
    counts = [sum(row) for row in agreeing]  # each counts itself
    reference = max(range(count), key=lambda i: (counts[i], -i))
    majority = counts[reference] * 2 > count
    for i, entry in enumerate(ran):
        if majority and agreeing[reference][i]:
            continue
        entry.status = "disagreed"
        if i == reference:
            entry.reason = "no majority of the candidates agrees with its result"
        else:
            entry.reason = _difference_reason(ran[reference], entry, rtol, atol)
        entry.prep = entry.run = None


def _difference_reason(reference: _Candidate, entry: _Candidate, rtol: float, atol: float) -> str:
    name = selector_label(reference.backend)
    if entry.dtypes != reference.dtypes:
        return f"its result's dtypes {entry.dtypes} differ from {name}'s {reference.dtypes}"
    shapes = [leaf.shape for leaf in entry.leaves or ()]
    expected = [leaf.shape for leaf in reference.leaves or ()]
    if shapes != expected:
        return f"its result's shapes {shapes} differ from {name}'s {expected}"
    difference = relative_difference(entry.leaves or [], reference.leaves or [])
    if math.isinf(difference) and leaf_differences(entry.leaves or [], reference.leaves or []) is None:
        return f"its result's NaN or infinite entries differ from {name}'s"
    return f"differs from {name} by {difference:.1e} of the largest entry (rtol {rtol:g}, atol {atol:g})"


def _make_plan(call: _Call, entries: Sequence[_Candidate], selector: AutoFastest) -> Plan:
    rows = tuple(
        PlanRow(
            entry.backend,
            entry.status or "failed",
            statistics.median(entry.samples) if entry.samples else None,
            len(entry.samples or ()),
            entry.reason,
        )
        for entry in entries
    )
    return Plan(call.family, call.signature(), rows, "measured", selector.budget_s)


# --- the JSON cache --------------------------------------------------------------------------


class _CacheEntry:
    """The cache entry of one preparation: its key, and reading and writing it."""

    def __init__(self, selector: AutoFastest, call: _Call, candidates: Sequence[AbstractBackend]) -> None:
        assert selector.cache is not None
        self.cache = PlanCache(selector.cache)
        self.call = call
        self.candidates = candidates
        self.engines = engine_versions(candidates)
        self.parts = {
            "function": function_name(call.f),
            "code": function_fingerprint(call.f),
            "operator": call.operator_key,
            "signature": call.signature(),
            "leaves": call.leaves_signature(),
            "candidates": [repr(candidate) for candidate in candidates],
            "rtol": selector.rtol,
            "atol": selector.atol,
        }
        self.key = cache_key(self.parts)

    def read(self, prepare_with: PrepareWith, processes: Processes | None = None) -> tuple[Plan, Prep] | None:
        """The remembered plan and the winner's prep, or ``None`` to measure
        (no entry, other engine versions, or a winner that no longer prepares).
        Across ``processes``, process 0's entry, broadcast to every process."""
        entry = self.cache.lookup(self.key, self.engines) if processes is None or processes.index == 0 else None
        if processes is not None:
            entry = processes.broadcast(entry)
        if entry is None:
            return None
        try:
            plan = Plan.from_json(entry["plan"], self.candidates, f"cache {self.cache.path}")
            winner = plan.chosen
        except (KeyError, LookupError, TypeError, ValueError):
            return None
        try:
            return plan, prepare_with(winner)
        except Exception as err:
            warnings.warn(
                f"di: the remembered AutoFastest winner {selector_label(winner)} no longer prepares "
                f"({type(err).__name__}: {err}); measuring the candidates again.",
                stacklevel=5,
            )
            return None

    def write(self, plan: Plan) -> None:
        """Remember a measured plan."""
        measured_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        self.cache.store(
            self.key, {**self.parts, "engines": self.engines, "measured_at": measured_at, "plan": plan.to_json()}
        )
