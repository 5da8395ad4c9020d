"""What a review point costs in a real run: the same problem and seed, once unattended and once with
`review: proposals` and a reviewer that answers at once (a thread on the run's review desk: approve, edit,
reject, approve, ...), both with the builtin policy. Prints per run the wall time, the steps, and for the
reviewed run how long each pause took from the proposal being posted to the decision being read back by
the driver, and from the decision to the step's record.

    python3 bench/review_gpu.py PROBLEM SEED [--device cuda] [--iterations 4] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from kernelwright import api


def reviewer(run_id: str, runs: Path, stop: threading.Event, log: list[dict]) -> None:
    plan = ["approve", "edit", "reject", "approve"]
    seen: set[str] = set()
    while not stop.is_set():
        for p in api.pending_reviews(run_id, runs_dir=runs):
            if p.step_id in seen:
                continue
            seen.add(p.step_id)
            d = plan[(len(seen) - 1) % len(plan)]
            kw: dict = {}
            if d == "edit":
                kw["proposal"] = {**(p.proposal or {}), "why": "edited by the benchmark's reviewer"}
            if d == "reject":
                kw["message"] = "rejected by the benchmark's reviewer"
            t = time.time()
            api.review(run_id, d, step_id=p.step_id, runs_dir=runs, by="bench", **kw)
            log.append({"step_id": p.step_id, "decision": d, "seen_at": t, "posted": p.since})
        time.sleep(0.05)


def one(problem: str, seed: str, device: str, iterations: int, review: str, runs: Path) -> dict:
    cfg = api.RunConfig(device=device, iterations=iterations, branches=1, review=review, profile="torch")
    t0 = time.time()
    log: list[dict] = []
    with api.start_run(problem, seed_kernel=seed, config=cfg, runs_dir=runs) as h:
        stop = threading.Event()
        th = threading.Thread(target=reviewer, args=(h.id, runs, stop, log), daemon=True)
        if review != "none":
            th.start()
        records = []
        for s in h.steps():
            records.append((time.time(), s))
        stop.set()
        info = h.info()
    wall = time.time() - t0
    out = {"review": review, "run": info.id, "status": info.status, "stop": info.stop_reason, "wall_s": round(wall, 1),
           "steps": len(records), "best_speedup_vs_eager": info.best_speedup,
           "verify_s": [round(s.verify_s or 0, 2) for _, s in records],
           "step_ids": [s.step_id for _, s in records],
           "decisions": [s.review.decision if s.review else None for _, s in records]}
    if log:
        at = {s.step_id: t for t, s in records}
        out["decision_to_record_s"] = [round(at[x["step_id"]] - x["seen_at"], 2) for x in log if x["step_id"] in at]
        # what the pause itself adds: decision -> record, less the verification the step ran anyway
        vs = {s.step_id: s.verify_s or 0.0 for _, s in records}
        out["pause_overhead_s"] = [round(at[x["step_id"]] - x["seen_at"] - vs[x["step_id"]], 2)
                                   for x in log if x["step_id"] in at]
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("problem")
    ap.add_argument("seed")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--out", default=None)
    ap.add_argument("--order", default="none,proposals", help="which run goes first (the first pays the cold start)")
    a = ap.parse_args()
    runs = Path(tempfile.mkdtemp(prefix="kw-review-bench-"))
    rows = [one(a.problem, a.seed, a.device, a.iterations, mode, runs) for mode in a.order.split(",")]
    for r in rows:
        print(json.dumps(r))
    print(f"\n{'review':<10} {'status':<9} {'steps':>5} {'wall s':>7} {'wall/step s':>11} {'verify s (mean)':>15} "
          f"{'decision->record s (mean)':>26} {'pause overhead s (median)':>26}")
    for r in rows:
        d2r = r.get("decision_to_record_s")
        print(f"{r['review']:<10} {r['status']:<9} {r['steps']:>5} {r['wall_s']:>7} "
              f"{r['wall_s'] / max(1, r['steps']):>11.1f} {statistics.fmean(r['verify_s'] or [0]):>15.2f} "
              f"{(statistics.fmean(d2r) if d2r else float('nan')):>26.2f} "
              f"{(statistics.median(r['pause_overhead_s']) if d2r else float('nan')):>26.2f}")
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        (Path(a.out) / "review_gpu.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
