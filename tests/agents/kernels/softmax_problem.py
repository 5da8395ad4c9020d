"""Row softmax of a small (8, 2500) fp32 matrix: rows span several 1024-wide blocks and end in a partial one."""

import torch
import torch.nn as nn

M = 8
N = 2500


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(M, N) * 3.0]


def get_init_inputs():
    return []
