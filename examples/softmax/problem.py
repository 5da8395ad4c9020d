"""Row-wise softmax over the last dimension of a (1024, 4096) fp32 matrix.

y[i, j] = exp(x[i, j] - max_k x[i, k]) / sum_k exp(x[i, k] - max_k x[i, k])

Memory-bound: 16 MiB read + 16 MiB written per call (~5 FLOPs per element).
"""

import torch
import torch.nn as nn

M = 1024
N = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(M, N) * 3.0]


def get_init_inputs():
    return []
