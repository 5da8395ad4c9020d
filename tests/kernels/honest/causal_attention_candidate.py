"""minGPT causal self-attention in fp32 (KernelBench level3/43 ships B=128, T=512, C=768, 8 heads of 96):
1. c_attn as a tiled matmul with bias (fp32 products, `input_precision="ieee"`: no TF32);
2. flash-attention style causal attention reading q, k and v straight out of c_attn's (B, T, 3C) output:
   one program per (batch, head, block of queries), an online softmax over key blocks up to the diagonal
   (blocks above it are skipped), the head dimension padded to a power of two with masks; the result is
   written already re-assembled as (B, T, C);
3. c_proj as the same matmul. The module keeps the causal-mask buffer `bias` (the reference's state dict
   has it) but never needs to read it: causality is in the loop bounds."""

import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _linear(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
            BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        a = tl.load(x_ptr + rm[:, None].to(tl.int64) * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K),
                    other=0.0)
        w = tl.load(w_ptr + rn[None, :].to(tl.int64) * K + kk[:, None], mask=(rn[None, :] < N) & (kk[:, None] < K),
                    other=0.0)
        acc += tl.dot(a, w, input_precision="ieee")
    bias = tl.load(b_ptr + rn, mask=rn < N, other=0.0)
    acc += bias[None, :]
    tl.store(y_ptr + rm[:, None].to(tl.int64) * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _causal_attention(qkv_ptr, y_ptr, T, C, H, HS, scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_D: tl.constexpr):
    qb = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    rm = qb * BLOCK_M + tl.arange(0, BLOCK_M)
    rd = tl.arange(0, BLOCK_D)
    row = 3 * C
    base = qkv_ptr + b.to(tl.int64) * T * row + h * HS
    q = tl.load(base + rm[:, None].to(tl.int64) * row + rd[None, :], mask=(rm[:, None] < T) & (rd[None, :] < HS),
                other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    hi = tl.minimum((qb + 1) * BLOCK_M, T)
    for start in range(0, hi, BLOCK_N):
        rn = start + tl.arange(0, BLOCK_N)
        kv_mask = (rn[:, None] < T) & (rd[None, :] < HS)
        k = tl.load(base + C + rn[:, None].to(tl.int64) * row + rd[None, :], mask=kv_mask, other=0.0)
        v = tl.load(base + 2 * C + rn[:, None].to(tl.int64) * row + rd[None, :], mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        allowed = (rn[None, :] <= rm[:, None]) & (rn[None, :] < T)
        s = tl.where(allowed, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp(s - m_safe[:, None])
        alpha = tl.where(m_i == float("-inf"), 0.0, tl.exp(m_i - m_safe))
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m_i = m_new
    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    y_base = y_ptr + b.to(tl.int64) * T * C + h * HS
    tl.store(y_base + rm[:, None].to(tl.int64) * C + rd[None, :], out, mask=(rm[:, None] < T) & (rd[None, :] < HS))


def _matmul_bias(x2d, weight, bias):
    M, K = x2d.shape
    N = weight.shape[0]
    y = torch.empty((M, N), device=x2d.device, dtype=torch.float32)
    grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))
    _linear[grid](x2d, weight, bias, y, M, N, K, BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, num_warps=4)
    return y


class ModelNew(nn.Module):
    def __init__(self, n_embd, n_head, attn_pdrop, resid_pdrop, max_seqlen):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.register_buffer("bias", torch.tril(torch.ones(max_seqlen, max_seqlen)).view(1, 1, max_seqlen, max_seqlen))
        self.n_head = n_head
        self.n_embd = n_embd

    def forward(self, x):
        B, T, C = x.shape
        H = self.n_head
        HS = C // H
        x2d = x.contiguous().view(B * T, C)
        qkv = _matmul_bias(x2d, self.c_attn.weight.contiguous(), self.c_attn.bias.contiguous())
        y = torch.empty((B, T, C), device=x.device, dtype=torch.float32)
        block_m = 64
        grid = (triton.cdiv(T, block_m), B * H)
        _causal_attention[grid](qkv, y, T, C, H, HS, 1.0 / math.sqrt(HS), BLOCK_M=block_m, BLOCK_N=32,
                                BLOCK_D=max(16, triton.next_power_of_2(HS)), num_warps=4)
        out = _matmul_bias(y.view(B * T, C), self.c_proj.weight.contiguous(), self.c_proj.bias.contiguous())
        return out.view(B, T, C)
