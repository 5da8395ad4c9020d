"""Budgets that mean what they say and the words a run ends with (issue 24, items 1 and 4).

- a time (token, cost) budget without `--iterations` sets no step limit: the run goes on past 8 steps until
  that budget, a plateau, the target or a stop; `--iterations N` alone stops at N; no budget at all: 8 steps;
- `--help`, the README, the MCP tool and the served graph say the same;
- status `stopped` for a stop request, with the resume command printed; `failed` (exit 1) for a rejected seed,
  which is never called the best kernel; `kernelwright runs` never cuts a run id.

The loop runs on fake evaluators (`fake_evaluations`): every candidate passes untimed, as on the CPU, without
Triton's interpreter, so a run of twenty steps takes seconds.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

from typing import Any

import pytest
from rich.console import Console

from kernelwright import api
from kernelwright.agents.context import DEFAULT_ITERATIONS, RunConfig
from kernelwright.cli import settings_config
from kernelwright.optimize_command import end_lines, run_optimize, runs_lines
from kernelwright.tools.runstore import RunInfo, RunStore

def _flags(**given: Any) -> RunConfig:
    """optimize's flags, by name, as the command reads them."""
    return settings_config("optimize", given)


ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests" / "graphs" / "add_problem.py"
SEED = ROOT / "tests" / "graphs" / "add_seed.py"
sys.path.insert(0, str(Path(__file__).parent))
from fake_evaluations import fake_evaluations  # noqa: E402

pytestmark = pytest.mark.timeout(300)


def optimize(run_dir: Path, **kw):  # type: ignore[no-untyped-def]
    args = dict(problem=PROBLEM, seed_kernel=SEED, model="builtin", base_url=None, role_models=[], iterations=None,
                time_budget=None, branches=2, device="cpu", precision=None, trials=1, run_dir=run_dir, resume=None,
                console=Console(file=io.StringIO(), width=120))
    return run_optimize(**{**args, **kw})


# -- budgets ----------------------------------------------------------------------------------------------


def test_the_step_budget_follows_the_budgets_given() -> None:
    assert RunConfig().step_budget() == DEFAULT_ITERATIONS == 8
    assert RunConfig(iterations=3).step_budget() == 3
    assert RunConfig(iterations=3, time_budget_s=60).step_budget() == 3  # both: whichever comes first
    for only in (dict(time_budget_s=60.0), dict(token_budget=1000), dict(cost_budget_usd=1.0)):
        cfg = RunConfig(**only)
        assert cfg.step_budget() is None and "no step limit" in cfg.budget_words(), only
    assert "None" not in RunConfig(time_budget_s=60).budget_words()
    # the CLI's flags: --time-budget alone leaves iterations unset
    common = dict(model="builtin", base_url=None, role_models=[], branches=2, device="cpu", precision=None, trials=1,
                  token_budget=None, cost_budget=None, prices=None, profile="off", review="none")
    assert _flags(iterations=None, time_budget="8h", **common).step_budget() is None
    assert _flags(iterations=None, time_budget=None, **common).step_budget() == 8
    assert _flags(iterations=5, time_budget=None, **common).step_budget() == 5
    # a run.json of an earlier version (iterations saved as 8) keeps its 8 steps
    assert RunConfig.from_dict({"iterations": 8, "time_budget_s": 3600}).step_budget() == 8


def test_a_time_budget_alone_runs_past_eight_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_evaluations(monkeypatch)
    summary = optimize(tmp_path, time_budget="1h")
    info = RunStore(tmp_path).open(summary.run_id).info()
    assert info.steps > 8, (info.steps, info.stop_reason)
    assert summary.status == "finished" and "iteration budget" not in (summary.stop_reason or "")
    # on the CPU nothing is timed, so nothing becomes an elite: the plateau (20 steps) ends it, not a step count
    assert summary.stop_reason.startswith(("no improvement in the last", "search exhausted")), summary.stop_reason
    assert summary.exit_code == 0


def test_the_time_budget_itself_stops_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_evaluations(monkeypatch, delay_s=0.3)
    cfg = RunConfig(device="cpu", trials=1, branches=1, time_budget_s=2.0, plateau_steps=10 ** 6)
    with api.start_run(PROBLEM, seed_kernel=SEED, config=cfg, runs_dir=tmp_path) as h:
        info = h.run_to_end()
    assert info.status == "finished" and info.stop_reason == "time budget reached (2 s)", info.stop_reason


def test_iterations_alone_stop_at_n_and_no_budget_at_eight(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_evaluations(monkeypatch)
    three = optimize(tmp_path / "a", iterations=3)
    assert three.stop_reason == "iteration budget reached (3 steps)"
    assert RunStore(tmp_path / "a").open(three.run_id).info().steps == 3
    default = optimize(tmp_path / "b")
    assert default.stop_reason == "iteration budget reached (8 steps)"
    both = optimize(tmp_path / "c", iterations=2, time_budget="1h")  # the first budget reached ends it
    assert both.stop_reason == "iteration budget reached (2 steps)"


def test_every_front_door_says_the_same_of_the_budgets() -> None:
    import typer

    from kernelwright.cli import app

    helps = {p.name: " ".join((p.help or "").split()) for p in typer.main.get_command(app).commands["optimize"].params}
    assert "default: 8 when no time, token or cost budget is given" in helps["iterations"]
    assert "no step limit" in helps["iterations"] and "no step limit" in helps["time_budget"]
    assert "15m" in helps["provider_retry_window"] and "failed" in helps["provider_retry_window"]
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "a time, token or cost budget given without `--iterations` sets no step limit" in readme
    assert "with no budget at all the run takes 8 steps" in readme
    from kernelwright.graphs import serve

    assert serve._settings({"time_budget_s": 60}).step_budget() is None
    assert serve._settings({}).step_budget() == 8 and serve._settings({"iterations": 3}).step_budget() == 3
    from kernelwright import mcp_server

    params = {p.name: p for p in mcp_server.setting_parameters()}  # start_run's run-setting parameters
    words = " ".join(getattr(m, "description", "") or "" for m in params["iterations"].annotation.__metadata__)
    assert "no step limit" in words
    assert params["iterations"].default is None and "time_budget" in params


def test_the_mcp_tool_with_a_time_budget_alone_runs_past_eight_steps(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelwright import mcp_server

    fake_evaluations(monkeypatch)
    server = mcp_server.Server(tmp_path)
    run_id = server.start_run(str(PROBLEM), seed_kernel=str(SEED), time_budget="1h", review="none", device="cpu",
                              trials=1)["run_id"]
    job = server.runs[run_id]
    assert job.thread is not None
    job.thread.join(timeout=240)
    info = RunStore(tmp_path).open(run_id).info()
    assert info.steps > 8 and info.status == "finished", (info.steps, info.stop_reason)
    assert "no step limit" in server.run_status(run_id)["budget"]


# -- status words -----------------------------------------------------------------------------------------


def test_a_stop_request_leaves_status_stopped_with_the_resume_command(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    fake_evaluations(monkeypatch)
    cfg = RunConfig(device="cpu", trials=1, branches=1, iterations=4)
    with api.start_run(PROBLEM, seed_kernel=SEED, config=cfg, runs_dir=tmp_path) as h:
        h.request_stop()
        assert len(list(h.steps())) == 1
    info = h.info()
    assert info.status == "stopped" and info.resumable and info.stop_reason.startswith("stopped on request")
    from kernelwright.optimize_command import Summary

    s = Summary(info.id, info.status, info.stop_reason, "k.py", None, resumable=info.resumable)
    lines = end_lines(s, tmp_path)
    assert lines[0].startswith(f"run {info.id}: stopped (stopped on request")
    assert lines[-1] == f"resume: kernelwright optimize --resume {info.id} --run-dir {tmp_path}"
    assert s.exit_code == 0
    # and it resumes from where it stopped, to its budget
    with api.resume_run(info.id, runs_dir=tmp_path) as again:
        more = [st.step_id for st in again.steps()]
    assert more == ["g2b0", "g3b0", "g4b0"] and again.info().status == "finished" and not again.info().resumable


def test_a_rejected_seed_is_never_the_best_and_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelwright.optimize_command import _view

    fake_evaluations(monkeypatch, reject={SEED.read_text()})
    summary = optimize(tmp_path, iterations=2)
    assert summary.status == "failed" and summary.best_path is None and summary.exit_code == 1
    assert not summary.resumable
    text = "\n".join(end_lines(summary))
    assert "rejected" in text and "best" not in text and "None" not in text, text
    info = RunStore(tmp_path).open(summary.run_id).info()
    shown = io.StringIO()
    Console(file=shown, width=120).print(_view(info, None))
    assert "seed" not in shown.getvalue() and "best" in shown.getvalue() and "none" in shown.getvalue(), shown.getvalue()
    # while the seed is being verified, nothing is called best either
    shown = io.StringIO()
    Console(file=shown, width=120).print(_view(info.model_copy(update={"status": "running"}), None))
    assert "none yet" in shown.getvalue() and "None" not in shown.getvalue()


def test_runs_never_cuts_an_id(tmp_path: Path) -> None:
    long_id = "20261126-043349-86c0ffee1234567890"
    infos = [RunInfo(id=long_id, problem="/a/very/long/path/to/some/deep/folder/of/problems/level1/23_Softmax.py",
                     status="stopped", steps=12, best_speedup=None)]
    piped = runs_lines(infos)
    assert long_id in piped[1] and "23_Softmax.py" in piped[1] and "None" not in piped[1]
    assert piped[0].split() == ["id", "problem", "status", "steps", "best", "speedup"]
    narrow = runs_lines(infos, width=80)
    assert long_id in narrow[1] and all(len(x) <= 80 for x in narrow), narrow
    assert narrow[1].split()[2:] == ["stopped", "12", "-"]
    # the command itself, piped (not a terminal): plain columns, the whole id
    store = RunStore(tmp_path)
    run = store.create(str(PROBLEM), PROBLEM.read_text(), {})
    run.update(status="stopped")
    p = subprocess.run([sys.executable, "-m", "kernelwright.cli", "runs", "--run-dir", str(tmp_path)],
                       capture_output=True, text=True, cwd=ROOT, timeout=120, env={**os.environ, "COLUMNS": "60"})
    assert p.returncode == 0 and run.id in p.stdout and "stopped" in p.stdout, p.stdout + p.stderr
    assert "…" not in p.stdout
