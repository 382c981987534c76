"""Measurement prototype for issue 19 (not part of the package): a batch-invariant int4 GEMM.

Weights are group-32 int4 (as Q4_K's sub-blocks: per column and group a scale and a min),
stored as nibbles ``[N/16 tiles][K][16 columns]``. Each 32x16 block is dequantised once per
call into L1 and reused for every input row; each output column accumulates over k in a
fixed order that does not depend on the number of rows, so every row of an M-row call is
bitwise the row computed alone (checked for M = 1..128). ``mm`` dequantises to fp32 and
accumulates with FMAs, ``mm_bf16`` dequantises to bf16 for avx512_bf16 pair dot products,
``mm_q`` (the fastest) dots the inputs with the integers themselves (exact in bf16, from a
16-entry table) and applies ``scale * dot + min * sum(x)`` per group. Built at run time with
``torch.utils.cpp_extension.load_inline`` (g++, AVX-512 BF16 CPU). Run from the repository
root: ``python docs/proto/int4_gemm.py`` (measured numbers: docs/design.md, section 3).
"""

import os
import statistics
import time

import torch
from torch.utils.cpp_extension import load_inline

SRC = r"""
#include <torch/extension.h>
#include <immintrin.h>
#include <omp.h>
// qw: uint8 [T][K][8]  (tile of 16 columns, per k 16 nibbles: byte b = col 2b (lo), col 2b+1 (hi))
// sm: float [T][K/32][2][16]  (scale, min per column and group)
// x: float [M][K]  -> y float [M][T*16]
torch::Tensor mm(torch::Tensor x, torch::Tensor qw, torch::Tensor sm) {
  const int64_t M = x.size(0), K = x.size(1), T = qw.size(0), G = K / 32;
  auto y = torch::empty({M, T * 16}, x.options());
  const float* X = x.data_ptr<float>();
  const uint8_t* Q = qw.data_ptr<uint8_t>();
  const float* S = sm.data_ptr<float>();
  float* Y = y.data_ptr<float>();
  #pragma omp parallel
  {
    alignas(64) float w[32 * 16];
    std::vector<__m512> acc(M);
    #pragma omp for schedule(static)
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t m = 0; m < M; ++m) acc[m] = _mm512_setzero_ps();
      for (int64_t g = 0; g < G; ++g) {
        const float* sg = S + ((t * G + g) * 2) * 16;
        __m512 sc = _mm512_loadu_ps(sg), mn = _mm512_loadu_ps(sg + 16);
        const uint8_t* qg = Q + (t * K + g * 32) * 8;
        for (int kk = 0; kk < 32; ++kk) {
          __m128i b = _mm_loadl_epi64((const __m128i*)(qg + kk * 8));   // 8 bytes = 16 nibbles
          __m128i lo = _mm_and_si128(b, _mm_set1_epi8(0x0F));
          __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(0x0F));
          __m128i il = _mm_unpacklo_epi8(lo, hi);                        // col order 0..15
          __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(il));
          _mm512_store_ps(w + kk * 16, _mm512_fmadd_ps(q, sc, mn));
        }
        int64_t m = 0;
        for (; m + 2 <= M; m += 2) {  // two rows, four partial sums each (fixed order per row)
          const float* x0 = X + m * K + g * 32;
          const float* x1 = x0 + K;
          __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
          __m512 b0 = a0, b1 = a0, b2 = a0, b3 = a0;
          for (int kk = 0; kk < 32; kk += 4) {
            __m512 w0 = _mm512_load_ps(w + kk * 16), w1 = _mm512_load_ps(w + kk * 16 + 16);
            __m512 w2 = _mm512_load_ps(w + kk * 16 + 32), w3 = _mm512_load_ps(w + kk * 16 + 48);
            a0 = _mm512_fmadd_ps(_mm512_set1_ps(x0[kk]), w0, a0);
            b0 = _mm512_fmadd_ps(_mm512_set1_ps(x1[kk]), w0, b0);
            a1 = _mm512_fmadd_ps(_mm512_set1_ps(x0[kk + 1]), w1, a1);
            b1 = _mm512_fmadd_ps(_mm512_set1_ps(x1[kk + 1]), w1, b1);
            a2 = _mm512_fmadd_ps(_mm512_set1_ps(x0[kk + 2]), w2, a2);
            b2 = _mm512_fmadd_ps(_mm512_set1_ps(x1[kk + 2]), w2, b2);
            a3 = _mm512_fmadd_ps(_mm512_set1_ps(x0[kk + 3]), w3, a3);
            b3 = _mm512_fmadd_ps(_mm512_set1_ps(x1[kk + 3]), w3, b3);
          }
          __m512 sa = _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3));
          __m512 sb = _mm512_add_ps(_mm512_add_ps(b0, b1), _mm512_add_ps(b2, b3));
          acc[m] = _mm512_add_ps(acc[m], sa);
          acc[m + 1] = _mm512_add_ps(acc[m + 1], sb);
        }
        for (; m < M; ++m) {  // the same operations, one row
          const float* x0 = X + m * K + g * 32;
          __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
          for (int kk = 0; kk < 32; kk += 4) {
            a0 = _mm512_fmadd_ps(_mm512_set1_ps(x0[kk]), _mm512_load_ps(w + kk * 16), a0);
            a1 = _mm512_fmadd_ps(_mm512_set1_ps(x0[kk + 1]), _mm512_load_ps(w + kk * 16 + 16), a1);
            a2 = _mm512_fmadd_ps(_mm512_set1_ps(x0[kk + 2]), _mm512_load_ps(w + kk * 16 + 32), a2);
            a3 = _mm512_fmadd_ps(_mm512_set1_ps(x0[kk + 3]), _mm512_load_ps(w + kk * 16 + 48), a3);
          }
          __m512 sa = _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3));
          acc[m] = _mm512_add_ps(acc[m], sa);
        }
      }
      for (int64_t m = 0; m < M; ++m) _mm512_storeu_ps(Y + m * T * 16 + t * 16, acc[m]);
    }
  }
  return y;
}
// the same with bf16 pair dot products (avx512_bf16): x bf16 [M][K] -> y float [M][T*16]
torch::Tensor mm_bf16(torch::Tensor x, torch::Tensor qw, torch::Tensor sm) {
  const int64_t M = x.size(0), K = x.size(1), T = qw.size(0), G = K / 32;
  auto y = torch::empty({M, T * 16}, x.options().dtype(torch::kFloat));
  const uint32_t* X = (const uint32_t*)x.data_ptr<at::BFloat16>();  // pairs of k
  const uint8_t* Q = qw.data_ptr<uint8_t>();
  const float* S = sm.data_ptr<float>();
  float* Y = y.data_ptr<float>();
  const __m512i perm = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9,
                                        24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1,
                                        16, 0);
  #pragma omp parallel
  {
    alignas(64) __m512bh wp[16];
    std::vector<__m512> acc(M);
    #pragma omp for schedule(static)
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t m = 0; m < M; ++m) acc[m] = _mm512_setzero_ps();
      for (int64_t g = 0; g < G; ++g) {
        const float* sg = S + ((t * G + g) * 2) * 16;
        __m512 sc = _mm512_loadu_ps(sg), mn = _mm512_loadu_ps(sg + 16);
        const uint8_t* qg = Q + (t * K + g * 32) * 8;
        for (int kp = 0; kp < 16; ++kp) {
          __m512 w2[2];
          for (int j = 0; j < 2; ++j) {
            __m128i b = _mm_loadl_epi64((const __m128i*)(qg + (2 * kp + j) * 8));
            __m128i lo = _mm_and_si128(b, _mm_set1_epi8(0x0F));
            __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(0x0F));
            __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi)));
            w2[j] = _mm512_fmadd_ps(q, sc, mn);
          }
          __m512i both = (__m512i)_mm512_cvtne2ps_pbh(w2[1], w2[0]);  // [k cols | k+1 cols]
          wp[kp] = (__m512bh)_mm512_permutexvar_epi16(perm, both);      // (col, k), (col, k+1)
        }
        int64_t m = 0;
        for (; m + 2 <= M; m += 2) {
          const uint32_t* x0 = X + (m * K + g * 32) / 2;
          const uint32_t* x1 = x0 + K / 2;
          __m512 a0 = _mm512_setzero_ps(), a1 = a0, b0 = a0, b1 = a0;
          for (int kp = 0; kp < 16; kp += 2) {
            a0 = _mm512_dpbf16_ps(a0, (__m512bh)_mm512_set1_epi32(x0[kp]), wp[kp]);
            b0 = _mm512_dpbf16_ps(b0, (__m512bh)_mm512_set1_epi32(x1[kp]), wp[kp]);
            a1 = _mm512_dpbf16_ps(a1, (__m512bh)_mm512_set1_epi32(x0[kp + 1]), wp[kp + 1]);
            b1 = _mm512_dpbf16_ps(b1, (__m512bh)_mm512_set1_epi32(x1[kp + 1]), wp[kp + 1]);
          }
          acc[m] = _mm512_add_ps(acc[m], _mm512_add_ps(a0, a1));
          acc[m + 1] = _mm512_add_ps(acc[m + 1], _mm512_add_ps(b0, b1));
        }
        for (; m < M; ++m) {
          const uint32_t* x0 = X + (m * K + g * 32) / 2;
          __m512 a0 = _mm512_setzero_ps(), a1 = a0;
          for (int kp = 0; kp < 16; kp += 2) {
            a0 = _mm512_dpbf16_ps(a0, (__m512bh)_mm512_set1_epi32(x0[kp]), wp[kp]);
            a1 = _mm512_dpbf16_ps(a1, (__m512bh)_mm512_set1_epi32(x0[kp + 1]), wp[kp + 1]);
          }
          acc[m] = _mm512_add_ps(acc[m], _mm512_add_ps(a0, a1));
        }
      }
      for (int64_t m = 0; m < M; ++m) _mm512_storeu_ps(Y + m * T * 16 + t * 16, acc[m]);
    }
  }
  return y;
}
// Integer weights straight to bf16: y[col] = sum_g s[col,g] * (sum_k x_k q[col,k]) + m[col,g] *
// (sum_k x_k), with q (0..15, exact in bf16) taken from a 16-entry table, no per-weight FMA.
// qp: uint8 [T][K/2][16]: byte c = q[col c][2kp] | q[col c][2kp+1] << 4 (the dot-pair layout).
// xs: float [M][G] (sum of each row's 32 bf16 inputs per group, fixed order).
torch::Tensor mm_q(torch::Tensor x, torch::Tensor qp, torch::Tensor sm, torch::Tensor xs) {
  const int64_t M = x.size(0), K = x.size(1), T = qp.size(0), G = K / 32;
  auto y = torch::empty({M, T * 16}, x.options().dtype(torch::kFloat));
  const uint32_t* X = (const uint32_t*)x.data_ptr<at::BFloat16>();
  const uint8_t* Q = qp.data_ptr<uint8_t>();
  const float* S = sm.data_ptr<float>();
  const float* XS = xs.data_ptr<float>();
  float* Y = y.data_ptr<float>();
  const __m512i lut = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                       0x4170, 0x4160, 0x4150, 0x4140, 0x4130, 0x4120, 0x4110,
                                       0x4100, 0x40E0, 0x40C0, 0x40A0, 0x4080, 0x4040, 0x4000,
                                       0x3F80, 0x0000);  // bf16 of 15..0
  const __m128i low4 = _mm_set1_epi8(0x0F);
  #pragma omp parallel
  {
    alignas(64) __m512i wp[16];
    std::vector<__m512> acc(M);
    #pragma omp for schedule(static)
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t m = 0; m < M; ++m) acc[m] = _mm512_setzero_ps();
      for (int64_t g = 0; g < G; ++g) {
        const float* sg = S + ((t * G + g) * 2) * 16;
        __m512 sc = _mm512_loadu_ps(sg), mn = _mm512_loadu_ps(sg + 16);
        const uint8_t* qg = Q + (t * (K / 2) + g * 16) * 16;
        for (int kp = 0; kp < 16; ++kp) {
          __m128i b = _mm_loadu_si128((const __m128i*)(qg + kp * 16));
          __m128i lo = _mm_and_si128(b, low4);
          __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), low4);
          __m256i il = _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));
          wp[kp] = _mm512_permutexvar_epi16(_mm512_cvtepu8_epi16(il), lut);
        }
        int64_t m = 0;
        for (; m + 2 <= M; m += 2) {
          const uint32_t* x0 = X + (m * K + g * 32) / 2;
          const uint32_t* x1 = x0 + K / 2;
          __m512 a0 = _mm512_setzero_ps(), a1 = a0, b0 = a0, b1 = a0;
          for (int kp = 0; kp < 16; kp += 2) {
            __m512bh w0 = (__m512bh)wp[kp], w1 = (__m512bh)wp[kp + 1];
            a0 = _mm512_dpbf16_ps(a0, (__m512bh)_mm512_set1_epi32(x0[kp]), w0);
            b0 = _mm512_dpbf16_ps(b0, (__m512bh)_mm512_set1_epi32(x1[kp]), w0);
            a1 = _mm512_dpbf16_ps(a1, (__m512bh)_mm512_set1_epi32(x0[kp + 1]), w1);
            b1 = _mm512_dpbf16_ps(b1, (__m512bh)_mm512_set1_epi32(x1[kp + 1]), w1);
          }
          __m512 ta = _mm512_fmadd_ps(sc, _mm512_add_ps(a0, a1), acc[m]);
          __m512 tb = _mm512_fmadd_ps(sc, _mm512_add_ps(b0, b1), acc[m + 1]);
          acc[m] = _mm512_fmadd_ps(mn, _mm512_set1_ps(XS[m * G + g]), ta);
          acc[m + 1] = _mm512_fmadd_ps(mn, _mm512_set1_ps(XS[(m + 1) * G + g]), tb);
        }
        for (; m < M; ++m) {
          const uint32_t* x0 = X + (m * K + g * 32) / 2;
          __m512 a0 = _mm512_setzero_ps(), a1 = a0;
          for (int kp = 0; kp < 16; kp += 2) {
            a0 = _mm512_dpbf16_ps(a0, (__m512bh)_mm512_set1_epi32(x0[kp]), (__m512bh)wp[kp]);
            a1 = _mm512_dpbf16_ps(a1, (__m512bh)_mm512_set1_epi32(x0[kp + 1]),
                                  (__m512bh)wp[kp + 1]);
          }
          __m512 ta = _mm512_fmadd_ps(sc, _mm512_add_ps(a0, a1), acc[m]);
          acc[m] = _mm512_fmadd_ps(mn, _mm512_set1_ps(XS[m * G + g]), ta);
        }
      }
      for (int64_t m = 0; m < M; ++m) _mm512_storeu_ps(Y + m * T * 16 + t * 16, acc[m]);
    }
  }
  return y;
}
"""
ext = load_inline(
    "adapld_int4_proto_q",
    cpp_sources=SRC,
    functions=["mm", "mm_bf16", "mm_q"],
    extra_cflags=["-O3", "-mavx512f", "-mavx512bw", "-mavx512bf16", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
    verbose=False,
)


def pack(q, scale, mins):
    """q int [N, K] 0..15, scale/mins float [N, K/32] -> (qw, sm)."""
    N, K = q.shape
    T = N // 16
    qt = q.reshape(T, 16, K).permute(0, 2, 1).contiguous().to(torch.uint8)  # [T, K, 16]
    qw = (qt[..., 0::2] | (qt[..., 1::2] << 4)).contiguous()  # [T, K, 8]
    sm = torch.stack(
        [scale.reshape(T, 16, -1).permute(0, 2, 1), mins.reshape(T, 16, -1).permute(0, 2, 1)], 2
    )
    return qw, sm.contiguous().float()  # [T, G, 2, 16]


def pack_pairs(q):
    """q int [N, K] 0..15 -> uint8 [N/16, K/2, 16]: one byte per column and k pair."""
    n, k = q.shape
    qt = q.reshape(n // 16, 16, k // 2, 2).permute(0, 2, 1, 3).to(torch.uint8)
    return (qt[..., 0] | (qt[..., 1] << 4)).contiguous()


def group_sums(xb):
    """Sum of each row's bf16 inputs per group of 32, in float32 (fixed order)."""
    m, k = xb.shape
    return xb.float().reshape(m, k // 32, 32).sum(-1).contiguous()


if __name__ == "__main__":
    torch.set_num_threads(2)
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    K, N = 1536, 8960
    torch.manual_seed(0)
    q = torch.randint(0, 16, (N, K))
    scale = torch.rand(N, K // 32) * 0.01
    mins = -torch.rand(N, K // 32) * 0.08
    qw, sm = pack(q, scale, mins)
    wref = (q.float().reshape(N, K // 32, 32) * scale[..., None] + mins[..., None]).reshape(N, K)
    x = torch.randn(128, K)
    y = ext.mm(x, qw, sm)
    print("max |err| vs fp32 reference", (y - x @ wref.T).abs().max().item())
    alone = torch.cat([ext.mm(x[i : i + 1].contiguous(), qw, sm) for i in range(128)])
    print(
        "batch-invariant M=1..128:",
        all(torch.equal(ext.mm(x[:m].contiguous(), qw, sm), alone[:m]) for m in range(1, 129)),
    )

    def ms(f, reps=20):
        for _ in range(3):
            f()
        t = []
        for _ in range(reps):
            s = time.perf_counter()
            f()
            t.append(time.perf_counter() - s)
        return statistics.median(t) * 1e3

    from adapld_cli.model.kernels import packed_linear_class

    lin = torch.nn.Linear(K, N, bias=False).to(torch.bfloat16)
    lin.weight.data.copy_(wref.bfloat16())
    packed = packed_linear_class()(lin)
    xb = x.bfloat16()
    yb = ext.mm_bf16(xb, qw, sm)
    print(
        "bf16-dot max |err| vs fp32 reference",
        (yb - xb.float() @ wref.bfloat16().float().T).abs().max().item(),
    )
    aloneb = torch.cat([ext.mm_bf16(xb[i : i + 1].contiguous(), qw, sm) for i in range(128)])
    print(
        "bf16-dot batch-invariant M=1..128:",
        all(
            torch.equal(ext.mm_bf16(xb[:m].contiguous(), qw, sm), aloneb[:m]) for m in range(1, 129)
        ),
    )
    qp = pack_pairs(q)
    yq = ext.mm_q(xb, qp, sm, group_sums(xb))
    print("int-to-bf16 max |err| vs fp32 reference", (yq - xb.float() @ wref.T).abs().max().item())
    aloneq = torch.cat(
        [
            ext.mm_q(xb[i : i + 1].contiguous(), qp, sm, group_sums(xb[i : i + 1]))
            for i in range(128)
        ]
    )
    print(
        "int-to-bf16 batch-invariant M=1..128:",
        all(
            torch.equal(ext.mm_q(xb[:m].contiguous(), qp, sm, group_sums(xb[:m])), aloneq[:m])
            for m in range(1, 129)
        ),
    )
    torch_w4 = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.to(torch.int32), 1)
    zeros = mins + 8 * scale
    torch_sz = torch.stack([scale, zeros], -1).transpose(0, 1).contiguous().to(torch.bfloat16)
    # Timing over LAYERS distinct weight copies, one after the other as in a forward pass, so
    # the weights stream from memory (one layer's 7-28 MB would stay in the CPU's cache).
    layers = 24
    qps = [pack_pairs(torch.randint(0, 16, (N, K))) for _ in range(layers)]
    w4s = [
        torch.ops.aten._convert_weight_to_int4pack_for_cpu(
            torch.randint(0, 16, (N, K), dtype=torch.int32), 1
        )
        for _ in range(layers)
    ]
    packs = []
    for _ in range(layers):
        lin = torch.nn.Linear(K, N, bias=False).to(torch.bfloat16)
        packs.append(packed_linear_class()(lin))
    print(f"M  int-to-bf16  packed-bf16  torch-int4  (ms per layer, 1536->8960, {layers} layers)")
    for M in (1, 2, 4, 8, 16, 32, 64):
        xbm = xb[:M].contiguous()
        xsm = group_sums(xbm)
        intq = ms(lambda xbm=xbm, xsm=xsm: [ext.mm_q(xbm, w, sm, xsm) for w in qps], reps=10)
        ref = ms(lambda xbm=xbm: [p(xbm) for p in packs], reps=10)
        tq = ms(
            lambda xbm=xbm: [
                torch.ops.aten._weight_int4pack_mm_for_cpu(xbm, w, 32, torch_sz) for w in w4s
            ],
            reps=10,
        )
        print(f"{M:3d} {intq / layers:8.3f} {ref / layers:8.3f} {tq / layers:8.3f}")
