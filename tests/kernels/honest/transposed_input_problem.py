"""A non-contiguous input: get_inputs() returns a transposed view (shape (96, 64), strides (1, 96)).
forward computes the per-row sum of squares, (96, 64) -> (96,), so the output layout is unambiguous."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * x).sum(dim=-1)


def get_inputs():
    return [torch.randn(64, 96).t()]


def get_init_inputs():
    return []
