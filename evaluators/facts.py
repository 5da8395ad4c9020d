"""The device's facts, as the roles are shown them: which GPU, its SMs, L2, shared memory and registers per
SM, the copy bandwidth measured at this problem's size and the matmul peaks the roofline floor comes from,
and what can be admitted on it. On the CPU: that nothing is timed, and what that means for a step.

Pure data plus one collector (`device_facts`) and one renderer (`render_facts`); the peaks come from
`roofline.device_peaks` (measured once per device and cached), the rest from the CUDA driver's properties.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

if TYPE_CHECKING:
    import torch

    from .roofline import Peaks

CPU_ADMISSION = (
    "This run is on the CPU: kernels run in Triton's interpreter, so nothing is timed. A child that passes "
    "verification is kept as 'unmeasured' (correct, unranked) and a later step builds on it; no child can be "
    "shown faster here, so aim for a correct, well-structured change whose speed a GPU run will measure.")
GPU_ADMISSION = (
    "A child is admitted as an elite when it is verified correct, its timing is not suspect, and it is faster "
    "than its parent by more than the measurement's noise band; a child no slower than its parent that is "
    "structurally new (different warps, stages, block size or bound) may fill an empty niche instead.")


class DeviceFacts(BaseModel):
    """What a role is told about the device its candidates are judged on."""

    device: str = Field(description="cpu or cuda:N")
    name: str = Field(description="the device's name")
    timed: bool = Field(description="whether candidates are timed on it")
    admission: str = Field(description="what can be admitted on this device, in two sentences")
    compute_capability: str | None = None
    sms: int | None = Field(default=None, description="streaming multiprocessors")
    l2_bytes: int | None = None
    smem_per_sm_bytes: int | None = Field(default=None, description="shared memory per SM")
    smem_per_block_bytes: int | None = Field(default=None, description="shared memory one program may opt into")
    regs_per_sm: int | None = Field(default=None, description="32-bit registers per SM")
    max_threads_per_sm: int | None = None
    memory_bytes: int | None = None
    problem_bytes: float | None = Field(default=None, description="bytes the reference's forward reads and writes")
    copy_bytes_per_s: float | None = Field(default=None, description="measured device copy bandwidth at that size")
    peak_copy_bytes_per_s: float | None = Field(default=None, description="best measured copy bandwidth, any size")
    matmul_flops: dict[str, float] = Field(default_factory=dict, description="measured matmul FLOP/s per precision")
    unavailable: str | None = Field(default=None, description="what could not be read, and why")


def cpu_facts() -> DeviceFacts:
    return DeviceFacts(device="cpu", name="CPU (Triton interpreter)", timed=False, admission=CPU_ADMISSION)


def device_facts(device: torch.device, problem_bytes: float | None = None, peaks: Peaks | None = None,
                 timed: bool = True) -> DeviceFacts:
    """The facts of `device`: driver properties, and from `peaks` (measured; None: not measured yet) the
    copy bandwidth at `problem_bytes` and the matmul peaks."""
    if device.type != "cuda":
        return cpu_facts()
    import torch

    p = torch.cuda.get_device_properties(device)
    facts = DeviceFacts(
        device=str(device), name=p.name, timed=timed,
        admission=GPU_ADMISSION if timed else "Timing is switched off for this run: no child can be admitted as faster.",
        compute_capability=f"{p.major}.{p.minor}", sms=p.multi_processor_count,
        l2_bytes=getattr(p, "L2_cache_size", None) or None,
        smem_per_sm_bytes=getattr(p, "shared_memory_per_multiprocessor", None) or None,
        smem_per_block_bytes=getattr(p, "shared_memory_per_block_optin", None) or None,
        regs_per_sm=getattr(p, "regs_per_multiprocessor", None) or None,
        max_threads_per_sm=getattr(p, "max_threads_per_multi_processor", None) or None,
        memory_bytes=p.total_memory, problem_bytes=problem_bytes)
    if peaks is None:
        facts.unavailable = "bandwidth and matmul peaks: not measured yet (they are measured with the first timing)"
        return facts
    facts.peak_copy_bytes_per_s = max([r for _, r in peaks.copy_curve] or [peaks.copy_bytes_per_s])
    if problem_bytes:
        facts.copy_bytes_per_s = peaks.bandwidth_at(problem_bytes)
    facts.matmul_flops = {k: getattr(peaks, f"{k}_flops") for k in ("fp32", "tf32", "bf16", "fp16")}
    return facts


MAX_PROGRAMS_PER_SM = 32
"""resident thread blocks per SM, the hardware's cap on every architecture since Maxwell"""


def residency(compiled: dict[str, int], f: DeviceFacts) -> tuple[int, str] | None:
    """How many programs of a compiled kernel one SM holds at once, by its registers, warps and shared memory
    against the device's (the theoretical occupancy's count, registers allocated per warp in 256s), and which
    of those limits it; None where the compiled resources or the device's are unknown (the interpreter).
    A persistent grid larger than this times the SMs runs in waves, and a ticket wait that counts on every
    program being resident spins (a relay model on level1/35_GroupNorm_ learned its grid was 1.3 waves only
    after the verifier had timed it)."""
    warps, regs = compiled.get("num_warps"), compiled.get("registers")
    if not warps or regs is None or not f.regs_per_sm or not f.max_threads_per_sm:
        return None
    limits = {"threads": f.max_threads_per_sm // (32 * warps), "programs per SM": MAX_PROGRAMS_PER_SM}
    per_warp = -(-max(regs, 1) * 32 // 256) * 256
    limits["registers"] = f.regs_per_sm // (per_warp * warps)
    shared = compiled.get("shared_bytes") or 0
    if shared and f.smem_per_sm_bytes:
        limits["shared memory"] = f.smem_per_sm_bytes // (shared + 1024)  # 1 KB reserved per program since sm80
    least = min(limits.values())
    return least, " and ".join(k for k, v in limits.items() if v == least)


def programs_in(grid: list[int]) -> int:
    """The programs of a launch grid."""
    n = 1
    for g in grid:
        n *= int(g)
    return n


def second_wave(programs: int, compiled: dict[str, int], f: DeviceFacts) -> str:
    """What a launch of `programs` programs of a compiled kernel leaves waiting when more than one wave but less
    than two fit (`residency`): the programs beyond what the SMs hold at once run as a second, partial wave, and
    where registers bind, the registers per thread at which one wave would hold them all. Empty otherwise (one
    wave, or a grid of many waves, which is a plain grid's normal way to run).

    A persistent grid of 5 programs per SM on an H100 compiled to 107 registers (4 per SM): 132 of its 660
    programs ran as a second wave and its ticket waits spun; the model saw it only by comparing the numbers
    (issue 23: "A direct 'grid exceeds resident capacity' line would help")."""
    fit = residency(compiled, f)
    if not fit or fit[0] <= 0 or not f.sms:
        return ""
    per_sm, why = fit
    resident = per_sm * f.sms
    if not resident < programs < 2 * resident:
        return ""
    regs = compiled.get("registers")
    limit = f"limited by {why}" + (f": {regs} per thread" if "registers" in why and regs else "")
    text = (f"grid exceeds resident capacity: {programs} programs > {resident} resident at once ({per_sm} per SM "
            f"x {f.sms} SMs, {limit}), so {programs - resident} wait for a second, partial wave "
            f"({programs / resident:.3g} waves)")
    need = -(-programs // f.sms)  # programs per SM that would hold the whole grid in one wave
    if "registers" in why and regs:
        # the same occupancy model at fewer registers: the most that still lets `need` programs share an SM
        fewer = next((r for r in range(regs - 1, 0, -1)
                      if (residency({**compiled, "registers": r}, f) or (0, ""))[0] >= need), None)
        if fewer is not None:
            text += f"; at {fewer} registers or fewer, {need} per SM would hold all {programs}"
    return text


def waves_line(kernels: list[dict], f: DeviceFacts, limit: int = 2) -> str:
    """The compiled kernels of a draft as the quick check reports them: per kernel (at most `limit`, in the
    order given) its largest grid, registers, spills, warps and shared memory, the programs one SM holds at once and the
    waves its grid makes on the device's SMs, or, where its grid is more than one wave but less than two, what
    waits for the second (`second_wave`). Empty where nothing was compiled (Triton's interpreter)."""
    parts = []
    for k in kernels[:limit]:
        c = k.get("compiled") or {}
        if not c:
            continue
        grids = k.get("grids") or [[]]
        grid = max(grids, key=programs_in)  # the problem's own launch, not a smaller test input's
        programs = programs_in(grid)
        res = ", ".join(f"{c[key]} {word}" for key, word in (("registers", "registers"), ("spills", "spills"),
                                                             ("num_warps", "warps")) if c.get(key) is not None)
        if c.get("shared_bytes"):
            res += f", {_size(c['shared_bytes'])} shared"
        line = f"{k.get('name')}: grid {'x'.join(map(str, grid)) or '?'} ({res})"
        fit = residency(c, f)
        partial = second_wave(programs, c, f) if grid else ""
        if partial:
            line += f"; {partial}"
        elif fit and fit[0] > 0 and f.sms and grid:
            per_sm, why = fit
            line += (f"; {per_sm} program{'s' if per_sm != 1 else ''} per SM at once (limited by {why}), so "
                     f"{programs} programs make {programs / (per_sm * f.sms):.2g} waves on {f.sms} SMs")
        parts.append(line)
    return "compiled: " + "; ".join(parts) if parts else ""


def _size(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def render_facts(f: DeviceFacts, brief: bool = False, admission: bool = True) -> str:
    """A few lines for a prompt (under 900 characters); `brief`: the device and its resources, without the
    measured bandwidth and matmul peaks (for a role that reads a diagnosis made from them); `admission`: with the
    rule a child is admitted by (the strategist's concern, not the coder's)."""
    if not f.timed and f.device == "cpu":
        return f"device: {f.name}; nothing is timed here.\n{f.admission}"
    lines = [f"device: {f.name} ({f.device}, compute capability {f.compute_capability})"]
    res = []
    if f.sms:
        res.append(f"{f.sms} SMs")
    if f.l2_bytes:
        res.append(f"L2 {_size(f.l2_bytes)}")
    if f.smem_per_sm_bytes:
        res.append(f"shared memory {_size(f.smem_per_sm_bytes)}/SM"
                   + (f" ({_size(f.smem_per_block_bytes)} per program)" if f.smem_per_block_bytes else ""))
    if f.regs_per_sm:
        res.append(f"{f.regs_per_sm} registers/SM")
    if f.max_threads_per_sm:
        res.append(f"{f.max_threads_per_sm} threads/SM ({f.max_threads_per_sm // 32} warps)")
    if f.memory_bytes:
        res.append(f"{_size(f.memory_bytes)} memory")
    if res:
        lines.append(", ".join(res))
    if brief:
        return "\n".join([*lines, f.admission] if admission else lines)
    if f.copy_bytes_per_s and f.problem_bytes:
        lines.append(f"this problem moves {_size(f.problem_bytes)} at least; measured copy bandwidth at that size "
                     f"{f.copy_bytes_per_s / 1e9:.0f} GB/s (best at any size {(f.peak_copy_bytes_per_s or 0) / 1e9:.0f} GB/s)")
    elif f.peak_copy_bytes_per_s:
        lines.append(f"measured copy bandwidth up to {f.peak_copy_bytes_per_s / 1e9:.0f} GB/s")
    if f.matmul_flops:
        lines.append("measured matmul peaks: " + ", ".join(f"{k} {v / 1e12:.0f} TFLOP/s" for k, v in f.matmul_flops.items()))
    if f.unavailable:
        lines.append(f"unavailable: {f.unavailable}")
    lines.append(f.admission)
    return "\n".join(lines)
