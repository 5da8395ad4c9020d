"""LayerNorm over the trailing normalized_shape of an fp32 tensor, with elementwise weight and bias
(KernelBench level1/40_LayerNorm ships 16 rows of 64 x 256 x 256 = 4,194,304 elements). With so few and so
long rows, each row is split across many programs:
1. every (row, chunk) program computes its chunk's mean and sum of squared deviations from that mean;
2. one program per row merges its chunks' statistics with Chan's parallel formula (exact, stable) into the
   row's mean and 1/sqrt(var + eps);
3. every (chunk, row) program normalises its chunk and applies weight and bias; the programs of one chunk
   run next to each other, so the chunk of weight and bias is read from memory once and from L2 after.
Two reads of x, one write of y."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _chunk_stats(x_ptr, mean_ptr, m2_ptr, n, chunk, chunks, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    start = c.to(tl.int64) * chunk
    base = x_ptr + row * n + start
    offs = tl.arange(0, BLOCK)
    count = tl.minimum(chunk, n - start).to(tl.float32)
    acc = tl.zeros([BLOCK], tl.float32)
    for i in range(0, chunk, BLOCK):
        idx = i + offs
        mask = (idx < chunk) & (start + idx < n)
        acc += tl.load(base + idx, mask=mask, other=0.0)
    mean = tl.sum(acc, axis=0) / count
    acc2 = tl.zeros([BLOCK], tl.float32)
    for i in range(0, chunk, BLOCK):
        idx = i + offs
        mask = (idx < chunk) & (start + idx < n)
        d = tl.where(mask, tl.load(base + idx, mask=mask, other=0.0) - mean, 0.0)
        acc2 += d * d
    tl.store(mean_ptr + row * chunks + c, mean)
    tl.store(m2_ptr + row * chunks + c, tl.sum(acc2, axis=0))


@triton.jit
def _merge(mean_ptr, m2_ptr, stats_ptr, n, chunk, chunks, eps, BLOCK_C: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    k = tl.arange(0, BLOCK_C)
    mask = k < chunks
    means = tl.load(mean_ptr + row * chunks + k, mask=mask, other=0.0)
    m2s = tl.load(m2_ptr + row * chunks + k, mask=mask, other=0.0)
    counts = tl.where(mask, tl.minimum(chunk, n - k.to(tl.int64) * chunk).to(tl.float32), 0.0)
    total = tl.sum(counts, axis=0)
    mean = tl.sum(means * counts, axis=0) / total
    d = tl.where(mask, means - mean, 0.0)
    m2 = tl.sum(m2s, axis=0) + tl.sum(counts * d * d, axis=0)
    tl.store(stats_ptr + row * 2, mean)
    tl.store(stats_ptr + row * 2 + 1, 1.0 / tl.sqrt(m2 / total + eps))


@triton.jit
def _normalise(x_ptr, w_ptr, b_ptr, stats_ptr, y_ptr, n, rows, chunk, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    row = (pid % rows).to(tl.int64)
    c = (pid // rows).to(tl.int64)
    start = c * chunk
    mean = tl.load(stats_ptr + row * 2)
    rstd = tl.load(stats_ptr + row * 2 + 1)
    offs = tl.arange(0, BLOCK)
    for i in range(0, chunk, BLOCK):
        idx = start + i + offs
        mask = (i + offs < chunk) & (idx < n)
        x = tl.load(x_ptr + row * n + idx, mask=mask, other=0.0)
        w = tl.load(w_ptr + idx, mask=mask, other=0.0)
        b = tl.load(b_ptr + idx, mask=mask, other=0.0)
        tl.store(y_ptr + row * n + idx, (x - mean) * rstd * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = tuple(self.ln.normalized_shape)
        n = 1
        for s in shape:
            n *= s
        x = x.contiguous()
        rows = x.numel() // n if n else 0
        y = torch.empty_like(x)
        chunk = 16384 if n >= 16384 * 8 else max(256, triton.next_power_of_2(triton.cdiv(n, 8)))
        chunks = triton.cdiv(n, chunk)
        block = min(4096, chunk)
        means = torch.empty((rows, chunks), device=x.device, dtype=torch.float32)
        m2s = torch.empty((rows, chunks), device=x.device, dtype=torch.float32)
        stats = torch.empty((rows, 2), device=x.device, dtype=torch.float32)
        _chunk_stats[(rows, chunks)](x, means, m2s, n, chunk, chunks, BLOCK=block, num_warps=8)
        _merge[(rows,)](means, m2s, stats, n, chunk, chunks, self.ln.eps, BLOCK_C=triton.next_power_of_2(chunks),
                        num_warps=4)
        _normalise[(rows * chunks,)](x, self.ln.weight.contiguous(), self.ln.bias.contiguous(), stats, y, n, rows,
                                     chunk, BLOCK=block, num_warps=8)
        return y
