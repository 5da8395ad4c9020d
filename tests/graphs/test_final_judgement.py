"""A run's best kernel is judged again with fresh draws before the run reports it (agents/archive.recheck_best):
a kernel that passed on a lucky battery and fails the next is not the run's result. On fake evaluators, with the
run taken for a GPU run (on the CPU nothing is timed, and the check is not made)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kernelwright import api
from kernelwright.agents.context import RunConfig
from kernelwright.evaluators import EvalResult

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests" / "graphs" / "add_problem.py"
SEED = ROOT / "tests" / "graphs" / "add_seed.py"
sys.path.insert(0, str(ROOT / "tests" / "kernelwright"))
from fake_evaluations import FakeEvaluator  # noqa: E402

pytestmark = pytest.mark.timeout(300)


class Fragile(FakeEvaluator):
    """Passes every kernel, except the seed on its third judgement and after (a battery of harsher draws)."""

    def evaluate(self, source: str, quick: bool = False) -> EvalResult:
        result = super().evaluate(source, quick)
        if source == SEED.read_text() and self.calls.count(source) >= 3:
            return EvalResult(verdict="fail", reason="wrong_output", detail="trial 4/20 (heavy_tailed): 796 elements",
                              device="cuda:0", timing_unavailable="fake evaluator")
        return result


@pytest.mark.parametrize("fragile", [False, True])
def test_the_best_kernel_is_judged_again_when_the_run_stops(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            fragile: bool) -> None:
    from kernelwright.tools.evaluation import Evaluations

    calls: list[str] = []
    kind = Fragile if fragile else FakeEvaluator
    monkeypatch.setattr(Evaluations, "evaluator", lambda self, device: kind(set(), 0.0, calls))
    monkeypatch.setattr(RunConfig, "on_cpu", property(lambda self: False))
    cfg = RunConfig(device="cpu", trials=1, branches=1, iterations=2, profile="off", tune_budget=0)
    with api.start_run(PROBLEM, seed_kernel=SEED, config=cfg, runs_dir=tmp_path) as h:
        steps = list(h.steps())
    info = h.info()
    seed = SEED.read_text()
    assert len(steps) == 2 and info.status == "finished"
    # the seed (the best: nothing else is timed here) was judged once to start and twice more at the end
    assert calls.count(seed) == 3, calls.count(seed)
    if fragile:
        assert info.best_kernel is None and "failed judgement 2 of 2 with fresh draws" in info.stop_reason
        assert "heavy_tailed" in info.stop_reason and info.stop_reason.startswith("iteration budget reached")
    else:
        assert info.best_kernel == steps[0].parent
        assert info.stop_reason.endswith("judged again 2x with fresh draws: passed"), info.stop_reason
