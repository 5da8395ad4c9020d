"""Honest candidate for argmax_rows_problem: index of the row maximum (first one on ties)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_M = 16
BLOCK_N = 128   # must be >= the row length: each row is reduced in one block


@triton.jit
def argmax_kernel(x_ptr, out_ptr, n_rows, n_cols, stride_m, stride_n,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """out[r] = argmax_j x[r, j] (lowest index among equal maxima); masked columns read -inf."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    r_ok = rows < n_rows
    cols = tl.arange(0, BLOCK_N)
    mask = r_ok[:, None] & (cols < n_cols)[None, :]
    x = tl.load(x_ptr + rows[:, None] * stride_m + cols[None, :] * stride_n, mask=mask,
                other=float("-inf"))
    idx = tl.argmax(x, axis=1)
    tl.store(out_ptr + rows, idx.to(tl.int64), mask=r_ok)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n_cols = x.shape[-1]
        x2 = x.reshape(-1, n_cols)
        n_rows = x2.shape[0]
        block_n = max(BLOCK_N, triton.next_power_of_2(n_cols))
        out = torch.empty(n_rows, device=x.device, dtype=torch.int64)
        argmax_kernel[(triton.cdiv(n_rows, BLOCK_M),)](
            x2, out, n_rows, n_cols, x2.stride(0), x2.stride(1),
            BLOCK_M=BLOCK_M, BLOCK_N=block_n)
        return out.view(x.shape[:-1])
