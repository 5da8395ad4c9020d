"""EXPECT: forbidden_code rule=torch_internals
EXPECT_RUNTIME: forbidden_call
PROBLEM: softmax_wide.py

Class 1: hides torch.softmax from the op recorder by disabling Python dispatch (torch._C internals);
a slow decoy kernel keeps the launches' share of the forward's time high.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def busy_kernel(p, iters, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(iters):
        acc += 1.0
    tl.store(p + offs, acc)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        scratch = torch.empty(16, device=x.device)
        busy_kernel[(1,)](scratch, 3000, BLOCK=16)
        with torch._C._DisableTorchDispatch():
            return torch.softmax(x, dim=-1)
