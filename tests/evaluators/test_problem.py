"""Problem files: every defect is one clear sentence naming the file, and the optional hooks are honoured.

A broken problem is the user's mistake, not a candidate's: `load_problem` (or, for defects that only show
when the reference first runs, the Evaluator) raises `ProblemError` with one line that names the file and
says what is wrong, and `kernelwright eval` exits 2 with that sentence and no traceback. The valid hooks
(`PRECISION`, `TOLERANCE`, `get_test_inputs`, `ALLOW_STREAMS`) change what the verifier does.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelwright.evaluators import (
    Reason,
    EvalPolicy, Evaluator, Limits, Precision, ProblemError, WorkerPool, load_problem,
)

REPO = Path(__file__).resolve().parents[2]
HONEST_RELU = REPO / "tests" / "adversarial" / "candidates" / "honest_relu.py"

sys.path.insert(0, str(Path(__file__).resolve().parent))
from problem_cases import (  # noqa: E402
    HEAD, INIT, INPUTS, LOAD_BROKEN, RUN_BROKEN, VALID, assert_one_sentence, model_source as _model,
    write_problem as _write,
)


@pytest.fixture(scope="module")
def pool() -> Iterator[WorkerPool]:
    with WorkerPool("cpu", Limits(), spares=1) as p:
        yield p


def _evaluate(problem_path: Path, pool: WorkerPool, candidate: Path = HONEST_RELU, trials: int = 1,
              precision: str | None = None):  # type: ignore[no-untyped-def]
    with Evaluator(load_problem(problem_path, precision), "cpu", EvalPolicy(trials=trials), pool=pool) as ev:
        return ev.evaluate(candidate.read_text())


# -- through the API ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", LOAD_BROKEN)
def test_load_problem_rejects(name: str, tmp_path: Path) -> None:
    source, says = LOAD_BROKEN[name]
    path = _write(tmp_path, name, source)
    with pytest.raises(ProblemError) as e:
        load_problem(path)
    assert_one_sentence(str(e.value), path, says)


@pytest.mark.parametrize("name", RUN_BROKEN)
def test_reference_rejects_on_first_run(name: str, tmp_path: Path, pool: WorkerPool) -> None:
    source, says = RUN_BROKEN[name]
    path = _write(tmp_path, name, source)
    problem = load_problem(path)  # the defect cannot be seen before the reference runs
    try:  # building the reference may already show it; otherwise the first evaluation says so as its verdict
        with Evaluator(problem, "cpu", EvalPolicy(trials=1), pool=pool) as ev:
            result = ev.evaluate(HONEST_RELU.read_text())
        assert result.verdict == "error" and result.reason == Reason.BAD_PROBLEM, (result.reason, result.detail)
        message = result.detail
    except ProblemError as e:
        message = str(e)
    assert_one_sentence(message, path, says)
    assert "second line" not in message


def test_missing_and_unreadable_problem_files(tmp_path: Path) -> None:
    missing = tmp_path / "nope.py"
    with pytest.raises(ProblemError) as e:
        load_problem(missing)
    assert_one_sentence(str(e.value), missing, "no such problem file")
    binary = tmp_path / "binary.py"
    binary.write_bytes(b"\xff\xfe\x00 not utf-8 \x80\x81")
    with pytest.raises(ProblemError) as e:
        load_problem(binary)
    assert_one_sentence(str(e.value), binary, "cannot be read")
    folder = tmp_path / "folder.py"
    folder.mkdir()
    with pytest.raises(ProblemError, match="no such problem file"):
        load_problem(folder)


def test_a_valid_problem_loads(tmp_path: Path) -> None:
    problem = load_problem(_write(tmp_path, "valid", VALID))
    assert problem.precision is Precision.FP32
    assert problem.tolerance_override is None and not problem.has_test_inputs and not problem.allow_streams
    assert problem.name == "valid"
    assert len(problem.get_inputs()) == 1 and problem.get_init_inputs() == []


# -- through the CLI ----------------------------------------------------------------------------------


# -- valid hooks are honoured -------------------------------------------------------------------------

SLOPPY_RELU = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(y_ptr + offs, tl.where(x > 0, x * 1.001, 0.0), mask=m)  # 0.1 % off


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
'''


def test_tolerance_hook_decides_the_verdict(tmp_path: Path, pool: WorkerPool) -> None:
    sloppy = _write(tmp_path, "sloppy_candidate", SLOPPY_RELU)
    strict = _evaluate(_write(tmp_path, "strict", VALID), pool, sloppy)
    assert strict.verdict == "fail" and strict.reason == "wrong_output", strict.detail
    assert strict.tolerance == pytest.approx(1e-4)
    loose_path = _write(tmp_path, "loose", VALID + "TOLERANCE = 0.5\n")
    assert load_problem(loose_path).tolerance_override == 0.5
    loose = _evaluate(loose_path, pool, sloppy)
    assert loose.verdict == "pass", loose.detail
    assert loose.tolerance == 0.5
    assert 1e-4 < (loose.max_rel_error or 0) < 0.5


DOUBLE_PROBLEM = HEAD + _model("return x * 2.0") + INPUTS + INIT
DOUBLE = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def double_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    # fp32 math: Triton 3.9's interpreter computes on bf16 values' raw bits otherwise
    y = tl.load(x_ptr + offs, mask=m).to(tl.float32) * 2.0
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=m)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        double_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
'''


def test_precision_hook(tmp_path: Path, pool: WorkerPool) -> None:
    path = _write(tmp_path, "bf16", DOUBLE_PROBLEM + "PRECISION = 'BF16'\n")
    assert load_problem(path).precision is Precision.BF16
    assert load_problem(path, "tf32").precision is Precision.TF32, "--precision overrides the problem's PRECISION"
    result = _evaluate(path, pool, _write(tmp_path, "double_candidate", DOUBLE))
    assert result.verdict == "pass", result.detail
    assert result.precision == "bf16"
    assert result.tolerance is not None and result.tolerance >= 1e-2


def test_get_test_inputs_adds_a_family(tmp_path: Path, pool: WorkerPool) -> None:
    plain = _evaluate(_write(tmp_path, "plain", VALID), pool)
    assert plain.verdict == "pass", plain.detail
    assert "test_inputs" not in plain.families
    hooked_path = _write(tmp_path, "hooked", VALID + "def get_test_inputs():\n    return [[torch.randn(3, 1000)], [torch.randn(7)]]\n")
    hooked = _evaluate(hooked_path, pool)
    assert hooked.verdict == "pass", hooked.detail
    assert "test_inputs" in hooked.families
    assert sum(t.family == "test_inputs" for t in hooked.trials) == 2, "one trial per extra input set"


def test_get_test_inputs_shapes(tmp_path: Path) -> None:
    one = load_problem(_write(tmp_path, "one", VALID + "def get_test_inputs():\n    return [torch.randn(5)]\n"))
    assert one.has_test_inputs
    sets = one.get_test_inputs()
    assert len(sets) == 1 and len(sets[0]) == 1 and tuple(sets[0][0].shape) == (5,), "one input list is one set"
    many = load_problem(_write(tmp_path, "many", VALID + "def get_test_inputs():\n    return [[torch.randn(5)], (torch.randn(6),)]\n"))
    assert [tuple(s[0].shape) for s in many.get_test_inputs()] == [(5,), (6,)]


def test_allow_streams_hook(tmp_path: Path) -> None:
    assert load_problem(_write(tmp_path, "streams", VALID + "ALLOW_STREAMS = True\n")).allow_streams
    assert not load_problem(_write(tmp_path, "no_streams", VALID)).allow_streams
