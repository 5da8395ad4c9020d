"""Two runs' traces, step by step, with what legitimately varies from run to run left out: whether a change that
should not change behaviour (a refactor: issue 25's done-when, "traces of the builtin loop on the softmax example
are identical before and after") left the loop's decisions as they were.

    python bench/compare_traces.py RUN_A RUN_B      (run directories, each holding trace.jsonl)

Compared, per step: the step's place (step, generation, branch), the parent and child kernels (content hashes: the
same source gives the same hash), the diagnosis, the proposal, the coder's diff, the verdict and its reason, the
archive's decision and why, the kernels the child launched (names, launches, grids), and the policy. Left out: clock
times and durations (a review's and a steering note's `at`, and who gave them, `by`), the verdict's error magnitudes and trial counts (its input draws come from a per-run secret
seed), timings (absent on the CPU anyway), tokens and cost. Exit 0 when every step matches, 1 with the first
differences otherwise.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _kernels(outcome: dict[str, Any] | None) -> list[tuple[Any, ...]]:
    # the grids a kernel was launched with, as a set: the order they were first seen in follows the order of the
    # trials' input draws, which a run's secret seed sets
    return [(k.get("name"), k.get("launches"), sorted(json.dumps(g) for g in k.get("grids") or []))
            for k in (outcome or {}).get("kernels") or []]


def _timeless(value: Any) -> Any:
    """`value` without the clock times and the people (`at`, `by`: user@host) a review or steering note carries."""
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items() if k not in ("at", "by")}
    if isinstance(value, list):
        return [_timeless(v) for v in value]
    return value


def essentials(record: dict[str, Any]) -> dict[str, Any]:
    """What of one trace record a behaviour-preserving change must keep as it was."""
    decision = record.get("decision") or {}
    result = record.get("result") or {}
    return {
        "place": (record.get("step"), record.get("generation"), record.get("branch")),
        "parent": record.get("parent"), "child": record.get("child"),
        "diagnosis": record.get("diagnosis"), "proposal": record.get("proposal"),
        "diff": (record.get("coder") or {}).get("diff"), "coder_error": (record.get("coder") or {}).get("error"),
        "verdict": (record.get("verdict"), result.get("reason")),
        "decision": (decision.get("decision"), decision.get("reason"), decision.get("why")),
        "kernels": _kernels(record.get("outcome")),
        "policy": record.get("policy"), "review": _timeless(record.get("review")),
        "steering": _timeless(record.get("steering")),
    }


def compare(a: Path, b: Path) -> list[str]:
    ta = [json.loads(x) for x in (a / "trace.jsonl").read_text().splitlines() if x.strip()]
    tb = [json.loads(x) for x in (b / "trace.jsonl").read_text().splitlines() if x.strip()]
    out = []
    if len(ta) != len(tb):
        out.append(f"{len(ta)} steps against {len(tb)}")
    for ra, rb in zip(ta, tb):
        ea, eb = essentials(ra), essentials(rb)
        for key in ea:
            if ea[key] != eb[key]:
                out.append(f"step {ra.get('step_id')}: {key} differs:\n  {json.dumps(ea[key])[:400]}\n  "
                           f"{json.dumps(eb[key])[:400]}")
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.split("\n\n")[1])
        return 2
    a, b = Path(argv[0]), Path(argv[1])
    for p in (a, b):
        if not (p / "trace.jsonl").is_file():
            print(f"{p} holds no trace.jsonl: give a run directory")
            return 2
    diffs = compare(a, b)
    steps = sum(1 for x in (a / "trace.jsonl").read_text().splitlines() if x.strip())
    if diffs:
        print("\n".join(diffs[:20]))
        print(f"{len(diffs)} difference(s)")
        return 1
    print(f"identical: {steps} steps (kernels, diagnoses, proposals, diffs, verdicts, decisions, launches)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
