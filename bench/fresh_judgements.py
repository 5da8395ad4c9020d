"""How often does a kernel pass a fresh judgement? The verifier draws its inputs at random from a secret seed, so a
numerically fragile kernel passes some batteries and fails others; one pass says little about it. This judges each
kernel N times on one evaluator (every evaluation draws its own inputs) and prints each verdict with its worst error.

    python bench/fresh_judgements.py PROBLEM KERNEL [KERNEL ...] [--times N] [--device cuda] [--precision P]
        [--compile-mode max-autotune]

Each line also gives the kernel's median against eager and against torch.compile in the mode asked for, all three
measured in the same evaluation.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from kernelwright.evaluators import EvalPolicy, Evaluator, Precision, load_problem


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("problem")
    ap.add_argument("kernels", nargs="+")
    ap.add_argument("--times", type=int, default=4)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--precision", default=None)
    ap.add_argument("--compile-mode", default="default", choices=["default", "max-autotune", "none"])
    args = ap.parse_args()
    policy = EvalPolicy(compile_mode=None if args.compile_mode == "none" else args.compile_mode,
                        **({"precision": Precision(args.precision)} if args.precision else {}))
    ev = Evaluator(load_problem(args.problem), args.device, policy)
    rows = []
    try:
        for path in args.kernels:
            source = Path(path).read_text()
            for i in range(args.times):
                t0 = time.monotonic()
                r = ev.evaluate(source)
                worst = f"{r.max_rel_error:.3g}" if r.max_rel_error is not None else "-"
                ms = f"{r.timing.median_ms:.4f}" if r.timing else "-"
                if r.timing:
                    ms += f" ({r.timing.speedup_vs_eager:.2f}x eager"
                    ms += f", {r.timing.speedup_vs_compile:.2f}x compile {r.timing.compile_mode}, compile " \
                          f"{r.timing.compile_ms:.4g} ms)" if r.timing.speedup_vs_compile else ")"
                rows.append((Path(path).name, i + 1, r.verdict, r.reason, worst, ms, time.monotonic() - t0))
                print(f"{Path(path).name} #{i + 1}: {r.verdict} {r.reason} worst {worst} median {ms} ms "
                      f"({time.monotonic() - t0:.0f} s) {'' if r.verdict == 'pass' else r.detail[:160]}", flush=True)
    finally:
        ev.close()
    print(f"\n{'kernel':28} {'passed':>8}")
    for name in dict.fromkeys(r[0] for r in rows):
        mine = [r for r in rows if r[0] == name]
        print(f"{name:28} {sum(r[2] == 'pass' for r in mine):>4} / {len(mine)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
