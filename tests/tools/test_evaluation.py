"""The run's evaluations (`tools.evaluation.Evaluations`): warming the devices a run will use while the seed is
judged on the first, without touching the run's verdict cache."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from kernelwright.agents.context import RunConfig
from kernelwright.evaluators import EvalResult
from kernelwright.tools.evaluation import Evaluations
from kernelwright.tools.runstore import RunStore

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests" / "graphs" / "add_problem.py"


def test_places_are_every_device_a_generation_uses_the_seeds_first() -> None:
    assert RunConfig(device="cuda:0,cuda:1", branches=4).places() == ["cuda:0", "cuda:1"]
    assert RunConfig(device="cuda:0,cuda:1,cuda:2", branches=2).places() == ["cuda:0", "cuda:1"]  # the third idles
    assert RunConfig(device="cpu", branches=4).places() == ["cpu"]
    assert RunConfig(device="cuda", cluster="ray", actors=3, branches=8).places() == ["ray:0", "ray:1", "ray:2"]


class Recorder:
    def __init__(self, device: str, calls: list[tuple[str, str]], fail: bool = False) -> None:
        self.device, self.calls, self.fail = device, calls, fail

    def evaluate(self, source: str, *, quick: bool = False) -> EvalResult:
        self.calls.append((self.device, threading.current_thread().name))
        if self.fail:
            raise RuntimeError("this run's evaluators are closed")
        return EvalResult(verdict="pass", reason="ok", device=self.device)

    def close(self) -> None:
        pass


def test_warming_judges_the_seed_on_each_other_device_in_the_background_and_caches_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = RunStore(tmp_path).create(str(PROBLEM), PROBLEM.read_text())
    ev = Evaluations(run)
    calls: list[tuple[str, str]] = []
    monkeypatch.setattr(ev, "evaluator", lambda d: Recorder(d, calls, fail=d == "cuda:2"))
    threads = ev.warm("seed source", ["cuda:1", "cuda:2"])
    for t in threads:
        t.join(10)
    assert sorted(calls) == [("cuda:1", "kernelwright-warm-cuda:1"), ("cuda:2", "kernelwright-warm-cuda:2")]
    assert all(t.daemon and not t.is_alive() for t in threads)  # a failing device ends its thread quietly
    assert ev.cached(run.put_kernel("seed source")) is None  # a warm-up's verdict is not the run's
