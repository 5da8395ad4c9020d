"""ReLU of a (5, 123, 123) tensor (inputs of both signs)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    return [torch.randn(5, 123, 123)]


def get_init_inputs():
    return []
