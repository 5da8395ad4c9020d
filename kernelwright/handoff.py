"""`kernelwright handoff`: one kernel of a run as a folder a maintainer can review as a pull request.

    <out>/<name>.py            the kernel (ModelNew and its Triton kernels), with a provenance header
    <out>/reference.py         the problem's source, as the run recorded it
    <out>/test_<name>.py       pytest: ModelNew against the reference on the verifier's input families, at the
                               problem's shape and at smaller and odd sizes where the problem's size constants allow
    <out>/bench_<name>.py      times the kernel, the eager reference and torch.compile on a CUDA GPU
    <out>/handoff_support.py   what the test and the benchmark share: the precision contract, the shapes, the
                               weights, the input families and the error metric
    <out>/conftest.py, pytest.ini   the folder is its own pytest root; without a GPU, Triton's interpreter
    <out>/evaluation.json      the verifier's result for the kernel, as the run recorded it
    <out>/README.md            what it is, the measured numbers, the precision contract, the lineage, how to run it

The folder is standalone: it needs torch, triton, pytest and numpy, and nothing of kernelwright. Its test
mirrors the verifier (same constructor arguments and weights, parameters moved off their initial values,
the four input families, a float64 reference, the per-element metric |out - ref| / (|ref| + rms(ref)) with the
run's tolerance) in a few hundred lines a reviewer can read; the verifier's defences against hostile
candidates stay in kernelwright. Numbers in the README are the run's own, never re-measured or made up.

The problem's code is run here (it is the user's own trusted code, as in the verifier's trusted process), to
find which smaller sizes it accepts; the candidate's code is never imported or run here.
"""

from __future__ import annotations

import json
import keyword
import os
import re
import shutil
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from kernelwright.api import UsageError, open_run
from kernelwright.evaluators import EvalResult, Precision, ProblemError, problem_from_source
from kernelwright.evaluators.variants import SMALL_TARGET, Shape, shapes_for
from kernelwright.tools.runstore import Run, RunError, lineage

CPU_MAX_ELEMENTS = 1 << 22
"""input elements above which a shape is too slow for Triton's interpreter: on the CPU it is skipped"""
TRIALS = 2
"""input sets per (shape, family) in the generated test"""
FAMILIES = ("base", "sign_flip", "scaled", "heavy_tailed")
RESERVED = {"reference", "conftest", "handoff_support", "torch", "triton", "numpy", "pytest"}


@dataclass
class Handoff:
    """What `write_handoff` wrote."""

    path: Path
    name: str
    kernel: str
    verdict: str
    """pass, fail, error, or unverified"""
    shapes: list[Shape]
    dropped: dict[str, str] = field(default_factory=dict)
    """shape variants left out, and why"""
    files: list[str] = field(default_factory=list)


# -- choosing the kernel ---------------------------------------------------------------------------------


def resolve_kernel(run: Run, given: str | None) -> str:
    """The kernel's full hash: the run's best when none is given, else the one `given` names or prefixes."""
    if given is None:
        best = run.info().best_kernel
        if not best:
            raise UsageError(f"run {run.id} has no best kernel yet (no kernel has passed verification); "
                             "name one with --kernel HASH")
        return best
    try:
        return run.find_kernel(given)
    except RunError as e:
        raise UsageError(str(e)) from None


def module_name(problem_path: str) -> str:
    """A module name for the kernel, from the problem's file name: '19_ReLU.py' -> 'relu_19',
    'softmax/problem.py' -> 'softmax'. Never a name that would shadow a module the folder imports."""
    p = Path(problem_path)
    stem = p.parent.name if p.stem == "problem" and p.parent.name else p.stem
    name = re.sub(r"[^0-9a-zA-Z]+", "_", stem).strip("_").lower() or "kernel"
    m = re.fullmatch(r"(\d+)_?(.*)", name)
    if m:
        name = f"{m.group(2)}_{m.group(1)}" if m.group(2) else f"kernel_{m.group(1)}"
    if name.startswith(("test_", "bench_")) or name in ("test", "bench"):
        name = f"kernel_{name}"
    if keyword.iskeyword(name) or name in RESERVED or name in sys.stdlib_module_names:
        name = f"{name}_kernel"
    return name


# -- shapes -----------------------------------------------------------------------------------------------


# The shape variants are `evaluators.variants.shapes_for` (one definition, shared with the coder's quick
# check); the generated tests take its default, the small and odd variants.


# -- writing ----------------------------------------------------------------------------------------------


def write_handoff(run_id: str, out: str | Path, *, kernel: str | None = None, force: bool = False,
                  runs_dir: str | Path = "runs") -> Handoff:
    """Write a kernel of a run (its best by default) as a standalone, reviewable folder at `out`.

    Raises UsageError (one sentence) for an unknown run or kernel, a run with no best kernel yet, a kernel that
    failed or never had verification (unless `force`), and an `out` that exists and is not an empty folder."""
    run = open_run(run_id, runs_dir).run
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"{out} exists and is not an empty folder: give --out a new folder")
    h = resolve_kernel(run, kernel)
    info = run.info()
    source = run.kernel(h)
    raw = run.eval(h)
    result: EvalResult | None = None
    if raw is not None:
        try:
            result = EvalResult.model_validate(raw)
        except ValueError:
            result = None
    verdict = result.verdict if result is not None else "unverified"
    if verdict != "pass" and not force:
        if result is None:
            raise UsageError(f"kernel {h} of run {run.id} has no verdict (never verified); "
                             "--force writes the hand-off anyway, marked as unverified")
        if result.verdict == "error":
            raise UsageError(f"kernel {h} of run {run.id} could not be verified (the evaluator failed: "
                             f"{result.reason}); --force writes the hand-off anyway, marked as unverified")
        raise UsageError(f"kernel {h} of run {run.id} failed verification ({result.verdict}: {result.reason}); "
                         "--force writes the hand-off anyway, marked as failing")
    problem_src = run.problem_source()
    ctx = info.config.settings or {}
    precision = result.precision if result is not None else ctx.get("precision")
    try:
        problem = problem_from_source(problem_src, info.problem, precision)
        shapes, dropped, sizes = shapes_for(problem_src, info.problem)
    except ProblemError as e:
        raise UsageError(f"run {run.id}: its recorded problem does not load ({e})") from None
    name = module_name(info.problem)
    contract = problem.tolerance_override or problem.precision.tolerance
    gold = (result.gold_precision if result is not None and result.gold_precision else "float64")
    timing = result.timing if result is not None else None
    compile_mode = timing.compile_mode if timing is not None and timing.compile_mode else "default"
    families = FAMILIES + (("test_inputs",) if problem.has_test_inputs else ())
    chain = lineage(run.trace(), h)
    facts = Facts(run=run, kernel=h, name=name, verdict=verdict, result=result, raw=raw, problem_path=info.problem,
                  precision=problem.precision.value, contract=contract, override=problem.tolerance_override,
                  gold=gold, shapes=shapes, dropped=dropped, sizes=sizes, families=families, chain=chain,
                  compile_mode=compile_mode, forced=verdict != "pass")
    files = {
        f"{name}.py": kernel_module(facts, source),
        "reference.py": problem_src,
        "handoff_support.py": support_module(facts),
        f"test_{name}.py": TEST.replace("__KERNEL__", name).replace("__RUN__", run.id).replace("__HASH__", h),
        f"bench_{name}.py": bench_module(facts),
        "conftest.py": CONFTEST,
        "pytest.ini": PYTEST_INI,
        "README.md": readme(facts),
    }
    if raw is not None:
        files["evaluation.json"] = json.dumps(raw, indent=1, default=str) + "\n"
    _write_folder(out, files)
    return Handoff(path=out, name=name, kernel=h, verdict=verdict, shapes=shapes, dropped=dropped, files=sorted(files))


def _write_folder(out: Path, files: dict[str, str]) -> None:
    """Write every file into a sibling temporary folder, then rename it into place: a failure leaves nothing
    half-written at `out`."""
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        for rel, text in files.items():
            (tmp / rel).write_text(text)
        if out.exists():
            out.rmdir()  # empty (checked before)
        os.replace(tmp, out)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise UsageError(f"cannot write the hand-off to {out}: {e.strerror or e}") from None


@dataclass
class Facts:
    """Everything the generated files say, gathered once."""

    run: Run
    kernel: str
    name: str
    verdict: str
    result: EvalResult | None
    raw: dict[str, Any] | None
    problem_path: str
    precision: str
    contract: float
    override: float | None
    gold: str
    shapes: list[Shape]
    dropped: dict[str, str]
    sizes: dict[str, int]
    families: tuple[str, ...]
    chain: list[dict[str, Any]]
    compile_mode: str
    forced: bool


def _status_line(f: Facts) -> str:
    r = f.result
    if r is None or r.verdict == "error":
        return "NEVER VERIFIED by kernelwright's verifier (written with --force)"
    if r.verdict == "pass":
        return f"verified by kernelwright's verifier: pass ({r.precision}, tolerance {r.tolerance:.3g}, on {r.device})"
    return f"FAILED kernelwright's verifier: {r.verdict} ({r.reason}); written with --force"


def kernel_module(f: Facts, source: str) -> str:
    header = (f"# Generated by `kernelwright handoff` from run {f.run.id}: kernel {f.kernel}\n"
              f"# for the problem {_one_line(f.problem_path)} (its source: reference.py).\n"
              f"# {_status_line(f)}.\n"
              f"# Tests: test_{f.name}.py; benchmark: bench_{f.name}.py; numbers, contract and lineage: README.md.\n")
    return header + source if source.endswith("\n") else header + source + "\n"


def support_module(f: Facts) -> str:
    shapes = {s.name: s.sizes for s in f.shapes}
    elements = {s.name: s.elements for s in f.shapes}
    head = f'''"""What test_{f.name}.py and bench_{f.name}.py share: the precision contract, the shapes, the reference
at a shape, the two models with one set of weights, the input families and the error metric.

Generated by `kernelwright handoff` from run {f.run.id} (kernel {f.kernel}); needs torch only (the kernel
module needs triton). The constants below are the run's; change them only to explore.
"""

from __future__ import annotations

import copy
import importlib.util
import math
import os
import sys
import zlib
from pathlib import Path

import torch

PRECISION = {f.precision!r}
"""the precision contract: fp32 (no TF32, no bf16 shortcuts), tf32, bf16 or fp16 (inputs and weights cast to it)"""
TOLERANCE = {f.contract!r}
"""per element: |out - ref| <= TOLERANCE * (|ref| + rms(ref)), ref the float64 reference"""
GOLD_AT_PROBLEM_SHAPE = {f.gold!r}
"""what the verifier compared against at the problem's own shape: float64, or native (the problem's own precision,
when a float64 reference did not fit in memory; the tolerance is then doubled)"""
SHAPES = {shapes!r}
"""name -> the size constants of reference.py set for it ({{}}: the problem's own sizes)"""
ELEMENTS = {elements!r}
"""name -> input elements of get_inputs() at that shape (None: not counted)"""
CPU_MAX_ELEMENTS = {CPU_MAX_ELEMENTS}
"""larger shapes are skipped on the CPU, where Triton's interpreter runs the kernel slowly"""
FAMILIES = {f.families!r}
"""input families, as kernelwright's verifier draws them (test_inputs: the problem's own get_test_inputs())"""
TRIALS = {TRIALS}
"""input sets per (shape, family)"""
COMPILE_MODE = {f.compile_mode!r}
"""torch.compile mode of the compiled baseline the verifier measured"""
'''
    return head + SUPPORT_BODY


def bench_module(f: Facts) -> str:
    t = f.result.timing if f.result is not None else None
    measured = None if t is None else {
        "device": f.result.device if f.result is not None else None, "median_ms": t.median_ms,
        "eager_ms": t.eager_ms, "compile_ms": t.compile_ms, "compile_mode": t.compile_mode}
    return BENCH.replace("__KERNEL__", f.name).replace("__MEASURED__", repr(measured))


# -- the README -------------------------------------------------------------------------------------------


def _one_line(text: Any) -> str:
    return " ".join(str(text).split())


def _code(text: Any) -> str:
    """Inline code that survives backticks in the text."""
    s = _one_line(text)
    fence = "``" if "`" in s else "`"
    return f"{fence} {s} {fence}" if fence == "``" else f"`{s}`"


def _ms(v: float | None) -> str:
    return "—" if v is None else f"{v:.4g} ms"


def _x(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}×"


def _sizes(s: Shape) -> str:
    return ", ".join(f"{k}={v}" for k, v in s.sizes.items()) or "the problem's own sizes"


def readme(f: Facts) -> str:
    r, name = f.result, f.name
    lines = [f"# {name}: a Triton kernel for `{Path(f.problem_path).name}`", ""]
    lines += [f"Kernel `{f.kernel}` of kernelwright run `{f.run.id}`, written out by `kernelwright handoff` for "
              f"review. Problem: {_code(f.problem_path)}.", ""]
    if f.forced:
        what = ("was never verified" if r is None else
                f"could not be verified (the evaluator failed: `{r.reason}`)" if r.verdict == "error" else
                f"FAILED verification ({r.verdict}: `{r.reason}`)")
        lines += [f"> **Warning: this kernel {what}.** It was written out with `--force`; do not merge it as it is.",
                  ""]
        if r is not None and r.detail:
            lines += ["The verifier said:", "", "```", r.detail.replace("```", "'''"), "```", ""]
    lines += ["| file | what |", "| --- | --- |",
              f"| `{name}.py` | the kernel: `ModelNew` (same constructor and forward as the reference's `Model`) "
              "and its Triton kernels, exactly as verified, under a provenance header |",
              "| `reference.py` | the problem's PyTorch reference, as the run recorded it |",
              f"| `test_{name}.py` | pytest: `ModelNew` against the reference (below) |",
              f"| `bench_{name}.py` | times the kernel, the eager reference and `torch.compile` on a CUDA GPU |",
              "| `handoff_support.py` | what the test and the benchmark share: contract, shapes, weights, inputs, "
              "metric |",
              "| `conftest.py`, `pytest.ini` | this folder is its own pytest root; without a GPU, Triton's "
              "interpreter |"]
    if f.raw is not None:
        lines.append("| `evaluation.json` | the verifier's full result for this kernel, as the run recorded it |")
    lines += ["", "## Measured numbers", ""]
    lines += _numbers(f)
    lines += ["", "## Precision contract", ""]
    lines += _contract(f)
    lines += ["", "## What the tests check", ""]
    lines += _tests(f)
    lines += ["", "## Lineage", ""]
    lines += _lineage(f)
    lines += ["", "## Running it", "",
              "Needs Python 3.10+, `torch`, `triton`, `pytest` and `numpy` (nothing of kernelwright):", "",
              "```sh", "pip install torch triton pytest numpy",
              "python -m pytest -q            # CUDA when a GPU is visible; else the CPU, through Triton's interpreter",
              "HANDOFF_DEVICE=cpu python -m pytest -q   # the CPU even with a GPU",
              "python -m pytest -q -m 'not other_shape'  # only the problem's own shape (what the verifier checked)",
              f"python bench_{name}.py          # CUDA only: median, p25 and p75 of kernel, eager and torch.compile",
              f"python bench_{name}.py --shape {f.shapes[-1].name}" if len(f.shapes) > 1 else
              f"python bench_{name}.py --rep 500   # longer timing runs",
              "```", ""]
    return "\n".join(lines)


def _numbers(f: Facts) -> list[str]:
    r = f.result
    if r is None:
        return ["This kernel was never evaluated: there are no numbers."]
    out = []
    t = r.timing
    if t is None:
        why = r.timing_unavailable or "no timing was recorded"
        out += [f"**Never timed.** The run evaluated this kernel on `{r.device}`, and its evaluation has no timing: "
                f"{why}. There are no speed numbers for it; measure them with `bench_{f.name}.py` on a CUDA GPU.", ""]
    else:
        out += [f"Measured by kernelwright's verifier on `{r.device}`: {t.reps} repetitions over {t.timing_sets} "
                "input set(s), L2 flushed before each, device time.", "",
                "| | value |", "| --- | --- |",
                f"| this kernel, median | {_ms(t.median_ms)} |",
                f"| p25 – p75 | {_ms(t.p25_ms)} – {_ms(t.p75_ms)} |",
                f"| min – max | {_ms(t.min_ms)} – {_ms(t.max_ms)} |",
                f"| wall time per call, median | {_ms(t.wall_median_ms)} |",
                f"| eager PyTorch | {_ms(t.eager_ms)} |",
                f"| speedup vs eager | {_x(t.speedup_vs_eager)} ({t.vs_eager}) |"]
        if t.compile_ms is not None:
            out += [f"| torch.compile (mode {t.compile_mode}) | {_ms(t.compile_ms)} |",
                    f"| speedup vs torch.compile | {_x(t.speedup_vs_compile)} ({t.vs_compile}) |"]
        else:
            out.append(f"| torch.compile | unavailable: {_one_line(t.compile_unavailable or 'not measured')} |")
        if t.compile_modes and len(t.compile_modes) > 1:
            modes = "; ".join(f"{k}: {_ms(v) if isinstance(v, (int, float)) else _one_line(v)}"
                              for k, v in t.compile_modes.items())
            out.append(f"| torch.compile, every mode measured | {modes} |")
        out.append(f"| best baseline | {t.best_baseline}, {_ms(t.best_baseline_ms)} |")
        out.append(f"| noise band (A/A) | ±{t.noise_band:.1%} |")
        if t.floor_ms is not None:
            frac = f"{t.fraction_of_floor:.1%}" if t.fraction_of_floor is not None else "—"
            out += [f"| roofline floor | {_ms(t.floor_ms)} ({t.bound}-bound) |",
                    f"| fraction of the floor | {frac} (100% = at the floor) |"]
        else:
            out.append(f"| roofline floor | unavailable: {_one_line(t.floor_unavailable or 'not measured')} |")
        suspects = "; ".join(_one_line(s) for s in t.suspect) if t.suspect else "none"
        out.append(f"| suspect flags | {suspects} |")
        out += ["", "A speedup inside the noise band is no change. A suspect result is one the loop does not "
                "believe (and never admits); check it before trusting the numbers."]
    out += ["", "Verification:", ""]
    out.append(f"- verdict: **{r.verdict}** (`{r.reason}`) on `{r.device}`"
               + (f"; worst error {r.max_rel_error:.3g} against tolerance {r.tolerance:.3g}"
                  if r.max_rel_error is not None and r.tolerance is not None else ""))
    if r.trials:
        out.append(f"- {len(r.trials)} trials over the families {', '.join(r.families) or '—'}")
    if r.kernel_coverage is not None:
        out.append(f"- share of the forward's time in its own Triton kernels: {r.kernel_coverage:.0%}")
    for k in r.kernels:
        res = ", ".join(f"{a} {b}" for a, b in k.compiled.items())
        out.append(f"- launches `{k.name}` ×{k.launches}" + (f" ({res})" if res else ""))
    for flag in r.problem_flags:
        out.append(f"- problem flag: {_one_line(flag)}")
    for c in r.checks:
        if c.outcome in ("info", "skip") and c.detail:
            out.append(f"- {c.name} ({c.outcome}): {_one_line(c.detail)}")
    if r.versions:
        out.append("- versions: " + ", ".join(f"{k} {v}" for k, v in r.versions.items()))
    return out


def _contract(f: Facts) -> list[str]:
    r = f.result
    p = Precision(f.precision)
    arith = {"fp32": "float32 arithmetic: no TF32 tensor cores, no bf16/fp16 shortcuts (they exceed the tolerance)",
             "tf32": "TF32 tensor cores allowed (on both sides: the baselines may use them too)",
             "bf16": "inputs and weights in bfloat16", "fp16": "inputs and weights in float16"}[p.value]
    out = [f"- precision: **{p.value}**, {arith}",
           f"- tolerance: **{f.contract:.3g}** per element"
           + (" (the problem's own TOLERANCE)" if f.override else f" (kernelwright's tolerance for {p.value})"),
           "- metric: |out − ref| ≤ tolerance · (|ref| + rms(ref)) for every element, with ref the reference "
           "run in float64 on the same inputs and weights (so the error is relative to the output's scale; a "
           "near-zero output cannot pass); NaN or Inf where the reference is finite never passes",
           f"- gold precision at the problem's shape: **{f.gold}**"
           + (" (a float64 reference did not fit: the problem's own precision, with the tolerance doubled)"
              if f.gold != "float64" else ""),
           "- the tolerance is widened on a family where PyTorch's own result in this precision deviates from "
           "float64 (to twice that deviation), and a family where the reference itself is non-finite or deviates "
           "by more than ten times the tolerance is skipped, as the verifier does"]
    if r is not None and r.tolerance is not None:
        out.append(f"- the verifier judged this kernel's base family at tolerance {r.tolerance:.3g}"
                   + (f", worst error {r.max_rel_error:.3g}" if r.max_rel_error is not None else ""))
    return out


def _tests(f: Facts) -> list[str]:
    name = f.name
    out = [f"`test_{name}.py` builds the reference's `Model` and `ModelNew` with the same constructor arguments "
           "(`get_init_inputs()`) and the same weights: the reference's floating parameters are moved off their "
           "initial values (so a kernel that assumes the default initialisation fails), then its `state_dict` is "
           "loaded into `ModelNew` (strict). For each shape and input family it checks, on "
           f"{TRIALS} input sets each: the outputs' number, shape and dtype, the metric above, and that "
           "`ModelNew` leaves its inputs unchanged.", "",
           "Input families (floating inputs only; integer inputs keep their meaning): `base` (the problem's own "
           "`get_inputs()`), `sign_flip` (negated), `scaled` (times 10^±0.5…2), `heavy_tailed` (Student-t with two "
           "degrees of freedom, matched to the inputs' mean and spread; the first set puts the draw's extreme "
           "magnitude at the start of every slice along each input's first dimension)"
           + (", `test_inputs` (the problem's own `get_test_inputs()`, at its own shape)" if "test_inputs" in f.families
              else "") + ".", "",
           "| shape | sizes | input elements | on the CPU |", "| --- | --- | --- | --- |"]
    for s in f.shapes:
        n = f"{s.elements:,}" if s.elements is not None else "not counted"
        cpu = "skipped (too large for the interpreter)" if s.elements is not None and s.elements > CPU_MAX_ELEMENTS \
            else "runs"
        out.append(f"| {s.name} | {_sizes(s)} | {n} | {cpu} |")
    out.append("")
    if not f.sizes:
        out.append("The problem sizes its inputs with no module-level size constants, so the tests run at its own "
                   "shape only.")
    else:
        out.append("Size constants of the problem (read by `get_inputs()`): "
                   + ", ".join(f"`{k}` = {v}" for k, v in f.sizes.items())
                   + f". The other shapes set them smaller (`small`: the largest one halved until the inputs are "
                   f"at least four times smaller and at most {SMALL_TARGET:,} elements) and odd (`odd`: about ¾ of "
                   "small, made odd), kept only where the reference itself runs at them.")
        for k, why in f.dropped.items():
            out.append(f"The `{k}` shape was left out: {_one_line(why)}.")
        out += ["", "kernelwright's verifier checked the problem's own shape only: the other shapes are new "
                "evidence (marked `other_shape`; `-m 'not other_shape'` leaves them out). Where `ModelNew` raises "
                "on one of them the test is **skipped** with the error as its reason (the kernel does not support "
                "that shape; `pytest -rs` lists them); where it returns wrong values the test **fails**."]
    big = [s for s in f.shapes if s.elements is not None and s.elements > CPU_MAX_ELEMENTS]
    if big:
        run_cpu = [s.name for s in f.shapes if s not in big]
        out += ["", f"On the CPU, Triton's interpreter is slow: shapes over {CPU_MAX_ELEMENTS:,} input elements are "
                "skipped there, so the CPU runs " + (", ".join(f"`{n}`" for n in run_cpu) if run_cpu else
                                                    "**nothing** (run the tests on a CUDA GPU)")
                + "; on CUDA every shape runs."]
    return out


def _lineage(f: Facts) -> list[str]:
    info = f.run.info()
    setup = info.config
    if setup.seed_written_by:
        seed_from = f"written by {setup.seed_written_by} from the reference"
    elif setup.seed_path:
        seed_from = f"given as {_code(Path(setup.seed_path).name)}"
    else:
        seed_from = "the run's seed"
    chain = f.chain
    if not chain:
        if f.kernel == setup.seed_kernel:
            return [f"This kernel is the run's seed ({seed_from}): no step changed it."]
        return ["No step of the run's trace made this kernel (it was added to the run directly)."]
    start = chain[0].get("parent")
    first = f"1. `{start}`: " + (f"the seed ({seed_from})" if start == setup.seed_kernel else "a kernel no step made")
    out = [f"From the run's trace, {len(chain)} step(s) from the seed to this kernel:", "", first]
    for i, r in enumerate(chain, start=2):
        p = r.get("proposal") or {}
        d = r.get("decision") or {}
        what = _one_line(p.get("what") or "(no proposal recorded)")
        parts = [f"{i}. step {r.get('step')} (`{r.get('step_id')}`): **{what}**"]
        if p.get("category"):
            parts.append(f"[{p['category']}]")
        line = " ".join(parts)
        if p.get("why"):
            line += f" — {_one_line(p['why'])}"
        pred = p.get("predicted_speedup")
        meas = d.get("measured_speedup")
        line += (f"; predicted {_x(pred)}" if isinstance(pred, (int, float)) else "") + \
            (f", measured {_x(meas)}" if isinstance(meas, (int, float)) else ", not timed")
        review = r.get("review") or {}
        if review.get("decision"):
            line += f"; review: {review['decision']} by {review.get('by') or '?'}"
        line += f"; verifier {r.get('verdict')}, archive {d.get('decision')} → `{r.get('child')}`"
        if r.get("child") == f.kernel:
            line += " (this kernel)"
        out.append(line)
    return out


# -- the generated files' fixed parts --------------------------------------------------------------------

def _template(name: str) -> str:
    """A fixed part of the generated folder, kept as a file beside this module (`handoff_files/`): the generated
    support module's body re-implements the verifier's input families, casting and error measure in torch alone,
    and tests/kernelwright/test_handoff.py checks that it draws and measures as `evaluators` does."""
    return (resources.files("kernelwright") / "handoff_files" / name).read_text()


CONFTEST = _template("conftest.py.tmpl")
PYTEST_INI = _template("pytest.ini.tmpl")
SUPPORT_BODY = _template("support.py.tmpl")
TEST = _template("test.py.tmpl")
BENCH = _template("bench.py.tmpl")
