"""Issue 10 on a GPU: the builtin policy on the three examples and on two KernelBench level-1 problems at
their real sizes, against the seed, eager, torch.compile (default and max-autotune) and the roofline floor,
after a stated budget; and how long the quick check takes against a full verification.

    python3 bench/loop_reach_gpu.py --out DIR [--iterations 8] [--branches 2] [--names softmax,23_Softmax]
                                 [--kb .kb] [--skip-loop] [--skip-quick] [--skip-max-autotune]
                                 [--max-autotune-timeout 240] [--best-from OLD/loop_reach.json]
    python3 bench/loop_reach_gpu.py --report A/loop_reach.json B/loop_reach.json      (merge calls, print the tables)
    python3 bench/loop_reach_gpu.py --device cpu --small --names softmax --iterations 2 --out /tmp/i10  (a check
                                                                           of this script in the interpreter)

Problems (`--names`): softmax, layernorm, matmul_gelu (examples/<name>/problem.py with their seed.py) and
23_Softmax, 40_LayerNorm (<kb>/level1/<name>.py at the sizes KernelBench ships, with
bench/seeds/kb_<name>_seed.py, whose block sizes and warps are literals in the launches). Per problem:

- loop: `api.start_run` with the builtin policy (`--iterations` children in generations of `--branches`,
  5 trials per family) from the seed; from the run directory: seed and best medians (each from the
  verifier's own timing), eager, torch.compile (default), the floor and the best kernel's fraction of it,
  best against seed / eager / compile, every step (proposal key, verdict, archive decision, measured
  delta) and the admitted ones, kernels judged, stop reason, wall time;
- quick: one Evaluator (the loop's policy: 5 trials, 1 spare worker), warmed by a full evaluation of the
  seed, then `evaluate(seed, quick=True)` and `evaluate(seed)` alternately, 3 each: median wall of each;
- max-autotune: `kernelwright eval PROBLEM KERNEL --compile-mode max-autotune --trials 1 --json` in a
  subprocess bounded by `--max-autotune-timeout` (killed with its process group past it): the kernel is the
  loop's best (or, without a loop in this call, the best kernel recorded in `--best-from`, else the seed;
  the table says which), measured against max-autotune and its no-CUDA-graph twin in one measurement.

Budget on an H100 (estimates, not measured): loops 1-2 min per example (BENCHMARKS.md, issue 4),
2-3 min for 23_Softmax and 1-2 min for 40_LayerNorm; quick about 1 min per problem; max-autotune 1-4 min
per problem (bounded by --max-autotune-timeout). Split the calls to stay under 9 minutes, e.g.
  1. --names softmax,layernorm,matmul_gelu --skip-quick --skip-max-autotune
  2. --names 23_Softmax,40_LayerNorm --skip-quick --skip-max-autotune
  3. --skip-loop --skip-max-autotune                                   (quick check, all five)
  4. --skip-loop --skip-quick --names ... --best-from 1/loop_reach.json 2/loop_reach.json   (max-autotune; the
     JSON files must be in the device's working tree; without --best-from the seeds are measured)
and merge them with --report. Writes loop_reach.json under --out after every part; prints markdown tables at the end.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

EXAMPLES = ("softmax", "layernorm", "matmul_gelu")
KB = ("23_Softmax", "40_LayerNorm")
SMALL = {  # module-level sizes for --small (a CPU check of this script, never for figures)
    "softmax": {"M": 8, "N": 300},
    "layernorm": {"M": 8, "N": 300},
    "matmul_gelu": {"M": 32, "K": 32, "N": 32},
    "23_Softmax": {"batch_size": 4, "dim": 3000},
    "40_LayerNorm": {"batch_size": 2, "features": 3, "dim1": 10, "dim2": 10},
}


def _f(x: object, fmt: str = "{:.4g}") -> str:
    return "-" if x is None else fmt.format(x)


def _x(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}×"


def problem_and_seed(name: str, kb: Path) -> tuple[Path, Path]:
    if name in EXAMPLES:
        return ROOT / "examples" / name / "problem.py", ROOT / "examples" / name / "seed.py"
    if name in KB:
        return kb / "level1" / f"{name}.py", ROOT / "bench" / "seeds" / f"kb_{name}_seed.py"
    raise ValueError(f"unknown problem {name!r}: use {', '.join(EXAMPLES + KB)}")


def shrink(name: str, problem: Path, out_dir: Path) -> Path:
    """A copy of the problem with small sizes (--small: for checking this script on the CPU)."""
    src = problem.read_text()
    for var, value in SMALL[name].items():
        src, n = re.subn(rf"(?m)^{var}\s*=\s*\d+\s*$", f"{var} = {value}", src)
        if n != 1:
            raise ValueError(f"--small: {problem} has no line '{var} = <int>'")
    path = out_dir / "small" / f"{name}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(src)
    return path


def _free_device_memory() -> None:
    """The trusted side of an evaluator lives in this process: give its cached blocks back between parts,
    so the next evaluator's memory plan sees the whole device."""
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# -- the loop -------------------------------------------------------------------------------------------------


def loop(name: str, problem: Path, seed: Path, a: argparse.Namespace, run_dir: Path) -> dict[str, Any]:
    from kernelwright import api
    from kernelwright.evaluators import EvalResult

    t0 = time.time()
    config = api.RunConfig(iterations=a.iterations, branches=a.branches, device=a.device, trials=a.trials,
                           time_budget_s=a.time_budget)
    with api.start_run(problem, seed_kernel=seed, config=config, runs_dir=run_dir) as handle:
        info = handle.run_to_end()
    wall = time.time() - t0
    view = api.open_run(info.id, run_dir)
    evals = {p.stem: EvalResult.model_validate_json(p.read_text()) for p in (view.run.path / "evals").glob("*.json")}
    seed_r = evals.get(info.config.seed_kernel or "")
    best = view.best()
    seed_t = seed_r.timing if seed_r else None
    best_t = best.result.timing if best and best.result else None
    med = best_t.median_ms if best_t else None
    steps = []
    for s in view.steps():
        d = s.decision
        steps.append({"step": s.step_id, "key": s.proposal.key if s.proposal else None,
                      "what": s.proposal.what if s.proposal else None,
                      "category": s.proposal.category if s.proposal else None,
                      "predicted": s.proposal.predicted_speedup if s.proposal else None,
                      "verdict": s.verdict, "reason": s.result.reason if s.result else None,
                      "decision": d.decision, "delta": d.delta, "measured_speedup": d.measured_speedup,
                      "why": d.why, "child_ms": s.result.timing.median_ms if s.result and s.result.timing else None,
                      "verify_s": s.verify_s})
    admitted = [s for s in steps if s["decision"] in ("elite", "niche")]
    return {
        "run_id": info.id, "status": info.status, "stop": info.stop_reason, "steps": steps, "admitted": admitted,
        "evaluations": len(evals), "passed": sum(e.passed for e in evals.values()),
        "timed": sum(e.timing is not None for e in evals.values()),
        "timing_unavailable": None if best_t else (best.result.timing_unavailable if best and best.result
                                                   else "no best kernel"),
        "seed_ms": seed_t.median_ms if seed_t else None, "best_ms": med,
        "best_is_seed": bool(best and best.hash == info.config.seed_kernel),
        "eager_ms": best_t.eager_ms if best_t else None, "compile_ms": best_t.compile_ms if best_t else None,
        "compile_mode": best_t.compile_mode if best_t else None,
        "floor_ms": best_t.floor_ms if best_t else None, "bound": best_t.bound if best_t else None,
        "fraction_of_floor": best_t.fraction_of_floor if best_t else None,
        "noise_band": best_t.noise_band if best_t else None,
        "suspect": best_t.suspect if best_t else None,
        "speedup_vs_seed": seed_t.median_ms / med if med and seed_t and seed_t.median_ms else None,
        "speedup_vs_eager": best_t.speedup_vs_eager if best_t else None,
        "speedup_vs_compile": best_t.speedup_vs_compile if best_t else None,
        "best_kernel": str(best.path) if best else None, "best_source": best.source if best else None,
        "wall_s": wall,
    }


# -- quick check against full verification ------------------------------------------------------------------


def quick(problem: Path, seed: Path, a: argparse.Namespace) -> dict[str, Any]:
    from kernelwright.evaluators import EvalPolicy, Evaluator, load_problem

    import inspect

    if "quick" not in inspect.signature(Evaluator.evaluate).parameters:
        return {"error": "this evaluator has no quick flag (Evaluator.evaluate(source, quick=True))"}
    source = seed.read_text()
    out: dict[str, Any] = {"quick_s": [], "full_s": [], "quick_phases": [], "full_phases": []}
    t0 = time.monotonic()
    with Evaluator(load_problem(problem), a.device, EvalPolicy(trials=a.trials, spares=a.spares)) as ev:
        r = ev.evaluate(source)
        out["warm_s"] = time.monotonic() - t0
        out["warm_verdict"] = f"{r.verdict} {r.reason}"
        for _ in range(3):
            for kind in ("quick", "full"):
                t1 = time.monotonic()
                r = ev.evaluate(source, quick=True) if kind == "quick" else ev.evaluate(source)
                out[f"{kind}_s"].append(time.monotonic() - t1)
                out[f"{kind}_phases"].append(r.phases)
                out[f"{kind}_verdict"] = f"{r.verdict} {r.reason}"
                out[f"{kind}_trials"] = next((c.detail for c in r.checks if c.name == "correctness"), None)
    for kind in ("quick", "full"):
        out[f"{kind}_worker_wait_median_s"] = statistics.median(
            (ph or {}).get("worker_wait_s", 0.0) for ph in out[f"{kind}_phases"])
    out["quick_median_s"] = statistics.median(out["quick_s"])
    out["full_median_s"] = statistics.median(out["full_s"])
    out["full_over_quick"] = out["full_median_s"] / out["quick_median_s"] if out["quick_median_s"] else None
    return out


# -- torch.compile max-autotune ---------------------------------------------------------------------------------


def max_autotune(problem: Path, kernel: Path, which: str, a: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "kernelwright.cli", "eval", str(problem), str(kernel), "--device", a.device,
           "--compile-mode", "max-autotune", "--trials", "1", "--json"]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=a.max_autotune_timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the group this script started: the eval and its workers
        proc.communicate()
        return {"kernel": which, "wall_s": time.monotonic() - t0,
                "error": f"timed out after {a.max_autotune_timeout:.0f} s (raise --max-autotune-timeout)"}
    wall = time.monotonic() - t0
    line = next((ln for ln in reversed(stdout.splitlines()) if ln.startswith("{")), None)
    if line is None:
        return {"kernel": which, "wall_s": wall, "rc": proc.returncode,
                "error": (stderr.strip().splitlines() or ["no output"])[-1][:300]}
    r = json.loads(line)
    t = r.get("timing") or {}
    return {"kernel": which, "wall_s": wall, "rc": proc.returncode, "verdict": r.get("verdict"),
            "reason": r.get("reason"), "kernel_ms": t.get("median_ms"), "eager_ms": t.get("eager_ms"),
            "compile_ms": t.get("compile_ms"), "compile_mode": t.get("compile_mode"),
            "compile_modes": t.get("compile_modes"), "speedup_vs_compile": t.get("speedup_vs_compile"),
            "vs_compile": t.get("vs_compile"), "noise_band": t.get("noise_band"), "suspect": t.get("suspect"),
            "timing_unavailable": r.get("timing_unavailable"), "phases": r.get("phases")}


# -- report ---------------------------------------------------------------------------------------------------


def report(out: dict[str, Any]) -> None:
    rows = out["rows"]
    print(f"\n{out.get('device')}  torch {out.get('torch')}  triton {out.get('triton')}  "
          f"builtin policy, {out.get('iterations')} children in generations of {out.get('branches')}, "
          f"{out.get('trials')} trials per family  {out.get('when')}")
    print("\n| problem | seed ms | best ms | eager ms | compile ms | max-autotune ms | floor ms | fraction of floor "
          "| best vs seed | vs eager | vs compile | vs max-autotune | kernels judged (passed) | stop | wall s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |")
    for name, r in rows.items():
        lp, ma = r.get("loop") or {}, r.get("max_autotune") or {}
        if "error" in lp:
            print(f"| {name} | loop failed: {lp['error']} | | | | | | | | | | | | | |")
            continue
        if ma.get("error"):
            ma_cell, vs_ma = f"({ma['error']})", "-"
        elif ma.get("skipped"):
            ma_cell, vs_ma = f"({ma['skipped']})", "-"
        else:
            ma_cell = _f(ma.get("compile_ms"))
            if ma.get("compile_mode"):
                ma_cell += f" ({ma['compile_mode']})"
            vs_ma = _x(ma.get("speedup_vs_compile"))
            if ma.get("speedup_vs_compile") is not None:
                vs_ma += f" ({ma.get('kernel')}, same measurement)"
        best = _f(lp.get("best_ms")) + (" (the seed)" if lp.get("best_is_seed") else "")
        print(f"| {name} | {_f(lp.get('seed_ms'))} | {best} | {_f(lp.get('eager_ms'))} | {_f(lp.get('compile_ms'))} "
              f"| {ma_cell} | {_f(lp.get('floor_ms'))} | {_f(lp.get('fraction_of_floor'), '{:.0%}')} "
              f"| {_x(lp.get('speedup_vs_seed'))} | {_x(lp.get('speedup_vs_eager'))} "
              f"| {_x(lp.get('speedup_vs_compile'))} | {vs_ma} "
              f"| {lp.get('evaluations', '-')} ({lp.get('passed', '-')}) | {lp.get('stop', '-')} "
              f"| {_f(lp.get('wall_s'), '{:.0f}')} |")
    print("\nMoves admitted (archive decision, measured parent/child speedup):")
    for name, r in rows.items():
        lp = r.get("loop") or {}
        if not lp or "error" in lp:
            continue
        adm = "; ".join(f"{s['what'] or s['key']} ({s['decision']}, {_x(s['measured_speedup'])})"
                        for s in lp.get("admitted", [])) or "none"
        tried = len([s for s in lp.get("steps", []) if s.get("key")])
        print(f"- {name}: {adm}  [{tried} moves tried; timing: {lp.get('timing_unavailable') or 'measured'}]")
    print("\n| problem | quick check s (median of 3) | full verification s (median of 3) | full / quick "
          "| of which waiting for a worker s (quick / full) | first (warming) evaluation s | quick trials "
          "| full trials |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    for name, r in rows.items():
        q = r.get("quick") or {}
        if not q:
            continue
        if "error" in q:
            print(f"| {name} | failed: {q['error']} | | | | | | |")
            continue
        print(f"| {name} | {q['quick_median_s']:.2f} | {q['full_median_s']:.2f} | {_x(q.get('full_over_quick'))} "
              f"| {_f(q.get('quick_worker_wait_median_s'), '{:.2f}')} / "
              f"{_f(q.get('full_worker_wait_median_s'), '{:.2f}')} | {q['warm_s']:.1f} | {q.get('quick_verdict')}: {q.get('quick_trials')} "
              f"| {q.get('full_verdict')}: {q.get('full_trials')} |")


def merge(paths: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"rows": {}}
    for p in paths:
        data = json.loads(Path(p).read_text())
        for k, v in data.items():
            if k != "rows":
                out.setdefault(k, v)
        for name, parts in data.get("rows", {}).items():
            row = out["rows"].setdefault(name, {})
            for part, value in parts.items():
                if isinstance(value, dict) and value.get("skipped") and row.get(part):
                    continue  # a part skipped in a later call keeps the earlier call's figures
                if value:
                    row[part] = value
    return out


# -- main -----------------------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="/tmp/kw-loop-reach")
    ap.add_argument("--iterations", type=int, default=8, help="children judged per problem (the budget)")
    ap.add_argument("--branches", type=int, default=2)
    ap.add_argument("--trials", type=int, default=5, help="trials per input family (loop and quick check)")
    ap.add_argument("--time-budget", type=float, default=None, help="seconds per run (RunConfig.time_budget_s)")
    ap.add_argument("--names", default=",".join(EXAMPLES + KB))
    ap.add_argument("--kb", default=str(ROOT / ".kb"), help="folder holding KernelBench's level1")
    ap.add_argument("--device", default="cuda", help="cuda (the figures) or cpu (a check of this script)")
    ap.add_argument("--spares", type=int, default=1, help="spare workers of the quick-check evaluator")
    ap.add_argument("--skip-loop", action="store_true")
    ap.add_argument("--skip-quick", action="store_true")
    ap.add_argument("--skip-max-autotune", action="store_true")
    ap.add_argument("--max-autotune-timeout", type=float, default=240.0, help="seconds per problem")
    ap.add_argument("--best-from", nargs="*", default=[], help="loop_reach.json of earlier calls: their best kernels "
                    "are measured against max-autotune when this call runs no loop")
    ap.add_argument("--small", action="store_true", help="shrink the problems (CPU check of this script only)")
    ap.add_argument("--report", nargs="+", default=None, metavar="JSON", help="merge earlier calls' loop_reach.json "
                    "and print the tables (no device needed)")
    a = ap.parse_args()
    if a.report:
        report(merge(a.report))
        return 0

    import torch
    import triton

    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print("loop_reach_gpu.py needs a CUDA GPU (none is visible); use --device cpu --small to check the script.",
              file=sys.stderr)
        return 2
    names = [n.strip() for n in a.names.split(",") if n.strip()]
    bad = [n for n in names if n not in EXAMPLES + KB]
    if bad:
        print(f"unknown problem {bad[0]!r}: use {', '.join(EXAMPLES + KB)}.", file=sys.stderr)
        return 2
    out_dir = Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    run_dir = out_dir / "runs"
    earlier = merge(a.best_from)["rows"] if a.best_from else {}
    out: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if a.device.startswith("cuda") else "cpu",
        "torch": torch.__version__, "triton": triton.__version__, "iterations": a.iterations,
        "branches": a.branches, "trials": a.trials, "small": a.small, "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        "argv": sys.argv[1:], "rows": {}}

    def save() -> None:
        (out_dir / "loop_reach.json").write_text(json.dumps(out, indent=1, default=str))

    t_all = time.time()
    for name in names:
        row: dict[str, Any] = out["rows"].setdefault(name, {})
        try:
            problem, seed = problem_and_seed(name, Path(a.kb))
            if not problem.exists():
                raise FileNotFoundError(f"{problem}: no such problem file (extract KernelBench under --kb)")
            if a.small:
                problem = shrink(name, problem, out_dir)
        except (OSError, ValueError) as e:
            row["loop"] = {"error": str(e)}
            print(f"{name}: {e}", flush=True)
            save()
            continue
        row["problem"], row["seed"] = str(problem), str(seed)
        if not a.skip_loop:
            try:
                row["loop"] = loop(name, problem, seed, a, run_dir)
            except Exception as e:  # noqa: BLE001 - one problem's failure must not lose the others' figures
                row["loop"] = {"error": f"{type(e).__name__}: {e}"[:300]}
            _free_device_memory()
            save()
            lp = row["loop"]
            print(f"{name}: loop best {lp.get('best_ms')} ms (seed {lp.get('seed_ms')}), "
                  f"{lp.get('evaluations')} kernels judged, stop {lp.get('stop')}, {lp.get('wall_s', 0):.0f} s "
                  f"[{time.time() - t_all:.0f} s so far]", flush=True)
        if not a.skip_quick:
            try:
                row["quick"] = quick(problem, seed, a)
            except Exception as e:  # noqa: BLE001
                row["quick"] = {"error": f"{type(e).__name__}: {e}"[:300]}
            q = row["quick"]
            print(f"{name}: quick {_f(q.get('quick_median_s'))} s, full {_f(q.get('full_median_s'))} s "
                  f"{q.get('error') or ''}[{time.time() - t_all:.0f} s so far]", flush=True)
            _free_device_memory()
            save()
        if not a.skip_max_autotune:
            if not a.device.startswith("cuda"):
                row["max_autotune"] = {"skipped": "needs a GPU"}
            else:
                lp = row.get("loop") or (earlier.get(name) or {}).get("loop") or {}
                which, kernel = "seed", seed
                if lp.get("best_source") and not lp.get("best_is_seed"):
                    which = "best" if row.get("loop") else "best of --best-from"
                    kernel = out_dir / "kernels" / f"{name}_best.py"
                    kernel.parent.mkdir(parents=True, exist_ok=True)
                    kernel.write_text(lp["best_source"])
                try:
                    row["max_autotune"] = max_autotune(problem, kernel, which, a)
                except Exception as e:  # noqa: BLE001
                    row["max_autotune"] = {"kernel": which, "error": f"{type(e).__name__}: {e}"[:300]}
                ma = row["max_autotune"]
                print(f"{name}: max-autotune {ma.get('compile_ms')} ms ({ma.get('compile_mode')}), {which} "
                      f"{ma.get('kernel_ms')} ms, {ma.get('wall_s', 0):.0f} s {ma.get('error') or ''}"
                      f"[{time.time() - t_all:.0f} s so far]", flush=True)
        else:
            row["max_autotune"] = {"skipped": "--skip-max-autotune"}
        save()
    out["wall_s"] = time.time() - t_all
    save()
    report(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
