"""Triton candidate for bench/problems/cross_entropy.py: mean cross-entropy over (B, V) fp32 logits.

Kernel 1 (one program per row) streams the row once in BLOCK_V-wide blocks with an online,
numerically stable logsumexp (running max m, running sum of exp(x - m) rescaled when m grows),
picks the target logit with one scalar load and writes loss_r = m + log(l) - x[r, t_r] in fp32.
Kernel 2 (a single program) sums the B per-row losses in a fixed order and divides by B, so the
result is deterministic (no atomics). Targets are assumed to be valid class indices in [0, V)
(no ignore_index, no label smoothing, no class weights: F.cross_entropy's defaults).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

# ---- tuning knobs (one line each) -------------------------------------------
BLOCK_V = 4096     # logits per step of the row loop (power of two)
NUM_WARPS = 8
NUM_STAGES = 2
BLOCK_R = 1024     # per-row losses summed per step by the final reduction (power of two)
REDUCE_WARPS = 4
# -----------------------------------------------------------------------------


@triton.jit
def ce_rows_kernel(x_ptr, t_ptr, loss_ptr, n_cols, stride_xm, BLOCK_V: tl.constexpr):
    """loss[r] = logsumexp_j x[r, j] - x[r, t[r]], with the logsumexp computed online in fp32."""
    row = tl.program_id(0)
    x_row = x_ptr + row.to(tl.int64) * stride_xm
    cols = tl.arange(0, BLOCK_V)
    m = tl.full([1], float("-inf"), dtype=tl.float32)
    l = tl.zeros([1], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_V):
        c = start + cols
        x = tl.load(x_row + c, mask=c < n_cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        l = l * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    t = tl.load(t_ptr + row)
    x_t = tl.load(x_row + t).to(tl.float32)
    loss = m + tl.log(l) - x_t
    tl.store(loss_ptr + row + tl.arange(0, 1), loss)


@triton.jit
def mean_kernel(loss_ptr, out_ptr, n, BLOCK_R: tl.constexpr):
    """out = sum_r loss[r] / n, one program, fixed summation order."""
    offs = tl.arange(0, BLOCK_R)
    acc = tl.zeros([BLOCK_R], dtype=tl.float32)
    for start in range(0, n, BLOCK_R):
        o = start + offs
        acc += tl.load(loss_ptr + o, mask=o < n, other=0.0)
    total = tl.sum(acc, axis=0) / n
    tl.store(out_ptr, total.to(out_ptr.dtype.element_ty))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = logits.contiguous()
        t = targets.contiguous()
        n_rows, n_cols = x.shape
        losses = torch.empty(n_rows, device=x.device, dtype=torch.float32)
        out = torch.empty((), device=x.device, dtype=x.dtype)
        ce_rows_kernel[(n_rows,)](
            x, t, losses, n_cols, x.stride(0),
            BLOCK_V=BLOCK_V, num_warps=NUM_WARPS, num_stages=NUM_STAGES,
        )
        mean_kernel[(1,)](losses, out, n_rows, BLOCK_R=BLOCK_R, num_warps=REDUCE_WARPS)
        return out
