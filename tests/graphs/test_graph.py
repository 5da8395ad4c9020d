"""The graph compiled in process with an in-memory checkpointer, driven by a scripted model: what each
node hands the next, what the checkpoints hold (ids and small summaries, never sources), and the step
record the archive writes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from kernelwright.agents.context import RunConfig, RunContext
from kernelwright.agents.records import StepRecord
from kernelwright.graphs.optimize import builder, initial_state
from kernelwright.tools.runstore import RunStore

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests" / "graphs" / "add_problem.py"
SEED = ROOT / "tests" / "graphs" / "add_seed.py"
sys.path.insert(0, str(ROOT / "tests" / "agents"))
from scripted import DIAGNOSIS, PROPOSAL, Scripted, call  # noqa: E402


@pytest.mark.timeout(300)
def test_one_generation_in_process(tmp_path: Path) -> None:
    run = RunStore(tmp_path).create(str(PROBLEM), PROBLEM.read_text(), {})
    seed_hash = run.put_kernel(SEED.read_text())
    config = RunConfig(model="scripted:g", device="cpu", trials=1, branches=1, iterations=1)
    run.update(config={"seed_kernel": seed_hash, "settings": config.as_dict()})
    model = Scripted(script=[
        call("Diagnosis", DIAGNOSIS, 0),
        call("Proposal", PROPOSAL, 1),
        call("search_replace", {"old": "BLOCK = 256\n", "new": "BLOCK = 512\n"}, 2),
        call("finish", {}, 3),
    ])
    ctx = RunContext.open(config, run, models={"scripted:g": model})
    graph = builder().compile(checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "t"}}
    try:
        updates = list(graph.stream(initial_state(), thread, context=ctx, stream_mode="updates"))
    finally:
        ctx.close()
    assert [next(iter(u)) for u in updates] == ["seed", "select", "branch", "archive"]
    assert not model.script, "every scripted answer was used"

    final = graph.get_state(thread).values
    assert final["stop"] == "iteration budget reached (1 steps)" and final["generation"] == 1
    assert final["archive"]["steps"] == 1 and final["archive"]["version"] == 1
    # the checkpoints hold references, never kernel sources or evaluation results
    for snapshot in graph.get_state_history(thread):
        assert "ModelNew" not in repr(snapshot.values)

    branch = updates[2]["branch"]["results"][0]
    assert branch["step_id"] == "g1b0" and branch["parent"] == seed_hash and branch["verdict"] == "pass"
    (record,) = [StepRecord.model_validate(r) for r in run.trace()]
    assert record.proposal is not None and record.proposal.key == "BLOCK=512"
    assert record.diagnosis is not None and record.diagnosis.bottleneck == "memory"
    assert record.child is not None and "BLOCK = 512" in run.kernel(record.child)
    assert record.llm["coder"].calls == 2 and record.llm["analyst"].model == "scripted:g"
    assert record.decision.parent_id == seed_hash and record.result is not None and record.result.verdict == "pass"


def test_the_run_context_is_not_in_the_state(tmp_path: Path) -> None:
    """A second context for the same run (a resume) is built from the saved config alone."""
    run = RunStore(tmp_path).create(str(PROBLEM), PROBLEM.read_text(), {})
    config = RunConfig(device="cpu", prices={"x:y": [1.0, 2.0]}, role_models={"coder": "x:y"})
    run.update(config={"settings": config.as_dict()})
    again = RunConfig.from_dict({**run.info().config.settings, "a_key_from_the_future": 1})
    assert again == config and again.model_for("coder") == "x:y" and again.model_for("analyst") == "builtin"
    a, b = RunContext.open(config, run), RunContext.open(again, run)
    a.request_stop()
    assert a.stop_requested and not b.stop_requested
    assert a.models is not b.models and a.evaluations is not b.evaluations
