"""Reliability benchmarks: resident memory over many prepared calls, and threads.

``python bench/memory.py`` (or ``python -m bench.memory``) runs both sections and prints
markdown tables (the figures in ``docs/reliability.md`` come from it):

* ``memory``: per backend, in a fresh process, 100 warm-up prepared calls at n = 1e5,
  then ``--calls`` more (default 10,000); resident memory (``VmRSS`` from
  ``/proc/self/status``) after the warm-up and at every tenth of the run, and its growth.
  A prep must keep no graph, cache or compiled program per call, so the growth must stay
  under 5 %. Exact backends run ``value_and_gradient`` and ``hvp`` alternately;
  finite differences run ``pushforward`` (a gradient at n = 1e5 costs 2e5 evaluations).
* ``threads``: per backend, in a fresh process, the same prepared calls made serially and
  by 8 threads sharing one prep (default engine threading), the speed-up, and the share of
  time the GIL is free while the engine computes: a pure-Python counter thread runs
  beside serial calls made with engines limited to one thread, and its rate is compared
  with its rate beside an idle main thread (1.0: the engine releases the GIL for the
  whole call; near 0: it holds it).

Options:
    --section memory|threads|all   (default all)
    --backends jax-jit,jax,torch,autograd,finitediff   (default: the installed ones)
    --calls N      prepared calls after the warm-up in the memory section (default 10000)
    --n N          size of x (default 100000)
    --thread-calls N   calls per timing in the threads section (default 400; 40 for eager JAX)
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: python bench/memory.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

__all__ = ["main", "rss_bytes"]

ROOT = Path(__file__).resolve().parent.parent
BACKENDS = {
    "jax-jit": "di.AutoJAX(jit=True)",
    "jax": "di.AutoJAX()",
    "torch": "di.AutoTorch()",
    "autograd": "di.AutoAutograd()",
    "finitediff": "di.AutoFiniteDiff()",
}
_ENGINE = {"jax-jit": "jax", "jax": "jax", "torch": "torch", "autograd": "autograd", "finitediff": None}
THREADS = 8


def rss_bytes() -> int:
    """Resident memory of this process (``VmRSS``), in bytes; Linux only."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def _f(x: Any, c: Any) -> Any:
    import array_api_compat

    xp = array_api_compat.array_namespace(x)
    return xp.sum(xp.sin(x) * x) * c


def _calls(name: str, n: int) -> list[Any]:
    """The prepared calls a backend repeats: thunks taking the call number."""
    import di

    backend = eval(BACKENDS[name], {"di": di})
    rng = np.random.default_rng(0)
    xs = [rng.uniform(-1.0, 1.0, n) for _ in range(4)]
    v = np.ones(n)
    c = di.Constant(0.5)
    if name == "finitediff":
        prep = di.prepare_pushforward(_f, backend, np.zeros(n), (v,), c)
        return [lambda k: di.pushforward(_f, prep, backend, xs[k % 4], (v,), c)]
    g_prep = di.prepare_gradient(_f, backend, np.zeros(n), c)
    h_prep = di.prepare_hvp(_f, backend, np.zeros(n), (v,), c)
    return [
        lambda k: di.value_and_gradient(_f, g_prep, backend, xs[k % 4], c),
        lambda k: di.hvp(_f, h_prep, backend, xs[k % 4], (v,), c),
    ]


# --- workers (one fresh process per backend and section) -------------------------------------------------------------


def memory_worker(name: str, n: int, calls: int) -> dict[str, Any]:
    thunks = _calls(name, n)
    for k in range(100):
        for thunk in thunks:
            thunk(k)
    gc.collect()
    baseline = rss_bytes()
    checkpoints = []
    step = max(1, calls // 10)
    start = time.perf_counter()
    for k in range(calls):
        for thunk in thunks:
            thunk(k)
        if (k + 1) % step == 0:
            gc.collect()
            checkpoints.append(rss_bytes())
    elapsed = time.perf_counter() - start
    gc.collect()
    final = rss_bytes()
    return {
        "backend": name,
        "operators": "pushforward" if name == "finitediff" else "value_and_gradient + hvp",
        "n": n,
        "calls": calls,
        "rss_after_warmup": baseline,
        "rss_final": final,
        "rss_max": max([*checkpoints, final]),
        "growth": (final - baseline) / baseline,
        "max_growth": (max([*checkpoints, final]) - baseline) / baseline,
        "seconds_per_call": elapsed / calls,
        "checkpoints_mb": [round(value / 2**20, 1) for value in checkpoints],
    }


def _time(thunk: Any, calls: int, threads: int) -> float:
    """Seconds for ``calls`` calls of ``thunk``, made by ``threads`` threads started together."""
    if threads == 1:
        start = time.perf_counter()
        for k in range(calls):
            thunk(k)
        return time.perf_counter() - start
    barrier = threading.Barrier(threads + 1)
    share = calls // threads

    def run(t: int) -> None:
        barrier.wait()
        for k in range(share):
            thunk(t * share + k)

    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    barrier.wait()
    start = time.perf_counter()
    for worker in workers:
        worker.join()
    return time.perf_counter() - start


def _counter_rate(seconds: float, busy: Any) -> float:
    """Iterations per second of a pure-Python counter thread while ``busy()`` runs in this
    thread (or the thread sleeps, for ``busy=None``) for about ``seconds``."""
    stop = threading.Event()
    count = [0]

    def counter() -> None:
        local = 0
        while not stop.is_set():
            for _ in range(1000):
                local += 1
            count[0] = local

    worker = threading.Thread(target=counter)
    worker.start()
    time.sleep(0.05)
    start_count, start = count[0], time.perf_counter()
    deadline = start + seconds
    k = 0
    while time.perf_counter() < deadline:
        if busy is None:
            time.sleep(0.01)
        else:
            busy(k)
            k += 1
    end_count, end = count[0], time.perf_counter()
    stop.set()
    worker.join()
    return (end_count - start_count) / (end - start)


def threads_worker(name: str, n: int, calls: int, single_threaded: bool) -> dict[str, Any]:
    if single_threaded:
        try:
            import torch

            torch.set_num_threads(1)
        except ImportError:
            pass
    thunks = _calls(name, n)
    thunk = thunks[0]  # value_and_gradient (pushforward for finite differences)
    for k in range(20):
        thunk(k)
    result: dict[str, Any] = {"backend": name, "n": n, "calls": calls}
    if single_threaded:
        idle = _counter_rate(1.0, None)
        busy = _counter_rate(1.0, thunk)
        result["gil_free"] = min(1.0, busy / idle)
        return result
    serial = min(_time(thunk, calls, 1) for _ in range(2))
    parallel = min(_time(thunk, calls, THREADS) for _ in range(2))
    result.update({"serial_s": serial, "threads_s": parallel, "speedup": serial / parallel})
    return result


# --- the driver ------------------------------------------------------------------------------------------------------


def _run_worker(args: list[str], single_threaded: bool = False) -> dict[str, Any]:
    env = dict(os.environ)
    if single_threaded:
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false").strip()
        env["OMP_NUM_THREADS"] = "1"
    result = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--worker", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=3600,
    )
    if result.returncode != 0:
        return {"error": result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "failed"}
    return json.loads(result.stdout.strip().splitlines()[-1])


def _mb(value: int) -> str:
    return f"{value / 2**20:.0f} MB"


def installed(names: list[str]) -> list[str]:
    import importlib.util

    return [name for name in names if _ENGINE[name] is None or importlib.util.find_spec(_ENGINE[name]) is not None]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--section", choices=["memory", "threads", "all"], default="all")
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--thread-calls", type=int, default=400)
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        kind, name, n, calls, *rest = args.worker
        if kind == "memory":
            report = memory_worker(name, int(n), int(calls))
        else:
            report = threads_worker(name, int(n), int(calls), single_threaded=rest == ["single"])
        print(json.dumps(report))
        return 0
    names = installed([name.strip() for name in args.backends.split(",") if name.strip()])
    unknown = [name for name in names if name not in BACKENDS]
    if unknown:
        print(f"unknown backends: {unknown}; choose among {list(BACKENDS)}", file=sys.stderr)
        return 2
    print(f"# di reliability benchmarks ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)\n")
    status = 0
    if args.section in ("memory", "all"):
        print(f"## Resident memory: {args.calls} prepared calls at n = {args.n} after 100 warm-up calls\n")
        print("| backend | operators | RSS after warm-up | RSS after | max | growth | max growth | per call |")
        print("|---|---|---|---|---|---|---|---|")
        for name in names:
            r = _run_worker(["memory", name, str(args.n), str(args.calls)])
            if "error" in r:
                print(f"| {name} | error: {r['error']} | | | | | | |")
                status = 1
                continue
            print(
                f"| {name} | {r['operators']} | {_mb(r['rss_after_warmup'])} | {_mb(r['rss_final'])} | "
                f"{_mb(r['rss_max'])} | {100 * r['growth']:+.2f} % | {100 * r['max_growth']:+.2f} % | "
                f"{1e3 * r['seconds_per_call']:.3g} ms |",
                flush=True,
            )
            status |= int(r["max_growth"] > 0.05)
        print()
    if args.section in ("threads", "all"):
        print(f"## Threads: {THREADS} threads sharing one prep, n = {args.n}\n")
        print("| backend | calls | serial | 8 threads | speed-up | GIL free while computing |")
        print("|---|---|---|---|---|---|")
        for name in names:
            calls = args.thread_calls if name != "jax" else max(THREADS, args.thread_calls // 10)
            calls -= calls % THREADS
            r = _run_worker(["threads", name, str(args.n), str(calls)])
            g = _run_worker(["threads", name, str(args.n), str(calls), "single"], single_threaded=True)
            if "error" in r or "error" in g:
                print(f"| {name} | error: {r.get('error') or g.get('error')} | | | | |")
                status = 1
                continue
            print(
                f"| {name} | {calls} | {r['serial_s']:.3g} s | {r['threads_s']:.3g} s | {r['speedup']:.2f}x | "
                f"{100 * g['gil_free']:.0f} % |",
                flush=True,
            )
        print()
    return status


if __name__ == "__main__":
    raise SystemExit(main())
