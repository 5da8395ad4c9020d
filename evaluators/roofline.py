"""The roofline floor of a problem: the time no implementation can beat by much.

floor = max(FLOPs / peak FLOP rate for the precision, minimum bytes / copy bandwidth), with FLOPs from
`torch.utils.flop_counter` (matmul, convolution, attention) plus one operation per output element of every
other compute op, and minimum bytes = every input, parameter and output moved once. Peaks are measured
once per device and library versions and cached on disk. Runs in the trusted process only.

The copy bandwidth depends on how many bytes move: with the L2 flushed before every repetition (as every
candidate is timed), a copy of tens of MiB ends with part of its writes still in L2 and looks faster than a
1 GiB one. So the ceiling is a curve, measured at several sizes with the same timing routine as candidates
(the best of torch's copy and a Triton copy at each size), and a problem's floor uses the bandwidth at its
own byte count (log-linear between measured sizes).
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from .torch_private import TorchDispatchMode

log = logging.getLogger(__name__)

_NON_COMPUTE = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like", "ones",
    "ones_like", "full", "full_like", "fill_", "zero_", "view", "_unsafe_view", "reshape", "_reshape_alias",
    "as_strided", "expand", "permute", "transpose", "t", "unsqueeze", "squeeze", "select", "slice", "split",
    "split_with_sizes", "unbind", "alias", "detach", "clone", "contiguous", "copy_", "_to_copy", "lift_fresh",
    "sym_size", "sym_stride", "sym_numel", "arange", "scalar_tensor", "_local_scalar_dense",
}


def cache_dir() -> Path:
    root = os.environ.get("KERNELWRIGHT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "kernelwright")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


class _Elementwise(TorchDispatchMode):
    """Counts one operation per output element of each compute op FlopCounterMode does not model."""

    def __init__(self, modelled: set[str]) -> None:
        super().__init__()
        self.modelled = modelled
        self.ops = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name not in _NON_COMPUTE and func.overloadpacket not in self.modelled:
            for o in out if isinstance(out, (tuple, list)) else [out]:
                if isinstance(o, torch.Tensor):
                    self.ops += o.numel()
        return out


@dataclass
class Work:
    flops: float
    matmul_flops: float
    elementwise_ops: float
    bytes: float


def count_work(model: torch.nn.Module, inputs: list[Any]) -> Work:
    """FLOPs and minimum bytes of one forward of `model` on `inputs` (run once, under counting modes)."""
    counter = FlopCounterMode(display=False)
    modelled = set(counter.flop_registry.keys())
    elementwise = _Elementwise(modelled)
    with torch.no_grad(), counter, elementwise:
        out = model(*inputs)
    outs = out if isinstance(out, (tuple, list)) else [out]
    nbytes = sum(x.numel() * x.element_size() for x in inputs if isinstance(x, torch.Tensor))
    nbytes += sum(p.numel() * p.element_size() for p in list(model.parameters()) + list(model.buffers()))
    nbytes += sum(o.numel() * o.element_size() for o in outs if isinstance(o, torch.Tensor))
    mm = float(counter.get_total_flops())
    return Work(flops=mm + elementwise.ops, matmul_flops=mm, elementwise_ops=float(elementwise.ops), bytes=float(nbytes))


@dataclass
class Peaks:
    """Measured ceilings of one device: bytes/s of a device-to-device copy (read + write), FLOP/s per precision."""

    device_name: str
    copy_bytes_per_s: float
    fp32_flops: float
    tf32_flops: float
    bf16_flops: float
    fp16_flops: float
    measured_at: str = ""
    copy_curve: list[list[float]] = field(default_factory=list)
    """[[bytes moved (read + write), bytes/s], ...] ascending in bytes; empty: `copy_bytes_per_s` everywhere."""

    def bandwidth_at(self, nbytes: float) -> float:
        """Copy bandwidth for a transfer of `nbytes`: interpolated in log(bytes), clamped at both ends."""
        curve = sorted(self.copy_curve)
        if not curve:
            return self.copy_bytes_per_s
        if nbytes <= curve[0][0]:
            return curve[0][1]
        for (b0, r0), (b1, r1) in zip(curve, curve[1:]):
            if nbytes <= b1:
                w = (math.log(nbytes) - math.log(b0)) / (math.log(b1) - math.log(b0))
                return r0 + w * (r1 - r0)
        return curve[-1][1]

    def flops_for(self, precision: str) -> float:
        return {"fp32": self.fp32_flops, "tf32": self.tf32_flops, "bf16": self.bf16_flops,
                "fp16": self.fp16_flops}[precision]


def _events_ms(fn: Any, reps: int) -> float:
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    return sorted(times)[len(times) // 2]


COPY_SIZES_LOG2 = (18, 20, 22, 24, 26, 28)
"""fp32 elements per copy: 2 MiB to 2 GiB moved (read + write)."""


def measure_peaks(device: torch.device) -> Peaks:
    """Measure copy bandwidth and matmul throughput (a few seconds). Call through `device_peaks`."""
    from .copy_kernel import triton_copy
    from .timing import flush_buffer, measure

    with torch.cuda.device(device):
        curve = []
        flush = flush_buffer(device)
        for log2 in COPY_SIZES_LOG2:
            n = 1 << log2
            src = torch.randn(n, device=device)
            dst = torch.empty_like(src)
            best_ms = min(
                measure(lambda _i, f=f: f(), 1, device, reps=30, flush=flush).summary()["median_ms"]
                for f in (lambda: dst.copy_(src), lambda: triton_copy(src, dst)))
            curve.append([float(2 * n * 4), 2 * n * 4 / (best_ms / 1e3)])
            del src, dst
        del flush
        bw = max(rate for _, rate in curve)
        rates = {}
        size = 8192
        saved = torch.backends.cuda.matmul.allow_tf32
        try:
            for name, dtype, tf32 in (("fp32", torch.float32, False), ("tf32", torch.float32, True),
                                      ("bf16", torch.bfloat16, False), ("fp16", torch.float16, False)):
                torch.backends.cuda.matmul.allow_tf32 = tf32
                a = torch.randn(size, size, device=device, dtype=dtype)
                b = torch.randn(size, size, device=device, dtype=dtype)
                ms = _events_ms(lambda: a @ b, 5)
                rates[name] = 2 * size ** 3 / (ms / 1e3)
                del a, b
        finally:
            torch.backends.cuda.matmul.allow_tf32 = saved
        torch.cuda.empty_cache()
    return Peaks(device_name=torch.cuda.get_device_name(device), copy_bytes_per_s=bw, fp32_flops=rates["fp32"],
                 tf32_flops=rates["tf32"], bf16_flops=rates["bf16"], fp16_flops=rates["fp16"],
                 measured_at=time.strftime("%Y-%m-%dT%H:%M:%S"), copy_curve=curve)


def device_peaks(device: torch.device) -> Peaks:
    """The device's peaks, measured once and cached per device name, driver and torch version."""
    name = torch.cuda.get_device_name(device)
    key = f"v2-{name}-torch{torch.__version__}-cuda{torch.version.cuda}".replace(" ", "_").replace("/", "_")
    path = cache_dir() / f"peaks-{key}.json"
    if path.exists():
        try:
            return Peaks(**json.loads(path.read_text()))
        except (ValueError, TypeError):
            log.warning("ignoring unreadable peaks cache %s", path)
    peaks = measure_peaks(device)
    path.write_text(json.dumps(asdict(peaks), indent=1))
    return peaks


def floor_ms(work: Work, peaks: Peaks, precision: str) -> dict[str, float]:
    """The roofline floor and which side of the roofline bounds it."""
    compute_ms = work.matmul_flops / peaks.flops_for(precision) * 1e3 + work.elementwise_ops / peaks.fp32_flops * 1e3
    memory_ms = work.bytes / peaks.bandwidth_at(work.bytes) * 1e3
    return {"floor_ms": max(compute_ms, memory_ms), "compute_ms": compute_ms, "memory_ms": memory_ms,
            "bound": "compute" if compute_ms >= memory_ms else "memory"}
