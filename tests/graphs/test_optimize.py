"""The optimization graph end to end on the CPU with the builtin policy: a run, its trace, and a run
killed with SIGKILL mid-step and resumed, with every step recorded exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelwright.tools.runstore import RunStore

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests" / "graphs" / "add_problem.py"
SEED = ROOT / "tests" / "graphs" / "add_seed.py"


def optimize(run_dir: Path, *extra: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernelwright.cli", "optimize", *extra, "--run-dir", str(run_dir)],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def test_a_builtin_run_records_every_step(tmp_path: Path) -> None:
    p = optimize(tmp_path, str(PROBLEM), "--seed-kernel", str(SEED), "--iterations", "4", "--branches", "2",
                 "--device", "cpu", "--trials", "1")
    assert p.returncode == 0, p.stdout + p.stderr
    (info,) = RunStore(tmp_path).list()
    assert info.status == "finished" and info.steps == 4
    assert "best kernel:" in p.stdout and info.id in p.stdout
    run = RunStore(tmp_path).open(info.id)
    trace = run.trace()
    assert [r["step_id"] for r in trace] == ["g1b0", "g1b1", "g2b0", "g2b1"]
    for r in trace:
        assert r["diagnosis"]["bottleneck"] and r["proposal"]["key"] and r["coder"]["diff"].startswith("---")
        # on the CPU nothing is timed: a verified child is kept unranked ("unmeasured"), not failed
        # (or a duplicate: two orders of the same two moves make the same kernel)
        assert r["verdict"] == "pass" and (r["decision"]["decision"] == "unmeasured"
                                           or r["decision"]["reason"] == "duplicate"), r["decision"]
        assert r["decision"]["predicted_speedup"] and r["decision"]["measured_speedup"] is None
    # generation 2 builds on generation 1's verified children instead of re-trying moves from the seed
    assert {r["parent"] for r in trace[2:]} == {r["child"] for r in trace[:2]}
    # distinct proposals from the same parent; the best kernel is verified
    assert len({r["proposal"]["key"] for r in trace if r["parent"] == trace[0]["parent"]}) == len(
        [r for r in trace if r["parent"] == trace[0]["parent"]])
    assert run.eval(info.best_kernel)["verdict"] == "pass"
    lines = subprocess.run([sys.executable, "-m", "kernelwright.cli", "trace", info.id, "--json", "--run-dir",
                            str(tmp_path)], capture_output=True, text=True, cwd=ROOT).stdout.splitlines()
    assert [json.loads(x)["step_id"] for x in lines] == ["g1b0", "g1b1", "g2b0", "g2b1"]
    # both branches of generation 1 share the seed as parent: their strategists take different moves
    assert trace[0]["proposal"]["key"] != trace[1]["proposal"]["key"]
    # the archive lives in the run directory; the checkpointed state only names its generation
    assert sorted(p.name for p in (run.path / "archive").glob("*.json")) == ["000000.json", "000001.json", "000002.json"]
    assert len(run.archive(2)["steps"]) == 4
    state = _last_checkpoint_state(run.checkpoint_path)
    kept = sum(r["decision"]["decision"] == "unmeasured" for r in trace)
    assert kept >= 3 and state["archive"] == {"version": 2, "steps": 4, "entries": 1 + kept, "best": info.best_kernel}
    assert info.best_kernel == trace[0]["parent"]  # the seed: an unmeasured child is never ranked above it


def _last_checkpoint_state(db: Path) -> dict:
    from langgraph.checkpoint.sqlite import SqliteSaver

    with SqliteSaver.from_conn_string(str(db)) as saver:
        latest = max(saver.list(None), key=lambda c: c.checkpoint["ts"])
        return latest.checkpoint["channel_values"]


def test_usage_errors_are_one_sentence(tmp_path: Path) -> None:
    p = optimize(tmp_path, str(PROBLEM), "--device", "cpu")
    assert p.returncode == 2 and "--seed-kernel" in p.stderr and "Traceback" not in p.stderr
    p = optimize(tmp_path, "--resume", "no-such-run")
    assert p.returncode == 2 and "no run" in p.stderr
    p = optimize(tmp_path, str(PROBLEM), "--seed-kernel", str(SEED), "--time-budget", "soon")
    assert p.returncode == 2 and "duration" in p.stderr


@pytest.mark.timeout(600)
def test_sigkill_mid_step_then_resume_loses_and_repeats_nothing(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "kernelwright.cli", "optimize", str(PROBLEM), "--seed-kernel", str(SEED),
           "--iterations", "6", "--branches", "2", "--device", "cpu", "--trials", "1", "--run-dir", str(tmp_path)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 240
    run = None
    while time.monotonic() < deadline:
        runs = RunStore(tmp_path).list()
        if runs:
            run = RunStore(tmp_path).open(runs[0].id)
            if len(run.trace()) >= 2:
                break
        time.sleep(0.05)
    assert run is not None and len(run.trace()) >= 2, "the run did not get going"
    os.killpg(proc.pid, signal.SIGKILL)  # mid-run: the next generation's branches are in flight
    proc.wait(timeout=30)
    before = [r["step_id"] for r in run.trace()]
    assert len(before) < 6

    p = optimize(tmp_path, "--resume", run.id)
    assert p.returncode == 0, p.stdout + p.stderr
    ids = [r["step_id"] for r in run.trace()]
    assert ids[: len(before)] == before, "recorded steps were rewritten"
    assert sorted(ids) == ["g1b0", "g1b1", "g2b0", "g2b1", "g3b0", "g3b1"], ids
    info = run.info()
    assert info.status == "finished" and info.steps == 6
    # every child kernel was judged and its verdict kept; on the CPU each verified child is kept unmeasured
    # and later generations build on it, so no step runs out of moves
    # (two orders of the same two moves make the same kernel: the second is a duplicate, not a new kernel)
    for r in run.trace():
        assert r["child"] and run.eval(r["child"])["verdict"] == "pass"
        assert r["decision"]["decision"] == "unmeasured" or r["decision"]["reason"] == "duplicate", r["decision"]
    assert sum(r["decision"]["decision"] == "unmeasured" for r in run.trace()) >= 4


def test_branches_spread_over_the_listed_devices() -> None:
    from kernelwright.agents.context import RunConfig

    two = RunConfig(device="cuda:0,cuda:1")
    assert [two.device_for(b) for b in range(4)] == ["cuda:0", "cuda:1", "cuda:0", "cuda:1"]
    assert two.device_for() == "cuda:0"  # the seed
    assert RunConfig(device="cpu").device_for(3) == "cpu"


def test_each_device_keeps_a_spare_worker_per_branch_it_takes() -> None:
    """No branch of a generation waits for a worker to start (import torch: seconds), within a cap."""
    from kernelwright.agents.context import MAX_AUTO_SPARES, RunConfig

    assert RunConfig(device="cuda:0", branches=4).spares_per_device() == 4
    assert RunConfig(device="cuda:0,cuda:1", branches=4).spares_per_device() == 2
    assert RunConfig(device="cuda:0,cuda:1", branches=3).spares_per_device() == 2  # one GPU takes two
    assert RunConfig(device="cpu", branches=1).spares_per_device() == 1
    assert RunConfig(device="cuda", cluster="ray", actors=8, branches=16).spares_per_device() == 2
    assert RunConfig(device="cuda:0", branches=64).spares_per_device() == MAX_AUTO_SPARES
    assert RunConfig(device="cuda:0", branches=64, spares=3).spares_per_device() == 3


def test_a_plateau_never_ends_a_run_within_its_first_two_generations() -> None:
    """32 branches without an elite in one generation are no plateau: the default of 20 steps would have ended
    such a run after its first generation (it did, on two H200s)."""
    from kernelwright.agents.context import RunConfig

    assert RunConfig(branches=2).plateau() == 20
    assert RunConfig(branches=32).plateau() == 64
    assert RunConfig(branches=4, plateau_steps=5).plateau() == 8
    assert RunConfig(branches=1, plateau_steps=10 ** 6).plateau() == 10 ** 6


def test_a_device_list_mixing_kinds_is_a_usage_error(tmp_path: Path) -> None:
    p = optimize(tmp_path, str(PROBLEM), "--seed-kernel", str(SEED), "--device", "cpu,cuda:0")
    assert p.returncode == 2 and "--device" in p.stderr and "Traceback" not in p.stderr


def test_builtin_policy_moves_launch_literal_knobs(tmp_path: Path) -> None:
    """A two-kernel softmax that keeps its block size and warps in its launches (no module constants) gets
    real moves from the builtin policy, each verified, not 'every move was tried' (issue 10)."""
    kernels = ROOT / "tests" / "agents" / "kernels"
    p = optimize(tmp_path, str(kernels / "softmax_problem.py"), "--seed-kernel", str(kernels / "softmax_launch.py"),
                 "--iterations", "2", "--branches", "1", "--device", "cpu", "--trials", "1")
    assert p.returncode == 0, p.stdout + p.stderr
    (info,) = RunStore(tmp_path).list()
    assert info.steps == 2 and "exhausted" not in (info.stop_reason or "")
    run = RunStore(tmp_path).open(info.id)
    for r in run.trace():
        assert r["proposal"]["key"].split("=")[0] in {"_row_stats.BLOCK+_normalize.BLOCK", "_row_stats.num_warps",
                                                      "_normalize.num_warps"}, r["proposal"]
        assert r["verdict"] == "pass" and r["decision"]["decision"] == "unmeasured", r["decision"]
        assert r["coder"]["diff"].count("\n+") >= 1


def test_a_kernel_with_nothing_to_tune_says_so(tmp_path: Path) -> None:
    """Block sizes computed at run time are no knobs: the builtin run ends with one honest sentence saying
    what it looks for, not 'every move was tried' (issue 10)."""
    seed = tmp_path / "computed.py"
    seed.write_text(SEED.read_text().replace("BLOCK = 256\nNUM_WARPS = 4\n", "").replace(
        "add_kernel[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK, num_warps=NUM_WARPS)",
        "block = triton.next_power_of_2(min(n, 1024))\n"
        "        add_kernel[(triton.cdiv(n, block),)](x, y, out, n, BLOCK=block, num_warps=4 if block < 1024 else 8)"))
    p = optimize(tmp_path / "runs", str(PROBLEM), "--seed-kernel", str(seed), "--iterations", "4", "--branches", "1",
                 "--device", "cpu", "--trials", "1")
    assert p.returncode == 0, p.stdout + p.stderr
    (info,) = RunStore(tmp_path / "runs").list()
    assert info.steps == 1 and info.stop_reason.startswith("search exhausted: "), info.stop_reason
    assert "next_power_of_2" in info.stop_reason and "every move" not in info.stop_reason
    (rec,) = RunStore(tmp_path / "runs").open(info.id).trace()
    assert rec["proposal"] is None and rec["coder"]["note"] == info.stop_reason.removeprefix("search exhausted: ")
