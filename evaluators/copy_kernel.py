"""A plain Triton device-to-device copy: one of the two copies whose best bandwidth is the roofline's
memory ceiling (the other is torch's own `copy_`). Trusted code, used only by `roofline.measure_peaks`."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


def triton_copy(src: torch.Tensor, dst: torch.Tensor, block: int = 4096) -> None:
    n = src.numel()
    _copy_kernel[(triton.cdiv(n, block),)](src, dst, n, BLOCK=block, num_warps=8)
