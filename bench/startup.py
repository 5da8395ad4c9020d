"""Where a run's start-up goes (issue 24, item 5): run `kernelwright optimize` with output piped (the plain
progress lines), stamp every line as it arrives, and then read the run directory for what each piece took —
the seed's evaluation by phase (plan, reference, eager, torch.compile, timing, roofline), the seed's profile
(torch.profiler and Nsight Compute), the first step's roles, verification and tuning. Without `--seed-kernel`
(a model writes the first kernel), also what setting each device up took while the model wrote (the run's
`prepare/` records, `Evaluations.prepare`): that set-up is then missing from the seed's phases.

    python bench/startup.py PROBLEM --seed-kernel SEED [optimize flags ...] [--out DIR]
    python bench/startup.py PROBLEM --model SPEC [optimize flags ...] [--out DIR]

Prints one table; with --out also writes startup.json there. The optimize flags default to
`--iterations 1 --branches 1`; `--device` defaults to cuda when a GPU is visible."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _run(argv: list[str]) -> tuple[list[tuple[float, str]], float, int]:
    """Run the CLI with piped output; every line with its arrival time (seconds from the start)."""
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "kernelwright.cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines: list[tuple[float, str]] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append((time.monotonic() - t0, line.rstrip()))
    rc = proc.wait()
    return lines, time.monotonic() - t0, rc


def _first(lines: list[tuple[float, str]], *needles: str) -> float | None:
    for t, text in lines:
        if any(n in text for n in needles):
            return t
    return None


def _load(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("problem")
    ap.add_argument("--out", default=None)
    args, rest = ap.parse_known_args()
    run_dir = Path(tempfile.mkdtemp(prefix="kw-startup-"))
    if "--iterations" not in rest:
        rest += ["--iterations", "1"]
    if "--branches" not in rest:
        rest += ["--branches", "1"]
    if "--device" not in rest:
        import torch
        rest += ["--device", "cuda" if torch.cuda.is_available() else "cpu"]
    argv = ["optimize", args.problem, "--run-dir", str(run_dir), *rest]
    lines, wall, rc = _run(argv)
    for t, text in lines:
        print(f"{t:7.1f}s | {text}")
    runs = sorted(p for p in run_dir.iterdir() if p.is_dir())
    if rc != 0 or not runs:
        print(f"optimize exited {rc}; no run to read")
        return 1
    run = runs[-1]
    info = _load(run / "run.json") or {}
    seed = info.get("seed_kernel") or info.get("best_kernel")
    trace = [json.loads(x) for x in (run / "trace.jsonl").read_text().splitlines() if x.strip()] \
        if (run / "trace.jsonl").exists() else []
    if trace:
        seed = trace[0]["parent"]
    ev = _load(run / "evals" / f"{seed}.json") or {}
    prof = _load(run / "profiles" / f"{seed}.json") or {}
    rows: list[tuple[str, float | None]] = [
        ("first line (the run started)", _first(lines, "start")),
        ("the seed's verdict printed", _first(lines, "seed")),
        ("the first step printed", _first(lines, "step g1", "g1b0")),
        ("the run ended", wall),
    ]
    phases = ev.get("phases") or {}
    prepared = {p.stem: _load(p) or {} for p in sorted((run / "prepare").glob("*.json"))} \
        if (run / "prepare").is_dir() else {}
    out: dict[str, Any] = {"argv": argv, "wall_s": round(wall, 2), "marks": {k: v for k, v in rows},
                           "seed_phases": phases, "seed_profile_s": prof.get("collect_s"),
                           "ncu": (prof.get("ncu") or {}).get("available"), "prepared": prepared, "steps": []}
    print(f"\n{'mark':42} {'s from start':>12}")
    for name, t in rows:
        print(f"{name:42} {'-' if t is None else f'{t:.1f}':>12}")
    print(f"\nthe seed's evaluation by phase (s): " + ", ".join(f"{k} {v:.1f}" for k, v in phases.items()))
    for device, rec in prepared.items():  # a run without a seed kernel: set up while the model wrote it
        print(f"prepared {device} while the model wrote the first kernel: {rec.get('outcome')} in "
              f"{rec.get('seconds')} s (" + ", ".join(f"{k} {v}" for k, v in (rec.get("phases") or {}).items()) + ")")
    print(f"the seed's profile: {prof.get('collect_s', '-')} s (Nsight Compute "
          f"{'read' if out['ncu'] else 'not read: ' + str((prof.get('ncu') or {}).get('why'))})")
    for rec in trace:
        roles = {k: v.get("wall_s") for k, v in (rec.get("llm") or {}).items()} if rec.get("llm") else {}
        tune = rec.get("tuning") or {}
        tuned = [t.get("verify_s") for t in tune.get("variants", []) if isinstance(t, dict)]
        step = {"step": rec["step_id"], "verify_s": rec.get("verify_s"), "roles": roles,
                "tuning_variants": len(tuned), "confirmation": rec.get("confirmation") is not None}
        out["steps"].append(step)
        print(f"step {rec['step_id']}: verify {rec.get('verify_s')} s; tuning variants {len(tuned)}; "
              f"confirmation {'yes' if step['confirmation'] else 'no'}; roles {roles or '-'}")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "startup.json").write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
