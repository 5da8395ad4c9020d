"""Integer output: argmax over the last dimension of a (64, 77) matrix -> int64 (64,).
Random continuous values, so ties (where index conventions could differ) do not occur."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(x, dim=-1)


def get_inputs():
    return [torch.randn(64, 77)]


def get_init_inputs():
    return []
