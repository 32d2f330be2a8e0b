"""``di.AutoSparse`` against asdex on the CUTEst problems of sif2jax (part of
``python -m bench.sparse``; needs the bench extra: ``pip install
'differentiation-interface[bench]'`` for asdex and sif2jax).

For each unconstrained CUTEst problem with 50 <= n <= 3000: the Hessian's
detected nonzeros and colors for both, their preparation times, and the prepared
call, both on JAX float64 input with a ``BCOO`` result: ``di.hessian`` with a prep
of ``AutoSparse(AutoJAX(jit=True))`` against ``jax.jit(asdex.hessian_from_coloring(f,
coloring))``.

The problems run in a child process (importing sif2jax builds every problem: about
a minute) under a time limit per problem (``--problem-timeout``): a problem whose
setup (detection, coloring, compilation of one hvp per color, by either package)
does not finish in time is reported as skipped, with the step it was in, and the
child is replaced. Rows are appended to a JSON-lines file as they finish (a rerun skips the
problems already there) and the Markdown report is rewritten after each one.

Call times: rounds of ``CALLS`` prepared calls of di then of asdex (the order
alternating between rounds), the per-call mean of each round, and the median over
``ROUNDS`` rounds; the machine is shared, so the two are interleaved to see the
same load.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from di.fastest.plan import format_seconds

ROUNDS = 15
ROUND_SECONDS = 0.02  # each round's batch of calls lasts about this long
PROBLEM_TIMEOUT = 300.0
DENSE_SHARE = 0.9  # a Hessian with at least this share of n**2 nonzeros counts as nearly dense


def _ready(result: Any) -> Any:
    getattr(getattr(result, "data", result), "block_until_ready", lambda: None)()
    return result


def interleaved(calls: dict[str, Callable[[], Any]], rounds: int = ROUNDS) -> dict[str, float]:
    """Median per-call seconds of each of ``calls``, timed in alternating rounds."""
    names = list(calls)
    counts = {}
    for name, call in calls.items():
        _ready(call())
        start = time.perf_counter()
        _ready(call())
        once = max(time.perf_counter() - start, 1e-7)
        counts[name] = max(1, min(1000, int(ROUND_SECONDS / once)))
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_number in range(rounds):
        order = names if round_number % 2 == 0 else names[::-1]
        for name in order:
            call, count = calls[name], counts[name]
            start = time.perf_counter()
            for _ in range(count):
                result = call()
            _ready(result)
            samples[name].append((time.perf_counter() - start) / count)
    return {name: statistics.median(values) for name, values in samples.items()}


def cutest_problems(low: int = 50, high: int = 3000) -> list[tuple[str, int]]:
    """``(name, n)`` of the unconstrained sif2jax problems with ``low <= n <= high``."""
    import sif2jax

    chosen = []
    for problem in sif2jax.unconstrained_minimisation_problems:
        n = int(np.size(problem.y0))
        if low <= n <= high:
            chosen.append((problem.name, n))
    return chosen


def _step(name: str) -> None:
    """Tell the parent which step is running (read back when the time limit stops us)."""
    print(json.dumps({"step": name}), flush=True)


def measure(name: str) -> dict[str, Any]:
    """One problem's row, in this process."""
    import asdex
    import jax
    import sif2jax

    import di

    problem = next(p for p in sif2jax.unconstrained_minimisation_problems if p.name == name)
    backend = di.AutoSparse(di.AutoJAX(jit=True))

    def f(y: Any) -> Any:
        return problem.objective(y, problem.args)

    with jax.enable_x64(True), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x = jax.device_put(np.asarray(problem.y0, dtype=np.float64))
        row: dict[str, Any] = {"name": name, "n": int(x.size), "load": os.getloadavg()[0]}
        _step("di preparation")
        start = time.perf_counter()
        prep = di.prepare_hessian(f, backend, x)
        _ready(di.hessian(f, prep, backend, x))
        row.update(di_prep=time.perf_counter() - start, di_nnz=prep.sparsity.nnz, di_colors=prep.colors)
        row.update(di_order=prep.info.order, di_notes=list(prep.info.notes))
        _step("asdex preparation")
        start = time.perf_counter()
        coloring = asdex.hessian_coloring(f, x)
        native = jax.jit(asdex.hessian_from_coloring(f, coloring))
        _ready(native(x))
        row.update(asdex_prep=time.perf_counter() - start)
        row.update(asdex_nnz=int(coloring.sparsity.nnz), asdex_colors=int(coloring.num_colors))
        _step("agreement")
        reference = np.asarray(native(x).todense())
        ours = np.asarray(di.hessian(f, prep, backend, x).todense())
        scale = max(float(np.abs(reference).max(initial=0.0)), 1.0)
        row["agree"] = bool(np.abs(ours - reference).max(initial=0.0) <= 1e-9 * scale)
        _step("timing")
        times = interleaved({"di": lambda: di.hessian(f, prep, backend, x), "asdex": lambda: native(x)})
        row.update(di_call=times["di"], asdex_call=times["asdex"])
        row["load_after"] = os.getloadavg()[0]
    return row


class Worker:
    """A child process that imports sif2jax once (about a minute: it builds every
    problem) and measures the problems it is sent, one JSON line per step and one
    per row. A problem over the time limit kills it; the next problem starts a new one."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[str] | None = None
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.problems: list[tuple[str, int]] = []

    def _start(self, timeout: float) -> None:
        command = [sys.executable, "-m", "bench.sparse_cutest", "--serve"]
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        self.lines = queue.Queue()
        threading.Thread(target=self._read, args=(self.process, self.lines), daemon=True).start()
        message = self._next(time.monotonic() + max(timeout, 600.0))
        if message is None or "problems" not in message:
            raise RuntimeError("the CUTEst worker did not start")
        self.problems = [(str(name), int(n)) for name, n in message["problems"]]

    @staticmethod
    def _read(process: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    def _next(self, deadline: float) -> dict[str, Any] | None:
        """The next JSON message, or ``None`` when the worker stopped or time ran out."""
        while True:
            try:
                line = self.lines.get(timeout=max(deadline - time.monotonic(), 0.0))
            except queue.Empty:
                return None
            if line is None:
                return None
            try:
                return dict(json.loads(line))
            except ValueError:
                continue

    def list_problems(self, timeout: float) -> list[tuple[str, int]]:
        if self.process is None:
            self._start(timeout)
        return self.problems

    def run(self, name: str, n: int, timeout: float) -> dict[str, Any]:
        """One problem's row, or a row saying why there is none."""
        if self.process is None:
            self._start(timeout)
        assert self.process is not None and self.process.stdin is not None
        self.process.stdin.write(name + "\n")
        self.process.stdin.flush()
        deadline, step = time.monotonic() + timeout, "start"
        while True:
            message = self._next(deadline)
            if message is None:
                why = f"over the {timeout:.0f} s limit" if self.process.poll() is None else "the process failed"
                self.stop()
                return {"name": name, "n": n, "skipped": f"{why}, in {step}"}
            if "row" in message:
                return dict(message["row"])
            if "error" in message:
                return {"name": name, "n": n, "skipped": f"{message['error']}, in {step}"}
            step = message.get("step", step)

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None


def warm_up(name: str = "ARGLINA") -> None:
    """One untimed preparation by each package (the imports and compiles every
    problem shares, which would otherwise land on the first row's di preparation)."""
    import asdex
    import jax
    import sif2jax

    import di

    problem = next(p for p in sif2jax.unconstrained_minimisation_problems if p.name == name)

    def f(y: Any) -> Any:
        return problem.objective(y, problem.args)

    with jax.enable_x64(True), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x = jax.device_put(np.asarray(problem.y0, dtype=np.float64))
        backend = di.AutoSparse(di.AutoJAX(jit=True))
        _ready(di.hessian(f, di.prepare_hessian(f, backend, x), backend, x))
        _ready(jax.jit(asdex.hessian_from_coloring(f, asdex.hessian_coloring(f, x)))(x))


def serve() -> None:
    """The worker's loop: a warm-up, the problem list, then one problem per line of stdin."""
    warm_up()
    print(json.dumps({"problems": cutest_problems()}), flush=True)
    for line in sys.stdin:
        name = line.strip()
        try:
            print(json.dumps({"row": measure(name)}), flush=True)
        except Exception as err:  # a problem either package cannot do is reported, not fatal
            print(json.dumps({"error": f"{type(err).__name__}: {str(err).splitlines()[0][:100]}"}), flush=True)


def cutest_rows(
    jsonl: Path, timeout: float = PROBLEM_TIMEOUT, on_row: Callable[[list[dict[str, Any]]], None] | None = None
) -> list[dict[str, Any]]:
    """Every problem's row: those in ``jsonl`` as they are, the others measured and
    appended; ``on_row(rows so far)`` after each."""
    rows = [json.loads(line) for line in jsonl.read_text().splitlines() if line.strip()] if jsonl.exists() else []
    done = {row["name"] for row in rows}
    worker = Worker()
    try:
        for name, n in worker.list_problems(timeout):
            if name in done:
                continue
            start = time.perf_counter()
            row = worker.run(name, n, timeout)
            row["wall"] = time.perf_counter() - start
            rows.append(row)
            with jsonl.open("a") as out:
                out.write(json.dumps(row) + "\n")
            print(f"cutest {name} (n = {n}): {row.get('skipped', 'done')} in {row['wall']:.0f} s", flush=True)
            if on_row is not None:
                on_row(rows)
    finally:
        worker.stop()
    order = {name: k for k, (name, _) in enumerate(worker.problems)}
    return sorted(rows, key=lambda row: order.get(row["name"], len(order)))


_seconds = format_seconds


def _load(row: dict[str, Any]) -> str:
    """The one-minute load average when the row started and when it ended (``-``: not recorded)."""
    if "load" not in row:
        return "-"
    return f"{row['load']:.1f}-{row.get('load_after', row['load']):.1f}"


def cutest_markdown(rows: list[dict[str, Any]], timeout: float = PROBLEM_TIMEOUT) -> list[str]:
    lines = [
        "## Hessians of the sif2jax CUTEst problems (50 <= n <= 3000): di against asdex",
        "",
        "`AutoSparse(AutoJAX(jit=True))` (default options: star coloring, best of several orders) against "
        "`jax.jit(asdex.hessian_from_coloring(f, asdex.hessian_coloring(f, x)))`; JAX float64 input, `BCOO` "
        f"output. `prep`: detection, coloring, compilation and a first call, once (`prep ratio`: di's over asdex's; "
        "each worker process first prepares ARGLINA with both, untimed: the imports and compiles they share). "
        "`call`: median over "
        f"{ROUNDS} "
        "rounds of prepared calls, di's and asdex's rounds interleaved. `agree`: the two Hessians agree to 1e-9 "
        "(relative to the largest entry). `load`: the one-minute load average at the row's start and end. The problems "
        "run in a child process, one at a time; one whose setup does not finish in "
        f"{timeout:.0f} s (on a shared 2-core machine) is listed as skipped with the step it was in.",
        "",
        "| problem | n | di nnz | asdex nnz | di colors | asdex colors | di prep | asdex prep | di call | asdex call "
        "| di / asdex | prep ratio | agree | load |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    ratios, worse, more_nnz, skipped = [], [], [], []
    for row in rows:
        if "skipped" in row:
            skipped.append(row["name"])
            lines.append(f"| {row['name']} | {row['n']} | skipped: {row['skipped']} | | | | | | | | | | | |")
            continue
        ratio = row["di_call"] / row["asdex_call"]
        ratios.append(ratio)
        if row["di_colors"] > row["asdex_colors"]:
            worse.append(row["name"])
        if row["di_nnz"] > row["asdex_nnz"]:
            more_nnz.append(row["name"])
        lines.append(
            f"| {row['name']} | {row['n']} | {row['di_nnz']} | {row['asdex_nnz']} | {row['di_colors']} | "
            f"{row['asdex_colors']} | {_seconds(row['di_prep'])} | {_seconds(row['asdex_prep'])} | "
            f"{_seconds(row['di_call'])} | {_seconds(row['asdex_call'])} | {ratio:.2f} | "
            f"{row['di_prep'] / row['asdex_prep']:.2f} | {'yes' if row['agree'] else 'NO'} | {_load(row)} |"
        )
    if ratios:
        geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        fewer = sum(1 for row in rows if "skipped" not in row and row["di_colors"] < row["asdex_colors"])
        lines += [
            "",
            f"- geometric mean of di / asdex call time over {len(ratios)} problems: {geomean:.2f} (target <= 1.0)",
            f"- problems where di needs more colors than asdex: {', '.join(worse) if worse else 'none'}; "
            f"fewer: {fewer} of {len(ratios)}",
            f"- problems where di's pattern has more nonzeros than asdex's: {', '.join(more_nnz) or 'none'}",
            f"- skipped: {', '.join(skipped) if skipped else 'none'}",
        ]
        dense = [row for row in rows if "skipped" not in row and row["di_nnz"] >= DENSE_SHARE * row["n"] ** 2]
        if dense:
            prep = {row["name"]: row["di_prep"] / row["asdex_prep"] for row in dense}
            over = [name for name, ratio in prep.items() if ratio > 2]
            lines.append(
                f"- nearly dense problems ({len(dense)}, at least {DENSE_SHARE:.0%} of n^2 nonzeros): di's preparation "
                f"{min(prep.values()):.2f}-{max(prep.values()):.2f}x asdex's (target <= 2); over 2x: "
                f"{', '.join(over) or 'none'}"
            )
    return [*lines, ""]


def main(argv: list[str] | None = None) -> None:
    """``--serve``: the worker of :class:`Worker`; ``--problem NAME``: one problem's
    row as JSON."""
    parser = argparse.ArgumentParser(prog="python -m bench.sparse_cutest")
    parser.add_argument("--problem")
    parser.add_argument("--serve", action="store_true")
    args = parser.parse_args(argv)
    if args.serve:
        serve()
    elif args.problem:
        print(json.dumps({"row": measure(args.problem)}), flush=True)
    else:
        parser.error("give --serve or --problem NAME")


if __name__ == "__main__":
    main()
