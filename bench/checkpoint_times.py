"""When each step of a run's graph ended, from its SQLite checkpoints (LangGraph's checkpoint ids are
time-ordered UUIDs, version 6): the seconds from the run's start to each top-level checkpoint, and between
generations the time the driver spent planning the next one (after `archive`, until `select` and its fan-out
were written) while every device waited.

    python bench/checkpoint_times.py RUN_DIR [RUN_DIR ...]

Top-level steps: 0 the input, 1 the seed, 2 select; then per generation the branches, archive, select (3, 4, 5;
6, 7, 8; ...). Planning is the time from an archive step to the next select.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import uuid
from pathlib import Path

_GREGORIAN = 0x01B21DD213814000  # 100 ns ticks from 1582-10-15 to 1970-01-01


def seconds(checkpoint_id: str) -> float:
    """The Unix time a version-6 UUID carries."""
    u = uuid.UUID(checkpoint_id).int
    ticks = ((u >> 96) << 28) | (((u >> 80) & 0xFFFF) << 12) | ((u >> 64) & 0x0FFF)
    return (ticks - _GREGORIAN) / 1e7


def steps(run_dir: Path) -> list[tuple[int, float]]:
    """(step, seconds from the first checkpoint) of the run's top-level checkpoints, in order."""
    with sqlite3.connect(run_dir / "checkpoints.sqlite") as con:
        rows = con.execute("select checkpoint_ns, checkpoint_id, metadata from checkpoints").fetchall()
    t0 = min(seconds(c) for _, c, _ in rows)
    return sorted((json.loads(m)["step"], seconds(c) - t0) for ns, c, m in rows if ns == "")


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python bench/checkpoint_times.py RUN_DIR [RUN_DIR ...]", file=sys.stderr)
        return 2
    for d in argv:
        at = dict(steps(Path(d)))
        planning = [round(at[s + 1] - at[s], 1) for s in sorted(at) if s >= 4 and (s - 4) % 3 == 0 and s + 1 in at]
        print(f"{d}: " + ", ".join(f"{s}@{t:.1f}s" for s, t in sorted(at.items()) if s >= 0))
        print(f"  planning between generations, s: {planning or '-'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
