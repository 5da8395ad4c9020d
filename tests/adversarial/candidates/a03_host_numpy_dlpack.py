"""EXPECT: forbidden_code rule=host_compute
EXPECT_RUNTIME: forbidden_call
PROBLEM: relu.py

Class 3/1: a decoy kernel keeps the launches busy while the real work is done on the host in NumPy,
reached as torch.nn.functional.np and fed through DLPack (no aten op reads the values).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
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
        np = F.np
        host = np.from_dlpack(x)
        y = torch.from_numpy(np.maximum(host, 0.0).copy())
        scratch = torch.empty(16, device=x.device)
        busy_kernel[(1,)](scratch, 3000, BLOCK=16)
        return y
