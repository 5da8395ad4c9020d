"""GELU with the tanh approximation, fp32.

y = 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))),  x: (M, N) fp32.

GPU size (4096, 4096): 64 MiB read + 64 MiB written = 128 MiB per call, ~10 FLOPs + 1 transcendental
per element (~170 M FLOPs; memory-bound on an H100).
CPU size (61, 3001), selected with KW_BENCH_SIZE=cpu.
"""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SIZE = os.environ.get("KW_BENCH_SIZE", "gpu")
_SHAPES = {"gpu": (4096, 4096), "cpu": (61, 3001)}
if SIZE not in _SHAPES:
    raise ValueError(f"KW_BENCH_SIZE must be one of {sorted(_SHAPES)}, not {SIZE!r}")
M, N = _SHAPES[SIZE]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x, approximate="tanh")


def get_inputs():
    return [torch.randn(M, N) * 2.0]


def get_init_inputs():
    return []
