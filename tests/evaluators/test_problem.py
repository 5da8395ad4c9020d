"""Problem files: every defect is one clear sentence naming the file, and the optional hooks are honoured.

A broken problem is the user's mistake, not a candidate's: `load_problem` (or, for defects that only show
when the reference first runs, the Evaluator) raises `ProblemError` with one line that names the file and
says what is wrong, and `kernelwright eval` exits 2 with that sentence and no traceback. The valid hooks
(`PRECISION`, `TOLERANCE`, `get_test_inputs`, `ALLOW_STREAMS`) change what the verifier does.
"""

from __future__ import annotations

import json
import os
import subprocess
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

HEAD = "import torch\nfrom torch import nn\n\n"
MODEL = "class Model(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n\n"
INPUTS = "def get_inputs():\n    return [torch.randn(16, 33)]\n\n"
INIT = "def get_init_inputs():\n    return []\n\n"
VALID = HEAD + MODEL + INPUTS + INIT


def _model(body: str, init: str = "") -> str:
    return f"class Model(nn.Module):\n{init}    def forward(self, x):\n        {body}\n\n"


# name -> (source, what the sentence must say). Defects found while the file is loaded:
LOAD_BROKEN: dict[str, tuple[str, str]] = {
    "syntax_error": (HEAD + "def get_inputs(:\n    pass\n" + MODEL + INIT, "line 4: syntax error"),
    "import_error": ("import torch\nimport kw_no_such_module_xyz\nfrom torch import nn\n" + MODEL + INPUTS + INIT,
                     "could not be imported: ModuleNotFoundError: No module named 'kw_no_such_module_xyz'"),
    "raises_on_import": (HEAD + "raise RuntimeError('needs a dataset')\n" + MODEL + INPUTS + INIT,
                         "could not be imported: RuntimeError: needs a dataset"),
    "no_model": (HEAD + INPUTS + INIT, "defines no class Model(nn.Module)"),
    "model_not_a_module": (HEAD + "class Model:\n    def forward(self, x):\n        return x\n\n" + INPUTS + INIT,
                           "defines no class Model(nn.Module)"),
    "model_is_an_instance": (HEAD + MODEL.replace("class Model(", "class _M(") + "Model = _M()\n" + INPUTS + INIT,
                             "defines no class Model(nn.Module)"),
    "no_get_inputs": (HEAD + MODEL + INIT, "defines no function get_inputs()"),
    "no_get_init_inputs": (HEAD + MODEL + INPUTS, "defines no function get_init_inputs()"),
    "get_inputs_not_callable": (HEAD + MODEL + "get_inputs = [1, 2]\n" + INIT, "defines no function get_inputs()"),
    "unknown_precision": (VALID + "PRECISION = 'fp8'\n", "unknown precision 'fp8' (use one of fp32, tf32, bf16, fp16)"),
    "precision_not_a_string": (VALID + "PRECISION = 16\n", "unknown precision 16"),
    "tolerance_a_string": (VALID + "TOLERANCE = 'loose'\n", "TOLERANCE must be a number between 0 and 1, not 'loose'"),
    "tolerance_too_big": (VALID + "TOLERANCE = 5\n", "TOLERANCE must be a number between 0 and 1, not 5"),
    "tolerance_zero": (VALID + "TOLERANCE = 0\n", "TOLERANCE must be a number between 0 and 1, not 0"),
    "tolerance_negative": (VALID + "TOLERANCE = -1e-3\n", "TOLERANCE must be a number between 0 and 1"),
    "tolerance_nan": (VALID + "TOLERANCE = float('nan')\n", "TOLERANCE must be a number between 0 and 1, not nan"),
    "tolerance_a_list": (VALID + "TOLERANCE = [1e-3]\n", "TOLERANCE must be a number between 0 and 1, not [0.001]"),
}

# Defects that show only when the reference first runs (building the Model or drawing inputs):
RUN_BROKEN: dict[str, tuple[str, str]] = {
    "get_inputs_raises": (HEAD + MODEL + "def get_inputs():\n    raise ValueError('no inputs today')\n\n" + INIT,
                          "get_inputs() raised ValueError: no inputs today"),
    "get_inputs_multiline_error": (
        HEAD + MODEL + "def get_inputs():\n    raise ValueError('first line\\nsecond line')\n\n" + INIT,
        "get_inputs() raised ValueError: first line"),
    "get_inputs_not_a_list": (HEAD + MODEL + "def get_inputs():\n    return torch.randn(16)\n\n" + INIT,
                              "get_inputs() must return a list, not Tensor"),
    "get_inputs_returns_none": (HEAD + MODEL + "def get_inputs():\n    pass\n\n" + INIT,
                                "get_inputs() must return a list, not NoneType"),
    "get_init_inputs_raises": (HEAD + MODEL + INPUTS + "def get_init_inputs():\n    raise KeyError('cfg')\n\n",
                               "get_init_inputs() raised KeyError: 'cfg'"),
    "init_raises": (HEAD + _model("return x", "    def __init__(self):\n        super().__init__()\n"
                                  "        raise RuntimeError('cannot build')\n\n") + INPUTS + INIT,
                    "Model(*get_init_inputs()) raised RuntimeError: cannot build"),
    "init_wrong_arguments": (HEAD + _model("return x", "    def __init__(self, width):\n        super().__init__()\n\n")
                             + INPUTS + INIT, "Model(*get_init_inputs()) raised TypeError"),
    "forward_raises": (HEAD + _model("raise KeyError('boom')") + INPUTS + INIT, "Model.forward raised KeyError: 'boom'"),
    "forward_returns_float": (HEAD + _model("return float(x.sum())") + INPUTS + INIT,
                              "Model.forward returned a float (output 0), not a tensor"),
    "forward_returns_dict": (HEAD + _model("return {'y': x * 2}") + INPUTS + INIT,
                             "Model.forward returned a dict (output 0), not a tensor"),
    "forward_returns_none": (HEAD + _model("return None") + INPUTS + INIT,
                             "Model.forward returned a NoneType (output 0), not a tensor"),
    "forward_second_output_not_a_tensor": (HEAD + _model("return x * 2, 'done'") + INPUTS + INIT,
                                           "Model.forward returned a str (output 1), not a tensor"),
    "reference_nan": (HEAD + _model("return x * float('nan')") + INPUTS + INIT,
                      "the reference output is NaN or Inf on the problem's own inputs"),
    "reference_inf": (HEAD + _model("return x / 0.0 + float('inf')") + INPUTS + INIT,
                      "the reference output is NaN or Inf on the problem's own inputs"),
    "get_test_inputs_raises": (VALID + "def get_test_inputs():\n    raise IndexError('shape table missing')\n",
                               "get_test_inputs() raised IndexError: shape table missing"),
}
BROKEN = {**LOAD_BROKEN, **RUN_BROKEN}
# One of each kind of defect also goes through `kernelwright eval` (a subprocess each, so not all of them).
CLI_BROKEN = ["syntax_error", "import_error", "no_model", "model_not_a_module", "no_get_inputs", "no_get_init_inputs",
              "unknown_precision", "tolerance_a_string", "get_inputs_raises", "get_inputs_multiline_error",
              "get_inputs_not_a_list", "init_raises", "forward_raises", "forward_returns_float",
              "forward_returns_dict", "reference_nan"]


def _write(tmp_path: Path, name: str, source: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    return path


def assert_one_sentence(message: str, path: Path, says: str) -> None:
    assert "\n" not in message, f"more than one line: {message!r}"
    assert str(path) in message, f"does not name the file: {message!r}"
    assert says in message, f"does not say {says!r}: {message!r}"
    assert len(message) < 400 and "Traceback" not in message


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


def _cli(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KERNELWRIGHT_CACHE": str(cache)}
    return subprocess.run([sys.executable, "-m", "kernelwright.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name", CLI_BROKEN)
def test_cli_exits_2_with_one_sentence(name: str, tmp_path: Path) -> None:
    source, says = BROKEN[name]
    path = _write(tmp_path, name, source)
    r = _cli("eval", str(path), str(HONEST_RELU), "--device", "cpu", "--trials", "1", cache=tmp_path / "cache")
    assert r.returncode == 2, f"exit {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}"
    assert r.stdout == "", "an error goes to stderr"
    line = r.stderr.strip()
    assert line.startswith("error: "), r.stderr
    assert_one_sentence(line.removeprefix("error: "), path, says)
    assert "second line" not in r.stderr


@pytest.mark.parametrize("name", ["syntax_error", "forward_returns_dict", "tolerance_a_string"])
def test_cli_json_for_a_broken_problem(name: str, tmp_path: Path) -> None:
    source, says = BROKEN[name]
    path = _write(tmp_path, name, source)
    r = _cli("eval", str(path), str(HONEST_RELU), "--device", "cpu", "--trials", "1", "--json", cache=tmp_path / "cache")
    assert r.returncode == 2, r.stderr
    obj = json.loads(r.stdout)
    assert obj["verdict"] == "error" and obj["reason"] == "bad_problem"
    assert_one_sentence(obj["detail"], path, says)
    assert "Traceback" not in r.stderr


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


def test_cli_reports_the_hooks(tmp_path: Path) -> None:
    path = _write(tmp_path, "hooks", VALID + "TOLERANCE = 0.5\n"
                  "def get_test_inputs():\n    return [[torch.randn(3, 1000)]]\n")
    r = _cli("eval", str(path), str(HONEST_RELU), "--device", "cpu", "--trials", "1", "--json", cache=tmp_path / "cache")
    assert r.returncode == 0, r.stdout + r.stderr
    obj = json.loads(r.stdout)
    assert obj["verdict"] == "pass" and obj["tolerance"] == 0.5
    assert "test_inputs" in obj["families"]
