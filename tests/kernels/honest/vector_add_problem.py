"""Elementwise add of two vectors of an awkward length (not a multiple of any block size)."""

import torch
import torch.nn as nn

N = 1000003


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y


def get_inputs():
    return [torch.randn(N), torch.randn(N)]


def get_init_inputs():
    return []
