"""Structure, then tuning (issue 23, item 7): a verified structural child's knobs are swept by the builtin before
the archive judges it, so a good structure is never rejected for a bad block size.

The sweep (`agents.tuning.tune`) is driven by a fake evaluation that times sources by their knob values; the loop
runs the real graph with a scripted model and a fake evaluation service that answers as a GPU does (timed), so
the run takes the GPU path without a GPU. No network, no GPU, no Triton interpreter."""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from kernelwright.agents.archive import FINAL_JUDGEMENTS
from kernelwright.agents.context import RunConfig, RunContext
from kernelwright.agents.moves import knobs
from kernelwright.agents.records import StepRecord
from kernelwright.agents.tuning import NOT_ON_CPU, OFF, TuneRecord, tune
from kernelwright.evaluators import EvalResult, Timing
from kernelwright.graphs.optimize import builder, initial_state
from kernelwright.tools.evaluation import Evaluations
from kernelwright.tools.runstore import RunStore

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests" / "graphs" / "add_problem.py"
SEED = (ROOT / "tests" / "graphs" / "add_seed.py").read_text()  # knobs: BLOCK = 256 (tiling), NUM_WARPS = 4 (warps)
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(ROOT / "tests" / "kernelwright"))
from fake_evaluations import fake_evaluations  # noqa: E402
from scripted import DIAGNOSIS, PROPOSAL, Scripted, call  # noqa: E402

pytestmark = pytest.mark.timeout(120)

# a structural change, as far as the loop can tell: a different kernel body, written at the seed's knob values
FUSED = SEED.replace('"""o = x + y"""', '"""o = x + y, one pass (the structural change)"""')
STRUCTURAL = {"category": "fusion", "what": "one pass over x and y", "why": "fewer bytes moved",
              "predicted_speedup": 1.3, "risk": "medium", "key": "fuse-one-pass"}


def timed(ms: float, band: float = 0.02, suspect: tuple[str, ...] = ()) -> EvalResult:
    t = Timing(median_ms=ms, p25_ms=ms, p75_ms=ms, min_ms=ms, max_ms=ms, reps=30, wall_median_ms=ms, noise_band=band,
               eager_ms=2.0, speedup_vs_eager=2.0 / ms, vs_eager="faster", best_baseline_ms=2.0,
               best_baseline="eager", suspect=list(suspect))
    return EvalResult(verdict="pass", reason="ok", detail="fake: verified and timed", device="cuda:0", timing=t,
                      families=["base", "test_inputs"])


WRONG = EvalResult(verdict="fail", reason="wrong_output", detail="fake: judged wrong", device="cuda:0")


def values(source: str) -> tuple[int, int]:
    k = knobs(source)
    return k["BLOCK"].value, k["NUM_WARPS"].value


class FakeEvaluate:
    """Judges a source by its (BLOCK, NUM_WARPS); anything not in the table takes `default` ms."""

    def __init__(self, table: dict[tuple[int, int], EvalResult], default: float = 1.0) -> None:
        self.table, self.default = table, default
        self.calls: list[tuple[int, int]] = []
        self.sources: dict[str, str] = {}

    def __call__(self, source: str) -> tuple[str, EvalResult]:
        self.calls.append(values(source))
        h = hashlib.sha256(source.encode()).hexdigest()[:16]
        self.sources[h] = source
        return h, self.table.get(values(source), timed(self.default))


# -- the sweep ----------------------------------------------------------------------------------------------


def test_the_sweep_walks_to_the_better_block_size_and_keeps_it() -> None:
    ev = FakeEvaluate({(512, 4): timed(0.8), (1024, 4): timed(0.7), (2048, 4): timed(0.75),
                       (1024, 8): timed(0.69)})  # NUM_WARPS 8: 1.4 % better, inside the 2 % band
    rec = tune(FUSED, timed(1.0), ev, budget=6, child_hash="untuned")
    # BLOCK up while it wins, stopping at 2048; then the warps either way from the best so far
    assert ev.calls == [(512, 4), (1024, 4), (2048, 4), (1024, 8), (1024, 2)]
    assert rec.chose == "BLOCK=1024" and rec.chosen_ms == 0.7 and rec.from_ == "untuned" and rec.evaluations == 5
    assert rec.child is not None and values(ev.sources[rec.child]) == (1024, 4)
    assert "# the structural change" not in ev.sources[rec.child] and "one pass" in ev.sources[rec.child]
    assert [v.key for v in rec.tried] == ["BLOCK=512", "BLOCK=1024", "BLOCK=2048", "BLOCK=1024,NUM_WARPS=8",
                                          "BLOCK=1024,NUM_WARPS=2"]
    assert rec.words().startswith("tuned after the structural change: 5 variants in")
    assert "BLOCK 256 -> 1024 gave 1 -> 0.7 ms (chosen)" in rec.words()
    # the trace's JSON form names the untuned child `from`, and reads back
    data = rec.model_dump(mode="json")
    assert data["from"] == "untuned" and TuneRecord.model_validate(json.loads(json.dumps(data))) == rec


def test_the_sweep_stays_within_its_budget() -> None:
    ev = FakeEvaluate({(512, 4): timed(0.8), (1024, 4): timed(0.7), (2048, 4): timed(0.6)})
    rec = tune(FUSED, timed(1.0), ev, budget=2)
    assert len(ev.calls) == rec.evaluations == 2 and rec.chose == "BLOCK=1024"
    assert rec.note == "its budget of 2 evaluations was spent"
    off = FakeEvaluate({})
    rec = tune(FUSED, timed(1.0), off, budget=0)
    assert off.calls == [] and rec.note == OFF and rec.chose is None and rec.words() == OFF


def test_the_sweep_stops_before_an_evaluation_the_time_left_cannot_cover() -> None:
    now = [0.0]

    class Slow(FakeEvaluate):
        def __call__(self, source: str) -> tuple[str, EvalResult]:
            now[0] += 10.0  # each evaluation takes 10 s
            return super().__call__(source)

    ev = Slow({(512, 4): timed(0.8), (1024, 4): timed(0.7), (2048, 4): timed(0.6)})
    rec = tune(FUSED, timed(1.0), ev, budget=6, time_left_s=25.0, clock=lambda: now[0])
    assert rec.evaluations == 2 and "time budget" in (rec.note or "") and rec.chose == "BLOCK=1024"


def test_a_failing_or_suspect_variant_is_recorded_and_passed_over() -> None:
    ev = FakeEvaluate({(512, 4): WRONG, (128, 4): timed(0.8), (64, 4): timed(0.9),
                       (128, 8): timed(0.1, suspect=("above the roofline",))})
    rec = tune(FUSED, timed(1.0), ev, budget=6)
    assert ev.calls[:3] == [(512, 4), (128, 4), (64, 4)]
    assert rec.chose == "BLOCK=128" and values(ev.sources[rec.child or ""]) == (128, 4)
    by_key = {v.key: v for v in rec.tried}
    assert by_key["BLOCK=512"].verdict == "fail" and by_key["BLOCK=512"].reason == "wrong_output"
    assert by_key["BLOCK=512"].median_ms is None
    assert by_key["BLOCK=128,NUM_WARPS=8"].reason == "suspect"  # ten times faster, and not believed


def test_the_child_is_kept_when_no_variant_beats_the_noise_band() -> None:
    ev = FakeEvaluate({}, default=0.99)  # every variant 1 % faster: inside the 2 % band
    rec = tune(FUSED, timed(1.0), ev, budget=6)
    assert rec.evaluations == 4 and rec.chose is None and rec.child is None and rec.chosen_ms is None
    assert "none beat the child's 1 ms by more than the noise band (±2.0%): kept as written" in rec.words()


def test_an_untimed_child_is_not_tuned() -> None:
    ev = FakeEvaluate({})
    untimed = EvalResult(verdict="pass", reason="ok", device="cuda:0", timing_unavailable="a shared GPU")
    rec = tune(FUSED, untimed, ev, budget=6)
    assert ev.calls == [] and rec.evaluations == 0 and rec.note == "not tuned: the child was not timed (a shared GPU)"


# -- the loop -----------------------------------------------------------------------------------------------


class TimedEvaluator:
    """An evaluator that answers as one on a GPU does: verified and timed (quick checks untimed). Times come from
    `ms(source)`; every full evaluation's source is recorded."""

    def __init__(self, ms: Any, calls: list[str]) -> None:
        self.ms, self.calls = ms, calls

    def evaluate(self, source: str, quick: bool = False) -> EvalResult:
        if quick:
            return EvalResult(verdict="pass", reason="ok", detail="fake quick check", device="cuda:0",
                              families=["base", "test_inputs"])
        self.calls.append(source)
        return timed(self.ms(source))

    def close(self) -> None:
        pass


def fused_ms(source: str) -> float:
    """The seed takes 1 ms. The fused kernel is slower at the seed's block size and much faster at a larger one."""
    if "one pass" not in source:
        return 1.0
    return {256: 1.1, 512: 0.8, 1024: 0.6}.get(values(source)[0], 0.65)


def gpu_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answers: list[Any], **config: Any
            ) -> tuple[Any, list[str], StepRecord]:
    """One generation of the real graph, as on a GPU (device cuda:0, timed verdicts), with a scripted model."""
    calls: list[str] = []
    monkeypatch.setattr(Evaluations, "evaluator", lambda self, device: TimedEvaluator(fused_ms, calls))
    run = RunStore(tmp_path).create(str(PROBLEM), PROBLEM.read_text(), {})
    cfg = RunConfig(model="scripted:t", device="cuda:0", profile="off", trials=1, branches=1, iterations=1,
                    roofline_target=None, **config)
    assert not cfg.on_cpu
    run.update(config={"seed_kernel": run.put_kernel(SEED), "settings": cfg.as_dict()})
    model = Scripted(script=answers)
    ctx = RunContext.open(cfg, run, models={"scripted:t": model})
    try:
        list(builder().compile(checkpointer=InMemorySaver()).stream(initial_state(), {"configurable": {"thread_id": "t"}},
                                                                   context=ctx, stream_mode="updates"))
    finally:
        ctx.close()
    assert not model.script, "every scripted answer was used"
    (record,) = [StepRecord.model_validate(r) for r in run.trace()]
    # the run's best was judged twice more when it stopped (agents/archive.recheck_best): set those calls apart
    final = calls[-FINAL_JUDGEMENTS:]
    assert final == [run.kernel(run.info().best_kernel)] * FINAL_JUDGEMENTS, "the best is judged again at the end"
    del calls[-FINAL_JUDGEMENTS:]
    return run, calls, record


def structural_step() -> list[Any]:
    return [call("Diagnosis", DIAGNOSIS, 0), call("Proposal", STRUCTURAL, 1),
            call("write_kernel", {"source": FUSED}, 2), call("finish", {}, 3)]


def test_a_structural_child_is_admitted_at_its_tuned_block_size(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    run, calls, rec = gpu_run(tmp_path, monkeypatch, structural_step())
    untuned = run.put_kernel(FUSED)
    assert rec.tuning is not None and rec.tuning.from_ == untuned and rec.tuning.chose == "BLOCK=1024"
    # the archive judged the tuned child: the one step is parent -> tuned child, an elite
    assert rec.child == rec.tuning.child and rec.child != untuned and rec.decision.child_id == rec.child
    assert rec.decision.decision == "elite" and rec.decision.measured_speedup == pytest.approx(1 / 0.6)
    assert rec.outcome is not None and rec.outcome.median_ms == 0.6
    assert rec.result is not None and rec.result.timing is not None and rec.result.timing.median_ms == 0.6
    child = run.kernel(rec.child)
    assert values(child) == (1024, 4) and "one pass" in child
    assert FUSED == run.kernel(untuned)  # the untuned child's kernel stays in the run
    # seed, child, then the variants (none past the budget), then the tuned child judged again with fresh draws
    # before the archive may call it better than its parent
    assert calls[:2] == [SEED, FUSED] and 1 <= len(calls) - 3 == rec.tuning.evaluations <= 6
    assert calls[-1] == child and rec.confirmation is not None and rec.confirmation.verdict == "pass"
    archive = run.archive(1)
    assert rec.child in archive["entries"] and untuned not in archive["entries"] and len(archive["steps"]) == 1

    # the trace printer, the report and the export show the sweep as part of the step
    from typer.testing import CliRunner

    from kernelwright import export
    from kernelwright.cli import app
    from kernelwright.report import write_report

    shown = CliRunner().invoke(app, ["trace", run.id, "--run-dir", str(tmp_path)])
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())  # the console wraps long lines
    assert "tuning: tuned after the structural change: 5 variants in" in text
    assert "BLOCK 256 -> 1024 gave 1.1 -> 0.6 ms (chosen)" in text and f"(untuned child {untuned})" in text
    page = write_report(run, tmp_path / "report.html").read_text()
    assert "tuned after the structural change" in page and "BLOCK 256 -&gt; 1024" in page and "chosen" in page
    (step,) = export.step_exports(run, [rec])
    assert step.tuning is not None and step.tuning.chose == "BLOCK=1024" and step.child is not None
    assert step.child.hash == rec.child and step.diff and "+BLOCK = 1024" in step.diff and "one pass" in step.diff
    assert rec.coder.diff and "+BLOCK = 1024" not in rec.coder.diff  # the coder's own change is kept as it was


def test_without_tuning_the_same_structural_child_is_rejected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The contrast: judged at the block size it was written with, the structure loses to its parent."""
    run, calls, rec = gpu_run(tmp_path, monkeypatch, structural_step(), tune_budget=0)
    assert rec.tuning is not None and rec.tuning.note == OFF and rec.tuning.evaluations == 0
    assert rec.child == run.put_kernel(FUSED) and rec.decision.decision == "rejected" and calls == [SEED, FUSED]


def test_a_knob_proposal_is_never_tuned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    answers = [call("Diagnosis", DIAGNOSIS, 0), call("Proposal", PROPOSAL, 1),  # tiling: BLOCK 256 -> 512
               call("search_replace", {"old": "BLOCK = 256\n", "new": "BLOCK = 512\n"}, 2), call("finish", {}, 3)]
    run, calls, rec = gpu_run(tmp_path, monkeypatch, answers)
    assert rec.proposal is not None and rec.proposal.category == "tiling"
    assert rec.tuning is None and len(calls) == 2 and rec.child == run.put_kernel(calls[1])
    assert re.search(r"^BLOCK = 512$", run.kernel(rec.child), re.M)


def test_on_the_cpu_a_structural_child_is_not_tuned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake_evaluations(monkeypatch)  # verified, untimed: as on the CPU
    run = RunStore(tmp_path).create(str(PROBLEM), PROBLEM.read_text(), {})
    cfg = RunConfig(model="scripted:t", device="cpu", trials=1, branches=1, iterations=1)
    run.update(config={"seed_kernel": run.put_kernel(SEED), "settings": cfg.as_dict()})
    ctx = RunContext.open(cfg, run, models={"scripted:t": Scripted(script=structural_step())})
    try:
        list(builder().compile(checkpointer=InMemorySaver()).stream(initial_state(), {"configurable": {"thread_id": "c"}},
                                                                   context=ctx, stream_mode="updates"))
    finally:
        ctx.close()
    (rec,) = [StepRecord.model_validate(r) for r in run.trace()]
    assert rec.tuning is not None and rec.tuning.note == NOT_ON_CPU and rec.tuning.evaluations == 0
    assert rec.tuning.words() == "not tuned: nothing is timed on the CPU"
    assert rec.child == run.put_kernel(FUSED) and rec.decision.decision == "unmeasured"
    assert FUSED in calls and not any("BLOCK = 512" in c for c in calls)


def test_the_tune_budget_is_a_run_setting_and_a_flag() -> None:
    from typer.testing import CliRunner

    from kernelwright.cli import app
    from kernelwright.cli import settings_config

    common = dict(model="builtin", base_url=None, role_models=[], iterations=None, time_budget=None, branches=1,
                  device="cpu", precision=None, trials=1, token_budget=None, cost_budget=None, prices=None,
                  profile="off", review="none")
    assert settings_config("optimize", common).tune_budget == RunConfig().tune_budget == 6
    assert settings_config("optimize", {**common, "tune_budget": 0}).tune_budget == 0
    assert RunConfig.from_dict({"tune_budget": 3}).tune_budget == 3 and RunConfig.from_dict({}).tune_budget == 6
    shown = CliRunner().invoke(app, ["optimize", "--help"], terminal_width=200)
    assert "--tune-budget" in shown.output, shown.output


class FragileEvaluator(TimedEvaluator):
    """As `TimedEvaluator`, but the second full judgement of a source fails (a kernel that fails one draw in a few)."""

    def evaluate(self, source: str, quick: bool = False) -> EvalResult:
        if not quick and source in self.calls:
            self.calls.append(source)
            return EvalResult(verdict="fail", reason="wrong_output", detail="fake: heavy_tailed draw out of tolerance",
                              device="cuda:0")
        return super().evaluate(source, quick)


def test_a_faster_child_failing_a_second_judgement_is_rejected_and_never_trusted_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A child faster than its parent is judged again with fresh draws before the archive may call it better; a
    failure there is the step's verdict, and the run's cached verdict becomes that failure."""
    calls: list[str] = []
    monkeypatch.setattr(Evaluations, "evaluator", lambda self, device: FragileEvaluator(fused_ms, calls))
    run = RunStore(tmp_path).create(str(PROBLEM), PROBLEM.read_text(), {})
    cfg = RunConfig(model="scripted:t", device="cuda:0", profile="off", trials=1, branches=1, iterations=1,
                    roofline_target=None, tune_budget=0)
    run.update(config={"seed_kernel": run.put_kernel(SEED), "settings": cfg.as_dict()})
    faster = FUSED.replace("BLOCK = 256\n", "BLOCK = 1024\n")  # 0.6 ms against the seed's 1.0
    answers = [call("Diagnosis", DIAGNOSIS, 0), call("Proposal", STRUCTURAL, 1),
               call("write_kernel", {"source": faster}, 2), call("finish", {}, 3)]
    ctx = RunContext.open(cfg, run, models={"scripted:t": Scripted(script=answers)})
    try:
        list(builder().compile(checkpointer=InMemorySaver()).stream(initial_state(), {"configurable": {"thread_id": "t"}},
                                                                   context=ctx, stream_mode="updates"))
    finally:
        ctx.close()
    (rec,) = [StepRecord.model_validate(r) for r in run.trace()]
    # judged, then judged again; the seed, still the best, judged again when the run stopped: this evaluator fails
    # every second judgement, so the seed is revoked too and the run reports no best kernel
    assert calls == [SEED, faster, faster, SEED] and run.info().best_kernel is None
    assert rec.confirmation is not None and rec.confirmation.verdict == "fail"
    assert rec.verdict == "fail" and rec.decision.decision != "elite"
    assert rec.child not in run.archive(1)["entries"]
    assert run.eval(rec.child)["verdict"] == "fail" and "second judgement with fresh draws" in run.eval(rec.child)["detail"]


def test_a_child_no_faster_than_its_parent_is_not_judged_twice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run, calls, rec = gpu_run(tmp_path, monkeypatch, structural_step(), tune_budget=0)  # 1.1 ms against 1.0
    assert calls == [SEED, FUSED] and rec.confirmation is None


def test_what_a_sweep_measured_reaches_the_next_strategist_on_that_kernel() -> None:
    """The sweep's variants are measured facts about the kernel a later step starts from: the keys tried on it are
    not proposed again, each variant's time is shown, and a kernel the tuner changed says so in its label."""
    from kernelwright.agents.roles import tuning_seen

    tried = [{"key": "BLOCK_M=256", "median_ms": 0.536, "verdict": "pass", "reason": "ok"},
             {"key": "BLOCK_M=512", "median_ms": None, "verdict": "fail", "reason": "runtime_error"}]
    kept = [{"step_id": "g1b0", "tuning": {"from": "aaa", "from_ms": 0.506, "tried": tried, "chose": None}}]
    keys, text, label = tuning_seen(kept, "aaa")
    assert keys == ["BLOCK_M=256", "BLOCK_M=512"] and label == ""
    assert "BLOCK_M=256 0.536 ms" in text and "BLOCK_M=512 fail (runtime_error)" in text and "none chosen" in text
    chosen = [{"step_id": "g3b0", "tuning": {"from": "bbb", "child": "ccc", "tried": tried, "chose": "BLOCK_M=256"}}]
    keys, text, label = tuning_seen(chosen, "ccc")
    assert keys == [] and "tuned by the builtin after the step: BLOCK_M=256" in label and "chosen: BLOCK_M=256" in text
    assert tuning_seen(chosen, "zzz") == ([], "", "")
    # a failure says why, in the verifier's words (level2/37: "runtime_error" alone said nothing)
    why = {**tried[1], "detail": "out of resource: shared memory, Required: 278552, Hardware limit: 232448"}
    _, text, _ = tuning_seen([{"step_id": "g1b0", "tuning": {"from": "aaa", "tried": [why], "chose": None}}], "aaa")
    assert "BLOCK_M=512 fail (runtime_error: out of resource: shared memory, Required: 278552" in text


def test_the_strategist_is_shown_the_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelwright.agents import llm
    from kernelwright.agents.schemas import Diagnosis

    m = Scripted(script=[call("Proposal", PROPOSAL, 0)])
    llm.strategise(m, problem="P", parent=SEED, standing="s", diagnosis=Diagnosis(**DIAGNOSIS), history="",
                   failed=["BLOCK_M=256"], usage=llm.Usage(), swept="- the builtin's sweep: BLOCK_M=256 0.536 ms")
    prompt = m.seen[0][0].content
    assert "BLOCK_M=256\nWhat the builtin's tuning measured around this kernel:\n- the builtin's sweep" in prompt


def test_the_analyst_is_shown_the_sweep_too() -> None:
    """A relay model analysing a kernel whose block sizes and warps the builtin had timed was not told, and asked for
    it: the analyst reads what the sweep measured beside the lineage's last steps."""
    from kernelwright.agents import llm

    m = Scripted(script=[call("Diagnosis", DIAGNOSIS, 0)])
    llm.analyse(m, problem="P", parent=SEED, evaluation="e", profile="p", usage=llm.Usage(), history="g1b0 ...",
                swept="- the builtin's sweep of step g2b0's child (5.671 ms as written): BLOCK=8192 6.681 ms")
    prompt = m.seen[0][0].content
    assert "g1b0 ...\nWhat the builtin's tuning measured around this kernel:\n- the builtin's sweep of step g2b0" \
        in prompt
