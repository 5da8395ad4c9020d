"""Mean cross-entropy loss of fp32 logits against int64 class targets.

loss = (1/B) * sum_i ( logsumexp_j logits[i, j] - logits[i, targets[i]] ),
logits: (B, V) fp32 with V = 32768, targets: (B,) int64 in [0, V) -> a 0-dim fp32 tensor.

GPU size (1024, 32768): 128 MiB of logits + 8 KiB of targets read, 4 bytes written per call,
~4 FLOPs + 1 exp per logit (~134 M FLOPs; memory-bound).
CPU size (13, 32768) (same vocabulary, fewer rows), selected with KW_BENCH_SIZE=cpu.
"""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SIZE = os.environ.get("KW_BENCH_SIZE", "gpu")
_SHAPES = {"gpu": (1024, 32768), "cpu": (13, 32768)}
if SIZE not in _SHAPES:
    raise ValueError(f"KW_BENCH_SIZE must be one of {sorted(_SHAPES)}, not {SIZE!r}")
B, V = _SHAPES[SIZE]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, targets)


def get_inputs():
    return [torch.randn(B, V) * 2.0, torch.randint(0, V, (B,), dtype=torch.int64)]


def get_init_inputs():
    return []
