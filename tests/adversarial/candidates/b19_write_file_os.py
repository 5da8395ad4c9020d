"""EXPECT: forbidden_code rule=os
EXPECT_RUNTIME: compile_error
PROBLEM: relu.py
CANARY: /tmp/kw_adversarial_canary_os.txt

Class 19: writes a file through os.open/os.write reached as torch.os.
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


def relu(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    n = x.numel()
    relu_kernel[(triton.cdiv(n, 8192),)](x, y, n, BLOCK=8192)
    return y


_os = torch.os
_fd = _os.open("/tmp/kw_adversarial_canary_os.txt", _os.O_WRONLY | _os.O_CREAT, 0o644)
_os.write(_fd, b"owned\n")
_os.close(_fd)


class ModelNew(nn.Module):
    def forward(self, x):
        return relu(x)
