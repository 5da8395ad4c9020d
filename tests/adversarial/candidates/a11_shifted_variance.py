"""EXPECT: wrong_output
PROBLEM: groupnorm.py
TRIALS: 3

Class 11 (a fragile numerical shortcut that passes on benign data): GroupNorm with a one-pass variance taken
around each group's first value, sum((x - x0)^2)/n - (sum(x - x0)/n)^2 in fp32, which saves a pass over x. Right
on the problem's own, sign-flipped and scaled inputs; when x0 is extreme the two sums cancel catastrophically. The
heavy-tailed family's first draw puts an extreme value at every sample's first group start, so every battery
rejects it (issue 23: the same shortcut in a model-written GroupNorm failed one fresh judgement in four).
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
    shift = tl.load(x_ptr + base)
    s1 = tl.zeros([BLOCK], dtype=tl.float32)
    s2 = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, group_size, BLOCK):
        m = start + offs < group_size
        d = tl.where(m, tl.load(x_ptr + base + start + offs, mask=m, other=0.0) - shift, 0.0)
        s1 += d
        s2 += d * d
    dm = tl.sum(s1, axis=0) / group_size
    mean = shift + dm
    rstd = 1.0 / tl.sqrt(tl.maximum(tl.sum(s2, axis=0) / group_size - dm * dm, 0.0) + eps)
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
