"""LayerNorm over the last dimension of a (1024, 4096) fp32 matrix, with affine weight and bias.

mu_i = mean_j x[i, j];  var_i = mean_j (x[i, j] - mu_i)^2   (biased, as nn.LayerNorm)
y[i, j] = (x[i, j] - mu_i) / sqrt(var_i + eps) * weight[j] + bias[j],  eps = 1e-5

Memory-bound: 16 MiB read + 16 MiB written per call (+ 32 KiB of parameters), ~8 FLOPs per element.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

M = 1024
N = 4096
EPS = 1e-5


class Model(nn.Module):
    def __init__(self, normalized_shape: int = N, eps: float = EPS):
        super().__init__()
        self.normalized_shape = normalized_shape
        self.eps = eps
        # Same parameters as nn.LayerNorm(normalized_shape), initialised away from (1, 0)
        # so that a kernel ignoring them cannot pass by accident.
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(normalized_shape))
        self.bias = nn.Parameter(0.1 * torch.randn(normalized_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (self.normalized_shape,), self.weight, self.bias, self.eps)


def get_inputs():
    # A per-row offset and scale make the mean and variance matter.
    return [torch.randn(M, N) * 2.0 + torch.randn(M, 1)]


def get_init_inputs():
    return [N, EPS]
