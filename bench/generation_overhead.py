"""The driver's time between two generations, while every GPU waits: `select` and the branches' inputs
(`branch_inputs`: each branch's lineage, its gains by move kind, its inspirations), on a real run's archives.

    python bench/generation_overhead.py [RUN_TGZ] [--branches 16,32]

RUN_TGZ is a run directory's `archive/`, `kernels/`, `run.json` and `problem.py` packed (by default the
two-H200 `optimize` run of 40_LayerNorm, 16 branches, 48 children: `bench/results/scale/h200x2/opt-n-run.tgz`).
For each branch count, the generations are planned in order in one process, as a run does: once with each
kernel's knobs read once (`moves.knobs`, remembered by source) and once read again by every caller (as before
2026-11-26). Prints a table of seconds per generation.
"""

from __future__ import annotations

import argparse
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernelwright.agents import moves, roles  # noqa: E402
from kernelwright.agents.context import RunConfig  # noqa: E402
from kernelwright.tools.runstore import Run  # noqa: E402

DEFAULT = ROOT / "bench" / "results" / "scale" / "h200x2" / "opt-n-run.tgz"


class _Context:
    """What `select` and `branch_inputs` read of a run's context: its config and its directory."""

    def __init__(self, config: RunConfig, run: Run) -> None:
        self.config, self.run = config, run


def plan(run: Run, branches: int, versions: list[int]) -> list[float]:
    """Seconds to plan each generation after the archive `versions`, in order, in this process."""
    ctx = _Context(RunConfig(device="cuda:0,cuda:1", branches=branches, iterations=10 ** 6), run)
    out = []
    for v in versions:
        state = {"archive": {"version": v}, "generation": v}
        t0 = time.perf_counter()
        chosen = roles.select(state, ctx)  # type: ignore[arg-type]
        inputs = roles.branch_inputs({**state, **chosen}, ctx)  # type: ignore[arg-type]
        out.append(time.perf_counter() - t0)
        assert len(inputs) == branches
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("run", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--branches", default="16,32")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kw-genplan-") as tmp:
        with tarfile.open(a.run) as t:
            t.extractall(tmp, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        run = Run(Path(tmp))
        versions = sorted(int(p.stem) for p in (Path(tmp) / "archive").glob("*.json"))
        cached = moves._knobs
        rows = []
        for n in (int(b) for b in a.branches.split(",")):
            for mode in ("read again", "read once"):
                moves._knobs = cached.__wrapped__ if mode == "read again" else cached  # type: ignore[assignment]
                cached.cache_clear()
                try:
                    rows.append((n, mode, plan(run, n, versions)))
                finally:
                    moves._knobs = cached
    print(f"archive versions {versions} of {a.run}")
    print("| branches | knobs | " + " | ".join(f"after generation {v}, s" for v in versions) + " |")
    print("| ---: | --- |" + " ---: |" * len(versions))
    for n, mode, secs in rows:
        print(f"| {n} | {mode} | " + " | ".join(f"{s:.2f}" for s in secs) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
