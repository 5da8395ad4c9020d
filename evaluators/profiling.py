"""Profiles for the analyst: what the hardware says about a candidate, compactly.

Three sources, each optional and each saying why when it is missing: the compiled Triton kernels'
resources (registers, spills, shared memory, warps, stages, grid) recorded at launch; a `torch.profiler`
breakdown of device time per kernel; and Nsight Compute metrics (speed-of-light, occupancy, DRAM/L2
throughput, warp-stall reasons) from a worker run under `ncu`, when `ncu` exists and can read counters.
Parsing and rendering are pure functions, tested on recorded `ncu` CSV; `profile_candidate` and
`ncu_report` run a verified candidate in workers of their own to collect the rest.
"""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from .locks import measurement_lock
from .pool import Limits, Worker, WorkerFault
from .result import Reason, Timing
from .transport import layouts

if TYPE_CHECKING:
    import torch

    from .pool import WorkerPool
    from .result import EvalResult

NCU_METRICS = [
    "gpu__time_duration.sum",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes.sum.per_second",
    "lts__t_bytes.sum.per_second",
    "lts__t_sector_hit_rate.pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__maximum_warps_per_active_cycle_pct",
    "launch__registers_per_thread",
    "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem",
]
STALL_PREFIX = "smsp__average_warps_issue_stalled_"
STALL_SUFFIX = "_per_issue_active.ratio"
STALL_REASONS = ["long_scoreboard", "short_scoreboard", "wait", "barrier", "math_pipe_throttle", "mio_throttle",
                 "lg_throttle", "not_selected", "selected", "dispatch_stall", "drain", "membar", "no_instruction",
                 "branch_resolving", "imc_miss", "tex_throttle", "sleeping", "misc"]
NCU_ALL_METRICS = NCU_METRICS + [f"{STALL_PREFIX}{r}{STALL_SUFFIX}" for r in STALL_REASONS]

_SHORT = {
    "gpu__time_duration.sum": "duration",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "compute_sol_pct",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": "memory_sol_pct",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_pct",
    "dram__bytes.sum.per_second": "dram_bytes_per_s",
    "lts__t_bytes.sum.per_second": "l2_bytes_per_s",
    "lts__t_sector_hit_rate.pct": "l2_hit_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
    "sm__maximum_warps_per_active_cycle_pct": "theoretical_occupancy_pct",
    "launch__registers_per_thread": "registers_per_thread",
    "launch__occupancy_limit_registers": "occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem": "occupancy_limit_shared_mem",
}
_UNIT_SCALE = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6,
               "s": 1e6}
_RATE_SCALE = {"byte/second": 1.0, "Kbyte/second": 1e3, "Mbyte/second": 1e6, "Gbyte/second": 1e9,
               "Tbyte/second": 1e12, "byte/s": 1.0, "Kbyte/s": 1e3, "Mbyte/s": 1e6, "Gbyte/s": 1e9, "Tbyte/s": 1e12,
               "KB/s": 1e3, "MB/s": 1e6, "GB/s": 1e9, "TB/s": 1e12}


class NcuKernel(BaseModel):
    name: str
    metrics: dict[str, float] = Field(default_factory=dict)
    stalls: dict[str, float] = Field(default_factory=dict, description="warp-stall reason -> cycles per issue")


class NcuReport(BaseModel):
    available: bool
    why: str | None = None
    kernels: list[NcuKernel] = Field(default_factory=list)


class KernelTime(BaseModel):
    name: str
    calls: int
    total_us: float
    share: float


class Profile(BaseModel):
    """Everything the analyst is shown about one candidate on one problem."""

    kernels: list[dict[str, Any]] = Field(default_factory=list, description="launched Triton kernels and resources")
    breakdown: list[KernelTime] = Field(default_factory=list)
    breakdown_unavailable: str | None = None
    ncu: NcuReport = Field(default_factory=lambda: NcuReport(available=False, why="not requested"))
    timing: Timing | None = None
    verdict: str = ""
    reason: str = ""
    text: str = ""
    collect_s: float | None = Field(default=None, description="wall seconds spent collecting this profile in the loop")


def ncu_unavailable_reason() -> str | None:
    """Why Nsight Compute cannot be used here, or None if the binary exists (counter access is tested by running it)."""
    if shutil.which("ncu") is None:
        return "ncu is not installed or not on PATH"
    return None


def _number(raw: str) -> float | None:
    raw = raw.strip().replace('"', "")
    if re.fullmatch(r"-?[\d,]+(\.\d+)?([eE][-+]?\d+)?", raw):
        return float(raw.replace(",", ""))
    try:
        return float(raw)
    except ValueError:
        return None


def parse_ncu_csv(text: str) -> list[NcuKernel]:
    """Parse `ncu --csv --page raw` output: a header row, a units row, then one row per profiled launch.

    Durations become microseconds and rates bytes per second, whatever units ncu chose."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    if len(lines) < 2:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    header, units, body = rows[0], rows[1], rows[2:]
    if "Kernel Name" not in header:
        return []
    if units and units[header.index("Kernel Name")]:  # no units row (e.g. --print-units base without it)
        body, units = rows[1:], [""] * len(header)
    name_col = header.index("Kernel Name")
    kernels = []
    for row in body:
        if len(row) != len(header):
            continue
        k = NcuKernel(name=row[name_col])
        for col, metric in enumerate(header):
            value = _number(row[col])
            if value is None:
                continue
            unit = units[col] if col < len(units) else ""
            if metric.startswith(STALL_PREFIX) and metric.endswith(STALL_SUFFIX):
                k.stalls[metric[len(STALL_PREFIX):-len(STALL_SUFFIX)]] = value
            elif metric in _SHORT:
                short = _SHORT[metric]
                if short == "duration":
                    short, value = "duration_us", value * _UNIT_SCALE.get(unit, 1e-3)
                elif metric.endswith("per_second"):
                    value *= _RATE_SCALE.get(unit, 1.0)
                k.metrics[short] = value
        kernels.append(k)
    return kernels


def breakdown_from_events(events: list[tuple[str, float]]) -> list[KernelTime]:
    """(kernel name, device µs) pairs from torch.profiler -> per-kernel totals, largest first."""
    totals: dict[str, list[float]] = {}
    for name, us in events:
        entry = totals.setdefault(name, [0, 0.0])
        entry[0] += 1
        entry[1] += us
    grand = sum(v[1] for v in totals.values()) or 1.0
    rows = [KernelTime(name=n, calls=int(v[0]), total_us=v[1], share=v[1] / grand) for n, v in totals.items()]
    return sorted(rows, key=lambda r: -r.total_us)


def _fmt_rate(bps: float) -> str:
    return f"{bps / 1e12:.2f} TB/s" if bps >= 1e11 else f"{bps / 1e9:.1f} GB/s"


def render(profile: Profile, limit: int = 2500) -> str:
    """A compact text rendering for prompts, bounded to `limit` characters: each figure says what it is, and
    each missing source says why it is missing."""
    out: list[str] = []
    t = profile.timing
    if t:
        line = (f"device time per forward (median of {t.reps} timed repetitions, caches flushed): {t.median_ms:.4g} ms "
                f"(p25 {t.p25_ms:.4g}, p75 {t.p75_ms:.4g}); PyTorch eager {t.eager_ms:.4g} ms")
        if t.compile_ms:
            line += f"; torch.compile ({t.compile_mode}) {t.compile_ms:.4g} ms"
        out.append(line + f"; noise band ±{t.noise_band:.1%} (smaller differences are not real)")
        if t.floor_ms and t.fraction_of_floor is not None:
            out.append(f"roofline floor (least time the problem's bytes and flops can take here) {t.floor_ms:.4g} ms, "
                       f"{t.bound}-bound; this kernel achieves {t.fraction_of_floor:.0%} of it")
        elif t.floor_unavailable:
            out.append(f"roofline floor unavailable: {t.floor_unavailable}")
    elif profile.verdict:
        out.append(f"no timing ({profile.breakdown_unavailable or 'not timed'})")
    if profile.kernels:
        out.append("Triton kernels launched during verification (launches counted over every checked forward; "
                   "grid = programs per launch; resources from the compiled kernel):")
    for k in profile.kernels[:6]:
        c = k.get("compiled") or {}
        res = ", ".join(f"{key} {c[key]}" for key in ("registers", "spills", "shared_bytes", "num_warps", "num_stages")
                        if key in c)
        grids = k.get("grids") or []
        out.append(f"- {k['name']}: {k.get('launches', 0)} launches, grid {grids[0] if grids else '?'}"
                   + (f" (+{len(grids) - 1} other grids)" if len(grids) > 1 else "")
                   + (f"; {res}" if res else "; compiled resources unavailable (nothing is compiled in Triton's "
                      "interpreter)" if not c else ""))
    if profile.breakdown:
        parts = [f"{r.name[:40]} {r.total_us / max(r.calls, 1):.1f} µs×{r.calls} ({r.share:.0%})" for r in profile.breakdown[:5]]
        out.append("device time by kernel (torch.profiler, one input set): " + "; ".join(parts))
    elif profile.breakdown_unavailable:
        out.append(f"device-time breakdown unavailable: {profile.breakdown_unavailable}")
    if profile.ncu.available:
        out.append("Nsight Compute (SOL = % of the unit's peak throughput; stalls in cycles per issued instruction):")
        for k in profile.ncu.kernels[:3]:
            m = k.metrics
            bits = []
            for key, label, fmt in (("duration_us", "duration", "{:.1f} µs"), ("memory_sol_pct", "memory SOL", "{:.0f}%"),
                                    ("compute_sol_pct", "compute SOL", "{:.0f}%"), ("dram_pct", "DRAM", "{:.0f}%"),
                                    ("achieved_occupancy_pct", "occupancy", "{:.0f}%"), ("l2_hit_pct", "L2 hit", "{:.0f}%")):
                if key in m:
                    bits.append(f"{label} {fmt.format(m[key])}")
            if "dram_bytes_per_s" in m:
                bits.append(f"DRAM {_fmt_rate(m['dram_bytes_per_s'])}")
            stalls = sorted(k.stalls.items(), key=lambda kv: -kv[1])[:3]
            if stalls:
                bits.append("top stalls " + ", ".join(f"{n} {v:.1f}" for n, v in stalls))
            out.append(f"- {k.name[:40]}: " + "; ".join(bits))
    else:
        out.append(f"Nsight Compute unavailable: {profile.ncu.why}")
    text = "\n".join(out)
    return text if len(text) <= limit else text[: limit - 20] + "\n… [truncated]"


# -- collecting a profile ---------------------------------------------------------------------------------


def _load(worker: Worker, load_payload: dict[str, Any], load_s: float) -> None:
    refused = worker.wait_ready().get("refused")
    if refused:  # the worker cannot confine the candidate and the user did not opt out: it is not sent
        raise WorkerFault(Reason.UNCONFINED, str(refused))
    header, _ = worker.request({"op": "load"}, load_payload, load_s, "import and construction", compiles=True)
    if not header.get("ok"):
        raise WorkerFault(Reason.RUNTIME_ERROR, str(header.get("detail", "load failed")))


def profile_candidate(result: EvalResult, *, device: torch.device, pool: WorkerPool, worker_limits: Limits,
                      phase_limits: dict[str, float], load_payload: dict[str, Any],
                      draw_inputs: Callable[[], list[Any]], ncu: bool = False) -> Profile:
    """Profile a candidate the evaluator has judged (`result`) for the analyst.

    A rejected candidate, or one that ran in the interpreter, gets a profile that says why there is
    nothing more. Otherwise one input set (`draw_inputs()`) is run in a fresh worker from `pool` (loaded
    with `load_payload`, the evaluator's load request) under torch.profiler for a per-kernel breakdown,
    and, when `ncu` is asked for, once more under Nsight Compute (`ncu_report`). `phase_limits` are the
    evaluator's scaled limits (`load_s`, `first_call_s`), `worker_limits` those the ncu worker starts with."""
    prof = Profile(verdict=result.verdict, reason=str(result.reason), timing=result.timing,
                   kernels=[k.model_dump() for k in result.kernels])
    if not result.passed:
        prof.breakdown_unavailable = prof.ncu.why = f"the candidate was rejected ({result.reason})"
        prof.text = f"rejected: {result.reason}: {result.detail}"
        return prof
    if device.type != "cuda":
        prof.breakdown_unavailable = "no GPU: kernels ran in Triton's interpreter"
        prof.ncu = NcuReport(available=False, why="no GPU: kernels ran in Triton's interpreter")
        prof.text = render(prof)
        return prof
    trial_inputs = draw_inputs()
    lay = layouts(trial_inputs)
    worker = pool.acquire()
    try:
        _load(worker, load_payload, phase_limits["load_s"])
        header, _ = worker.request({"op": "profile", "layouts": lay, "iterations": 3}, {"inputs": trial_inputs},
                                   phase_limits["first_call_s"], "profiling", compiles=True)
        if header.get("ok"):
            prof.breakdown = breakdown_from_events([(str(n), float(us)) for n, us in header.get("events", [])])
        else:
            prof.breakdown_unavailable = f"the profiled run failed: {str(header.get('detail', ''))[:300]}"
    except WorkerFault as f:
        prof.breakdown_unavailable = f"the profiled run failed: {f.detail}"
    finally:
        worker.close()
        pool.fill()
    prof.ncu = ncu_report(device=device, worker_limits=worker_limits, phase_limits=phase_limits,
                          load_payload=load_payload, trial_inputs=trial_inputs, input_layouts=lay,
                          kernel_names=[k.name for k in result.kernels],
                          allow_unconfined=pool.allow_unconfined) if ncu else \
        NcuReport(available=False, why="not requested (use --ncu)")
    prof.text = render(prof)
    return prof


def ncu_command(log_file: str, kernel_names: list[str]) -> list[str]:
    """The `ncu` wrapper a profiled worker is started under: CSV metrics of the candidate's own kernels
    (`kernel_names`) to `log_file`, written by ncu's front end (outside the sandbox).

    Only the worker itself is profiled (`--target-processes application-only`: ncu launches the worker's
    Python directly): ncu injects nothing into a process the candidate starts. The worker is confined
    like any other (`Worker` passes it `--profiled`)."""
    pattern = "regex:^(" + "|".join(re.escape(n) for n in kernel_names) + ")" if kernel_names else "regex:.*"
    return [shutil.which("ncu") or "ncu", "--csv", "--page", "raw", "--log-file", log_file,
            "--target-processes", "application-only", "--clock-control", "none", "--kernel-name", pattern,
            "--launch-count", "3", "--metrics", ",".join(NCU_ALL_METRICS)]


def ncu_report(*, device: torch.device, worker_limits: Limits, phase_limits: dict[str, float],
               load_payload: dict[str, Any], trial_inputs: list[Any], input_layouts: list[Any],
               kernel_names: list[str], allow_unconfined: bool = False) -> NcuReport:
    """One forward of the candidate in a fresh worker run under `ncu`, limited to its own kernels
    (`kernel_names`), holding the device's measurement lock; the parsed metrics, or why there are none.
    The worker is confined as any other; `allow_unconfined` is the user's opt-out, as for the pool's."""
    why = ncu_unavailable_reason()
    if why:
        return NcuReport(available=False, why=why)
    log_dir = tempfile.mkdtemp(prefix="kw-ncu-")
    log_file = os.path.join(log_dir, "ncu.csv")
    worker = Worker(str(device), worker_limits, wrapper=ncu_command(log_file, kernel_names),
                    allow_unconfined=allow_unconfined)
    try:
        _load(worker, load_payload, phase_limits["load_s"])
        with measurement_lock(device):
            worker.request({"op": "call", "layouts": input_layouts, "reuse": False, "profile": False, "poison": False},
                           {"inputs": trial_inputs}, phase_limits["first_call_s"] * 3, "the ncu-profiled run",
                           compiles=True)
        worker.close()
        text = open(log_file).read() if os.path.exists(log_file) else ""
    except WorkerFault as f:
        worker.close()
        return NcuReport(available=False, why=f"the ncu-profiled run failed: {f.detail}")
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)
    kernels = parse_ncu_csv(text)
    if not kernels:
        tail = " ".join(text.strip().splitlines()[-3:])[:300] if text else worker.log_tail(600).strip()[-300:]
        return NcuReport(available=False, why=f"ncu returned no metrics (counters not readable?): {tail}")
    return NcuReport(available=True, kernels=kernels)
