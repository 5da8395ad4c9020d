"""RMSNorm over the last dimension with a learnable per-feature weight, fp32.

y[i, j] = x[i, j] / sqrt(mean_k x[i, k]^2 + eps) * weight[j],  eps = 1e-6,
x: (M, N) fp32, weight: (N,) (parameter named `weight`).

GPU size (8192, 4096): 128 MiB read + 128 MiB written (+ 16 KiB of weight) = 256 MiB per call,
~4 FLOPs per element (~134 M FLOPs; memory-bound).
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
EPS = 1e-6


class Model(nn.Module):
    def __init__(self, hidden: int = N, eps: float = EPS):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight


def get_inputs():
    return [torch.randn(M, N)]


def get_init_inputs():
    return [N, EPS]
