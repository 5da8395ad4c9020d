"""Class 31 (docs/verifier.md): unconfined paths. No candidate runs without the OS sandbox unless the user opted out
by name; a worker under a profiler wrapper is confined like any other; a worker reads nothing of another
worker's scratch.

A machine without Landlock is simulated with `sandbox.REPORT_UNCONFINED_ENV`, a test switch that only makes
the probe and the workers *report* the sandbox missing: the workers confine themselves all the same, which
the opt-out tests check (the switch can turn a run into a refusal, never weaken it). The scratch test plants
a canary in a sibling scratch folder, in the folder that holds every worker's scratch and in the temporary
folder, and a candidate (static filter off) tries to list and read them past the Python-level guards."""

from __future__ import annotations

import errno
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from kernelwright.evaluators import EvalPolicy, Evaluator, Limits, Reason, load_problem, sandbox
from kernelwright.evaluators.pool import Worker, scratch_root
from kernelwright.evaluators.profiling import ncu_command

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = ROOT / "kernels" / "honest" / "relu_problem.py"
HONEST = (ROOT / "kernels" / "honest" / "relu_candidate.py").read_text()
MARKER = "KW-CANDIDATE-IMPORTED"
CANARY = "kw-canary-7f3e1c"


@pytest.fixture
def no_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine's sandbox reported missing (the workers inherit the switch; they confine themselves)."""
    monkeypatch.setenv(sandbox.REPORT_UNCONFINED_ENV, "1")
    monkeypatch.delenv(sandbox.ALLOW_UNCONFINED_ENV, raising=False)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(sandbox.REPORT_UNCONFINED_ENV, raising=False)
    monkeypatch.delenv(sandbox.ALLOW_UNCONFINED_ENV, raising=False)


def _landlock_here() -> None:
    missing = sandbox.unavailable()
    if missing:
        pytest.skip(f"no OS sandbox on this machine: {missing}")


# -- the decision ----------------------------------------------------------------------------------------


def test_the_refusal_names_what_is_missing_and_the_opt_out(no_sandbox: None,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    missing = sandbox.unavailable()
    assert missing is not None and sandbox.REPORT_UNCONFINED_ENV in missing
    why = sandbox.refusal_here()
    assert why is not None and missing in why
    assert "--allow-unconfined" in why and f"{sandbox.ALLOW_UNCONFINED_ENV}=1" in why
    assert sandbox.refusal_here(True) is None
    monkeypatch.setenv(sandbox.ALLOW_UNCONFINED_ENV, "1")
    assert sandbox.refusal_here() is None and EvalPolicy().allow_unconfined
    assert sandbox.refusal_here(False) == why  # an explicit False is not overridden by the environment
    monkeypatch.setenv(sandbox.ALLOW_UNCONFINED_ENV, "0")
    assert sandbox.refusal_here() == why and not EvalPolicy().allow_unconfined


@pytest.mark.parametrize(("value", "allowed"), [("1", True), ("true", True), (" YES ", True), ("on", True),
                                                ("", False), ("0", False), ("no", False), ("2", False)])
def test_the_opt_out_is_read_strictly(value: str, allowed: bool) -> None:
    assert sandbox.allowed_by_environment({sandbox.ALLOW_UNCONFINED_ENV: value}) is allowed


def test_a_machine_with_the_sandbox_is_not_refused(clean_env: None) -> None:
    _landlock_here()
    assert sandbox.refusal_here() is None
    assert not EvalPolicy().allow_unconfined


# -- the evaluation service ------------------------------------------------------------------------------


def test_a_worker_that_cannot_confine_itself_loads_no_candidate(no_sandbox: None) -> None:
    """Defence in depth: asked directly (as a trusted side that skipped its check would), the worker refuses
    every request and never writes the candidate to its scratch."""
    w = Worker("cpu", Limits())
    try:
        info = w.wait_ready()
        assert info["refused"] and "--allow-unconfined" in info["refused"], info
        payload = {"source": f"print({MARKER!r})\n" + HONEST, "init_args": [], "state": {}, "cast_dtype": None,
                   "allow_streams": False}
        header, _ = w.request({"op": "load"}, payload, 60.0, "import and construction")
        assert (header["ok"], header["kind"], header["detail"]) == (False, "unconfined", info["refused"])
        assert w.request({"op": "call"}, {"inputs": []}, 60.0, "a call")[0]["kind"] == "unconfined"
        assert not os.path.exists(os.path.join(w.scratch, "kw_candidate.py"))
        assert MARKER not in w.log_tail()
    finally:
        w.close()


def test_the_verdict_is_unconfined_and_nothing_ran(no_sandbox: None) -> None:
    source = f"print({MARKER!r})\n" + HONEST
    with Evaluator(load_problem(PROBLEM), "cpu", EvalPolicy(trials=1, spares=0)) as ev:
        result = ev.evaluate(source)
    assert result.verdict == "error" and result.reason == Reason.UNCONFINED, (result.reason, result.detail)
    assert "--allow-unconfined" in result.detail and sandbox.ALLOW_UNCONFINED_ENV in result.detail
    check = next(c for c in result.checks if c.name == "sandbox")
    assert check.outcome == "fail"
    assert not result.trials and MARKER not in (result.candidate_log or "")


def test_the_opt_out_by_name_runs_it_confined_all_the_same(no_sandbox: None) -> None:
    with Evaluator(load_problem(PROBLEM), "cpu", EvalPolicy(trials=1, spares=0, allow_unconfined=True)) as ev:
        result = ev.evaluate(HONEST)
    assert result.verdict == "pass", (result.reason, result.detail)
    check = next(c for c in result.checks if c.name == "sandbox")
    assert check.outcome == "info" and "as the user allowed" in check.detail, check.detail
    assert sandbox.REPORT_UNCONFINED_ENV in check.detail  # what was reported missing is said
    if check.detail.startswith("landlock ABI"):  # the switch weakened nothing: the worker confined itself
        assert "no new sockets" in check.detail


def test_the_opt_out_travels_with_the_policy_to_a_device_host(no_sandbox: None) -> None:
    """A device host (another process, as a Ray actor is) decides with the policy it was given: the driver's
    choice, not the host's environment."""
    from kernelwright.evaluators.hosts import LocalSlot

    slot = LocalSlot("cpu", name="unconfined")
    try:
        refused = slot.evaluator(load_problem(PROBLEM), EvalPolicy(trials=1, spares=0)).evaluate(HONEST)
        allowed = slot.evaluator(load_problem(PROBLEM), EvalPolicy(trials=1, spares=0, allow_unconfined=True)) \
            .evaluate(HONEST)
    finally:
        slot.close()
    assert refused.verdict == "error" and refused.reason == Reason.UNCONFINED, (refused.reason, refused.detail)
    assert "host_pid" in refused.versions  # judged over there
    assert allowed.verdict == "pass", (allowed.reason, allowed.detail)


# -- a worker under a profiler wrapper -------------------------------------------------------------------


def test_a_profiled_worker_confines_itself(clean_env: None) -> None:
    """The ncu wrapper's place taken by `env` (which runs the rest of its command line): the worker is told it
    is profiled, never to skip its sandbox, and confines itself."""
    w = Worker("cpu", Limits(), wrapper=["env"])
    try:
        info = w.wait_ready()
        args = [str(a) for a in w.proc.args]  # type: ignore[union-attr]
        assert args[0] == "env" and "--profiled" in args and "--no-sandbox" not in args
        if sandbox.unavailable():
            assert info["refused"], info
        else:
            assert info["refused"] is None and info["sandbox"].startswith("landlock ABI"), info["sandbox"]
            assert "no new sockets" in info["sandbox"] and "profiled" in info["sandbox"]
    finally:
        w.close()


def test_a_profiled_worker_that_cannot_confine_itself_refuses_too(no_sandbox: None) -> None:
    w = Worker("cpu", Limits(), wrapper=["env"])
    try:
        assert w.wait_ready()["refused"]
    finally:
        w.close()


def test_ncu_profiles_the_worker_alone() -> None:
    """ncu injects itself into the worker only, never into a process the candidate starts."""
    cmd = ncu_command("/x/ncu.csv", ["relu_kernel"])
    i = cmd.index("--target-processes")
    assert cmd[i + 1] == "application-only"
    assert "--log-file" in cmd and cmd[cmd.index("--log-file") + 1] == "/x/ncu.csv"


# -- scratch privacy --------------------------------------------------------------------------------------

SCRATCH_CANDIDATE = '''
import torch
import torch.nn as nn

_os = torch.os


def attempt(fn):
    try:
        got = fn()
    except OSError as e:
        return f"{type(e).__name__}{e.errno}"
    return "read:" + (got.decode(errors="replace") if isinstance(got, bytes) else ",".join(sorted(got)))[:200]


def read(path):
    fd = _os.open(path, _os.O_RDONLY)
    try:
        return _os.read(fd, 4096)
    finally:
        _os.close(fd)


def own():
    fd = _os.open("mine.txt", _os.O_WRONLY | _os.O_CREAT, 0o600)
    _os.write(fd, b"own-scratch-ok")
    _os.close(fd)
    return read("mine.txt")


class ModelNew(nn.Module):
    def forward(self, x):
        found = {
            "sibling": attempt(lambda: read(SIBLING + "/canary.txt")),
            "sibling_dir": attempt(lambda: _os.listdir(SIBLING)),
            "root_dir": attempt(lambda: _os.listdir(ROOT)),
            "temp_file": attempt(lambda: read(TEMP_FILE)),
            "temp_dir": attempt(lambda: _os.listdir(TEMP)),
            "own": attempt(own),
        }
        raise RuntimeError("SCRATCH " + " ".join(f"{k}={v}" for k, v in found.items()) + " END")
'''


@pytest.mark.parametrize("switch", [False, True], ids=["confined", "opt-out-with-the-switch"])
def test_a_candidate_reads_nothing_of_another_workers_scratch(switch: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the switch and the opt-out the same refusals hold: the switch only reports, it never weakens."""
    monkeypatch.delenv(sandbox.ALLOW_UNCONFINED_ENV, raising=False)
    if switch:
        monkeypatch.setenv(sandbox.REPORT_UNCONFINED_ENV, "1")
    else:
        monkeypatch.delenv(sandbox.REPORT_UNCONFINED_ENV, raising=False)
    root = scratch_root()
    sibling = tempfile.mkdtemp(prefix=sandbox.SCRATCH_PREFIX, dir=root)  # another worker's scratch, as pool makes it
    Path(sibling, "canary.txt").write_text(CANARY)
    temp_dir = tempfile.mkdtemp(prefix="kw-test-temp-")  # beside the workers' folder, in the temporary folder
    Path(temp_dir, "canary.txt").write_text(CANARY)
    source = (f"SIBLING = {sibling!r}\nROOT = {root!r}\nTEMP = {tempfile.gettempdir()!r}\n"
              f"TEMP_FILE = {os.path.join(temp_dir, 'canary.txt')!r}\n" + SCRATCH_CANDIDATE)
    try:
        policy = EvalPolicy(trials=1, static_check=False, spares=0, allow_unconfined=switch)
        with Evaluator(load_problem(PROBLEM), "cpu", policy) as ev:
            result = ev.evaluate(source)
    finally:
        shutil.rmtree(sibling, ignore_errors=True)
        shutil.rmtree(temp_dir, ignore_errors=True)
    found = re.search(r"SCRATCH ((?:\w+=\S+ )+)END", result.detail)
    assert found is not None, f"the candidate did not run as intended: {result.verdict} {result.reason} {result.detail}"
    got = dict(item.split("=", 1) for item in found.group(1).split())
    sandbox_check = next(c.detail for c in result.checks if c.name == "sandbox")
    if not sandbox_check.startswith("landlock ABI"):
        pytest.skip(f"no Landlock on this machine: {sandbox_check}")
    assert got.pop("own") == "read:own-scratch-ok", found.group(0)  # its own scratch stays its own
    refused = f"PermissionError{errno.EACCES}"  # the kernel's EACCES, not a Python-level guard's refusal
    assert got == dict.fromkeys(got, refused), found.group(0)
    assert CANARY not in result.model_dump_json()


def test_no_folder_that_holds_scratch_is_granted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever names an ancestor of the workers' folder (`/` or the folder above it on sys.path, say), the
    rules grant that ancestor's other entries, never the branch that holds the scratch folders."""
    temp = tmp_path / "temp"
    own = temp / f"{sandbox.SCRATCH_PARENT_PREFIX}a" / f"{sandbox.SCRATCH_PREFIX}b"
    sibling = temp / f"{sandbox.SCRATCH_PARENT_PREFIX}a" / f"{sandbox.SCRATCH_PREFIX}c"
    other_process = temp / f"{sandbox.SCRATCH_PARENT_PREFIX}z" / f"{sandbox.SCRATCH_PREFIX}y"
    for d in (own, sibling, other_process, tmp_path / "lib", temp / "venv"):
        d.mkdir(parents=True)
    monkeypatch.setattr(sys, "path", [str(tmp_path), "/", str(temp / "venv"), str(other_process)])
    granted = sandbox._readable_paths(str(own))
    holders = [str(own.parent), str(temp), "/tmp"]
    assert not [g for g in granted if any(h == g or h.startswith(g.rstrip("/") + "/") for h in holders)], granted
    assert str(sibling) not in granted and str(other_process) not in granted
    assert {str(tmp_path / "lib"), str(temp / "venv"), "/usr"} <= set(granted)  # the rest stays readable
    assert "/proc" not in granted and "/home" not in granted  # `/` named whole grants no hidden folder


def test_scratch_folders_are_private(clean_env: None) -> None:
    """Each worker's scratch is 0700 inside this process's own 0700 folder of workers."""
    w = Worker("cpu", Limits())
    try:
        parent = os.path.dirname(w.scratch)
        assert parent == scratch_root() and os.path.basename(parent).startswith(sandbox.SCRATCH_PARENT_PREFIX)
        assert os.stat(parent).st_mode & 0o777 == 0o700 and os.stat(w.scratch).st_mode & 0o777 == 0o700
    finally:
        w.close()
    assert not os.path.exists(w.scratch)

