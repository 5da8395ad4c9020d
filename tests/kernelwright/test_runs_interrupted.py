"""`kernelwright runs` after a driver was killed (SIGKILL, the OOM killer): the run's status in run.json still
says running, since nothing could update it; the listing says interrupted (resumable) when the run names a
driver on this host whose process is dead, and leaves alone a run driven by a live process or served without one."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from kernelwright.cli import app
from kernelwright.tools.review_desk import ReviewDesk
from kernelwright.tools.runstore import RunStore

PROBLEM = Path(__file__).resolve().parents[1] / "graphs" / "add_problem.py"


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_run_whose_driver_died_is_listed_as_interrupted(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    killed, live, served = (store.create(str(PROBLEM), PROBLEM.read_text(), {}) for _ in range(3))
    for run in (killed, live, served):
        run.update(status="running")
    desk = ReviewDesk(killed)
    desk.claim("optimize")
    driver = json.loads((desk.dir / "driver.json").read_text())
    (desk.dir / "driver.json").write_text(json.dumps({**driver, "pid": _dead_pid(), "host": socket.gethostname()}))
    ReviewDesk(live).claim("optimize")  # this process: alive
    assert ReviewDesk(killed).driver_gone() and not ReviewDesk(live).driver_gone()
    assert not ReviewDesk(served).driver_gone()  # no driver named: a served run, left as it says
    out = CliRunner().invoke(app, ["runs", "--run-dir", str(tmp_path)]).output
    status = {line.split()[0]: line.split()[2] for line in out.splitlines()[1:]}
    assert status == {killed.id: "interrupted", live.id: "running", served.id: "running"}, out
