"""The soak test's GPU half (issue 24, item 6): a builtin run of many branches at a real size for a fixed time,
with the device's memory and every worker's memory sampled as it goes.

    python bench/soak_gpu.py PROBLEM --seed-kernel SEED [--minutes 25] [--branches 8] [--device cuda]
        [--sample-s 10] [--work-dir DIR] [--json OUT] [-- extra optimize flags]
    python bench/soak_gpu.py --from-json OUT      (the memory checks again over saved samples)

What runs: `kernelwright optimize PROBLEM --seed-kernel SEED --device DEVICE --branches B --time-budget Mm
--plateau-steps 0` (the builtin policy; no step limit and no plateau rule, so the time budget or the roofline target
ends it: a first try without `--plateau-steps 0` ended on a plateau after 10 of its 13 minutes) in a child process of its own
session. Every `--sample-s` this script reads, without touching the run: each visible GPU's used memory (NVML), the
driver's resident memory and that of every process under it (the evaluation workers and spares), and the steps
recorded so far. On the CPU (`--device cpu`) the same runs with no device memory, to check the mechanics.

What is checked and reported (exit 1 with one sentence per failed check):
- no step lost: the steps in trace.jsonl are contiguous generations, each with all its branches, each step once;
  the archive's step list is the trace's;
- no `evaluator_error` verdict (nor any verdict of kind `error`) among the candidates judged;
- no growth: the lowest device memory and the median total worker memory over the run's last quarter are
  within `--growth-pct` (default 10 %) of those over its second quarter (the first quarter is warm-up; `GROWTH`
  says why the lowest level for the device);
- candidates per GPU-minute: the run's verdicts (evals/*.json, one per kernel judged) over its wall minutes times
  the GPUs it used.
A table last; all samples and figures in the JSON (written with the samples so far every minute while it runs,
marked `partial`, so a soak cut short keeps them for `--from-json`).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def descendants(root: int) -> list[int]:
    """Every live process under `root` (children, grandchildren ...), read from /proc."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            if fields[0] not in ("Z", "X"):
                parent[int(entry)] = int(fields[1])
        except (OSError, ValueError, IndexError):
            continue
    out, frontier = [], {root}
    while frontier:
        nxt = {p for p, pp in parent.items() if pp in frontier}
        out += sorted(nxt)
        frontier = nxt
    return out


def rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


class Gpus:
    """Used memory of the GPUs the run sees, through NVML (nvidia-ml-py), or none on the CPU."""

    def __init__(self, device: str) -> None:
        self.handles: list[Any] = []
        if not device.startswith("cuda"):
            return
        import pynvml

        pynvml.nvmlInit()
        self.nvml = pynvml
        indices = [int(d.split(":")[1]) for d in device.split(",") if ":" in d] or [0]
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible:
            ids = [v.strip() for v in visible.split(",")]
            indices = [int(ids[i]) for i in indices if i < len(ids) and ids[i].isdigit()]
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in indices]

    def used(self) -> list[int]:
        return [int(self.nvml.nvmlDeviceGetMemoryInfo(h).used) for h in self.handles]


def lines(path: Path) -> int:
    try:
        with open(path, "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def quarters(samples: list[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    """The values of `key` over the samples' second quarter of time and over their last quarter."""
    if len(samples) < 8:
        return [], []
    t0, t1 = samples[0]["t"], samples[-1]["t"]
    span = max(t1 - t0, 1e-9)
    second = [s[key] for s in samples if 0.25 <= (s["t"] - t0) / span < 0.5]
    last = [s[key] for s in samples if (s["t"] - t0) / span >= 0.75]
    return second, last


GROWTH = (("gpu_used_total", "device memory", min, "lowest"), ("worker_rss", "worker memory", statistics.median,
                                                                  "median"))
"""What the growth check compares between the second and the last quarter. Device memory: the lowest level. Most
of it is whole evaluations' input and output buffers, one plan's worth each (6 GiB at 23_Softmax's size), so it
steps between a few and eight evaluations in flight and its median moves by one evaluation from quarter to
quarter (the first 25-minute soak: 38.8 -> 44.8 GiB, while the level it fell back to went 14.1 -> 8.1 GiB). What
stays behind raises every level, the lowest too. Worker memory: the median (the number of workers holds still)."""


def memory_checks(samples: list[dict[str, Any]], growth_pct: float) -> tuple[dict[str, Any], list[str]]:
    """The growth figures (median and lowest of each quarter) and the failed checks, from the samples alone."""
    figures: dict[str, Any] = {}
    problems: list[str] = []
    for key, label, stat, word in GROWTH:
        second, last = quarters(samples, key)
        if not second or not last:  # too few samples to compare (a soak cut short): that is no pass
            problems.append(f"{label} not checked: {len(samples)} samples, too few for quarters")
            continue
        for q, values in (("second_quarter", second), ("last_quarter", last)):
            figures[f"{key}_{q}_median"] = statistics.median(values)
            figures[f"{key}_{q}_lowest"] = min(values)
        a, b = stat(second), stat(last)
        if a and b > a * (1 + growth_pct / 100):
            problems.append(f"{label} grew: its {word} level {a / 2**30:.2f} GiB in the second quarter, "
                            f"{b / 2**30:.2f} GiB in the last, beyond {growth_pct:g} %")
    return figures, problems


def check_steps(run: Path, branches: int) -> list[str]:
    """What is wrong with the run's step records (empty: nothing lost or repeated): each step once, contiguous
    generations each with all its branches (the last may be cut by the budget), step numbers 0..n-1, the
    archive's step list the trace's, run.json's count the trace's."""
    trace = [json.loads(x) for x in (run / "trace.jsonl").read_text().splitlines() if x.strip()]
    ids = [r["step_id"] for r in trace]
    bad = []
    if len(ids) != len(set(ids)):
        bad.append(f"a step id is recorded twice ({len(ids) - len(set(ids))} repeats)")
    by_gen: dict[int, list[int]] = {}
    for r in trace:
        by_gen.setdefault(r["generation"], []).append(r["branch"])
    gens = sorted(by_gen)
    if gens and gens != list(range(1, len(gens) + 1)):
        bad.append(f"generations are not contiguous: {gens[:3]}...{gens[-3:]}")
    ragged = [g for g, bs in by_gen.items() if sorted(bs) != list(range(len(bs))) or
              (len(bs) != branches and g != gens[-1])]
    if ragged:
        bad.append(f"generations with missing or extra branches: {ragged[:5]}")
    if [r["step"] for r in trace] != list(range(len(trace))):
        bad.append("the trace's step numbers are not 0..n-1 in order")
    archives = [p for p in (run / "archive").glob("*.json") if p.stem.isdigit()]
    if archives:
        latest = max(archives, key=lambda p: int(p.stem))
        steps = [st.get("step_id") for st in json.loads(latest.read_text()).get("steps", [])]
        if steps != ids:
            bad.append(f"the archive lists {len(steps)} steps, the trace {len(ids)}")
    info = json.loads((run / "run.json").read_text())
    if info.get("steps") != len(trace):
        bad.append(f"run.json counts {info.get('steps')} steps, the trace holds {len(trace)}")
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("problem", nargs="?")
    ap.add_argument("--seed-kernel")
    ap.add_argument("--from-json", default=None, help="check a saved soak's samples again; runs nothing")
    ap.add_argument("--minutes", type=float, default=25.0)
    ap.add_argument("--branches", type=int, default=8)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--sample-s", type=float, default=10.0)
    ap.add_argument("--growth-pct", type=float, default=10.0)
    ap.add_argument("--work-dir", default="/tmp/soak_gpu")
    ap.add_argument("--json", default=None)
    ap.add_argument("extra", nargs="*", help="more optimize flags, after --")
    args = ap.parse_args()
    if args.from_json:
        return again(args.from_json, args.growth_pct)
    if not args.problem or not args.seed_kernel:
        ap.error("give a PROBLEM and --seed-kernel (or --from-json FILE)")

    work = Path(args.work_dir)
    runs = work / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "kernelwright.cli", "optimize", args.problem, "--seed-kernel", args.seed_kernel,
           "--device", args.device, "--branches", str(args.branches), "--time-budget", f"{args.minutes:g}m",
           "--run-dir", str(runs), "--plateau-steps", "0", *args.extra]
    gpus = Gpus(args.device)
    log = open(work / "run.log", "w")
    t_start = time.time()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    samples: list[dict[str, Any]] = []
    run: Path | None = None
    print(f"soak: {' '.join(cmd)}", flush=True)
    limit = args.minutes * 60 * 1.5 + 600  # the budget, the final judgement and the start, with room
    try:
        while proc.poll() is None:
            if time.time() - t_start > limit:
                os.killpg(proc.pid, signal.SIGINT)
                proc.wait(timeout=120)
                break
            found = sorted(runs.glob("*/run.json"))
            run = found[0].parent if found else None
            kids = descendants(proc.pid)
            worker_rss = [rss(p) for p in kids]
            s = {"t": round(time.time() - t_start, 1), "gpu_used": gpus.used(), "driver_rss": rss(proc.pid),
                 "workers": len(kids), "worker_rss": sum(worker_rss), "worker_rss_max": max(worker_rss, default=0),
                 "steps": lines(run / "trace.jsonl") if run else 0}
            s["gpu_used_total"] = sum(s["gpu_used"])
            samples.append(s)
            if (len(samples) - 1) % max(1, int(60 / args.sample_s)) == 0:  # about once a minute, the first too
                if args.json:  # the samples so far, so that a soak cut short (a host taken back) keeps them;
                    # written whole or not at all (a host taken back mid-write must not lose the earlier ones)
                    partial = Path(args.json + ".tmp")
                    partial.write_text(json.dumps({"command": cmd, "partial": True, "samples": samples}))
                    os.replace(partial, args.json)
                print(f"  {s['t']:7.0f} s  steps {s['steps']:4d}  GPU {s['gpu_used_total'] / 2**30:6.2f} GiB  "
                      f"workers {s['workers']:2d} ({s['worker_rss'] / 2**30:5.2f} GiB)  driver "
                      f"{s['driver_rss'] / 2**30:5.2f} GiB", flush=True)
            time.sleep(args.sample_s)
    except KeyboardInterrupt:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=120)
    rc = proc.wait()
    wall = time.time() - t_start
    found = sorted(runs.glob("*/run.json"))
    problems: list[str] = []
    figures: dict[str, Any] = {"exit_code": rc, "wall_s": round(wall, 1), "samples": len(samples)}
    if not found:
        problems.append(f"the run left no run directory (exit {rc}; see {work / 'run.log'})")
    else:
        run = found[0].parent
        info = json.loads((run / "run.json").read_text())
        verdicts = [json.loads(p.read_text()) for p in (run / "evals").glob("*.json")]
        reasons: dict[str, int] = {}
        for v in verdicts:
            reasons[f"{v.get('verdict')}:{v.get('reason')}"] = reasons.get(f"{v.get('verdict')}:{v.get('reason')}", 0) + 1
        gpu_count = max(len(gpus.handles), 1)
        figures.update(status=info.get("status"), stop_reason=info.get("stop_reason"), steps=info.get("steps"),
                       candidates=len(verdicts), reasons=reasons,
                       candidates_per_gpu_minute=round(len(verdicts) / (wall / 60) / gpu_count, 2),
                       run_dir_mb=round(sum(p.stat().st_size for p in run.rglob("*") if p.is_file()) / 2**20, 2))
        problems += check_steps(run, args.branches)
        errors = {k: n for k, n in reasons.items() if k.startswith("error:") or "evaluator_error" in k}
        if errors:
            problems.append(f"verdicts of kind error: {errors}")
        if info.get("status") not in ("finished",):
            problems.append(f"the run ended {info.get('status')}: {info.get('stop_reason')}")
    grown, grew = memory_checks(samples, args.growth_pct)
    figures.update(grown)
    problems += grew
    out = {"command": cmd, "figures": figures, "problems": problems, "samples": samples}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return report(figures, problems)


def report(figures: dict[str, Any], problems: list[str]) -> int:
    print("\n| figure | value |\n| --- | --- |")
    for k, v in figures.items():
        print(f"| {k} | {v} |")
    for p in problems:
        print(f"soak: {p}")
    print("soak: every check passed" if not problems else f"soak: {len(problems)} check(s) failed")
    return 0 if not problems else 1


def again(path: str, growth_pct: float) -> int:
    """`--from-json FILE`: the memory checks again over a soak's saved samples (the run's own checks stand as
    saved: its directory may be gone)."""
    saved = json.loads(Path(path).read_text())
    figures = {k: v for k, v in saved.get("figures", {}).items()
               if not k.startswith(("gpu_used_total_", "worker_rss_"))}
    problems = [p for p in saved.get("problems", []) if "memory" not in p]
    if saved.get("partial"):
        last = saved["samples"][-1] if saved["samples"] else {}
        figures.update(partial=f"samples up to {last.get('t', 0):.0f} s, {last.get('steps', 0)} steps: the soak was cut short")
    grown, grew = memory_checks(saved["samples"], growth_pct)
    return report({**figures, **grown}, problems + grew)


if __name__ == "__main__":
    raise SystemExit(main())
