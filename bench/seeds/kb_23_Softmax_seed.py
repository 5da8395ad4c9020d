"""Seed kernel for KernelBench level1/23_Softmax: softmax over dim 1 of a (rows, cols) fp32 tensor
(the problem ships 4096 x 393216, far wider than one program's registers). Two kernels:

1. `_row_stats`, one program per row: walks the row in BLOCK-wide tiles keeping, per lane, a running maximum
   and a running sum of exp(x - max) rescaled whenever the maximum grows (online softmax); at the end the
   lanes are merged into the row's maximum and 1 / sum, stored in `stats` (rows x 2).
2. `_normalize`, a (rows, column chunks) grid: each program takes its share of one row's columns
   (cdiv(cols, programs along axis 1) of them, so the grid's chunk count and BLOCK are independent: any
   values are correct) and writes exp(x - max) * (1 / sum) tile by tile.

Two reads and one write of the tensor. Block sizes and warps are literals in the launches.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _row_stats(x_ptr, stats_ptr, n_cols, stride_x, BLOCK: tl.constexpr):
    """stats[row] = (max_j x[row, j], 1 / sum_j exp(x[row, j] - max)), in fp32."""
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    offs = tl.arange(0, BLOCK)
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        idx = start + offs
        x = tl.load(x_row + idx, mask=idx < n_cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        # a lane that has seen only padding keeps m = -inf: guard the rescale against -inf - -inf
        scale = tl.where(m_new == float("-inf"), 0.0, tl.exp(m - m_new))
        s = s * scale + tl.where(x == float("-inf"), 0.0, tl.exp(x - m_new))
        m = m_new
    row_max = tl.max(m, axis=0)
    total = tl.sum(s * tl.where(m == float("-inf"), 0.0, tl.exp(m - row_max)), axis=0)
    tl.store(stats_ptr + row * 2, row_max)
    tl.store(stats_ptr + row * 2 + 1, 1.0 / total)


@triton.jit
def _normalize(x_ptr, stats_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    """y[row, j] = exp(x[row, j] - max) * inv_sum over this program's span of the row."""
    row = tl.program_id(0).to(tl.int64)
    span = tl.cdiv(n_cols, tl.num_programs(1))
    start = tl.program_id(1) * span
    end = tl.minimum(start + span, n_cols)
    row_max = tl.load(stats_ptr + row * 2)
    inv = tl.load(stats_ptr + row * 2 + 1)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    offs = tl.arange(0, BLOCK)
    for i in range(start, end, BLOCK):
        idx = i + offs
        mask = idx < end
        x = tl.load(x_row + idx, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + idx, (tl.exp(x - row_max) * inv).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        y = torch.empty_like(x)
        stats = torch.empty((n_rows, 2), device=x.device, dtype=torch.float32)
        _row_stats[(n_rows,)](x, stats, n_cols, x.stride(0), BLOCK=2048, num_warps=8)
        _normalize[(n_rows, triton.cdiv(n_cols, 4096))](x, stats, y, n_cols, x.stride(0), y.stride(0),
                                                         BLOCK=4096, num_warps=8)
        return y
