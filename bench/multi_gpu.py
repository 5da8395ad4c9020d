"""All the GPUs of a host, and the same through Ray: `optimize` and `bench --kernels` on one GPU, on every GPU
(`--device cuda:0,cuda:1,...`) and on a local Ray cluster with one actor per GPU (`--cluster`), each followed
by the measurement audit (no two measurements overlapped on a GPU; how busy each GPU was).

    python bench/multi_gpu.py --suite .kb --modes opt-1,opt-n,opt-ray,bench-1,bench-n,bench-ray --out DIR

Modes: KIND-WHERE, KIND opt or bench; WHERE 1 (cuda:0), n (every GPU, a host process each: `--hosts auto`),
n1p (every GPU in the one process: `--hosts off`), ray (a local Ray cluster, one actor per GPU).

Every measurement appends to one audit log (`KERNELWRIGHT_LOCK_LOG`, set here and in the Ray cluster's
environment), sliced by each mode's time window. Prints a table last; writes DIR/multi_gpu.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lock_audit  # noqa: E402


def gpus() -> int:
    import torch

    return torch.cuda.device_count()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kw() -> list[str]:
    return [sys.executable, "-m", "kernelwright.cli"]


def ray_cli() -> list[str]:
    return [sys.executable, "-m", "ray.scripts.scripts"]


def run(cmd: list[str], env: dict[str, str], log: Path, limit: float) -> tuple[int, float]:
    t0 = time.time()
    with open(log, "w") as f:
        try:
            rc = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=limit).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    return rc, time.time() - t0


def where_time_goes(run_dir: Path | None, judged: list[dict]) -> dict:
    """Where an optimize run's time went, from files that stay in the run directory (which the device's
    copy-back cannot reach): the verification's wall per step and each evaluation phase's mean seconds."""
    if run_dir is None:
        return {}
    verify = sorted(s["verify_s"] for s in judged if s.get("verify_s") is not None)
    phases: dict[str, list[float]] = {}
    for f in sorted((run_dir / "evals").glob("*.json")):
        for k, v in (json.loads(f.read_text()).get("phases") or {}).items():
            if isinstance(v, (int, float)):
                phases.setdefault(k, []).append(float(v))
    return {"verify_s": {"n": len(verify), "mean": round(sum(verify) / len(verify), 2) if verify else None,
                         "max": verify[-1] if verify else None},
            "phases_mean_s": {k: round(sum(v) / len(v), 3) for k, v in sorted(phases.items())},
            "evaluations": max((len(v) for v in phases.values()), default=0),
            "step_times": [s.get("time") for s in judged],
            "steady": steady_rate(judged)}


def steady_rate(judged: list[dict]) -> dict:
    """Candidates per minute once the run is going: the steps judged after the first generation, over the time
    from the first generation's end to the last one's (each step's `time` is when its generation was archived,
    to the second). Leaves out the set-up (imports, the seed's evaluation, both baselines), which an overnight
    run pays once; the wall-clock rate, which includes it, is reported beside it."""
    ends: dict[int, float] = {}
    for s in judged:
        if s.get("time") and s.get("generation") is not None:
            t = time.mktime(time.strptime(s["time"], "%Y-%m-%dT%H:%M:%S"))
            ends[s["generation"]] = max(ends.get(s["generation"], t), t)
    if len(ends) < 2:
        return {"per_min": None, "generations": len(ends)}
    first, last = min(ends), max(ends)
    after = sum(1 for s in judged if s.get("generation") is not None and s["generation"] > first)
    span = ends[last] - ends[first]
    return {"per_min": round(after / (span / 60), 2) if span > 0 else None, "judged": after, "span_s": span,
            "generations": len(ends),
            "generation_s": [ends[g] - ends[g0] for g0, g in zip(sorted(ends), sorted(ends)[1:])]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", type=Path, default=Path(".kb"))
    ap.add_argument("--kernels", type=Path, default=Path("bench/kernelbench"))
    ap.add_argument("--problem", default="level1/40_LayerNorm.py")
    ap.add_argument("--seed", type=Path, default=Path("bench/seeds/kb_40_LayerNorm_seed.py"))
    ap.add_argument("--iterations", type=int, default=12)
    ap.add_argument("--branches", type=int, default=4)
    ap.add_argument("--bench-problems", default="level1/*,level3/43_*")
    ap.add_argument("--modes", default="opt-1,opt-n,opt-ray,bench-1,bench-n,bench-ray")
    ap.add_argument("--limit", type=float, default=280.0, help="seconds per mode")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    n = gpus()
    audit_log = a.out / "measurements.jsonl"
    env = {**os.environ, "KERNELWRIGHT_LOCK_LOG": str(audit_log.resolve())}
    modes = [m for m in a.modes.split(",") if m]
    address = None
    ray_temp = None
    if any(m.endswith("ray") for m in modes):
        port = free_port()
        ray_temp = f"/tmp/kwray{port}"
        ray_env = {k: v for k, v in env.items() if not any(s in k.upper() for s in ("KEY", "TOKEN", "SECRET"))}
        ray_env["RAY_USAGE_STATS_ENABLED"] = "0"
        t0 = time.time()
        r = subprocess.run([*ray_cli(), "start", "--head", "--node-ip-address=127.0.0.1",
                            f"--port={port}", f"--num-gpus={n}", "--include-dashboard=false", "--disable-usage-stats",
                            f"--temp-dir={ray_temp}"], env=ray_env, capture_output=True, text=True, timeout=180)
        print(f"ray start: rc={r.returncode} in {time.time() - t0:.1f} s", flush=True)
        if r.returncode != 0:
            print(r.stdout[-2000:], r.stderr[-2000:])
        else:
            address = f"127.0.0.1:{port}"
    rows = []
    try:
        for mode in modes:
            kind, where = mode.split("-")
            if where in ("n", "n1p") and n < 2:
                print(f"{mode}: skipped, {n} GPU", flush=True)
                continue
            if where == "ray" and address is None:
                print(f"{mode}: skipped, no Ray cluster", flush=True)
                continue
            every = ",".join(f"cuda:{i}" for i in range(n))
            place = (["--device", "cuda:0"] if where == "1" else
                     ["--device", every] if where == "n" else  # a host process per GPU (--hosts auto)
                     ["--device", every, "--hosts", "off"] if where == "n1p" else  # every GPU in one process
                     ["--cluster", address, "--device", "cuda"])
            out = a.out / mode
            shutil.rmtree(out, ignore_errors=True)
            if kind == "opt":
                cmd = [*kw(), "optimize", str(a.suite / a.problem), "--seed-kernel", str(a.seed),
                       "--iterations", str(a.iterations), "--branches", str(a.branches), "--profile", "off",
                       "--run-dir", str(out), *place]
            else:
                cmd = [*kw(), "bench", str(a.suite), "--kernels", str(a.kernels), "--problems", a.bench_problems,
                       "--out", str(out), *place]
            t0 = time.time()
            rc, wall = run(cmd, env, a.out / f"{mode}.log", a.limit)
            rep = lock_audit.audit(lock_audit.read(audit_log, t0, time.time()))
            row = {"mode": mode, "rc": rc, "wall_s": round(wall, 1), "gpus_used": len(rep["gpus"]),
                   "overlaps": rep["overlaps"], "all_at_once_s": rep["all_at_once_s"],
                   "busy": {g: v["busy_share"] for g, v in rep["gpus"].items()},
                   "measurements": sum(v["measurements"] for v in rep["gpus"].values())}
            if kind == "opt":
                runs = [d for d in out.iterdir() if d.is_dir()] if out.exists() else []
                steps = [json.loads(x) for d in runs for x in (d / "trace.jsonl").read_text().splitlines()] \
                    if runs and (runs[0] / "trace.jsonl").exists() else []
                judged = [s for s in steps if s.get("verdict")]
                row.update(candidates=len(judged), per_min=round(len(judged) / (wall / 60), 2),
                           passed=sum(s["verdict"] == "pass" for s in judged))
                row["where"] = where_time_goes(runs[0] if runs else None, judged)
                row["steady_per_min"] = row["where"].get("steady", {}).get("per_min")
                (a.out / f"{mode}-where.json").write_text(json.dumps(row["where"], indent=1))
            else:
                res = out / "results.jsonl"
                lines = [json.loads(x) for x in res.read_text().splitlines()] if res.exists() else []
                judged = [x for x in lines if x["verdict"] != "missing"]
                row.update(candidates=len(judged), per_min=round(len(judged) / (wall / 60), 2),
                           passed=sum(x["verdict"] == "pass" for x in judged),
                           actors=sorted({x["actor"] for x in judged if x.get("actor")}))
            rows.append(row)
            print(json.dumps(row), flush=True)
            print(open(a.out / f"{mode}.log").read()[-1500:], flush=True)
    finally:
        if address is not None:
            subprocess.run([*ray_cli(), "stop", "--force"], capture_output=True, timeout=120)
    (a.out / "multi_gpu.json").write_text(json.dumps({"gpus": n, "rows": rows}, indent=1))
    print(f"\n{n} GPU(s)")
    print("| mode | rc | wall s | judged | passed | per min | steady per min | GPUs measuring | overlaps | all at once s | busy |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in rows:
        busy = ", ".join(f"{v:.0%}" for v in r["busy"].values() if v is not None)
        print(f"| {r['mode']} | {r['rc']} | {r['wall_s']} | {r['candidates']} | {r['passed']} | {r['per_min']} | "
              f"{r.get('steady_per_min', '–')} | "
              f"{r['gpus_used']} | {r['overlaps']} | {r['all_at_once_s']} | {busy} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
