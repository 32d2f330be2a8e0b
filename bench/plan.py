"""``di.AutoFastest`` checked by a separate measurement: ``python -m bench.plan``.

For every function of :mod:`bench.functions`, size ``n`` and array family of ``x``,
``di.prepare_gradient`` with ``di.AutoFastest()`` plans (its default candidates, its
default budget) and keeps one backend. Then, independently of the planner's code,
every other candidate it timed is prepared again with its own selector and timed
against the chosen one as interleaved pairs of blocks (:func:`paired`: A B, B A,
...; the median of the paired ratios survives a drifting machine load
best, and no third engine runs in between; each block of about 1 ms follows one
untimed call, so it measures the engine's steady state). The chosen backend
passes when no candidate is more than 10 % faster than it.

Beside it, the price of going through ``AutoFastest``: the prepared call on the
AutoFastest prep (backend argument ``AutoFastest()``) against the prepared call
on the winner's own prep (backend argument the winner's selector), timed as pairs
with :func:`bench.timing.compare`; the ratio should be 1.

Options:
    --sizes 10,1e3,1e5      sizes of x (even: the Rosenbrock function pairs entries)
    --functions ...         subset of sum_of_squares,rosenbrock
    --families numpy,torch,jax   array families of x, comma-separated
    --budget 1.0            AutoFastest's budget_s
    --remeasure 3.0         seconds of the re-measurement per case
    --threads 1             torch intra-op threads (0 keeps torch's default)
    --output PATH           the markdown report (default bench/plan_results.md)
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: python bench/plan.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

import di
from bench.functions import FUNCTIONS
from bench.report import format_ns, machine, versions
from bench.timing import Settings, compare
from di.families import converter
from di.fastest.plan import selector_label

__all__ = ["main", "run_case"]

TOLERANCE = 1.10
BLOCK_NS = 1e6
"""Blocks of about 1 ms of back-to-back calls in the re-measurement, each after one
untimed call: an engine whose worker threads went to sleep while the other one
ran wakes up in that call, so a block measures what a program calling one backend
repeatedly pays (longer blocks would be preempted more often on a loaded machine)."""
MIN_PAIRS, MAX_PAIRS = 7, 2001
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "plan_results.md"


@dataclass
class Candidate:
    """One candidate of a case: what the plan measured and what the re-measurement found."""

    label: str
    status: str
    plan_ns: float | None
    remeasured_ns: float | None = None
    versus_chosen: float | None = None
    versus_q: tuple[float, float] | None = None
    reason: str = ""


@dataclass
class Case:
    """One function, size and family: the plan, the re-measurement and the overhead."""

    function: str
    n: int
    family: str
    chosen: str = ""
    plan_seconds: float = 0.0
    candidates: list[Candidate] = field(default_factory=list)
    overhead_ratio: float | None = None
    overhead_q: tuple[float, float] | None = None
    direct_ns: float | None = None
    fastest_ns: float | None = None
    error: str = ""

    @property
    def fastest(self) -> Candidate | None:
        """The candidate with the lowest paired ratio to the chosen one (the chosen one's is 1)."""
        timed = [c for c in self.candidates if c.versus_chosen is not None]
        return min(timed, key=lambda c: c.versus_chosen or 0.0) if timed else None

    @property
    def chosen_over_fastest(self) -> float | None:
        """How much slower the chosen backend is than the fastest candidate (1 when it is the fastest)."""
        fastest = self.fastest
        if fastest is None or not fastest.versus_chosen:
            return None
        return 1.0 / min(1.0, fastest.versus_chosen)

    @property
    def verdict(self) -> str:
        ratio = self.chosen_over_fastest
        if ratio is None:
            return "ERROR"
        return "PASS" if ratio <= TOLERANCE else "MISS"


# --- measuring ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Paired:
    """What :func:`paired` measured: the median per-call nanoseconds of each side and
    the median (and quartiles) of the per-pair ratios ``b / a``."""

    a_ns: float
    b_ns: float
    ratio: float
    ratio_q1: float
    ratio_q3: float
    pairs: int


def _block_ns(call: Callable[[], Any], count: int) -> float:
    call()  # untimed: wakes the engine up after the other side ran
    start = time.perf_counter_ns()
    for _ in itertools.repeat(None, count):
        call()
    return (time.perf_counter_ns() - start) / count


def _calls_per_block(call: Callable[[], Any]) -> int:
    count = 1
    while (per_call := _block_ns(call, count)) * count < BLOCK_NS / 4 and count < 1 << 16:
        count *= 4
    return max(1, round(BLOCK_NS / max(per_call, 1.0)))


def paired(a: Callable[[], Any], b: Callable[[], Any], budget_s: float) -> Paired:
    """Time ``a`` against ``b`` in pairs of blocks, A B then B A alternately, until
    ``budget_s`` is spent (between :data:`MIN_PAIRS` and :data:`MAX_PAIRS` pairs).

    Each pair's two blocks run back to back under the same load, so the median of
    the per-pair ratios is the estimate that best survives a drifting load."""
    sizes = (_calls_per_block(a), _calls_per_block(b))
    a_times: list[float] = []
    b_times: list[float] = []
    deadline = time.perf_counter() + budget_s
    gc.collect(1)
    gc.disable()
    try:
        while len(a_times) < MIN_PAIRS or (time.perf_counter() < deadline and len(a_times) < MAX_PAIRS):
            if len(a_times) % 2 == 0:
                a_times.append(_block_ns(a, sizes[0]))
                b_times.append(_block_ns(b, sizes[1]))
            else:
                b_times.append(_block_ns(b, sizes[1]))
                a_times.append(_block_ns(a, sizes[0]))
    finally:
        gc.enable()
    ratios = [tb / ta for ta, tb in zip(a_times, b_times)]
    q1, _, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
    return Paired(
        statistics.median(a_times), statistics.median(b_times), statistics.median(ratios), q1, q3, len(ratios)
    )


def _waiting(call: Callable[[], Any], family: str) -> Callable[[], Any]:
    if family != "jax":
        return call
    import jax

    return lambda: jax.block_until_ready(call())


def _point(n: int, family: str, seed: int = 0) -> Any:
    x = np.random.default_rng(seed).standard_normal(n)
    return converter("numpy", family)(x)


def run_case(name: str, n: int, family: str, budget_s: float, remeasure_s: float) -> Case:
    """Plan one case with AutoFastest, re-measure its candidates, time the overhead."""
    f = FUNCTIONS[name]
    case = Case(name, n, family)
    x = _point(n, family)
    backend = di.AutoFastest(budget_s=budget_s)
    start = time.perf_counter()
    try:
        prep = di.prepare_gradient(f, backend, x)
    except Exception as err:
        case.error = f"{type(err).__name__}: {err}"
        return case
    case.plan_seconds = time.perf_counter() - start
    plan = prep.plan
    assert plan is not None
    case.chosen = selector_label(plan.chosen)
    own_calls: dict[str, Callable[[], Any]] = {}
    for row in plan.rows:
        label = selector_label(row.backend)
        case.candidates.append(
            Candidate(label, row.status, None if row.median_s is None else row.median_s * 1e9, reason=row.reason)
        )
        if row.status in ("chosen", "slower"):
            own = di.prepare_gradient(f, row.backend, x)
            own_calls[label] = _waiting(lambda own=own, selector=row.backend: di.gradient(f, own, selector, x), family)
    direct = own_calls[case.chosen]
    others = [c for c in case.candidates if c.label in own_calls and c.label != case.chosen]
    chosen_ns = []
    for candidate in others:
        timing = paired(direct, own_calls[candidate.label], remeasure_s / max(1, len(others)))
        candidate.remeasured_ns, candidate.versus_chosen = timing.b_ns, timing.ratio
        candidate.versus_q = (timing.ratio_q1, timing.ratio_q3)
        chosen_ns.append(timing.a_ns)
    chosen = next(c for c in case.candidates if c.label == case.chosen)
    chosen.versus_chosen = 1.0
    chosen.remeasured_ns = statistics.median(chosen_ns) if chosen_ns else None
    through_fastest = _waiting(lambda: di.gradient(f, prep, backend, x), family)
    timing = compare(direct, through_fastest, Settings(budget_s=remeasure_s / 2))
    case.overhead_ratio, case.overhead_q = timing.ratio, (timing.ratio_q1, timing.ratio_q3)
    case.direct_ns, case.fastest_ns = timing.a_ns, timing.b_ns
    return case


# --- report -------------------------------------------------------------------------------------


def _size(n: int) -> str:
    return f"{n:.0e}".replace("e+0", "e") if n >= 1000 else str(n)


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    return lines + ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]


def summary_rows(cases: Sequence[Case]) -> list[list[str]]:
    rows = []
    for case in cases:
        fastest = case.fastest
        ratio = case.chosen_over_fastest
        overhead = "-"
        if case.overhead_ratio is not None and case.overhead_q is not None:
            overhead = f"{case.overhead_ratio:.3f} ({case.overhead_q[0]:.3f}-{case.overhead_q[1]:.3f})"
        rows.append(
            [
                case.function,
                _size(case.n),
                case.family,
                case.chosen or "-",
                fastest.label if fastest else "-",
                "-" if ratio is None else f"{ratio:.3f}",
                case.verdict if not case.error else f"ERROR: {case.error}",
                overhead,
                f"{case.plan_seconds:.1f} s",
            ]
        )
    return rows


def detail_rows(cases: Sequence[Case]) -> list[list[str]]:
    rows = []
    for case in cases:
        for candidate in case.candidates:
            versus = "-"
            if candidate.versus_chosen is not None:
                versus = f"{candidate.versus_chosen:.3f}"
                if candidate.versus_q is not None:
                    versus += f" ({candidate.versus_q[0]:.3f}-{candidate.versus_q[1]:.3f})"
            rows.append(
                [
                    case.function,
                    _size(case.n),
                    case.family,
                    candidate.label,
                    candidate.status,
                    format_ns(candidate.plan_ns),
                    format_ns(candidate.remeasured_ns),
                    versus,
                    candidate.reason[:60],
                ]
            )
    return rows


SUMMARY_HEADERS = [
    "function",
    "n",
    "x",
    "chosen",
    "fastest re-measured",
    "chosen / fastest",
    "within 10 %",
    "AutoFastest prep / winner's prep (q1-q3)",
    "planning",
]
DETAIL_HEADERS = [
    "function",
    "n",
    "x",
    "candidate",
    "plan status",
    "plan median",
    "re-measured",
    "/ chosen, paired (q1-q3)",
    "reason",
]


def render(cases: Sequence[Case], command: str, settings: dict[str, str]) -> str:
    """The markdown report."""
    passed = sum(case.verdict == "PASS" for case in cases)
    lines = [
        "# di.AutoFastest against a separate measurement",
        "",
        f"Generated by `{command}` (see `bench/plan.py`); do not edit by hand.",
        "",
        "For each function, size and array family of `x`, `di.prepare_gradient(f, di.AutoFastest(), x)` plans "
        "with its default candidates and budget. Every other candidate it timed is then prepared again with its "
        "own selector and timed against the chosen one, independently of the planner's code, as interleaved "
        "pairs of blocks, A B then B A (about 1 ms of back-to-back prepared `di.gradient` calls each, after one "
        "untimed call in which an engine whose threads slept while the other ran wakes up, so a block measures "
        "what a program calling one backend repeatedly pays): "
        "*/ chosen, paired* is the median of the per-pair ratios candidate / chosen, and *re-measured* the "
        "candidate's median per-call time in those pairs (the chosen one's: the median over its pairings). "
        "*chosen / fastest* is 1 / the lowest of those ratios (1 when no candidate is faster); the target is at "
        "most 1.10. *AutoFastest prep / winner's prep* times the prepared call on the AutoFastest prep (backend "
        "argument `AutoFastest()`) against the same call on the winner's own prep (backend argument the "
        "winner's selector), as interleaved pairs; it should be 1. *planning* is the wall time of the whole "
        "`prepare_gradient` (every candidate's preparation and compilation, the check call, and the budget). "
        "The plan's medians come from rounds in which every candidate still racing runs one block, so they "
        "can differ from the paired re-measurement by the other engines' effect on caches and threads.",
        "",
        "## Machine",
        "",
        *[f"- {key}: {value}" for key, value in {**machine(), **settings}.items()],
        "",
        "## Versions",
        "",
        *[f"- {key}: {value}" for key, value in versions().items()],
        "",
        "## Summary",
        "",
        f"{passed} of {len(cases)} cases within 10 % of the fastest candidate.",
        "",
        *_table(SUMMARY_HEADERS, summary_rows(cases)),
        "",
        "## Every candidate: the plan's measurement and the re-measurement side by side",
        "",
        *_table(DETAIL_HEADERS, detail_rows(cases)),
        "",
    ]
    return "\n".join(lines)


def _sizes(text: str) -> list[int]:
    sizes = [int(float(part)) for part in text.split(",") if part.strip()]
    if not sizes or any(n < 2 or n % 2 for n in sizes):
        raise argparse.ArgumentTypeError("sizes must be even integers >= 2 (the Rosenbrock function pairs entries)")
    return sizes


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.plan", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=_sizes, default=[10, 1_000, 100_000])
    parser.add_argument("--functions", default=",".join(FUNCTIONS))
    parser.add_argument("--families", default="numpy,torch,jax")
    parser.add_argument("--budget", type=float, default=1.0, help="AutoFastest's budget_s (default 1)")
    parser.add_argument("--remeasure", type=float, default=3.0, help="seconds of the paired re-measurement per case")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (0 keeps torch's default)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the cases, print the tables and write the report; exit status 1 on a MISS or an error."""
    args = parse_args(argv)
    if args.threads > 0 and di.AutoTorch().is_installed:
        import torch

        torch.set_num_threads(args.threads)
    load_at_start = os.getloadavg()[0]
    cases = []
    for family in args.families.split(","):
        for name in args.functions.split(","):
            for n in args.sizes:
                case = run_case(name, n, family, args.budget, args.remeasure)
                cases.append(case)
                print(" | ".join(summary_rows([case])[0]), flush=True)
    command = "python -m bench.plan " + " ".join(sys.argv[1:] if argv is None else argv)
    settings = {
        "AutoFastest budget_s": f"{args.budget:g}",
        "re-measurement per case": f"{args.remeasure:g} s",
        "load average (1 min) at start / end": f"{load_at_start:.2f} / {os.getloadavg()[0]:.2f} "
        "(other processes share these cores)",
    }
    report = render(cases, command.strip(), settings)
    args.output.write_text(report)
    print(f"\n{sum(c.verdict == 'PASS' for c in cases)} of {len(cases)} within 10 %; written to {args.output}")
    return 0 if all(case.verdict == "PASS" for case in cases) else 1


if __name__ == "__main__":
    raise SystemExit(main())
