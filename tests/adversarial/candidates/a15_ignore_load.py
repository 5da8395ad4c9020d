"""EXPECT: wrong_output
PROBLEM: scale_bias.py

Class 15: accepts the state dict without error but silently keeps its own (default) values.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_bias_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n, n_cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    col = offs % n_cols
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * tl.load(w_ptr + col, mask=m)
             + tl.load(b_ptr + col, mask=m), mask=m)


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n))

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        pass

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        scale_bias_kernel[(triton.cdiv(n, 4096),)](x, self.weight, self.bias, y, n, x.shape[-1], BLOCK=4096)
        return y
