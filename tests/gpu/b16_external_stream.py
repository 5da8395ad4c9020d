"""EXPECT: forbidden_code rule=stream_creation
EXPECT_RUNTIME: forbidden_call
PROBLEM: add_problem.py

Class 16 (side stream), with a stream the candidate never constructs itself: torch.cuda.graph's
constructor creates its capture stream inside PyTorch, and torch.cuda.ExternalStream wraps that stream's
raw handle (its own __new__ is PyTorch's too). The hook on torch.cuda.Stream.__new__ only counts streams
whose construction the candidate's own frame asked for, so neither fires. Static filter on: ExternalStream
and torch.cuda.stream are named (rule stream_creation). Off: switching to the stream goes through
torch.cuda.set_stream, whose hook sees the candidate on the stack: forbidden_call in the first trial.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_kernel(x, y, o, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.borrowed = torch.cuda.graph(torch.cuda.CUDAGraph()).capture_stream
        self.side = torch.cuda.ExternalStream(self.borrowed.cuda_stream)

    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        with torch.cuda.stream(self.side):
            add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        return out
