"""`kernelwright handoff`: a kernel of a run written out as a standalone folder a maintainer can review.

The folders are checked where a reviewer would check them: their own pytest runs in a fresh virtual environment
(`python -m venv`, then torch, triton, pytest and numpy from the package index; no kernelwright), on the CPU
through Triton's interpreter. The best kernel of a real scripted run passes there; a wrong kernel written with
--force fails there; a KernelBench-style problem with size constants gets smaller and odd shapes (a kernel that
ignores its weight fails on them, one that refuses a shape is reported as not supporting it). The README's
numbers are the evaluation's, and every error is one sentence with exit status 2.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import triton
from typer.testing import CliRunner

from kernelwright.evaluators import Timing
from kernelwright.evaluators import inputs as verifier_inputs
from kernelwright.handoff import CPU_MAX_ELEMENTS, SUPPORT_BODY, module_name, shapes_for
from kernelwright.tools.runstore import lineage
from kernelwright.tools.runstore import RunStore

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scripted_run import SECRET, WRONG, scripted_run  # noqa: E402

runner = CliRunner()

# A KernelBench-style problem: module-level size constants read by get_inputs(), one of them also a
# constructor argument, a weight initialised to ones (so a kernel that ignores it passes only on default weights).
SIZED_PROBLEM = '''import torch
import torch.nn as nn

batch_size = 16
dim = 393216


class Model(nn.Module):
    """relu(x) * weight, one weight per column."""

    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return torch.relu(x) * self.weight


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
'''

SIZED_KERNEL = '''import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def scale_relu_kernel(x, w, o, n, cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    v = tl.load(x + offs, mask=m)
    s = tl.load(w + offs % cols, mask=m)
    tl.store(o + offs, tl.maximum(v, 0.0) * s, mask=m)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        scale_relu_kernel[(triton.cdiv(n, BLOCK),)](x, self.weight, out, n, x.shape[-1], BLOCK=BLOCK)
        return out
'''
# ignores the weight: right only while the weight is all ones
NO_WEIGHT = SIZED_KERNEL.replace("tl.maximum(v, 0.0) * s", "tl.maximum(v, 0.0) + 0.0 * s")
# refuses rows that are not a multiple of its block: it does not support the odd shape
REFUSES_ODD = SIZED_KERNEL.replace(
    "        x = x.contiguous()\n",
    "        x = x.contiguous()\n        if x.shape[-1] % BLOCK:\n"
    "            raise ValueError(f'rows of {x.shape[-1]} elements: a multiple of {BLOCK} is needed')\n")


# -- fixtures ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A real 3-step CPU run (scripted model) on the add problem; its best kernel is the seed."""
    return scripted_run(tmp_path_factory.mktemp("handoff-run"))


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with torch, triton, pytest and numpy, and nothing of kernelwright: where a
    reviewer runs the hand-off. One per module (30 to 110 s from the local package index, with the machine's load)."""
    where = tmp_path_factory.mktemp("handoff-venv") / "venv"
    t0 = time.monotonic()
    made = subprocess.run([sys.executable, "-m", "venv", str(where)], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr[-2000:]
    python = where / "bin" / "python"
    # the versions this checkout runs with (both install from the same place as kernelwright's own)
    wanted = [f"torch=={torch.__version__.split('+')[0]}", f"triton=={triton.__version__}", "pytest", "numpy"]
    # --no-compile: byte-compiling all of torch is half the install; what the tests import compiles on import
    pip = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-compile", *wanted], capture_output=True,
                         text=True, env=_clean_env())
    assert pip.returncode == 0, pip.stdout[-2000:] + pip.stderr[-2000:]
    print(f"fresh venv made in {time.monotonic() - t0:.1f} s")
    probe = subprocess.run([str(python), "-c", "import kernelwright"], capture_output=True, text=True,
                           env=_clean_env(), cwd=str(where))
    assert probe.returncode != 0 and "No module named 'kernelwright'" in probe.stderr, probe.stderr
    return python


def _clean_env() -> dict[str, str]:
    """The environment without anything that would reach kernelwright's checkout or its virtual environment,
    and without TRITON_INTERPRET (the folder's conftest.py must set it)."""
    drop = {"PYTHONPATH", "VIRTUAL_ENV", "TRITON_INTERPRET", "PYTHONHOME", "PYTEST_ADDOPTS", "HANDOFF_DEVICE"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)
    return env


def _pytest_in(python: Path, folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), "-m", "pytest", "-q", *args], cwd=str(folder), capture_output=True,
                          text=True, env=_clean_env(), timeout=300)


def _handoff(runs: Path, run_id: str, out: Path, *extra: str) -> None:
    r = runner.invoke(app_(), ["handoff", run_id, "--run-dir", str(runs), "--out", str(out), *extra])
    assert r.exit_code == 0, r.output
    assert "hand-off of kernel" in r.output and str(out) in r.output


def app_():  # imported late: the CLI module is being extended by other commands
    from kernelwright.cli import app

    return app


def _sized_run(root: Path, kernel: str, evaluated: bool = True) -> tuple[Path, str, str]:
    """A run of the sized problem whose best kernel is `kernel` (a pass verdict recorded for it)."""
    store = RunStore(root)
    problem = root / "scale_relu.py"
    root.mkdir(parents=True, exist_ok=True)
    problem.write_text(SIZED_PROBLEM)
    r = store.create(str(problem), SIZED_PROBLEM, {"settings": {"device": "cpu"}})
    h = r.put_kernel(kernel)
    if evaluated:
        r.put_eval(h, {"verdict": "pass", "reason": "ok", "precision": "fp32", "device": "cpu", "tolerance": 1e-4,
                       "gold_precision": "float64", "timing_unavailable": "cpu mode"})
        r.update(best_kernel=h)
    return root, r.id, h


# -- (a) the best kernel passes its own tests in a fresh environment -------------------------------------


@pytest.mark.slow
def test_best_kernel_passes_its_own_pytest_in_a_fresh_venv(run: tuple[Path, str], venv: Path,
                                                           tmp_path: Path) -> None:
    runs, run_id = run
    the_run = RunStore(runs).open(run_id)
    best = the_run.info().best_kernel
    out = tmp_path / "handoff"
    _handoff(runs, run_id, out)
    name = module_name(the_run.info().problem)
    assert name == "add_problem"
    files = sorted(p.name for p in out.iterdir())
    assert files == sorted(["README.md", "add_problem.py", "bench_add_problem.py", "conftest.py", "evaluation.json",
                            "handoff_support.py", "pytest.ini", "reference.py", "test_add_problem.py"])
    kernel = (out / "add_problem.py").read_text()
    assert kernel.endswith(the_run.kernel(best))  # the kernel exactly as verified, under its header
    header = kernel[: len(kernel) - len(the_run.kernel(best))]
    assert run_id in header and best in header and "add_problem.py" in header
    assert all(line.startswith("#") for line in header.splitlines())
    assert (out / "reference.py").read_text() == the_run.problem_source()
    assert json.loads((out / "evaluation.json").read_text()) == the_run.eval(best)
    for f in out.iterdir():  # standalone: nothing of kernelwright is imported; no secret is carried
        text = f.read_text()
        assert not re.search(r"^\s*(from|import)\s+kernelwright", text, re.M), f.name
        assert SECRET not in text, f.name
    done = _pytest_in(venv, out)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "4 passed" in done.stdout  # four input families at the problem's own shape
    # the benchmark needs a GPU: without one, one sentence and a non-zero exit
    bench = subprocess.run([str(venv), "bench_add_problem.py"], cwd=str(out), capture_output=True, text=True,
                           env=_clean_env(), timeout=120)
    said = (bench.stdout + bench.stderr).strip()
    assert bench.returncode == 1 and "CUDA GPU" in said and len(said.splitlines()) == 1 and "Traceback" not in said


# -- (b) a wrong kernel, forced out, fails its own tests -------------------------------------------------


@pytest.mark.slow
def test_a_wrong_kernel_written_with_force_fails_its_own_pytest(run: tuple[Path, str], venv: Path,
                                                                tmp_path: Path) -> None:
    runs, run_id = run
    the_run = RunStore(runs).open(run_id)
    h = the_run.put_kernel(WRONG)  # subtracts instead of adding; the verifier failed it during the run
    assert the_run.eval(h) is not None and the_run.eval(h)["verdict"] == "fail"
    out = tmp_path / "wrong"
    r = runner.invoke(app_(), ["handoff", run_id, "--run-dir", str(runs), "--out", str(out), "--kernel", h])
    assert r.exit_code == 2 and "failed verification" in r.output and "--force" in r.output
    assert not out.exists()
    _handoff(runs, run_id, out, "--kernel", h[:6], "--force")
    readme = (out / "README.md").read_text()
    assert "FAILED verification" in readme and "--force" in readme
    assert "FAILED" in (out / "add_problem.py").read_text().splitlines()[2]
    done = _pytest_in(venv, out)
    assert done.returncode == 1, done.stdout[-4000:]
    assert "4 failed" in done.stdout and "exceed the tolerance" in done.stdout


# -- (c) size constants give shape variants --------------------------------------------------------------


def test_shape_variants_from_size_constants() -> None:
    shapes, dropped, sizes = shapes_for(SIZED_PROBLEM, "scale_relu.py")
    assert sizes == {"batch_size": 16, "dim": 393216}
    assert [s.name for s in shapes] == ["problem", "small", "odd"] and not dropped
    own, small, odd = shapes
    assert own.sizes == {} and own.elements == 16 * 393216 > CPU_MAX_ELEMENTS
    assert small.sizes == {"batch_size": 16, "dim": 3072} and small.elements == 16 * 3072
    assert odd.sizes == {"batch_size": 13, "dim": 2305} and odd.elements == 13 * 2305
    # a size the reference refuses to see odd (a row it views in groups of 4) keeps its value; the others vary
    picky = SIZED_PROBLEM.replace("return torch.relu(x) * self.weight",
                                  "return (torch.relu(x) * self.weight).view(x.shape[0], -1, 4).sum(-1)")
    shapes, dropped, _ = shapes_for(picky, "picky.py")
    assert [s.name for s in shapes] == ["problem", "small", "odd"] and not dropped
    assert shapes[2].sizes == {"batch_size": 13, "dim": 3072}
    # no size constants (the add problem: torch.randn(1000)): the problem's own shape only
    shapes, dropped, sizes = shapes_for("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                                        "        return x + 1\ndef get_inputs():\n    return [torch.randn(1000)]\n"
                                        "def get_init_inputs():\n    return []\n", "p.py")
    assert [s.name for s in shapes] == ["problem"] and sizes == {} and shapes[0].elements == 1000


def _support(precision: str = "fp32") -> dict:
    """The generated support module's body (kernelwright/handoff_files/support.py.tmpl) as a namespace, with the
    constants its header would set."""
    ns: dict = {}
    head = ("import math, os, sys, zlib\nfrom pathlib import Path\nimport torch\n__file__ = 'handoff_support.py'\n"
            f"PRECISION = {precision!r}\nELEMENTS = {{}}\nCPU_MAX_ELEMENTS = 0\nFAMILIES = ()\nSHAPES = {{}}\n")
    exec(compile(head + SUPPORT_BODY, "handoff_support.py", "exec"), ns)
    return ns


def test_heavy_tailed_pivots_drawn_as_the_verifier_draws_them() -> None:
    """The hand-off's own copy of the input families (its tests need torch only) puts the first heavy-tailed
    set's extreme values where the verifier's does, at the same magnitude: the start of every slice along each
    input's first dimension, at the Student-t(2) quantile exceeded once in numel values."""
    ns = _support()
    torch.manual_seed(0)
    for shape in [(6, 5, 7), (33,), (1, 4, 3, 3)]:
        x = torch.randn(*shape) * 3 + 1
        rows = shape[0] if len(shape) >= 2 else 1
        for pivots in (True, False):
            (theirs,) = ns["transform"]("heavy_tailed", [x], 11, pivots=pivots)
            (ours,) = verifier_inputs.transform("heavy_tailed", [x], 11, pivots=pivots)
            std, mean = (float(v) for v in torch.std_mean(x))
            for y in (theirs, ours):
                at = ((y.reshape(rows, -1)[:, 0] - mean) / std).abs()
                want = verifier_inputs.t2_extreme(x.numel())
                assert ns["t2_extreme"](x.numel()) == pytest.approx(want)
                if pivots:
                    assert torch.allclose(at, torch.full_like(at, want), rtol=1e-4), (shape, at, want)
                else:  # a plain draw: its values where they fall, almost never all at the extreme
                    assert not torch.allclose(at, torch.full_like(at, want), rtol=1e-4)


def test_the_handoffs_families_casting_and_error_measure_agree_with_the_verifiers() -> None:
    """What the generated tests re-implement in torch alone (issue 25: about 300 lines, tied to nothing before):
    the family names, the cast of each precision contract, the error measure, and each family's transform."""
    from kernelwright.evaluators import Precision
    from kernelwright.evaluators.compare import compare
    from kernelwright.handoff import FAMILIES

    assert FAMILIES == verifier_inputs.FAMILIES
    for p in Precision:
        assert _support(p.value)["CAST"] == p.cast_dtype, p
    ns = _support()
    torch.manual_seed(1)
    ref = torch.randn(4099, dtype=torch.float64) * 5
    for out in (ref + 1e-5 * torch.randn_like(ref), ref * 1.001, torch.where(ref > 4, ref + 1, ref)):
        ours = compare(out.float(), ref, 1e-2, fused=False).max_rel
        assert ns["max_error"](out.float(), ref) == pytest.approx(ours, rel=1e-6)
    nan_out = ref.clone()
    nan_out[7] = float("nan")
    assert ns["max_error"](nan_out, ref) == float("inf") and not compare(nan_out, ref, 1e-2, fused=False).ok
    x = torch.rand(64, 33) + 0.5
    for family in ("sign_flip", "scaled", "heavy_tailed"):
        (theirs,) = ns["transform"](family, [x], 5)
        (ours,) = verifier_inputs.transform(family, [x], 5)
        assert theirs.shape == ours.shape == x.shape and theirs.dtype == ours.dtype == x.dtype
        if family == "sign_flip":
            assert torch.equal(theirs, ours) and torch.equal(ours, -x)
        elif family == "scaled":  # one factor 10^(+-0.5...2) for the whole tensor, drawn apart
            for y in (theirs, ours):
                factor = float((y / x).mean())
                assert torch.allclose(y / x, torch.full_like(x, factor), rtol=1e-5)
                assert 10 ** 0.5 * 0.999 <= max(abs(factor), 1 / abs(factor)) <= 100 * 1.001
        else:  # Student-t(2) around the input's mean and spread: a median near the mean, tails far past it
            for y in (theirs, ours):
                assert abs(float(y.median()) - float(x.mean())) < 0.2 * float(x.std())
                assert float((y - x.mean()).abs().max()) > 5 * float(x.std())


@pytest.mark.slow
def test_shape_variants_run_in_the_handoffs_pytest(venv: Path, tmp_path: Path) -> None:
    runs, run_id, _ = _sized_run(tmp_path / "runs", SIZED_KERNEL)
    out = tmp_path / "sized"
    _handoff(runs, run_id, out)
    readme = (out / "README.md").read_text()
    assert "| small | batch_size=16, dim=3072 | 49,152 | runs |" in readme
    assert "| odd | batch_size=13, dim=2305 | 29,965 | runs |" in readme
    assert "| problem | the problem's own sizes | 6,291,456 | skipped (too large for the interpreter) |" in readme
    assert "so the CPU runs `small`, `odd`" in readme
    done = _pytest_in(venv, out)
    assert done.returncode == 0, done.stdout[-4000:]
    assert "8 passed, 4 skipped" in done.stdout and "too large for Triton's interpreter" in done.stdout
    # only the problem's own shape: everything skipped on the CPU, which says why
    own = _pytest_in(venv, out, "-m", "not other_shape")
    assert own.returncode == 0 and "4 skipped, 8 deselected" in own.stdout, own.stdout[-2000:]

    # a kernel that ignores its weight passes only where the weight is all ones: the perturbed weights catch it
    runs, run_id, _ = _sized_run(tmp_path / "runs2", NO_WEIGHT)
    _handoff(runs, run_id, tmp_path / "no_weight")
    done = _pytest_in(venv, tmp_path / "no_weight")
    assert done.returncode == 1 and "8 failed, 4 skipped" in done.stdout, done.stdout[-3000:]

    # a kernel that refuses the odd shape is reported as not supporting it, not as passing
    runs, run_id, _ = _sized_run(tmp_path / "runs3", REFUSES_ODD)
    _handoff(runs, run_id, tmp_path / "refuses")
    done = _pytest_in(venv, tmp_path / "refuses")
    assert done.returncode == 0 and "4 passed, 8 skipped" in done.stdout, done.stdout[-3000:]
    assert "ModelNew does not support the odd shape" in done.stdout and "a multiple of 1024 is needed" in done.stdout


# -- (d) the README's numbers are the evaluation's --------------------------------------------------------


def test_readme_numbers_are_the_evaluations(run: tuple[Path, str], tmp_path: Path) -> None:
    runs, run_id = run
    # the CPU run: never timed, and the README says so with no number
    out = tmp_path / "untimed"
    _handoff(runs, run_id, out)
    readme = (out / "README.md").read_text()
    assert "**Never timed.**" in readme and "Triton's interpreter" in readme
    assert " ms |" not in readme and " ms" not in readme.split("## Measured numbers")[1].split("## Precision")[0]
    assert "This kernel is the run's seed (given as `add_seed.py`)" in readme
    assert "MEASURED = None" in (out / "bench_add_problem.py").read_text()

    # a copy of the run whose step-3 kernel (NUM_WARPS 4 -> 8) was timed on a GPU
    copy = tmp_path / "runs"
    shutil.copytree(runs / run_id, copy / run_id)
    the_run = RunStore(copy).open(run_id)
    step = next(r for r in the_run.trace() if (r.get("proposal") or {}).get("what") == "NUM_WARPS 4 -> 8")
    h = step["child"]
    timing = Timing(median_ms=0.01234, p25_ms=0.01201, p75_ms=0.01277, min_ms=0.0119, max_ms=0.0141, reps=100,
                    wall_median_ms=0.03105, noise_band=0.021, eager_ms=0.04567, speedup_vs_eager=0.04567 / 0.01234,
                    vs_eager="faster", compile_mode="max-autotune",
                    compile_modes={"default": 0.01911, "max-autotune": 0.01833}, compile_ms=0.01833,
                    speedup_vs_compile=0.01833 / 0.01234, vs_compile="faster", floor_ms=0.00812, bound="memory",
                    fraction_of_floor=0.658, best_baseline_ms=0.01833, best_baseline="torch.compile",
                    suspect=["SM clock fell from 1980 to 1410 MHz during the measurement"], timing_sets=4)
    result = the_run.eval(h)
    result.update(device="cuda", timing=timing.model_dump(), timing_unavailable=None,
                  versions={"torch": "2.11.0+cu130", "triton": "3.6.0", "python": "3.12.3"})
    the_run.put_eval(h, result)
    out = tmp_path / "timed"
    _handoff(copy, run_id, out, "--kernel", h[:5])
    readme = (out / "README.md").read_text()
    numbers = readme.split("## Measured numbers")[1].split("## Precision contract")[0]
    for want in ("| this kernel, median | 0.01234 ms |", "| p25 – p75 | 0.01201 ms – 0.01277 ms |",
                 "| min – max | 0.0119 ms – 0.0141 ms |", "| wall time per call, median | 0.03105 ms |",
                 "| eager PyTorch | 0.04567 ms |", "| speedup vs eager | 3.70× (faster) |",
                 "| torch.compile (mode max-autotune) | 0.01833 ms |", "| speedup vs torch.compile | 1.49× (faster) |",
                 "default: 0.01911 ms; max-autotune: 0.01833 ms", "| best baseline | torch.compile, 0.01833 ms |",
                 "| noise band (A/A) | ±2.1% |", "| roofline floor | 0.00812 ms (memory-bound) |",
                 "| fraction of the floor | 65.8% (100% = at the floor) |",
                 "| suspect flags | SM clock fell from 1980 to 1410 MHz during the measurement |",
                 "100 repetitions over 4 input set(s)", "on `cuda`",
                 "versions: torch 2.11.0+cu130, triton 3.6.0, python 3.12.3"):
        assert want in numbers, want
    assert "Never timed" not in readme
    # the lineage: the seed, then the step that made this kernel, with its proposal
    lines = readme.split("## Lineage")[1]
    seed = the_run.info().config.seed_kernel
    assert f"1. `{seed}`: the seed (given as `add_seed.py`)" in lines
    assert "**NUM_WARPS 4 -> 8** [warps] — more warps to hide latency; predicted 1.05×, not timed" in lines
    assert f"→ `{h}` (this kernel)" in lines
    bench = (out / "bench_add_problem.py").read_text()
    assert "'median_ms': 0.01234" in bench and "'compile_mode': 'max-autotune'" in bench
    assert "COMPILE_MODE = 'max-autotune'" in (out / "handoff_support.py").read_text()


def test_lineage_walks_parents_back_to_the_seed() -> None:
    trace = [{"step": 0, "parent": "s", "child": "a"}, {"step": 1, "parent": "a", "child": None},
             {"step": 2, "parent": "a", "child": "b"}, {"step": 3, "parent": "s", "child": "c"},
             {"step": 4, "parent": "c", "child": "b"}]  # b made twice: the first step that made it counts
    assert [r["step"] for r in lineage(trace, "b")] == [0, 2]
    # a kernel made again by a step that passed, after one that did not: the passing step made it
    retried = [{"step": 0, "parent": "s", "child": "a", "verdict": "error"}, {"step": 1, "parent": "s", "child": "a", "verdict": "pass"}]
    assert [r["step"] for r in lineage(retried, "a")] == [1]
    assert lineage(trace, "s") == [] and lineage(trace, "zz") == []
    assert [r.get("step") for r in lineage([{"parent": "x", "child": "x"}], "x")] == [None]  # a loop ends


def test_module_names() -> None:
    assert module_name("KernelBench/level1/19_ReLU.py") == "relu_19"
    assert module_name("examples/softmax/problem.py") == "softmax"
    assert module_name("/tmp/add_problem.py") == "add_problem"
    assert module_name("math.py") == "math_kernel"  # would shadow the standard library
    assert module_name("test_thing.py") == "kernel_test_thing"  # would be collected as a test
    assert module_name("reference.py") == "reference_kernel"
    assert module_name("42.py") == "kernel_42"


# -- (e) errors: one sentence, exit status 2 -------------------------------------------------------------


def test_errors_are_one_sentence(run: tuple[Path, str], tmp_path: Path) -> None:
    runs, run_id = run
    store = RunStore(tmp_path / "runs")
    empty = store.create("p.py", "x = 1\n")
    never = empty.put_kernel("# never verified\n")
    # kernels until two share a first hex digit (at most 17: pigeonhole)
    firsts: dict[str, str] = {}
    ambiguous = None
    for i in range(17):
        h = empty.put_kernel(f"# kernel {i}\n")
        if h[0] in firsts:
            ambiguous = h[0]
            break
        firsts[h[0]] = h
    assert ambiguous is not None
    wrong = RunStore(runs).open(run_id).put_kernel(WRONG)
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    here = ["--run-dir", str(runs)]
    cases = [
        (["handoff", "no-such-run", "--out", str(tmp_path / "o"), *here], "no run 'no-such-run'"),
        (["handoff", empty.id, "--out", str(tmp_path / "o"), "--run-dir", str(store.root)], "has no best kernel yet"),
        (["handoff", run_id, "--out", str(tmp_path / "o"), "--kernel", "ffffffff", *here], "has no kernel ffffffff"),
        (["handoff", run_id, "--out", str(tmp_path / "o"), "--kernel", "not-hex", *here], "is not a kernel hash"),
        (["handoff", empty.id, "--out", str(tmp_path / "o"), "--kernel", ambiguous, "--run-dir", str(store.root)],
         "is the prefix of 2 kernels"),
        (["handoff", empty.id, "--out", str(tmp_path / "o"), "--kernel", never, "--run-dir", str(store.root)],
         "never verified"),
        (["handoff", run_id, "--out", str(tmp_path / "o"), "--kernel", wrong, *here], "failed verification (fail: "
                                                                                        "wrong_output)"),
        (["handoff", run_id, "--out", str(full), *here], "exists and is not an empty folder"),
        (["handoff", run_id, "--out", str(a_file), *here], "exists and is not an empty folder"),
    ]
    for args, says in cases:
        r = runner.invoke(app_(), args)
        assert r.exit_code == 2, (args, r.output)
        assert says in r.output and "Traceback" not in r.output, (args, r.output)
        assert len(r.output.strip().splitlines()) == 1, (args, r.output)
    assert not (tmp_path / "o").exists() and [p.name for p in full.iterdir()] == ["keep.txt"]
    # an empty folder is fine
    (tmp_path / "empty").mkdir()
    _handoff(runs, run_id, tmp_path / "empty")
    assert (tmp_path / "empty" / "README.md").is_file()
