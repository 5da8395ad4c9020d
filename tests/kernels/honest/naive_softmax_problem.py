"""Softmax over dim 1 written as KernelBench's naive reference does, `exp(x) / sum(exp(x))`, no max subtracted,
on (16, 389) inputs of spread 1.5. The problem's own inputs never overflow fp32 (|x| stays under about 8), but
a scaled-up or heavy-tailed draw reaches past 88.7, where exp overflows in fp32 (PyTorch's own fp32 result is
NaN there) while the float64 gold stays finite up to 709: such a draw says nothing about a faithful kernel."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.exp(x) / torch.exp(x).sum(dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(16, 389) * 1.5]


def get_init_inputs():
    return []
