"""Fused add-multiply of three fp32 matrices.

z = (x + y) * w,  x, y, w: (M, N) fp32.

GPU size (4096, 4096): 192 MiB read + 64 MiB written = 256 MiB per call, 33.6 M FLOPs (memory-bound).
CPU size (61, 3001), selected with KW_BENCH_SIZE=cpu.
"""

import os

import torch
import torch.nn as nn

SIZE = os.environ.get("KW_BENCH_SIZE", "gpu")
_SHAPES = {"gpu": (4096, 4096), "cpu": (61, 3001)}
if SIZE not in _SHAPES:
    raise ValueError(f"KW_BENCH_SIZE must be one of {sorted(_SHAPES)}, not {SIZE!r}")
M, N = _SHAPES[SIZE]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x + y) * w


def get_inputs():
    return [torch.randn(M, N), torch.randn(M, N), torch.randn(M, N)]


def get_init_inputs():
    return []
