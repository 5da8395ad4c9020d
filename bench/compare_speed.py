"""Speed of `compare` (the tolerance check on a candidate's output): torch slices vs the fused Triton passes.

    python bench/compare_speed.py [--n 1600000000] [--reps 5] [--tol 1e-4]

Builds an fp32 output of N elements and a float64 gold with small relative noise (1e-6) on the GPU,
times `compare(out, gold, tol, fused=False)` and `compare(..., fused=True)` (one untimed warm-up each,
then --reps timed runs with torch.cuda.synchronize around each; the median is reported), checks that both
give the same verdict and max_rel / norm_rel within 1e-9 relative, then makes the last element wrong and
checks both fail with the same report. GB/s counts what one comparison must read: out and gold, once per pass
(2 passes), i.e. 2 * N * (4 + 8) bytes over the median time.

N defaults to 1.6e9 (6.4 GB output + 12.8 GB gold), reduced to what fits in free GPU memory. Without a GPU
it runs on the CPU with TRITON_INTERPRET=1 (set here before triton is imported) and N = 100000 by default:
a check that the script works, not a measurement.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path

import torch

CUDA = torch.cuda.is_available()
if not CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernelwright.evaluators.compare import compare  # noqa: E402

GEN_CHUNK = 1 << 26


def build(n: int, device: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator(device=device).manual_seed(seed)
    gold = torch.empty(n, dtype=torch.float64, device=device)
    gold.normal_(generator=g)
    out = torch.empty(n, dtype=torch.float32, device=device)
    for i in range(0, n, GEN_CHUNK):
        gc = gold[i:i + GEN_CHUNK]
        noise = torch.randn(gc.numel(), generator=g, dtype=torch.float64, device=device)
        out[i:i + GEN_CHUNK] = (gc * noise.mul_(1e-6).add_(1.0)).float()
        del noise
    return out, gold


def sync() -> None:
    if CUDA:
        torch.cuda.synchronize()


def timed(fn, reps: int) -> tuple[float, object]:
    result = fn()  # warm-up: compiles the kernels on the first fused call
    times = []
    for _ in range(reps):
        sync()
        t = time.perf_counter()
        result = fn()
        sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times), result


def close(a: float, b: float, rel: float = 1e-9) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b or math.isclose(a, b, rel_tol=rel, abs_tol=0.0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=float, default=None, help="elements (default 1.6e9 on a GPU, 1e5 on the CPU)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tol", type=float, default=1e-4)
    args = ap.parse_args()
    device = "cuda" if CUDA else "cpu"
    n = int(args.n) if args.n else (1_600_000_000 if CUDA else 100_000)
    note = ""
    if CUDA:
        free, _ = torch.cuda.mem_get_info()
        # out (4 B) + gold (8 B) per element, plus ~4 GiB for the torch path's slices and the generator's.
        fits = int((free - (4 << 30)) // 12)
        if n > fits:
            note = f" (asked for {n:.3g}, reduced to fit {free / 2**30:.1f} GiB free)"
            n = max(fits, 1)
    out, gold = build(n, device)
    nbytes = 2 * n * (out.element_size() + gold.element_size())

    rows = []
    results = {}
    for name, fused in (("torch slices (fused=False)", False), ("fused Triton (fused=True)", True)):
        t, c = timed(lambda fused=fused: compare(out, gold, args.tol, "bench", fused=fused), args.reps)
        results[fused] = c
        rows.append((name, t, nbytes / t / 1e9, c))

    a, b = results[False], results[True]
    same = (a.ok == b.ok and a.reason == b.reason and close(a.max_rel, b.max_rel) and close(a.norm_rel, b.norm_rel))

    # One bad element, the last (past 2^31 when N is: int64 offsets): both fail, with the same count, worst
    # error and locations (pass 3 is torch in both).
    j = n - 1
    saved = out[j].clone()
    out[j] += 1.0
    fa = compare(out, gold, args.tol, "bench", fused=False)
    fb = compare(out, gold, args.tol, "bench", fused=True)
    out[j] = saved
    same_fail = (not fa.ok and not fb.ok and fa.reason == fb.reason and close(fa.max_rel, fb.max_rel)
                 and fa.detail == fb.detail)

    dev_name = torch.cuda.get_device_name() if CUDA else "CPU (TRITON_INTERPRET=1, not a measurement)"
    print(f"compare() on {dev_name}: fp32 output vs float64 gold, N = {n:,} elements{note}, "
          f"{args.reps} reps, median")
    print()
    print("| path | median s | GB/s (2 passes x (out + gold)) | ok | max_rel | norm_rel |")
    print("|---|---:|---:|---|---:|---:|")
    for name, t, gbs, c in rows:
        print(f"| {name} | {t:.4f} | {gbs:.3g} | {c.ok} | {c.max_rel:.6g} | {c.norm_rel:.6g} |")
    print()
    print(f"speed-up: {rows[0][1] / rows[1][1]:.1f}x; same verdict and max_rel/norm_rel within 1e-9: {same}; "
          f"one bad element, same failure report: {same_fail}")
    if not same:
        print(f"MISMATCH: torch {a}\n          fused {b}")
    if not same_fail:
        print(f"MISMATCH on failure: torch {fa}\n                      fused {fb}")
    return 0 if same and same_fail else 1


if __name__ == "__main__":
    sys.exit(main())
