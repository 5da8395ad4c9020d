"""Mean cross-entropy of (rows, classes) fp32 logits against int64 targets (KernelBench
level1/95_CrossEntropyLoss ships 32768 x 4096): one program per row computes logsumexp(row) - row[target]
with the row held in registers (max first, then the sum of exp(x - max)); a second, single-program kernel
adds the per-row losses in a fixed order (deterministic) and divides by the number of rows."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _row_loss(x_ptr, t_ptr, loss_ptr, cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    x_row = x_ptr + row * stride
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, cols, BLOCK):
        idx = start + offs
        x = tl.load(x_row + idx, mask=idx < cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        scale = tl.where(m_new == float("-inf"), 0.0, tl.exp(m - m_new))
        s = s * scale + tl.where(x == float("-inf"), 0.0, tl.exp(x - m_new))
        m = m_new
    row_max = tl.max(m, axis=0)
    total = tl.sum(s * tl.where(m == float("-inf"), 0.0, tl.exp(m - row_max)), axis=0)
    target = tl.load(t_ptr + row)
    picked = tl.load(x_row + target).to(tl.float32)
    tl.store(loss_ptr + row, tl.log(total) + row_max - picked)


@triton.jit
def _mean(loss_ptr, out_ptr, rows, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, rows, BLOCK):
        idx = start + offs
        acc += tl.load(loss_ptr + idx, mask=idx < rows, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0) / rows)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = predictions.contiguous()
        t = targets.contiguous()
        rows, cols = x.shape
        losses = torch.empty(rows, device=x.device, dtype=torch.float32)
        out = torch.empty((), device=x.device, dtype=torch.float32)
        block = min(4096, triton.next_power_of_2(cols))
        _row_loss[(rows,)](x, t, losses, cols, x.stride(0), BLOCK=block, num_warps=8)
        _mean[(1,)](losses, out, rows, BLOCK=1024, num_warps=4)
        return out
