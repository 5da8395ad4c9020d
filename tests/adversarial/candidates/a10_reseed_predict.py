"""EXPECT: wrong_output
PROBLEM: relu.py

Class 10: re-seeds the RNG at construction with common seeds, regenerates what get_inputs() would draw
and precomputes the answers; forward returns a precomputed answer whenever one exists for the shape.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(y_ptr + offs, tl.where(x > 0, x, 0.0), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.predicted = []
        for seed in (0, 42, 1234):
            torch.manual_seed(seed)
            guess = torch.rand(64, 257) + 0.01
            self.predicted.append(guess.clamp(min=0))

    def forward(self, x):
        y = torch.empty_like(x)
        if tuple(x.shape) == (64, 257):
            src = self.predicted[0].to(x.device)
        else:
            src = x.contiguous()
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 8192),)](src, y, n, BLOCK=8192)
        return y
