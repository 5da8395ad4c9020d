"""Device hosts (`evaluators.hosts`): each device judged in a process of its own, on the CPU here.

A host judges like the run's own process would; it never holds a secret-looking variable of the driver's; one
SIGKILLed mid-evaluation is replaced and the verdict still comes; one that does not answer is given up on
within its limit; a host ends when its driver dies; `optimize` and `bench` use hosts when asked (`--hosts on`)
or, by default, when a run spreads over several devices."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelwright.agents.context import RunConfig
from kernelwright.cli import app
from kernelwright.evaluators import EvalPolicy, load_problem
from kernelwright.evaluators.hosts import LocalSlot

sys.path.insert(0, str(Path(__file__).resolve().parent))
from proctree import children  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
HONEST = ROOT / "tests" / "kernels" / "honest"
ADV = ROOT / "tests" / "adversarial"
PLANTED = "sk-driver-planted-0123456789"


def _children(pid: int) -> list[int]:
    return children().get(pid, [])


def _hosts() -> list[int]:
    """The device host processes among this test process's descendants (not other sessions' hosts)."""
    kids = children()
    out, todo = [], list(kids.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        todo += kids.get(pid, [])
        try:
            if b"kernelwright.evaluators.hosts" in Path(f"/proc/{pid}/cmdline").read_bytes() and _alive(pid):
                out.append(pid)
        except OSError:
            continue
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_gone(pid: int, within_s: float = 30.0) -> bool:
    deadline = time.monotonic() + within_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _alive(pid)


def test_which_runs_use_hosts() -> None:
    assert RunConfig(device="cuda:0,cuda:1", branches=4).uses_hosts()
    assert not RunConfig(device="cuda:0,cuda:1", branches=1).uses_hosts()  # one branch: one device in use
    assert not RunConfig(device="cuda:0,cuda:1", branches=4, hosts="off").uses_hosts()
    assert not RunConfig(device="cuda:0", branches=4).uses_hosts()
    assert RunConfig(device="cpu", hosts="on").uses_hosts()
    assert not RunConfig(device="cuda", cluster="ray", actors=2, branches=4, hosts="on").uses_hosts()  # actors are


def test_a_host_judges_in_its_own_process_and_never_holds_the_drivers_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLANTED_API_KEY", PLANTED)
    slot = LocalSlot("cpu", name="plain")
    try:
        ev = slot.evaluator(load_problem(HONEST / "relu_problem.py"), EvalPolicy(trials=1))
        result = ev.evaluate((HONEST / "relu_candidate.py").read_text())
        pid = slot.hello["pid"]
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        hello = slot.call("hello")
    finally:
        slot.close()
    assert result.verdict == "pass", result.detail
    assert int(result.versions["host_pid"]) == pid != os.getpid() and result.versions["host_slot"] == "plain"
    assert hello["removed"] == [] and hello["secret_names"] == []  # it never had them: nothing to remove
    assert PLANTED.encode() not in environ and b"PLANTED_API_KEY" not in environ
    assert _wait_gone(pid)  # closed with its slot


def test_a_host_killed_mid_evaluation_is_replaced_and_the_verdict_still_comes() -> None:
    slot = LocalSlot("cpu", name="killed")
    ev = slot.evaluator(load_problem(HONEST / "relu_problem.py"), EvalPolicy(trials=2))
    got: list = []
    t = threading.Thread(target=lambda: got.append(ev.evaluate((HONEST / "relu_candidate.py").read_text())))
    try:
        t.start()
        killed = None
        deadline = time.monotonic() + 120
        while killed is None and time.monotonic() < deadline:  # once the host has started a candidate worker
            pid = slot.hello.get("pid")
            if pid and _children(pid):
                os.kill(pid, signal.SIGKILL)
                killed = pid
            time.sleep(0.05)
        t.join(300)
        assert killed is not None, "no host was seen with a worker"
        assert got and got[0].verdict == "pass", got
        assert int(got[0].versions["host_pid"]) != killed
        assert len(slot.lost) == 1 and "was lost" in slot.lost[0] and str(killed) in slot.lost[0], slot.lost
    finally:
        slot.close()


def test_a_host_that_does_not_answer_is_given_up_on_not_waited_for() -> None:
    slot = LocalSlot("cpu", name="hung", retries=1, call_timeout_s=0.5)
    t0 = time.monotonic()
    try:
        # building the evaluator takes longer than 0.5 s on the CPU: to the driver, a hang
        result = slot.evaluator(load_problem(HONEST / "relu_problem.py"), EvalPolicy(trials=1)).evaluate(
            (HONEST / "relu_candidate.py").read_text())
    finally:
        slot.close()
    assert result.verdict == "error" and result.reason == "evaluator_error"
    assert "the device host process could not judge" in result.detail and "no answer within 0.5 s" in result.detail
    assert len(slot.lost) == 2 and time.monotonic() - t0 < 120
    assert not _hosts()  # both were killed


def test_a_host_ends_with_its_driver(tmp_path: Path) -> None:
    driver = tmp_path / "driver.py"
    driver.write_text(textwrap.dedent("""
        import sys, time
        from kernelwright.evaluators.hosts import LocalSlot
        slot = LocalSlot("cpu")
        host, _ = slot.actor()
        print(slot.hello["pid"], host.folder, flush=True)
        time.sleep(600)
    """))
    proc = subprocess.Popen([sys.executable, str(driver)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        pid, folder = proc.stdout.readline().split()
        host = int(pid)
        assert _alive(host) and Path(folder, "s").exists()
        proc.kill()  # no goodbye: the host learns from its stdin
        proc.wait(30)
        assert _wait_gone(host), "the host outlived its driver"
        assert not Path(folder).exists()  # nor is its socket left behind
    finally:
        proc.kill()


def test_a_host_ignores_the_terminals_ctrl_c_and_the_drivers_current_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "triton.py").write_text("__version__ = 'SHADOWED'\n")
    monkeypatch.chdir(tmp_path)
    slot = LocalSlot("cpu", name="session")
    try:
        slot.actor()
        pid = slot.hello["pid"]
        assert slot.hello["triton"] != "SHADOWED"  # the installed triton, not the file where the driver stands
        assert os.getsid(pid) != os.getsid(0)  # not in the terminal's session: Ctrl-C is the driver's
        os.kill(pid, signal.SIGINT)
        time.sleep(1)
        assert _alive(pid) and slot.call("hello")["pid"] == pid
    finally:
        slot.close()


def test_a_host_that_stops_answering_is_killed_at_its_deadline_and_closing_it_does_not_wait() -> None:
    slot = LocalSlot("cpu", name="stopped", retries=0, call_timeout_s=3, close_timeout_s=3)
    ev = slot.evaluator(load_problem(HONEST / "relu_problem.py"), EvalPolicy(trials=1))
    try:
        slot.actor()
        pid = slot.hello["pid"]
        os.kill(pid, signal.SIGSTOP)  # frozen: a wedged host, as a GPU hang would leave it
        t0 = time.monotonic()
        result = ev.evaluate((HONEST / "relu_candidate.py").read_text())
        assert time.monotonic() - t0 < 15
        assert result.verdict == "error" and "gave no answer within 3 s" in result.detail, result.detail
        assert _wait_gone(pid)
        slot.actor()  # a fresh host, frozen too: closing the slot gives up on it after close_timeout_s
        os.kill(slot.hello["pid"], signal.SIGSTOP)
        t0 = time.monotonic()
    finally:
        slot.close()
    assert time.monotonic() - t0 < 15 and not _hosts()


@pytest.mark.timeout(600)
def test_optimize_and_bench_judge_in_hosts(tmp_path: Path) -> None:
    # one branch and two trials per family: with two evaluations at once on a 2-core CI machine, or few trials,
    # the interpreter's share of the forward's wall time (the CPU's decoy check) was seen once in 12 under the
    # bar for this tiny honest kernel
    runs = tmp_path / "runs"
    r = CliRunner().invoke(app, ["optimize", str(HONEST / "relu_problem.py"), "--seed-kernel",
                                 str(HONEST / "relu_candidate.py"), "--iterations", "2", "--branches", "1",
                                 "--trials", "2", "--device", "cpu", "--hosts", "on", "--profile", "off",
                                 "--run-dir", str(runs)])
    assert r.exit_code == 0, r.output
    (run_dir,) = list(runs.iterdir())
    evals = [json.loads(p.read_text()) for p in (run_dir / "evals").glob("*.json")]
    assert evals and all(e["verdict"] == "pass" and int(e["versions"]["host_pid"]) != os.getpid() for e in evals)
    assert json.loads((run_dir / "run.json").read_text())["config"]["settings"]["hosts"] == "on"

    suite, kernels = tmp_path / "suite", tmp_path / "kernels"
    for name, problem, kernel in (("level1/1_ReLU.py", HONEST / "relu_problem.py", HONEST / "relu_candidate.py"),
                                  ("level1/2_ReLU_signs.py", ADV / "problems" / "relu.py",
                                   ADV / "candidates" / "a05_identity_relu.py")):
        for folder, src in ((suite, problem), (kernels, kernel)):
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, folder / name)
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["bench", str(suite), "--kernels", str(kernels), "--device", "cpu", "--hosts", "on",
                                 "--trials", "1", "--out", str(out)])
    assert r.exit_code == 0, r.output
    rows = {json.loads(x)["problem"]: json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()}
    assert {p: (row["verdict"], row["reason"]) for p, row in rows.items()} == {
        "level1/1_ReLU.py": ("pass", "ok"), "level1/2_ReLU_signs.py": ("fail", "wrong_output")}
    assert all(row["actor"] and int(row["actor"].rsplit(":", 1)[1]) != os.getpid() for row in rows.values())
    assert not _hosts()  # every host ended with its run


def test_the_driver_adopts_and_sweeps_what_a_killed_host_had_adopted(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host is its candidates' subreaper; killed (lost mid-evaluation), it would hand what they left behind to init.
    The driver becomes a subreaper when it starts a host and sweeps after killing one (a reviewer's finding)."""
    from kernelwright.evaluators import hosts

    asked: list[str] = []
    monkeypatch.setattr(hosts.reaper, "become_subreaper", lambda: asked.append("subreaper") or True)
    monkeypatch.setattr(hosts, "sweep_orphans", lambda: asked.append("sweep") or [])
    slot = LocalSlot("cpu", name="adopting")
    try:
        host = slot._start()
        assert asked == ["subreaper"]
        host.kill()
        assert asked == ["subreaper", "sweep"] and host.proc.poll() is not None
    finally:
        slot.close()
