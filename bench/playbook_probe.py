"""Measurements for a Triton-on-NVIDIA playbook (symptom -> move -> what to expect): each probe times a set
of variants of one kernel that differ by one optimisation move, at a realistic size, after checking every
variant against PyTorch. No kernelwright machinery: `triton.testing.do_bench` (L2 flushed before every
repetition, median and 20th/80th percentiles of CUDA-event times).

    python3 bench/playbook_probe.py --out DIR [--only starvation,online,...] [--rep 300]
    TRITON_INTERPRET=1 python3 bench/playbook_probe.py --cpu-check      (tiny sizes, correctness only)

Probes (baseline variant first; "× baseline" = baseline ms / variant ms, above 1 is faster):
  starvation  LayerNorm-like rows, 16 x 4,194,304 fp32: one program per row (16 programs) vs split rows
              (per-chunk Welford partials, a merge, a normalise over a 2-D grid); torch for reference
  online      softmax 4096 x 32768 fp32: two-pass stats (max, then sum) + normalise vs online (one-pass
              max and rescaled sum) + normalise vs online stats and normalise fused in one kernel; torch
  sweep       the fused online softmax of `online`: BLOCK 256/1024/4096 x num_warps 2/4/8/16
  fusion      C = A @ B (4096^3 fp16, fp32 accumulation) then GELU(tanh) in a second kernel vs GELU in the
              matmul's epilogue; the matmul alone and torch (cuBLAS + GELU) for reference
  grouping    the fused matmul: GROUP_M 1 vs 8 (L2 swizzle of the program order), num_stages 2/3/4
  strided     y = silu(x) where x is a transposed view (8192 x 8192 fp32, strides (1, 8192)): a 1-D kernel
              over the row-major output reading x through its strides (uncoalesced) vs .contiguous()
              first vs 2-D tiles (coalesced loads and stores) vs an output in the input's layout
  persistent  the fused matmul: one program per tile vs a persistent grid of one program per SM

Prints a table (probe, variant, ms, × baseline, effective GB/s or TFLOP/s) and writes playbook.json under
--out after every probe. Without a GPU (and without --cpu-check) it says so in one sentence and exits 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

if "--cpu-check" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

PROBES = ("starvation", "online", "sweep", "fusion", "grouping", "strided", "persistent")


# =============================================================================================================
# kernels
# =============================================================================================================

# -- LayerNorm-like rows (no affine): y = (x - mean) / sqrt(var + eps) -------------------------------------


@triton.jit
def ln_row_fused(x_ptr, y_ptr, n, eps, BLOCK: tl.constexpr):
    """One program per row: per-lane Welford over the row, lanes merged (Chan), then normalise the row."""
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * n
    y_row = y_ptr + row * n
    offs = tl.arange(0, BLOCK)
    cnt = tl.zeros([BLOCK], tl.float32)
    mean = tl.zeros([BLOCK], tl.float32)
    m2 = tl.zeros([BLOCK], tl.float32)
    for i in range(0, n, BLOCK):
        idx = i + offs
        mask = idx < n
        x = tl.load(x_row + idx, mask=mask, other=0.0)
        cnt += mask.to(tl.float32)
        d = x - mean
        mean += tl.where(mask, d / tl.maximum(cnt, 1.0), 0.0)
        m2 += tl.where(mask, d * (x - mean), 0.0)
    total = tl.sum(cnt, axis=0)
    mu = tl.sum(cnt * mean, axis=0) / total
    dm = tl.where(cnt > 0, mean - mu, 0.0)
    var = (tl.sum(m2, axis=0) + tl.sum(cnt * dm * dm, axis=0)) / total
    rstd = 1.0 / tl.sqrt(var + eps)
    for i in range(0, n, BLOCK):
        idx = i + offs
        mask = idx < n
        x = tl.load(x_row + idx, mask=mask, other=0.0)
        tl.store(y_row + idx, (x - mu) * rstd, mask=mask)


@triton.jit
def ln_chunk_stats(x_ptr, parts_ptr, n, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    """(rows, cdiv(n, CHUNK)) grid: parts[row, c] = (count, mean, M2) of the row's c-th CHUNK."""
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
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
        x = tl.load(x_row + idx, mask=mask, other=0.0)
        cnt += mask.to(tl.float32)
        d = x - mean
        mean += tl.where(mask, d / tl.maximum(cnt, 1.0), 0.0)
        m2 += tl.where(mask, d * (x - mean), 0.0)
    total = tl.sum(cnt, axis=0)
    c_mean = tl.sum(cnt * mean, axis=0) / tl.maximum(total, 1.0)
    dm = tl.where(cnt > 0, mean - c_mean, 0.0)
    out = parts_ptr + (row * tl.num_programs(1) + c) * 3
    tl.store(out, total)
    tl.store(out + 1, c_mean)
    tl.store(out + 2, tl.sum(m2, axis=0) + tl.sum(cnt * dm * dm, axis=0))


@triton.jit
def ln_merge(parts_ptr, stats_ptr, chunks, n, eps, BLOCK: tl.constexpr):
    """One program per row: Chan's merge of the chunks into (mean, rstd)."""
    row = tl.program_id(0).to(tl.int64)
    base = parts_ptr + row * chunks * 3
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for k in range(0, chunks, BLOCK):
        idx = k + offs
        mask = idx < chunks
        acc += tl.load(base + idx * 3, mask=mask, other=0.0) * tl.load(base + idx * 3 + 1, mask=mask, other=0.0)
    mean = tl.sum(acc, axis=0) / n
    acc2 = tl.zeros([BLOCK], tl.float32)
    for k in range(0, chunks, BLOCK):
        idx = k + offs
        mask = idx < chunks
        cnt = tl.load(base + idx * 3, mask=mask, other=0.0)
        d = tl.load(base + idx * 3 + 1, mask=mask, other=0.0) - mean
        acc2 += tl.load(base + idx * 3 + 2, mask=mask, other=0.0) + cnt * d * d
    tl.store(stats_ptr + row * 2, mean)
    tl.store(stats_ptr + row * 2 + 1, 1.0 / tl.sqrt(tl.sum(acc2, axis=0) / n + eps))


@triton.jit
def ln_normalize(x_ptr, stats_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """(rows, cdiv(n, BLOCK)) grid: y = (x - mean) * rstd on one BLOCK of one row."""
    row = tl.program_id(0).to(tl.int64)
    idx = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = idx < n
    mean = tl.load(stats_ptr + row * 2)
    rstd = tl.load(stats_ptr + row * 2 + 1)
    x = tl.load(x_ptr + row * n + idx, mask=mask, other=0.0)
    tl.store(y_ptr + row * n + idx, (x - mean) * rstd, mask=mask)


# -- softmax over rows -------------------------------------------------------------------------------------


@triton.jit
def sm_stats_two_pass(x_ptr, stats_ptr, n_cols, stride, BLOCK: tl.constexpr):
    """One program per row: the row max in one pass, sum exp(x - max) in a second: stats = (max, 1/sum)."""
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride
    offs = tl.arange(0, BLOCK)
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    for i in range(0, n_cols, BLOCK):
        idx = i + offs
        m = tl.maximum(m, tl.load(x_row + idx, mask=idx < n_cols, other=float("-inf")))
    row_max = tl.max(m, axis=0)
    s = tl.zeros([BLOCK], tl.float32)
    for i in range(0, n_cols, BLOCK):
        idx = i + offs
        mask = idx < n_cols
        x = tl.load(x_row + idx, mask=mask, other=float("-inf"))
        s += tl.where(mask, tl.exp(x - row_max), 0.0)
    tl.store(stats_ptr + row * 2, row_max)
    tl.store(stats_ptr + row * 2 + 1, 1.0 / tl.sum(s, axis=0))


@triton.jit
def _online_row_stats(x_row, n_cols, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for i in range(0, n_cols, BLOCK):
        idx = i + offs
        x = tl.load(x_row + idx, mask=idx < n_cols, other=float("-inf"))
        m_new = tl.maximum(m, x)
        scale = tl.where(m_new == float("-inf"), 0.0, tl.exp(m - m_new))
        s = s * scale + tl.where(x == float("-inf"), 0.0, tl.exp(x - m_new))
        m = m_new
    row_max = tl.max(m, axis=0)
    total = tl.sum(s * tl.where(m == float("-inf"), 0.0, tl.exp(m - row_max)), axis=0)
    return row_max, 1.0 / total


@triton.jit
def sm_stats_online(x_ptr, stats_ptr, n_cols, stride, BLOCK: tl.constexpr):
    """One program per row, one pass: per-lane running max and rescaled running sum."""
    row = tl.program_id(0).to(tl.int64)
    row_max, inv = _online_row_stats(x_ptr + row * stride, n_cols, BLOCK)
    tl.store(stats_ptr + row * 2, row_max)
    tl.store(stats_ptr + row * 2 + 1, inv)


@triton.jit
def sm_normalize(x_ptr, stats_ptr, y_ptr, n_cols, sx, sy, BLOCK: tl.constexpr):
    """(rows, cdiv(cols, BLOCK)) grid: y = exp(x - max) * inv on one BLOCK of one row."""
    row = tl.program_id(0).to(tl.int64)
    idx = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = idx < n_cols
    row_max = tl.load(stats_ptr + row * 2)
    inv = tl.load(stats_ptr + row * 2 + 1)
    x = tl.load(x_ptr + row * sx + idx, mask=mask, other=0.0)
    tl.store(y_ptr + row * sy + idx, tl.exp(x - row_max) * inv, mask=mask)


@triton.jit
def sm_fused_online(x_ptr, y_ptr, n_cols, sx, sy, BLOCK: tl.constexpr):
    """One program per row: online stats, then the row again (often from L2) to write the output."""
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * sx
    y_row = y_ptr + row * sy
    row_max, inv = _online_row_stats(x_row, n_cols, BLOCK)
    offs = tl.arange(0, BLOCK)
    for i in range(0, n_cols, BLOCK):
        idx = i + offs
        mask = idx < n_cols
        x = tl.load(x_row + idx, mask=mask, other=0.0)
        tl.store(y_row + idx, tl.exp(x - row_max) * inv, mask=mask)


# -- matmul (+ GELU) -----------------------------------------------------------------------------------------


@triton.jit
def _gelu_tanh(z):
    u = 0.7978845608028654 * (z + 0.044715 * z * z * z)
    return z / (1.0 + tl.exp(tl.minimum(-2.0 * u, 80.0)))  # z * sigmoid(2u) = 0.5 z (1 + tanh(u))


@triton.jit
def _tile_of(tile, M, N, BM: tl.constexpr, BN: tl.constexpr, GROUP_M: tl.constexpr):
    """Program order -> (tile row, tile column); GROUP_M tile rows are swept column by column."""
    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, BN)
    in_group = GROUP_M * num_pid_n
    first_m = (tile // in_group) * GROUP_M
    size_m = tl.minimum(num_pid_m - first_m, GROUP_M)
    return first_m + (tile % in_group) % size_m, (tile % in_group) // size_m


@triton.jit
def _mm_tile(a_ptr, b_ptr, c_ptr, K, sam, sak, sbk, sbn, scm, scn, pid_m, pid_n, BM: tl.constexpr,
             BN: tl.constexpr, BK: tl.constexpr, ACT: tl.constexpr, PREC: tl.constexpr):
    """C[tile] = act(A[tile rows] @ B[tile columns]); M, N, K are multiples of BM, BN, BK (checked by the host)."""
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    a_ptrs = a_ptr + offs_m[:, None] * sam + offs_k[None, :] * sak
    b_ptrs = b_ptr + offs_k[:, None] * sbk + offs_n[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(0, K, BK):
        acc = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs), acc, input_precision=PREC)
        a_ptrs += BK * sak
        b_ptrs += BK * sbk
    if ACT == 1:
        acc = _gelu_tanh(acc)
    tl.store(c_ptr + offs_m[:, None] * scm + offs_n[None, :] * scn, acc.to(c_ptr.dtype.element_ty))


@triton.jit
def mm_tiles(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn, BM: tl.constexpr, BN: tl.constexpr,
             BK: tl.constexpr, GROUP_M: tl.constexpr, ACT: tl.constexpr, PREC: tl.constexpr):
    """One program per output tile."""
    pid_m, pid_n = _tile_of(tl.program_id(0), M, N, BM, BN, GROUP_M)
    _mm_tile(a_ptr, b_ptr, c_ptr, K, sam, sak, sbk, sbn, scm, scn, pid_m, pid_n, BM, BN, BK, ACT, PREC)


@triton.jit
def mm_persistent(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn, BM: tl.constexpr,
                  BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr, ACT: tl.constexpr,
                  PREC: tl.constexpr):
    """A fixed grid (one program per SM) striding over the output tiles in the same grouped order."""
    num_tiles = tl.cdiv(M, BM) * tl.cdiv(N, BN)
    for tile in range(tl.program_id(0), num_tiles, tl.num_programs(0)):
        pid_m, pid_n = _tile_of(tile, M, N, BM, BN, GROUP_M)
        _mm_tile(a_ptr, b_ptr, c_ptr, K, sam, sak, sbk, sbn, scm, scn, pid_m, pid_n, BM, BN, BK, ACT, PREC)


@triton.jit
def gelu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    idx = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = idx < n
    x = tl.load(x_ptr + idx, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + idx, _gelu_tanh(x).to(y_ptr.dtype.element_ty), mask=mask)


# -- elementwise over a transposed view ----------------------------------------------------------------------


@triton.jit
def _silu(x):
    return x / (1.0 + tl.exp(-x))


@triton.jit
def ew_flat(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """y = silu(x) over contiguous storage."""
    idx = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = idx < n
    tl.store(y_ptr + idx, _silu(tl.load(x_ptr + idx, mask=mask, other=0.0)), mask=mask)


@triton.jit
def ew_rowmajor_strided(x_ptr, y_ptr, M, N, sxm, sxn, BLOCK: tl.constexpr):
    """1-D over the row-major (M, N) output; x read through its strides (uncoalesced when sxn != 1)."""
    idx = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = idx < M * N
    i = idx // N
    j = idx % N
    x = tl.load(x_ptr + i * sxm + j * sxn, mask=mask, other=0.0)
    tl.store(y_ptr + idx, _silu(x), mask=mask)


@triton.jit
def ew_tiled(x_ptr, y_ptr, M, N, sxm, sxn, sym, syn, BM: tl.constexpr, BN: tl.constexpr):
    """2-D tiles: the compiler sees the unit stride of each side and makes loads and stores coalesced
    (transposing through shared memory between them)."""
    i = (tl.program_id(0) * BM + tl.arange(0, BM)).to(tl.int64)
    j = (tl.program_id(1) * BN + tl.arange(0, BN)).to(tl.int64)
    mask = (i[:, None] < M) & (j[None, :] < N)
    x = tl.load(x_ptr + i[:, None] * sxm + j[None, :] * sxn, mask=mask, other=0.0)
    tl.store(y_ptr + i[:, None] * sym + j[None, :] * syn, _silu(x), mask=mask)


# =============================================================================================================
# harness
# =============================================================================================================


@dataclass
class Ctx:
    device: str
    cpu: bool
    rep: int
    warmup: int
    rows: list[dict[str, Any]]
    sms: int


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """max |out - ref| / (|ref| + rms(ref)), in float64 (the verifier's measure)."""
    o, r = out.double(), ref.double()
    rms = r.pow(2).mean().sqrt()
    return float(((o - r).abs() / (r.abs() + rms)).max())


def variant(ctx: Ctx, probe: str, name: str, fn: Callable[[], torch.Tensor], ref: torch.Tensor, tol: float,
            bytes_: float | None = None, flops: float | None = None, note: str = "") -> None:
    row: dict[str, Any] = {"probe": probe, "variant": name, "note": note}
    try:
        out = fn()
        if ctx.device != "cpu":
            torch.cuda.synchronize()
        err = rel_error(out, ref)
        row.update(max_rel_error=err, ok=err <= tol, tol=tol)
        del out
        if row["ok"] and not ctx.cpu:
            med, p20, p80 = triton.testing.do_bench(fn, warmup=ctx.warmup, rep=ctx.rep, quantiles=[0.5, 0.2, 0.8])
            row.update(ms=med, p20_ms=p20, p80_ms=p80)
            if bytes_:
                row["gbps"] = bytes_ / med / 1e6
            if flops:
                row["tflops"] = flops / med / 1e9
    except Exception as e:  # noqa: BLE001 - one variant's failure must not lose the others
        row.update(ok=False, error=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300])
    base = next((r for r in ctx.rows if r["probe"] == probe and r.get("ms")), None)
    if row.get("ms"):
        row["x_baseline"] = base["ms"] / row["ms"] if base else 1.0
    ctx.rows.append(row)
    shown = f"{row['ms']:.4f} ms" if row.get("ms") else ("ok" if row.get("ok") else f"FAILED {row.get('error') or row.get('max_rel_error')}")
    print(f"  {probe:10s} {name:58s} {shown}", flush=True)


# -- probes ------------------------------------------------------------------------------------------------------


def p_starvation(ctx: Ctx) -> None:
    rows, n = (3, 5000) if ctx.cpu else (16, 4_194_304)
    chunk, block_s, block_n = (1024, 256, 512) if ctx.cpu else (16384, 2048, 2048)
    x = torch.randn(rows, n, device=ctx.device) * 2.0 + 0.5
    ref = F.layer_norm(x, (n,), eps=1e-5)
    y = torch.empty_like(x)
    chunks = triton.cdiv(n, chunk)
    parts = torch.empty((rows, chunks, 3), device=ctx.device)
    stats = torch.empty((rows, 2), device=ctx.device)
    nbytes = 2 * x.numel() * 4

    def per_row() -> torch.Tensor:
        ln_row_fused[(rows,)](x, y, n, 1e-5, BLOCK=512 if ctx.cpu else 4096, num_warps=16)
        return y

    def split() -> torch.Tensor:
        ln_chunk_stats[(rows, chunks)](x, parts, n, CHUNK=chunk, BLOCK=block_s, num_warps=8)
        ln_merge[(rows,)](parts, stats, chunks, n, 1e-5, BLOCK=256, num_warps=4)
        ln_normalize[(rows, triton.cdiv(n, block_n))](x, stats, y, n, BLOCK=block_n, num_warps=8)
        return y

    pr = "starvation"
    variant(ctx, pr, f"one program per row ({rows} programs), BLOCK {512 if ctx.cpu else 4096}, 16 warps", per_row, ref, 1e-4, nbytes,
            note="fused stats + normalise, x read twice")
    variant(ctx, pr, f"split rows: {rows}x{chunks} stats programs, merge, {rows}x{triton.cdiv(n, block_n)} normalise",
            split, ref, 1e-4, nbytes, note=f"CHUNK {chunk}; three kernels, x read twice")
    variant(ctx, pr, "torch F.layer_norm (reference)", lambda: F.layer_norm(x, (n,), eps=1e-5), ref, 1e-4, nbytes)


def _softmax_input(ctx: Ctx) -> torch.Tensor:
    rows, cols = (4, 3000) if ctx.cpu else (4096, 32768)
    return torch.randn(rows, cols, device=ctx.device) * 3.0


def p_online(ctx: Ctx) -> None:
    x = _softmax_input(ctx)
    rows, cols = x.shape
    ref = torch.softmax(x, dim=1)
    y = torch.empty_like(x)
    stats = torch.empty((rows, 2), device=ctx.device)
    nbytes = 2 * x.numel() * 4
    bs, bn = (512, 512) if ctx.cpu else (2048, 4096)

    def two_pass() -> torch.Tensor:
        sm_stats_two_pass[(rows,)](x, stats, cols, x.stride(0), BLOCK=bs, num_warps=8)
        sm_normalize[(rows, triton.cdiv(cols, bn))](x, stats, y, cols, x.stride(0), y.stride(0), BLOCK=bn, num_warps=8)
        return y

    def online() -> torch.Tensor:
        sm_stats_online[(rows,)](x, stats, cols, x.stride(0), BLOCK=bs, num_warps=8)
        sm_normalize[(rows, triton.cdiv(cols, bn))](x, stats, y, cols, x.stride(0), y.stride(0), BLOCK=bn, num_warps=8)
        return y

    def fused() -> torch.Tensor:
        sm_fused_online[(rows,)](x, y, cols, x.stride(0), y.stride(0), BLOCK=bs, num_warps=8)
        return y

    pr = "online"
    variant(ctx, pr, "two-pass stats (max, then sum) + normalise kernel", two_pass, ref, 1e-4, nbytes,
            note="x read 3 times")
    variant(ctx, pr, "online stats (max and rescaled sum) + normalise kernel", online, ref, 1e-4, nbytes,
            note="x read twice")
    variant(ctx, pr, "online stats and normalise fused, one program per row", fused, ref, 1e-4, nbytes,
            note="x read twice, the second read partly from L2; one launch")
    variant(ctx, pr, "torch.softmax (reference)", lambda: torch.softmax(x, dim=1), ref, 1e-4, nbytes)


def p_sweep(ctx: Ctx) -> None:
    x = _softmax_input(ctx)
    rows, cols = x.shape
    ref = torch.softmax(x, dim=1)
    y = torch.empty_like(x)
    nbytes = 2 * x.numel() * 4
    configs = [(1024, 4)] + [(b, w) for b in (256, 1024, 4096) for w in (2, 4, 8, 16) if (b, w) != (1024, 4)]
    for block, warps in configs:
        def fn(block: int = block, warps: int = warps) -> torch.Tensor:
            sm_fused_online[(rows,)](x, y, cols, x.stride(0), y.stride(0), BLOCK=block, num_warps=warps)
            return y

        variant(ctx, "sweep", f"fused online softmax, BLOCK {block}, {warps} warps", fn, ref, 1e-4, nbytes)
    timed = [r["ms"] for r in ctx.rows if r["probe"] == "sweep" and r.get("ms")]
    if timed:
        ctx.rows.append({"probe": "sweep", "variant": "spread (slowest / fastest)", "spread": max(timed) / min(timed),
                         "note": f"{len(timed)} configurations"})
        print(f"  sweep      spread slowest/fastest {max(timed) / min(timed):.2f}x", flush=True)


def _mm_setup(ctx: Ctx, size: int) -> dict[str, Any]:
    if ctx.cpu:
        # Triton's interpreter cannot run a half-precision tl.dot faithfully: fp32 operands, exact products
        m, k, n, dtype, prec, blocks = 96, 64, 96, torch.float32, "ieee", (32, 32, 16)
    else:
        m = k = n = size
        dtype, prec, blocks = torch.float16, "tf32", (128, 128, 64)  # PREC only matters for fp32 operands
    a = torch.randn(m, k, device=ctx.device, dtype=dtype)
    b = torch.randn(k, n, device=ctx.device, dtype=dtype) / k ** 0.5
    assert m % blocks[0] == 0 and n % blocks[1] == 0 and k % blocks[2] == 0
    z = a.float() @ b.float()
    return {"a": a, "b": b, "c": torch.empty(m, n, device=ctx.device, dtype=dtype),
            "tmp": torch.empty(m, n, device=ctx.device, dtype=dtype), "m": m, "n": n, "k": k, "prec": prec,
            "blocks": blocks, "ref_mm": z, "ref": F.gelu(z, approximate="tanh"), "flops": 2.0 * m * n * k,
            "tol": 1e-4 if ctx.cpu else 1e-2, "dtype": str(dtype).replace("torch.", "")}


def _mm(ctx: Ctx, s: dict[str, Any], out: torch.Tensor, act: int, group_m: int = 8, stages: int = 3,
        warps: int = 8, persistent: bool = False) -> torch.Tensor:
    a, b = s["a"], s["b"]
    bm, bn, bk = s["blocks"]
    args = (a, b, out, s["m"], s["n"], s["k"], a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0),
            out.stride(1))
    meta = dict(BM=bm, BN=bn, BK=bk, GROUP_M=group_m, ACT=act, PREC=s["prec"], num_warps=warps, num_stages=stages)
    tiles = triton.cdiv(s["m"], bm) * triton.cdiv(s["n"], bn)
    if persistent:
        mm_persistent[(min(ctx.sms, tiles),)](*args, **meta)
    else:
        mm_tiles[(tiles,)](*args, **meta)
    return out


def p_fusion(ctx: Ctx, size: int) -> None:
    s = _mm_setup(ctx, size)
    numel = s["m"] * s["n"]

    def separate() -> torch.Tensor:
        _mm(ctx, s, s["tmp"], act=0)
        gelu_kernel[(triton.cdiv(numel, 1024),)](s["tmp"], s["c"], numel, BLOCK=1024, num_warps=4)
        return s["c"]

    pr = "fusion"
    shape = f"{s['m']}x{s['n']}x{s['k']} {s['dtype']}"
    variant(ctx, pr, f"matmul ({shape}), then a GELU kernel", separate, s["ref"], s["tol"], flops=s["flops"],
            note="C written and read back once more")
    variant(ctx, pr, "GELU fused in the matmul epilogue", lambda: _mm(ctx, s, s["c"], act=1), s["ref"], s["tol"],
            flops=s["flops"])
    variant(ctx, pr, "matmul alone, no GELU (reference)", lambda: _mm(ctx, s, s["c"], act=0), s["ref_mm"], s["tol"],
            flops=s["flops"])
    variant(ctx, pr, "torch: gelu(a @ b) (cuBLAS + elementwise, reference)",
            lambda: F.gelu(s["a"] @ s["b"], approximate="tanh"), s["ref"], s["tol"], flops=s["flops"])


def p_grouping(ctx: Ctx, size: int) -> None:
    s = _mm_setup(ctx, size)
    bm, bn, bk = s["blocks"]
    for group_m, stages in ((1, 3), (8, 3), (8, 2), (8, 4)):
        variant(ctx, "grouping", f"fused matmul+GELU {bm}x{bn}x{bk}, 8 warps, GROUP_M {group_m}, {stages} stages",
                lambda g=group_m, st=stages: _mm(ctx, s, s["c"], act=1, group_m=g, stages=st), s["ref"], s["tol"],
                flops=s["flops"])


def p_persistent(ctx: Ctx, size: int) -> None:
    s = _mm_setup(ctx, size)
    tiles = triton.cdiv(s["m"], s["blocks"][0]) * triton.cdiv(s["n"], s["blocks"][1])
    variant(ctx, "persistent", f"one program per tile ({tiles} programs), GROUP_M 8, 3 stages",
            lambda: _mm(ctx, s, s["c"], act=1), s["ref"], s["tol"], flops=s["flops"])
    variant(ctx, "persistent", f"persistent: {min(ctx.sms, tiles)} programs (one per SM) loop over the tiles",
            lambda: _mm(ctx, s, s["c"], act=1, persistent=True), s["ref"], s["tol"], flops=s["flops"])


def p_strided(ctx: Ctx) -> None:
    side_m, side_n = (100, 70) if ctx.cpu else (8192, 8192)
    base = torch.randn(side_n, side_m, device=ctx.device)
    x = base.t()  # (side_m, side_n), strides (1, side_m): a transposed view
    ref = F.silu(x)
    m, n = x.shape
    y = torch.empty(m, n, device=ctx.device)  # row-major
    y_like = torch.empty_like(x)  # keeps x's (transposed) strides
    buf = torch.empty(m, n, device=ctx.device)
    nbytes = 2 * x.numel() * 4
    block = 1024

    def strided() -> torch.Tensor:
        ew_rowmajor_strided[(triton.cdiv(m * n, block),)](x, y, m, n, x.stride(0), x.stride(1), BLOCK=block,
                                                           num_warps=4)
        return y

    def contiguous_first() -> torch.Tensor:
        buf.copy_(x)  # what x.contiguous() does, into a buffer allocated once
        ew_flat[(triton.cdiv(m * n, block),)](buf, y, m * n, BLOCK=block, num_warps=4)
        return y

    def tiled() -> torch.Tensor:
        ew_tiled[(triton.cdiv(m, 64), triton.cdiv(n, 64))](x, y, m, n, x.stride(0), x.stride(1), y.stride(0),
                                                            y.stride(1), BM=64, BN=64, num_warps=4)
        return y

    def same_layout() -> torch.Tensor:
        ew_flat[(triton.cdiv(m * n, block),)](base, y_like, m * n, BLOCK=block, num_warps=4)
        return y_like

    pr = "strided"
    variant(ctx, pr, f"1-D over the row-major output, x ({m}x{n}, strides (1, {m})) read through its strides",
            strided, ref, 1e-5, nbytes, note="uncoalesced loads: each warp touches 32 rows of storage")
    variant(ctx, pr, "x.contiguous() first (a copy kernel), then the 1-D kernel", contiguous_first, ref, 1e-5,
            nbytes, note="two extra passes over memory")
    variant(ctx, pr, "2-D tiles 64x64 with both strides (coalesced loads and stores)", tiled, ref, 1e-5, nbytes,
            note="the compiler transposes through shared memory")
    variant(ctx, pr, "output in x's layout (empty_like), 1-D over storage", same_layout, ref, 1e-5, nbytes,
            note="no transpose at all, but y is not row-major")


# -- main --------------------------------------------------------------------------------------------------------


def report(out: dict[str, Any]) -> None:
    print(f"\n{out['device']}  torch {out['torch']}  triton {out['triton']}  {out['when']}"
          + ("  (cpu check: correctness only)" if out["cpu_check"] else ""))
    print("\n| probe | variant | ms (p20-p80) | × baseline | GB/s or TFLOP/s | max rel. error |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for r in out["rows"]:
        if "spread" in r:
            print(f"| {r['probe']} | {r['variant']} | | {r['spread']:.2f}× | | |")
            continue
        if r.get("ms"):
            ms = f"{r['ms']:.4f} ({r['p20_ms']:.4f}-{r['p80_ms']:.4f})"
        elif r.get("ok"):
            ms = "correct" if out["cpu_check"] else "not timed"
        else:
            ms = "FAILED: " + str(r.get("error") or f"error {r.get('max_rel_error'):.2e} > {r.get('tol')}")
        rate = f"{r['gbps']:.0f} GB/s" if r.get("gbps") else f"{r['tflops']:.0f} TFLOP/s" if r.get("tflops") else ""
        xb = f"{r['x_baseline']:.2f}×" if r.get("x_baseline") else ""
        err = f"{r['max_rel_error']:.1e}" if r.get("max_rel_error") is not None else ""
        print(f"| {r['probe']} | {r['variant']} | {ms} | {xb} | {rate} | {err} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="/tmp/kw-playbook")
    ap.add_argument("--only", default=",".join(PROBES), help="comma-separated probes: " + ", ".join(PROBES))
    ap.add_argument("--rep", type=int, default=300, help="do_bench repetition time per variant, ms")
    ap.add_argument("--warmup", type=int, default=50, help="do_bench warm-up time per variant, ms")
    ap.add_argument("--mm-size", type=int, default=4096, help="M = N = K of the matmul probes")
    ap.add_argument("--cpu-check", action="store_true", help="tiny sizes in Triton's interpreter, correctness only")
    a = ap.parse_args()
    only = [p.strip() for p in a.only.split(",") if p.strip()]
    bad = [p for p in only if p not in PROBES]
    if bad:
        print(f"unknown probe {bad[0]!r}: use {', '.join(PROBES)}.", file=sys.stderr)
        return 2
    if not a.cpu_check and not torch.cuda.is_available():
        print("playbook_probe.py needs a CUDA GPU (none is visible); --cpu-check runs the kernels' correctness "
              "check in Triton's interpreter instead.", file=sys.stderr)
        return 2
    device = "cpu" if a.cpu_check else "cuda"
    sms = 3 if a.cpu_check else torch.cuda.get_device_properties(0).multi_processor_count
    ctx = Ctx(device=device, cpu=a.cpu_check, rep=a.rep, warmup=a.warmup, rows=[], sms=sms)
    out: dict[str, Any] = {"device": "cpu (TRITON_INTERPRET=1)" if a.cpu_check else torch.cuda.get_device_name(),
                           "torch": torch.__version__, "triton": triton.__version__, "cpu_check": a.cpu_check,
                           "sms": sms, "rep_ms": a.rep, "warmup_ms": a.warmup,
                           "when": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": ctx.rows, "probe_s": {}}
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(0)
    runs: dict[str, Callable[[], None]] = {
        "starvation": lambda: p_starvation(ctx), "online": lambda: p_online(ctx), "sweep": lambda: p_sweep(ctx),
        "fusion": lambda: p_fusion(ctx, a.mm_size), "grouping": lambda: p_grouping(ctx, a.mm_size),
        "strided": lambda: p_strided(ctx), "persistent": lambda: p_persistent(ctx, a.mm_size)}
    t_all = time.time()
    for name in only:
        t0 = time.time()
        try:
            runs[name]()
        except Exception as e:  # noqa: BLE001 - a probe that cannot even set up is recorded, the rest go on
            ctx.rows.append({"probe": name, "variant": "(setup)", "ok": False, "error": f"{type(e).__name__}: {e}"[:300]})
            print(f"  {name}: setup failed: {type(e).__name__}: {e}", flush=True)
        out["probe_s"][name] = time.time() - t0
        if not a.cpu_check:
            torch.cuda.empty_cache()
        with open(os.path.join(a.out, "playbook.json"), "w") as f:
            json.dump(out, f, indent=1, default=str)
        print(f"[{name}: {time.time() - t0:.1f} s, {time.time() - t_all:.0f} s so far]", flush=True)
    out["wall_s"] = time.time() - t_all
    with open(os.path.join(a.out, "playbook.json"), "w") as f:
        json.dump(out, f, indent=1, default=str)
    report(out)
    failed = [r for r in ctx.rows if r.get("ok") is False]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
