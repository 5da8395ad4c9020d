"""Honest candidate for row_sum_problem: out[r] = sum_j x[r, j], fp32 accumulation."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_M = 32
BLOCK_N = 128


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, n_rows, n_cols, stride_m, stride_n,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """out[r] = sum_j x[r, j], walking the row in BLOCK_N-wide column blocks."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    r_ok = rows < n_rows
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_M], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        c = start + cols
        mask = r_ok[:, None] & (c < n_cols)[None, :]
        x = tl.load(x_ptr + rows[:, None] * stride_m + c[None, :] * stride_n, mask=mask, other=0.0)
        acc += tl.sum(x.to(tl.float32), axis=1)
    tl.store(out_ptr + rows, acc.to(out_ptr.dtype.element_ty), mask=r_ok)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n_cols = x.shape[-1]
        x2 = x.reshape(-1, n_cols)
        n_rows = x2.shape[0]
        out = torch.empty(n_rows, device=x.device, dtype=x.dtype)
        row_sum_kernel[(triton.cdiv(n_rows, BLOCK_M),)](
            x2, out, n_rows, n_cols, x2.stride(0), x2.stride(1),
            BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N)
        return out.view(x.shape[:-1])
