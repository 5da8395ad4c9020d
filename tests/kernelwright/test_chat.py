"""`kernelwright chat` in a real terminal (tmux: keys sent, the screen read back): a session through
/approve, /reject, /steer, /why and /stop; a chat killed (SIGKILL) while a review waits, resumed from a
new process with nothing lost or repeated; and `chat --attach` reviewing, from a second terminal, a run that
`optimize --review proposals` drives in the first."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from kernelwright.tools.review_desk import ReviewDesk
from kernelwright.tools.runstore import RunStore

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests" / "graphs" / "add_problem.py"
SEED = ROOT / "tests" / "graphs" / "add_seed.py"

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (apt-get install tmux)")]


class Terminal:
    """A tmux server of its own, one window per command."""

    def __init__(self, home: Path) -> None:
        self.sock = f"kwtest-{uuid.uuid4().hex[:8]}"
        self.home = home
        self.n = 0

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.sock, *args], capture_output=True, text=True, check=False).stdout

    def start(self, *argv: str) -> str:
        self.n += 1
        name = f"w{self.n}"
        cmd = " ".join([f"HOME={self.home}", "TERM=xterm-256color", sys.executable, "-m", "kernelwright.cli",
                        *map(str, argv)])
        shell = f"cd {ROOT} && {cmd}; echo EXITED rc=$?; sleep 300"
        if self.n == 1:
            self.tmux("new-session", "-d", "-s", "kw", "-n", name, "-x", "200", "-y", "60", shell)
        else:
            self.tmux("new-window", "-t", "kw", "-n", name, shell)
        return name

    def screen(self, window: str) -> str:
        return self.tmux("capture-pane", "-p", "-J", "-t", f"kw:{window}", "-S", "-2000")

    def send(self, window: str, line: str) -> None:
        self.tmux("send-keys", "-t", f"kw:{window}", "-l", line)
        self.tmux("send-keys", "-t", f"kw:{window}", "Enter")

    def wait_for(self, window: str, pattern: str, timeout: float = 180) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            s = self.screen(window)
            if re.search(pattern, s):
                return s
            time.sleep(0.3)
        raise AssertionError(f"{pattern!r} never appeared; the screen:\n{self.screen(window)}")

    def close(self) -> None:
        self.tmux("kill-server")


@pytest.fixture
def term(tmp_path: Path):  # type: ignore[no-untyped-def]
    t = Terminal(tmp_path / "home")
    (tmp_path / "home").mkdir()
    yield t
    t.close()


def _run(run_dir: Path):  # type: ignore[no-untyped-def]
    (info,) = RunStore(run_dir).list()
    return info, RunStore(run_dir).open(info.id)


def test_a_chat_session_approves_rejects_steers_explains_and_stops(term: Terminal, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    w = term.start("chat", PROBLEM, "--seed-kernel", SEED, "--device", "cpu", "--trials", "1", "--iterations", "6",
                   "--run-dir", runs)
    term.wait_for(w, r"── review g1b0")
    term.wait_for(w, r"(?m)^kw>\s*$")
    term.send(w, "/approve")
    term.wait_for(w, r"── step g1b0 .*\[approve by chat:")
    term.wait_for(w, r"── review g2b0")
    term.send(w, "/reject too risky for this kernel")
    term.wait_for(w, r"── step g2b0 .*\[reject by chat:")
    term.wait_for(w, r"rejected: too risky for this kernel \(the strategist is told\)")
    term.wait_for(w, r"── review g3b0")
    term.send(w, "/steer split the reduction; leave warps alone")
    term.wait_for(w, r"noted for the strategist")
    term.send(w, "/why g1b0")
    s = term.wait_for(w, r"decision: unmeasured")
    assert "evidence: the analyst read the parent" in s and "review: approve by chat:" in s
    assert re.search(r"^\+BLOCK = \d+", s, re.M) and "verifier: pass (ok)" in s
    term.send(w, "what is going on?")  # free text with the builtin policy: the command list
    term.wait_for(w, r"no model to talk to[\s\S]*/approve")
    term.send(w, "/stop")
    s = term.wait_for(w, r"EXITED rc=0", timeout=120)
    assert "awaiting review" in s and "chat --attach" in s and "Traceback" not in s

    info, run = _run(runs)
    trace = run.trace()
    assert [r["step_id"] for r in trace] == ["g1b0", "g2b0"]
    assert [r["review"]["decision"] for r in trace] == ["approve", "reject"]
    assert trace[1]["review"]["message"] == "too risky for this kernel" and trace[1]["child"] is None
    steering = [json.loads(x) for x in (run.path / "steering.jsonl").read_text().splitlines()]
    assert steering[0]["kind"] == "note" and steering[0]["text"] == "split the reduction; leave warps alone"
    assert info.status == "awaiting review"
    pending = json.loads((run.path / "review" / "pending.json").read_text())
    assert [p["step_id"] for p in pending] == ["g3b0"]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_killed_chat_resumes_from_a_new_process_with_nothing_lost_or_repeated(term: Terminal, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    w1 = term.start("chat", PROBLEM, "--seed-kernel", SEED, "--device", "cpu", "--trials", "1", "--iterations", "3",
                    "--run-dir", runs)
    term.wait_for(w1, r"── review g1b0")
    term.send(w1, "/approve")
    term.wait_for(w1, r"── step g1b0")
    s = term.wait_for(w1, r"── review g2b0.*\n.*\n.*proposal \(.*\): (.*)\n")
    proposal = re.search(r"── review g2b0[\s\S]*?proposal \([^)]*\): (.*)", s).group(1)  # type: ignore[union-attr]
    info, run = _run(runs)
    driver = json.loads((run.path / "review" / "driver.json").read_text())
    # its workers: they must not outlive it
    workers = [int(p) for p in subprocess.run(["pgrep", "-P", str(driver["pid"])], capture_output=True,
                                               text=True).stdout.split()]
    os.kill(driver["pid"], signal.SIGKILL)
    term.wait_for(w1, r"EXITED rc=137")
    deadline = time.monotonic() + 15
    while any(_pid_alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_pid_alive(p) for p in workers), "a worker outlived the killed chat"
    assert [r["step_id"] for r in run.trace()] == ["g1b0"]

    w2 = term.start("chat", "--attach", info.id, "--run-dir", runs)
    s = term.wait_for(w2, r"── review g2b0[\s\S]*proposal \(")
    assert proposal in s, "the resumed review shows another proposal: the strategist ran again"
    term.send(w2, "/status")
    term.wait_for(w2, r"driven here")
    term.send(w2, "/approve")
    term.wait_for(w2, r"── step g2b0 .*\[approve by chat:")
    term.wait_for(w2, r"── review g3b0")
    term.send(w2, "/reject not this one")  # a rejection does not count against the 3 iterations
    term.wait_for(w2, r"── review g4b0")
    term.send(w2, "/approve")
    term.wait_for(w2, r"run \S+: finished", timeout=120)
    term.send(w2, "/quit")
    s = term.wait_for(w2, r"EXITED rc=0")
    assert "Traceback" not in s

    trace = run.trace()
    assert [r["step_id"] for r in trace] == ["g1b0", "g2b0", "g3b0", "g4b0"], "a step was lost or repeated"
    assert [r["review"]["decision"] for r in trace] == ["approve", "approve", "reject", "approve"]
    assert trace[1]["proposal"]["what"] == proposal
    assert RunStore(runs).open(info.id).info().status == "finished"


def test_chat_attach_reviews_a_run_that_optimize_drives(term: Terminal, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    w1 = term.start("optimize", PROBLEM, "--seed-kernel", SEED, "--device", "cpu", "--trials", "1", "--iterations", "4",
                    "--branches", "1", "--review", "proposals", "--run-dir", runs)
    s = term.wait_for(w1, r"chat --attach\s+\d{8}-\d{6}-\w+")
    run_id = re.search(r"chat --attach\s+(\d{8}-\d{6}-\w+)", s).group(1)  # type: ignore[union-attr]
    w2 = term.start("chat", "--attach", run_id, "--run-dir", runs)
    term.wait_for(w2, r"driven by another process: reviewing it from here")
    term.wait_for(w2, r"── review g1b0")
    term.send(w2, "/approve")
    term.wait_for(w2, r"── step g1b0 .*\[approve by chat:")
    term.wait_for(w2, r"── review g2b0")
    term.send(w2, "/status")
    term.wait_for(w2, r"driven by another process")
    term.send(w2, "/stop")  # the driver, in the other terminal, stops: the review stays pending
    s2 = term.wait_for(w2, r"EXITED rc=0", timeout=120)
    s1 = term.wait_for(w1, r"EXITED rc=\d+", timeout=120)
    assert "awaiting review" in s1 and "Traceback" not in s1 + s2
    info, run = _run(runs)
    assert [r["step_id"] for r in run.trace()] == ["g1b0"] and info.status == "awaiting review"
    assert not ReviewDesk(run).driven_elsewhere()
