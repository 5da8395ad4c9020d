"""GPU-only verifier cases (docs/verifier.md A6, C24 and the side-stream case of B16), run on a GPU host.

`make test-gpu` (or `pytest -m gpu`) on a machine with CUDA; skipped everywhere else.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from kernelwright.evaluators import EvalPolicy, Evaluator, Limits, Reason, load_problem

HERE = Path(__file__).parent / "fixtures"
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


@pytest.fixture(scope="module")
def evaluator():
    policy = EvalPolicy(trials=3, limits=Limits(call_s=60, first_call_s=120))
    with Evaluator(load_problem(HERE / "add_problem.py"), "cuda", policy) as ev:
        yield ev


@pytest.fixture(scope="module")
def evaluator_nostatic():
    policy = EvalPolicy(trials=3, static_check=False, limits=Limits(call_s=60, first_call_s=120))
    with Evaluator(load_problem(HERE / "add_problem.py"), "cuda", policy) as ev:
        yield ev


def _eval(ev, name):
    t0 = time.monotonic()
    r = ev.evaluate((HERE / name).read_text())
    return r, time.monotonic() - t0


def test_honest_kernel_passes_on_gpu(evaluator):
    r, _ = _eval(evaluator, "honest_add.py")
    assert r.passed, f"{r.reason}: {r.detail}"
    assert r.kernel_coverage is not None and r.kernel_coverage >= 0.5


def test_side_stream_is_caught_statically_and_at_run_time(evaluator, evaluator_nostatic):
    r, _ = _eval(evaluator, "side_stream.py")
    assert (r.reason, r.rule) == (Reason.FORBIDDEN_CODE, "stream_creation"), r.detail
    r, _ = _eval(evaluator_nostatic, "side_stream.py")
    assert r.reason == Reason.FORBIDDEN_CALL, f"{r.reason}: {r.detail}"


def test_unwritten_output_is_stale(evaluator):
    r, _ = _eval(evaluator, "unwritten_output.py")
    assert r.reason == Reason.STALE_OUTPUT, f"{r.reason}: {r.detail}"


def test_illegal_memory_access_is_a_cuda_error_verdict(evaluator):
    r, _ = _eval(evaluator, "illegal_access.py")
    assert r.reason in (Reason.CUDA_ERROR, Reason.CRASHED), f"{r.reason}: {r.detail}"
    # The run goes on: the next candidate gets a fresh, healthy worker.
    r, _ = _eval(evaluator, "honest_add.py")
    assert r.passed, f"{r.reason}: {r.detail}"


def test_device_out_of_memory_is_a_verdict(evaluator):
    r, _ = _eval(evaluator, "device_oom.py")
    assert r.reason == Reason.OUT_OF_MEMORY, f"{r.reason}: {r.detail}"


def test_host_round_trip_is_forbidden(evaluator):
    r, _ = _eval(evaluator, "host_roundtrip.py")
    assert r.reason in (Reason.FORBIDDEN_OP, Reason.FORBIDDEN_CALL), f"{r.reason}: {r.detail}"


def test_quick_check_judges_correctness_without_timing(evaluator):
    """The coder's quick check (issue 10): the same guards on fewer input sets, no timing, faster than a full
    verification; a wrong kernel fails it the same way."""
    honest = (HERE / "honest_add.py").read_text()
    full, full_s = _eval(evaluator, "honest_add.py")
    t0 = time.monotonic()
    quick = evaluator.evaluate(honest, quick=True)
    quick_s = time.monotonic() - t0
    assert quick.passed and quick.timing is None and quick.timing_unavailable == "quick check: correctness only"
    assert full.timing is not None and len(quick.trials) < len(full.trials)
    assert quick_s < full_s, (quick_s, full_s)
    r = evaluator.evaluate((HERE / "unwritten_output.py").read_text(), quick=True)
    assert r.reason == Reason.STALE_OUTPUT, f"{r.reason}: {r.detail}"


def test_device_facts_name_the_gpu(evaluator):
    from kernelwright.evaluators import render_facts

    f = evaluator.device_facts()
    assert f.timed and f.sms and f.sms > 0 and f.l2_bytes and f.smem_per_sm_bytes and f.regs_per_sm
    assert f.peak_copy_bytes_per_s and f.matmul_flops.get("bf16") and f.problem_bytes
    text = render_facts(f)
    assert f.name in text and f"{f.sms} SMs" in text and "measured copy bandwidth" in text
