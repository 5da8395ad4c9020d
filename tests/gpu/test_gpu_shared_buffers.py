"""The buffers shared with a worker hold nothing of the judge's (docs/verifier.md class 27), on a GPU host.

Inputs reach the candidate in device buffers the worker allocates and the trusted process opens; outputs
come back the same way. A kernel that scans around the pointers it was given may crash its own process or
corrupt its own memory, but it cannot read or change the expected outputs, and the judge goes on working.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernelwright.evaluators import EvalPolicy, Evaluator, Reason, load_problem

HERE = Path(__file__).parent / "fixtures"
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_a_kernel_scanning_around_shared_buffers_gains_nothing() -> None:
    with Evaluator(load_problem(HERE / "add_problem.py"), "cuda", EvalPolicy(trials=2, timing=False)) as ev:
        r = ev.evaluate((HERE / "shared_scan.py").read_text())
        assert not r.passed, "writing outside its buffers must not go unnoticed"
        assert r.verdict == "fail" and r.reason in (Reason.CUDA_ERROR, Reason.CRASHED, Reason.INPUT_MUTATED,
                                                    Reason.WRONG_OUTPUT), (r.reason, r.detail)
        assert any(c.name == "transport" and "IPC" in c.detail for c in r.checks), r.checks
        # The judge's own context is intact: the next evaluation on the same GPU is normal.
        ok = ev.evaluate((HERE / "honest_add.py").read_text())
        assert ok.passed, f"{ok.reason}: {ok.detail}"


def test_outputs_and_inputs_travel_without_host_copies() -> None:
    with Evaluator(load_problem(HERE / "add_problem.py"), "cuda", EvalPolicy(trials=2, timing=False)) as ev:
        r = ev.evaluate((HERE / "honest_add.py").read_text())
    assert r.passed, r.detail
    assert any(c.name == "transport" and "owned by the worker" in c.detail for c in r.checks)
