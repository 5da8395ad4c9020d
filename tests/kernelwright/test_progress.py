"""Progress anywhere (issue 24, item 2), the time budget over resumes, and the problem named before the seed.

- output that is not a terminal (a log, a pipe, CI) gets one plain line per event as it happens: the run's start,
  the seed's verdict, each step, a model call waiting long (which role), the end with the commands to look at
  the run or resume it;
- the live view names what the run is doing now: the seed being verified (and the GPUs warmed), the first kernel
  being written, which role waits on the model and for how long;
- a run's time budget counts the time it was driven, so a run resumed hours later gets the rest of it.

Runs use fake evaluators (`fake_evaluations`) and scripted models (`tests/agents/scripted.py`), so each takes
seconds.
"""

from __future__ import annotations

import io
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from kernelwright import api
from kernelwright.agents.context import RunConfig
from kernelwright.optimize_command import _view, run_optimize
from kernelwright.tools.runstore import ModelWait, Progress, RunStore

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests" / "graphs" / "add_problem.py"
SEED = ROOT / "tests" / "graphs" / "add_seed.py"
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(ROOT / "tests" / "agents"))
from fake_evaluations import fake_evaluations  # noqa: E402
from scripted import DIAGNOSIS, PROPOSAL, Scripted, call  # noqa: E402

pytestmark = pytest.mark.timeout(120)

MODEL = "scripted:progress"


def one_step() -> list[Any]:
    """A model-driven step on the add seed: diagnosis, proposal, BLOCK 256 -> 512, finish."""
    return [call("Diagnosis", DIAGNOSIS, 0), call("Proposal", PROPOSAL, 1),
            call("search_replace", {"old": "BLOCK = 256\n", "new": "BLOCK = 512\n"}, 2), call("finish", {}, 3)]


class Gated:
    """A scripted model whose call number `hold` waits until the test opens `gate` (bind_tools returns itself)."""

    def __init__(self, script: list[Any], hold: int) -> None:
        self.inner, self.hold, self.calls = Scripted(script=script), hold, 0
        self.gate, self.held = threading.Event(), threading.Event()

    def bind_tools(self, tools: Any, **kwargs: Any) -> Gated:
        return self

    def invoke(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
        n, self.calls = self.calls, self.calls + 1
        if n == self.hold:
            self.held.set()
            assert self.gate.wait(60), "the test never opened the gate"
        return self.inner.invoke(messages)


def wait_for(what: Any, timeout: float = 60.0) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = what()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


# -- plain lines when the output is not a terminal ----------------------------------------------------------


def test_a_piped_optimize_prints_one_line_per_event(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelwright import cli

    fake_evaluations(monkeypatch)
    runs = tmp_path / "runs"
    r = CliRunner().invoke(cli.app, ["optimize", str(PROBLEM), "--seed-kernel", str(SEED), "--iterations", "2",
                                     "--branches", "1", "--device", "cpu", "--trials", "1", "--run-dir", str(runs),
                                     "--allow-unconfined"])
    assert r.exit_code == 0, r.output
    run_id = next(p.name for p in runs.iterdir() if p.is_dir())
    lines = r.output.splitlines()

    def index(pattern: str) -> int:
        found = [i for i, line in enumerate(lines) if re.search(pattern, line)]
        assert len(found) == 1, (pattern, r.output)
        return found[0]

    start = index(rf"^\d\d:\d\d:\d\d run {run_id} started: problem .*add_problem\.py, device cpu, policy builtin, "
                  r"1 branch, budget 2 steps")
    seed = index(r"^\d\d:\d\d:\d\d seed [0-9a-f]{12}: pass ok, untimed")
    g1 = index(r"^\d\d:\d\d:\d\d step g1b0: \S+ -> pass ok; unmeasured; best [0-9a-f]{12} \(untimed")
    g2 = index(r"^\d\d:\d\d:\d\d step g2b0: ")
    end = index(rf"^run {run_id}: finished \(iteration budget reached \(2 steps\)\)")
    look = index(rf"^look at it: kernelwright trace {run_id} --run-dir {re.escape(str(runs))}; kernelwright report")
    assert start < seed < g1 < g2 < end < look, r.output
    assert not any(line.split()[:1] == ["status"] for line in lines), r.output  # no live view's table


def test_lines_come_as_the_run_goes_and_a_long_model_call_is_told(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The model's first call (the analyst of g1b0) is held: the start and the seed's lines are in the log file
    before it returns, and, held past the (shortened) notice, a line says which role waits; then the step."""
    fake_evaluations(monkeypatch)
    model = Gated(one_step(), hold=0)
    log_path = tmp_path / "run.log"
    log_path.touch()
    seen: dict[str, Any] = {}

    def watch() -> None:  # another reader of the file, while the run is held on its model call
        try:
            seen["early"] = wait_for(lambda: (lambda s: s if " seed " in s else None)(log_path.read_text()))
            seen["held"] = model.held.wait(30)
            seen["told"] = wait_for(lambda: len(re.findall(r"analyst \(g1b0\) waiting on the model for \d+s",
                                                           log_path.read_text())) >= 2)
            seen["while_held"] = log_path.read_text()
        finally:
            model.gate.set()

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    with open(log_path, "w") as f:
        summary = run_optimize(
            problem=PROBLEM, seed_kernel=SEED, model=MODEL, base_url=None, role_models=[], iterations=1,
            time_budget=None, branches=1, device="cpu", precision=None, trials=1, run_dir=tmp_path / "runs",
            resume=None, console=Console(file=f, width=80), models={MODEL: model},  # type: ignore[dict-item]
            wait_notice_s=0.5, wait_repeat_s=1.0)
    t.join(10)
    assert summary.status == "finished" and seen.get("held") and seen.get("told"), seen
    # read by another handle while the model was held: the lines were written and flushed before the run went on
    assert re.search(r"run \S+ started: .*policy scripted:progress", seen["early"]), seen
    assert "step " not in seen["while_held"], seen
    text = log_path.read_text()
    assert re.search(r"analyst \(g1b0\): the model call ended after \d+s", text), text
    assert re.search(r"step g1b0: BLOCK=512 -> pass ok; unmeasured", text), text
    assert text.index("waiting on the model") < text.index("step g1b0"), text


def test_a_timed_step_line_gives_the_median_and_the_best_against_eager_and_torch_compile(tmp_path: Path) -> None:
    """The GPU's words, from records as a GPU run writes them (the CPU runs above are untimed)."""
    from kernelwright.agents.records import StepRecord
    from kernelwright.progress import seed_line, step_line

    timing = {"median_ms": 0.0123, "p25_ms": 0.012, "p75_ms": 0.013, "min_ms": 0.011, "max_ms": 0.014, "reps": 30,
              "wall_median_ms": 0.02, "noise_band": 0.01, "eager_ms": 0.03, "speedup_vs_eager": 2.44,
              "vs_eager": "faster", "compile_ms": 0.02, "speedup_vs_compile": 1.63, "vs_compile": "faster",
              "best_baseline_ms": 0.02, "best_baseline": "torch.compile"}
    run = RunStore(tmp_path).create("p.py", "source", {})
    best = run.put_kernel("child")
    run.put_eval(best, {"verdict": "pass", "reason": "ok", "timing": timing})
    run.update(best_kernel=best, best_speedup=2.44, config={"seed_kernel": best, "settings": {}})
    step = StepRecord.model_validate({
        "step": 0, "step_id": "g2b1", "generation": 2, "branch": 1, "parent": "p" * 16, "policy": "builtin",
        "time": "2026-11-26T10:00:00", "proposal": {**PROPOSAL, "key": "BLOCK=512"}, "child": best,
        "verdict": "pass", "result": {"verdict": "pass", "reason": "ok", "timing": timing},
        "decision": {"step": 0, "parent_id": "p" * 16, "proposal_key": "BLOCK=512", "child_id": best,
                     "verdict": "pass", "reason": "ok", "decision": "elite", "why": "faster"}})
    line = step_line(step, "pass ok", run, run.info())
    assert line == (f"step g2b1: BLOCK=512 -> pass ok, median 0.0123 ms, 2.44× eager, 1.63× torch.compile; elite; "
                    f"best {best[:12]}: 2.44× eager, 1.63× torch.compile"), line
    assert seed_line(run) == f"seed {best[:12]}: pass ok, median 0.0123 ms, 2.44× eager, 1.63× torch.compile"


# -- the live view's words for what the run is doing now ----------------------------------------------------


def render(progress: Progress, now: float, status: str = "running") -> str:
    from kernelwright.tools.runstore import RunInfo

    info = RunInfo(id="20261126-000000-abcdef", problem="p.py", status=status,
                   config={"settings": RunConfig(device="cuda:0,cuda:1", branches=2).as_dict()})
    out = io.StringIO()
    Console(file=out, width=160).print(_view(info, None, progress, now, active_s=75.0))
    return out.getvalue()


def test_the_live_view_names_the_phase_and_who_waits_on_the_model() -> None:
    now = 1_000_000.0
    seed = render(Progress(phase="verifying the seed kernel on cuda:0; warming cuda:1 for the branches",
                           phase_since=now - 12), now, status="created")
    assert "verifying the seed kernel on cuda:0; warming cuda:1 for the branches (12s)" in seed, seed
    assert "1m15s" in seed, seed  # the time the run was driven
    waiting = render(Progress(phase="writing the first kernel (attempt 1 of 2) with openai:gpt-4.1",
                              phase_since=now - 50,
                              waiting=[ModelWait(role="coder", step="first kernel, attempt 1 of 2", since=now - 45)]),
                     now)
    assert "writing the first kernel (attempt 1 of 2) with openai:gpt-4.1 (50s)" in waiting, waiting
    assert "coder (first kernel, attempt 1 of 2) waiting on the model for 45s" in waiting, waiting
    many = render(Progress(phase="generation 3: 8 branches at work", phase_since=now - 5,
                           waiting=[ModelWait(role="strategist", step=f"g3b{i}", since=now - 100 + i)
                                    for i in range(7)]), now)
    assert "strategist (g3b0) waiting on the model for 1m40s" in many and "and 3 more model calls" in many, many
    assert "g3b5" not in many


def test_the_roles_mark_the_seed_phases_and_the_model_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No seed kernel: the run's progress says the first kernel is being written and that the coder waits on
    the model; with a seed, that the seed is being verified. Nothing is left marked once the run ends."""
    fake_evaluations(monkeypatch, delay_s=0.5)
    written = SEED.read_text()
    model = Gated([call("write_kernel", {"source": written}, 0), call("finish", {}, 1), *one_step()], hold=0)
    cfg = RunConfig(device="cpu", trials=1, branches=1, iterations=1, model=MODEL)
    handle = api.start_run(PROBLEM, config=cfg, runs_dir=tmp_path, models={MODEL: model})  # type: ignore[dict-item]
    t = threading.Thread(target=handle.run_to_end, daemon=True)
    t.start()
    try:
        assert model.held.wait(30)
        p = wait_for(lambda: (lambda p: p if p.waiting else None)(handle.run.progress()))
        # (then "; preparing cpu meanwhile" while the device is set up: the fake one here is done at once)
        assert (p.phase or "").startswith(f"writing the first kernel (attempt 1 of 1) with {MODEL}"), p
        assert [(w.role, w.step) for w in p.waiting] == [("coder", "first kernel, attempt 1 of 1")], p
    finally:
        model.gate.set()
    t.join(60)
    handle.close()
    assert handle.run.progress() == Progress()  # the driver let go: nothing said
    # a given seed: verified (slowly, here) with the phase saying so
    cfg = RunConfig(device="cpu", trials=1, branches=1, iterations=1)
    with api.start_run(PROBLEM, seed_kernel=SEED, config=cfg, runs_dir=tmp_path) as h:
        t = threading.Thread(target=h.run_to_end, daemon=True)
        t.start()
        wait_for(lambda: h.run.progress().phase == "verifying the seed kernel on cpu")
        t.join(60)


# -- the time budget counts the time the run was driven -----------------------------------------------------


def test_a_run_resumed_hours_later_gets_the_rest_of_its_time_budget(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    fake_evaluations(monkeypatch, delay_s=0.2)
    cfg = RunConfig(device="cpu", trials=1, branches=1, time_budget_s=3.0, plateau_steps=10 ** 6)
    with api.start_run(PROBLEM, seed_kernel=SEED, config=cfg, runs_dir=tmp_path) as h:
        for _ in h.steps():
            h.request_stop()  # after the first step: stopped, resumable
        run_id = h.id
    run = RunStore(tmp_path).open(run_id)
    first = run.info()
    assert first.status == "stopped" and first.steps <= 2 and 0 < (first.active_s or 0) < 3.0, first
    # hours pass before it is resumed
    hours_ago = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 5 * 3600))
    run.update(created=hours_ago)
    with api.resume_run(run_id, runs_dir=tmp_path) as h:
        info = h.run_to_end()
    assert info.stop_reason == "time budget reached (3 s)", info.stop_reason
    assert info.steps >= first.steps + 3, (first.steps, info.steps)  # not stopped after the first generation
    assert 3.0 <= (info.active_s or 0) < 8.0, info.active_s  # the budget, and one generation past it at most


# -- the problem first ------------------------------------------------------------------------------------


def test_a_missing_problem_is_named_before_a_missing_seed(tmp_path: Path) -> None:
    from kernelwright import cli

    r = CliRunner().invoke(cli.app, ["optimize", str(tmp_path / "missing.py"), "--seed-kernel",
                                     str(tmp_path / "missing_seed.py"), "--device", "cpu", "--run-dir",
                                     str(tmp_path / "runs"), "--allow-unconfined"])
    assert r.exit_code == 2, r.output
    assert f"{tmp_path / 'missing.py'}: no such problem file" in " ".join(r.output.split()), r.output
    assert "seed" not in r.output, r.output


# -- the install says nothing of the license ------------------------------------------------------------


def test_the_project_metadata_builds_without_a_license_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    """setuptools >= 77 warns of `project.license` as a table on every install; the string form fails before 77
    (which a host installing without build isolation may have): neither is used, and LICENSE still ships."""
    import warnings

    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    monkeypatch.chdir(ROOT)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist = apply_configuration(Distribution(), ROOT / "pyproject.toml")
        dist.finalize_options()
    assert not [str(w.message) for w in caught if "license" in str(w.message).lower()], caught
    assert dist.metadata.license_files == ["LICENSE"]
    assert (ROOT / "LICENSE").read_text().lstrip().startswith("Apache License")
