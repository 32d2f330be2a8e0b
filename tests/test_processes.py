"""Decisions at preparation across processes, in one process: the engine-free
parts (:mod:`di.backends.processes`, AutoFastest's schedule in step), with a
stand-in for process 0. The two-process runs are tests/test_distributed.py."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

import di
from di.backends.engine import Engine
from di.backends.processes import Processes, processes_of
from di.backends.registry import get_adapter
from di.families import converter
from di.fastest.timing import BLOCK_S, MIN_ROUNDS, time_interleaved


class _ProcessOne(Processes):
    """Process 1 of two, whose process 0 decided ``decided`` (JSON text)."""

    def __init__(self, decided: Any) -> None:
        super().__init__(2, 1, "test")
        self.decided = decided
        self.sent: list[str] = []

    def broadcast_text(self, text: str) -> str:
        self.sent.append(text)
        return self.decided if isinstance(self.decided, str) else json.dumps(self.decided)


def test_values_of_one_process_span_no_processes() -> None:
    """Without a distributed runtime, no engine's values span processes (their
    hooks are asked, and answer so)."""
    values: list[Any] = [np.ones(3), None, 1.0]
    for engine in di.available_backends():
        adapter = get_adapter(engine)
        values.append(converter("numpy", adapter.capabilities.family)(np.ones(2)))
    assert processes_of(values) is None


def test_an_engine_record_checks_its_processes_path() -> None:
    with pytest.raises(di.InvalidOptionError, match="processes"):
        Engine("mine", di.AutoFiniteDiff, "mypackage.adapter:Adapter", processes="not a path")


def test_a_decision_differing_from_process_zeros_is_refused() -> None:
    group = _ProcessOne("another digest")
    with pytest.raises(di.DistributedError, match=r"AutoSparse's coloring differs between the processes"):
        group.check_agreed("AutoSparse's coloring", [1, 2, 3])
    agreeing = Processes(1, 0, "test")
    agreeing.check_agreed("AutoSparse's coloring", [1, 2, 3])  # its own digest comes back


def test_timing_in_step_follows_process_zeros_schedule() -> None:
    """Every process makes the same calls: the block lengths and rounds come from
    process 0's estimates, whatever this process measured."""
    counts = [0, 0]

    def call(i: int) -> Any:
        def run() -> None:
            counts[i] += 1

        return run

    estimates = [BLOCK_S / 4, BLOCK_S / 2]  # process 0's: blocks of 4 and 2 calls
    budget = 2 * (4 * estimates[0] + 2 * estimates[1]) * 7.5  # seven rounds' worth (and half a round)
    samples, errors = time_interleaved([call(0), call(1)], budget, lambda value: estimates)
    assert errors == [None, None]
    rounds = max(MIN_ROUNDS, 7)
    assert [len(s) for s in samples] == [rounds, rounds]
    # the estimate (an untimed and a timed call), then per round an untimed call and a block
    assert counts == [2 + rounds * (1 + 4), 2 + rounds * (1 + 2)]
