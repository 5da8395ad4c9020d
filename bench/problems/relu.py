"""ReLU of an fp32 matrix.

y = max(x, 0),  x: (M, N) fp32.

GPU size (4096, 4096): 64 MiB read + 64 MiB written = 128 MiB per call, 16.8 M FLOPs (memory-bound).
CPU size (61, 3001) (awkward lengths, exercises the tail masks), selected with KW_BENCH_SIZE=cpu.
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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    return [torch.randn(M, N)]


def get_init_inputs():
    return []
