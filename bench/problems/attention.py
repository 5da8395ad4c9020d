"""Non-causal scaled dot-product attention, in bf16.

O = softmax(Q K^T / sqrt(d)) V  per (batch, head),  Q, K, V, O: (B, H, S, d)  (no mask, no dropout).

The reference is F.scaled_dot_product_attention, whose fused kernels keep the scores and the softmax
in fp32 (the float64 gold is its math path). An unfused bf16 reference (bf16 scores, bf16 softmax)
deviates from float64 by up to ~0.3 on the verifier's rescaled and heavy-tailed inputs, which would
widen the tolerance for every trial to ~0.5; with SDPA it stays at ~1e-2.

GPU size B=4, H=8 (batch*heads = 32), S = 1024, d = 64: 4*B*H*S^2*d = 8.6 GFLOP per call
(two GEMMs of 2*S^2*d each per head) on 12 MiB of bf16 Q, K, V (4 MiB each) + 4 MiB of bf16 output
(compute-bound for a fused kernel; an unfused one would also write and read the 32 x 1024 x 1024
score matrix).
CPU size B=1, H=2, S=200, d=64 (a sequence tail on both the query and the key side), selected with
KW_BENCH_SIZE=cpu.
PRECISION = "bf16": the verifier casts Q, K, V to bfloat16; the candidate returns bfloat16.
"""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

PRECISION = "bf16"

SIZE = os.environ.get("KW_BENCH_SIZE", "gpu")
_SHAPES = {"gpu": (4, 8, 1024, 64), "cpu": (1, 2, 200, 64)}
if SIZE not in _SHAPES:
    raise ValueError(f"KW_BENCH_SIZE must be one of {sorted(_SHAPES)}, not {SIZE!r}")
B, H, S, D = _SHAPES[SIZE]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v)


def get_inputs():
    return [torch.randn(B, H, S, D), torch.randn(B, H, S, D), torch.randn(B, H, S, D)]


def get_init_inputs():
    return []
