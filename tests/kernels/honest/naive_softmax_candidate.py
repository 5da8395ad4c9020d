"""Honest candidate for naive_softmax_problem: y[r, j] = exp(x[r, j]) / sum_k exp(x[r, k]), written as the
reference is (no max subtracted), so it overflows exactly where PyTorch's own fp32 result does."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_N = 128


@triton.jit
def naive_softmax_kernel(x_ptr, y_ptr, n_cols, stride_xm, stride_xn, stride_ym, stride_yn, BLOCK_N: tl.constexpr):
    """One program per row: the row's sum of exp(x) in fp32, then every exp(x) divided by it."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        c = start + cols
        x = tl.load(x_ptr + row * stride_xm + c * stride_xn, mask=c < n_cols, other=float("-inf"))
        acc += tl.exp(x.to(tl.float32))
    total = tl.sum(acc, axis=0)
    for start in range(0, n_cols, BLOCK_N):
        c = start + cols
        mask = c < n_cols
        x = tl.load(x_ptr + row * stride_xm + c * stride_xn, mask=mask, other=0.0)
        y = tl.exp(x.to(tl.float32)) / total
        tl.store(y_ptr + row * stride_ym + c * stride_yn, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n_rows, n_cols = x.shape
        y = torch.empty((n_rows, n_cols), device=x.device, dtype=x.dtype)
        naive_softmax_kernel[(n_rows,)](x, y, n_cols, x.stride(0), x.stride(1), y.stride(0), y.stride(1),
                                        BLOCK_N=BLOCK_N)
        return y
