"""LayerNorm (nn.LayerNorm with affine weight and bias) over the last dimension, fp32.

y[i, j] = (x[i, j] - mu_i) / sqrt(var_i + eps) * weight[j] + bias[j],
mu_i = mean_k x[i, k],  var_i = mean_k (x[i, k] - mu_i)^2 (biased),  eps = 1e-5,
x: (M, N) fp32; parameters `ln.weight`, `ln.bias` of shape (N,).

GPU size (8192, 4096): 128 MiB read + 128 MiB written (+ 32 KiB of parameters) = 256 MiB per call,
~8 FLOPs per element (~268 M FLOPs; memory-bound).
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
EPS = 1e-5


class Model(nn.Module):
    def __init__(self, hidden: int = N, eps: float = EPS):
        super().__init__()
        self.ln = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


def get_inputs():
    # A row-dependent offset: the centring has to be done right, not just the scaling.
    return [torch.randn(M, N) * 2.0 + torch.randn(M, 1) * 4.0]


def get_init_inputs():
    return [N, EPS]
