"""Class 26 (docs/verifier.md), the escape route: a candidate's grandchild that calls setsid() leaves its worker's
process group, survives the group's SIGKILL and is re-parented when its parent ends. The trusted process is a
child subreaper (`reaper.become_subreaper`), so the orphan becomes its child, and the sweep (`reaper.sweep`)
kills what is confined and not a live worker, and nothing else.

Each scenario runs in a small Python process of its own, never in pytest's: becoming a subreaper is for life.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a child subreaper and /proc are Linux's")

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = ROOT / "adversarial" / "problems" / "relu.py"

# Forks a process that confines itself as a worker does (no_new_privs and the seccomp socket filter) and
# forks a grandchild that calls setsid() and sleeps; the middle process then ends, leaving the grandchild.
PRELUDE = """
import json, os, subprocess, sys, time
from kernelwright.evaluators import reaper, sandbox

def escapee():
    r, w = os.pipe()
    if os.fork() == 0:
        sandbox.no_sockets()
        if os.fork() == 0:
            os.setsid()
            null = os.open(os.devnull, os.O_RDWR)  # never holds the test's pipes open, should it survive
            os.dup2(null, 1); os.dup2(null, 2)
            os.write(w, str(os.getpid()).encode())
            while True:
                time.sleep(1)
        os._exit(0)
    os.close(w)
    pid = int(os.read(r, 32))
    os.wait()  # the middle process
    return pid

def ppid(pid):
    with open(f"/proc/{pid}/stat") as f:
        s = f.read()
    return int(s[s.rindex(")") + 2:].split()[1])

def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return False
    return s[s.rindex(")") + 2:].split()[0] not in ("Z", "X")

def confined_sleeper():
    code = "from kernelwright.evaluators import sandbox; sandbox.no_sockets(); import time; time.sleep(60)"
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(500):  # until its filter is on
        with open(f"/proc/{p.pid}/status") as f:
            if "NoNewPrivs:\\t1" in f.read():
                return p
        time.sleep(0.02)
    raise SystemExit("the sleeper never confined itself")
"""


def _scenario(body: str, timeout: float = 60) -> dict:
    """Run PRELUDE + `body` in a fresh interpreter; the JSON object it printed last."""
    proc = subprocess.run([sys.executable, "-c", PRELUDE + body], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT.parent)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def test_an_escaped_confined_grandchild_is_adopted_and_killed() -> None:
    out = _scenario("""
ok = reaper.become_subreaper()
pid = escapee()
adopted = ppid(pid) == os.getpid()
killed = reaper.sweep(set)
print(json.dumps({"ok": ok, "pid": pid, "adopted": adopted, "killed": killed, "alive": alive(pid),
                  "again": reaper.sweep(set)}))
""")
    try:
        assert out["ok"], out
        assert out["adopted"], f"the orphan was not re-parented to the subreaper: {out}"
        assert out["killed"] == [out["pid"]], out
        assert not out["alive"], out
        assert out["again"] == [], out  # killed and reaped: nothing is left for a second sweep
    finally:
        _kill(out["pid"])


def test_an_orphan_that_ended_by_itself_is_reaped_not_left_a_zombie() -> None:
    out = _scenario("""
reaper.become_subreaper()
pid = escapee()
os.kill(pid, 9)
time.sleep(0.3)
with open(f"/proc/{pid}/stat") as f:
    zombie = f.read().split(") ")[1][0] == "Z"
killed = reaper.sweep(set)
print(json.dumps({"zombie": zombie, "killed": killed, "gone": not os.path.exists(f"/proc/{pid}")}))
""")
    assert out["zombie"], out
    assert out["killed"] == [] and out["gone"], out


def test_the_live_workers_are_asked_after_the_scan_and_their_groups_are_spared() -> None:
    """A spare started while another sweep waited for the lock is confined a second later: the live workers are
    asked for in each round, after the scan, not once before the lock. And an orphan still in a live worker's
    process group is that worker's to end (its group dies with it), not another evaluation's sweep's."""
    out = _scenario("""
reaper.become_subreaper()
late = confined_sleeper()  # a worker that registered only after the sweep began
asked = []
def known():
    asked.append(1)
    return {late.pid} if len(asked) >= 1 else set()
spared_late = reaper.sweep(known)
# an orphan in a live worker's group: a confined child of ours whose group is the "worker's" pid
code = "from kernelwright.evaluators import sandbox; sandbox.no_sockets(); import time; time.sleep(60)"
leader = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          process_group=0)  # its own group, as a worker is
member = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          process_group=leader.pid)
for p in (leader, member):  # until both are confined
    for _ in range(1000):
        with open(f"/proc/{p.pid}/status") as f:
            if "NoNewPrivs:\t1" in f.read():
                break
        time.sleep(0.02)
spared_group = reaper.sweep(lambda: {late.pid, leader.pid})
member_alive = alive(member.pid)
unnamed = reaper.sweep(lambda: {late.pid})  # the group's leader no longer a worker: both go
for p in (late, leader, member):
    p.kill()
print(json.dumps({"late": spared_late, "asked": len(asked), "group": spared_group, "member": member_alive,
                  "unnamed": sorted(unnamed), "pids": sorted([leader.pid, member.pid])}))
""")
    assert out["late"] == [] and out["asked"] >= 1, out
    assert out["group"] == [] and out["member"], out
    assert out["unnamed"] == out["pids"], out


def test_unconfined_children_and_known_workers_are_spared() -> None:
    out = _scenario("""
reaper.become_subreaper()
plain = subprocess.Popen(["sleep", "60"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
worker = confined_sleeper()
spared = reaper.sweep(lambda: {worker.pid})
result = {"spared": spared, "plain": alive(plain.pid), "worker": alive(worker.pid)}
result["unknown"] = reaper.sweep(set) == [worker.pid]  # the same process, not named: killed
plain.kill(); plain.wait(); worker.kill()
print(json.dumps(result))
""")
    assert out["spared"] == [], out
    assert out["plain"], "an unconfined child of the trusted process (a compiler, a profiler) was killed"
    assert out["worker"], "a live worker named in `known` was killed"
    assert out["unknown"], "the confined sleeper was not killed once it was not named: the test proves nothing"


CANDIDATE = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(y_ptr + offs, tl.where(x > 0, x, 0.0), mask=m)


_libc = torch.ctypes.CDLL(None)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        if _libc.fork() == 0:
            _libc.setsid()
            if _libc.fork() == 0:
                _libc.prctl(15, b"MARKER", 0, 0, 0)  # PR_SET_NAME: how the test finds it
                while True:
                    _libc.pause()
            _libc._exit(0)

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 8192),)](x, y, n, BLOCK=8192)
        return y
'''

EVALUATE = """
import json, os, sys
from kernelwright.evaluators import EvalPolicy, Evaluator, load_problem
with Evaluator(load_problem(sys.argv[1]), "cpu", EvalPolicy(trials=1, static_check=False, spares=0,
                                                             compile_mode=None)) as ev:
    result = ev.evaluate(open(sys.argv[2]).read())
print(json.dumps({"reason": str(result.reason), "pid": os.getpid()}))
"""


def _named(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/comm") as f:
                if f.read().strip() == marker:
                    found.append(int(entry))
        except (OSError, ValueError):
            continue
    return found


def test_a_candidate_that_escapes_its_group_leaves_nothing_running(tmp_path: Path) -> None:
    """Through the real pool: the candidate (static filter off; libc's fork, which no Python hook sees) leaves a
    setsid() grandchild behind. After the evaluation, nothing of it runs."""
    marker = "kwesc" + secrets.token_hex(4)
    candidate = tmp_path / "escape.py"
    candidate.write_text(CANDIDATE.replace("MARKER", marker))
    try:
        proc = subprocess.run([sys.executable, "-c", EVALUATE, str(PROBLEM), str(candidate)], capture_output=True,
                              text=True, timeout=240, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-2000:]
        time.sleep(0.5)
        left = [p for p in _named(marker) if _state(p) not in ("Z", "X")]
        assert left == [], f"the candidate's escaped process still runs: pids {left}"
        assert "killed 1 process(es) a candidate left behind" in proc.stderr, proc.stderr[-2000:]
    finally:
        for pid in _named(marker):
            _kill(pid)


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return "X"
    return s[s.rindex(")") + 2:].split()[0]
