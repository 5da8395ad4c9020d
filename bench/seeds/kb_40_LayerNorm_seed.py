"""Seed kernel for KernelBench level1/40_LayerNorm: nn.LayerNorm over the trailing normalized_shape of an
fp32 tensor, with elementwise weight and bias (the problem ships x of 16 x 64 x 256 x 256 normalised over
64 x 256 x 256: 16 rows of 4,194,304 elements). Few, long rows, so each row is split over many programs:

1. `_chunk_stats`, a (rows, cdiv(n, CHUNK)) grid: each program takes CHUNK elements of one row and keeps,
   per lane, a Welford count, mean and sum of squared deviations; the lanes are merged with Chan's formula
   into the chunk's (count, mean, M2), stored in `parts` (rows x chunks x 3);
2. `_merge_stats`, one program per row: merges its chunks' statistics (Chan again) into the row's mean
   and 1 / sqrt(var + eps), stored in `stats` (rows x 2);
3. `_normalize`, a (rows, column chunks) grid: each program writes (x - mean) * rstd * weight + bias over its
   share of one row; the row index varies fastest, so the programs of one column chunk run together and
   read that chunk of weight and bias from L2 after the first.

CHUNK appears three times (the literal passed to `_chunk_stats` and the two `triton.cdiv(n, CHUNK)` that size
the grid and `parts`): they must change together. Every other block size is independent of its grid
(`_normalize` takes its share of a row from tl.num_programs, `_merge_stats` loops over the chunks), so any
value is correct. Block sizes, chunk size and warps are literals in the launches.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _chunk_stats(x_ptr, parts_ptr, n, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    """parts[row, c] = (count, mean, M2) of x[row, c * CHUNK : (c + 1) * CHUNK]; the grid has cdiv(n, CHUNK)
    programs along axis 1."""
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    chunks = tl.num_programs(1)
    start = c * CHUNK
    end = tl.minimum(start + CHUNK, n)
    x_row = x_ptr + row * n
    offs = tl.arange(0, BLOCK)
    cnt = tl.zeros([BLOCK], tl.float32)
    mean = tl.zeros([BLOCK], tl.float32)
    m2 = tl.zeros([BLOCK], tl.float32)
    for i in range(start, end, BLOCK):
        idx = i + offs
        mask = idx < end
        x = tl.load(x_row + idx, mask=mask, other=0.0).to(tl.float32)
        cnt += mask.to(tl.float32)
        d = x - mean
        mean += tl.where(mask, d / tl.maximum(cnt, 1.0), 0.0)
        m2 += tl.where(mask, d * (x - mean), 0.0)
    total = tl.sum(cnt, axis=0)
    c_mean = tl.sum(cnt * mean, axis=0) / tl.maximum(total, 1.0)
    dm = tl.where(cnt > 0, mean - c_mean, 0.0)
    c_m2 = tl.sum(m2, axis=0) + tl.sum(cnt * dm * dm, axis=0)
    out = parts_ptr + (row * chunks + c) * 3
    tl.store(out, total)
    tl.store(out + 1, c_mean)
    tl.store(out + 2, c_m2)


@triton.jit
def _merge_stats(parts_ptr, stats_ptr, chunks, n, eps, BLOCK: tl.constexpr):
    """stats[row] = (mean, 1 / sqrt(M2 / n + eps)) from the row's chunk statistics (Chan's merge)."""
    row = tl.program_id(0).to(tl.int64)
    base = parts_ptr + row * chunks * 3
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for k in range(0, chunks, BLOCK):
        idx = k + offs
        mask = idx < chunks
        cnt = tl.load(base + idx * 3, mask=mask, other=0.0)
        mu = tl.load(base + idx * 3 + 1, mask=mask, other=0.0)
        acc += cnt * mu
    mean = tl.sum(acc, axis=0) / n
    acc2 = tl.zeros([BLOCK], tl.float32)
    for k in range(0, chunks, BLOCK):
        idx = k + offs
        mask = idx < chunks
        cnt = tl.load(base + idx * 3, mask=mask, other=0.0)
        mu = tl.load(base + idx * 3 + 1, mask=mask, other=0.0)
        m2 = tl.load(base + idx * 3 + 2, mask=mask, other=0.0)
        d = mu - mean
        acc2 += m2 + cnt * d * d
    var = tl.sum(acc2, axis=0) / n
    tl.store(stats_ptr + row * 2, mean)
    tl.store(stats_ptr + row * 2 + 1, 1.0 / tl.sqrt(var + eps))


@triton.jit
def _normalize(x_ptr, w_ptr, b_ptr, stats_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """y[row, j] = (x[row, j] - mean) * rstd * w[j] + b[j] over this program's span of the row."""
    row = tl.program_id(0).to(tl.int64)
    span = tl.cdiv(n, tl.num_programs(1))
    start = tl.program_id(1) * span
    end = tl.minimum(start + span, n)
    mean = tl.load(stats_ptr + row * 2)
    rstd = tl.load(stats_ptr + row * 2 + 1)
    x_row = x_ptr + row * n
    y_row = y_ptr + row * n
    offs = tl.arange(0, BLOCK)
    for i in range(start, end, BLOCK):
        idx = i + offs
        mask = idx < end
        x = tl.load(x_row + idx, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + idx, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + idx, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + idx, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = self.ln.weight.numel()
        x = x.contiguous()
        rows = x.numel() // n
        y = torch.empty_like(x)
        parts = torch.empty((rows, triton.cdiv(n, 8192), 3), device=x.device, dtype=torch.float32)
        stats = torch.empty((rows, 2), device=x.device, dtype=torch.float32)
        _chunk_stats[(rows, triton.cdiv(n, 8192))](x, parts, n, CHUNK=8192, BLOCK=1024, num_warps=4)
        _merge_stats[(rows,)](parts, stats, parts.shape[1], n, self.ln.eps, BLOCK=64, num_warps=2)
        _normalize[(rows, triton.cdiv(n, 2048))](x, self.ln.weight, self.ln.bias, stats, y, n,
                                                  BLOCK=2048, num_warps=8)
        return y
