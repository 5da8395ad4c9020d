"""GPU measurements for BENCHMARKS.md, in one call on a GPU host.

    python bench/gpu_bench.py [--only table,consistency,ncu,throughput,overhead] [--out DIR]

- table:       every example and bench/problems/*: eager, torch.compile, candidate, roofline floor,
               fraction of the floor, noise band (one evaluation each).
- consistency: the same kernel timed in two separate evaluations, 5 pairs per example; median |a-b|/mean.
- ncu:         a bandwidth-bound kernel's median against Nsight Compute's gpu__time_duration.
- throughput:  fully verified and timed candidates per GPU-minute on a small problem with pre-started
               workers, sequential and with concurrent evaluations; share of wall time that is not timing.
- overhead:    evaluation wall time of each example split into worker start-up and the rest.
Prints a short table per part at the end; writes JSON next to it under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernelwright.evaluators import EvalPolicy, Evaluator, load_problem  # noqa: E402


NAMES: set[str] | None = None


def pairs() -> list[tuple[str, Path, Path]]:
    found = [(p.parent.name, p, p.with_name("seed.py")) for p in sorted((ROOT / "examples").glob("*/problem.py"))]
    for p in sorted((ROOT / "bench" / "problems").glob("*.py")):
        cand = p.with_name(p.stem + "_triton.py")
        if not p.stem.endswith("_triton") and cand.exists():
            found.append((p.stem, p, cand))
    return [f for f in found if NAMES is None or f[0] in NAMES]


def table(out: dict) -> None:
    rows = out.setdefault("table", [])
    for name, prob, cand in pairs():
        t0 = time.time()
        try:
            with Evaluator(load_problem(prob), "cuda", EvalPolicy(trials=5)) as ev:
                r = ev.evaluate(cand.read_text())
        except Exception as e:  # noqa: BLE001
            rows.append({"name": name, "error": f"{type(e).__name__}: {e}"[:200]})
            continue
        t = r.timing.model_dump() if r.timing else {}
        rows.append({"name": name, "verdict": r.verdict, "reason": str(r.reason), "precision": r.precision,
                     "eager_ms": t.get("eager_ms"), "compile_ms": t.get("compile_ms"), "cand_ms": t.get("median_ms"),
                     "p25_ms": t.get("p25_ms"), "p75_ms": t.get("p75_ms"), "floor_ms": t.get("floor_ms"),
                     "bound": t.get("bound"), "fraction_of_floor": t.get("fraction_of_floor"),
                     "noise_band": t.get("noise_band"), "speedup_vs_eager": t.get("speedup_vs_eager"),
                     "speedup_vs_compile": t.get("speedup_vs_compile"), "suspect": t.get("suspect"),
                     "max_rel_error": r.max_rel_error, "wall_s": time.time() - t0, "detail": r.detail[:200]})
        # Row by row, so a call cut short by its time limit still leaves what it measured.
        print(f"  {name}: {rows[-1].get('cand_ms')} ms, {rows[-1]['wall_s']:.0f} s", flush=True)
        _save(out)


def consistency(out: dict) -> None:
    rows = []
    for name, prob, cand in pairs()[:2]:
        src = cand.read_text()
        with Evaluator(load_problem(prob), "cuda", EvalPolicy(trials=1, spares=2)) as ev:
            meds, evals = [], []
            for _ in range(10):
                t0 = time.time()
                r = ev.evaluate(src)
                t = r.timing.model_dump() if r.timing else {}
                meds.append(t.get("median_ms", float("nan")))
                evals.append({"start": t0, "end": time.time(), "median_ms": t.get("median_ms"),
                              "eager_ms": t.get("eager_ms"), "noise_band": t.get("noise_band"),
                              "flush_spin_ms": t.get("flush_spin_ms"), "suspect": t.get("suspect"),
                              "clocks": t.get("clocks")})
        diffs = [abs(a - b) / ((a + b) / 2) for a, b in zip(meds[0::2], meds[1::2])]
        rows.append({"name": name, "medians_ms": meds, "pair_rel_diffs": diffs, "median_pair_diff": statistics.median(diffs),
                     "evaluations": evals})
    out["consistency"] = rows


def ncu(out: dict) -> None:
    rows = []
    for name, prob, cand in pairs():
        if name not in ("softmax", "layernorm", "relu", "rmsnorm", "add_mul"):
            continue
        with Evaluator(load_problem(prob), "cuda", EvalPolicy(trials=1)) as ev:
            prof = ev.profile(cand.read_text(), ncu=True)
        ncu_us = [k.metrics.get("duration_us") for k in prof.ncu.kernels if "duration_us" in k.metrics]
        med = prof.timing.median_ms * 1e3 if prof.timing else None
        ncu_med = statistics.median(ncu_us) if ncu_us else None
        rows.append({"name": name, "timing_us": med, "ncu_duration_us": ncu_med,
                     "rel_diff": abs(med - ncu_med) / ncu_med if med and ncu_med else None,
                     "ncu_available": prof.ncu.available, "why": prof.ncu.why, "text": prof.text})
    out["ncu"] = rows


def throughput(out: dict) -> None:
    # A small level-1 problem: ReLU at the bench's small size (61 x 3001 fp32, like KernelBench's 16 x 16384).
    os.environ["KW_BENCH_SIZE"] = "cpu"
    prob = ROOT / "bench" / "problems" / "relu.py"
    if not prob.exists():
        prob = ROOT / "tests" / "gpu" / "fixtures" / "add_problem.py"
    cand_src = (prob.with_name(prob.stem + "_triton.py") if prob.stem == "relu" else ROOT / "tests/gpu/fixtures/honest_add.py").read_text()
    # Distinct candidates: the same kernel with a different constant, so each one compiles afresh.
    cands = [cand_src + f"\n_KW_VARIANT = {i}\n" for i in range(int(os.environ.get("KW_TP_N", "20")))]
    rows = []
    configs = [tuple(int(v) for v in c.split("x")) for c in os.environ.get("KW_TP_CONFIGS", "1x4,4x8").split(",")]
    for concurrency, spares in configs:
        with Evaluator(load_problem(prob), "cuda", EvalPolicy(trials=5, spares=spares)) as ev:
            ev.evaluate(cands[0])  # warm: baselines compiled, spares up
            time.sleep(15)  # let the spares finish starting, so the figure is the steady state
            t0 = time.time()
            with ThreadPoolExecutor(concurrency) as pool:
                results = list(pool.map(ev.evaluate, cands))
            wall = time.time() - t0
        timing_s = sum(r.phases.get("measure_s", 0.0) for r in results)  # GPU held exclusively for timing
        ok = sum(r.passed for r in results)
        rows.append({"problem": prob.name, "concurrency": concurrency, "spares": spares, "candidates": len(cands),
                     "passed": ok, "wall_s": wall, "per_gpu_minute": len(cands) / wall * 60,
                     "timing_s": timing_s, "share_not_timing": 1 - timing_s / wall,
                     "mean_phases": {k: statistics.fmean(r.phases.get(k, 0.0) for r in results)
                                     for k in results[0].phases}})
    out["throughput"] = rows


def overhead(out: dict) -> None:
    rows = []
    for name, prob, cand in pairs()[:3]:
        t0 = time.time()
        with Evaluator(load_problem(prob), "cuda", EvalPolicy()) as ev:
            r = ev.evaluate(cand.read_text())
        rows.append({"name": name, "wall_s": time.time() - t0, "phases": r.phases})
    out["overhead"] = rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="overhead,table,consistency,ncu,throughput")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/kw-bench"))
    ap.add_argument("--names", default=None, help="comma-separated problem names (default: all)")
    args = ap.parse_args()
    global NAMES
    NAMES = set(args.names.split(",")) if args.names else None
    Path(args.out).mkdir(parents=True, exist_ok=True)
    global OUT_DIR
    OUT_DIR = Path(args.out)
    out: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
                 "cuda": torch.version.cuda, "when": time.strftime("%Y-%m-%d %H:%M:%S")}
    for part in args.only.split(","):
        t0 = time.time()
        globals()[part](out)
        out.setdefault("part_s", {})[part] = time.time() - t0
        _save(out)
        print(f"[{part} done in {time.time() - t0:.0f} s]", flush=True)
    report(out)


OUT_DIR = Path("/tmp/kw-bench")


def _save(out: dict) -> None:
    (OUT_DIR / "bench.json").write_text(json.dumps(out, indent=1, default=str))


def _f(x: object, fmt: str = "{:.4g}") -> str:
    return "-" if x is None else fmt.format(x)


def report(out: dict) -> None:
    print(f"\n{out['device']}  torch {out['torch']}  triton {out['triton']}  cuda {out['cuda']}  {out['when']}")
    if "overhead" in out:
        print("\nwall time of one evaluation (s): total, worker start-up")
        for r in out["overhead"]:
            print(f"  {r['name']:16s} {r['wall_s']:6.2f} {r['phases'].get('worker_startup_s', 0):6.2f}")
    if "table" in out:
        print(f"\n{'problem':18s} {'prec':5s} {'eager':>9s} {'compile':>9s} {'cand':>9s} {'floor':>9s} {'frac':>6s} {'noise':>6s} verdict")
        for r in out["table"]:
            if "error" in r:
                print(f"{r['name']:18s} ERROR {r['error']}")
                continue
            print(f"{r['name']:18s} {r['precision']:5s} {_f(r['eager_ms'])!s:>9s} {_f(r['compile_ms'])!s:>9s} "
                  f"{_f(r['cand_ms'])!s:>9s} {_f(r['floor_ms'])!s:>9s} {_f(r['fraction_of_floor'], '{:.0%}')!s:>6s} "
                  f"{_f(r['noise_band'], '{:.1%}')!s:>6s} {r['verdict']} {r['reason']}")
    if "consistency" in out:
        print("\nsame kernel, two evaluations: median relative difference over 5 pairs")
        for r in out["consistency"]:
            print(f"  {r['name']:16s} {r['median_pair_diff']:.2%}  medians {[round(m, 5) for m in r['medians_ms']]}")
    if "ncu" in out:
        print("\ntiming median vs ncu gpu__time_duration (µs)")
        for r in out["ncu"]:
            print(f"  {r['name']:16s} {_f(r['timing_us'])} vs {_f(r['ncu_duration_us'])} -> {_f(r['rel_diff'], '{:.1%}')} "
                  f"{'' if r['ncu_available'] else r['why']}")
    if "throughput" in out:
        print("\nthroughput")
        for r in out["throughput"]:
            print(f"  concurrency {r['concurrency']} spares {r['spares']}: {r['passed']}/{r['candidates']} passed, "
                  f"{r['per_gpu_minute']:.1f} candidates/GPU-minute, {r['share_not_timing']:.0%} of wall time not timing")


if __name__ == "__main__":
    main()
