"""GPU check of the evidence in bytes and limits (issue 23, item 1), for a GPU host with Nsight Compute.

    python bench/evidence_bytes_check.py [--problem examples/softmax/problem.py --candidate examples/softmax/seed.py]

Profiles one honest kernel through the evaluation service with Nsight Compute (`Evaluator.profile(ncu=True)`,
the path `kernelwright profile --ncu` and the loop's evidence take), prints the rendered profile the roles
see and the parsed figures, and checks on real hardware what the CPU tests can only check on recorded text:
that ncu returns the new metrics (DRAM and L2 bytes read and written, the occupancy limits) under the names
asked for, in units that parse to sensible magnitudes (L2 traffic within a wide factor of the bytes the
launch's tensor arguments span, so a sector or unit scale off by 32x or 1000x shows), and that the launch
recorder's estimate and the roofline's bandwidth reach the profile. Exits 1 with one sentence otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

NEEDED = ("dram_read_bytes", "dram_write_bytes", "l2_read_bytes", "l2_write_bytes", "occupancy_limit_registers",
          "occupancy_limit_shared_mem", "occupancy_limit_warps", "occupancy_limit_blocks",
          "theoretical_occupancy_pct", "achieved_occupancy_pct")
L2_RATIO = (0.25, 8.0)
"""L2 bytes read + written over the launch's argument bytes: outside this, a unit is surely misread."""


def fail(sentence: str) -> None:
    print(f"FAIL: {sentence}")
    raise SystemExit(1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problem", type=Path, default=ROOT / "examples" / "softmax" / "problem.py")
    ap.add_argument("--candidate", type=Path, default=ROOT / "examples" / "softmax" / "seed.py")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()

    import torch

    from kernelwright.evaluators import EvalPolicy, Evaluator, load_problem
    from kernelwright.evaluators.profiling import ncu_unavailable_reason, occupancy_limiter

    if not torch.cuda.is_available():
        fail("no CUDA GPU is visible, and this check needs one with Nsight Compute.")
    why = ncu_unavailable_reason()
    if why:
        fail(f"Nsight Compute cannot run here: {why}.")
    with Evaluator(load_problem(args.problem), args.device, EvalPolicy(trials=1, compile_mode=None)) as ev:
        result = ev.evaluate(args.candidate.read_text())
        if not result.passed:
            fail(f"the candidate did not verify ({result.reason}: {result.detail[:200]}), so nothing was profiled.")
        prof = ev.profile(args.candidate.read_text(), ncu=True, result=result)
    print(f"== rendered profile ({len(prof.text)} characters) ==\n{prof.text}\n")
    print("== launch records ==")
    print(json.dumps([k.model_dump() for k in result.kernels], indent=1))
    t = result.timing
    print(f"timing: median {t.median_ms if t else None} ms, floor {t.floor_ms if t else None} ms, problem bytes "
          f"{t.bytes if t else None}, bandwidth {t.bandwidth if t else None} B/s, compute floor "
          f"{t.compute_floor_ms if t else None} ms")
    if not prof.ncu.available:
        fail(f"Nsight Compute returned nothing: {prof.ncu.why}")
    print("== Nsight Compute, parsed ==")
    for k in prof.ncu.kernels:
        print(k.name[:60], json.dumps(k.metrics, sort_keys=True))
    if t is None or not t.bandwidth:
        fail("the verified kernel's timing carries no roofline bandwidth, so the bytes' times cannot be shown.")
    estimated = {k.name: k for k in result.kernels}
    for k in prof.ncu.kernels:
        missing = [name for name in NEEDED if name not in k.metrics]
        if missing:
            fail(f"Nsight Compute returned no {', '.join(missing)} for {k.name[:60]}: the metric names or units "
                 "need a look (see the parsed figures above).")
        named = max((name for name in estimated if k.name.startswith(name)), key=len, default=None)
        own = estimated[named] if named is not None else None
        if own is None or not own.arg_bytes_per_forward or not own.launches_per_forward:
            fail(f"the launch recorder left no argument bytes for {k.name[:60]}.")
        per_launch = own.arg_bytes_per_forward / own.launches_per_forward
        l2 = k.metrics["l2_read_bytes"] + k.metrics["l2_write_bytes"]
        dram = k.metrics["dram_read_bytes"] + k.metrics["dram_write_bytes"]
        ratio = l2 / per_launch
        print(f"{k.name[:40]}: arguments {per_launch / 1e6:.2f} MB per launch; L2 {l2 / 1e6:.2f} MB ({ratio:.2f}x); "
              f"DRAM {dram / 1e6:.2f} MB ({dram / per_launch:.2f}x); limiter {occupancy_limiter(k.metrics)}")
        if not L2_RATIO[0] <= ratio <= L2_RATIO[1]:
            fail(f"{k.name[:60]} moved {ratio:.2f}x its arguments' bytes through L2, outside {L2_RATIO}: a unit "
                 "or the sector size is misread.")
    for line in ("bytes per forward:", "structure:", "bound by"):
        if line not in prof.text:
            fail(f"the rendered profile has no '{line}' line.")
    print("OK: Nsight Compute's bytes and occupancy limits parse and render on this GPU.")


if __name__ == "__main__":
    main()
