"""Summarise `kernelwright eval --json` / `baseline --json` output as short tables (bench/gpu_session.sh)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _gb(n: float | None) -> str:
    return "-" if not n else f"{n / 1e9:.2f}"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def eval_line(path: str, rc: int, wall: float) -> str:
    try:
        r = json.loads(Path(path).read_text().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError) as e:
        return f"{path}: rc={rc} wall={wall:.1f}s unreadable ({e})"
    t = r.get("timing") or {}
    m = r.get("memory") or {}
    ph = r.get("phases") or {}
    keep = ("plan_s", "worker_wait_s", "load_s", "trials_s", "trials_reference_s", "trials_candidate_s",
            "trials_judging_s", "timing_s", "timing_inputs_s", "timing_candidate_s", "timing_recheck_s",
            "timing_compile_s", "measure_s", "total_s")
    phases = " ".join(f"{k.removesuffix('_s')}={ph[k]:.1f}" for k in keep if k in ph)
    return (f"{Path(path).name}: rc={rc} {r.get('verdict')} {r.get('reason')} wall={wall:.1f}s err={r.get('max_rel_error')} "
            f"gold={r.get('gold_precision')} t={_ms(t.get('median_ms'))} eager={_ms(t.get('eager_ms'))} "
            f"compile={_ms(t.get('compile_ms'))} floor={_ms(t.get('floor_ms'))} suspect={t.get('suspect')} "
            f"sets={t.get('timing_sets')} trustedGB={_gb(m.get('trusted_peak_bytes'))} "
            f"workerGB={_gb(m.get('worker_peak_bytes'))}\n    {phases}\n    detail: {str(r.get('detail'))[:300]}")


def baseline_table(path: str) -> str:
    rows = []
    for line in Path(path).read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    out = ["| problem | inputs GB | verdict | gold | trusted peak GB | eager ms | compile ms (mode) | floor ms | "
           "plan s | reference s | eager s | compile s | total s |", "|" + " --- |" * 13]
    for r in rows:
        ph = r.get("phases") or {}
        out.append(
            f"| {Path(str(r.get('problem'))).stem} | {r.get('inputs_gb', 0):.2f} | {r.get('verdict')}"
            f"{'' if r.get('verdict') == 'ok' else ': ' + str(r.get('reason'))} | {r.get('gold_precision', '-')} | "
            f"{_gb(r.get('trusted_peak_bytes'))} | {_ms(r.get('eager_ms'))} | {_ms(r.get('compile_ms'))} "
            f"({r.get('compile_mode') or '-'}) | {_ms(r.get('floor_ms'))} | {ph.get('plan_s', 0):.1f} | "
            f"{ph.get('reference_s', 0):.1f} | {ph.get('eager_s', 0):.1f} | {ph.get('compile_s', 0):.1f} | "
            f"{ph.get('total_s', 0):.1f} |")
        if r.get("verdict") != "ok":
            out.append(f"|  ↳ {str(r.get('detail'))[:200]} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["eval", "baseline"])
    ap.add_argument("path")
    ap.add_argument("--rc", type=int, default=0)
    ap.add_argument("--wall", type=float, default=0.0)
    a = ap.parse_args()
    print(eval_line(a.path, a.rc, a.wall) if a.kind == "eval" else baseline_table(a.path))


if __name__ == "__main__":
    main()
