"""Orchestration overhead and checkpoint size per step of the optimization loop (issue 4), on the CPU.

    python bench/loop_overhead.py [--steps 200]

Drives the real graph (SQLite checkpoints, run store, trace) with a scripted chat model for every role:
each step the analyst answers a Diagnosis, the strategist a Proposal, and the coder writes a distinct
variant of the seed, quick-checks it and finishes; the verifier then judges it (the add problem, 1 trial
per family, so evaluation is short). Overhead per step = (wall time - time inside evaluations) / steps;
the scripted model answers instantly, so its time is counted as overhead (an upper bound).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "agents"))

from scripted import Scripted, call  # noqa: E402

from kernelwright import api  # noqa: E402

PROBLEM = ROOT / "tests" / "graphs" / "add_problem.py"
SEED = ROOT / "tests" / "graphs" / "add_seed.py"


def script(steps: int) -> list:
    seed = SEED.read_text()
    msgs = []
    for i in range(steps):
        msgs += [
            call("Diagnosis", {"bottleneck": "memory", "evidence": ["no GPU timing (CPU mode)"], "headroom": None,
                               "summary": "Elementwise add: bandwidth-bound."}, 5 * i),
            call("Proposal", {"category": "other", "what": f"variant {i}", "why": "benchmark step",
                              "predicted_speedup": 1.01, "risk": "low", "key": f"variant-{i}"}, 5 * i + 1),
            call("write_kernel", {"source": seed + f"\n# variant {i}\n"}, 5 * i + 2),
            call("quick_check", {}, 5 * i + 3),
            call("finish", {}, 5 * i + 4),
        ]
    return msgs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    args = ap.parse_args()
    # On the CPU nothing is timed, so no child is ever admitted and the plateau rule would stop the run
    # after 20 steps; this measurement needs all of them.
    config = api.RunConfig(model="scripted:bench", iterations=args.steps, branches=1, device="cpu", trials=1,
                           plateau_steps=10 ** 9, roofline_target=None)
    run_dir = Path(tempfile.mkdtemp(prefix="kw-loop-"))
    t0 = time.time()
    with api.start_run(PROBLEM, seed_kernel=SEED, config=config, runs_dir=run_dir,
                       models={"scripted:bench": Scripted(script=script(args.steps))}) as handle:
        info = handle.run_to_end()
    wall = time.time() - t0
    run = handle.run
    trace = run.trace()
    evals = [json.loads(p.read_text()) for p in (run.path / "evals").glob("*.json")]
    eval_s = sum(e.get("phases", {}).get("total_s", 0.0) for e in evals)
    steps = len(trace)
    db = run.checkpoint_path
    conn = sqlite3.connect(str(db))
    n_ckpt, ckpt_bytes = conn.execute("select count(*), sum(length(checkpoint)) + sum(length(metadata)) "
                                      "from checkpoints").fetchone()
    writes = conn.execute("select count(*), sum(length(value)) from writes").fetchone()
    conn.close()
    last = sqlite3.connect(str(db))
    last_ckpt = last.execute("select length(checkpoint) from checkpoints order by rowid desc limit 1").fetchone()[0]
    last.close()
    out = {
        "steps": steps, "status": info.status, "stop": info.stop_reason, "wall_s": wall,
        "evaluations": len(evals), "evaluation_s": eval_s,
        "overhead_per_step_ms": (wall - eval_s) / steps * 1e3,
        "sqlite_bytes": db.stat().st_size, "sqlite_bytes_per_step": db.stat().st_size / steps,
        "checkpoints": n_ckpt, "checkpoint_and_metadata_bytes": ckpt_bytes, "writes": writes[0],
        "write_bytes": writes[1], "last_checkpoint_bytes": last_ckpt,
        "trace_bytes_per_step": (run.path / "trace.jsonl").stat().st_size / steps,
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
