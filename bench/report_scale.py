"""How `kernelwright report` scales with a run's length: a real run's steps replicated into an overnight-sized
trace (each copy a new generation, its children new kernels with the copied evaluations), then the page
built and its time and size printed.

    python bench/report_scale.py RUNS_DIR RUN_ID [--steps 100,1000,3000]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from kernelwright.report import write_report
from kernelwright.tools.runstore import RunStore


def grow(src: Path, dst: Path, steps: int) -> None:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("checkpoints.sqlite", "report.html"))
    records = [json.loads(x) for x in (src / "trace.jsonl").read_text().splitlines() if x.strip()]
    gens = max(r["generation"] for r in records)
    out = []
    for i in range(steps):
        r = dict(records[i % len(records)])
        copy = i // len(records)
        if copy and r["child"]:
            child = f"{copy:04x}{r['child'][4:]}"
            for kind in ("kernels", "evals"):
                ext = ".py" if kind == "kernels" else ".json"
                if (src / kind / f"{r['child']}{ext}").exists() and not (dst / kind / f"{child}{ext}").exists():
                    shutil.copy(src / kind / f"{r['child']}{ext}", dst / kind / f"{child}{ext}")
            r["child"] = child
        r["step"], r["generation"] = i, r["generation"] + copy * gens
        r["step_id"] = f"g{r['generation']}b{r['branch']}"
        out.append(json.dumps(r))
    (dst / "trace.jsonl").write_text("\n".join(out) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("runs")
    ap.add_argument("run_id")
    ap.add_argument("--steps", default="100,1000,3000")
    a = ap.parse_args()
    src = Path(a.runs) / a.run_id
    print(f"{'steps':>6} {'build s':>8} {'page MB':>8}")
    for n in (int(x) for x in a.steps.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            grow(src, Path(tmp) / a.run_id, n)
            run = RunStore(tmp).open(a.run_id)
            t0 = time.perf_counter()
            page = write_report(run)
            dt = time.perf_counter() - t0
            print(f"{n:>6} {dt:>8.2f} {page.stat().st_size / 1e6:>8.2f}")


if __name__ == "__main__":
    main()
