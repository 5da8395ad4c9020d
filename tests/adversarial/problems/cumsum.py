"""An inclusive prefix sum over one long fp32 vector: every output depends on every input before it, so a
kernel either makes several launches or lets programs hand running totals to one another (a chained scan).

Small enough for Triton's interpreter (5,000 values: 20 blocks of 256, the last one ragged).
"""

import torch
import torch.nn as nn

LENGTH = 5000


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, dim=0)


def get_inputs():
    return [torch.randn(LENGTH)]


def get_init_inputs():
    return []
