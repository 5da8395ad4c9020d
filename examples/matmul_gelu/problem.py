"""Linear layer followed by GELU (tanh approximation), in bf16.

y = gelu_tanh(x @ W^T + b),  x: (M, K) = (1024, 512),  W: (N, K) = (1024, 512),  b: (N,)
gelu_tanh(z) = 0.5 * z * (1 + tanh(sqrt(2/pi) * (z + 0.044715 * z^3)))

2*M*N*K = 1.07 GFLOP per call; 4 MiB of bf16 operands and output (compute-bound).
PRECISION = "bf16": the verifier casts the inputs and parameters to bfloat16; the candidate
accumulates in fp32 and returns bfloat16.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

PRECISION = "bf16"

M = 1024
K = 512
N = 1024


class Model(nn.Module):
    def __init__(self, in_features: int = K, out_features: int = N):
        super().__init__()
        # Same parameters and initialisation as nn.Linear(in_features, out_features).
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        bound = 1.0 / math.sqrt(in_features)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(F.linear(x, self.weight, self.bias), approximate="tanh")


def get_inputs():
    return [torch.randn(M, K)]


def get_init_inputs():
    return [K, N]
