"""fp32 matmul of awkward shapes: (67, 45) @ (45, 33). Strict fp32: TF32 would fail the tolerance."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(67, 45), torch.randn(45, 33)]


def get_init_inputs():
    return []
