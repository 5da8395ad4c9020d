"""EXPECT: forbidden_code rule=stream_creation
EXPECT_RUNTIME: flagged|forbidden_call
PROBLEM: big_add_problem.py

Class 16 (side stream) through PyTorch's device-generic stream: torch.Stream, reached with getattr (so the
static filter's stream rule sees no name) and used as a context manager. torch.Stream is not a subclass of
torch.cuda.Stream, so the construction hook does not fire, and its __enter__ switches the current stream in
C++, never through the hooked torch.cuda.set_stream: no run-time guard sees it either (a known gap). The
add runs on the side stream, so the timing events on the harness's stream bracket no work; and since the
timing routine spins the GPU for 1 ms before each repetition, the side-stream kernel finishes during that
spin, so the synchronised wall clock does not see it either.

What is left are the timing's plausibility checks: a median far below the roofline floor of a 192 MB
memory-bound add, and more than 10x faster than eager. Expected: passes with timing["suspect"] non-empty
("flagged": the defence is a flag, not a failing verdict), or forbidden_call once the guards learn
torch.Stream.
Since the static filter follows constant getattr names and local aliases of module attributes, it
refuses this file (rule stream_creation); EXPECT_RUNTIME is the run-time verdict with the filter off, which is
what the text above describes.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

_Stream = getattr(torch, "Stream")


@triton.jit
def add_kernel(x, y, o, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.side = _Stream(device=torch.device("cuda", torch.cuda.current_device()))

    def forward(self, x, y):
        n = x.numel()
        with self.side:
            # Allocated on the side stream too, so whatever the harness does to a fresh allocation (the
            # correctness trials fill it with a poison) is ordered before the add on that stream.
            out = torch.empty_like(x)
            add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        return out
