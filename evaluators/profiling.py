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

from .facts import DeviceFacts, device_facts, programs_in, second_wave
from .locks import measurement_lock
from .pool import Limits, Worker, WorkerFault, WorkerStartFailure
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
    "launch__occupancy_limit_warps",
    "launch__occupancy_limit_blocks",
    "launch__waves_per_multiprocessor",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "lts__t_sectors_op_read.sum",
    "lts__t_sectors_op_write.sum",
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
    "launch__occupancy_limit_warps": "occupancy_limit_warps",
    "launch__occupancy_limit_blocks": "occupancy_limit_blocks",
    "launch__waves_per_multiprocessor": "waves_per_sm",
    "dram__bytes_read.sum": "dram_read_bytes",
    "dram__bytes_write.sum": "dram_write_bytes",
    "lts__t_sectors_op_read.sum": "l2_read_bytes",
    "lts__t_sectors_op_write.sum": "l2_write_bytes",
}
"""Nsight Compute metric -> the short name a profile keeps (agents' `diagnose` reads these; keep them stable)."""
_UNIT_SCALE = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6,
               "s": 1e6}
_PREFIX = {"": 1.0, "K": 1e3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2.0 ** 10, "Mi": 2.0 ** 20,
           "Gi": 2.0 ** 30, "Ti": 2.0 ** 40}
_AMOUNT_UNIT = re.compile(r"(?P<prefix>[KkMGT]i?)?(?P<base>byte|B|sector)s?(?P<rate>/(?:second|s))?")
SECTOR_BYTES = 32
"""bytes in one L2 sector (the unit of `lts__t_sectors_*`)"""
OCCUPANCY_LIMITS = (("registers", "occupancy_limit_registers"), ("shared memory", "occupancy_limit_shared_mem"),
                    ("warps", "occupancy_limit_warps"), ("block limit", "occupancy_limit_blocks"))
"""what can bound the blocks an SM holds at once, and the short metric that says how many it allows"""


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
    problem_bytes: float | None = Field(
        default=None, description="the least bytes one forward must move (inputs, parameters, outputs), where no "
                                  "timing carries them (`Timing.bytes`), e.g. on the CPU")
    device: DeviceFacts | None = Field(
        default=None, description="the GPU's resources (SMs, registers, shared memory), against which a launch's "
                                  "grid is counted in waves (`facts.second_wave`); None on the CPU")


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


def _amount(value: float, unit: str, metric: str) -> float:
    """`value` in `unit` as bytes (or bytes per second for a rate): ncu scales units as it likes (byte, Kbyte,
    Mbyte, GB/s, ...); L2 sectors become bytes. A missing unit means ncu's base unit."""
    m = _AMOUNT_UNIT.fullmatch(unit.strip())
    scale = _PREFIX[m["prefix"] or ""] if m else 1.0
    sectors = (m["base"] == "sector") if m else "sectors" in metric.split(".")[0]
    return value * scale * (SECTOR_BYTES if sectors else 1)


def parse_ncu_csv(text: str) -> list[NcuKernel]:
    """Parse `ncu --csv --page raw` output: a header row, a units row, then one row per profiled launch.

    Durations become microseconds, rates bytes per second and amounts (bytes, L2 sectors) bytes, whatever
    units ncu chose. Columns that are missing are simply absent from the kernel's metrics."""
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
                elif metric.endswith("per_second") or short.endswith("_bytes"):
                    value = _amount(value, unit, metric)
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


def _fmt_bytes(n: float) -> str:
    for scale, unit in ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "KB")):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def occupancy_limiter(metrics: dict[str, float]) -> tuple[list[str], float] | None:
    """What binds a kernel's theoretical occupancy: the limits (`OCCUPANCY_LIMITS`) that allow the fewest blocks
    per SM, and that number; None when ncu reported none of them."""
    limits = {what: metrics[key] for what, key in OCCUPANCY_LIMITS if key in metrics}
    if not limits:
        return None
    least = min(limits.values())
    return [what for what, n in limits.items() if n == least], least


def design_bytes(kernels: list[dict[str, Any]],
                 measured: list[NcuKernel] | None = None) -> tuple[float, int, int, int] | None:
    """The bytes the kernels' design needs at best per forward: the sum over its kernels of the bytes their
    launches' tensor arguments span (`KernelLaunch.arg_bytes_per_forward`, each argument read or written once),
    with the number of kernels and launches it covers and how many kernels were capped by a measurement; None
    when no launch recorded them.

    A launch that touches only part of its arguments (a clean-up pass over the few tiles a fused kernel deferred,
    handed whole buffers) is over-counted by the estimate: where Nsight Compute measured a kernel's DRAM bytes
    per launch (`measured`), the smaller of the two counts. A model on level1/35_GroupNorm_ was told its fused
    design needed 30.1 GB at best (the clean-up launch charged 15 GB; Nsight: 113 MB) and ran "0.74x" of that."""
    known = [k for k in kernels if isinstance(k.get("arg_bytes_per_forward"), (int, float))]
    if not known:
        return None
    per_launch: dict[str, float] = {}
    for m in measured or []:
        r, w = m.metrics.get("dram_read_bytes"), m.metrics.get("dram_write_bytes")
        if r is not None and w is not None:
            per_launch[m.name] = max(per_launch.get(m.name, 0.0), float(r) + float(w))
    total, capped = 0.0, 0
    for k in known:
        est = float(k["arg_bytes_per_forward"])
        n = k.get("launches_per_forward") or 0
        seen = [v for name, v in per_launch.items() if name.startswith(str(k["name"]))]
        if seen and n and max(seen) * n < est:
            est, capped = max(seen) * n, capped + 1
        total += est
    return total, len(known), int(sum(k.get("launches_per_forward") or 0 for k in known)), capped


def _bytes_lines(profile: Profile) -> list[str]:
    """The problem's bytes against the design's, with the times they imply at the roofline's bandwidth, and
    how much of the gap to the floor is the structure and how much is inefficiency within it."""
    t = profile.timing
    problem = (t.bytes if t is not None and t.bytes else None) or profile.problem_bytes
    design = design_bytes(profile.kernels, profile.ncu.kernels if profile.ncu.available else None)
    if problem is None and design is None:
        return []
    bw = t.bandwidth if t is not None else None
    parts = []
    if problem:
        parts.append(f"the problem needs {_fmt_bytes(problem)}"
                     + (f" ({problem / bw * 1e3:.3g} ms at {_fmt_rate(bw)})" if bw else ""))
    design_ms = None
    if design is not None:
        nbytes, n_kernels, n_launches, capped = design
        if bw:
            design_ms = max(nbytes / bw * 1e3, (t.compute_floor_ms if t is not None else None) or 0.0)
        parts.append(f"this design ({n_kernels} kernel{'s' if n_kernels != 1 else ''}, {n_launches} launch"
                     f"{'es' if n_launches != 1 else ''}) needs at best {_fmt_bytes(nbytes)}"
                     + (f" ({design_ms:.3g} ms)" if design_ms else "")
                     + ", estimated from the launch's tensor arguments (each read or written once)"
                     + (f"; {capped} kernel{'s' if capped != 1 else ''} counted at Nsight Compute's measured bytes, "
                        "fewer than their arguments span" if capped else ""))
    out = ["bytes per forward: " + "; ".join(parts)]
    if design is not None and problem:
        if t is not None and t.floor_ms and design_ms and t.median_ms < design_ms * 0.95:
            out.append("structure: the kernels ran faster than the design floor estimated from their arguments "
                       "(they touch less than their arguments span), so the estimate says nothing here; the "
                       f"problem floor: measured / problem floor = {t.median_ms / t.floor_ms:.2f}×")
        elif t is not None and t.floor_ms and design_ms:
            out.append(f"structure: design floor / problem floor = {design_ms / t.floor_ms:.2f}×; within the design: "
                       f"measured / design floor = {t.median_ms / design_ms:.2f}×"
                       + (" (the estimate misses traffic outside the kernels' arguments)" if design[0] < problem
                          else ""))
        else:
            out.append(f"structure: design bytes / problem bytes = {design[0] / problem:.2f}×")
    return out


EXTRA_BYTES_SAID = 1.05
"""a launch's DRAM traffic beyond this multiple of its arguments' bytes is said in bytes too (`_ncu_line`)"""


def _ncu_line(k: NcuKernel, arg_bytes: dict[str, float]) -> str:
    """One profiled launch on one line; `arg_bytes` (Triton kernel name -> bytes its tensor arguments span per
    launch) puts the DRAM traffic against what the launch needs at best."""
    m = k.metrics
    bits = []
    for key, label, fmt in (("duration_us", "duration", "{:.1f} µs"), ("memory_sol_pct", "memory SOL", "{:.0f}%"),
                            ("compute_sol_pct", "compute SOL", "{:.0f}%")):
        if key in m:
            bits.append(f"{label} {fmt.format(m[key])}")
    dram = []
    if "dram_bytes_per_s" in m:
        dram.append(_fmt_rate(m["dram_bytes_per_s"]) + (f" ({m['dram_pct']:.0f}% of peak)" if "dram_pct" in m else ""))
    elif "dram_pct" in m:
        dram.append(f"{m['dram_pct']:.0f}% of peak")
    if "dram_read_bytes" in m or "dram_write_bytes" in m:
        r, w = m.get("dram_read_bytes"), m.get("dram_write_bytes")
        moved = " + ".join(f"{what} {_fmt_bytes(v)}" for what, v in (("read", r), ("write", w)) if v is not None)
        if r is not None and w is not None:
            named = max((name for name in arg_bytes if k.name.startswith(name)), key=len, default=None)
            own = arg_bytes[named] if named is not None else None
            moved += f" = {_fmt_bytes(r + w)}" + (f" ({(r + w) / own:.2f}× its arguments' bytes)" if own else "")
            if own and r + w > own * EXTRA_BYTES_SAID:
                # said in bytes: a relay model on GroupNorm read "1.11×" and only later saw that a quarter of its
                # re-reads through L2 missed; the figure names where the extra traffic comes from
                moved += (f", {_fmt_bytes(r + w - own)} more than its arguments span (re-reads that missed L2, "
                          "spills, or scratch buffers)")
        dram.append(moved)
    if dram:
        bits.append("DRAM " + ": ".join(dram))
    l2 = [f"{what} {_fmt_bytes(m[key])}" for what, key in (("read", "l2_read_bytes"), ("write", "l2_write_bytes"))
          if key in m]
    if "l2_hit_pct" in m:
        l2.append(f"hit {m['l2_hit_pct']:.0f}%")
    if l2:
        bits.append("L2 " + ", ".join(l2))
    occ = []
    if "achieved_occupancy_pct" in m:
        occ.append(f"achieved {m['achieved_occupancy_pct']:.0f}%"
                   + (f" of theoretical {m['theoretical_occupancy_pct']:.0f}%" if "theoretical_occupancy_pct" in m
                      else ""))
    elif "theoretical_occupancy_pct" in m:
        occ.append(f"theoretical {m['theoretical_occupancy_pct']:.0f}%")
    limiter = occupancy_limiter(m)
    if limiter:
        which, least = limiter
        others = ", ".join(f"{what} {m[key]:.0f}" for what, key in OCCUPANCY_LIMITS if key in m and what not in which)
        occ.append(f"bound by {' and '.join(which)}: {least:.0f} blocks/SM" + (f" ({others})" if others else ""))
    if "registers_per_thread" in m:
        occ.append(f"{m['registers_per_thread']:.0f} registers/thread")
    if occ:
        bits.append("occupancy " + ", ".join(occ))
    if "waves_per_sm" in m:
        bits.append(f"{m['waves_per_sm']:.2g} waves")
    stalls = sorted(k.stalls.items(), key=lambda kv: -kv[1])[:3]
    if stalls:
        bits.append("top stalls " + ", ".join(f"{n} {v:.1f}" for n, v in stalls))
    return f"- {k.name[:40]}: " + "; ".join(bits)


def _arg_bytes_per_launch(profile: Profile) -> dict[str, float]:
    """Triton kernel name -> the bytes its tensor arguments span per launch (what `_ncu_line` sets DRAM against)."""
    return {str(k["name"]): k["arg_bytes_per_forward"] / k["launches_per_forward"] for k in profile.kernels
            if k.get("arg_bytes_per_forward") and k.get("launches_per_forward")}


def headline(profile: Profile) -> str | None:
    """The profiled launch that took the most time, on one line (`_ncu_line`), for a history line: the roles saw
    only the speed-up of a child that lost to its parent, and a model guessed why (level1/35_GroupNorm_ on an
    H200, issue 23: "rejected children get no profile, so step 4's cause is a guess"). None without Nsight Compute."""
    if not profile.ncu.available or not profile.ncu.kernels:
        return None
    per_launch = _arg_bytes_per_launch(profile)
    top = max(profile.ncu.kernels, key=lambda k: float(k.metrics.get("duration_us") or 0.0))
    return _ncu_line(top, per_launch).removeprefix("- ")


KEEP, HIGH, MID, LOW = 3, 2, 1, 0
"""render's priorities: lines of KEEP are only ever truncated; the others are left out, lowest first, to fit."""


def render(profile: Profile, limit: int = 2500) -> str:
    """A compact text rendering for prompts, bounded to `limit` characters: each figure says what it is, and
    each missing source says why it is missing. To fit, the less useful lines (further kernels, the
    breakdown, the launch list) are left out before the timing, the bytes and Nsight Compute's figures."""
    out: list[tuple[int, str]] = []
    t = profile.timing
    if t:
        line = (f"device time per forward (median of {t.reps} timed repetitions, caches flushed): {t.median_ms:.4g} ms "
                f"(p25 {t.p25_ms:.4g}, p75 {t.p75_ms:.4g}); PyTorch eager {t.eager_ms:.4g} ms")
        if t.compile_ms:
            line += f"; torch.compile ({t.compile_mode}) {t.compile_ms:.4g} ms"
            others = [f"{mode} {v:.4g} ms" if isinstance(v, (int, float)) else
                      f"{mode} not timed (CUDA graphs at this size)" if str(v).startswith("not timed") else f"{mode} failed"
                      for mode, v in (t.compile_modes or {}).items() if mode != t.compile_mode]
            if others:  # every mode measured, not only the fastest (a run asked for max-autotune saw one figure)
                line += f" (the fastest measured; also {', '.join(others)})"
        out.append((KEEP, line + f"; noise band ±{t.noise_band:.1%} (smaller differences are not real)"))
        if t.floor_ms and t.fraction_of_floor is not None:
            out.append((KEEP, f"roofline floor (least time the problem's bytes and flops can take here) "
                              f"{t.floor_ms:.4g} ms, {t.bound}-bound; this kernel achieves {t.fraction_of_floor:.0%} "
                              "of it"))
        elif t.floor_unavailable:
            out.append((HIGH, f"roofline floor unavailable: {t.floor_unavailable}"))
    elif profile.verdict:
        out.append((HIGH, f"no timing ({profile.breakdown_unavailable or 'not timed'})"))
    out += [(KEEP, line) for line in _bytes_lines(profile)]
    if profile.kernels:
        out.append((MID, "Triton kernels launched during verification (launches counted over every checked "
                         "forward; grid = programs per launch; resources from the compiled kernel; args = bytes "
                         "its tensor arguments span per launch, estimated):"))
    for i, k in enumerate(profile.kernels[:6]):
        c = k.get("compiled") or {}
        res = ", ".join(f"{key} {c[key]}" for key in ("registers", "spills", "shared_bytes", "num_warps", "num_stages")
                        if key in c)
        grids = k.get("grids") or []
        per_fwd, n = k.get("arg_bytes_per_forward"), k.get("launches_per_forward")
        args = f"; args {_fmt_bytes(per_fwd / n)}" if isinstance(per_fwd, (int, float)) and n else ""
        # a grid of more than one wave but less than two (the problem's own launch, the largest) is said outright,
        # and kept when the text is cut: a persistent kernel's programs beyond one wave wait (issue 23)
        partial = second_wave(max(programs_in(g) for g in grids), c, profile.device) \
            if c and grids and profile.device else ""
        out.append((HIGH if partial else MID if i < 2 else LOW,
                    f"- {k['name'][:60]}: {k.get('launches', 0)} launches, grid {grids[0] if grids else '?'}"
                    + (f" (+{len(grids) - 1} other grids)" if len(grids) > 1 else "") + args
                    + (f"; {res}" if res else "; compiled resources unavailable (nothing is compiled in Triton's "
                       "interpreter)" if not c else "") + (f"; {partial}" if partial else "")))
    if profile.breakdown:
        parts = [f"{r.name[:40]} {r.total_us / max(r.calls, 1):.1f} µs×{r.calls} ({r.share:.0%})" for r in profile.breakdown[:5]]
        out.append((MID, "device time by kernel (torch.profiler, one input set): " + "; ".join(parts)))
    elif profile.breakdown_unavailable:
        out.append((MID, f"device-time breakdown unavailable: {profile.breakdown_unavailable}"))
    if profile.ncu.available:
        out.append((HIGH, "Nsight Compute (SOL = % of the unit's peak throughput; bytes per profiled launch; "
                          "stalls in cycles per issued instruction):"))
        per_launch = _arg_bytes_per_launch(profile)
        # the kernels that take the time first: a small pre-pass launched first must not push the main kernel's
        # line out when the text is cut to fit (a model on level2/37 lost the line of the kernel taking 93 %)
        by_time = sorted(profile.ncu.kernels, key=lambda k: -float(k.metrics.get("duration_us") or 0.0))
        out += [(HIGH if i == 0 else MID, _ncu_line(k, per_launch)) for i, k in enumerate(by_time[:3])]
    else:
        out.append((MID, f"Nsight Compute unavailable: {profile.ncu.why}"))
    return _fit([(prio, line) for prio, line in out], limit)


def _fit(lines: list[tuple[int, str]], limit: int) -> str:
    """Join `lines`, leaving out the lowest-priority ones (latest first) until the text fits `limit`; what still
    does not fit is cut, and either is said."""
    kept = list(lines)
    left_out = 0

    def text() -> str:
        body = "\n".join(line for _, line in kept)
        return body + (f"\n({left_out} less useful line{'s' if left_out != 1 else ''} left out to fit)"
                       if left_out else "")

    while len(text()) > limit:
        droppable = [i for i, (prio, _) in enumerate(kept) if prio < KEEP]
        if not droppable:
            break
        least = min(kept[i][0] for i in droppable)
        drop = max(i for i in droppable if kept[i][0] == least)
        del kept[drop]
        left_out += 1
    body = text()
    return body if len(body) <= limit else body[: limit - 20] + "\n… [truncated]"


# -- collecting a profile ---------------------------------------------------------------------------------


def _load(worker: Worker, load_payload: dict[str, Any], load_s: float) -> None:
    refused = worker.wait_ready().get("refused")
    if refused:  # the worker cannot confine the candidate and the user did not opt out: it is not sent
        raise WorkerFault(Reason.UNCONFINED, str(refused))
    header, _ = worker.request({"op": "load"}, load_payload, load_s, "import and construction", compiles=True)
    if not header.get("ok"):
        raise WorkerFault(Reason.RUNTIME_ERROR, str(header.get("detail", "load failed")))


def problem_bytes(result: EvalResult) -> float | None:
    """The least bytes one forward of the problem moves: the roofline's (`Timing.bytes`) when timed, else the
    inputs, parameters and outputs of the memory plan the evaluation ran under (the same sum)."""
    if result.timing is not None and result.timing.bytes:
        return result.timing.bytes
    footprint = (result.memory or {}).get("footprint") or {}
    parts = [footprint.get(key) for key in ("input_bytes", "param_bytes", "output_bytes")]
    return float(sum(parts)) if all(isinstance(v, (int, float)) for v in parts) and sum(parts) > 0 else None


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
                   kernels=[k.model_dump() for k in result.kernels], problem_bytes=problem_bytes(result))
    if not result.passed:
        prof.breakdown_unavailable = prof.ncu.why = f"the candidate was rejected ({result.reason})"
        prof.text = f"rejected: {result.reason}: {result.detail}"
        return prof
    if device.type != "cuda":
        prof.breakdown_unavailable = "no GPU: kernels ran in Triton's interpreter"
        prof.ncu = NcuReport(available=False, why="no GPU: kernels ran in Triton's interpreter")
        prof.text = render(prof)
        return prof
    try:  # informative: the waves a launch's grid makes are said only where the device's resources are known
        prof.device = device_facts(device)
    except Exception:  # noqa: BLE001
        prof.device = None
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
    except WorkerStartFailure as f:  # the profiling worker, not the candidate (which never reached it)
        prof.breakdown_unavailable = f"no profiled run: {f.detail}"
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
        said = "no ncu-profiled run" if isinstance(f, WorkerStartFailure) else "the ncu-profiled run failed"
        return NcuReport(available=False, why=f"{said}: {f.detail}")
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)
    kernels = parse_ncu_csv(text)
    if not kernels:
        tail = " ".join(text.strip().splitlines()[-3:])[:300] if text else worker.log_tail(600).strip()[-300:]
        return NcuReport(available=False, why=f"ncu returned no metrics (counters not readable?): {tail}")
    return NcuReport(available=True, kernels=kernels)
