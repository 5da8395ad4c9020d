"""Softmax over dim 1 of a (rows, cols) fp32 tensor, for rows far wider than one program's registers
(KernelBench level1/23_Softmax ships 4096 x 393216). One program per row: a first pass over the row keeps a
running maximum and a running sum of exp(x - max) rescaled whenever the maximum grows (online softmax), a
second pass writes exp(x - max) / sum. Two reads and one write of the tensor."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _softmax_row(x_ptr, y_ptr, cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    offs = tl.arange(0, BLOCK)
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, cols, BLOCK):
        idx = start + offs
        x = tl.load(x_row + idx, mask=idx < cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        # lanes that have seen nothing yet keep m = -inf; guard the rescale against -inf - -inf
        scale = tl.where(m_new == float("-inf"), 0.0, tl.exp(m - m_new))
        s = s * scale + tl.where(x == float("-inf"), 0.0, tl.exp(x - m_new))
        m = m_new
    row_max = tl.max(m, axis=0)
    total = tl.sum(s * tl.where(m == float("-inf"), 0.0, tl.exp(m - row_max)), axis=0)
    inv = 1.0 / total
    for start in range(0, cols, BLOCK):
        idx = start + offs
        mask = idx < cols
        x = tl.load(x_row + idx, mask=mask, other=float("-inf")).to(tl.float32)
        tl.store(y_row + idx, tl.exp(x - row_max) * inv, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty_like(x)
        block = 4096 if cols >= 4096 else triton.next_power_of_2(cols)
        _softmax_row[(rows,)](x, y, cols, x.stride(0), y.stride(0), BLOCK=block, num_warps=8)
        return y
