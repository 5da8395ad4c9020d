"""A timed child that lost to its parent is profiled when a model analyses, and the next prompts' history line of
its step carries its longest kernel's Nsight Compute figures: a relay model on level1/35_GroupNorm_ (H200, issue 23)
said "rejected children get no profile, so step 4's cause is a guess". The builtin reads only its parent's
profile, so its runs profile the seed and elites alone.

The real graph runs as on a GPU (device cuda:0, timed verdicts from a fake evaluator) with a scripted model;
`Evaluations.collect_evidence` is replaced by one that stores a recorded Nsight Compute profile."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from kernelwright.agents.context import RunConfig, RunContext
from kernelwright.agents.roles import archiving
from kernelwright.evaluators.profiling import NcuKernel, NcuReport, Profile
from kernelwright.graphs.optimize import builder, initial_state
from kernelwright.tools.evaluation import Evaluations
from kernelwright.tools.runstore import RunStore

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests" / "graphs" / "add_problem.py"
SEED = (ROOT / "tests" / "graphs" / "add_seed.py").read_text()
sys.path.insert(0, str(ROOT / "tests" / "agents"))
from scripted import DIAGNOSIS, PROPOSAL, Scripted, call  # noqa: E402
from test_tuning import TimedEvaluator  # noqa: E402

pytestmark = pytest.mark.timeout(120)

SLOWER = SEED.replace('"""o = x + y"""', '"""o = x + y, persistent (slower here)"""')
STRUCTURAL = {"category": "fusion", "what": "a persistent grid", "why": "fewer launches", "predicted_speedup": 1.3,
              "risk": "medium", "key": "persistent-grid"}


def ms(source: str) -> float:
    return 1.4 if "persistent" in source else 0.9 if "BLOCK = 512" in source else 1.0


def run_two_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: Scripted | None,
                  profile: str = "auto") -> tuple[Any, list[str]]:
    profiled: list[str] = []
    monkeypatch.setattr(archiving, "ncu_unavailable_reason", lambda: None)  # as on a GPU host with Nsight Compute

    def collect(self: Evaluations, h: str, device: str, ncu: bool = True) -> Profile:
        profiled.append(h)
        prof = Profile(verdict="pass", ncu=NcuReport(available=True, kernels=[
            NcuKernel(name="add_kernel", metrics={"duration_us": 812.0, "dram_read_bytes": 9.1e9,
                                                  "dram_write_bytes": 4.5e9, "achieved_occupancy_pct": 23.0}),
            NcuKernel(name="tiny_kernel", metrics={"duration_us": 3.0})]))
        self.run.put_blob("profiles", f"{h}.json", prof.model_dump_json())
        return prof

    calls: list[str] = []
    monkeypatch.setattr(Evaluations, "evaluator", lambda self, device: TimedEvaluator(ms, calls))
    monkeypatch.setattr(Evaluations, "collect_evidence", collect)
    run = RunStore(tmp_path).create(str(PROBLEM), PROBLEM.read_text(), {})
    cfg = RunConfig(model="scripted:t" if model else "builtin", device="cuda:0", profile=profile, trials=1,
                    branches=1, iterations=2, roofline_target=None, tune_budget=0)
    run.update(config={"seed_kernel": run.put_kernel(SEED), "settings": cfg.as_dict()})
    ctx = RunContext.open(cfg, run, models={"scripted:t": model} if model else None)
    try:
        list(builder().compile(checkpointer=InMemorySaver()).stream(
            initial_state(), {"configurable": {"thread_id": "t"}}, context=ctx, stream_mode="updates"))
    finally:
        ctx.close()
    return run, profiled


def test_a_model_is_shown_why_a_timed_child_lost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = Scripted(script=[
        call("Diagnosis", DIAGNOSIS, 0), call("Proposal", STRUCTURAL, 1),
        call("write_kernel", {"source": SLOWER}, 2), call("finish", {}, 3),
        call("Diagnosis", DIAGNOSIS, 4), call("Proposal", PROPOSAL, 5),
        call("search_replace", {"old": "BLOCK = 256\n", "new": "BLOCK = 512\n"}, 6), call("finish", {}, 7)])
    run, profiled = run_two_steps(tmp_path, monkeypatch, model)
    assert not model.script, "every scripted answer was used"
    first, second = run.trace()
    assert first["decision"]["decision"] == "rejected" and second["decision"]["decision"] == "elite"
    # the seed, the rejected child and the elite were each profiled once
    assert profiled == [first["parent"], first["child"], second["child"]]
    analyst, strategist = (model.seen[i][0].content for i in (4, 5))
    line = next(ln for ln in strategist.splitlines() if ln.startswith("- persistent-grid: rejected"))
    assert "child's Nsight Compute, its longest kernel: add_kernel: duration 812.0 µs; DRAM read 9.1 GB + write " \
           "4.5 GB = 13.6 GB" in line and "occupancy achieved 23%" in line and "tiny_kernel" not in line, line
    assert "child's Nsight Compute, its longest kernel: add_kernel" in analyst


def test_the_builtin_profiles_only_the_seed_and_elites(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run, profiled = run_two_steps(tmp_path, monkeypatch, None)
    steps = run.trace()
    elites = [s["child"] for s in steps if s["decision"]["decision"] == "elite"]
    assert len(steps) == 2 and len(elites) < 2, [s["decision"]["decision"] for s in steps]
    # a timed child the archive did not keep, which a model's run would have profiled (not the last generation's)
    assert steps[0]["decision"]["decision"] != "elite" and steps[0]["decision"]["measured_speedup"] is not None
    assert profiled == [steps[0]["parent"], *elites]


@pytest.mark.parametrize("case", ["last generation", "torch profile"])
def test_a_loser_whose_headline_nobody_reads_is_not_profiled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           case: str) -> None:
    """A profile takes about a minute and a half at a real size: a loser of the run's last generation (no prompt
    follows) or of a run whose profiles have no Nsight Compute figures (`--profile torch`) is not profiled."""
    slower2 = SLOWER.replace("persistent (slower here)", "persistent, again (slower here)")
    model = Scripted(script=[
        call("Diagnosis", DIAGNOSIS, 0), call("Proposal", STRUCTURAL, 1),
        call("write_kernel", {"source": SLOWER}, 2), call("finish", {}, 3),
        call("Diagnosis", DIAGNOSIS, 4), call("Proposal", {**STRUCTURAL, "key": "persistent-again"}, 5),
        call("write_kernel", {"source": slower2}, 6), call("finish", {}, 7)])
    run, profiled = run_two_steps(tmp_path, monkeypatch, model, profile="torch" if case == "torch profile" else "auto")
    first, second = run.trace()
    assert first["decision"]["decision"] == second["decision"]["decision"] == "rejected"
    assert profiled == ([first["parent"]] if case == "torch profile" else [first["parent"], first["child"]])
