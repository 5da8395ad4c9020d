"""`kernelwright trace RUN_ID --follow`: steps printed as they land while another process drives the run,
and an end (the run finished, or nothing drives it any more) instead of waiting for ever. Real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROBLEM = REPO / "examples" / "softmax" / "problem.py"
SEED = REPO / "examples" / "softmax" / "seed.py"


def kw(*args: str | Path, cache: Path, **popen: object) -> subprocess.Popen[str]:
    env = {**os.environ, "KERNELWRIGHT_CACHE": str(cache)}
    return subprocess.Popen([sys.executable, "-m", "kernelwright.cli", *map(str, args)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)  # type: ignore[arg-type]


def test_follow_prints_steps_as_they_land_and_ends_with_the_run(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    driver = kw("optimize", PROBLEM, "--seed-kernel", SEED, "--device", "cpu", "--iterations", "4", "--branches", "1",
                "--trials", "1", "--run-dir", runs, cache=tmp_path / "cache")
    deadline = time.monotonic() + 120
    while not any(runs.glob("*/run.json")):
        assert time.monotonic() < deadline and driver.poll() is None, driver.communicate()
        time.sleep(0.1)
    run_id = next(runs.glob("*/run.json")).parent.name
    follower = kw("trace", run_id, "--follow", "--json", "--run-dir", runs, cache=tmp_path / "cache")
    arrivals: list[tuple[float, dict]] = []
    assert follower.stdout is not None
    for line in follower.stdout:  # read as it comes
        arrivals.append((time.monotonic(), json.loads(line)))
    follower.wait(timeout=60)
    driver_out, driver_err = driver.communicate(timeout=300)
    driver_done = time.monotonic()
    assert driver.returncode == 0, driver_err[-2000:]
    assert follower.returncode == 0, follower.stderr.read() if follower.stderr else ""
    trace = [json.loads(x) for x in (runs / run_id / "trace.jsonl").read_text().splitlines()]
    assert [r["step_id"] for _, r in arrivals] == [r["step_id"] for r in trace] and len(trace) == 4
    # the first step was printed while the driver was still at work
    assert arrivals[0][0] < driver_done - 1


def test_follow_ends_when_nothing_drives_the_run(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    r = subprocess.run([sys.executable, "-m", "kernelwright.cli", "optimize", PROBLEM, "--seed-kernel", SEED,
                        "--device", "cpu", "--iterations", "1", "--branches", "1", "--trials", "1", "--run-dir", runs],
                       cwd=REPO, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "KERNELWRIGHT_CACHE": str(tmp_path / "cache")})
    assert r.returncode == 0, r.stderr[-2000:]
    run_json = next(runs.glob("*/run.json"))
    info = json.loads(run_json.read_text())
    run_json.write_text(json.dumps({**info, "status": "running", "stop_reason": None}))  # as a killed driver leaves it
    t0 = time.monotonic()
    follower = subprocess.run([sys.executable, "-m", "kernelwright.cli", "trace", info["id"], "--follow", "--run-dir",
                               runs], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert follower.returncode == 0 and time.monotonic() - t0 < 60
    assert "step 0" in follower.stdout
    assert "no process is driving it now" in follower.stderr and f"--resume {info['id']}" in follower.stderr
