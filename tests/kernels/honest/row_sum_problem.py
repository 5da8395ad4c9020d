"""Sum over the last dimension: (129, 300) -> (129,)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=-1)


def get_inputs():
    return [torch.randn(129, 300)]


def get_init_inputs():
    return []
