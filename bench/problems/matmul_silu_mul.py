"""SwiGLU-style gated projection, in bf16.

y = silu(x @ W1^T) * (x @ W2^T),  silu(z) = z * sigmoid(z),
x: (M, K),  W1, W2: (N, K)  (two nn.Linear without bias: parameters `w1.weight`, `w2.weight`).

GPU size M = N = K = 4096: 2 * 2*M*N*K = 274.9 GFLOP per call on 96 MiB of bf16 operands
(x, W1, W2: 32 MiB each) + 32 MiB of bf16 output (compute-bound).
CPU size M, K, N = 150, 200, 200, selected with KW_BENCH_SIZE=cpu.
PRECISION = "bf16": the verifier casts the inputs and parameters to bfloat16; the candidate
accumulates in fp32 and returns bfloat16.
"""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

PRECISION = "bf16"

SIZE = os.environ.get("KW_BENCH_SIZE", "gpu")
_SHAPES = {"gpu": (4096, 4096, 4096), "cpu": (150, 200, 200)}
if SIZE not in _SHAPES:
    raise ValueError(f"KW_BENCH_SIZE must be one of {sorted(_SHAPES)}, not {SIZE!r}")
M, K, N = _SHAPES[SIZE]


class Model(nn.Module):
    def __init__(self, in_features: int = K, hidden_features: int = N):
        super().__init__()
        self.w1 = nn.Linear(in_features, hidden_features, bias=False)
        self.w2 = nn.Linear(in_features, hidden_features, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(self.w1(x)) * self.w2(x)


def get_inputs():
    return [torch.randn(M, K)]


def get_init_inputs():
    return [K, N]
