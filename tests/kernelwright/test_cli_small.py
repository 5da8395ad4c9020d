"""The small things a new user meets on the way (issue 24, item 7), each held to one sentence or one line:
a step that is not there, a runs folder that is not there, the problem named before the seed, chat taking
optimize's flags, flags shown as flags, `--version`, eval without its phase dump, profile and baseline on the
CPU saying only what the CPU can give, "1 branch", the commands to look at a run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kernelwright import cli

REPO = Path(__file__).resolve().parents[2]
PROBLEM = REPO / "tests" / "graphs" / "add_problem.py"
SEED = REPO / "tests" / "graphs" / "add_seed.py"


def kw(*args: str | Path, cache: Path, columns: int = 200) -> subprocess.CompletedProcess[str]:
    """`python -m kernelwright.cli ARGS` as a user runs it (own cache folder, wide help)."""
    env = {**os.environ, "KERNELWRIGHT_CACHE": str(cache), "COLUMNS": str(columns)}
    return subprocess.run([sys.executable, "-m", "kernelwright.cli", *map(str, args)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def error_line(r: subprocess.CompletedProcess[str]) -> str:
    """The one `error: ...` line on stderr (a sandbox warning may stand before it)."""
    lines = [line for line in r.stderr.strip().splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0].removeprefix("error: ")


# -- help and version -------------------------------------------------------------------------------------


def test_flags_are_shown_without_a_value(tmp_path: Path) -> None:
    r = kw("eval", "--help", cache=tmp_path)
    assert r.returncode == 0, r.stderr
    json_line = next(line for line in r.stdout.splitlines() if "--json" in line)
    assert "<bool>" not in r.stdout, json_line
    assert "<int range>" in r.stdout  # an option that takes a value still says what it takes
    r = kw("--help", cache=tmp_path)
    assert "--version" in r.stdout and "<bool>" not in r.stdout


def test_version_prints_the_installed_version(tmp_path: Path) -> None:
    from importlib.metadata import version

    r = kw("--version", cache=tmp_path)
    assert r.returncode == 0 and r.stdout == f"kernelwright {version('kernelwright')}\n", r.stdout + r.stderr


# -- runs, optimize, chat: one sentence ----------------------------------------------------------------


def test_runs_in_a_folder_that_is_not_there(tmp_path: Path) -> None:
    r = kw("runs", "--run-dir", tmp_path / "nowhere", cache=tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    assert error_line(r) == f"{tmp_path / 'nowhere'}: no such folder of runs"


def test_optimize_names_the_missing_problem_before_the_seed(tmp_path: Path) -> None:
    r = kw("optimize", tmp_path / "missing.py", "--device", "cpu", "--run-dir", tmp_path / "runs",
           "--allow-unconfined", cache=tmp_path)
    assert r.returncode == 2
    assert error_line(r) == f"{tmp_path / 'missing.py'}: no such problem file"
    # with the problem there, the seed is what is missing
    r = kw("optimize", PROBLEM, "--device", "cpu", "--run-dir", tmp_path / "runs", "--allow-unconfined",
           cache=tmp_path)
    assert r.returncode == 2 and "--seed-kernel" in error_line(r)


def test_chat_takes_review_and_resume(tmp_path: Path) -> None:
    r = kw("chat", "--help", cache=tmp_path)
    assert "--review" in r.stdout and "--resume" in r.stdout and "--hosts" in r.stdout
    r = kw("chat", "--attach", "a", "--resume", "b", "--run-dir", tmp_path, cache=tmp_path)
    assert r.returncode == 2 and "two runs" in error_line(r)
    r = kw("chat", tmp_path / "missing.py", "--device", "cpu", "--run-dir", tmp_path, "--allow-unconfined",
           cache=tmp_path)
    assert r.returncode == 2 and error_line(r) == f"{tmp_path / 'missing.py'}: no such problem file"
    # --resume is --attach: it looks for that run
    r = kw("chat", "--resume", "no-such-run", "--run-dir", tmp_path, cache=tmp_path)
    assert r.returncode == 2 and "no-such-run" in error_line(r)


def test_chat_review_none_reaches_the_new_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`chat PROBLEM --review none` starts a run whose config says none (the session itself is stubbed)."""
    from kernelwright import api
    from kernelwright import chat as chat_mod

    seen: dict[str, Any] = {}

    def fake_chat(*, attach: Any, runs_dir: Path, console: Any, start: Any, asker_for: Any = None,
                  moves: Any = None) -> int:
        with start() as handle:
            seen["review"], seen["hosts"] = handle.config.review, handle.config.hosts
        return 0

    monkeypatch.setattr(chat_mod, "run_chat", fake_chat)
    monkeypatch.setattr(cli, "_confinement", lambda *a, **k: True)
    monkeypatch.setattr(api, "check_confinement", lambda *a, **k: None)
    r = CliRunner().invoke(cli.app, ["chat", str(PROBLEM), "--seed-kernel", str(SEED), "--device", "cpu",
                                     "--review", "none", "--hosts", "off", "--run-dir", str(tmp_path / "runs")])
    assert r.exit_code == 0, r.output
    assert seen == {"review": "none", "hosts": "off"}
    r = CliRunner().invoke(cli.app, ["chat", str(PROBLEM), "--seed-kernel", str(SEED), "--device", "cpu",
                                     "--run-dir", str(tmp_path / "runs")])
    assert r.exit_code == 0 and seen["review"] == "proposals", r.output  # chat's default stays proposals


# -- a real 2-step run: trace, report, the demo's last line --------------------------------------------


@pytest.fixture(scope="module")
def two_steps(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """`optimize` on the CPU, 2 steps of 1 branch: (runs folder, run id, what it printed)."""
    tmp = tmp_path_factory.mktemp("two_steps")
    runs = tmp / "runs"
    r = kw("optimize", PROBLEM, "--seed-kernel", SEED, "--iterations", "2", "--branches", "1", "--device", "cpu",
           "--trials", "1", "--run-dir", runs, "--allow-unconfined", cache=tmp / "cache")
    assert r.returncode == 0, r.stdout + r.stderr
    run_id = next(p.name for p in runs.iterdir() if p.is_dir())
    return runs, run_id, r.stdout


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_the_demo_ends_with_the_commands_to_look_at_the_run(two_steps: tuple[Path, str, str]) -> None:
    runs, run_id, printed = two_steps
    last = printed.strip().splitlines()[-1]
    assert last == f"look at it: kernelwright trace {run_id} --run-dir {runs}; kernelwright report {run_id} --run-dir {runs}"
    assert cli._look_at(run_id, Path("runs")) == f"look at it: kernelwright trace {run_id}; kernelwright report {run_id}"


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_trace_of_a_step_that_is_not_there(two_steps: tuple[Path, str, str], tmp_path: Path) -> None:
    runs, run_id, _ = two_steps
    r = kw("trace", run_id, "--step", "9", "--run-dir", runs, cache=tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    assert error_line(r) == f"run {run_id} has no step 9: it has steps 0 to 1"
    r = kw("trace", run_id, "--step", "1", "--run-dir", runs, cache=tmp_path)
    assert r.returncode == 0 and r.stdout.startswith("step 1 ("), r.stdout + r.stderr


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_report_says_one_branch(two_steps: tuple[Path, str, str], tmp_path: Path) -> None:
    runs, run_id, _ = two_steps
    r = kw("report", run_id, "--run-dir", runs, "--out", tmp_path / "r.html", cache=tmp_path)
    assert r.returncode == 0, r.stderr
    page = (tmp_path / "r.html").read_text()
    assert "1 branch" in page and "1 branches" not in page and "2 iterations" in page


def test_count_words() -> None:
    from kernelwright.report import _count

    assert [_count(1, "branch"), _count(2, "branch"), _count(1, "iteration"), _count(0, "iteration")] == [
        "1 branch", "2 branches", "1 iteration", "0 iterations"]


# -- eval, profile, baseline on the CPU ----------------------------------------------------------------


def _result() -> Any:
    from kernelwright.evaluators import EvalResult

    return EvalResult(verdict="pass", reason="ok", device="cpu", timing_unavailable="no GPU: not timed",
                      phases={f"phase_{i}_s": 0.5 for i in range(8)})


def test_eval_keeps_its_phases_for_verbose(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "_VERBOSE", False)
    cli._print_result(_result(), "p.py", "c.py")
    plain = capsys.readouterr().out
    assert plain.startswith("PASS ok") and "phase" not in plain and plain.strip().splitlines()[-1].startswith("timing")
    cli._print_result(_result(), "p.py", "c.py", verbose=True)  # eval --verbose
    assert "phases (s): phase_0_s 0.50" in " ".join(capsys.readouterr().out.split())
    monkeypatch.setattr(cli, "_VERBOSE", True)  # kernelwright --verbose eval
    cli._print_result(_result(), "p.py", "c.py")
    assert "phases (s): phase_0_s 0.50" in " ".join(capsys.readouterr().out.split())


def test_profile_on_the_cpu_says_at_once_what_it_can_give(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sentence says what the CPU can give (it is printed before the evaluator is built), and Nsight
    Compute is not asked of the CPU."""
    import kernelwright.evaluators as ev
    from kernelwright.evaluators.profiling import Profile

    calls: list[Any] = []

    class Stub:
        def __init__(self, prob: Any, device: str, policy: Any) -> None:
            calls.append(("built", device))

        def __enter__(self) -> "Stub":
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def profile(self, source: str, ncu: bool = False) -> Profile:
            calls.append(("profile", ncu))
            return Profile(verdict="pass", reason="ok", text="kernels: -")

    monkeypatch.setattr(ev, "Evaluator", Stub)
    monkeypatch.setattr(cli, "_confinement", lambda *a, **k: True)
    r = CliRunner().invoke(cli.app, ["profile", str(PROBLEM), str(SEED), "--device", "cpu", "--ncu"])
    assert r.exit_code == 0, r.output
    said = " ".join(r.stderr.split())
    assert said.startswith("on the CPU a profile only verifies the candidate and names its kernels")
    assert "Nsight Compute need a GPU" in said
    assert calls == [("built", "cpu"), ("profile", False)]


def test_baseline_on_the_cpu_speaks_of_no_timing(tmp_path: Path) -> None:
    r = kw("baseline", PROBLEM, "--device", "cpu", "--trials", "1", cache=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("OK ") and "timing sets" not in r.stdout


def test_baseline_words_on_a_gpu_keep_the_timing_sets(capsys: pytest.CaptureFixture[str]) -> None:
    row = {"problem": "p.py", "verdict": "ok", "inputs_gb": 0.1, "gold_precision": "float64", "trials": 5,
           "pytorch_error": 0.0, "eager_ms": 1.0, "memory": {"timing_sets": 30}, "phases": {}}
    cli._print_baseline(row, timed=True)
    assert "30 timing sets" in capsys.readouterr().out
    cli._print_baseline(row, timed=False)
    assert "timing sets" not in capsys.readouterr().out
