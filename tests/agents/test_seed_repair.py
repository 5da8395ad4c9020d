"""The first-kernel writer repairs a kernel the full verifier rejected: on a GPU the quick check runs one draw of each
family where the verifier runs many, so a first kernel can pass the one and fail the other (a tolerance missed by
one element of millions); the run is not lost to that — the writer gets the verdict and the kernel back."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from kernelwright.agents.context import RunConfig, RunContext
from kernelwright.evaluators import EvalResult
from kernelwright.graphs.optimize import builder, initial_state
from kernelwright.tools.evaluation import Evaluations
from kernelwright.tools.runstore import RunStore

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests" / "graphs" / "add_problem.py"
SEED = (ROOT / "tests" / "graphs" / "add_seed.py").read_text()
FRAGILE = SEED.replace("BLOCK = 256\n", "BLOCK = 128\n")
sys.path.insert(0, str(Path(__file__).parent))
from scripted import Scripted, call  # noqa: E402

pytestmark = pytest.mark.timeout(120)


class GpuLike:
    """Quick checks pass; the full verification fails `FRAGILE` and passes anything else, untimed."""

    def __init__(self, calls: list[tuple[str, bool]]) -> None:
        self.calls = calls

    def evaluate(self, source: str, quick: bool = False) -> EvalResult:
        self.calls.append((source, quick))
        if not quick and source == FRAGILE:
            return EvalResult(verdict="fail", reason="wrong_output", device="cuda:0",
                              detail="trial 15/20 (heavy_tailed): 1 of 8388608 elements exceed the tolerance")
        return EvalResult(verdict="pass", reason="ok", detail="fake: verified", device="cuda:0",
                          families=["base", "test_inputs"], timing_unavailable="fake")

    def close(self) -> None:
        pass


def test_a_rejected_first_kernel_is_repaired_with_the_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, bool]] = []
    monkeypatch.setattr(Evaluations, "evaluator", lambda self, device: GpuLike(calls))
    run = RunStore(tmp_path).create(str(PROBLEM), PROBLEM.read_text(), {})
    cfg = RunConfig(model="scripted:w", device="cuda:0", profile="off", trials=1, branches=1, iterations=1,
                    roofline_target=None)
    run.update(config={"settings": cfg.as_dict()})
    model = Scripted(script=[
        call("write_kernel", {"source": FRAGILE}, 0), call("finish", {}, 1),  # attempt 1: rejected in full
        call("search_replace", {"old": "BLOCK = 128\n", "new": "BLOCK = 256\n"}, 2), call("finish", {}, 3),  # repair
    ])
    ctx = RunContext.open(cfg, run, models={"scripted:w": model})
    try:
        graph = builder().compile(checkpointer=InMemorySaver())
        # the seed only: stop before the first generation asks the model anything else
        for update in graph.stream(initial_state(), {"configurable": {"thread_id": "t"}}, context=ctx,
                                   stream_mode="updates"):
            if "seed" in update:
                break
    finally:
        ctx.close()
    info = run.info()
    attempts = info.config.seed_attempts
    assert [a.verdict for a in attempts] == ["fail", "pass"], attempts
    assert run.kernel(info.config.seed_kernel) == SEED
    repair_prompt = model.seen[2][0].content
    assert "rejected by the full verifier" in repair_prompt and "1 of 8388608 elements" in repair_prompt
    # the repair started from the rejected kernel: its one edit applies to that source
    assert (FRAGILE, False) in calls and (SEED, False) in calls
