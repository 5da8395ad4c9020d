"""Seed Triton kernel for examples/layernorm: row LayerNorm with affine weight and bias.

Each program handles BLOCK_M rows. Pass 1 walks the row in BLOCK_N-wide column
blocks and merges per-block (count, mean, M2) statistics in fp32 (Chan et al.'s
parallel Welford update), so the variance is computed from centred values even
when a row does not fit in one block. Pass 2 re-reads the row and writes
(x - mean) * rstd * weight + bias.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

# ---- tuning knobs (one line each) -------------------------------------------
BLOCK_M = 8        # rows per program
BLOCK_N = 2048     # columns per block (power of two)
NUM_WARPS = 8
NUM_STAGES = 2
# -----------------------------------------------------------------------------


@triton.jit
def layernorm_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr,
    n_rows, n_cols, eps,
    stride_xm, stride_xn, stride_ym, stride_yn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """y[r, j] = (x[r, j] - mean_r) * rsqrt(var_r + eps) * w[j] + b[j]

    mean_r = (1/N) sum_j x[r, j],  var_r = (1/N) sum_j (x[r, j] - mean_r)^2  (fp32).
    Per column block b with n_b valid columns: mean_b = sum x / n_b, M2_b = sum (x - mean_b)^2;
    merged into the running (n_a, mean, M2) of the n_a columns before it by
        delta = mean_b - mean;  mean += delta * n_b / (n_a + n_b);
        M2 += M2_b + delta^2 * n_a * n_b / (n_a + n_b).
    """
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    # Rows past the end re-read the last row (never stored).
    rows_ld = tl.minimum(rows, n_rows - 1)
    cols = tl.arange(0, BLOCK_N)
    x_rows = x_ptr + rows_ld[:, None] * stride_xm

    mean = tl.zeros([BLOCK_M], dtype=tl.float32)
    m2 = tl.zeros([BLOCK_M], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        c = start + cols
        c_ok = c < n_cols
        x = tl.load(x_rows + c[None, :] * stride_xn, mask=c_ok[None, :], other=0.0).to(tl.float32)
        n_b = tl.minimum(n_cols - start, BLOCK_N).to(tl.float32)
        mean_b = tl.sum(x, axis=1) / n_b
        d = tl.where(c_ok[None, :], x - mean_b[:, None], 0.0)
        m2_b = tl.sum(d * d, axis=1)
        n_a = start * 1.0  # columns merged so far (all earlier blocks are full), as float
        n_ab = n_a + n_b
        delta = mean_b - mean
        mean = mean + delta * (n_b / n_ab)
        m2 = m2 + m2_b + delta * delta * (n_a * n_b / n_ab)

    rstd = 1.0 / tl.sqrt(m2 / n_cols + eps)
    y_rows = y_ptr + rows[:, None] * stride_ym
    for start in range(0, n_cols, BLOCK_N):
        c = start + cols
        c_ok = c < n_cols
        x = tl.load(x_rows + c[None, :] * stride_xn, mask=c_ok[None, :], other=0.0).to(tl.float32)
        w = tl.load(w_ptr + c, mask=c_ok, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + c, mask=c_ok, other=0.0).to(tl.float32)
        y = (x - mean[:, None]) * rstd[:, None] * w[None, :] + b[None, :]
        tl.store(y_rows + c[None, :] * stride_yn, y.to(y_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & c_ok[None, :])


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: int = 4096, eps: float = 1e-5):
        super().__init__()
        self.normalized_shape = normalized_shape
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n_cols = self.normalized_shape
        x2 = x.reshape(-1, n_cols)
        n_rows = x2.shape[0]
        y = torch.empty((n_rows, n_cols), device=x.device, dtype=x.dtype)
        grid = (triton.cdiv(n_rows, BLOCK_M),)
        layernorm_kernel[grid](
            x2, self.weight, self.bias, y,
            n_rows, n_cols, self.eps,
            x2.stride(0), x2.stride(1), y.stride(0), y.stride(1),
            BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
            num_warps=NUM_WARPS, num_stages=NUM_STAGES,
        )
        return y.view(x.shape)
