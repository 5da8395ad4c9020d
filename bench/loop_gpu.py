"""The optimization loop on a GPU (issue 4): the builtin policy on every example, a fixed budget each.

    python bench/loop_gpu.py [--iterations 8] [--branches 2] [--names softmax,layernorm] [--out DIR]

For each example: `run_optimize` with the builtin policy from the example's seed kernel on cuda, then from
the run directory: the seed's and the best kernel's medians, eager and torch.compile, the best kernel's
fraction of the roofline floor, how many kernels the verifier judged and how many passed, the archive's
stop reason and the wall time. Prints a table at the end and writes loop.json under --out.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpu_bench import _f  # noqa: E402  (the table cell formatter; bench/ is on sys.path as the script's folder)
from kernelwright import api  # noqa: E402
from kernelwright.evaluators import EvalResult  # noqa: E402


def one(name: str, iterations: int, branches: int, run_dir: Path, device: str) -> dict:
    ex = ROOT / "examples" / name
    t0 = time.time()
    config = api.RunConfig(iterations=iterations, branches=branches, device=device, trials=5)
    with api.start_run(ex / "problem.py", seed_kernel=ex / "seed.py", config=config, runs_dir=run_dir) as handle:
        info = handle.run_to_end()
    wall = time.time() - t0
    view = api.open_run(info.id, run_dir)
    evals = {p.stem: EvalResult.model_validate_json(p.read_text()) for p in (view.run.path / "evals").glob("*.json")}
    seed = evals.get(info.config.seed_kernel or "")
    best = view.best()
    seed_t = seed.timing if seed else None
    best_t = best.result.timing if best and best.result else None
    med = best_t.median_ms if best_t else None
    return {
        "name": name, "run_id": info.id, "status": info.status, "stop": info.stop_reason,
        "steps": len(view.steps()), "evaluations": len(evals), "passed": sum(e.passed for e in evals.values()),
        "timed": sum(e.timing is not None for e in evals.values()),
        "seed_ms": seed_t.median_ms if seed_t else None, "best_ms": med,
        "eager_ms": best_t.eager_ms if best_t else None, "compile_ms": best_t.compile_ms if best_t else None,
        "floor_ms": best_t.floor_ms if best_t else None,
        "fraction_of_floor": best_t.fraction_of_floor if best_t else None,
        "noise_band": best_t.noise_band if best_t else None,
        "speedup_vs_seed": seed_t.median_ms / med if med and seed_t else None,
        "speedup_vs_eager": best_t.speedup_vs_eager if best_t else None,
        "speedup_vs_compile": best_t.speedup_vs_compile if best_t else None,
        "best_kernel": str(best.path) if best else None, "wall_s": wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=8, help="steps (children judged) per example")
    ap.add_argument("--branches", type=int, default=2)
    ap.add_argument("--names", default="softmax,layernorm,matmul_gelu")
    ap.add_argument("--out", default="/tmp/kw-loop")
    ap.add_argument("--run-dir", default=None)
    ap.add_argument("--device", default="cuda", help="cuda (the figures) or cpu (a check of this script)")
    args = ap.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    run_dir = Path(args.run_dir) if args.run_dir else out_dir / "runs"
    out = {"device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu", "torch": torch.__version__, "triton": triton.__version__,
           "iterations": args.iterations, "branches": args.branches, "when": time.strftime("%Y-%m-%d %H:%M:%S"),
           "rows": []}
    for name in args.names.split(","):
        try:
            row = one(name, args.iterations, args.branches, run_dir, args.device)
        except Exception as e:  # noqa: BLE001 - one example's failure must not lose the others' figures
            row = {"name": name, "error": f"{type(e).__name__}: {e}"[:300]}
        out["rows"].append(row)
        (out_dir / "loop.json").write_text(json.dumps(out, indent=1, default=str))
        print(f"  {name}: {row.get('best_ms')} ms after {row.get('evaluations')} evaluations, "
              f"{row.get('wall_s', 0):.0f} s", flush=True)
    print(f"\n{out['device']}  torch {out['torch']}  triton {out['triton']}  "
          f"{args.iterations} steps, {args.branches} branches per generation  {out['when']}")
    print(f"{'example':12s} {'seed':>9s} {'best':>9s} {'eager':>9s} {'compile':>9s} {'xseed':>6s} {'xeager':>6s} "
          f"{'xcomp':>6s} {'floor':>6s} {'evals':>5s} {'pass':>4s} stop")
    for r in out["rows"]:
        if "error" in r:
            print(f"{r['name']:12s} ERROR {r['error']}")
            continue
        print(f"{r['name']:12s} {_f(r['seed_ms'])!s:>9s} {_f(r['best_ms'])!s:>9s} {_f(r['eager_ms'])!s:>9s} "
              f"{_f(r['compile_ms'])!s:>9s} {_f(r['speedup_vs_seed'], '{:.2f}')!s:>6s} "
              f"{_f(r['speedup_vs_eager'], '{:.2f}')!s:>6s} {_f(r['speedup_vs_compile'], '{:.2f}')!s:>6s} "
              f"{_f(r['fraction_of_floor'], '{:.0%}')!s:>6s} {r['evaluations']:5d} {r['passed']:4d} {r['stop']}")


if __name__ == "__main__":
    main()
