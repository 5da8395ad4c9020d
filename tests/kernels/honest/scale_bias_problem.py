"""Per-feature scale and shift with learnable parameters: y = x * weight + bias, x of shape (37, 123)."""

import torch
import torch.nn as nn

ROWS = 37
FEATURES = 123


class Model(nn.Module):
    def __init__(self, features: int = FEATURES):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.weight + self.bias


def get_inputs():
    return [torch.randn(ROWS, FEATURES)]


def get_init_inputs():
    return [FEATURES]
