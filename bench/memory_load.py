"""Memory under a loop's load (issue 26, item 6): `kernelwright optimize` with the builtin policy on one problem
at its shipped size, and what became of its evaluations.

    python bench/memory_load.py --problem .kb/level1/23_Softmax.py --branches 8 --iterations 16 --out DIR
    python bench/memory_load.py --problem .kb/level1/36_RMSNorm_.py --branches 2 --iterations 16 --out DIR
    python bench/memory_load.py --report DIR/memory_load.jsonl [MORE.jsonl ...]    (the table of earlier calls)

The problem is KernelBench's file at the size it ships (`.kb` holds KernelBench's level folders, carried to
the GPU host, never committed: see bench/gpu_session.sh). The seed is `--seed-kernel`, else
bench/seeds/kb_<name>_seed.py (block sizes and warps as literals in the launches, for the builtin policy's
moves), else bench/kernelbench/level1/<name>_triton.py.

One `kernelwright optimize PROBLEM --seed-kernel SEED --branches B --iterations N --device cuda` (the builtin
policy), killed with its process group past `--limit` seconds (the generations it archived by then still
count). From its
run directory (trace.jsonl: every judged step with its verdict and reason; evals/: the full verdicts, which
leave out `error` ones) and an NVML sampler beside it, one JSON line, also appended to DIR/memory_load.jsonl:

- problem, branches, iterations, status (exit code, "killed" past the limit);
- evaluations: steps the verifier judged; reasons: how many of each verdict reason;
- evaluator_error, out_of_memory: counts of those reasons;
- false_out_of_memory: out_of_memory verdicts that come out otherwise when the kernel is judged again alone
  after the run (`kernelwright eval`, at most `--recheck` of them), i.e. rejections for memory others held;
- rejudged_alone: verdicts the evaluator itself judged again alone (a first judgement out of memory beside
  others; a check named "memory" in the verdict);
- memory_wait_s: the seconds evaluations waited for room in the device's memory ledger (phases
  `memory_wait_s` + `timing_memory_wait_s` of the stored verdicts), summed and at most;
- wall_min: the optimize command's wall time; per_gpu_min: evaluations per GPU-minute over it (one GPU);
  steady_per_gpu_min: the same after the first generation (set-up left out, as bench/multi_gpu.py counts it);
- peak_device_gb: the most memory in use on the GPU (NVML, every 0.2 s; every process on the GPU counted).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from multi_gpu import steady_rate  # noqa: E402  (bench/ is on sys.path as the script's folder)


def kw() -> list[str]:
    return [sys.executable, "-m", "kernelwright.cli"]


def default_seed(problem: Path) -> Path:
    name = problem.stem
    for candidate in (ROOT / "bench" / "seeds" / f"kb_{name}_seed.py",
                      ROOT / "bench" / "kernelbench" / "level1" / f"{name}_triton.py"):
        if candidate.is_file():
            return candidate
    raise SystemExit(f"{problem}: no seed kernel found for {name}; give one with --seed-kernel")


class Sampler:
    """The most memory in use on one GPU, sampled through NVML in a thread (every process on it counted)."""

    def __init__(self, period_s: float = 0.2) -> None:
        self.period_s = period_s
        self.peak = 0
        self.why: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _handle(self) -> Any:
        import pynvml

        pynvml.nvmlInit()
        visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
        index = int(visible[0]) if visible and visible[0].isdigit() else 0  # NVML counts physical GPUs
        return pynvml, pynvml.nvmlDeviceGetHandleByIndex(index)

    def _run(self) -> None:
        try:
            nv, h = self._handle()
        except Exception as e:  # noqa: BLE001 - reported, not fatal
            self.why = f"NVML unavailable: {e}"
            return
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, int(nv.nvmlDeviceGetMemoryInfo(h).used))
            except Exception as e:  # noqa: BLE001
                self.why = f"NVML read failed: {e}"
                return
            self._stop.wait(self.period_s)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def optimize(problem: Path, seed: Path, branches: int, iterations: int, run_dir: Path, limit: float,
             profile: str, device: str, log: Path) -> tuple[str, float]:
    cmd = [*kw(), "optimize", str(problem), "--seed-kernel", str(seed), "--branches", str(branches),
           "--iterations", str(iterations), "--device", device, "--profile", profile, "--run-dir", str(run_dir)]
    t0 = time.time()
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            status = str(proc.wait(timeout=limit))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # its workers and hosts are in its group
            proc.wait()
            status = "killed"
    return status, time.time() - t0


def recheck_alone(problem: Path, kernel: Path, device: str) -> str:
    """The verdict reason of `kernel` judged alone on the device, nothing else of ours running."""
    proc = subprocess.run([*kw(), "eval", str(problem), str(kernel), "--device", device, "--json"],
                          capture_output=True, text=True, timeout=900)
    try:
        return str(json.loads(proc.stdout.strip().splitlines()[-1])["reason"])
    except (ValueError, IndexError, KeyError):
        return f"unreadable (exit {proc.returncode})"


def measure(a: argparse.Namespace) -> dict[str, Any]:
    problem = a.problem.resolve()
    if not problem.is_file():
        raise SystemExit(f"{problem}: no such problem file (extract KernelBench under .kb and carry it)")
    seed = (a.seed_kernel or default_seed(problem)).resolve()
    tag = f"{problem.stem}-b{a.branches}-i{a.iterations}"
    run_root = a.out / tag
    run_root.mkdir(parents=True, exist_ok=True)
    with Sampler() as sampler:
        status, wall = optimize(problem, seed, a.branches, a.iterations, run_root, a.limit, a.profile,
                                a.device, a.out / f"{tag}.log")
    runs = sorted((d for d in run_root.iterdir() if d.is_dir()), key=lambda d: d.stat().st_mtime)
    run = runs[-1] if runs else None
    steps = [json.loads(x) for x in (run / "trace.jsonl").read_text().splitlines() if x.strip()] \
        if run is not None and (run / "trace.jsonl").exists() else []
    judged = [s for s in steps if s.get("verdict")]
    reasons = Counter(str((s.get("result") or {}).get("reason")) for s in judged)
    verdicts = [json.loads(p.read_text()) for p in (run / "evals").glob("*.json")] if run is not None else []
    waits = [float((v.get("phases") or {}).get("memory_wait_s", 0.0))
             + float((v.get("phases") or {}).get("timing_memory_wait_s", 0.0)) for v in verdicts]
    oom = [s for s in judged if (s.get("result") or {}).get("reason") == "out_of_memory"]
    rechecked: dict[str, str] = {}
    for s in oom[:a.recheck]:
        if run is not None and s.get("child"):
            rechecked[s["child"]] = recheck_alone(problem, run / "kernels" / f"{s['child']}.py", a.device)
    steady = steady_rate(judged).get("per_min")
    return {
        "problem": problem.parent.name if problem.stem == "problem" else problem.stem, "branches": a.branches,
        "iterations": a.iterations, "status": status,
        "run": run.name if run is not None else None, "evaluations": len(judged), "reasons": dict(reasons),
        "evaluator_error": reasons.get("evaluator_error", 0), "out_of_memory": len(oom),
        "false_out_of_memory": sum(1 for r in rechecked.values() if r != "out_of_memory"),
        "rechecked": rechecked,
        "rejudged_alone": sum(1 for v in verdicts if any(c.get("name") == "memory" for c in v.get("checks") or [])),
        "memory_wait_s": {"sum": round(sum(waits), 1), "max": round(max(waits, default=0.0), 1)},
        "wall_min": round(wall / 60, 2),
        "per_gpu_min": round(len(judged) / (wall / 60), 2) if wall > 0 else None,
        "steady_per_gpu_min": steady,
        "peak_device_gb": round(sampler.peak / 1e9, 2) if sampler.peak else None,
        **({"peak_unavailable": sampler.why} if sampler.why else {}),
    }


def report(files: list[Path]) -> None:
    rows = [json.loads(x) for f in files for x in f.read_text().splitlines() if x.strip()]
    print("| problem | branches | evaluations | evaluator_error | out_of_memory (false) | rejudged alone | "
          "memory wait s (max) | wall min | per GPU-min | steady per GPU-min | peak GB | reasons |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in rows:
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(r["reasons"].items(), key=lambda kv: -kv[1]))
        print(f"| {r['problem']} | {r['branches']} | {r['evaluations']} | {r['evaluator_error']} | "
              f"{r['out_of_memory']} ({r['false_out_of_memory']}) | {r['rejudged_alone']} | "
              f"{r['memory_wait_s']['sum']} ({r['memory_wait_s']['max']}) | {r['wall_min']} | {r['per_gpu_min']} | "
              f"{r['steady_per_gpu_min']} | {r['peak_device_gb']} | {reasons} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problem", type=Path, help="a KernelBench problem file at its shipped size")
    ap.add_argument("--seed-kernel", type=Path, default=None)
    ap.add_argument("--branches", type=int, default=8)
    ap.add_argument("--iterations", type=int, default=16)
    ap.add_argument("--device", default="cuda", help="cuda (one GPU); cpu only to check this script")
    ap.add_argument("--profile", default="auto", choices=("auto", "torch", "off"),
                    help="optimize's --profile (auto, as a user's run would)")
    ap.add_argument("--limit", type=float, default=540.0, help="seconds before the optimize run is killed")
    ap.add_argument("--recheck", type=int, default=3, help="out_of_memory kernels judged again alone afterwards")
    ap.add_argument("--out", type=Path, default=Path("bench-out/memory_load"))
    ap.add_argument("--report", type=Path, nargs="+", default=None, help="print the table of these JSONL files")
    a = ap.parse_args()
    if a.report:
        report(a.report)
        return 0
    if a.problem is None:
        ap.error("--problem is required (or --report)")
    a.out.mkdir(parents=True, exist_ok=True)
    row = measure(a)
    line = json.dumps(row)
    with open(a.out / "memory_load.jsonl", "a") as f:
        f.write(line + "\n")
    print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
