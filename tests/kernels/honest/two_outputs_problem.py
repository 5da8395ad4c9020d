"""A forward that returns a tuple: (x + y, x * y), each of shape (300, 77)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, y: torch.Tensor):
        return x + y, x * y


def get_inputs():
    return [torch.randn(300, 77), torch.randn(300, 77)]


def get_init_inputs():
    return []
