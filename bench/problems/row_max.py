"""Maximum over the last dimension of an fp32 matrix.

y[i] = max_j x[i, j],  x: (M, N) fp32 -> y: (M,) fp32 (values only, as torch.amax).

GPU size (8192, 4096): 128 MiB read + 32 KiB written per call, 33.6 M comparisons (memory-bound).
CPU size (77, 3001), selected with KW_BENCH_SIZE=cpu.
"""

import os

import torch
import torch.nn as nn

SIZE = os.environ.get("KW_BENCH_SIZE", "gpu")
_SHAPES = {"gpu": (8192, 4096), "cpu": (77, 3001)}
if SIZE not in _SHAPES:
    raise ValueError(f"KW_BENCH_SIZE must be one of {sorted(_SHAPES)}, not {SIZE!r}")
M, N = _SHAPES[SIZE]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.amax(x, dim=-1)


def get_inputs():
    return [torch.randn(M, N)]


def get_init_inputs():
    return []
