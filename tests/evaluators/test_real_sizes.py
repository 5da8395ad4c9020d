"""What makes evaluation work at KernelBench's real sizes, checked on the CPU.

- the footprint of a problem is traced on the meta device and the memory plan decides, before anything large
  is allocated, whether float64 gold fits, how many timing sets fit, or that the problem is too large
  (`problem_too_large`, one sentence, exit 2);
- buffers that encode structure (a causal mask) keep their values while parameters and running statistics
  are re-randomised;
- a candidate that hangs is judged within a minute with the default limits, and no worker outlives a
  `kernelwright eval` or `kernelwright optimize` that is SIGKILLed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from kernelwright.evaluators import EvalPolicy, Evaluator, Reason, load_problem
from kernelwright.evaluators.footprint import Footprint, estimate
from kernelwright.evaluators.inputs import is_structure, rerandomize_parameters
from kernelwright.evaluators.memory import plan_memory

REPO = Path(__file__).resolve().parents[2]
ADV = REPO / "tests" / "adversarial"
HONEST = REPO / "tests" / "kernels" / "honest"
GB = 10**9

SOFTMAX_4096x393216 = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)

def get_inputs():
    return [torch.rand(4096, 393216)]

def get_init_inputs():
    return []
'''


def _write(tmp_path: Path, name: str, source: str) -> Path:
    p = tmp_path / f"{name}.py"
    p.write_text(source)
    return p


# -- the footprint and the plan ---------------------------------------------------------------------------


def test_footprint_of_kernelbench_softmax_is_traced_without_memory(tmp_path: Path) -> None:
    """23_Softmax's shipped shape: 6.44 GB in, 6.44 GB out, traced in milliseconds on the meta device."""
    est = estimate(load_problem(_write(tmp_path, "softmax", SOFTMAX_4096x393216)))
    n = 4096 * 393216 * 4
    assert est.native is not None and est.gold is not None, est.why_unknown
    assert est.native.input_bytes == n and est.native.output_bytes == n
    assert est.native.peak_bytes == 2 * n  # the input and the output, nothing else alive at once
    assert est.gold.input_bytes == 2 * n and est.gold.peak_bytes == 4 * n  # float64 copies


def test_footprint_follows_temporaries_and_frees() -> None:
    """x*2 then +1 then relu: one temporary dies before the output is made, so the peak is three tensors."""

    class P:
        path = "inline"

        class model_cls(nn.Module):  # noqa: N801 - stands in for a problem's Model
            def forward(self, x):  # type: ignore[no-untyped-def]
                y = x * 2
                z = y + 1
                del y
                return torch.relu(z)

        @staticmethod
        def get_init_inputs() -> list:
            return []

        @staticmethod
        def get_inputs() -> list:
            return [torch.rand(1000, 1000)]

    est = estimate(P())  # type: ignore[arg-type]
    mb = 4 * 10**6
    assert est.native is not None
    assert est.native.peak_bytes == 3 * mb and est.native.output_bytes == mb and est.native.input_bytes == mb


def _fp(i: float, o: float, peak: float, params: float = 0.0) -> tuple[Footprint, Footprint]:
    native = Footprint(int(i * GB), int(params * GB), int(o * GB), int(peak * GB), int(i * GB))
    gold = Footprint(int(2 * i * GB), int(2 * params * GB), int(2 * o * GB), int(2 * peak * GB), int(2 * i * GB))
    return native, gold


def test_plan_keeps_float64_gold_where_it_fits() -> None:
    native, gold = _fp(6.44, 6.44, 12.88)
    plan = plan_memory(native, gold, 80 * GB, reps=30, pool_bytes=4 << 30)
    assert plan.feasible and plan.gold_precision == "float64"
    assert plan.timing_sets == 2, "two alternating 6.4 GB sets fit on an 80 GB device, a third does not"
    assert plan.trial_bytes <= plan.budget_bytes and plan.timing_bytes <= plan.budget_bytes


def test_plan_falls_back_to_native_gold_and_says_so() -> None:
    native, gold = _fp(6.44, 6.44, 12.88)
    plan = plan_memory(native, gold, 40 * GB, reps=30, pool_bytes=4 << 30)
    assert plan.feasible and plan.gold_precision == "native"
    assert any("tolerance is doubled" in n for n in plan.notes)


def test_plan_refuses_a_problem_that_cannot_fit_in_one_sentence() -> None:
    native, gold = _fp(17.18, 0.14, 17.32)
    plan = plan_memory(native, gold, 24 * GB, reps=30, pool_bytes=4 << 30, device="cuda:0 (a small GPU)")
    assert not plan.feasible
    assert "\n" not in plan.why and "cuda:0 (a small GPU) has 24.00 GB free" in plan.why
    assert "inputs 17.18 GB" in plan.why


def test_plan_for_small_problems_uses_many_timing_sets() -> None:
    native, gold = _fp(0.02, 0.02, 0.04)
    plan = plan_memory(native, gold, 80 * GB, reps=30, pool_bytes=4 << 30)
    assert plan.timing_sets == 30 and plan.hold_bytes == 2 << 30


def test_too_large_for_the_host_is_decided_before_any_attempt(tmp_path: Path) -> None:
    """On the CPU the plan is made against the host's available memory: the 6.4 GB softmax, made 64x larger,
    cannot be evaluated on a 24 GB machine, and says so without allocating anything."""
    huge = SOFTMAX_4096x393216.replace("torch.rand(4096, 393216)", "torch.rand(4096 * 64, 393216)")
    path = _write(tmp_path, "huge", huge)
    t0 = time.monotonic()
    with Evaluator(load_problem(path), "cpu", EvalPolicy(trials=1, spares=0)) as ev:
        r = ev.evaluate((ADV / "candidates" / "honest_softmax_wide.py").read_text())
    assert r.verdict == "error" and r.reason == Reason.PROBLEM_TOO_LARGE, r.detail
    assert "one trial needs" in r.detail and "GB free" in r.detail and "\n" not in r.detail
    assert time.monotonic() - t0 < 60
    proc = subprocess.run([sys.executable, "-m", "kernelwright.cli", "eval", str(path),
                           str(ADV / "candidates" / "honest_softmax_wide.py"), "--device", "cpu", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    out = json.loads(proc.stdout)
    assert out["verdict"] == "error" and out["reason"] == "problem_too_large"
    assert "Traceback" not in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "kernelwright.cli", "baseline", str(path), "--device", "cpu"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "problem_too_large" in proc.stdout and "Traceback" not in proc.stderr


# -- structure stays, parameters change ---------------------------------------------------------------------


def test_structure_rule() -> None:
    assert is_structure("bias", torch.tril(torch.ones(8, 8)).view(1, 1, 8, 8))
    assert is_structure("mask", torch.triu(torch.full((4, 4), float("-inf")), 1))
    assert is_structure("positions", torch.arange(16, dtype=torch.float32))
    assert not is_structure("running_mean", torch.arange(16, dtype=torch.float32)), "running statistics are state"
    assert not is_structure("running_var", torch.ones(16))
    assert not is_structure("scale", torch.ones(16)), "a constant buffer is a default value, not structure"
    assert not is_structure("table", torch.linspace(0, 1, 16)), "fractional values are state"


def test_rerandomize_keeps_the_mask_and_changes_the_rest() -> None:
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.norm = nn.BatchNorm1d(4)
            self.register_buffer("bias", torch.tril(torch.ones(6, 6)))

    m = M()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    kept = rerandomize_parameters(m, 1234)
    after = m.state_dict()
    assert kept == ["bias"] and torch.equal(after["bias"], before["bias"])
    for name in ("lin.weight", "lin.bias", "norm.weight", "norm.bias", "norm.running_mean", "norm.running_var"):
        assert not torch.equal(after[name], before[name]), name
    assert bool((after["norm.running_var"] > 0).all())


@pytest.mark.slow
def test_causal_attention_with_its_mask_buffer_passes() -> None:
    """minGPT's causal attention keeps its mask as `tril(ones)` in a floating buffer: with the mask kept, an
    honest causal kernel passes (it used to fail: noise made `bias == 0` false everywhere)."""
    problem = load_problem(HONEST / "causal_attention_problem.py")
    with Evaluator(problem, "cpu", EvalPolicy(trials=2, spares=0)) as ev:
        r = ev.evaluate((HONEST / "causal_attention_candidate.py").read_text())
    assert r.passed, f"{r.reason}: {r.detail}"
    assert any(c.name == "buffers" and "bias" in c.detail for c in r.checks)


# -- hangs and orphans -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_hanging_forward_is_judged_within_a_minute_with_default_limits() -> None:
    problem = load_problem(ADV / "problems" / "relu.py")
    t0 = time.monotonic()
    with Evaluator(problem, "cpu", EvalPolicy(trials=1, spares=0)) as ev:
        r = ev.evaluate((ADV / "candidates" / "c24_hang_forward.py").read_text())
        wall = time.monotonic() - t0
        assert r.reason == Reason.TIMEOUT, r.detail
        assert wall < 60, f"judged after {wall:.0f} s"
        # The next evaluation on the same evaluator runs normally.
        ok = ev.evaluate((ADV / "candidates" / "honest_relu.py").read_text())
    assert ok.passed, ok.detail


def _workers_of(pid: int) -> list[int]:
    """Live worker processes started by the trusted process `pid` (they carry --parent PID)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state in ("Z", "X") or b"kernelwright.evaluators.worker" not in argv:
            continue
        if b"--parent" in argv and argv[argv.index(b"--parent") + 1] == str(pid).encode():
            found.append(int(entry))
    return found


def _kill_and_check(cmd: list[str], cwd: Path) -> None:
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + 90
        # Wait until a worker is busy with the hanging candidate (it has loaded it: its scratch holds it).
        while time.monotonic() < deadline:
            busy = [w for w in _workers_of(proc.pid)
                    if any(f.startswith("kw_candidate") for f in _scratch_files(w))]
            if busy:
                break
            time.sleep(0.5)
        else:
            pytest.fail("no worker picked up the candidate within 90 s")
        time.sleep(1.0)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        t0 = time.monotonic()
        while _workers_of(proc.pid) and time.monotonic() - t0 < 10:
            time.sleep(0.2)
        left = _workers_of(proc.pid)
        assert not left, f"workers {left} outlived their evaluator"
    finally:
        if proc.poll() is None:
            proc.kill()


def _scratch_files(pid: int) -> list[str]:
    try:
        return os.listdir(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        return []


@pytest.mark.slow
def test_no_worker_outlives_a_killed_eval(tmp_path: Path) -> None:
    _kill_and_check([sys.executable, "-m", "kernelwright.cli", "eval", str(ADV / "problems" / "relu.py"),
                     str(ADV / "candidates" / "c24_hang_forward.py"), "--device", "cpu"], tmp_path)


@pytest.mark.slow
def test_no_worker_outlives_a_killed_optimize(tmp_path: Path) -> None:
    _kill_and_check([sys.executable, "-m", "kernelwright.cli", "optimize", str(ADV / "problems" / "relu.py"),
                     "--seed-kernel", str(ADV / "candidates" / "c24_hang_forward.py"), "--device", "cpu",
                     "--iterations", "2", "--run-dir", str(tmp_path / "runs")], tmp_path)


def test_ipc_handles_keep_every_byte() -> None:
    """A CUDA IPC handle is 64 raw bytes, NULs included (ctypes' char arrays would stop at the first NUL)."""
    import ctypes

    from kernelwright.evaluators.ipc import HANDLE_BYTES, _Handle, _handle_bytes

    raw = bytes([7, 0, 0, 9] * 16)
    h = _Handle()
    ctypes.memmove(ctypes.addressof(h), raw, HANDLE_BYTES)
    assert _handle_bytes(h) == raw and len(_handle_bytes(h)) == HANDLE_BYTES
