"""A run without a seed kernel sets its devices up while the model writes the first kernel (issue 24, item 5): the
evaluator's one-time set-up (a ready worker, the memory plan, the reference battery; on a GPU also the baselines)
starts before the writer's model call returns, a later evaluation reuses what it built instead of building it
again, and a device that cannot be set up neither ends the run nor holds the writer up."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import Field

from kernelwright.agents.context import RunConfig, RunContext
from kernelwright.evaluators import EvalPolicy, Evaluator, problem_from_source
from kernelwright.evaluators import evaluator as evaluator_module
from kernelwright.evaluators.reference import CALIBRATION_TRIALS, ReferenceSession
from kernelwright.graphs.optimize import builder, initial_state
from kernelwright.tools.evaluation import Evaluations
from kernelwright.tools.runstore import Run, RunStore

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests" / "graphs" / "add_problem.py"
SEED = (ROOT / "tests" / "graphs" / "add_seed.py").read_text()
sys.path.insert(0, str(Path(__file__).parent))
from scripted import Scripted, call  # noqa: E402

pytestmark = pytest.mark.timeout(180)

PREPARE_WAIT_S = 90.0
"""how long the scripted writer waits for the device to be prepared before it answers anyway (the test then fails)"""


class WaitingWriter(Scripted):
    """A writer whose first answer waits until the run's evaluations say `device` was prepared (as a real model's
    tens of seconds would let it be), at most `PREPARE_WAIT_S`; it notes whether it was, and the run's phase then."""

    device: str = "cpu"
    wait: bool = True
    evaluations: Any = None
    run: Any = None
    noted: dict[str, Any] = Field(default_factory=dict)

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        if not self.noted:
            self.noted["phase"] = self.run.progress().phase
            done = self.evaluations.prepared(self.device) if self.evaluations is not None else None
            self.noted["asked"] = done is not None
            self.noted["prepared"] = done is not None and (done.wait(PREPARE_WAIT_S) if self.wait else done.is_set())
        return super()._generate(messages, stop, run_manager, **kwargs)


def _run_seed(tmp_path: Path, wait: bool = True) -> tuple[Run, RunContext, WaitingWriter]:
    """Drive a CPU run without a seed kernel through its seed node (the first kernel written and verified)."""
    run = RunStore(tmp_path).create(str(PROBLEM), PROBLEM.read_text(), {})
    cfg = RunConfig(model="scripted:w", device="cpu", profile="off", branches=1, iterations=1, roofline_target=None)
    run.update(config={"settings": cfg.as_dict()})
    model = WaitingWriter(script=[call("write_kernel", {"source": SEED}, 0), call("finish", {}, 1)], wait=wait, run=run)
    ctx = RunContext.open(cfg, run, models={"scripted:w": model})
    model.evaluations = ctx.evaluations
    try:
        graph = builder().compile(checkpointer=InMemorySaver())
        for update in graph.stream(initial_state(), {"configurable": {"thread_id": "t"}}, context=ctx,
                                   stream_mode="updates"):
            if "seed" in update:
                break
    finally:
        ctx.close()
    return run, ctx, model


def _prepare_record(run: Run, device: str = "cpu") -> dict[str, Any]:
    return json.loads((run.path / "prepare" / f"{device}.json").read_text())


def test_the_device_is_prepared_before_the_writers_model_answers(tmp_path: Path) -> None:
    run, ctx, model = _run_seed(tmp_path)
    assert model.noted["asked"], "the run did not start preparing its device before the writer's model call"
    assert model.noted["prepared"], "the device was not prepared while the writer's model worked"
    assert "preparing cpu meanwhile" in (model.noted["phase"] or ""), model.noted["phase"]
    assert "writing the first kernel" in model.noted["phase"]
    record = _prepare_record(run)
    assert record["outcome"] == "ready", record
    assert record["phases"]["worker_wait_s"] >= 0 and "baseline_reference_s" in record["phases"], record
    info = run.info()
    assert info.config.seed_kernel and run.eval(info.config.seed_kernel)["verdict"] == "pass"
    # the first kernel's evaluation found the worker ready: no start-up on its critical path
    assert run.eval(info.config.seed_kernel)["phases"]["worker_wait_s"] < 1.0


def test_the_writers_quick_checks_run_beside_the_preparation(tmp_path: Path) -> None:
    """The writer's model answers at once: its quick check (the full verifier, on the CPU) runs on the evaluator
    the preparation is setting up, at the same time; both finish and the first kernel passes."""
    run, ctx, model = _run_seed(tmp_path, wait=False)
    assert model.noted["asked"]
    ctx.evaluations.prepared("cpu").wait(PREPARE_WAIT_S)  # type: ignore[union-attr]
    assert _prepare_record(run)["outcome"] == "ready"
    info = run.info()
    assert info.status != "failed" and run.eval(info.config.seed_kernel)["verdict"] == "pass"


def test_a_device_that_cannot_be_prepared_leaves_the_run_going(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The preparation's own failure (here: the device's evaluator cannot be built from the preparing thread) is
    recorded, never raised into the run: the writer is not held up and the first kernel is still verified."""
    real = Evaluations.evaluator

    def evaluator(self: Evaluations, device: str) -> Any:
        if threading.current_thread().name.startswith("kernelwright-prepare-"):
            raise RuntimeError("the device cannot start")
        return real(self, device)

    monkeypatch.setattr(Evaluations, "evaluator", evaluator)
    run, ctx, model = _run_seed(tmp_path)
    assert model.noted["asked"] and model.noted["prepared"]  # done with it (failed) while the model wrote
    record = _prepare_record(run)
    assert record["outcome"] == "not prepared: RuntimeError: the device cannot start", record
    info = run.info()
    assert info.status != "failed", info.stop_reason
    assert info.config.seed_kernel and run.eval(info.config.seed_kernel)["verdict"] == "pass"


def test_a_later_evaluation_reuses_what_prepare_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """`Evaluator.prepare` fills the caches `evaluate` reads: the footprint is traced once, the worker an evaluation
    takes is started already, the reference's gold model is built once and every family calibrated, so the first
    evaluation after it calibrates nothing again."""
    traced: list[int] = []
    real_estimate = evaluator_module.estimate
    monkeypatch.setattr(evaluator_module, "estimate", lambda *a, **k: traced.append(1) or real_estimate(*a, **k))
    calibrating: list[bool] = []
    real_make = ReferenceSession._make_trial

    def make_trial(self: ReferenceSession, family: str, index: int, inputs: list[Any]) -> Any:
        made = real_make(self, family, index, inputs)
        if made is not None:
            calibrating.append(made[0].calibrating)
        return made

    monkeypatch.setattr(ReferenceSession, "_make_trial", make_trial)
    problem = problem_from_source(PROBLEM.read_text(), str(PROBLEM))
    with Evaluator(problem, "cpu", EvalPolicy(trials=CALIBRATION_TRIALS)) as ev:
        record = ev.prepare()
        assert record["outcome"] == "ready", record
        assert traced == [1]
        assert calibrating and any(calibrating)  # prepare's battery calibrated the families
        gold = ev.reference._gold_model
        assert gold is not None
        calibrating.clear()
        result = ev.evaluate(SEED)
        assert result.verdict == "pass", result.detail
        assert traced == [1], "the footprint was traced again"
        assert calibrating and not any(calibrating), "the first evaluation calibrated the reference again"
        assert ev.reference._gold_model is gold
        assert result.phases["worker_wait_s"] < 1.0, result.phases


def test_prepare_has_a_worker_ready_for_the_quick_check_and_one_for_the_verification() -> None:
    """The writer's `finish` runs a quick check before the first kernel's verification, and each takes a fresh
    worker: both must find one ready (with one ready, the verification waited 5.7 s for the next one's start-up
    on an H200)."""
    problem = problem_from_source(PROBLEM.read_text(), str(PROBLEM))
    with Evaluator(problem, "cpu", EvalPolicy(trials=1)) as ev:
        assert ev.prepare()["outcome"] == "ready"
        assert len(ev.pool._ready) >= 2 and all(w._ready for w in list(ev.pool._ready)[:2])
        quick = ev.evaluate(SEED, quick=True)
        full = ev.evaluate(SEED)
        assert quick.verdict == "pass" and full.verdict == "pass", (quick.detail, full.detail)
        assert quick.phases["worker_wait_s"] < 1.0 and full.phases["worker_wait_s"] < 1.0, (quick.phases,
                                                                                           full.phases)


def test_prepare_never_raises_for_a_problem_it_cannot_set_up() -> None:
    """A reference whose forward fails: `prepare` says so in its outcome (the evaluation will give the verdict)."""
    source = PROBLEM.read_text().replace("return x + y", "raise ValueError('no forward here')")
    with Evaluator(problem_from_source(source, "broken.py"), "cpu", EvalPolicy(trials=1)) as ev:
        record = ev.prepare()
    assert record["outcome"].startswith("bad_problem:") and "no forward here" in record["outcome"], record
