"""Elementwise sum of two (64, 257) fp32 matrices."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y


def get_inputs():
    return [torch.randn(64, 257), torch.randn(64, 257)]


def get_init_inputs():
    return []
