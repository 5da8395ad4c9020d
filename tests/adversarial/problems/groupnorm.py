"""GroupNorm over (N, C, H, W) with a per-channel affine: a row reduction whose variance a kernel can get wrong.

Small enough for Triton's interpreter (4 x 16 x 64 x 64, 4 groups of 16,384 values). A one-pass variance taken
around each group's first value loses its precision when that value is extreme; the heavy-tailed family's pivot
draw (evaluators/inputs.py) puts an extreme value there in every battery.
"""

import torch
import torch.nn as nn

BATCH, CHANNELS, GROUPS, SIDE = 4, 16, 4, 64


class Model(nn.Module):
    def __init__(self, groups: int = GROUPS, channels: int = CHANNELS):
        super().__init__()
        self.gn = nn.GroupNorm(groups, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gn(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, SIDE, SIDE)]


def get_init_inputs():
    return [GROUPS, CHANNELS]
