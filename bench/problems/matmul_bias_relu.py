"""Linear layer (with bias) followed by ReLU, in bf16.

y = relu(x @ W^T + b),  x: (M, K),  W: (N, K),  b: (N,)  (parameters `linear.weight`, `linear.bias`).

GPU size M = N = K = 4096: 2*M*N*K = 137.4 GFLOP per call on 64 MiB of bf16 operands
(x 32 MiB, W 32 MiB) + 32 MiB of bf16 output (compute-bound).
CPU size M, K, N = 150, 200, 200 (awkward, exercises the edge handling), selected with KW_BENCH_SIZE=cpu.
PRECISION = "bf16": the verifier casts the inputs and parameters to bfloat16; the candidate
accumulates in fp32 and returns bfloat16.
"""

import os

import torch
import torch.nn as nn

PRECISION = "bf16"

SIZE = os.environ.get("KW_BENCH_SIZE", "gpu")
_SHAPES = {"gpu": (4096, 4096, 4096), "cpu": (150, 200, 200)}
if SIZE not in _SHAPES:
    raise ValueError(f"KW_BENCH_SIZE must be one of {sorted(_SHAPES)}, not {SIZE!r}")
M, K, N = _SHAPES[SIZE]


class Model(nn.Module):
    def __init__(self, in_features: int = K, out_features: int = N):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(M, K)]


def get_init_inputs():
    return [K, N]
