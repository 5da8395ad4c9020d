"""Evaluation at KernelBench's real sizes on a GPU: honest kernels, throughput in the loop's conditions,
hanging candidates. Prints a short table last; writes every result as JSON lines under --out.

    python3 bench/kb_gpu_eval.py --kb .kb --out $OUT [--repeat 4] [--warm-all] [--only PROBLEM ...]

- for each honest kernel in bench/kernelbench/<level>/<problem>_triton.py whose problem file is in the
  KernelBench folder: one cold evaluation (a fresh Evaluator, as `kernelwright eval` does);
- for the throughput problems: one Evaluator kept alive (spare workers pre-started, baselines cached after
  the first evaluation), then --repeat evaluations of the same kernel; wall per evaluation, phase by phase,
  and verified-and-timed candidates per GPU-minute (60 / mean wall, one evaluation at a time);
- the hanging candidates of tests/adversarial (a host loop in forward, a kernel that never ends) with the
  default limits, each followed by an honest evaluation on the same GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
THROUGHPUT = ("23_Softmax", "40_LayerNorm")


def _row(name: str, r, wall: float) -> dict:  # type: ignore[no-untyped-def]
    t = r.timing.model_dump() if r.timing else {}
    m = r.memory or {}
    return {"name": name, "verdict": r.verdict, "reason": str(r.reason), "detail": r.detail[:300], "wall_s": wall,
            "median_ms": t.get("median_ms"), "eager_ms": t.get("eager_ms"), "compile_ms": t.get("compile_ms"),
            "floor_ms": t.get("floor_ms"), "suspect": t.get("suspect"), "timing_sets": t.get("timing_sets"),
            "max_rel_error": r.max_rel_error, "gold": r.gold_precision,
            "trusted_peak_gb": (m.get("trusted_peak_bytes") or 0) / 1e9,
            "worker_peak_gb": (m.get("worker_peak_bytes") or 0) / 1e9, "phases": r.phases}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kb", default=".kb", help="folder holding KernelBench's level1..level3")
    ap.add_argument("--out", default="/tmp/kw-out")
    ap.add_argument("--repeat", type=int, default=4)
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--skip-hangs", action="store_true")
    ap.add_argument("--warm-all", action="store_true",
                    help="measure warm evaluations (the loop's conditions) for every kernel, not only "
                         + " and ".join(THROUGHPUT))
    a = ap.parse_args()
    import logging

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from kernelwright.evaluators import EvalPolicy, Evaluator, load_problem

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    log = open(out / "kb_gpu_eval.jsonl", "a")
    rows: list[dict] = []

    def emit(row: dict) -> None:
        rows.append(row)
        log.write(json.dumps(row, default=str) + "\n")
        log.flush()
        print(f"{row['name']}: {row['verdict']} {row['reason']} wall {row['wall_s']:.1f}s "
              f"t={row.get('median_ms')} suspect={row.get('suspect')} {row['detail'][:160]}", flush=True)

    kernels = sorted((REPO / "bench" / "kernelbench").glob("level*/*_triton.py"))
    for cand in kernels:
        stem = cand.name.removesuffix("_triton.py")
        if a.only and stem not in a.only:
            continue
        prob = Path(a.kb) / cand.parent.name / f"{stem}.py"
        if not prob.exists():
            continue
        problem = load_problem(prob)
        source = cand.read_text()
        t0 = time.monotonic()
        warm = a.warm_all or stem in THROUGHPUT
        with Evaluator(problem, "cuda", EvalPolicy(spares=3 if warm else 1)) as ev:
            r = ev.evaluate(source)
            emit(_row(f"{cand.parent.name}/{stem} (cold)", r, time.monotonic() - t0))
            if warm and r.passed:
                walls = []
                for k in range(a.repeat):
                    t1 = time.monotonic()
                    r = ev.evaluate(source)
                    walls.append(time.monotonic() - t1)
                    emit(_row(f"{cand.parent.name}/{stem} (warm {k + 1})", r, walls[-1]))
                mean = statistics.fmean(walls)
                rows.append({"name": f"{stem} throughput", "verdict": "-", "reason": "-", "wall_s": mean,
                             "per_gpu_minute": 60 / mean, "walls": walls, "detail": ""})
                log.write(json.dumps(rows[-1]) + "\n")
                print(f"{stem}: {60 / mean:.1f} verified and timed candidates per GPU-minute "
                      f"(walls {', '.join(f'{w:.1f}' for w in walls)} s)", flush=True)
    if not a.skip_hangs:
        adv = REPO / "tests" / "adversarial"
        relu = load_problem(adv / "problems" / "relu.py")
        with Evaluator(relu, "cuda", EvalPolicy(trials=1, timing=False, spares=1)) as ev:
            for name in ("c24_hang_forward", "c24_hang_kernel", "honest_relu"):
                t0 = time.monotonic()
                r = ev.evaluate((adv / "candidates" / f"{name}.py").read_text())
                emit(_row(name, r, time.monotonic() - t0))
    print("\n| kernel | verdict | wall s | median ms | eager ms | compile ms | floor ms | suspect | sets | "
          "trusted GB | worker GB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        if "per_gpu_minute" in row:
            print(f"| {row['name']} | | {row['wall_s']:.1f} mean | {row['per_gpu_minute']:.1f} per GPU-minute | | | | | | | |")
            continue
        f = lambda x: "-" if x is None else f"{x:.4g}"  # noqa: E731
        print(f"| {row['name']} | {row['verdict']} {row['reason']} | {row['wall_s']:.1f} | {f(row['median_ms'])} | "
              f"{f(row['eager_ms'])} | {f(row['compile_ms'])} | {f(row['floor_ms'])} | {row['suspect']} | "
              f"{row['timing_sets']} | {row['trusted_peak_gb']:.1f} | {row['worker_peak_gb']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
