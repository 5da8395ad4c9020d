"""The per-step table of a finished run (issue 23, item 8): for each step, the proposal, the verdict and the
child's time, and the BEST kernel so far against torch.compile's default and max-autotune modes (as measured
in the same evaluation: `Timing.compile_modes`, filled when the run used `--compile-mode max-autotune`) and as a
fraction of the roofline floor, with the tokens the step's model calls used.

    python bench/model_run_table.py RUN_DIR            # a run folder (runs/<id>), or a run.tgz from gpu_relay.sh
    python bench/model_run_table.py RUN_DIR --markdown # the table as BENCHMARKS.md rows

Reads only the run's files (run.json, trace.jsonl, evals/); prints one sentence and exits 2 on a folder that
is not a run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any


def _find_run(path: Path) -> Path | None:
    if (path / "run.json").is_file():
        return path
    found = sorted(p.parent for p in path.rglob("run.json"))
    return found[-1] if found else None


def _ms(v: float | None) -> str:
    return "—" if v is None else f"{v:.4g}"


def _x(a: float | None, b: float | None) -> str:
    return "—" if a is None or b is None or b == 0 else f"{a / b:.2f}×"


def rows(run: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    info = json.loads((run / "run.json").read_text())
    trace = [json.loads(x) for x in (run / "trace.jsonl").read_text().splitlines() if x.strip()] \
        if (run / "trace.jsonl").exists() else []

    def judged(h: str | None) -> dict[str, Any]:
        p = run / "evals" / f"{h}.json"
        return json.loads(p.read_text()) if h and p.exists() else {}

    def timing(h: str | None) -> dict[str, Any] | None:
        return judged(h).get("timing") or None

    seed = (info.get("config") or {}).get("seed_kernel")
    best: tuple[float, str] | None = None
    st = timing(seed)
    if st:
        best = (st["median_ms"], seed)
    out = [{"step": "seed", "proposal": "—", "verdict": judged(seed).get("verdict") or "—", "child_ms": st and st["median_ms"],
            "best": best, "tokens": sum(a.get("tokens", 0) for a in (info.get("config") or {}).get("seed_attempts") or [])}]
    for r in trace:
        child = r.get("child")
        t = timing(child) if r.get("verdict") == "pass" else None
        if t and (best is None or t["median_ms"] < best[0]) and (r.get("decision") or {}).get("decision") == "elite":
            best = (t["median_ms"], child)
        out.append({"step": r.get("step_id"), "proposal": (r.get("proposal") or {}).get("key") or "—",
                    "verdict": r.get("verdict") or "no child", "child_ms": t and t["median_ms"], "best": best,
                    "tokens": r.get("tokens", 0)})
    for row in out:
        bt = timing(row["best"][1]) if row["best"] else None
        modes = (bt or {}).get("compile_modes") or {}
        row["best_ms"] = bt and bt["median_ms"]
        row["default_ms"] = modes.get("default") if isinstance(modes.get("default"), (int, float)) else None
        ma = [v for k, v in modes.items() if k.startswith("max-autotune") and isinstance(v, (int, float))]
        row["max_autotune_ms"] = min(ma) if ma else None
        row["floor_ms"] = bt and bt.get("floor_ms")
        row["eager_ms"] = bt and bt.get("eager_ms")
    return info, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args(argv)
    tmp = None
    path = a.run
    if path.is_file() and path.name.endswith((".tgz", ".tar.gz")):
        tmp = tempfile.TemporaryDirectory()
        with tarfile.open(path) as tf:
            tf.extractall(tmp.name, filter="data")
        path = Path(tmp.name)
    run = _find_run(path) if path.is_dir() else None
    if run is None:
        print(f"{a.run} holds no kernelwright run (no run.json)", file=sys.stderr)
        return 2
    info, out = rows(run)
    head = ["step", "proposal", "verdict", "child ms", "best ms", "× eager", "× compile default",
            "× max-autotune", "of floor", "tokens"]
    lines = []
    for r in out:
        lines.append([str(r["step"]), r["proposal"], r["verdict"], _ms(r["child_ms"]), _ms(r["best_ms"]),
                      _x(r["eager_ms"], r["best_ms"]), _x(r["default_ms"], r["best_ms"]),
                      _x(r["max_autotune_ms"], r["best_ms"]),
                      "—" if not r["floor_ms"] or not r["best_ms"] else f"{r['floor_ms'] / r['best_ms']:.0%}",
                      str(r["tokens"])])
    print(f"run {info.get('id')} on {info.get('problem')}: status {info.get('status')} ({info.get('stop_reason')}); "
          f"{info.get('tokens', 0)} tokens")
    if a.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for ln in lines:
            print("| " + " | ".join(ln) + " |")
    else:
        widths = [max(len(h), *(len(ln[i]) for ln in lines)) for i, h in enumerate(head)]
        print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
        for ln in lines:
            print("  ".join(c.ljust(w) for c, w in zip(ln, widths)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
