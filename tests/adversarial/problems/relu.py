"""ReLU on a (64, 257) fp32 matrix whose own inputs are all positive ("benign").

On the problem's own distribution the identity passes; the verifier's other input families
(sign-flipped, scaled, heavy-tailed) and `get_test_inputs()` (a different shape) must catch it.
"""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    return [torch.rand(64, 257) + 0.01]


def get_test_inputs():
    return [[torch.randn(3, 1000)]]


def get_init_inputs():
    return []
