"""False rejections are bugs too: every honest kernel must pass the full verifier.

Covers the honest pairs in tests/kernels/honest (`<name>_problem.py` with `<name>_candidate.py`) and the
bundled examples (`examples/*/problem.py` with their `seed.py`), with the static filter, the run-time
guards and the sandbox all on: on the CPU through Triton's interpreter by default, or on the device named
by KW_TEST_DEVICE (tests/conftest.py), where a passing kernel is also timed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelwright.evaluators import EvalPolicy, EvalResult, Evaluator, Limits, WorkerPool, load_problem

REPO = Path(__file__).resolve().parents[2]
HONEST = sorted((REPO / "tests" / "kernels" / "honest").glob("*_problem.py"))
EXAMPLES = sorted((REPO / "examples").glob("*/problem.py"))
TRIALS = 2


def describe(result: EvalResult) -> str:
    checks = "; ".join(f"{c.name}={c.outcome}" + (f" ({c.detail[:160]})" if c.outcome == "fail" else "")
                       for c in result.checks)
    return (f"verdict={result.verdict} reason={result.reason} rule={result.rule}\n  detail: {result.detail}\n"
            f"  checks: {checks}\n  candidate log: {result.candidate_log[-800:]}")


@pytest.fixture(scope="module")
def pool(test_device: str) -> Iterator[WorkerPool]:
    with WorkerPool(test_device, Limits(), spares=1 if test_device == "cpu" else 3) as p:
        yield p


def _check(problem: Path, candidate: Path, pool: WorkerPool, device: str) -> EvalResult:
    assert candidate.is_file(), f"{problem.name} has no {candidate.name}"
    # No torch.compile baseline: it says nothing about the verdict and costs tens of seconds on a GPU.
    with Evaluator(load_problem(problem), device, EvalPolicy(trials=TRIALS, compile_mode=None), pool=pool) as ev:
        result = ev.evaluate(candidate.read_text())
    assert result.verdict == "pass", f"honest kernel {candidate} rejected:\n{describe(result)}"
    assert result.reason == "ok"
    assert result.kernels, "a passing candidate must have launched its kernels"
    assert result.max_rel_error is not None and result.tolerance is not None
    assert result.max_rel_error <= result.tolerance
    if device != "cpu":
        assert result.timing is not None, f"a passing kernel on {device} must be timed: {result.timing_unavailable}"
    return result


@pytest.mark.parametrize("problem", HONEST, ids=[p.name.removesuffix("_problem.py") for p in HONEST])
def test_honest_pair_passes(problem: Path, pool: WorkerPool, test_device: str) -> None:
    _check(problem, problem.with_name(problem.name.replace("_problem.py", "_candidate.py")), pool, test_device)


@pytest.mark.slow
@pytest.mark.parametrize("problem", EXAMPLES, ids=[p.parent.name for p in EXAMPLES])
def test_example_seed_passes(problem: Path, pool: WorkerPool, test_device: str) -> None:
    result = _check(problem, problem.with_name("seed.py"), pool, test_device)
    assert not result.problem_flags, f"the example problem is degenerate: {result.problem_flags}"


def test_there_are_honest_kernels() -> None:
    assert HONEST, "tests/kernels/honest holds no <name>_problem.py files"
    assert len(EXAMPLES) >= 3
