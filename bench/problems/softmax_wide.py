"""Row softmax over wide rows (16384 columns), fp32.

y[i, j] = exp(x[i, j] - max_k x[i, k]) / sum_k exp(x[i, k] - max_k x[i, k]),  x: (M, 16384) fp32.

GPU size (2048, 16384): 128 MiB read + 128 MiB written = 256 MiB per call, ~5 FLOPs + 1 exp per
element (~168 M FLOPs; memory-bound).
CPU size (13, 16384) (same row length, fewer rows), selected with KW_BENCH_SIZE=cpu.
"""

import os

import torch
import torch.nn as nn

SIZE = os.environ.get("KW_BENCH_SIZE", "gpu")
_SHAPES = {"gpu": (2048, 16384), "cpu": (13, 16384)}
if SIZE not in _SHAPES:
    raise ValueError(f"KW_BENCH_SIZE must be one of {sorted(_SHAPES)}, not {SIZE!r}")
M, N = _SHAPES[SIZE]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(M, N) * 3.0]


def get_init_inputs():
    return []
