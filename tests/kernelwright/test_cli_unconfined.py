"""Class 31 (docs/verifier.md) at the front doors: where the OS sandbox cannot confine candidate code, `eval`,
`profile`, `optimize`, `chat` and `bench` say so in one sentence (what is missing, how to opt out by name) and
exit 2 before anything starts; the API, the MCP server's tools and the served graph refuse the same way; the
opt-out by name (`--allow-unconfined`, KERNELWRIGHT_ALLOW_UNCONFINED=1) runs the candidate.

A machine without Landlock is simulated with `sandbox.REPORT_UNCONFINED_ENV`, a test switch that only reports
the sandbox missing (the workers still confine themselves)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelwright import api
from kernelwright.evaluators import sandbox

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "kernelwright"))
from kb_suite import write_suite  # noqa: E402

RELU_PROBLEM = REPO / "tests" / "kernels" / "honest" / "relu_problem.py"
RELU_CANDIDATE = REPO / "tests" / "kernels" / "honest" / "relu_candidate.py"
ADD_PROBLEM = REPO / "tests" / "graphs" / "add_problem.py"
ADD_SEED = REPO / "tests" / "graphs" / "add_seed.py"
SAYS = ("cannot confine candidate code", sandbox.REPORT_UNCONFINED_ENV, "--allow-unconfined",
        f"{sandbox.ALLOW_UNCONFINED_ENV}=1")


def kw(*args: str | Path, tmp_path: Path, allow_env: str | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m kernelwright.cli ARGS` on a machine whose sandbox is reported missing."""
    env = {k: v for k, v in os.environ.items() if k != sandbox.ALLOW_UNCONFINED_ENV}
    env.update({sandbox.REPORT_UNCONFINED_ENV: "1", "KERNELWRIGHT_CACHE": str(tmp_path / "cache"), "COLUMNS": "300"})
    if allow_env is not None:
        env[sandbox.ALLOW_UNCONFINED_ENV] = allow_env
    return subprocess.run([sys.executable, "-m", "kernelwright.cli", *map(str, args)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def refused(r: subprocess.CompletedProcess[str]) -> str:
    """Exit 2, nothing on stdout, one line `error: <sentence>` on stderr that says what and how, no traceback."""
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr and r.stdout == "", r.stderr[-3000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for part in SAYS:
        assert part in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def no_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sandbox.REPORT_UNCONFINED_ENV, "1")
    monkeypatch.delenv(sandbox.ALLOW_UNCONFINED_ENV, raising=False)


# -- the CLI ----------------------------------------------------------------------------------------------


def test_eval_refuses_in_one_sentence(tmp_path: Path) -> None:
    refused(kw("eval", RELU_PROBLEM, RELU_CANDIDATE, "--device", "cpu", tmp_path=tmp_path))


def test_eval_json_refuses_with_the_reason(tmp_path: Path) -> None:
    r = kw("eval", RELU_PROBLEM, RELU_CANDIDATE, "--device", "cpu", "--json", tmp_path=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert r.stdout.count("\n") == 1
    out = json.loads(r.stdout)
    assert out["verdict"] == "error" and out["reason"] == "unconfined"
    assert all(part in out["detail"] for part in SAYS), out["detail"]


def test_profile_refuses_in_one_sentence(tmp_path: Path) -> None:
    refused(kw("profile", RELU_PROBLEM, RELU_CANDIDATE, "--device", "cpu", tmp_path=tmp_path))


def test_optimize_refuses_before_a_run_exists(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    refused(kw("optimize", ADD_PROBLEM, "--seed-kernel", ADD_SEED, "--device", "cpu", "--iterations", "1",
               "--run-dir", runs, tmp_path=tmp_path))
    assert not runs.exists() or not any(runs.iterdir())


def test_chat_refuses_before_a_run_exists(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    refused(kw("chat", ADD_PROBLEM, "--seed-kernel", ADD_SEED, "--device", "cpu", "--run-dir", runs,
               tmp_path=tmp_path))
    assert not runs.exists() or not any(runs.iterdir())


@pytest.mark.parametrize("mode", ["kernels", "optimize"])
def test_bench_refuses_before_anything_is_written(mode: str, tmp_path: Path) -> None:
    suite, kernels = write_suite(tmp_path, {})
    out = tmp_path / "out"
    how = ["--kernels", kernels] if mode == "kernels" else ["--optimize", "--seed-kernels", kernels]
    refused(kw("bench", suite, *how, "--device", "cpu", "--out", out, tmp_path=tmp_path))
    assert not out.exists()


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_the_opt_out_by_name_runs_the_candidate(how: str, tmp_path: Path) -> None:
    args = ["eval", RELU_PROBLEM, RELU_CANDIDATE, "--device", "cpu", "--trials", "1", "--json"]
    r = kw(*args, "--allow-unconfined", tmp_path=tmp_path) if how == "flag" else \
        kw(*args, tmp_path=tmp_path, allow_env="1")
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    out = json.loads(r.stdout)
    assert out["verdict"] == "pass", out["detail"]
    check = next(c for c in out["checks"] if c["name"] == "sandbox")
    assert "as the user allowed" in check["detail"], check
    assert "warning:" in r.stderr and "unconfined" in r.stderr  # said once on stderr, not in the JSON line


def test_the_opt_out_reaches_a_runs_evaluators(tmp_path: Path) -> None:
    """optimize's flag reaches the evaluators its run builds (they read the environment the flag sets): the
    seed is judged, not refused."""
    runs = tmp_path / "runs"
    r = kw("optimize", ADD_PROBLEM, "--seed-kernel", ADD_SEED, "--device", "cpu", "--iterations", "1",
           "--branches", "1", "--trials", "1", "--run-dir", runs, "--allow-unconfined", tmp_path=tmp_path)
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    run = api.open_run(next(p.name for p in runs.iterdir() if p.is_dir()), runs).run
    seed = run.eval(run.info().config.seed_kernel)
    assert seed is not None and seed["verdict"] == "pass", (seed or {}).get("detail")


@pytest.mark.parametrize("command", ["eval", "profile", "optimize", "chat", "bench", "mcp"])
def test_help_names_the_opt_out(command: str, tmp_path: Path) -> None:
    r = kw(command, "--help", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "--allow-unconfined" in text and sandbox.ALLOW_UNCONFINED_ENV in text, text[-1500:]


# -- the API, the MCP server's tools, the served graph ------------------------------------------------------


def test_api_evaluate_refuses(no_sandbox: None) -> None:
    with pytest.raises(api.Unconfined) as e:
        api.evaluate(RELU_PROBLEM, RELU_CANDIDATE, device="cpu")
    assert all(part in str(e.value) for part in SAYS)
    assert isinstance(e.value, api.UsageError)  # what every front door already turns into one sentence


def test_api_start_run_refuses_before_a_run_exists(no_sandbox: None, tmp_path: Path) -> None:
    with pytest.raises(api.Unconfined):
        api.start_run(ADD_PROBLEM, seed_kernel=ADD_SEED, config=api.RunConfig(device="cpu"), runs_dir=tmp_path)
    assert not any(tmp_path.iterdir())


def test_mcp_tools_refuse(no_sandbox: None, tmp_path: Path) -> None:
    from kernelwright.mcp_server import Server

    s = Server(tmp_path)
    with pytest.raises(api.UsageError, match="cannot confine candidate code"):  # a ToolError in the server
        s.start_run(str(ADD_PROBLEM), seed_kernel=str(ADD_SEED), device="cpu")
    job = s.evaluate(str(RELU_PROBLEM), str(RELU_CANDIDATE), device="cpu")
    s.jobs[job["job_id"]].thread.join(timeout=60)  # type: ignore[union-attr]
    answer = s.job_result(job["job_id"])
    assert answer["status"] == "failed" and "--allow-unconfined" in answer["error"], answer
    assert not any(tmp_path.iterdir())


def test_the_served_graph_refuses(no_sandbox: None, tmp_path: Path) -> None:
    from kernelwright.graphs.serve import start

    out = start({"problem": str(ADD_PROBLEM), "seed_kernel": str(ADD_SEED), "device": "cpu",
                 "runs_dir": str(tmp_path)})
    assert out["status"] == "failed" and "--allow-unconfined" in out["error"], out
    assert not any(tmp_path.iterdir())
