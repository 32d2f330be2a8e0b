"""``di`` across processes: two real processes per engine, on one machine.

The session fixture :func:`runs` starts, once, two processes of
``tests/distributed_jax.py`` (``jax.distributed`` with gloo CPU collectives) and
two of ``tests/distributed_torch.py`` (a gloo process group training with DDP
and FSDP2), all four at once, each pair over a free port on 127.0.0.1. Every
process runs its list of checks, each comparing ``di``'s result with the
engine's own distributed result (JAX's programs on the same global arrays;
what ``loss.backward()`` leaves in ``.grad``), and writes them to a JSON file;
each test below reads one check's outcome on both processes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.distributed

HERE = Path(__file__).parent
TIMEOUT_S = 300

JAX_CHECKS = [
    "gradient",
    "gradient_on_a_mesh_of_automatic_axes",
    "gradient_inside_jax_jit",
    "hvp_and_hessian",
    "jacobian_pushforward_pullback",
    "sparse_jacobian_and_hessian",
    "fastest_decides_alike_on_every_process",
    "numpy_caller_of_a_result_no_process_can_read",
    "differentiate_with",
]
TORCH_CHECKS = [
    "ddp_processes_have_different_local_gradients",
    "ddp_gradient_is_the_averaged_one",
    "ddp_gradient_of_copies_of_the_parameters_is_averaged",
    "ddp_gradient_inside_no_sync_is_the_local_one",
    "ddp_refuses_other_operators_on_its_parameters",
    "ddp_gradient_with_respect_to_inputs_stays_local",
    "ddp_training_continues_after_di",
    "ddp_fastest_decides_alike_on_every_process",
    "fsdp_refuses_dtensor_parameters_and_keeps_training",
    "fsdp_refuses_full_tensors_in_place_of_its_parameters",
    "fsdp_gradient_with_respect_to_inputs",
]
REQUIRES = {"jax": ("jax",), "torch": ("torch",)}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class _Pair:
    """Two processes of one worker script, started now."""

    def __init__(self, engine: str, folder: Path) -> None:
        self.engine = engine
        port = str(_free_port())
        environment = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]),
        }
        environment.pop("DI_DISTRIBUTED_ONLY", None)
        self.outputs = [folder / f"{engine}-{rank}.json" for rank in (0, 1)]
        self.logs = [folder / f"{engine}-{rank}.log" for rank in (0, 1)]
        script = str(HERE / f"distributed_{engine}.py")
        self.processes = []
        for rank in (0, 1):
            with open(self.logs[rank], "w", encoding="utf-8") as log:
                self.processes.append(
                    subprocess.Popen(
                        [sys.executable, script, str(rank), port, str(self.outputs[rank])],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=environment,
                        cwd=str(HERE.parent),
                    )
                )

    def results(self, deadline: float) -> list[dict[str, Any]] | str:
        """Each process's results, or why there are none (its output's tail)."""
        for process in self.processes:
            try:
                process.wait(timeout=max(deadline - time.monotonic(), 1))
            except subprocess.TimeoutExpired:
                for started in self.processes:
                    started.kill()  # only the processes this fixture started
                    started.wait()
        found = []
        for rank, output in enumerate(self.outputs):
            if not output.exists():
                tail = self.logs[rank].read_text(encoding="utf-8", errors="replace")[-3000:]
                return (
                    f"{self.engine} process {rank} wrote no results (exit {self.processes[rank].returncode}):\n{tail}"
                )
            found.append(json.loads(output.read_text(encoding="utf-8")))
        return found


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]] | str]:
    """Each engine's two processes' results (started at once, waited for once)."""
    folder = tmp_path_factory.mktemp("distributed")
    pairs = {
        engine: _Pair(engine, folder)
        for engine, modules in REQUIRES.items()
        if all(importlib.util.find_spec(module) is not None for module in modules)
    }
    deadline = time.monotonic() + TIMEOUT_S
    return {engine: pair.results(deadline) for engine, pair in pairs.items()}


def _outcome(runs: dict[str, Any], engine: str, check: str) -> list[list[Any]]:
    if engine not in runs:
        pytest.skip(f"{engine} is not installed")
    found = runs[engine]
    if isinstance(found, str):
        pytest.fail(found)
    return [process[check] for process in found]


@pytest.mark.parametrize("check", JAX_CHECKS)
def test_jax_across_two_processes(runs: dict[str, Any], check: str) -> None:
    outcomes = _outcome(runs, "jax", check)
    for rank, (ok, detail, *_) in enumerate(outcomes):
        assert ok, f"process {rank}: {detail}"
    if check == "fastest_decides_alike_on_every_process":
        assert outcomes[0][1] == outcomes[1][1], "the processes chose different candidates"
    if check == "differentiate_with":
        # f runs in every process, each time on the whole x (gathered), and gives the right gradient
        assert [detail for _, detail, *_ in outcomes] == ["f ran here on x of sizes [8]"] * 2


@pytest.mark.parametrize("check", TORCH_CHECKS)
def test_torch_across_two_processes(runs: dict[str, Any], check: str) -> None:
    outcomes = _outcome(runs, "torch", check)
    for rank, (ok, detail, *_) in enumerate(outcomes):
        assert ok, f"process {rank}: {detail}"
    if check == "ddp_fastest_decides_alike_on_every_process":
        assert outcomes[0][1] == outcomes[1][1], "the processes chose different candidates"


def test_every_check_of_the_workers_is_tested(runs: dict[str, Any]) -> None:
    """A check added to a worker is listed here, or it would run untested."""
    for engine, listed in (("jax", JAX_CHECKS), ("torch", TORCH_CHECKS)):
        found = runs.get(engine)
        if isinstance(found, list):
            assert sorted(set(found[0]) - {"seconds"}) == sorted(listed)
