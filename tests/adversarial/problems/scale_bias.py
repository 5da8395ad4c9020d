"""y = x * weight + bias over the last dimension, with learnable weight and bias of shape (N,).

The default initialisation is weight = 1, bias = 0, so a candidate that ignores the loaded
parameters computes the identity; the verifier re-randomises the parameters and loads them by name.
"""

import torch
import torch.nn as nn

N = 257


class Model(nn.Module):
    def __init__(self, n: int = N):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.weight + self.bias


def get_inputs():
    return [torch.randn(64, N)]


def get_init_inputs():
    return [N]
