// Batch-invariant weight-only quantized matrix products for CPUs with AVX-512 BF16, and for
// CPUs with AVX2 + FMA through qmm_avx2.h (the same source, its 512-bit operations as pairs of
// 256-bit ones). Built once at run time by adapld_cli/model/quant.py
// (torch.utils.cpp_extension.load), with the flags of the CPU it runs on.
//
// Both kernels compute y[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n]) for bfloat16 x with the
// weights kept in the GGUF's own integers and scales, never dequantised to memory:
//
//   q4 (Q4_K): w = d * sc[g] * q - dmin * mn[g],  q in 0..15, group g of 32 inputs, d/dmin per
//              super-block of 256 inputs;  per group: acc += s * dot(x, q) - m * sum(x)
//   q6 (Q6_K): w = d * sc[g] * q,  q in -32..31 (int8), group g of 16 inputs, d per 256;
//              per group: acc += s * dot(x, q)
//   q8 (Q8_0, Q5_0, Q5_1, Q4_0, Q4_1, Q5_K): w = s[g] * (u - z) - mn[g],  u a byte (0..255),
//              z the format's zero point, float32 s and mn per group g of 32 inputs; int8
//              inputs only (see "int8 activations" below)
//
// The integers are exact in bfloat16, so dot(x, q) is an avx512_bf16 pair dot product of the
// bf16 input with the integers themselves. Every output column of every row accumulates over
// its groups in one fixed order that does not depend on how many rows share the call, and
// threads split the columns, never a sum: row m of an M-row call is bit for bit row m computed
// alone, for any M (the property speculative decoding needs to stay exact).
//
// Layouts (T = N / 16 tiles of 16 output columns, KP = K / 2 input pairs):
//   q4: qp uint8 [T][KP][16], per group of 32 inputs 256 bytes: 4 blocks j of 8 inputs, each
//       16 columns' dwords: byte 64j + 4c + k = q[col c][8j + 2k] | q[col c][8j + 2k + 1] << 4
//       (a dword's low nibbles are the block's even inputs, its high nibbles the odd ones:
//       two VNNI vectors from one load, an and and a shift; the int8 inputs are stored in the
//       same order, quantize_rows)
//       sc uint8 [T][K/32][2][16] (sc, mn);  dd float [T][S][2][16] (d, dmin), S = ceil(K/256)
//   q6: qp uint8 [T][K/16][192], per group of 16 inputs, u = q + 32 (0..63, 6 bits): q4's
//       dwords of low nibbles for the two blocks of 8 (bytes 64b + 4c + k = u[c][8b + 2k] & 15 |
//       (u[c][8b + 2k + 1] & 15) << 4), then bytes 128 + 4c + m = sum_v (u[c][8b + p + 2m] >> 4)
//       << 2v over the four vectors v = 2b + p (unpack_q6_u);  sc int8 [T][K/16][16];
//       dd float [T][S][16]
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#ifndef __AVX512F__
#include "qmm_avx2.h"
#endif

namespace {

// Groups ahead whose weights (256 bytes a group and tile in q4's layout, 192 in q6's) and scales the
// group-by-group loops request early. Tiles are contiguous, so past a tile's end these are
// the next tile's, which the same thread takes next (past the last one, a prefetch of memory
// never read: harmless). Requesting them early makes single steps and small passes faster
// (docs/performance.md, "Figures behind code decisions").
constexpr int64_t PREFETCH_GROUPS = 8;

inline void prefetch_group(const uint8_t* w, const uint8_t* sc) {
  for (int b = 0; b < 256; b += 64) _mm_prefetch((const char*)w + b, _MM_HINT_T0);
  _mm_prefetch((const char*)sc, _MM_HINT_T0);
}

// Sum of each row's bf16 inputs per group of 32, in float32, left to right.
std::vector<float> group_sums(const at::BFloat16* x, int64_t M, int64_t K) {
  const int64_t G = K / 32;
  std::vector<float> out(M * G);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t g = 0; g < G; ++g) {
      float s = 0.f;
      for (int k = 0; k < 32; ++k) s += static_cast<float>(x[m * K + g * 32 + k]);
      out[m * G + g] = s;
    }
  return out;
}

inline __m512 u8_to_ps(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)p)));
}

inline __m512 i8_to_ps(const int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)p)));
}

constexpr int64_t Q6_BYTES = 192;  // one q6 group of one tile: 16 inputs x 16 columns x 6 bits

// Vector v = 2b + p of the q6 group at qg as u = q + 32: byte m of dword c = u[c][8b + p + 2m]
// (block b's even inputs for p = 0, its odd ones for p = 1): the block's low nibbles from one
// load and a shift, the high two bits from the group's last 64 bytes (see the q6 layout).
inline __m512i unpack_q6_u(const uint8_t* qg, int v) {
  const __m512i block = _mm512_loadu_si512(qg + 64 * (v / 2));
  const __m512i low = _mm512_and_si512(v % 2 ? _mm512_srli_epi32(block, 4) : block,
                                       _mm512_set1_epi32(0x0F0F0F0F));
  const __m512i top = _mm512_and_si512(_mm512_srli_epi32(_mm512_loadu_si512(qg + 128), 2 * v),
                                       _mm512_set1_epi32(0x03030303));
  return _mm512_or_si512(low, _mm512_slli_epi32(top, 4));
}

void store_row(const __m512 acc, const float* bias, int64_t t, bool out_f32, void* y,
               int64_t row_offset) {
  __m512 v = bias ? _mm512_add_ps(acc, _mm512_loadu_ps(bias + t * 16)) : acc;
  if (out_f32) {
    _mm512_storeu_ps((float*)y + row_offset, v);
  } else {
    __m256bh h = _mm512_cvtneps_pbh(v);
    _mm256_storeu_si256((__m256i*)((at::BFloat16*)y + row_offset), (__m256i)h);
  }
}

// R rows of one group of 2*P inputs: per row two chains of P/2 pair dot products (even and
// odd pairs), then acc = scale * (c0 + c1) [- mins * xsum]. The same operations in the same
// order for every row whatever R is, so blocking rows changes no result.
template <int R, int P>
inline void rows(const uint32_t* x, int64_t stride, const __m512i* wp, __m512 scale,
                 __m512 mins, const float* xsum, int64_t xsum_stride, __m512* acc) {
  __m512 c0[R], c1[R];
  for (int r = 0; r < R; ++r) c0[r] = c1[r] = _mm512_setzero_ps();
#pragma GCC unroll 16
  for (int p = 0; p < P; p += 2) {
    const __m512bh w0 = (__m512bh)wp[p], w1 = (__m512bh)wp[p + 1];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      c0[r] = _mm512_dpbf16_ps(c0[r], (__m512bh)_mm512_set1_epi32(x[r * stride + p]), w0);
      c1[r] = _mm512_dpbf16_ps(c1[r], (__m512bh)_mm512_set1_epi32(x[r * stride + p + 1]), w1);
    }
  }
  for (int r = 0; r < R; ++r) {
    __m512 v = _mm512_fmadd_ps(scale, _mm512_add_ps(c0[r], c1[r]), acc[r]);
    acc[r] = xsum ? _mm512_fnmadd_ps(mins, _mm512_set1_ps(xsum[r * xsum_stride]), v) : v;
  }
}

torch::Tensor output(const torch::Tensor& x, int64_t N, bool out_f32) {
  return torch::empty({x.size(0), N}, x.options().dtype(out_f32 ? torch::kFloat : torch::kBFloat16));
}

}  // namespace

torch::Tensor mm_q4(torch::Tensor x, torch::Tensor qp, torch::Tensor sc, torch::Tensor dd,
                    c10::optional<torch::Tensor> bias_opt, bool out_f32) {
  TORCH_CHECK(x.scalar_type() == torch::kBFloat16 && x.is_contiguous() && x.dim() == 2);
  const int64_t M = x.size(0), K = x.size(1), T = qp.size(0), G = K / 32, S = dd.size(1);
  TORCH_CHECK(K % 32 == 0 && qp.size(1) == K / 2 && sc.size(1) == G);
  const at::BFloat16* xb = x.data_ptr<at::BFloat16>();
  const uint32_t* X = (const uint32_t*)xb;  // bf16 pairs
  const uint8_t* Q = qp.data_ptr<uint8_t>();
  const uint8_t* SC = sc.data_ptr<uint8_t>();
  const float* DD = dd.data_ptr<float>();
  const float* B = bias_opt.has_value() ? bias_opt->data_ptr<float>() : nullptr;
  auto y = output(x, T * 16, out_f32);
  void* Y = y.data_ptr();
  const std::vector<float> xs = group_sums(xb, M, K);
  const __m512i lut = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                       0x4170, 0x4160, 0x4150, 0x4140, 0x4130, 0x4120, 0x4110,
                                       0x4100, 0x40E0, 0x40C0, 0x40A0, 0x4080, 0x4040, 0x4000,
                                       0x3F80, 0x0000);  // bf16 of 15..0
  const __m512i nib = _mm512_set1_epi32(0x000F000F), bytes = _mm512_set1_epi32(0xFF);
  at::parallel_for(0, T, 1, [&](int64_t t0, int64_t t1) {
    alignas(64) __m512i wp[16];
    std::vector<__m512> acc(M);
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t m = 0; m < M; ++m) acc[m] = _mm512_setzero_ps();
      for (int64_t g = 0; g < G; ++g) {
        const float* d = DD + ((t * S + g / 8) * 2) * 16;
        const uint8_t* s8 = SC + ((t * G + g) * 2) * 16;
        const __m512 scale = _mm512_mul_ps(_mm512_loadu_ps(d), u8_to_ps(s8));
        const __m512 mins = _mm512_mul_ps(_mm512_loadu_ps(d + 16), u8_to_ps(s8 + 16));
        const uint8_t* qg = Q + (t * (K / 2) + g * 16) * 16;
        prefetch_group(qg + PREFETCH_GROUPS * 256, SC + ((t * G + g + PREFETCH_GROUPS) * 2) * 16);
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {  // pair p = 4j + k: byte k of dword c (the q4 layout)
          const __m512i block = _mm512_loadu_si512(qg + 64 * j);
#pragma GCC unroll 4
          for (int k = 0; k < 4; ++k) {  // dword c = q[c][2p] | q[c][2p + 1] << 16 -> bf16 pair
            const __m512i b = _mm512_and_si512(_mm512_srli_epi32(block, 8 * k), bytes);
            const __m512i v = _mm512_ternarylogic_epi32(b, _mm512_slli_epi32(b, 12), nib, 0xA8);
            wp[4 * j + k] = _mm512_permutexvar_epi16(v, lut);
          }
        }
        const float* xsg = xs.data() + g;
        int64_t m = 0;
        for (; m + 4 <= M; m += 4) rows<4, 16>(X + (m * K + g * 32) / 2, K / 2, wp, scale, mins,
                                               xsg + m * G, G, &acc[m]);
        for (; m < M; ++m) rows<1, 16>(X + (m * K + g * 32) / 2, K / 2, wp, scale, mins,
                                      xsg + m * G, G, &acc[m]);
      }
      for (int64_t m = 0; m < M; ++m) store_row(acc[m], B, t, out_f32, Y, m * T * 16 + t * 16);
    }
  });
  return y;
}

torch::Tensor mm_q6(torch::Tensor x, torch::Tensor qp, torch::Tensor sc, torch::Tensor dd,
                    c10::optional<torch::Tensor> bias_opt, bool out_f32) {
  TORCH_CHECK(x.scalar_type() == torch::kBFloat16 && x.is_contiguous() && x.dim() == 2);
  const int64_t M = x.size(0), K = x.size(1), T = qp.size(0), G = K / 16, S = dd.size(1);
  TORCH_CHECK(K % 16 == 0 && qp.size(1) == G && qp.size(2) == Q6_BYTES && sc.size(1) == G);
  const uint32_t* X = (const uint32_t*)x.data_ptr<at::BFloat16>();
  const uint8_t* Q = qp.data_ptr<uint8_t>();
  const int8_t* SC = sc.data_ptr<int8_t>();
  const float* DD = dd.data_ptr<float>();
  const float* B = bias_opt.has_value() ? bias_opt->data_ptr<float>() : nullptr;
  auto y = output(x, T * 16, out_f32);
  void* Y = y.data_ptr();
  alignas(64) int16_t table[64];  // bf16 of -32..31
  for (int i = 0; i < 64; ++i) {
    const float f = static_cast<float>(i - 32);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    table[i] = static_cast<int16_t>(bits >> 16);  // exact: small integers
  }
  const __m512i lut_lo = _mm512_load_si512(table), lut_hi = _mm512_load_si512(table + 32);
  const __m512i byte = _mm512_set1_epi32(0xFF);
  at::parallel_for(0, T, 1, [&](int64_t t0, int64_t t1) {
    alignas(64) __m512i wp[8];
    std::vector<__m512> acc(M);
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t m = 0; m < M; ++m) acc[m] = _mm512_setzero_ps();
      for (int64_t g = 0; g < G; ++g) {
        const __m512 scale =
            _mm512_mul_ps(_mm512_loadu_ps(DD + (t * S + g / 16) * 16), i8_to_ps(SC + (t * G + g) * 16));
        const uint8_t* qg = Q + (t * G + g) * Q6_BYTES;
        prefetch_group(qg + PREFETCH_GROUPS * Q6_BYTES, (const uint8_t*)(SC + (t * G + g + PREFETCH_GROUPS) * 16));
        for (int b = 0; b < 2; ++b) {  // pair 4b + m = inputs 8b + 2m, 8b + 2m + 1: q + 32 -> bf16(q)
          const __m512i even = unpack_q6_u(qg, 2 * b), odd = unpack_q6_u(qg, 2 * b + 1);
          for (int m = 0; m < 4; ++m) {
            const __m512i e = _mm512_and_si512(_mm512_srli_epi32(even, 8 * m), byte);
            const __m512i o = _mm512_and_si512(_mm512_srli_epi32(odd, 8 * m), byte);
            wp[4 * b + m] = _mm512_permutex2var_epi16(lut_lo, _mm512_or_si512(e, _mm512_slli_epi32(o, 16)), lut_hi);
          }
        }
        int64_t m = 0;
        for (; m + 4 <= M; m += 4)
          rows<4, 8>(X + (m * K + g * 16) / 2, K / 2, wp, scale, scale, nullptr, 0, &acc[m]);
        for (; m < M; ++m)
          rows<1, 8>(X + (m * K + g * 16) / 2, K / 2, wp, scale, scale, nullptr, 0, &acc[m]);
      }
      for (int64_t m = 0; m < M; ++m) store_row(acc[m], B, t, out_f32, Y, m * T * 16 + t * 16);
    }
  });
  return y;
}

// ----------------------------------------------------------------------------- attention
// Exact attention for decoding passes: query i attends keys 0..P[i]-1 of the cache, then the
// keys extra[ptr[i]..ptr[i+1]) (its tree ancestors and itself), in that order. Per query and
// head (float32 arithmetic here; a bfloat16 cache with d a multiple of 32 takes attend_bf()
// below, under the same contract): scores as 16-lane dot products reduced in a fixed tree,
// softmax with a fixed polynomial exp over 16-key chunks, the weighted sum of values
// accumulated key by key. Every operation depends only on the query, its key sequence and d: a node of a draft tree gets
// the very result of a single decoding step over the same keys, whatever else is in the pass.

namespace {

inline __m512 exp512(__m512 x) {  // Cephes expf: x = k ln2 + r, |r| <= ln2 / 2
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500E-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507E-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073E-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894E-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459E-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201E-1f));
  const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.f));
  return _mm512_scalef_ps(y, k);
}

inline __mmask16 tail_mask(int64_t left) {
  return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
}

template <typename T>
inline __m512 load16(const T* p, __mmask16 m);

template <>
inline __m512 load16<float>(const float* p, __mmask16 m) {
  return _mm512_maskz_loadu_ps(m, p);
}

template <>
inline __m512 load16<at::BFloat16>(const at::BFloat16* p, __mmask16 m) {
  __m256i h = _mm256_maskz_loadu_epi16(m, (const void*)p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// Rows of the cache read AHEAD keys ahead of the one in use: a decoding step streams the whole
// cache once, and the hardware prefetchers stop at each 4 KB page.
constexpr int64_t AHEAD = 16;

template <typename T>
inline void prefetch_row(const T* p, int64_t count) {
  for (int64_t b = 0; b < count * (int64_t)sizeof(T); b += 64) _mm_prefetch((const char*)p + b, _MM_HINT_T0);
}

// The exponentials of one head's L scores (less their maximum) in place, over 16-key chunks
// in a fixed order; returns their sum in every lane.
inline __m512 exp_row(float* sg, int64_t L) {
  __m512 mx = _mm512_set1_ps(-INFINITY);
  for (int64_t j = 0; j < L; j += 16)
    mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), tail_mask(L - j), sg + j));
  const __m512 top = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
  __m512 sum = _mm512_setzero_ps();
  for (int64_t j = 0; j < L; j += 16) {
    const __mmask16 m = tail_mask(L - j);
    const __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, sg + j), top));
    sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(m, e));
    _mm512_mask_storeu_ps(sg + j, m, e);
  }
  return _mm512_set1_ps(_mm512_reduce_add_ps(sum));
}

// Softmax of one head's L scores in place.
inline void softmax_row(float* sg, int64_t L) {
  const __m512 total = exp_row(sg, L);
  for (int64_t j = 0; j < L; j += 16) {
    const __mmask16 m = tail_mask(L - j);
    _mm512_mask_storeu_ps(sg + j, m, _mm512_div_ps(_mm512_maskz_loadu_ps(m, sg + j), total));
  }
}

template <typename T>
void attend(const float* Q, const T* K, const T* V, const int64_t* P, const int64_t* ptr,
            const int64_t* extra, float* O, int64_t n, int64_t H, int64_t KV, int64_t KS,
            int64_t d) {
  const int64_t G = H / KV, C = (d + 15) / 16;
  at::parallel_for(0, n * KV, 1, [&](int64_t w0, int64_t w1) {
    std::vector<float> score;
    std::vector<__m512> acc(G * C), kv16(C);
    for (int64_t w = w0; w < w1; ++w) {
      const int64_t i = w / KV, kv = w % KV, e0 = ptr[i], L = P[i] + ptr[i + 1] - e0;
      const T* Kh = K + kv * KS;
      const T* Vh = V + kv * KS;
      const float* Qi = Q + (i * H + kv * G) * d;  // G heads of this kv head, [G][d]
      auto key = [&](int64_t j) { return j < P[i] ? j : extra[e0 + j - P[i]]; };
      score.assign(G * L, 0.f);
      for (int64_t j = 0; j < L; ++j) {
        const T* kj = Kh + key(j) * d;
        for (int64_t c = 0; c < C; ++c) kv16[c] = load16<T>(kj + c * 16, tail_mask(d - c * 16));
        for (int64_t g = 0; g < G; ++g) {
          __m512 a = _mm512_setzero_ps();
          for (int64_t c = 0; c < C; ++c)
            a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail_mask(d - c * 16), Qi + g * d + c * 16),
                                kv16[c], a);
          score[g * L + j] = _mm512_reduce_add_ps(a);
        }
      }
      for (int64_t g = 0; g < G; ++g) softmax_row(score.data() + g * L, L);
      for (auto& a : acc) a = _mm512_setzero_ps();
      for (int64_t j = 0; j < L; ++j) {  // weighted sum of values, key by key
        const T* vj = Vh + key(j) * d;
        for (int64_t c = 0; c < C; ++c) {
          const __m512 vc = load16<T>(vj + c * 16, tail_mask(d - c * 16));
          for (int64_t g = 0; g < G; ++g)
            acc[g * C + c] = _mm512_fmadd_ps(_mm512_set1_ps(score[g * L + j]), vc, acc[g * C + c]);
        }
      }
      float* Oi = O + (i * H + kv * G) * d;
      for (int64_t g = 0; g < G; ++g)
        for (int64_t c = 0; c < C; ++c)
          _mm512_mask_storeu_ps(Oi + g * d + c * 16, tail_mask(d - c * 16), acc[g * C + c]);
    }
  });
}

// 16 keys' score partials v[0..15] (16 lanes each) -> one vector whose lane jj is the sum of
// v[jj]'s lanes, each summed in exactly _mm512_reduce_add_ps' association (high 8 + low 8,
// then high 4 + low 4, then lanes 0 + 2 and 1 + 3, then those two): a transposing butterfly
// that runs the same additions for 16 keys at once (IEEE addition is commutative, so only the
// grouping matters, and it is the same).
inline __m512 reduce16(const __m512* v) {
  __m512 w[8], z[4], u[2];
  for (int p = 0; p < 8; ++p)  // T3: lanes 0-7 key 2p, 8-15 key 2p + 1
    w[p] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], 0x44),
                         _mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], 0xEE));
  for (int p = 0; p < 4; ++p)  // T6: block q = key 4p + q
    z[p] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * p], w[2 * p + 1], 0x88),
                         _mm512_shuffle_f32x4(w[2 * p], w[2 * p + 1], 0xDD));
  for (int p = 0; p < 2; ++p)  // T8: block q = keys 8p + q (lanes 0, 1), 8p + 4 + q (2, 3)
    u[p] = _mm512_add_ps(_mm512_shuffle_ps(z[2 * p], z[2 * p + 1], 0x44),
                         _mm512_shuffle_ps(z[2 * p], z[2 * p + 1], 0xEE));
  // lane 4q + t = key q + 4t
  const __m512 r = _mm512_add_ps(_mm512_shuffle_ps(u[0], u[1], 0x88),
                                 _mm512_shuffle_ps(u[0], u[1], 0xDD));
  const __m512i order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
  return _mm512_permutexvar_ps(order, r);
}

// f(g0, std::integral_constant<int, GB>{}) for heads 0 .. G - 1 in blocks of up to six from
// g0 (GB = min(6, G - g0)): the block's head count as a template parameter, so that its
// accumulators stay in registers.
template <typename F>
inline void for_head_blocks(int64_t G, F&& f) {
  for (int64_t g0 = 0; g0 < G; g0 += 6) {
    switch (std::min<int64_t>(6, G - g0)) {
      case 6: f(g0, std::integral_constant<int, 6>{}); break;
      case 5: f(g0, std::integral_constant<int, 5>{}); break;
      case 4: f(g0, std::integral_constant<int, 4>{}); break;
      case 3: f(g0, std::integral_constant<int, 3>{}); break;
      case 2: f(g0, std::integral_constant<int, 2>{}); break;
      default: f(g0, std::integral_constant<int, 1>{}); break;
    }
  }
}

// Weighted sum of values for heads g0 .. g0 + GB - 1 and chunks c0 .. c0 + CB - 1 of one query:
// each value chunk is loaded once for the GB heads; every output lane sums p_j v_j key by key.
template <typename T, int GB, int CB, bool FULL>
inline void weigh(const float* score, int64_t L, const T* Vh, const int64_t* P, const int64_t* extra,
                  int64_t i, int64_t e0, int64_t d, int c0, const __mmask16* mk, float* Oi) {
  __m512 a[GB][CB];
  for (int g = 0; g < GB; ++g)
    for (int c = 0; c < CB; ++c) a[g][c] = _mm512_setzero_ps();
  for (int64_t j = 0; j < L; ++j) {
    const T* vj = Vh + (j < P[i] ? j : extra[e0 + j - P[i]]) * d + c0 * 16;
    if (j + AHEAD < P[i]) prefetch_row(Vh + (j + AHEAD) * d + c0 * 16, CB * 16);
    __m512 vc[CB];
#pragma GCC unroll 8
    for (int c = 0; c < CB; ++c) vc[c] = load16<T>(vj + c * 16, mk[c0 + c]);
#pragma GCC unroll 8
    for (int g = 0; g < GB; ++g) {
      const __m512 p = _mm512_set1_ps(score[g * L + j]);
#pragma GCC unroll 8
      for (int c = 0; c < CB; ++c) a[g][c] = _mm512_fmadd_ps(p, vc[c], a[g][c]);
    }
  }
  for (int g = 0; g < GB; ++g)
    for (int c = 0; c < CB; ++c) _mm512_mask_storeu_ps(Oi + g * d + (c0 + c) * 16, mk[c0 + c], a[g][c]);
}

template <typename T, int CB, bool FULL>
inline void weigh_heads(const float* score, int64_t L, const T* Vh, const int64_t* P,
                        const int64_t* extra, int64_t i, int64_t e0, int64_t d, int c0,
                        const __mmask16* mk, float* Oi, int64_t G) {
  for_head_blocks(G, [&](int64_t g0, auto gb) {  // with CB <= 4: up to 24 accumulators
    weigh<T, decltype(gb)::value, CB, FULL>(score + g0 * L, L, Vh, P, extra, i, e0, d, c0, mk,
                                            Oi + g0 * d);
  });
}

// attend() with the head size's 16-lane chunks known at compile time (C = ceil(d / 16); FULL:
// d = 16 C): each key row is loaded once for all heads of its kv head, its scores reduced 16
// keys at a time (reduce16), and each value chunk loaded once for up to six heads. Every
// score, softmax and sum runs the very operations of attend() in the same order, so the
// results are attend()'s bit for bit.
template <typename T, int C, bool FULL>
void attend_fixed(const float* Q, const T* K, const T* V, const int64_t* P, const int64_t* ptr,
                  const int64_t* extra, float* O, int64_t n, int64_t H, int64_t KV, int64_t KS,
                  int64_t d) {
  const int64_t G = H / KV;
  __mmask16 mk[C];
  for (int c = 0; c < C; ++c) mk[c] = FULL ? (__mmask16)0xFFFF : tail_mask(d - c * 16);
  auto load_q = [&](const float* p, int c) {
    return FULL ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(mk[c], p);
  };
  at::parallel_for(0, n * KV, 1, [&](int64_t w0, int64_t w1) {
    std::vector<float> score;
    std::vector<__m512> part(G * 16);  // [G][16 keys] score partials
    for (int64_t w = w0; w < w1; ++w) {
      const int64_t i = w / KV, kv = w % KV, e0 = ptr[i], L = P[i] + ptr[i + 1] - e0;
      const T* Kh = K + kv * KS;
      const T* Vh = V + kv * KS;
      const float* Qi = Q + (i * H + kv * G) * d;
      auto key = [&](int64_t j) { return j < P[i] ? j : extra[e0 + j - P[i]]; };
      score.assign(G * L, 0.f);
      for (int64_t j0 = 0; j0 < L; j0 += 16) {
        const int64_t B = std::min<int64_t>(16, L - j0);
        for (int64_t jj = 0; jj < 16; ++jj) {
          if (jj >= B) {  // past the last key: zeros, never stored
            for (int64_t g = 0; g < G; ++g) part[g * 16 + jj] = _mm512_setzero_ps();
            continue;
          }
          const T* kj = Kh + key(j0 + jj) * d;
          if (j0 + jj + AHEAD < P[i]) prefetch_row(Kh + (j0 + jj + AHEAD) * d, d);
          __m512 k16[C];
#pragma GCC unroll 16
          for (int c = 0; c < C; ++c) k16[c] = load16<T>(kj + c * 16, mk[c]);
          for (int64_t g = 0; g < G; ++g) {
            __m512 a = _mm512_setzero_ps();
#pragma GCC unroll 16
            for (int c = 0; c < C; ++c) a = _mm512_fmadd_ps(load_q(Qi + g * d + c * 16, c), k16[c], a);
            part[g * 16 + jj] = a;
          }
        }
        for (int64_t g = 0; g < G; ++g)
          _mm512_mask_storeu_ps(score.data() + g * L + j0, tail_mask(B),
                                reduce16(part.data() + g * 16));
      }
      for (int64_t g = 0; g < G; ++g) softmax_row(score.data() + g * L, L);
      float* Oi = O + (i * H + kv * G) * d;
      constexpr int CB = C < 4 ? C : 4;
      for (int c0 = 0; c0 < C; c0 += CB)
        weigh_heads<T, CB, FULL>(score.data(), L, Vh, P, extra, i, e0, d, c0, mk, Oi, G);
    }
  });
}

// ---------------------------------------------------------------- bfloat16 arithmetic
// attend() for a bfloat16 cache with d a multiple of 32, at twice the products per
// instruction: the queries are rounded to bfloat16 (round to nearest even) and each score is
// d / 32 pair dot products (vdpbf16ps: bf16 x bf16 products are exact in float32, each
// lane adds its odd element's product, then its even one's) reduced as attend() reduces
// them; the softmax is attend()'s, in float32; the probabilities are rounded to bfloat16 and
// the values summed two keys at a time, keys j and j + 1 for even j (a missing last key
// counts as a zero row), each output lane in that fixed sequence. As in attend(), every
// operation depends only on the query, its key sequence and d. Both phases are bound by the
// multiply-add units at long caches (docs/performance.md, "bfloat16 attention").

using u16 = uint16_t;

// 16 floats -> 16 bfloat16 at p (round to nearest even)
inline void store_bf16(u16* p, __m512 x) {
  _mm256_storeu_si256((__m256i*)p, (__m256i)_mm512_cvtneps_pbh(x));
}

// Lane l of the result: a[l] in its low half, b[l] in its high half (two keys' values at one
// position, the pair a probability pair multiplies; the generic loop's form).
inline __m512i pair16(const u16* a, const u16* b) {
  return _mm512_or_si512(
      _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)a)),
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)b)), 16));
}

inline __m512i broadcast_pair(const u16* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return _mm512_set1_epi32(v);
}

// softmax_row() of one head's L scores (exponentials left in sg), each probability rounded to
// bfloat16 as it is divided, into p[0 .. upto) (upto a multiple of 16 at least L; zeros past L)
inline void probabilities_bf16(float* sg, int64_t L, u16* p, int64_t upto) {
  const __m512 total = exp_row(sg, L);
  for (int64_t j = 0; j < upto; j += 16)
    store_bf16(p + j, j < L ? _mm512_div_ps(_mm512_maskz_loadu_ps(tail_mask(L - j), sg + j), total)
                            : _mm512_setzero_ps());
}

// One thread's state over the call's work items w = (query i, kv head): the item's keys
// (key(j): the cache row of its j-th key, j < L), its G queries in bfloat16 ([G][d]), their
// scores ([G][L]) and, after softmax(), the probabilities in bfloat16 ([G][LP]).
struct BfRows {
  const float* Q;
  const u16 *K, *V;
  const int64_t *P, *ptr, *extra;
  int64_t H, KV, KS, d, G;
  int64_t i = 0, kv = 0, e0 = 0, L = 0, LP = 0;
  const u16 *Kh = nullptr, *Vh = nullptr;  // the item's kv head
  std::vector<u16> q, p, zero;
  std::vector<float> score;
  BfRows(const float* Q, const at::BFloat16* K, const at::BFloat16* V, const int64_t* P,
         const int64_t* ptr, const int64_t* extra, int64_t H, int64_t KV, int64_t KS, int64_t d)
      : Q(Q), K((const u16*)K), V((const u16*)V), P(P), ptr(ptr), extra(extra), H(H), KV(KV),
        KS(KS), d(d), G(H / KV), zero(d, 0) {}
  int64_t key(int64_t j) const { return j < P[i] ? j : extra[e0 + j - P[i]]; }
  // Work item w: its keys, its queries rounded to bfloat16, room for every score (each written)
  void start(int64_t w) {
    i = w / KV, kv = w % KV, e0 = ptr[i], L = P[i] + ptr[i + 1] - e0;
    Kh = K + kv * KS, Vh = V + kv * KS;
    const float* Qi = Q + (i * H + kv * G) * d;
    q.resize(G * d);
    for (int64_t k = 0; k < G * d; k += 16) store_bf16(q.data() + k, _mm512_loadu_ps(Qi + k));
    score.resize(G * L);
  }
  float* out(float* O) const { return O + (i * H + kv * G) * d; }  // the item's [G][d]
  // softmax_row() of each head's scores, each probability rounded to bfloat16 as it is
  // divided; p[g][j] = 0 for L <= j < 16 ceil(L / 16) (the zero after an odd L)
  void softmax() {
    LP = (L + 16) / 16 * 16;
    p.resize(G * LP);
    for (int64_t g = 0; g < G; ++g)
      probabilities_bf16(score.data() + g * L, L, p.data() + g * LP, (L + 15) / 16 * 16);
  }
};

// Generic loop (any d multiple of 32): the reference the register form must equal bit for bit.
void attend_bf(const float* Q, const at::BFloat16* K, const at::BFloat16* V, const int64_t* P,
               const int64_t* ptr, const int64_t* extra, float* O, int64_t n, int64_t H,
               int64_t KV, int64_t KS, int64_t d) {
  const int64_t C2 = d / 32;
  at::parallel_for(0, n * KV, 1, [&](int64_t w0, int64_t w1) {
    BfRows r(Q, K, V, P, ptr, extra, H, KV, KS, d);
    const int64_t G = r.G;
    for (int64_t w = w0; w < w1; ++w) {
      r.start(w);
      const int64_t L = r.L;
      for (int64_t j = 0; j < L; ++j)
        for (int64_t g = 0; g < G; ++g) {
          __m512 a = _mm512_setzero_ps();
          for (int64_t c = 0; c < C2; ++c)
            a = _mm512_dpbf16_ps(a, (__m512bh)_mm512_loadu_si512(r.q.data() + g * d + c * 32),
                                 (__m512bh)_mm512_loadu_si512(r.Kh + r.key(j) * d + c * 32));
          r.score[g * L + j] = _mm512_reduce_add_ps(a);
        }
      r.softmax();
      float* Oi = r.out(O);
      for (int64_t g = 0; g < G; ++g)
        for (int64_t c = 0; c < d / 16; ++c) {
          __m512 a = _mm512_setzero_ps();
          for (int64_t j = 0; j < L; j += 2) {
            const u16* v1 = j + 1 < L ? r.Vh + r.key(j + 1) * d : r.zero.data();
            a = _mm512_dpbf16_ps(a, (__m512bh)broadcast_pair(r.p.data() + g * r.LP + j),
                                 (__m512bh)pair16(r.Vh + r.key(j) * d + c * 16, v1 + c * 16));
          }
          _mm512_storeu_ps(Oi + g * d + c * 16, a);
        }
    }
  });
}

// Weighted sum of values for heads g0 .. g0 + GB - 1 and 32-position blocks b0 .. b0 + BB - 1
// of one query, two keys at a time. The pairs come from vpunpck{l,h}wd of the two keys' rows,
// which interleave within 128-bit lanes: accumulator 2b + h, lane 4t + u holds position
// 32 b + 8 t + 4 h + u (put in order when stored); per position the operations are
// attend_bf()'s.
template <int GB, int BB>
inline void weigh_bf(const BfRows& r, int64_t g0, int b0, float* Oi) {
  const int64_t L = r.L, d = r.d, P = r.P[r.i];
  const u16* Vh = r.Vh;
  __m512 a[GB][2 * BB];
  for (int g = 0; g < GB; ++g)
    for (int c = 0; c < 2 * BB; ++c) a[g][c] = _mm512_setzero_ps();
  auto row = [&](int64_t j) { return Vh + r.key(j) * d + b0 * 32; };
  for (int64_t j = 0; j < L; j += 2) {
    const u16* v0 = row(j);
    const u16* v1 = j + 1 < L ? row(j + 1) : r.zero.data();
    if (j + AHEAD + 1 < P) {
      prefetch_row(Vh + (j + AHEAD) * d + b0 * 32, BB * 32);
      prefetch_row(Vh + (j + AHEAD + 1) * d + b0 * 32, BB * 32);
    }
    __m512i vc[2 * BB];
#pragma GCC unroll 8
    for (int b = 0; b < BB; ++b) {
      const __m512i x = _mm512_loadu_si512(v0 + b * 32), y = _mm512_loadu_si512(v1 + b * 32);
      vc[2 * b] = _mm512_unpacklo_epi16(x, y);
      vc[2 * b + 1] = _mm512_unpackhi_epi16(x, y);
    }
#pragma GCC unroll 8
    for (int g = 0; g < GB; ++g) {
      const __m512i p = broadcast_pair(r.p.data() + (g0 + g) * r.LP + j);
#pragma GCC unroll 8
      for (int c = 0; c < 2 * BB; ++c) a[g][c] = _mm512_dpbf16_ps(a[g][c], (__m512bh)p, (__m512bh)vc[c]);
    }
  }
  alignas(64) float lanes[GB][BB][2][16];
#pragma GCC unroll 8
  for (int g = 0; g < GB; ++g)
#pragma GCC unroll 8
    for (int c = 0; c < 2 * BB; ++c) _mm512_storeu_ps(lanes[g][c / 2][c % 2], a[g][c]);
  for (int g = 0; g < GB; ++g)
    for (int b = 0; b < BB; ++b) {
      float* o = Oi + (g0 + g) * d + (b0 + b) * 32;
      for (int h = 0; h < 2; ++h)
        for (int l = 0; l < 16; ++l) o[8 * (l / 4) + 4 * h + l % 4] = lanes[g][b][h][l];
    }
}

// Score partials of B <= 16 keys (rows) for GB heads (queries q, [GB][d] bfloat16), into
// part[g * 16 + jj]: the queries held in registers for the block (GB C2 <= 24 of them), each
// key chunk loaded once for the GB heads; per head attend_bf()'s chain.
template <int GB, int C2>
inline void block_scores(const u16* q, const u16* const* rows, int64_t B, int64_t d, __m512* part) {
  __m512i qr[GB][C2];
#pragma GCC unroll 8
  for (int g = 0; g < GB; ++g)
#pragma GCC unroll 8
    for (int c = 0; c < C2; ++c) qr[g][c] = _mm512_loadu_si512(q + g * d + c * 32);
  for (int64_t jj = 0; jj < B; ++jj) {
    __m512 a[GB];
#pragma GCC unroll 8
    for (int g = 0; g < GB; ++g) a[g] = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int c = 0; c < C2; ++c) {
      const __m512i kc = _mm512_loadu_si512(rows[jj] + c * 32);
#pragma GCC unroll 8
      for (int g = 0; g < GB; ++g) a[g] = _mm512_dpbf16_ps(a[g], (__m512bh)qr[g][c], (__m512bh)kc);
    }
#pragma GCC unroll 8
    for (int g = 0; g < GB; ++g) part[g * 16 + jj] = a[g];
  }
}

// attend_bf() with d = 16 C known at compile time: each key row is loaded once for all heads
// of its kv head and its scores reduced 16 keys at a time (reduce16); each value pair is built
// once for up to six heads. The very operations of attend_bf() in the same order.
template <int C>
void attend_bf_fixed(const float* Q, const at::BFloat16* K, const at::BFloat16* V,
                     const int64_t* P, const int64_t* ptr, const int64_t* extra, float* O,
                     int64_t n, int64_t H, int64_t KV, int64_t KS, int64_t d) {
  constexpr int C2 = C / 2;
  at::parallel_for(0, n * KV, 1, [&](int64_t w0, int64_t w1) {
    BfRows r(Q, K, V, P, ptr, extra, H, KV, KS, d);
    const int64_t G = r.G;
    std::vector<__m512> part(G * 16);  // [G][16 keys] score partials
    for (int64_t w = w0; w < w1; ++w) {
      r.start(w);
      const int64_t L = r.L, Pi = P[r.i];
      for (int64_t j0 = 0; j0 < L; j0 += 16) {
        const int64_t B = std::min<int64_t>(16, L - j0);
        const u16* rows[16];
        for (int64_t jj = 0; jj < 16; ++jj) {
          if (jj >= B) {  // past the last key: zeros, never stored
            for (int64_t g = 0; g < G; ++g) part[g * 16 + jj] = _mm512_setzero_ps();
            continue;
          }
          rows[jj] = r.Kh + r.key(j0 + jj) * d;
          if (j0 + jj + AHEAD < Pi) prefetch_row(r.Kh + (j0 + jj + AHEAD) * d, d);
        }
        for_head_blocks(G, [&](int64_t g0, auto gb) {
          block_scores<decltype(gb)::value, C2>(r.q.data() + g0 * d, rows, B, d,
                                                part.data() + g0 * 16);
        });
        for (int64_t g = 0; g < G; ++g)
          _mm512_mask_storeu_ps(r.score.data() + g * L + j0, tail_mask(B),
                                reduce16(part.data() + g * 16));
      }
      r.softmax();
      float* Oi = r.out(O);
      constexpr int BB = C2 < 2 ? C2 : 2;  // 32-position blocks a sweep: 4 accumulators a head
      for (int b0 = 0; b0 < C2; b0 += BB)  // up to 6 heads at a time: 24 accumulators
        for_head_blocks(G, [&](int64_t g0, auto gb) {
          weigh_bf<decltype(gb)::value, BB>(r, g0, b0, Oi);
        });
    }
  });
}

}  // namespace

#if defined(__AMX_BF16__) && defined(__AMX_TILE__)
#include "attn_amx.h"
#define ATTN_AMX 1
#else
#define ATTN_AMX 0
#endif

namespace {

// attend() for any head size: the register form where it is compiled (d = 64, 128); for a
// bfloat16 cache with d a multiple of 32, attend_bf()'s arithmetic, or in the amx build the
// tiles' (attn_amx.h) wherever they apply.
template <typename T>
void attend_any(const float* Q, const T* K, const T* V, const int64_t* P, const int64_t* ptr,
                const int64_t* extra, float* O, int64_t n, int64_t H, int64_t KV, int64_t KS,
                int64_t d) {
  if constexpr (std::is_same_v<T, at::BFloat16>) {
#if ATTN_AMX
    if (attend_tiles(Q, K, V, P, ptr, extra, O, n, H, KV, KS, d)) return;
#endif
    if (d == 128) return attend_bf_fixed<8>(Q, K, V, P, ptr, extra, O, n, H, KV, KS, d);
    if (d == 64) return attend_bf_fixed<4>(Q, K, V, P, ptr, extra, O, n, H, KV, KS, d);
    if (d % 32 == 0) return attend_bf(Q, K, V, P, ptr, extra, O, n, H, KV, KS, d);
  }
  if (d == 128)
    attend_fixed<T, 8, true>(Q, K, V, P, ptr, extra, O, n, H, KV, KS, d);
  else if (d == 64)
    attend_fixed<T, 4, true>(Q, K, V, P, ptr, extra, O, n, H, KV, KS, d);
  else
    attend<T>(Q, K, V, P, ptr, extra, O, n, H, KV, KS, d);
}

}  // namespace

// q float [n][H][d] (scaled); k, v [KV][S][d] float or bfloat16, each head's [S][d] rows
// contiguous (heads may lie further apart: a view of a preallocated cache); prefix int64 [n];
// ptr int64 [n + 1]; extra int64 [ptr[n]] -> float [n][H][d]. generic: attend() for every
// head size (tests compare it with the register form, which must equal it bit for bit).
torch::Tensor attention(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor prefix,
                        torch::Tensor ptr, torch::Tensor extra, bool generic = false) {
  TORCH_CHECK(q.scalar_type() == torch::kFloat && q.is_contiguous() &&
              k.scalar_type() == v.scalar_type() && k.dim() == 3 && v.dim() == 3);
  const int64_t n = q.size(0), H = q.size(1), d = q.size(2), KV = k.size(0), S = k.size(1);
  TORCH_CHECK(H % KV == 0 && k.size(2) == d && v.size(1) == S && v.size(2) == d);
  TORCH_CHECK(k.stride(2) == 1 && k.stride(1) == d && v.stride(2) == 1 && v.stride(1) == d &&
              v.stride(0) == k.stride(0), "attention: each head's keys and values contiguous");
  const int64_t KS = k.stride(0);
  auto out = torch::empty_like(q);
  const int64_t* P = prefix.data_ptr<int64_t>();
  const int64_t* R = ptr.data_ptr<int64_t>();
  const int64_t* E = extra.data_ptr<int64_t>();
  if (k.scalar_type() == torch::kBFloat16) {
    auto run = !generic ? attend_any<at::BFloat16> : d % 32 == 0 ? attend_bf : attend<at::BFloat16>;
    run(q.data_ptr<float>(), k.data_ptr<at::BFloat16>(), v.data_ptr<at::BFloat16>(), P, R, E,
        out.data_ptr<float>(), n, H, KV, KS, d);
  } else {
    TORCH_CHECK(k.scalar_type() == torch::kFloat);
    auto run = generic ? attend<float> : attend_any<float>;
    run(q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(), P, R, E,
        out.data_ptr<float>(), n, H, KV, KS, d);
  }
  return out;
}

// ----------------------------------------------------------------------- int8 activations
// The same products with the inputs quantized to 8 bits first, per row and super-block of
// 256 inputs (the GGUF's Q8_K: x ~ xs * xq, xs = max|x| / 127, xq = round(x / xs)), then
// multiplied with the weights' integers by AVX-512 VNNI (vpdpbusd: 64 products of an unsigned
// byte and a signed byte per instruction, twice bf16's rate). Per row, column and super-block
// s:
//   q4 (q 0..15 unsigned, xq signed): A = sum_g sc_g sum(q xq), B = sum_g mn_g sum_g(xq),
//       acc += d xs * A - dmin xs * B
//   q6 (q -32..31 signed, the inputs as xq + 128 unsigned): A = sum_g sc_g sum(q (xq + 128)),
//       C = sum_g sc_g sum(q), a constant of the weights (offsets_i8), so that A - 128 C =
//       sum_g sc_g sum(q xq) exactly; acc += d xs * (A - 128 C), with no per-row term
//   q8 (u 0..255 unsigned, xq signed), per group g of 32 inputs (xs of its super-block, X_g =
//       sum_g(xq)): acc += s_g xs * (sum(u xq) - z X_g) [- mn_g xs * X_g]: the integers exact,
//       then the float steps in group order (no blocked form: every M takes the group loop)
// Integer sums are exact, so their order is free; the float steps per row and super-block
// are one fixed sequence whatever M is, and a row's quantization depends on that row alone:
// row m of an M-row call is still bit for bit row m computed alone.

namespace {

constexpr int RB = 8;  // rows per block of the products (then 4, then 1)

// Row blocks of an M-row input: full blocks of RB, then of 4, then single rows.
inline int block_rows(int64_t M, int64_t m) { return m + RB <= M ? RB : m + 4 <= M ? 4 : 1; }

struct QuantRows {
  std::vector<int32_t> xq;  // int8 xq, 4 per dword, row blocks interleaved: block at row m0
                            // of R rows holds dword p of row m0 + r at m0 * K / 4 + p * R + r
  std::vector<float> xs;    // [M][S]
  std::vector<int32_t> qp;  // [M][ceil(G / 2)]: sum(xq) of groups 2j, 2j + 1 as two int16
};

// Each row's 256-input blocks quantized in parallel, written straight into the row-block
// interleaved layout, with the group sums: the same values as quantizing rows one by one.
// offset (q6): every xq stored as xq + 128, unsigned, and no group sums (q6 needs none).
// evens_first (q4, q6): each 8 inputs stored even ones first, the order of their weight dwords.
// tiles (the AMX form, qmm_amx.h): per block of 16 rows and chunk of 64 inputs a contiguous
// 1 KB tile, row after row, S * 4 chunks a row block (zeros past K) and the rows padded with
// zero rows to a multiple of 16; row blocks are then not interleaved.
QuantRows quantize_rows(const at::BFloat16* x, int64_t M, int64_t K, int64_t group,
                        bool offset, bool evens_first = false, bool tiles = false) {
  const int64_t S = (K + 255) / 256, G = K / group, GP = (G + 1) / 2;
  QuantRows out;
  const int64_t KC = (K + 255) / 256 * 4;  // tiles: chunks of 64 inputs a row block
  out.xq.resize(tiles ? (M + 15) / 16 * KC * 256 : M * K / 4);
  out.xs.resize(M * S);
  out.qp.assign(M * GP, 0);
  int16_t* q16 = (int16_t*)out.qp.data();  // int16 [M][2 GP]: group g of row m at m 2GP + g
  std::vector<int64_t> base(M), stride(M);  // row m: dword p at base + p * stride
  for (int64_t m0 = 0; m0 < M;) {
    const int R = tiles ? 1 : block_rows(M, m0);
    for (int r = 0; r < R; ++r) base[m0 + r] = m0 * K / 4 + r, stride[m0 + r] = R;
    m0 += R;
  }
  at::parallel_for(0, M * S, 16, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t m = b / S, s = b % S, k0 = s * 256, n = std::min<int64_t>(256, K - k0);
      const at::BFloat16* p = x + m * K + k0;
      __m512 amax = _mm512_setzero_ps();
      for (int64_t k = 0; k < n; k += 16)
        amax = _mm512_max_ps(amax, _mm512_abs_ps(load16<at::BFloat16>(p + k, tail_mask(n - k))));
      const float top = _mm512_reduce_max_ps(amax);
      const __m512 inv = _mm512_set1_ps(top > 0.f ? 127.f / top : 0.f);
      out.xs[b] = top / 127.f;
      int32_t* dst = out.xq.data() + base[m];
      const int64_t st = stride[m];
      for (int64_t k = 0; k < n; k += 16) {  // group >= 16: a chunk is in one group
        const __mmask16 mk = tail_mask(n - k);
        const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(load16<at::BFloat16>(p + k, mk), inv));
        alignas(16) int32_t d4[4];
        __m128i b16 = _mm512_cvtepi32_epi8(_mm512_maskz_mov_epi32(mk, q));
        if (evens_first)  // q4's and q6's order: per 8 inputs the even ones, then the odd ones
          b16 = _mm_shuffle_epi8(b16, _mm_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15));
        _mm_store_si128((__m128i*)d4, b16);
        const int64_t p0 = (k0 + k) / 4;
        const int32_t flip = offset ? (int32_t)0x80808080u : 0;  // xq + 128 for q6
        if (tiles)  // dword p of row m: tile (m / 16, p / 16), its row m % 16, dword p % 16
          for (int i = 0; i < 4; ++i) {
            const int64_t q = p0 + i;
            out.xq[((m / 16) * KC + q / 16) * 256 + (m % 16) * 16 + q % 16] = d4[i] ^ flip;
          }
        else
          for (int i = 0; i < 4; ++i) dst[(p0 + i) * st] = d4[i] ^ flip;
        const int64_t g = (k0 + k) / group;
        if (!offset && g < G)
          q16[m * 2 * GP + g] += (int16_t)_mm512_reduce_add_epi32(_mm512_maskz_mov_epi32(mk, q));
      }
    }
  });
  return out;
}

// One VNNI step, c += 4-byte dot products of w and x: q4's weights (P = 8) are unsigned and
// the inputs signed (xq); q6's (P = 4) signed and the inputs unsigned (xq + 128).
template <int P>
inline __m512i vnni(__m512i c, __m512i w, __m512i x) {
  if constexpr (P == 8) return _mm512_dpbusd_epi32(c, w, x);
  else return _mm512_dpbusd_epi32(c, x, w);
}

// A group's scales (int32 per column) in the form scaled_dots takes: as they are on AVX-512;
// on AVX2 as int16 pairs (qmm_avx2.h pair_epi16), which scale the int16 sums as they widen.
inline __m512i dot_scale(__m512i sc) {
#ifdef __AVX512F__
  return sc;
#else
  return qmm_avx2::pair_epi16(sc);
#endif
}

// A[r] += sc * the sum over p < P of the 4-byte dot products of w[p] and row r's input dword
// x[p * RS + r] (one group of 4*P inputs, R rows of a row block of RS rows; sc from
// dot_scale): exact integers. The AVX2 build gets the same integers with fewer instructions
// (qmm_avx2.h scaled_dots_i16).
template <int R, int P, int RS = R>
inline void scaled_dots(const int32_t* x, const __m512i* w, __m512i sc, __m512i* A) {
#ifdef __AVX512F__
  __m512i c[R];
  for (int r = 0; r < R; ++r) c[r] = _mm512_setzero_si512();
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
      c[r] = vnni<P>(c[r], w[p], _mm512_set1_epi32(x[p * RS + r]));
  }
  for (int r = 0; r < R; ++r) A[r] = _mm512_add_epi32(A[r], _mm512_mullo_epi32(sc, c[r]));
#else
  qmm_avx2::scaled_dots_i16<R, P, RS>(x, w, sc, A);
#endif
}

// All rows for group g (4*P inputs): the row blocks of quantize_rows' layout.
template <int P>
inline void dots_all(const int32_t* xq, int64_t K, int64_t M, int64_t g, const __m512i* w,
                     __m512i sc, __m512i* A) {
  for (int64_t m = 0; m < M;) {
    const int R = block_rows(M, m);
    const int32_t* x = xq + m * K / 4 + g * P * R;
    if (R == RB) scaled_dots<RB, P>(x, w, sc, A + m);
    else if (R == 4) scaled_dots<4, P>(x, w, sc, A + m);
    else scaled_dots<1, P>(x, w, sc, A + m);
    m += R;
  }
}

// One row at the end of a super-block: q4 acc + d xs A - dmin xs B, q6 acc + d xs (A - 32 B)
// (A, B the row's exact integer sums, xs its input scale for the super-block).
inline __m512 close_row(bool q4, __m512i A, __m512i B, float xs, __m512 d, __m512 dmin,
                        __m512 acc) {
  const __m512 x = _mm512_set1_ps(xs);
  if (q4) {
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(A), _mm512_mul_ps(d, x), acc);
    return _mm512_fnmadd_ps(_mm512_cvtepi32_ps(B), _mm512_mul_ps(dmin, x), acc);
  }
  const __m512i v = _mm512_sub_epi32(A, _mm512_slli_epi32(B, 5));
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(d, x), acc);
}

// Rows of a row block whose integer sums stay in registers at once: all of them on AVX-512
// (8 of its 32 registers), two on AVX2 (8 rows' sums alone would fill its 16, and spill).
constexpr int row_tile(int R) {
#ifdef __AVX512F__
  return R;
#else
  return R < 2 ? R : 2;
#endif
}

// c + the 4-byte dot products of unsigned bytes u and signed bytes x, exact for any bytes
// (vpdpbusd does not saturate; the AVX2 build widens to int16: qmm_avx2.h dpbusd_wide).
inline __m512i dpbusd_exact(__m512i c, __m512i u, __m512i x) {
#ifdef __AVX512F__
  return _mm512_dpbusd_epi32(c, u, x);
#else
  return qmm_avx2::dpbusd_wide_epi32(c, u, x);
#endif
}

constexpr int64_t Q8_BYTES = 512;  // one q8 group of one tile: 32 inputs x 16 columns

// One q8 group (the 8 weight vectors w, scales s and mins mn) for the R rows of a row block
// from row m (x: the block's dwords of this group, quantize_rows' layout): per row the exact
// integer sum(u xq) - z X_g, then acc += that * (s xs) [- X_g * (mn xs)]. row_tile(R) rows
// at a time; every row gets the same steps whatever R is.
template <int R>
inline void q8_group(const int32_t* x, const __m512i* w, __m512 s, __m512 mn, int32_t z,
                     bool mins, const int16_t* sums, int64_t sum_stride, const float* xs,
                     int64_t xs_stride, __m512* acc) {
  constexpr int RT = row_tile(R);
  for (int r0 = 0; r0 < R; r0 += RT) {
    __m512i c[RT];
    for (int r = 0; r < RT; ++r) c[r] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int p = 0; p < 8; ++p)
#pragma GCC unroll 8
      for (int r = 0; r < RT; ++r) c[r] = dpbusd_exact(c[r], w[p], _mm512_set1_epi32(x[p * R + r0 + r]));
    for (int r = 0; r < RT; ++r) {
      const int32_t X = sums[(r0 + r) * sum_stride];
      const __m512 scale = _mm512_set1_ps(xs[(r0 + r) * xs_stride]);
      const __m512i v = _mm512_sub_epi32(c[r], _mm512_set1_epi32(z * X));
      __m512 a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(s, scale), acc[r0 + r]);
      if (mins) a = _mm512_fnmadd_ps(_mm512_set1_ps((float)X), _mm512_mul_ps(mn, scale), a);
      acc[r0 + r] = a;
    }
  }
}

// ---- the blocked form, for M >= BLOCKED_ROWS: a super-block's weights unpacked once per tile
// into a buffer, then for each row block the exact integer sums A stay in registers across its
// groups and B is summed at the block's end: the same integers and the very float steps of
// close_row in the same order, so every output is the group-by-group form's bit for bit.
// It is faster for prefill chunks and 64-row passes but slower for 8- to 32-row ones (the
// group-by-group form overlaps the weight stream with its products better), hence the bound
// (docs/performance.md, "Figures behind code decisions").
constexpr int64_t BLOCKED_ROWS = 64;

// Unpack groups g0 .. g1 - 1 of tile t into wb[(g - g0) * P + i] (VNNI dwords: dword c of
// vector i = q[c][4i .. 4i + 3] as bytes, q6: signed) and their scales into scb[g - g0] (in
// dot_scale's form); both
// forms of mm_i8 unpack with these (the group-by-group one a group at a time).
inline void unpack_q4(const uint8_t* Q, const uint8_t* SC, int64_t t, int64_t K, int64_t G,
                      int64_t g0, int64_t g1, __m512i* wb, __m512i* scb) {
  const __m512i nib = _mm512_set1_epi32(0x0F0F0F0F);
  for (int64_t g = g0; g < g1; ++g) {
    const uint8_t* qg = Q + (t * (K / 2) + g * 16) * 16;
    __m512i* w = wb + (g - g0) * 8;
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {  // block j: its even inputs, then its odd ones
      const __m512i v = _mm512_loadu_si512(qg + 64 * j);
      w[2 * j] = _mm512_and_si512(v, nib);
      w[2 * j + 1] = _mm512_and_si512(_mm512_srli_epi32(v, 4), nib);
    }
    scb[g - g0] = dot_scale(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(SC + ((t * G + g) * 2) * 16))));
  }
}

inline void unpack_q6(const uint8_t* Q, const uint8_t* SC, int64_t t, int64_t K, int64_t G,
                      int64_t g0, int64_t g1, __m512i* wb, __m512i* scb) {
  const __m512i off = _mm512_set1_epi8(32);
  for (int64_t g = g0; g < g1; ++g) {
    const uint8_t* qg = Q + (t * G + g) * Q6_BYTES;
    __m512i* w = wb + (g - g0) * 4;
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) w[i] = _mm512_sub_epi8(unpack_q6_u(qg, i), off);  // signed q
    scb[g - g0] = dot_scale(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(SC + (t * G + g) * 16))));
  }
}

// q4's B multipliers for group pair j of tile t, as vpdpwssd takes them: dword c = mn[2j][c] |
// mn[2j + 1][c] << 16 (0 past the last group), from the scales' bytes (their cache lines come
// in with the scales; a separate int16 copy cost half a bit a weight of memory traffic).
inline __m512i mins_pair(const uint8_t* SC, int64_t t, int64_t G, int64_t j) {
  const int64_t g = 2 * j;
  const __m512i a = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(SC + ((t * G + g) * 2 + 1) * 16)));
  if (g + 1 >= G) return a;
  const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(SC + ((t * G + g + 1) * 2 + 1) * 16)));
  return _mm512_or_si512(a, _mm512_slli_epi32(b, 16));
}

// A[r] = sum over the ng groups from g0 of sc_g * sum(w xq) for the R rows of one row block
// (x: the block's dwords, quantize_rows' layout), accumulated in registers, row_tile(R) rows
// at a time.
template <int R, int P>
inline void block_sums(const int32_t* x, int64_t g0, int64_t ng, const __m512i* wb,
                       const __m512i* scb, __m512i* out) {
  constexpr int RT = row_tile(R);
  for (int r0 = 0; r0 < R; r0 += RT) {
    __m512i A[RT];
    for (int r = 0; r < RT; ++r) A[r] = _mm512_setzero_si512();
    for (int64_t gl = 0; gl < ng; ++gl)
      scaled_dots<RT, P, R>(x + (g0 + gl) * P * R + r0, wb + gl * P, scb[gl], A);
    for (int r = 0; r < RT; ++r) out[r0 + r] = A[r];
  }
}

template <int P>
inline void block_sums_any(int R, const int32_t* x, int64_t g0, int64_t ng, const __m512i* wb,
                           const __m512i* scb, __m512i* out) {
  if (R == RB) block_sums<RB, P>(x, g0, ng, wb, scb, out);
  else if (R == 4) block_sums<4, P>(x, g0, ng, wb, scb, out);
  else block_sums<1, P>(x, g0, ng, wb, scb, out);
}

// The end of a full q4 super-block s for the R rows of one row block from row m: B summed
// over its 4 group pairs, then close_row, rows interleaved (compile-time sizes).
template <int R>
inline void close_rows(const QuantRows& qx, int64_t m, int64_t S, int64_t s, int64_t GP,
                       int64_t j0, const __m512i* pr, __m512 d, __m512 dmin, const __m512i* A,
                       __m512* acc) {
  __m512i B[R];
  for (int r = 0; r < R; ++r) B[r] = _mm512_setzero_si512();
  const int32_t* qp = qx.qp.data() + m * GP + j0;
#pragma GCC unroll 8
  for (int j = 0; j < 4; ++j)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) B[r] = _mm512_dpwssd_epi32(B[r], pr[j], _mm512_set1_epi32(qp[r * GP + j]));
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    acc[m + r] = close_row(true, A[r], B[r], qx.xs[(m + r) * S + s], d, dmin, acc[m + r]);
}

// close_rows for the R rows of any row block from row m (q4: pairs j0 .. j1 - 1 of super-block
// s in pr; full: all of its groups are there): unrolled for a full super-block (R = 8, 4 or
// 1), else row by row with the same integers and float steps. A[r] is the row's integer sum.
// q6: pr[0] is 4 C (see above), the same for every row: close_row's A - 32 B is A - 128 C.
inline void close_rows_any(bool q4, int R, bool full, const QuantRows& qx, int64_t m, int64_t S,
                           int64_t s, int64_t GP, int64_t j0, int64_t j1, const __m512i* pr,
                           __m512 d, __m512 dmin, const __m512i* A, __m512* acc) {
  if (!q4) {
    for (int r = 0; r < R; ++r)
      acc[m + r] = close_row(false, A[r], pr[0], qx.xs[(m + r) * S + s], d, dmin, acc[m + r]);
    return;
  }
  if (full && R == RB) return close_rows<RB>(qx, m, S, s, GP, j0, pr, d, dmin, A, acc);
  if (full && R == 4) return close_rows<4>(qx, m, S, s, GP, j0, pr, d, dmin, A, acc);
  if (full && R == 1) return close_rows<1>(qx, m, S, s, GP, j0, pr, d, dmin, A, acc);
  for (int r = 0; r < R; ++r) {
    const int64_t row = m + r;
    __m512i B = _mm512_setzero_si512();
    for (int64_t j = j0; j < j1; ++j)
      B = _mm512_add_epi32(B, _mm512_madd_epi16(pr[j - j0], _mm512_set1_epi32(qx.qp[row * GP + j])));
    acc[row] = close_row(q4, A[r], B, qx.xs[row * S + s], d, dmin, acc[row]);
  }
}

// One weight set of an mm_i8 call: several sets of one kind and input (a layer's q, k and v
// projections) are one call, their tiles side by side in the output (set i's first tile is
// `first`): one quantization of the input, one parallel region, each tile computed exactly as
// in a call of its own set alone.
struct Part {
  const uint8_t* Q;
  const uint8_t* SC;
  const float* DD;
  const int32_t* C4;  // q6: offsets_i8's constant; q4, q8: null
  const float* Bias;  // null: none
  int64_t T, first;
  int32_t zero;  // q8: the zero point z
  bool mins;     // q8: whether w has a min term
};

// The set holding output tile t (of all sets'), and t's index in it.
inline const Part& part_of(const std::vector<Part>& parts, int64_t t, int64_t* local) {
  size_t i = 0;
  while (t >= parts[i].first + parts[i].T) ++i;
  *local = t - parts[i].first;
  return parts[i];
}

// mm_i8 for M >= BLOCKED_ROWS (see above): tiles split over threads, super-blocks in order per
// tile. T: the tiles of all parts.
void mm_i8_blocked(bool q4, const QuantRows& qx, int64_t M, int64_t K, int64_t T, int64_t G,
                   int64_t S, const std::vector<Part>& parts, bool out_f32, void* Y) {
  const int64_t group = q4 ? 32 : 16, per = 256 / group, P = group / 4, GP = (G + 1) / 2;
  at::parallel_for(0, T, 1, [&](int64_t t0, int64_t t1) {
    alignas(64) __m512i wb[64];  // per super-block: 8 groups x 8 (q4) or 16 x 4 (q6)
    alignas(64) __m512i scb[16];
    alignas(64) __m512i pr[8];
    __m512i Ab[RB];
    std::vector<__m512> acc(M);
    for (int64_t tg = t0; tg < t1; ++tg) {
      int64_t t;
      const Part& part = part_of(parts, tg, &t);
      const uint8_t *Q = part.Q, *SC = part.SC;
      const float* DD = part.DD;
      const int32_t* C4 = part.C4;
      for (int64_t m = 0; m < M; ++m) acc[m] = _mm512_setzero_ps();
      for (int64_t s = 0; s < S; ++s) {
        const int64_t g0 = s * per, g1 = std::min(G, g0 + per), ng = g1 - g0;
        if (q4) unpack_q4(Q, SC, t, K, G, g0, g1, wb, scb);
        else unpack_q6(Q, SC, t, K, G, g0, g1, wb, scb);
        {  // the next super-block's weights (the next tile's first at the end: tiles are
           // contiguous) requested now, so they arrive while these rows are summed
          const int64_t bytes = (g1 - g0) * (q4 ? 256 : Q6_BYTES);  // 16 columns
          const char* next = (const char*)(q4 ? Q + (t * (K / 2) + g1 * (group / 2)) * 16
                                              : Q + (t * G + g1) * Q6_BYTES);
          for (int64_t b = 0; b < bytes; b += 64) _mm_prefetch(next + b, _MM_HINT_T0);
        }
        const int64_t j0 = g0 / 2, j1 = (g1 + 1) / 2;  // group pairs of this super-block
        if (q4)
          for (int64_t j = j0; j < j1; ++j) pr[j - j0] = mins_pair(SC, t, G, j);
        else
          pr[0] = _mm512_loadu_si512(C4 + (t * S + s) * 16);
        const float* dp = DD + (t * S + s) * (q4 ? 32 : 16);
        const __m512 d = _mm512_loadu_ps(dp), dmin = q4 ? _mm512_loadu_ps(dp + 16) : _mm512_setzero_ps();
        for (int64_t m = 0; m < M;) {
          const int R = block_rows(M, m);
          const int32_t* x = qx.xq.data() + m * K / 4;
          if (P == 8) block_sums_any<8>(R, x, g0, ng, wb, scb, Ab);
          else block_sums_any<4>(R, x, g0, ng, wb, scb, Ab);
          close_rows_any(q4, R, ng == per, qx, m, S, s, GP, j0, j1, pr, d, dmin, Ab, acc.data());
          m += R;
        }
      }
      for (int64_t m = 0; m < M; ++m) store_row(acc[m], part.Bias, t, out_f32, Y, m * T * 16 + tg * 16);
    }
  });
}

}  // namespace

#if defined(__AMX_INT8__) && defined(__AMX_TILE__)
#include "qmm_amx.h"
#define QMM_AMX 1
#else
#define QMM_AMX 0
#endif

namespace {

// mm_i8 for q8 weights (any M): tiles split over threads, groups in order per tile, each group
// for all row blocks (q8_group). T: the tiles of all parts.
void mm_i8_q8(const QuantRows& qx, int64_t M, int64_t K, int64_t T, int64_t G, int64_t S,
              int64_t GP, const std::vector<Part>& parts, bool out_f32, void* Y) {
  const int16_t* sums = (const int16_t*)qx.qp.data();  // group g of row m at m 2GP + g
  at::parallel_for(0, T, 1, [&](int64_t t0, int64_t t1) {
    alignas(64) __m512i w[8];
    std::vector<__m512> acc(M);
    for (int64_t tg = t0; tg < t1; ++tg) {
      int64_t t;
      const Part& part = part_of(parts, tg, &t);
      for (int64_t m = 0; m < M; ++m) acc[m] = _mm512_setzero_ps();
      for (int64_t g = 0; g < G; ++g) {
        const uint8_t* qg = part.Q + (t * G + g) * Q8_BYTES;
        const float* dg = part.DD + (t * G + g) * 32;
        for (int b = 0; b < 512; b += 64) _mm_prefetch((const char*)qg + 4 * Q8_BYTES + b, _MM_HINT_T0);
        _mm_prefetch((const char*)(dg + 4 * 32), _MM_HINT_T0);
        _mm_prefetch((const char*)(dg + 4 * 32 + 16), _MM_HINT_T0);
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) w[i] = _mm512_loadu_si512(qg + 64 * i);
        const __m512 s = _mm512_loadu_ps(dg), mn = _mm512_loadu_ps(dg + 16);
        const int64_t sb = g / 8;  // the inputs' super-block
        for (int64_t m = 0; m < M;) {
          const int R = block_rows(M, m);
          const int32_t* x = qx.xq.data() + m * K / 4 + g * 8 * R;
          const int16_t* su = sums + m * 2 * GP + g;
          const float* xs = qx.xs.data() + m * S + sb;
          __m512* a = acc.data() + m;
          if (R == RB) q8_group<RB>(x, w, s, mn, part.zero, part.mins, su, 2 * GP, xs, S, a);
          else if (R == 4) q8_group<4>(x, w, s, mn, part.zero, part.mins, su, 2 * GP, xs, S, a);
          else q8_group<1>(x, w, s, mn, part.zero, part.mins, su, 2 * GP, xs, S, a);
          m += R;
        }
      }
      for (int64_t m = 0; m < M; ++m) store_row(acc[m], part.Bias, t, out_f32, Y, m * T * 16 + tg * 16);
    }
  });
}

}  // namespace

// What the int8 form needs beside the weights, made once at load. q4: nothing (an empty
// tensor: its B multipliers come from the scales, mins_pair). q6: 4 C per tile, super-block
// and column, C = sum_g sc_g sum(q) over the super-block's groups, int32 [T][S][16] (exact).
torch::Tensor offsets_i8(std::string kind, torch::Tensor qp, torch::Tensor sc) {
  if (kind == "q8") return torch::empty({0}, torch::kShort);  // q8: nothing
  const bool q4 = kind == "q4";
  const int64_t T = sc.size(0), G = sc.size(1);
  if (!q4) {
    TORCH_CHECK(qp.dim() == 3 && qp.size(0) == T && qp.size(1) == G && qp.size(2) == Q6_BYTES);
    const int64_t S = (G + 15) / 16;
    auto out = torch::zeros({T, S, 16}, torch::kInt);
    int32_t* C = out.data_ptr<int32_t>();
    const uint8_t* Q = qp.data_ptr<uint8_t>();
    const int8_t* SC = sc.data_ptr<int8_t>();
    const __m512i ones = _mm512_set1_epi8(1), bias = _mm512_set1_epi32(16 * 32);
    at::parallel_for(0, T, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        for (int64_t g = 0; g < G; ++g) {
          __m512i sum = _mm512_setzero_si512();  // per column: sum of u over the 16 inputs
          for (int i = 0; i < 4; ++i)
            sum = _mm512_dpbusd_epi32(sum, unpack_q6_u(Q + (t * G + g) * Q6_BYTES, i), ones);
          const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(SC + (t * G + g) * 16)));
          int32_t* c = C + (t * S + g / 16) * 16;
          const __m512i term = _mm512_slli_epi32(_mm512_mullo_epi32(sc, _mm512_sub_epi32(sum, bias)), 2);
          _mm512_storeu_si512(c, _mm512_add_epi32(_mm512_loadu_si512(c), term));
        }
    });
    return out;
  }
  return torch::empty({0}, torch::kShort);
}


// The products of x with each weight set (qp[i], sc[i], dd[i], offsets[i], bias[i]: bias an
// empty tensor for none), one [M, sum N_i] result with set i's columns after set i - 1's.
torch::Tensor mm_i8_parts(std::string kind, torch::Tensor x, std::vector<torch::Tensor> qps,
                          std::vector<torch::Tensor> scs, std::vector<torch::Tensor> dds,
                          std::vector<torch::Tensor> offsets, std::vector<torch::Tensor> biases,
                          bool out_f32) {
  TORCH_CHECK(x.scalar_type() == torch::kBFloat16 && x.is_contiguous() && x.dim() == 2);
  TORCH_CHECK(kind == "q4" || kind == "q6" || kind == "q8", "unknown kind ", kind);
  const bool q4 = kind == "q4", q8 = kind == "q8";
  const int64_t group = q4 || q8 ? 32 : 16, per = 256 / group;
  const int64_t M = x.size(0), K = x.size(1), G = K / group, S = (K + 255) / 256;
  const int64_t GP = (G + 1) / 2;
  const size_t n = qps.size();
  TORCH_CHECK(n > 0 && scs.size() == n && dds.size() == n && offsets.size() == n && biases.size() == n);
  TORCH_CHECK(K % group == 0);
  std::vector<Part> parts;
  int64_t T = 0;
  for (size_t i = 0; i < n; ++i) {
    const auto &qp = qps[i], &sc = scs[i], &dd = dds[i], &off = offsets[i], &b = biases[i];
    const int64_t Ti = qp.size(0);
    TORCH_CHECK(qp.is_contiguous() && sc.is_contiguous() && dd.is_contiguous());
    if (q8) {
      TORCH_CHECK(qp.dim() == 3 && qp.size(1) == G && qp.size(2) == Q8_BYTES);
      TORCH_CHECK(sc.numel() == 2 && sc.scalar_type() == torch::kInt);
      TORCH_CHECK(dd.dim() == 4 && dd.size(0) == Ti && dd.size(1) == G && dd.size(2) == 2);
    } else {
      TORCH_CHECK(sc.size(0) == Ti && sc.size(1) == G && dd.size(0) == Ti && dd.size(1) == S);
      TORCH_CHECK(q4 ? qp.size(1) == K / 2
                     : qp.size(1) == G && qp.size(2) == Q6_BYTES && off.size(0) == Ti &&
                           off.size(1) == S && off.is_contiguous());
    }
    TORCH_CHECK(b.numel() == 0 || (b.numel() == Ti * 16 && b.is_contiguous() &&
                                   b.scalar_type() == torch::kFloat));
    const int32_t* zm = q8 ? sc.data_ptr<int32_t>() : nullptr;
    parts.push_back({qp.data_ptr<uint8_t>(), (const uint8_t*)sc.data_ptr(), dd.data_ptr<float>(),
                     q4 || q8 ? nullptr : off.data_ptr<int32_t>(),
                     b.numel() ? b.data_ptr<float>() : nullptr, Ti, T, zm ? zm[0] : 0,
                     zm ? zm[1] != 0 : false});
    T += Ti;
  }
  auto y = output(x, T * 16, out_f32);
  void* Y = y.data_ptr();
#if QMM_AMX
  if (!q8 && M >= AMX_ROWS && amx_ready()) {
    const QuantRows qx = quantize_rows(x.data_ptr<at::BFloat16>(), M, K, group, false, true, true);
    mm_i8_amx(q4, qx, M, K, T, G, S, parts, out_f32, Y);
    return y;
  }
#endif
  const QuantRows qx = quantize_rows(x.data_ptr<at::BFloat16>(), M, K, group, kind == "q6", !q8);
  if (q8) {
    mm_i8_q8(qx, M, K, T, G, S, GP, parts, out_f32, Y);
    return y;
  }
  if (M >= BLOCKED_ROWS) {
    mm_i8_blocked(q4, qx, M, K, T, G, S, parts, out_f32, Y);
    return y;
  }
  at::parallel_for(0, T, 1, [&](int64_t t0, int64_t t1) {
    alignas(64) __m512i w[8], pr[8];
    std::vector<__m512> acc(M);
    std::vector<__m512i> A(M);
    for (int64_t tg = t0; tg < t1; ++tg) {
      int64_t t;
      const Part& part = part_of(parts, tg, &t);
      const uint8_t *Q = part.Q, *SC = part.SC;
      const float* DD = part.DD;
      const int32_t* C4 = part.C4;
      for (int64_t m = 0; m < M; ++m) {
        acc[m] = _mm512_setzero_ps();
        A[m] = _mm512_setzero_si512();
      }
      for (int64_t g = 0; g < G; ++g) {
        prefetch_group(q4 ? Q + (t * (K / 2) + (g + PREFETCH_GROUPS) * (group / 2)) * 16
                          : Q + (t * G + g + PREFETCH_GROUPS) * Q6_BYTES,
                       SC + (t * G + g + PREFETCH_GROUPS) * (q4 ? 32 : 16));
        __m512i scv;
        if (q4) {
          unpack_q4(Q, SC, t, K, G, g, g + 1, w, &scv);
          dots_all<8>(qx.xq.data(), K, M, g, w, scv, A.data());
        } else {
          unpack_q6(Q, SC, t, K, G, g, g + 1, w, &scv);
          dots_all<4>(qx.xq.data(), K, M, g, w, scv, A.data());
        }
        if (q4 && (g % 2 == 1 || g == G - 1))  // this pair's B multipliers, as the pairs go by
          pr[(g & (per - 1)) / 2] = mins_pair(SC, t, G, g / 2);
        if ((g & (per - 1)) == per - 1 || g == G - 1) {  // the end of super-block s
          const int64_t s = g / per, g0 = s * per, j0 = g0 / 2, j1 = (g + 2) / 2;
          if (!q4) pr[0] = _mm512_loadu_si512(C4 + (t * S + s) * 16);
          const float* d = DD + (t * S + s) * (q4 ? 32 : 16);
          const __m512 dv = _mm512_loadu_ps(d), dmin = q4 ? _mm512_loadu_ps(d + 16) : _mm512_setzero_ps();
          for (int64_t m = 0; m < M;) {
            const int R = block_rows(M, m);
            close_rows_any(q4, R, g + 1 - g0 == per, qx, m, S, s, GP, j0, j1, pr, dv, dmin, &A[m],
                           acc.data());
            for (int r = 0; r < R; ++r) A[m + r] = _mm512_setzero_si512();
            m += R;
          }
        }
      }
      for (int64_t m = 0; m < M; ++m) store_row(acc[m], part.Bias, t, out_f32, Y, m * T * 16 + tg * 16);
    }
  });
  return y;
}

// One weight set (see mm_i8_parts).
torch::Tensor mm_i8(std::string kind, torch::Tensor x, torch::Tensor qp, torch::Tensor sc,
                    torch::Tensor dd, torch::Tensor offsets, c10::optional<torch::Tensor> bias_opt,
                    bool out_f32) {
  torch::Tensor bias = bias_opt.has_value() ? *bias_opt : torch::empty({0}, torch::kFloat);
  return mm_i8_parts(kind, x, {qp}, {sc}, {dd}, {offsets}, {bias}, out_f32);
}

// ----------------------------------------------------------------------- a decoder layer
// A Llama-family decoder layer on int8-input weights for decoding passes, in two calls around
// the cache write (the caller's): front = RMSNorm, the q/k/v products, RoPE; back = attention,
// o_proj, residual, RMSNorm, gate/up, SiLU, down, residual. Every value is the one
// transformers' layer computes with these kernels: the reductions (RMSNorm's mean) and SiLU
// are aten's own ops, and every other step is one IEEE float operation on the same operands
// rounded to bfloat16 (round to nearest even, as aten) where transformers rounds: the
// products of bfloat16 tensors, RoPE's two products and sum, the residual adds, the norms'
// weight, 1 / sqrt of the variance. tests/test_lean.py compares both forwards bit for bit.

namespace {

using bf16 = at::BFloat16;

struct Linear {  // one mm_i8_parts call
  std::string kind;
  std::vector<torch::Tensor> qp, sc, dd, off, bias;
};

Linear linear(py::dict d) {
  return {d["kind"].cast<std::string>(), d["qp"].cast<std::vector<torch::Tensor>>(),
          d["sc"].cast<std::vector<torch::Tensor>>(), d["dd"].cast<std::vector<torch::Tensor>>(),
          d["offsets"].cast<std::vector<torch::Tensor>>(),
          d["bias"].cast<std::vector<torch::Tensor>>()};
}

std::vector<Linear> linears(py::list calls) {
  std::vector<Linear> out;
  for (auto c : calls) out.push_back(linear(c.cast<py::dict>()));
  return out;
}

}  // namespace

class DecodeLayer {
 public:
  // qkv, gate_up: the mm_i8_parts calls whose outputs side by side are q | k | v, gate | up
  DecodeLayer(torch::Tensor ln1, double eps1, torch::Tensor ln2, double eps2, py::list qkv,
              py::dict o, py::list gate_up, py::dict down, int64_t heads, int64_t kv_heads,
              int64_t head_dim, double scale)
      : ln1_(ln1.contiguous()), ln2_(ln2.contiguous()), eps1_((float)eps1), eps2_((float)eps2),
        qkv_(linears(qkv)), o_(linear(o)), gate_up_(linears(gate_up)), down_(linear(down)),
        H_(heads), KV_(kv_heads), d_(head_dim), scale_((float)scale) {
    TORCH_CHECK(ln1_.scalar_type() == torch::kBFloat16 && ln2_.scalar_type() == torch::kBFloat16);
    TORCH_CHECK(d_ % 2 == 0);
  }

  // x [n, E] bf16 (the residual stream), cos / sin [n, d] bf16 -> (q float [n, H, d] scaled,
  // k [1, KV, n, d], v [1, KV, n, d] bf16: the rows for the cache)
  std::vector<torch::Tensor> front(torch::Tensor x, torch::Tensor cos, torch::Tensor sin) const {
    TORCH_CHECK(x.scalar_type() == torch::kBFloat16 && x.dim() == 2 && x.is_contiguous());
    TORCH_CHECK(cos.is_contiguous() && sin.is_contiguous() && cos.scalar_type() == torch::kBFloat16);
    const int64_t n = x.size(0), d = d_, half = d / 2, W = (H_ + 2 * KV_) * d;
    const torch::Tensor h = norm(x, ln1_, eps1_);
    const torch::Tensor y = mm(qkv_, h);  // [n, (H + 2 KV) d]
    TORCH_CHECK(y.size(1) == W);
    auto q = torch::empty({n, H_, d}, x.options().dtype(torch::kFloat));
    auto k = torch::empty({1, KV_, n, d}, x.options());
    auto v = torch::empty({1, KV_, n, d}, x.options());
    const bf16 *Y = y.data_ptr<bf16>(), *C = cos.data_ptr<bf16>(), *S = sin.data_ptr<bf16>();
    float* Q = q.data_ptr<float>();
    bf16 *K = k.data_ptr<bf16>(), *V = v.data_ptr<bf16>();
    for (int64_t i = 0; i < n; ++i) {
      const bf16 *row = Y + i * W, *c = C + i * d, *s = S + i * d;
      for (int64_t h = 0; h < H_ + KV_; ++h) {  // q heads, then k heads: RoPE
        const bf16* src = row + h * d;
        for (int64_t j = 0; j < d; ++j) {
          const bf16 rot = j < half ? bf16(-(float)src[j + half]) : src[j - half];
          const bf16 a = bf16((float)src[j] * (float)c[j]), b = bf16((float)rot * (float)s[j]);
          const bf16 e = bf16((float)a + (float)b);
          if (h < H_) Q[(i * H_ + h) * d + j] = (float)e * scale_;
          else K[((h - H_) * n + i) * d + j] = e;
        }
      }
      for (int64_t h = 0; h < KV_; ++h)
        std::memcpy(V + (h * n + i) * d, row + (H_ + KV_ + h) * d, d * sizeof(bf16));
    }
    return {q, k, v};
  }

  // the rest of the layer: x [n, E] the residual stream, q from front, keys / values
  // [KV, S, d] (the cache, this pass's rows included), the attention plan -> [n, E]
  torch::Tensor back(torch::Tensor x, torch::Tensor q, torch::Tensor keys, torch::Tensor values,
                     torch::Tensor prefix, torch::Tensor ptr, torch::Tensor extra) const {
    const int64_t n = x.size(0);
    const torch::Tensor att = attention(q, keys, values, prefix, ptr, extra, false);  // float
    const torch::Tensor a = att.to(torch::kBFloat16).reshape({n, H_ * d_});
    const torch::Tensor x1 = add(x, mm(o_, a));
    const torch::Tensor h = norm(x1, ln2_, eps2_);
    const torch::Tensor gu = mm(gate_up_, h);  // [n, 2 I]
    const int64_t I = gu.size(1) / 2;
    const torch::Tensor act = at::silu(gu.narrow(1, 0, I).contiguous());
    auto m = torch::empty({n, I}, x.options());
    const bf16 *A = act.data_ptr<bf16>(), *U = gu.data_ptr<bf16>();
    bf16* Mo = m.data_ptr<bf16>();
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < I; ++j)
        Mo[i * I + j] = bf16((float)A[i * I + j] * (float)U[i * 2 * I + I + j]);
    return add(x1, mm(down_, m));
  }

 private:
  static torch::Tensor mm(const Linear& l, const torch::Tensor& x) {
    return mm_i8_parts(l.kind, x, l.qp, l.sc, l.dd, l.off, l.bias, false);
  }

  static torch::Tensor mm(const std::vector<Linear>& calls, const torch::Tensor& x) {
    if (calls.size() == 1) return mm(calls[0], x);
    std::vector<torch::Tensor> ys;
    for (const auto& l : calls) ys.push_back(mm(l, x));
    return at::cat(ys, 1);
  }

  // RMSNorm as transformers: float32, variance = mean(x^2) (aten's mean), x * rsqrt(var +
  // eps) rounded to bf16, times the weight rounded to bf16
  static torch::Tensor norm(const torch::Tensor& x, const torch::Tensor& w, float eps) {
    const int64_t n = x.size(0), E = x.size(1);
    const torch::Tensor f = x.to(torch::kFloat);
    const torch::Tensor var = f.pow(2).mean(-1, true);  // [n, 1]
    auto out = torch::empty_like(x);
    const float *F = f.data_ptr<float>(), *Vr = var.data_ptr<float>();
    const bf16* Wt = w.data_ptr<bf16>();
    bf16* O = out.data_ptr<bf16>();
    for (int64_t i = 0; i < n; ++i) {
      const float r = 1.f / std::sqrt(Vr[i] + eps);
      for (int64_t j = 0; j < E; ++j)
        O[i * E + j] = bf16((float)Wt[j] * (float)bf16(F[i * E + j] * r));
    }
    return out;
  }

  static torch::Tensor add(const torch::Tensor& a, const torch::Tensor& b) {  // bf16 a + b
    auto out = torch::empty_like(a);
    const bf16 *A = a.data_ptr<bf16>(), *B = b.data_ptr<bf16>();
    bf16* O = out.data_ptr<bf16>();
    for (int64_t i = 0, N = a.numel(); i < N; ++i) O[i] = bf16((float)A[i] + (float)B[i]);
    return out;
  }

  torch::Tensor ln1_, ln2_;
  float eps1_, eps2_;
  std::vector<Linear> qkv_;
  Linear o_;
  std::vector<Linear> gate_up_;
  Linear down_;
  int64_t H_, KV_, d_;
  float scale_;
};

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("mm_q4", &mm_q4, "bf16 x [M, K] @ Q4_K-style weights -> [M, N]");
  m.def("mm_q6", &mm_q6, "bf16 x [M, K] @ Q6_K-style weights -> [M, N]");
  m.def("offsets_i8", &offsets_i8, "mm_i8's per-column constant of q6 weights (empty for q4)");
  m.def("mm_i8", &mm_i8, "bf16 x [M, K] as int8 @ Q4_K/Q6_K-style weights -> [M, N]");
  m.def("mm_i8_parts", &mm_i8_parts, "mm_i8 of several weight sets of one kind -> [M, sum N]");
  m.def("attention", &attention, "exact per-query attention over prefix + extra keys",
        py::arg("q"), py::arg("k"), py::arg("v"), py::arg("prefix"), py::arg("ptr"),
        py::arg("extra"), py::arg("generic") = false);
  m.def("attention_tiles", [](int64_t d, int64_t groups) {
#if ATTN_AMX
    return tiles_apply(d, groups);
#else
    return false;
#endif
  },
        "whether a bfloat16 cache's attention with head size d and groups heads per kv head "
        "runs on AMX tiles (attn_amx.h; then not generic's arithmetic)",
        py::arg("d"), py::arg("groups"));
  py::class_<DecodeLayer>(m, "DecodeLayer")
      .def(py::init<torch::Tensor, double, torch::Tensor, double, py::list, py::dict, py::list,
                    py::dict, int64_t, int64_t, int64_t, double>())
      .def("front", &DecodeLayer::front)
      .def("back", &DecodeLayer::back);
}
