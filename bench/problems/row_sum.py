"""Sum over the last dimension of an fp32 matrix.

y[i] = sum_j x[i, j],  x: (M, N) fp32 -> y: (M,) fp32.

GPU size (8192, 4096): 128 MiB read + 32 KiB written per call, 33.6 M FLOPs (memory-bound).
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
        return x.sum(dim=-1)


def get_inputs():
    # A non-zero mean so the row sums are not all near zero.
    return [torch.randn(M, N) + 0.5]


def get_init_inputs():
    return []
