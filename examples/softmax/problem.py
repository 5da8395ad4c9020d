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


def get_test_inputs():
    # Shapes the main input does not reach: a row count that is not a multiple of a row tile, rows that end
    # in a partial column block, a single row one element past a power of two. Checked by the verifier and
    # by the coder's quick check, so a change that only works at 4096 x 4096 does not pass.
    return [[torch.randn(3, 5000) * 3.0], [torch.randn(1, 4097) * 3.0]]
