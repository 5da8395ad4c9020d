"""Triton candidate for bench/problems/row_max.py: y[i] = max_j x[i, j].

Each program owns BLOCK_M rows and walks them in BLOCK_N-wide column blocks (masked tail loads
-inf), keeping an elementwise running max that is reduced across columns once at the end.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

# ---- tuning knobs (one line each) -------------------------------------------
BLOCK_M = 4        # rows per program
BLOCK_N = 2048     # columns per step (power of two)
NUM_WARPS = 8
NUM_STAGES = 2
# -----------------------------------------------------------------------------


@triton.jit
def row_max_kernel(x_ptr, y_ptr, n_rows, n_cols, stride_xm,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """y[r] = max_j x[r, j]; x rows have unit column stride."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    r_ok = rows < n_rows
    cols = tl.arange(0, BLOCK_N)
    x_rows = x_ptr + rows[:, None] * stride_xm
    acc = tl.full((BLOCK_M, BLOCK_N), float("-inf"), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        c = start + cols
        mask = r_ok[:, None] & (c < n_cols)[None, :]
        x = tl.load(x_rows + c[None, :], mask=mask, other=float("-inf")).to(tl.float32)
        acc = tl.maximum(acc, x)
    tl.store(y_ptr + rows, tl.max(acc, axis=1).to(y_ptr.dtype.element_ty), mask=r_ok)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n_cols = x.shape[-1]
        x2 = x.contiguous().view(-1, n_cols)
        n_rows = x2.shape[0]
        y = torch.empty(n_rows, device=x.device, dtype=x.dtype)
        row_max_kernel[(triton.cdiv(n_rows, BLOCK_M),)](
            x2, y, n_rows, n_cols, x2.stride(0),
            BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, num_warps=NUM_WARPS, num_stages=NUM_STAGES,
        )
        return y.view(x.shape[:-1])
