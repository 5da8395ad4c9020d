"""EXPECT: ok
PROBLEM: groupnorm.py
TRIALS: 3

Control: GroupNorm with a two-pass variance (the mean first, then the squared deviations from it), one program
per (sample, group). Exact to fp32 rounding whatever the inputs' extremes, so the heavy-tailed pivot draw passes it.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def groupnorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, group_size, hw, cpg, groups, eps, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    base = pid * group_size
    c0 = (pid % groups) * cpg
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, group_size, BLOCK):
        m = start + offs < group_size
        acc += tl.load(x_ptr + base + start + offs, mask=m, other=0.0)
    mean = tl.sum(acc, axis=0) / group_size
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, group_size, BLOCK):
        m = start + offs < group_size
        d = tl.where(m, tl.load(x_ptr + base + start + offs, mask=m, other=0.0) - mean, 0.0)
        acc += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / group_size + eps)
    for start in range(0, group_size, BLOCK):
        m = start + offs < group_size
        c = c0 + (start + offs) // hw
        x = tl.load(x_ptr + base + start + offs, mask=m, other=0.0)
        w = tl.load(w_ptr + c, mask=m, other=0.0)
        b = tl.load(b_ptr + c, mask=m, other=0.0)
        tl.store(y_ptr + base + start + offs, (x - mean) * rstd * w + b, mask=m)


class ModelNew(nn.Module):
    def __init__(self, groups, channels):
        super().__init__()
        self.groups = groups
        self.gn = nn.GroupNorm(groups, channels)

    def forward(self, x):
        x = x.contiguous()
        n, c, h, w = x.shape
        y = torch.empty_like(x)
        cpg = c // self.groups
        groupnorm_kernel[(n * self.groups,)](x, self.gn.weight, self.gn.bias, y, cpg * h * w, h * w, cpg,
                                             self.groups, self.gn.eps, BLOCK=4096)
        return y
