"""Softmax over rows of width 32768 (4 rows) of uniform [0, 1) inputs: every output is 1.8e-5 to 4.8e-5.

A bare absolute tolerance of 1e-4 (or KernelBench's atol = rtol = 1e-2) would accept an all-zero or
constant output; the verifier's tolerance is relative to the output's scale, so those must fail.
"""

import torch
import torch.nn as nn

ROWS = 4
WIDTH = 32768


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.rand(ROWS, WIDTH)]


def get_init_inputs():
    return []
