"""Triton candidate for bench/problems/attention.py: O = softmax(Q K^T / sqrt(d)) V, bf16 in/out.

A small FlashAttention-style forward kernel. Each program owns BLOCK_M query rows of one
(batch, head) and streams K and V in BLOCK_N-row blocks: S = Q K^T (fp32 accumulation, scaled into
the log2 domain), an online softmax keeps the running row max m and row sum l, the accumulator is
rescaled by exp2(m_old - m_new) and P V is added (P cast to the input dtype for the tensor cores).
The S x S score matrix never reaches memory. Query and key tails are masked (key columns past the
end get -inf before the softmax); the head dimension must be a power of two >= 16.
"""

import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

# ---- tuning knobs (one line each) -------------------------------------------
BLOCK_M = 128      # query rows per program
BLOCK_N = 64       # key/value rows per step
NUM_WARPS = 4
NUM_STAGES = 3
# -----------------------------------------------------------------------------


@triton.jit
def attn_fwd_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr,
    stride_qz, stride_qh, stride_qm, stride_qd,
    stride_kz, stride_kh, stride_kn, stride_kd,
    stride_vz, stride_vh, stride_vn, stride_vd,
    stride_oz, stride_oh, stride_om, stride_od,
    H, S, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    DOT_FP32: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    """O[z, h, i, :] = sum_j p_ij V[z, h, j, :] / sum_j p_ij,  p_ij = 2^(s_ij - max_j s_ij),
    s_ij = (Q[z, h, i, :] . K[z, h, j, :]) * qk_scale,  qk_scale = log2(e) / sqrt(d).

    DOT_FP32 upcasts the tiles to fp32 before tl.dot (exact for bf16/fp16 inputs); the wrapper sets
    it for fp32 inputs and on CPU, where Triton's interpreter cannot run a bf16 tl.dot.
    """
    pid_m = tl.program_id(0)
    pid_zh = tl.program_id(1)
    z = pid_zh // H
    h = pid_zh % H
    q_base = q_ptr + z * stride_qz + h * stride_qh
    k_base = k_ptr + z * stride_kz + h * stride_kh
    v_base = v_ptr + z * stride_vz + h * stride_vh
    o_base = o_ptr + z * stride_oz + h * stride_oh

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    m_ok = offs_m < S

    q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                mask=m_ok[:, None], other=0.0)
    if DOT_FP32:
        q = q.to(tl.float32)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for start in range(0, S, BLOCK_N):
        offs_kn = start + offs_n
        n_ok = offs_kn < S
        kt = tl.load(k_base + offs_d[:, None] * stride_kd + offs_kn[None, :] * stride_kn,
                     mask=n_ok[None, :], other=0.0)                      # (HEAD_DIM, BLOCK_N) = K^T tile
        v = tl.load(v_base + offs_kn[:, None] * stride_vn + offs_d[None, :] * stride_vd,
                    mask=n_ok[:, None], other=0.0)                       # (BLOCK_N, HEAD_DIM)
        if DOT_FP32:
            kt = kt.to(tl.float32)
            v = v.to(tl.float32)
        s = tl.dot(q, kt, input_precision=DOT_PRECISION) * qk_scale
        s = tl.where(n_ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PRECISION)
        m_i = m_new

    out = acc / l_i[:, None]
    tl.store(o_base + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od,
             out.to(o_ptr.dtype.element_ty), mask=m_ok[:, None])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        B, H, S, D = q.shape
        assert D >= 16 and (D & (D - 1)) == 0, "head dimension must be a power of two >= 16"
        o = torch.empty((B, H, S, D), device=q.device, dtype=q.dtype)
        # Triton's CPU interpreter multiplies bf16 bit patterns in tl.dot, so on CPU the tiles are
        # upcast to fp32 first (same products, same fp32 accumulation).
        dot_fp32 = q.dtype == torch.float32 or q.device.type == "cpu"
        qk_scale = 1.4426950408889634 / math.sqrt(D)
        grid = (triton.cdiv(S, BLOCK_M), B * H)
        attn_fwd_kernel[grid](
            q, k, v, o,
            q.stride(0), q.stride(1), q.stride(2), q.stride(3),
            k.stride(0), k.stride(1), k.stride(2), k.stride(3),
            v.stride(0), v.stride(1), v.stride(2), v.stride(3),
            o.stride(0), o.stride(1), o.stride(2), o.stride(3),
            H, S, qk_scale,
            HEAD_DIM=D, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
            DOT_FP32=dot_fp32, DOT_PRECISION="ieee" if dot_fp32 else "tf32",
            num_warps=NUM_WARPS, num_stages=NUM_STAGES,
        )
        return o
