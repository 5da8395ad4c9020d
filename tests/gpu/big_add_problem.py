"""Elementwise sum of two 16M-element fp32 vectors (64 MiB each): large enough that timing matters.

The kernel is memory-bound (~192 MB moved, ~60 µs on an H100), so an honest median sits near the roofline
floor and a candidate that does less work than the floor allows is flagged. Timing pool: inputs (128 MiB)
plus float64 gold (128 MiB) = 256 MiB per input set, so the default 4 GiB pool holds 16 sets for 30 timed
repetitions (sets 0-13 are timed twice).
"""
import torch
import torch.nn as nn

N = 1 << 24


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        return x + y


def get_inputs():
    return [torch.randn(N), torch.randn(N)]


def get_init_inputs():
    return []
