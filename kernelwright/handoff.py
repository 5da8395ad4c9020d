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
from pathlib import Path
from typing import Any

from kernelwright.api import UsageError, open_run
from kernelwright.evaluators import EvalResult, Precision, ProblemError, problem_from_source
from kernelwright.evaluators.variants import SMALL_TARGET, Shape, shapes_for
from kernelwright.tools.runstore import Run

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
    wanted = given.strip().lower()
    if not re.fullmatch(r"[0-9a-f]{1,16}", wanted):
        raise UsageError(f"{given!r} is not a kernel hash (16 hex digits, or a unique prefix of them)")
    hashes = sorted(p.stem for p in (run.path / "kernels").glob("*.py"))
    matches = [h for h in hashes if h.startswith(wanted)]
    if not matches:
        raise UsageError(f"run {run.id} has no kernel {given}")
    if len(matches) > 1:
        shown = ", ".join(matches[:4]) + (", ..." if len(matches) > 4 else "")
        raise UsageError(f"{given} is the prefix of {len(matches)} kernels of run {run.id} ({shown}): give more digits")
    return matches[0]


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


# -- the lineage ------------------------------------------------------------------------------------------


def lineage(trace: list[dict[str, Any]], kernel: str) -> list[dict[str, Any]]:
    """The steps that led to `kernel`, oldest first: each step record whose child is the next one's parent."""
    made_by: dict[str, dict[str, Any]] = {}
    for r in trace:
        if r.get("child") and r["child"] not in made_by:
            made_by[r["child"]] = r
    chain, seen, h = [], set(), kernel
    while h in made_by and h not in seen:
        seen.add(h)
        chain.append(made_by[h])
        h = made_by[h].get("parent")
    return list(reversed(chain))


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
    ctx = info.config.context or {}
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
           "degrees of freedom, matched to the inputs' mean and spread)"
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

CONFTEST = '''"""Makes this folder's modules importable and, without a GPU (or with HANDOFF_DEVICE=cpu), runs the Triton
kernels in Triton's interpreter: TRITON_INTERPRET must be set before the kernel module is imported."""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import handoff_support  # noqa: E402  (imports torch, not triton)

if handoff_support.device() == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"
'''

PYTEST_INI = """[pytest]
# this folder is its own pytest root (no configuration from a folder above it applies)
addopts = -ra -p no:cacheprovider
markers =
    other_shape: sizes other than the problem's own (kernelwright's verifier checked the problem's own only)
"""

SUPPORT_BODY = r'''
HERE = Path(__file__).resolve().parent
CAST = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(PRECISION)
"""the dtype floating inputs and weights are cast to (None: the problem's own)"""
CHUNK = 1 << 24
"""elements per slice when comparing, so no temporary grows with the output"""


def device() -> str:
    """cuda when a GPU is visible (HANDOFF_DEVICE=cpu forces the CPU), else the CPU."""
    if os.environ.get("HANDOFF_DEVICE", "").strip().lower() == "cpu":
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def not_run_on(dev: str, shape: str) -> str | None:
    """Why `shape` is not run on `dev`, or None."""
    n = ELEMENTS.get(shape)
    if dev == "cpu" and n is not None and n > CPU_MAX_ELEMENTS:
        return (f"the {shape} shape ({n:,} input elements) is too large for Triton's interpreter on the CPU; "
                "it runs on a CUDA GPU")
    return None


def families(shape: str) -> tuple[str, ...]:
    """The families checked at a shape (the problem's own test inputs have their own shapes)."""
    return tuple(f for f in FAMILIES if f != "test_inputs" or shape == "problem")


def load_reference(shape: str = "problem"):
    """reference.py as a fresh module, with the size constants of `shape` set."""
    name = f"reference_{shape}"
    spec = importlib.util.spec_from_file_location(name, HERE / "reference.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    for k, v in SHAPES[shape].items():
        setattr(module, k, v)
    return module


def seed_of(*parts) -> int:
    return zlib.crc32("/".join(map(str, parts)).encode())


def is_structure(name: str, t: torch.Tensor) -> bool:
    """A buffer that encodes the problem (a causal mask of 0/1 or 0/-inf, an index table) keeps its values:
    integer values (or +-inf), not all equal, and not running statistics."""
    if "running_" in name or t.numel() < 2:
        return False
    flat = t.detach().reshape(-1)
    if bool(torch.isnan(flat).any()):
        return False
    if not bool(torch.where(torch.isfinite(flat), flat == torch.round(flat), True).all()):
        return False
    return not bool((flat == flat[0]).all())


@torch.no_grad()
def perturb(model: torch.nn.Module, seed: int) -> None:
    """Move every floating parameter (and every floating buffer that is state, not structure) off its initial
    value by seeded noise of half its rms, so a kernel that assumes ones, zeros or a seeded init fails."""
    named = list(model.named_parameters()) + list(model.named_buffers())
    for k, (name, t) in enumerate(named):
        if not t.is_floating_point() or t.numel() == 0:
            continue
        if not isinstance(t, torch.nn.Parameter) and is_structure(name, t):
            continue
        g = torch.Generator(device=t.device)
        g.manual_seed(seed + k)
        w = t.detach().to(torch.float64 if t.dtype == torch.float64 else torch.float32)
        scale = max(float(w.pow(2).mean().sqrt()), 0.05) * 0.5
        new = w + torch.randn(w.shape, generator=g, dtype=w.dtype, device=t.device) * scale
        if name.endswith("var"):
            new = new.abs() + 1e-3  # variances stay positive
        t.copy_(new.to(t.dtype))


def _to(m: torch.nn.Module, dev: str) -> torch.nn.Module:
    return m.to(device=dev, dtype=CAST) if CAST is not None else m.to(dev)


@torch.no_grad()
def build(reference, model_new_cls, dev: str):
    """The reference's Model and ModelNew with the same constructor arguments and the same weights: Model is
    built, cast and perturbed, and its state_dict is loaded into ModelNew (strict: same parameter names)."""
    init = list(reference.get_init_inputs())
    torch.manual_seed(seed_of("init"))
    model = _to(reference.Model(*init), dev)
    perturb(model, seed_of("params"))
    new = _to(model_new_cls(*init), dev)
    new.load_state_dict(model.state_dict(), strict=True)
    return model, new


def transform(family: str, xs: list, seed: int) -> list:
    """An input family applied to the problem's own inputs (floating tensors only)."""
    if family in ("base", "test_inputs"):
        return xs
    g = torch.Generator()
    g.manual_seed(seed)
    out = []
    for k, x in enumerate(xs):
        if not (isinstance(x, torch.Tensor) and x.is_floating_point()):
            out.append(x)
            continue
        work = torch.float64 if x.dtype == torch.float64 else torch.float32
        w = x.detach().to(work)
        if family == "sign_flip":
            y = -w
        elif family == "scaled":
            u, s = torch.rand(2, generator=g, dtype=torch.float64).tolist()
            y = w * 10.0 ** ((0.5 + 1.5 * u) * (1 if s < 0.5 else -1))
        elif family == "heavy_tailed":
            if w.numel() > 1:
                std, mean = (float(v) for v in torch.std_mean(w))
            else:
                std, mean = 1.0, float(w.sum())
            std = std if math.isfinite(std) and std > 0 else 1.0
            mean = mean if math.isfinite(mean) else 0.0
            gd = torch.Generator(device=x.device)
            gd.manual_seed(seed + 1 + k)
            y = torch.empty(w.shape, dtype=work, device=x.device).reshape(-1)
            for i in range(0, y.numel(), CHUNK):
                n = min(CHUNK, y.numel() - i)
                z, a, b = (torch.randn(n, generator=gd, dtype=work, device=x.device) for _ in range(3))
                t = z / ((a * a + b * b) / 2).clamp_min(1e-12).sqrt()  # Student-t, 2 degrees of freedom
                y[i:i + n] = mean + std * t.clamp(-1e4, 1e4)
            y = y.reshape(w.shape)
        else:
            raise ValueError(f"unknown input family {family!r}")
        res = torch.empty_like(x)
        res.copy_(y)
        out.append(res)
    return out


def _cast(xs: list, dev: str) -> list:
    out = []
    for x in xs:
        if isinstance(x, torch.Tensor):
            x = x.to(dev)
            if CAST is not None and x.is_floating_point():
                x = x.to(CAST)
        out.append(x)
    return out


@torch.no_grad()
def input_sets(reference, family: str, dev: str, shape: str = "problem") -> list[list]:
    """The input sets of one family at the reference's shape: TRIALS of them, drawn from fixed seeds on `dev`
    (the problem's test inputs: every set get_test_inputs() returns)."""
    sets = []
    if family == "test_inputs":
        torch.manual_seed(seed_of(shape, family))
        with torch.device(dev):
            got = list(reference.get_test_inputs())
        got = [got] if got and isinstance(got[0], torch.Tensor) else [list(s) for s in got]
        return [_cast(s, dev) for s in got]
    for trial in range(TRIALS):
        seed = seed_of(shape, family, trial)
        torch.manual_seed(seed)
        with torch.device(dev):
            raw = [x.to(dev) if isinstance(x, torch.Tensor) else x for x in reference.get_inputs()]
        sets.append(_cast(transform(family, raw, seed), dev))
    return sets


def outputs(value) -> list:
    return list(value) if isinstance(value, (tuple, list)) else [value]


def set_tf32() -> None:
    """TF32 in PyTorch's matmul and convolutions only where the contract allows it."""
    torch.backends.cuda.matmul.allow_tf32 = PRECISION == "tf32"
    torch.backends.cudnn.allow_tf32 = PRECISION == "tf32"


@torch.no_grad()
def run(model: torch.nn.Module, xs: list) -> list:
    set_tf32()
    return outputs(model(*xs))


def gold_model(model: torch.nn.Module, shape: str):
    """The reference in float64 (None: compare against the problem's own precision, tolerance doubled)."""
    if shape == "problem" and GOLD_AT_PROBLEM_SHAPE != "float64":
        return None
    try:
        return copy.deepcopy(model).double()
    except Exception:  # noqa: BLE001 - a model with no float64 version
        return None


@torch.no_grad()
def run_gold(gold: torch.nn.Module, xs: list) -> list | None:
    """The float64 reference's outputs (None when they do not fit or it fails: native, tolerance doubled)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        outs = outputs(gold(*[x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                              for x in xs]))
    except Exception:  # noqa: BLE001 - out of memory, or an op with no float64 kernel
        return None
    return [o.double() if isinstance(o, torch.Tensor) and o.is_floating_point() else o for o in outs]


def clone(xs: list) -> list:
    return [x.clone() if isinstance(x, torch.Tensor) else x for x in xs]


def same(a: list, b: list) -> bool:
    return all(torch.equal(x, y) if isinstance(x, torch.Tensor) else True for x, y in zip(a, b))


def all_finite(t: torch.Tensor) -> bool:
    return not t.is_floating_point() or bool(torch.isfinite(t).all())


def _slices(n: int) -> range:
    return range(0, n, CHUNK)


def max_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """The worst per-element error |out - ref| / (|ref| + rms(ref)), rms over the reference's finite values.
    Infinite when out is NaN or Inf where ref is finite, or differs from ref where ref is not finite; for
    integer outputs, 0 when equal and infinite otherwise."""
    o, r = out.detach().to(ref.device).reshape(-1), ref.detach().reshape(-1)
    if o.numel() != r.numel():
        return math.inf
    if not r.is_floating_point():
        return 0.0 if torch.equal(o.to(r.dtype), r) else math.inf
    f64 = torch.float64
    sumsq, finite = 0.0, 0
    for i in _slices(r.numel()):
        rc, oc = r[i:i + CHUNK].to(f64), o[i:i + CHUNK].to(f64)
        rf = torch.isfinite(rc)
        if not bool(torch.where(rf, torch.isfinite(oc), True).all()):
            return math.inf
        same_odd = (rc == oc) | (torch.isnan(rc) & torch.isnan(oc))
        if not bool(torch.where(rf, True, same_odd).all()):
            return math.inf
        finite += int(rf.sum())
        sumsq += float(torch.where(rf, rc, 0.0).square().sum())
    if finite == 0:
        return 0.0
    rms = math.sqrt(sumsq / finite)
    tiny = torch.finfo(f64).tiny
    worst = 0.0
    for i in _slices(r.numel()):
        rc, oc = r[i:i + CHUNK].to(f64), o[i:i + CHUNK].to(f64)
        rf = torch.isfinite(rc)
        rz = torch.where(rf, rc, 0.0)
        err = torch.where(rf, oc - rz, 0.0).abs() / (rz.abs() + rms).clamp_min(tiny)
        if err.numel():
            worst = max(worst, float(err.max()))
    return worst


def mismatch(out: torch.Tensor, ref: torch.Tensor, tol: float, label: str) -> str:
    """Where out and ref disagree: how many elements exceed the tolerance, and the worst three."""
    o, r = out.detach().to(ref.device).reshape(-1), ref.detach().reshape(-1)
    if not r.is_floating_point():
        bad = (o.to(r.dtype) != r).nonzero().reshape(-1)[:3].tolist()
        return f"{label}: integer outputs differ; first at flat index {bad}"
    f64 = torch.float64
    fin = torch.isfinite(r)
    rms = float(torch.where(fin, r.to(f64), 0.0).square().sum() / max(int(fin.sum()), 1)) ** 0.5
    over, worst = 0, []
    for i in _slices(r.numel()):
        rc, oc = r[i:i + CHUNK].to(f64), o[i:i + CHUNK].to(f64)
        rf = torch.isfinite(rc)
        rz = torch.where(rf, rc, 0.0)
        err = torch.where(rf, oc - rz, 0.0).abs() / (rz.abs() + rms).clamp_min(torch.finfo(f64).tiny)
        err = torch.where(rf & ~torch.isfinite(oc), math.inf, torch.nan_to_num(err, nan=math.inf))
        over += int((err > tol).sum())
        top = torch.topk(err, k=min(3, err.numel()))
        worst += [(float(v), i + int(j)) for v, j in zip(top.values.tolist(), top.indices.tolist())]
    shown = "; ".join(f"flat index {j}: got {o[j].item():.6g}, expected {r[j].item():.6g} (error {v:.3g})"
                      for v, j in sorted(worst, reverse=True)[:3])
    return (f"{label}: {over} of {r.numel()} elements exceed the tolerance {tol:.3g} "
            f"(error relative to |ref| + rms(ref), rms = {rms:.3g}); worst: {shown}")
'''

TEST = r'''"""__KERNEL__.ModelNew against the problem's reference (reference.py).

Generated by `kernelwright handoff` from run __RUN__ (kernel __HASH__). For every shape and input family in
handoff_support.py: the same constructor arguments and weights on both sides, outputs of the same number,
shape and dtype, every element within the tolerance of the float64 reference (the metric and tolerance the
verifier used), and inputs left unchanged. Runs on CUDA when a GPU is visible, else on the CPU through Triton's
interpreter (conftest.py). A shape other than the problem's own that ModelNew raises on is skipped (not
supported); wrong values fail.
"""

from __future__ import annotations

import pytest
import torch

import handoff_support as hs
from __KERNEL__ import ModelNew

DEVICE = hs.device()
MAX_WIDENING = 10.0
"""a family on which PyTorch itself deviates from float64 by more than this many tolerances says nothing"""

CASES = [pytest.param(shape, family, id=f"{shape}-{family}",
                      marks=[pytest.mark.other_shape] if shape != "problem" else [])
         for shape in hs.SHAPES for family in hs.families(shape)]


def unsupported(shape: str, what: str, error: Exception) -> None:
    """A shape other than the problem's own that ModelNew refuses is reported as not supported (skipped)."""
    if shape == "problem":
        raise error
    text = " ".join(str(error).split())[:300]
    pytest.skip(f"ModelNew does not support the {shape} shape {hs.SHAPES[shape]} ({what} raised "
                f"{type(error).__name__}: {text})")


@pytest.mark.parametrize("shape,family", CASES)
def test_matches_reference(shape: str, family: str) -> None:
    why = hs.not_run_on(DEVICE, shape)
    if why:
        pytest.skip(why)
    reference = hs.load_reference(shape)
    try:
        model, new = hs.build(reference, ModelNew, DEVICE)
    except Exception as e:  # noqa: BLE001
        unsupported(shape, "building ModelNew", e)
    gold_model = hs.gold_model(model, shape)
    judged, skipped = 0, []
    for k, xs in enumerate(hs.input_sets(reference, family, DEVICE, shape)):
        label = f"{shape}/{family}/set {k}"
        native = hs.run(model, xs)
        gold = hs.run_gold(gold_model, xs) if gold_model is not None else None
        tol = hs.TOLERANCE
        if gold is None:  # the problem's own precision stands in for float64: its own error is allowed twice
            gold, tol = native, 2 * hs.TOLERANCE
        else:  # never tighter than PyTorch's own result in this precision on these inputs
            own = max((hs.max_error(n, g) for n, g in zip(native, gold) if g.is_floating_point()), default=0.0)
            tol = max(tol, 2 * own)
        if family != "base" and not all(hs.all_finite(g) for g in gold):
            skipped.append(f"{label}: the reference itself is not finite")
            continue
        if family != "base" and tol > MAX_WIDENING * hs.TOLERANCE:
            skipped.append(f"{label}: PyTorch's own result deviates from float64 by {tol / 2:.3g}")
            continue
        given, before = hs.clone(xs), hs.clone(xs)
        try:
            with torch.no_grad():
                got = hs.outputs(new(*given))
        except Exception as e:  # noqa: BLE001
            unsupported(shape, "ModelNew.forward", e)
        assert len(got) == len(native), f"{label}: ModelNew returned {len(got)} outputs, the reference {len(native)}"
        for i, (o, n, g) in enumerate(zip(got, native, gold)):
            assert isinstance(o, torch.Tensor), f"{label}: output {i} is a {type(o).__name__}, not a tensor"
            assert o.shape == n.shape, f"{label}: output {i} has shape {tuple(o.shape)}, expected {tuple(n.shape)}"
            assert o.dtype == n.dtype, f"{label}: output {i} is {o.dtype}, expected {n.dtype}"
            err = hs.max_error(o, g)
            assert err <= tol, hs.mismatch(o, g, tol, f"{label}: output {i}")
        assert hs.same(given, before), f"{label}: ModelNew changed its inputs"
        judged += 1
    if not judged:
        pytest.skip("; ".join(skipped) or f"no input sets for {family}")
'''

BENCH = r'''"""Times __KERNEL__.ModelNew, the eager reference and torch.compile of it on a CUDA GPU.

Each is timed by triton.testing.do_bench (CUDA events, the L2 cache flushed before every repetition, median and
the 25th and 75th percentiles), on the same inputs and weights, after one check of the kernel's output.

    python bench___KERNEL__.py [--shape NAME] [--compile-mode MODE|none] [--rep MS]
"""

from __future__ import annotations

import argparse
import sys

import torch

import handoff_support as hs

MEASURED = __MEASURED__
"""what kernelwright's verifier measured for this kernel (None: it was never timed)"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=list(hs.SHAPES), default="problem", help="sizes to time at")
    parser.add_argument("--compile-mode", default=hs.COMPILE_MODE,
                        help="torch.compile mode of the compiled baseline ('none' to leave it out)")
    parser.add_argument("--rep", type=int, default=200, help="milliseconds of timed repetitions per measurement")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench___KERNEL__.py times the kernel on a CUDA GPU and this machine has none "
              "(python -m pytest checks its correctness on the CPU).", file=sys.stderr)
        return 1
    from triton.testing import do_bench

    from __KERNEL__ import ModelNew

    torch.set_grad_enabled(False)
    reference = hs.load_reference(args.shape)
    model, new = hs.build(reference, ModelNew, "cuda")
    xs = hs.input_sets(reference, "base", "cuda", args.shape)[0]
    hs.set_tf32()
    native = hs.run(model, xs)
    got = hs.outputs(new(*hs.clone(xs)))
    err = max((hs.max_error(o, n) for o, n in zip(got, native)), default=0.0)
    ok = len(got) == len(native) and err <= 2 * hs.TOLERANCE
    rows = [("ModelNew (this kernel)", lambda: new(*xs)), ("eager reference", lambda: model(*xs))]
    notes = []
    if args.compile_mode != "none":
        mode = None if args.compile_mode == "default" else args.compile_mode
        compiled = torch.compile(model, mode=mode)
        try:
            compiled(*xs)
            rows.append((f"torch.compile ({args.compile_mode})", lambda: compiled(*xs)))
        except Exception as e:  # noqa: BLE001
            notes.append(f"torch.compile ({args.compile_mode}) failed: {type(e).__name__}: {str(e)[:200]}")
    times = {}
    for label, fn in rows:
        times[label] = do_bench(fn, warmup=25, rep=args.rep, quantiles=[0.5, 0.25, 0.75])
    sizes = ", ".join(f"{k}={v}" for k, v in hs.SHAPES[args.shape].items()) or "the problem's own sizes"
    print(f"{args.shape} shape ({sizes}), {hs.PRECISION}, on {torch.cuda.get_device_name()}; "
          f"torch {torch.__version__}")
    print(f"output check against the reference (native, tolerance {2 * hs.TOLERANCE:.3g}): "
          + (f"ok (worst error {err:.3g})" if ok else f"MISMATCH (worst error {err:.3g})"))
    kernel_ms = times[rows[0][0]][0]
    width = max(len(label) for label in times)
    print(f"{'':{width}} {'median ms':>10} {'p25 ms':>10} {'p75 ms':>10} {'kernel is faster by':>20}")
    for label, (med, p25, p75) in times.items():
        speedup = "" if label == rows[0][0] else f"{med / kernel_ms:.2f}x"
        print(f"{label:{width}} {med:10.4g} {p25:10.4g} {p75:10.4g} {speedup:>20}")
    for note in notes:
        print(note)
    if MEASURED and args.shape == "problem":
        line = (f"the run measured (on {MEASURED['device']}): kernel {MEASURED['median_ms']:.4g} ms, "
                f"eager {MEASURED['eager_ms']:.4g} ms")
        if MEASURED.get("compile_ms") is not None:
            line += f", torch.compile ({MEASURED['compile_mode']}) {MEASURED['compile_ms']:.4g} ms"
        print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
'''
