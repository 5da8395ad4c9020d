"""Read a measurement audit log (`KERNELWRIGHT_LOCK_LOG`, one JSON line per measurement: gpu, host, pid,
start, end) and say, per GPU, whether two measurements ever overlapped, how busy it was, and how long all
GPUs measured at once.

    python bench/lock_audit.py LOG [--since T0] [--until T1] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any


def read(path: Path, since: float = 0.0, until: float = float("inf")) -> list[dict[str, Any]]:
    rows = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if r["start"] >= since and r["end"] <= until:
            rows.append(r)
    return rows


def audit(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per GPU (host and UUID): measurements, overlapping pairs (must be 0), busy seconds over the window;
    and the seconds in which every GPU was measuring at once."""
    by_gpu: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
    for r in rows:
        by_gpu[f"{r['host']}/{r['gpu']}"].append((r["start"], r["end"], r["pid"]))
    if not rows:
        return {"gpus": {}, "window_s": 0.0, "all_at_once_s": 0.0, "overlaps": 0}
    t0, t1 = min(r["start"] for r in rows), max(r["end"] for r in rows)
    gpus = {}
    for gpu, spans in by_gpu.items():
        spans.sort()
        overlaps = sum(1 for (a0, a1, _), (b0, b1, _) in zip(spans, spans[1:]) if b0 < a1)
        busy = sum(b - a for a, b, _ in spans)
        gpus[gpu] = {"measurements": len(spans), "overlapping_pairs": overlaps, "busy_s": round(busy, 2),
                     "busy_share": round(busy / (t1 - t0), 3) if t1 > t0 else None,
                     "processes": len({p for _, _, p in spans})}
    # time during which every GPU was inside a measurement: sweep over the union of boundaries
    events = sorted({t for spans in by_gpu.values() for a, b, _ in spans for t in (a, b)})
    together = 0.0
    for a, b in zip(events, events[1:]):
        mid = (a + b) / 2
        if all(any(s <= mid < e for s, e, _ in spans) for spans in by_gpu.values()):
            together += b - a
    return {"gpus": gpus, "window_s": round(t1 - t0, 2), "all_at_once_s": round(together, 2) if len(by_gpu) > 1 else None,
            "overlaps": sum(g["overlapping_pairs"] for g in gpus.values())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log", type=Path)
    ap.add_argument("--since", type=float, default=0.0)
    ap.add_argument("--until", type=float, default=float("inf"))
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    result = audit(read(a.log, a.since, a.until))
    if a.json:
        print(json.dumps(result, indent=1))
    else:
        for gpu, g in result["gpus"].items():
            print(f"{gpu}: {g['measurements']} measurements by {g['processes']} process(es), "
                  f"{g['overlapping_pairs']} overlapping, busy {g['busy_s']} s ({g['busy_share']:.0%} of {result['window_s']} s)")
        if result["all_at_once_s"] is not None:
            print(f"all GPUs measuring at once: {result['all_at_once_s']} s")
    return 1 if result["overlaps"] else 0


if __name__ == "__main__":
    sys.exit(main())
