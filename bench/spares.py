"""Spare workers per device against branches per generation: how long candidates wait for a fresh worker.

    python bench/spares.py [--device cpu] [--branches 4] [--iterations 12] [--spares 1,0] [--problem P --seed S]

Runs `optimize` (builtin policy, `--profile off`) once per `--spares` value (0: the default, one spare per branch
a device takes in a generation) on the same problem and prints, per value: wall seconds, children judged per
minute, and from the run's verdicts the mean seconds an evaluation waited for its worker (`worker_wait_s`) and
spent in the worker's start-up (`worker_startup_s`). On the CPU the candidates run in Triton's interpreter: the
wall and the waits are real, the kernels' timings are not measured.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from multi_gpu import where_time_goes  # noqa: E402

from kernelwright import api  # noqa: E402


def one(problem: Path, seed: Path, device: str, branches: int, iterations: int, spares: int, runs: Path) -> dict:
    config = api.RunConfig(device=device, branches=branches, iterations=iterations, trials=1, profile="off",
                           spares=spares)
    t0 = time.monotonic()
    with api.start_run(problem, seed_kernel=seed, config=config, runs_dir=runs) as handle:
        info = handle.run_to_end()
        run_dir = handle.path
    wall = time.monotonic() - t0
    steps = [json.loads(x) for x in (run_dir / "trace.jsonl").read_text().splitlines()]
    judged = [s for s in steps if s.get("verdict")]
    where = where_time_goes(run_dir, judged)

    def mean(key: str) -> float | None:
        v = where["phases_mean_s"].get(key)
        return None if v is None else round(v, 2)

    return {"spares": spares or config.spares_per_device(), "asked": spares, "status": info.status,
            "wall_s": round(wall, 1), "judged": len(judged), "per_min": round(len(judged) / (wall / 60), 2),
            "verify_s_mean": where["verify_s"]["mean"], "worker_wait_s_mean": mean("worker_wait_s"),
            "worker_startup_s_mean": mean("worker_startup_s"), "evaluations": where["evaluations"]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problem", type=Path, default=ROOT / "examples" / "softmax" / "problem.py")
    ap.add_argument("--seed", type=Path, default=ROOT / "examples" / "softmax" / "seed.py")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--branches", type=int, default=4)
    ap.add_argument("--iterations", type=int, default=12)
    ap.add_argument("--spares", default="1,0", help="values to compare; 0 is the default (one per branch)")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in (int(x) for x in a.spares.split(",")):
            row = one(a.problem, a.seed, a.device, a.branches, a.iterations, k, Path(tmp) / f"runs{k}")
            print(json.dumps(row), flush=True)
            rows.append(row)
    print(f"\n{a.problem.name}, --device {a.device}, {a.branches} branches, {a.iterations} children")
    print("| spares per device | wall s | judged | judged per minute | verification s (mean) | worker wait s (mean) | worker start-up s (mean) |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['spares']}{' (default)' if r['asked'] == 0 else ''} | {r['wall_s']} | {r['judged']} | "
              f"{r['per_min']} | {r['verify_s_mean']} | {r['worker_wait_s_mean']} | {r['worker_startup_s_mean']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
