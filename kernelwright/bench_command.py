"""`kernelwright bench SUITE_DIR`: a KernelBench-style benchmark over a suite in KernelBench's layout.

- `--kernels DIR` judges a directory of candidate kernels laid out like the suite (`level1/23_Softmax.py` for
  the problem `SUITE_DIR/level1/23_Softmax.py`; `23_Softmax_triton.py` is accepted too) with kernelwright's
  verifier and timing;
- `--optimize` runs the loop on each problem within a per-problem budget (from `--seed-kernels DIR` where
  given; a model can start from scratch), and reports the best kernel each run found.

With a device list (`cuda:0,cuda:1`) one worker per device takes the next problem, so problems run in
parallel and two measurements never share a GPU. With `--cluster` (a running Ray cluster) one worker per
actor does the same, each actor on its own GPU wherever Ray placed it (`--actors`, default one per GPU of the
cluster); with `--optimize`, each problem's run gets one actor.

Results go to `OUT/results.jsonl`, one `BenchRow` per problem, appended as each is judged, so `--resume`
judges only the problems it lacks. The summary (`summary.json`, `summary.md`, `summary.html`) uses
KernelBench's definitions, stated in it:

- fast_p = the share of *all* selected problems whose kernel is correct and more than p times faster than
  the baseline (strict `>`); a missing kernel, a failed or errored one counts as not correct. fast_0 is the
  share correct. A correct kernel that was not timed (on the CPU), or whose timing is suspect, counts for
  fast_0 only: its speedup is not known.
- the geometric mean of the speedups over the correct, timed, not suspect problems, and the mean fraction
  of the roofline floor over the same.
"""

from __future__ import annotations

import math
import os
import queue
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from fnmatch import fnmatch
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kernelwright.agents.context import ACTORS_NEED_CLUSTER
from kernelwright.api import RunConfig, Unconfined, UsageError, check_confinement, evaluate, start_run
from kernelwright.evaluators import DeviceError, EvalResult, resolve_device
from kernelwright.evaluators.hosts import LocalSlot
from kernelwright.evaluators.result import bound
from kernelwright.tools.runstore import atomic_write

if TYPE_CHECKING:
    from kernelwright.evaluators.cluster import Cluster, Slot

P_VALUES = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)
BASELINES = ("eager", "compile")
LEVEL_DIR = re.compile(r"^level(\d+)$")


class BenchRow(BaseModel):
    """One problem of a benchmark: its kernel's verdict and times."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    problem: str
    """level<N>/<file>, as in the suite"""
    level: int
    kernel: str | None = None
    """the candidate file judged (None: missing); with --optimize, the best kernel of the problem's run"""
    run: str | None = None
    """with --optimize: the run's id (its report, trace and kernels are under OUT/runs)"""
    actor: str | None = None
    """with --cluster, the Ray actor that judged it; with a device host (`--hosts`), that process (host:pid)"""
    gpu: str | None = None
    """the GPU model it was judged on (None: the CPU, or not judged)"""
    seed_speedup_vs_eager: float | None = None
    """with --optimize: the seed kernel's speedup over eager, for comparison"""
    verdict: Literal["pass", "fail", "error", "missing"]
    """pass or fail: the verifier's verdict; error: it could not judge (the problem, the device); missing: no kernel"""
    reason: str
    detail: str = ""
    device: str | None = None
    median_ms: float | None = None
    eager_ms: float | None = None
    compile_ms: float | None = None
    compile_mode: str | None = None
    floor_ms: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    fraction_of_floor: float | None = None
    noise_band: float | None = None
    suspect: list[str] = Field(default_factory=list)
    """reasons not to believe the timing (then the speedups count for nothing)"""
    timing_unavailable: str | None = None
    wall_s: float = 0.0
    time: str = ""

    @property
    def correct(self) -> bool:
        return self.verdict == "pass"

    def speedup(self, baseline: str) -> float | None:
        """The speedup over `baseline` when it can be believed (correct, timed, not suspect)."""
        if not self.correct or self.suspect:
            return None
        return self.speedup_vs_eager if baseline == "eager" else self.speedup_vs_compile


class Summary(BaseModel):
    """The benchmark in figures, with KernelBench's definitions."""

    problems: int
    """problems selected (the denominator of every fast_p)"""
    judged: int
    correct: int
    timed: int
    """correct, timed and not suspect"""
    missing: int
    fast_p: dict[str, dict[str, float]]
    """baseline (eager, compile) -> p -> share of all problems correct and faster than p times the baseline"""
    geomean_speedup: dict[str, float | None]
    """baseline -> geometric mean speedup over the correct, timed, not suspect problems"""
    mean_fraction_of_floor: float | None
    gpus: dict[str, int] = Field(default_factory=dict)
    """GPU model -> problems judged on it: speedups are each against the baselines on the same GPU, but a summary
    over several models mixes hardware"""
    definitions: str = ("fast_p: share of all selected problems whose kernel is correct and more than p times "
                        "faster than the baseline (strict >); missing, failed or errored kernels count as "
                        "incorrect; fast_0 is the share correct. A correct kernel without a believable timing "
                        "(CPU, or suspect) counts for fast_0 only. Geometric mean and floor fraction: over correct, "
                        "timed, not suspect problems.")


# -- finding problems and kernels -------------------------------------------------------------------------


def problems(suite: Path, levels: Sequence[int] | None = None, pattern: str | None = None) -> list[tuple[int, Path]]:
    """The suite's problem files, by level then name; UsageError when there are none."""
    if not suite.is_dir():
        raise UsageError(f"{suite}: no such suite folder (give a folder with level1/, level2/, ... in it)")
    found = []
    for d in sorted(suite.iterdir()):
        m = LEVEL_DIR.match(d.name)
        if not (m and d.is_dir()) or (levels and int(m.group(1)) not in levels):
            continue
        for p in sorted(d.glob("*.py"), key=_natural):
            if pattern is None or any(fnmatch(p.name, g.strip()) or fnmatch(f"{d.name}/{p.name}", g.strip())
                                      for g in pattern.split(",") if g.strip()):
                found.append((int(m.group(1)), p))
    if not found:
        raise UsageError(f"{suite}: no problem files match (looked for level<N>/*.py"
                         + (f" at levels {','.join(map(str, levels))}" if levels else "")
                         + (f" matching {pattern!r}" if pattern else "") + ")")
    return found


def _natural(p: Path) -> tuple[int, str]:
    m = re.match(r"(\d+)", p.name)
    return (int(m.group(1)) if m else 1 << 30, p.name)


def kernel_for(kernels: Path, level: int, problem: Path) -> Path | None:
    """The candidate for a problem: `level<N>/<name>.py`, else `level<N>/<stem>_triton.py`."""
    for name in (problem.name, f"{problem.stem}_triton.py"):
        p = kernels / f"level{level}" / name
        if p.is_file():
            return p
    return None


# -- judging ----------------------------------------------------------------------------------------------


def read_rows(path: Path) -> list[BenchRow]:
    """The rows already in a results file (a line cut short by a kill is dropped: it is judged again)."""
    rows = []
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                rows.append(BenchRow.model_validate_json(line))
            except ValueError:
                continue
    return rows



def check_cluster(cluster: str, device: str | None, actors: int | None) -> tuple[Cluster, str, int]:
    """The connected cluster, the actors' kind and their number (`cluster.settle`); UsageError for a bad one."""
    from kernelwright.evaluators.cluster import ClusterError, settle

    try:
        return settle(cluster, device, actors)
    except ClusterError as e:
        raise UsageError(str(e)) from None


def check_devices(device: str | None) -> list[str]:
    """The devices to spread problems over (one, or a list of GPUs); UsageError for an unusable one."""
    try:
        devices = [str(resolve_device(d.strip() or None)) for d in (device or "").split(",")]
    except DeviceError as e:
        raise UsageError(str(e)) from None
    if len(set(devices)) != len(devices):
        raise UsageError(f"--device {device}: a device is named twice")
    return devices


def _judged_by(result: EvalResult) -> str | None:
    """host:pid of the Ray actor or device host that judged (None: the bench's own process)."""
    v = result.versions
    if "ray_host" in v:
        return f"{v['ray_host']}:{v['ray_actor_pid']}"
    return f"{socket.gethostname()}:{v['host_pid']}" if "host_pid" in v else None


def row_of(name: str, level: int, kernel: str, result: EvalResult, wall_s: float, stamp: str,
           **extra: Any) -> BenchRow:
    t = result.timing
    return BenchRow(
        problem=name, level=level, kernel=kernel, verdict=result.verdict, reason=str(result.reason),
        detail=bound(result.detail, 500), device=result.device, timing_unavailable=result.timing_unavailable,
        wall_s=round(wall_s, 2), time=stamp, **extra,
        actor=_judged_by(result),
        gpu=result.versions.get("gpu") or None,
        **({} if t is None else dict(
            median_ms=t.median_ms, eager_ms=t.eager_ms, compile_ms=t.compile_ms, compile_mode=t.compile_mode,
            floor_ms=t.floor_ms, speedup_vs_eager=t.speedup_vs_eager, speedup_vs_compile=t.speedup_vs_compile,
            fraction_of_floor=t.fraction_of_floor, noise_band=t.noise_band, suspect=list(t.suspect))))


def judge(level: int, problem: Path, kernel: Path | None, *, device: str, trials: int = 5,
          compile_mode: str | None = "default", slot: Slot | None = None) -> BenchRow:
    """One problem's row for `--kernels`; never raises for a bad kernel or a bad problem file (the row says why)."""
    name = f"level{level}/{problem.name}"
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    if kernel is None:
        return BenchRow(problem=name, level=level, verdict="missing", reason="missing",
                        detail="no kernel for this problem", time=stamp)
    t0 = time.monotonic()
    try:
        r = evaluate(problem, kernel, device=device, trials=trials, compile_mode=compile_mode, slot=slot)
    except Unconfined:  # the machine, not the problem: the whole bench stops with the sentence
        raise
    except UsageError as e:  # the problem file itself is broken: not held against the kernel, but not correct
        return BenchRow(problem=name, level=level, kernel=str(kernel), verdict="error", reason="bad_problem",
                        detail=bound(str(e), 500), device=device, wall_s=round(time.monotonic() - t0, 2), time=stamp)
    return row_of(name, level, str(kernel), r, time.monotonic() - t0, stamp)


def optimize(level: int, problem: Path, seed: Path | None, config: RunConfig, runs_dir: Path,
             models: dict[str, Any] | None = None) -> BenchRow:
    """One problem's row for `--optimize`: a run of the loop within `config`'s budgets, judged by its best
    kernel. Never raises for the problem's sake (the row says why)."""
    name = f"level{level}/{problem.name}"
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    if seed is None and config.model_for("coder") == "builtin":
        return BenchRow(problem=name, level=level, verdict="missing", reason="missing", time=stamp,
                        detail="no seed kernel for this problem, and the builtin policy cannot write one")
    t0 = time.monotonic()
    try:
        with start_run(problem, seed_kernel=seed, config=config, runs_dir=runs_dir, models=models) as h:
            info = h.run_to_end(driver="bench")
            run = h.run
    except Unconfined:
        raise
    except UsageError as e:
        return BenchRow(problem=name, level=level, verdict="error", reason="bad_problem", detail=bound(str(e), 500),
                        device=config.device, wall_s=round(time.monotonic() - t0, 2), time=stamp)
    seed_eval = run.eval(info.config.seed_kernel) if info.config.seed_kernel else None
    seed_t = (seed_eval or {}).get("timing") or {}
    extra: dict[str, Any] = dict(run=info.id, seed_speedup_vs_eager=seed_t.get("speedup_vs_eager"))
    best = info.best_kernel
    data = run.eval(best) if best else None
    if best is None or data is None:
        return BenchRow(problem=name, level=level, verdict="fail", reason="no_kernel", device=config.device,
                        detail=bound(info.stop_reason or "the run found no verified kernel", 500),
                        wall_s=round(time.monotonic() - t0, 2), time=stamp, **extra)
    return row_of(name, level, str(run.kernel_path(best)), EvalResult.model_validate(data),
                  time.monotonic() - t0, stamp, **extra)


def run_bench(suite: Path, out: Path, *, kernels: Path | None = None, optimize_config: RunConfig | None = None,
              seed_kernels: Path | None = None, models: dict[str, Any] | None = None,
              levels: Sequence[int] | None = None, pattern: str | None = None, device: str | None = None,
              resume: bool = False, trials: int = 5, compile_mode: str | None = "default",
              cluster: str | None = None, actors: int | None = None, hosts: str = "auto") -> Iterator[BenchRow]:
    """Judge (`kernels`) or optimize (`optimize_config`) every selected problem, appending each row to
    `out/results.jsonl` as it comes; yields the rows (with `resume`, those read back first). With several
    devices, one worker per device; `hosts` (auto: with several devices) judges each device in a process of its
    own (`evaluators.hosts`). Writes the summary files at the end."""
    selected = problems(suite, levels, pattern)
    if (kernels is None) == (optimize_config is None):
        raise UsageError("give --kernels DIR (judge a folder of kernels) or --optimize (run the loop), one of them")
    for folder, what in ((kernels, "kernels"), (seed_kernels, "seed kernels")):
        if folder is not None and not folder.is_dir():
            raise UsageError(f"{folder}: no such {what} folder")
    if cluster:
        ray_cluster, kind, n_actors = check_cluster(cluster, device, actors)
        devices = [f"ray:{k}" for k in range(n_actors)]
    else:
        if actors is not None:
            raise UsageError(ACTORS_NEED_CLUSTER)
        check_confinement()  # before anything is written: no candidate runs here unconfined
        devices = check_devices(device)
    results = out / "results.jsonl"
    if results.exists() and not resume:
        raise UsageError(f"{results} exists: pass --resume to continue it, or give another --out")
    out.mkdir(parents=True, exist_ok=True)
    done = {r.problem: r for r in read_rows(results)} if resume else {}
    names = [(lv, p, f"level{lv}/{p.name}") for lv, p in selected]
    rows: list[BenchRow] = [done[n] for _, _, n in names if n in done]
    yield from rows
    todo: queue.Queue[tuple[int, Path]] = queue.Queue()
    for lv, p, n in names:
        if n not in done:
            todo.put((lv, p))
    waiting = todo.qsize()
    finished: queue.Queue[BenchRow | BaseException] = queue.Queue()
    lock = threading.Lock()

    hosted = hosts == "on" or (hosts == "auto" and len(devices) > 1)

    def work(dev: str) -> None:
        # on a cluster, a judging worker keeps one actor (one GPU) for all its problems; an optimizing one
        # gives each problem's run an actor of its own
        # with several GPUs each device is judged in a host process (a judging worker's slot, or each problem's
        # run: one GPU, which `auto` would keep in bench's process, where the GPUs compete for one interpreter)
        slot: Slot | None = None
        if kernels is not None and cluster:
            slot = ray_cluster.slot(kind, name=f"bench/{dev}")
        elif kernels is not None and hosted:
            slot = LocalSlot(dev, name=f"bench/{dev}")
        placement = {"device": kind, "cluster": cluster, "actors": 1} if cluster else \
            {"device": dev, "hosts": "on" if hosted else hosts}
        try:
            drain(dev, slot, placement)
        finally:
            if slot is not None:
                slot.close()

    def drain(dev: str, slot: Slot | None, placement: dict[str, Any]) -> None:
        while True:
            try:
                lv, p = todo.get_nowait()
            except queue.Empty:
                return
            try:
                if kernels is not None:
                    row = judge(lv, p, kernel_for(kernels, lv, p), device=dev, trials=trials,
                                compile_mode=compile_mode, slot=slot)
                else:
                    assert optimize_config is not None
                    seed = kernel_for(seed_kernels, lv, p) if seed_kernels else None
                    cfg = RunConfig.from_dict({**optimize_config.as_dict(), **placement})
                    row = optimize(lv, p, seed, cfg, out / "runs", models)
                with lock, open(results, "a") as f:
                    f.write(row.model_dump_json() + "\n")
                    f.flush()
                    os.fsync(f.fileno())
                finished.put(row)
            except BaseException as e:  # noqa: BLE001 - handed to the caller's thread, which raises it
                finished.put(e)
                return

    workers = [threading.Thread(target=work, args=(d,), daemon=True, name=f"bench-{d}") for d in devices]
    for w in workers:
        w.start()
    for _ in range(waiting):
        got = finished.get()
        if isinstance(got, BaseException):
            raise got
        rows.append(got)
        yield got
    for w in workers:
        w.join()
    order = {n: i for i, (_, _, n) in enumerate(names)}
    rows.sort(key=lambda r: order.get(r.problem, len(order)))
    write_summary(out, summarize(rows, len(selected)), rows)


# -- the summary ------------------------------------------------------------------------------------------


def summarize(rows: Sequence[BenchRow], n_problems: int) -> Summary:
    """fast_p, geometric means and floor fraction with KernelBench's definitions (see the module's doc)."""
    n = max(n_problems, 1)
    fast: dict[str, dict[str, float]] = {}
    geo: dict[str, float | None] = {}
    for b in BASELINES:
        fast[b] = {}
        for p in P_VALUES:
            if p == 0:
                hits = sum(r.correct for r in rows)
            else:
                hits = sum(1 for r in rows if (s := r.speedup(b)) is not None and s > p)
            fast[b][f"{p:g}"] = hits / n
        speeds = [s for r in rows if (s := r.speedup(b)) is not None and s > 0]
        geo[b] = math.exp(sum(math.log(s) for s in speeds) / len(speeds)) if speeds else None
    floors = [r.fraction_of_floor for r in rows if r.speedup("eager") is not None and r.fraction_of_floor is not None]
    return Summary(problems=n_problems, judged=sum(r.verdict != "missing" for r in rows),
                   correct=sum(r.correct for r in rows),
                   timed=sum(r.speedup("eager") is not None for r in rows),
                   missing=sum(r.verdict == "missing" for r in rows), fast_p=fast, geomean_speedup=geo,
                   mean_fraction_of_floor=sum(floors) / len(floors) if floors else None,
                   gpus=dict(Counter(r.gpu for r in rows if r.gpu)))


BASELINE_NAMES = {"eager": "eager", "compile": "torch.compile"}
ROW_COLUMNS = ("problem", "verdict", "reason", "ms", "vs eager", "vs torch.compile", "of floor", "flags")


def _fmt(v: float | None, fmt: str = "{:.2f}×") -> str:
    return "–" if v is None else fmt.format(v)


def row_cells(r: BenchRow) -> list[str]:
    """One problem's row as the summary tables show it (ROW_COLUMNS)."""
    return [r.problem, r.verdict, r.reason, _fmt(r.median_ms, "{:.4g}"), _fmt(r.speedup_vs_eager),
            _fmt(r.speedup_vs_compile), _fmt(r.fraction_of_floor, "{:.0%}"), "; ".join(r.suspect)]


def figures_markdown(s: Summary) -> str:
    """The headline, fast_p per baseline with the geometric mean, and the mean floor fraction."""
    out = [f"# kernelwright bench: {s.problems} problems, {s.correct} correct, {s.timed} timed, {s.missing} missing", "",
           "| baseline | " + " | ".join(f"fast_{p:g}" for p in P_VALUES) + " | geomean speedup |",
           "| --- | " + " | ".join("---:" for _ in P_VALUES) + " | ---: |"]
    for b in BASELINES:
        out.append(f"| {BASELINE_NAMES[b]} | " + " | ".join(f"{s.fast_p[b][f'{p:g}']:.2f}" for p in P_VALUES)
                   + f" | {_fmt(s.geomean_speedup[b])} |")
    out += ["", f"Mean fraction of the roofline floor (correct, timed): {_fmt(s.mean_fraction_of_floor, '{:.0%}')}"]
    out += ["", gpus_line(s)] if s.gpus else []
    return "\n".join(out) + "\n"


def gpus_line(s: Summary) -> str:
    """What the problems were judged on; a warning when it was more than one GPU model."""
    listed = ", ".join(f"{g} ({n})" for g, n in sorted(s.gpus.items()))
    if len(s.gpus) == 1:
        return f"Judged on: {listed}."
    return (f"**Judged on {len(s.gpus)} GPU models**: {listed}. Each speedup is against the baselines on the same "
            "GPU, but these figures mix hardware; select the problems of one model to compare with other results.")


def markdown(s: Summary, rows: Sequence[BenchRow]) -> str:
    out = [figures_markdown(s), s.definitions, "", "| " + " | ".join(ROW_COLUMNS) + " |",
           "| --- | --- | --- | ---: | ---: | ---: | ---: | --- |"]
    out += ["| " + " | ".join(row_cells(r)) + " |" for r in rows]
    return "\n".join(out) + "\n"


def write_summary(out: Path, s: Summary, rows: Sequence[BenchRow]) -> None:
    atomic_write(out / "summary.json", s.model_dump_json(indent=1))
    atomic_write(out / "summary.md", markdown(s, rows))
    atomic_write(out / "summary.html", html_page(s, rows))


def html_page(s: Summary, rows: Sequence[BenchRow]) -> str:
    """The summary as one self-contained page in the report's style: fast_p over p for both baselines (SVG),
    and the per-problem table."""
    from kernelwright.report import CSS, esc

    w, h, l, r, t, b = 640, 260, 50, 150, 14, 36
    top = max(P_VALUES)

    def px(p: float) -> float:
        return l + (w - l - r) * p / top

    def py(v: float) -> float:
        return t + (h - t - b) * (1 - v)

    svg = [f'<svg class="chart" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="fast_p">']
    for k in range(6):
        v = k / 5
        svg.append(f'<line x1="{l}" x2="{w - r}" y1="{py(v):.1f}" y2="{py(v):.1f}" class="grid"/>'
                   f'<text x="{l - 6}" y="{py(v) + 4:.1f}" text-anchor="end">{v:.0%}</text>')
    for p in P_VALUES:
        svg.append(f'<text x="{px(p):.1f}" y="{h - b + 16}" text-anchor="middle">{p:g}</text>')
    svg.append(f'<text x="{(l + w - r) / 2}" y="{h - 4}" text-anchor="middle">p (times faster than the baseline)</text>')
    for base, colour, label in (("eager", "#1a7f37", "vs eager"), ("compile", "#0969da", "vs torch.compile")):
        pts = [(px(p), py(s.fast_p[base][f"{p:g}"])) for p in P_VALUES]
        svg.append(f'<polyline points="{" ".join(f"{x:.1f},{y:.1f}" for x, y in pts)}" fill="none" stroke="{colour}" '
                   f'stroke-width="2"/>' + "".join(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>'
                                                   for x, y in pts)
                   + f'<text x="{w - r + 6}" y="{pts[-1][1] + 4:.1f}" fill="{colour}">{label}</text>')
    svg.append("</svg>")
    table = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row_cells(row)) + "</tr>" for row in rows)
    csp = "default-src 'none'; style-src 'unsafe-inline'"
    fast = "".join(f"<tr><th>{BASELINE_NAMES[bl]}</th>"
                   + "".join(f"<td>{s.fast_p[bl][f'{p:g}']:.2f}</td>" for p in P_VALUES)
                   + f"<td>{'–' if s.geomean_speedup[bl] is None else f'{s.geomean_speedup[bl]:.2f}×'}</td></tr>"
                   for bl in BASELINES)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="Content-Security-Policy" content="{csp}">
<title>kernelwright bench</title><style>{CSS}</style></head><body>
<h1>kernelwright bench: {s.problems} problems, {s.correct} correct, {s.timed} timed, {s.missing} missing</h1>
<table class="kv"><tr><th></th>{''.join(f'<th>fast_{p:g}</th>' for p in P_VALUES)}<th>geomean</th></tr>{fast}</table>
<p class="muted">{esc(s.definitions)}</p>
{f'<p>{esc(gpus_line(s))}</p>' if s.gpus else ''}
{''.join(svg)}
<h2>problems</h2>
<table class="kv"><tr>{''.join(f'<th>{c}</th>' for c in ROW_COLUMNS)}</tr>{table}</table>
</body></html>
"""
