"""The `kernelwright` command's contract, run as a real subprocess on small problems, CPU only.

Exit status: 0 verified, 1 rejected, 2 usage error / broken problem / unusable device. Errors are one
sentence without a traceback. With `--json`, stdout is exactly one JSON object, also for exit-2 errors,
and nothing a candidate prints ever reaches the command's stdout. `profile` on the CPU says that the
device-time breakdown and Nsight Compute are unavailable, and why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
ADD_PROBLEM = REPO / "tests" / "gpu" / "fixtures" / "add_problem.py"
ADD_HONEST = REPO / "tests" / "gpu" / "fixtures" / "honest_add.py"
RELU_PROBLEM = REPO / "tests" / "adversarial" / "problems" / "relu.py"
RELU_IDENTITY = REPO / "tests" / "adversarial" / "candidates" / "a05_identity_relu.py"  # rejected: wrong_output
RELU_PROBLEM_HONEST = REPO / "tests" / "kernels" / "honest" / "relu_problem.py"
RELU_CANDIDATE_HONEST = REPO / "tests" / "kernels" / "honest" / "relu_candidate.py"

EVAL_KEYS = {"verdict", "reason", "detail", "rule", "checks", "max_rel_error", "tolerance", "timing",
             "timing_unavailable", "phases"}
NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the answer on a machine without a GPU")


def kw(*args: str | Path, cache: Path) -> subprocess.CompletedProcess[str]:
    """Run `python -m kernelwright.cli ARGS` with its own cache folder."""
    env = {**os.environ, "KERNELWRIGHT_CACHE": str(cache)}
    return subprocess.run([sys.executable, "-m", "kernelwright.cli", *map(str, args)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=180)


def flat(text: str) -> str:
    """The text with rich's line wrapping undone."""
    return " ".join(text.split())


def one_json_object(r: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The whole of stdout is one JSON object on one line."""
    assert r.stdout.endswith("\n") and r.stdout.count("\n") == 1, f"stdout is not one line:\n{r.stdout[:2000]}"
    obj = json.loads(r.stdout)
    assert isinstance(obj, dict)
    return obj


def no_traceback(r: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout, r.stderr[-3000:]


def one_error_line(r: subprocess.CompletedProcess[str]) -> str:
    """Our own errors: one line on stderr, `error: <sentence>`, nothing on stdout."""
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), f"not one error line:\n{r.stderr}"
    return lines[0].removeprefix("error: ")


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


# -- help -------------------------------------------------------------------------------------------


def _commands() -> list[str]:
    from kernelwright.cli import app

    return sorted(c.name or c.callback.__name__ for c in app.registered_commands)  # type: ignore[union-attr]


def test_there_are_commands() -> None:
    assert {"eval", "profile"} <= set(_commands())


@pytest.mark.parametrize("command", ["", *_commands()])
def test_help(command: str, cache: Path) -> None:
    r = kw(*([command] if command else []), "--help", cache=cache)
    assert r.returncode == 0, r.stderr
    assert "Usage" in r.stdout
    no_traceback(r)
    if command:
        assert f"kernelwright.cli {command} [OPTIONS]" in r.stdout
        if command in ("eval", "profile"):
            assert "--device" in r.stdout and "--json" in r.stdout
    else:
        assert all(c in r.stdout for c in _commands())


# -- eval: verdicts ---------------------------------------------------------------------------------


def test_eval_verified_summary(cache: Path) -> None:
    r = kw("eval", ADD_PROBLEM, ADD_HONEST, "--device", "cpu", "--trials", "1", cache=cache)
    assert r.returncode == 0, r.stdout + r.stderr
    no_traceback(r)
    first = r.stdout.splitlines()[0]
    assert first.startswith("PASS ok"), first
    assert "honest_add.py" in r.stdout and "add_problem.py" in r.stdout
    assert "timing: unavailable (cpu mode runs Triton's interpreter" in flat(r.stdout)
    assert len(r.stdout.splitlines()) < 60, "the summary is short"


def test_eval_verified_json(cache: Path) -> None:
    r = kw("eval", ADD_PROBLEM, ADD_HONEST, "--device", "cpu", "--trials", "1", "--json", cache=cache)
    assert r.returncode == 0, r.stderr
    obj = one_json_object(r)
    assert EVAL_KEYS <= obj.keys()
    assert obj["verdict"] == "pass" and obj["reason"] == "ok" and obj["rule"] is None
    assert obj["timing"] is None, "no timing on the CPU"
    assert "interpreter" in obj["timing_unavailable"]
    assert 0 <= obj["max_rel_error"] <= obj["tolerance"] == 1e-4
    assert obj["device"] == "cpu" and obj["precision"] == "fp32"
    assert {c["name"] for c in obj["checks"]} >= {"static", "correctness"}
    assert all(c["outcome"] in ("pass", "info", "skip") for c in obj["checks"])


def test_eval_rejected_summary(cache: Path) -> None:
    r = kw("eval", RELU_PROBLEM, RELU_IDENTITY, "--device", "cpu", "--trials", "1", cache=cache)
    assert r.returncode == 1, r.stdout + r.stderr
    no_traceback(r)
    assert r.stdout.startswith("FAIL wrong_output"), r.stdout[:300]
    assert "exceed the tolerance" in flat(r.stdout)
    assert len(r.stdout.splitlines()) < 60


def test_eval_rejected_json(cache: Path) -> None:
    r = kw("eval", RELU_PROBLEM, RELU_IDENTITY, "--device", "cpu", "--trials", "1", "--json", cache=cache)
    assert r.returncode == 1, r.stderr
    obj = one_json_object(r)
    assert EVAL_KEYS <= obj.keys()
    assert obj["verdict"] == "fail" and obj["reason"] == "wrong_output"
    assert "exceed the tolerance" in obj["detail"]
    assert any(c["outcome"] == "fail" for c in obj["checks"])
    assert obj["timing"] is None and obj["timing_unavailable"]


# -- eval: usage errors -------------------------------------------------------------------------------

# (name, arguments after `eval`, what the message must mention); {missing} is a file that does not exist
USAGE = [
    ("missing_problem", ["{missing}", ADD_HONEST], ["nope.py", "no such problem file"]),
    ("missing_candidate", [ADD_PROBLEM, "{missing}"], ["nope.py", "no such candidate file"]),
    ("unknown_precision", [ADD_PROBLEM, ADD_HONEST, "--device", "cpu", "--precision", "fp8"], ["--precision", "fp8"]),
    ("unknown_device", [ADD_PROBLEM, ADD_HONEST, "--device", "tpu"], ["unknown device 'tpu'"]),
    ("malformed_device", [ADD_PROBLEM, ADD_HONEST, "--device", "cuda:x"], ["unknown device 'cuda:x'"]),
    ("missing_argument", [ADD_PROBLEM], ["candidate"]),
]
OUR_ERRORS = {"missing_problem", "missing_candidate", "unknown_device", "malformed_device"}


def _args(args: list[Any], tmp_path: Path) -> list[str]:
    return [str(tmp_path / "nope.py") if a == "{missing}" else str(a) for a in args]


@pytest.mark.parametrize(("name", "args", "says"), USAGE, ids=[u[0] for u in USAGE])
def test_eval_usage_error(name: str, args: list[Any], says: list[str], tmp_path: Path, cache: Path) -> None:
    r = kw("eval", *_args(args, tmp_path), cache=cache)
    assert r.returncode == 2, r.stdout + r.stderr
    no_traceback(r)
    assert r.stdout == ""
    if name in OUR_ERRORS:
        message = one_error_line(r)
        assert all(s in message for s in says), message
    else:  # the option parser's own message
        assert all(s in r.stderr for s in says), r.stderr


@pytest.mark.parametrize(("name", "args", "says"), USAGE, ids=[u[0] for u in USAGE])
def test_eval_usage_error_json(name: str, args: list[Any], says: list[str], tmp_path: Path, cache: Path) -> None:
    r = kw("eval", *_args(args, tmp_path), "--json", cache=cache)
    assert r.returncode == 2, r.stdout + r.stderr
    no_traceback(r)
    obj = one_json_object(r)
    assert EVAL_KEYS <= obj.keys(), f"missing {EVAL_KEYS - obj.keys()}"
    expected = "bad_problem" if name == "missing_problem" else "usage_error"
    assert obj["verdict"] == "error" and obj["reason"] == expected
    assert obj["timing"] is None and obj["max_rel_error"] is None and obj["checks"] == []
    assert obj["timing_unavailable"]
    assert "\n" not in obj["detail"] and all(s in obj["detail"] for s in says), obj["detail"]


@NO_GPU
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_eval_cuda_without_a_gpu(device: str, cache: Path) -> None:
    r = kw("eval", ADD_PROBLEM, ADD_HONEST, "--device", device, cache=cache)
    assert r.returncode == 2, r.stdout + r.stderr
    no_traceback(r)
    assert one_error_line(r) == f"--device {device}: no CUDA GPU is visible on this machine (use --device cpu)"
    j = kw("eval", ADD_PROBLEM, ADD_HONEST, "--device", device, "--json", cache=cache)
    assert j.returncode == 2 and "no CUDA GPU" in one_json_object(j)["detail"]


def test_eval_broken_problem(tmp_path: Path, cache: Path) -> None:
    problem = tmp_path / "broken_problem.py"
    problem.write_text("import torch\nfrom torch import nn\nclass Model(nn.Module):\n    def forward(self, x, y):\n"
                       "        return x + y\ndef get_inputs():\n    return [torch.randn(8), torch.randn(8)]\n")
    r = kw("eval", problem, ADD_HONEST, "--device", "cpu", cache=cache)
    assert r.returncode == 2
    assert one_error_line(r) == f"{problem}: defines no function get_init_inputs()"


# -- eval: what candidates print and how their text is shown ------------------------------------------

NOISY = '''
import warnings
import torch
import torch.nn as nn
import triton
import triton.language as tl

print("NOISY-IMPORT-STDOUT")
warnings.warn("NOISY-IMPORT-STDERR")


@triton.jit
def add_kernel(x, y, o, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        print("NOISY-INIT-STDOUT", flush=True)
        warnings.warn("NOISY-INIT-STDERR")

    def forward(self, x, y):
        print("NOISY-FORWARD-STDOUT {\\"verdict\\": \\"pass\\"}", flush=True)
        warnings.warn("NOISY-FORWARD-STDERR")
        out = torch.empty_like(x)
        add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
        return out
'''


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_candidate_output_never_reaches_stdout(as_json: bool, tmp_path: Path, cache: Path) -> None:
    noisy = tmp_path / "noisy.py"
    noisy.write_text(NOISY)
    r = kw("eval", ADD_PROBLEM, noisy, "--device", "cpu", "--trials", "1", *(["--json"] if as_json else []), cache=cache)
    assert r.returncode == 0, r.stdout + r.stderr
    if not as_json:
        assert r.stdout.startswith("PASS")
        assert "NOISY" not in r.stdout
        return
    obj = one_json_object(r)
    log = obj.pop("candidate_log")
    # It did print, everywhere: the bounded log keeps it for the user, in its own field ...
    for where in ("IMPORT-STDOUT", "IMPORT-STDERR", "INIT-STDOUT", "INIT-STDERR", "FORWARD-STDOUT", "FORWARD-STDERR"):
        assert f"NOISY-{where}" in log, f"the candidate's {where} is not in candidate_log"
    # ... and nowhere else.
    assert "NOISY" not in json.dumps(obj)


MARKUP_ERROR = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x, y):
        raise RuntimeError("bad [/boom] [bold]thing")
'''


def test_candidate_text_is_not_rich_markup(tmp_path: Path, cache: Path) -> None:
    candidate = tmp_path / "markup.py"
    candidate.write_text(MARKUP_ERROR)
    r = kw("eval", ADD_PROBLEM, candidate, "--device", "cpu", "--trials", "1", cache=cache)
    assert r.returncode == 1, r.stdout + r.stderr
    no_traceback(r)
    assert r.stdout.startswith("FAIL runtime_error")
    assert "bad [/boom] [bold]thing" in flat(r.stdout), "the candidate's text is shown as it is"


def test_problem_text_is_not_rich_markup(tmp_path: Path, cache: Path) -> None:
    problem = tmp_path / "markup_problem.py"
    problem.write_text(ADD_PROBLEM.read_text().replace("def get_inputs():\n",
                                                       "def get_inputs():\n    raise ValueError('bad [/oops] input')\n"))
    r = kw("eval", problem, ADD_HONEST, "--device", "cpu", cache=cache)
    assert r.returncode == 2, r.stdout + r.stderr
    assert one_error_line(r) == f"{problem}: get_inputs() raised ValueError: bad [/oops] input"


# -- profile ------------------------------------------------------------------------------------------


def test_profile_on_cpu(cache: Path) -> None:
    r = kw("profile", RELU_PROBLEM_HONEST, RELU_CANDIDATE_HONEST, "--device", "cpu", "--ncu", cache=cache)
    assert r.returncode == 0, r.stdout + r.stderr
    no_traceback(r)
    assert r.stdout.startswith("PASS ok")
    text = flat(r.stdout)
    assert "device-time breakdown unavailable: no GPU: kernels ran in Triton's interpreter" in text
    assert "Nsight Compute unavailable: no GPU: kernels ran in Triton's interpreter" in text
    assert "- relu_kernel: " in text and "compiled resources unavailable" in text


def test_profile_on_cpu_json(cache: Path) -> None:
    r = kw("profile", RELU_PROBLEM_HONEST, RELU_CANDIDATE_HONEST, "--device", "cpu", "--json", cache=cache)
    assert r.returncode == 0, r.stderr
    obj = one_json_object(r)
    assert obj["verdict"] == "pass" and obj["reason"] == "ok"
    assert obj["ncu"]["available"] is False and "no GPU" in obj["ncu"]["why"]
    assert obj["breakdown"] == [] and "no GPU" in obj["breakdown_unavailable"]
    assert obj["timing"] is None
    assert [k["name"] for k in obj["kernels"]] == ["relu_kernel"]
    assert "Nsight Compute unavailable" in obj["text"]


def test_profile_of_a_rejected_candidate(cache: Path) -> None:
    r = kw("profile", RELU_PROBLEM, RELU_IDENTITY, "--device", "cpu", cache=cache)
    assert r.returncode == 1, r.stdout + r.stderr
    no_traceback(r)
    assert r.stdout.startswith("FAIL wrong_output")
    assert "rejected: wrong_output" in flat(r.stdout)


@NO_GPU
def test_profile_cuda_without_a_gpu(cache: Path) -> None:
    r = kw("profile", ADD_PROBLEM, ADD_HONEST, "--device", "cuda", cache=cache)
    assert r.returncode == 2, r.stdout + r.stderr
    assert one_error_line(r) == "--device cuda: no CUDA GPU is visible on this machine (use --device cpu)"
    j = kw("profile", ADD_PROBLEM, ADD_HONEST, "--device", "cuda", "--json", cache=cache)
    assert j.returncode == 2
    obj = one_json_object(j)
    assert obj["verdict"] == "error" and "no CUDA GPU" in obj["detail"]


def test_profile_usage_errors(tmp_path: Path, cache: Path) -> None:
    r = kw("profile", ADD_PROBLEM, tmp_path / "nope.py", "--device", "cpu", cache=cache)
    assert r.returncode == 2 and one_error_line(r) == f"{tmp_path / 'nope.py'}: no such candidate file"
    j = kw("profile", ADD_PROBLEM, ADD_HONEST, "--precision", "fp64", "--json", cache=cache)
    assert j.returncode == 2 and "--precision" in one_json_object(j)["detail"]


# -- trace ------------------------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_trace_json_validates_against_the_step_record_schema(tmp_path: Path, cache: Path) -> None:
    from kernelwright import api
    from kernelwright.agents.records import SCHEMA_VERSION, StepRecord, schema_markdown

    seed = REPO / "tests" / "graphs" / "add_seed.py"
    cfg = api.RunConfig(device="cpu", trials=1, branches=2, iterations=2)
    with api.start_run(REPO / "tests" / "graphs" / "add_problem.py", seed_kernel=seed, config=cfg,
                       runs_dir=tmp_path / "runs") as handle:
        info = handle.run_to_end()
    r = kw("trace", info.id, "--json", "--run-dir", tmp_path / "runs", cache=cache)
    assert r.returncode == 0, r.stderr
    records = [StepRecord.model_validate_json(line) for line in r.stdout.splitlines()]
    assert [s.step_id for s in records] == ["g1b0", "g1b1"] and all(s.schema_version == SCHEMA_VERSION == 4 for s in records)
    import jsonschema  # noqa: PLC0415 - the published schema, not only the model, must accept the output

    r = kw("trace", "--schema", cache=cache)
    schema = json.loads(r.stdout)
    for line in kw("trace", info.id, "--json", "--run-dir", tmp_path / "runs", cache=cache).stdout.splitlines():
        jsonschema.validate(json.loads(line), schema)
    r = kw("trace", info.id, "--run-dir", tmp_path / "runs", cache=cache)
    assert r.returncode == 0 and "step 0 (g1b0)" in r.stdout and "archive: unmeasured (not timed, predicted" in r.stdout
    # docs/trace.md is the schema, field by field, generated from the same models
    assert (REPO / "docs" / "trace.md").read_text() == schema_markdown(), \
        "docs/trace.md is stale: regenerate it with python -c 'from kernelwright.agents.records import " \
        "schema_markdown; print(schema_markdown(), end=\"\")' > docs/trace.md"


def test_trace_of_a_missing_run_is_one_sentence(tmp_path: Path, cache: Path) -> None:
    r = kw("trace", "no-such-run", "--run-dir", tmp_path, cache=cache)
    assert r.returncode == 2 and "no run" in one_error_line(r)
    r = kw("trace", "--run-dir", tmp_path, cache=cache)
    assert r.returncode == 2 and "--schema" in one_error_line(r)


# -- broken problem files ---------------------------------------------------------------------------

sys.path.insert(0, str(REPO / "tests" / "evaluators"))
from problem_cases import BROKEN, CLI_BROKEN, VALID, assert_one_sentence, write_problem  # noqa: E402

HONEST_RELU_CANDIDATE = REPO / "tests" / "adversarial" / "candidates" / "honest_relu.py"


@pytest.mark.parametrize("name", CLI_BROKEN)
def test_cli_exits_2_with_one_sentence(name: str, tmp_path: Path) -> None:
    source, says = BROKEN[name]
    path = write_problem(tmp_path, name, source)
    r = kw("eval", str(path), str(HONEST_RELU_CANDIDATE), "--device", "cpu", "--trials", "1", cache=tmp_path / "cache")
    assert r.returncode == 2, f"exit {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}"
    assert r.stdout == "", "an error goes to stderr"
    line = r.stderr.strip()
    assert line.startswith("error: "), r.stderr
    assert_one_sentence(line.removeprefix("error: "), path, says)
    assert "second line" not in r.stderr


@pytest.mark.parametrize("name", ["syntax_error", "forward_returns_dict", "tolerance_a_string"])
def test_cli_json_for_a_broken_problem(name: str, tmp_path: Path) -> None:
    source, says = BROKEN[name]
    path = write_problem(tmp_path, name, source)
    r = kw("eval", str(path), str(HONEST_RELU_CANDIDATE), "--device", "cpu", "--trials", "1", "--json", cache=tmp_path / "cache")
    assert r.returncode == 2, r.stderr
    obj = json.loads(r.stdout)
    assert obj["verdict"] == "error" and obj["reason"] == "bad_problem"
    assert_one_sentence(obj["detail"], path, says)
    assert "Traceback" not in r.stderr




def test_cli_reports_the_hooks(tmp_path: Path) -> None:
    path = write_problem(tmp_path, "hooks", VALID + "TOLERANCE = 0.5\n"
                  "def get_test_inputs():\n    return [[torch.randn(3, 1000)]]\n")
    r = kw("eval", str(path), str(HONEST_RELU_CANDIDATE), "--device", "cpu", "--trials", "1", "--json", cache=tmp_path / "cache")
    assert r.returncode == 0, r.stdout + r.stderr
    obj = json.loads(r.stdout)
    assert obj["verdict"] == "pass" and obj["tolerance"] == 0.5
    assert "test_inputs" in obj["families"]
