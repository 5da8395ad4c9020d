"""How an honest kernel's error compares with PyTorch's own on each trial (issue 8's false rejection).

    python3 bench/tolerance_probe.py PROBLEM KERNEL [--repeat 6] [--device cuda]

Evaluates KERNEL `--repeat` times in one evaluator (the loop's conditions) and prints, per trial, the family,
the kernel's worst relative error, PyTorch's own error on the same inputs (where measured) and the tolerance
it was judged with; then each evaluation's verdict. A ratio kernel/PyTorch near or above the calibration
margin on a family shows where a tolerance calibrated on PyTorch's error is too tight for honest kernels.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kernelwright.evaluators import EvalPolicy, Evaluator, load_problem  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("problem")
    ap.add_argument("kernel")
    ap.add_argument("--repeat", type=int, default=6)
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    src = Path(a.kernel).read_text()
    rows = []
    with Evaluator(load_problem(a.problem), a.device, EvalPolicy(trials=5, timing=False)) as ev:
        for k in range(a.repeat):
            t0 = time.monotonic()
            r = ev.evaluate(src)
            wall = time.monotonic() - t0
            print(f"evaluation {k + 1}: {r.verdict} {r.reason} in {wall:.1f} s; {r.detail[-300:]}", flush=True)
            for t in r.trials:
                ratio = t.max_rel_error / t.reference_error if t.reference_error else None
                rows.append((k + 1, t.family, t.trial, t.max_rel_error, t.reference_error, t.tolerance, ratio))
    print("\n| eval | family | trial | kernel error | PyTorch error | tolerance | kernel / PyTorch |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for k, fam, i, e, re_, tol, ratio in rows:
        f = (lambda x: "-" if x is None else f"{x:.3g}")
        print(f"| {k} | {fam} | {i} | {f(e)} | {f(re_)} | {f(tol)} | {f(ratio)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
