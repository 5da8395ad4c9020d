"""A kernel that fails inside Triton's interpreter is reported at its own line, not only at the launch: the
interpreter raises the error again at the launch with the kernel's frames left on its cause, and a model that was
shown only the launch line had to guess which of its kernel's lines the interpreter refused (a GroupNorm run on an
H200, 2026-11-26)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelwright.evaluators import EvalPolicy, Evaluator, problem_from_source

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests" / "graphs" / "add_problem.py"
SEED = (ROOT / "tests" / "graphs" / "add_seed.py").read_text()

pytestmark = pytest.mark.timeout(240)


def test_an_error_inside_the_kernel_names_the_kernels_line() -> None:
    # a float mask: Triton's interpreter refuses it inside the kernel ("mask has unsupported dtype")
    bad_line = "tl.store(o + offs, tl.load(x + offs, mask=m.to(tl.float32)) + tl.load(y + offs, mask=m), mask=m)"
    source = SEED.replace("tl.store(o + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)", bad_line)
    assert source != SEED
    kernel_line = next(i for i, line in enumerate(source.splitlines(), 1) if bad_line in line)
    launch_line = next(i for i, line in enumerate(source.splitlines(), 1) if "add_kernel[(" in line)
    problem = problem_from_source(PROBLEM.read_text(), str(PROBLEM))
    with Evaluator(problem, "cpu", EvalPolicy(trials=1, timing=False)) as ev:
        result = ev.evaluate(source, quick=True)
    assert result.verdict == "fail" and result.reason == "runtime_error", (result.reason, result.detail)
    assert f"candidate line {launch_line}, in forward" in result.detail, result.detail
    assert f"candidate line {kernel_line}, in add_kernel" in result.detail, result.detail
