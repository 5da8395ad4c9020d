"""A bf16 problem (PRECISION = "bf16"): y = alpha * x + z with a learnable per-feature alpha,
x and z of shape (96, 200). The candidate receives and returns bfloat16 tensors."""

import torch
import torch.nn as nn

PRECISION = "bf16"

FEATURES = 200


class Model(nn.Module):
    def __init__(self, features: int = FEATURES):
        super().__init__()
        self.alpha = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return self.alpha * x + z


def get_inputs():
    return [torch.randn(96, FEATURES), torch.randn(96, FEATURES)]


def get_init_inputs():
    return [FEATURES]
