// The AVX-512 operations qmm.cpp uses, for CPUs with AVX2 + FMA only (most laptops and
// desktops: Intel client chips since Alder Lake, AMD before Zen 4). Included by qmm.cpp when
// it is compiled without -mavx512f (quant.py picks the flags from the CPU), after
// <immintrin.h>: every name below then stands for a pair of 256-bit halves, so qmm.cpp's one
// source builds both ways.
//
// Contract: each operation is the AVX-512 instruction's lane-by-lane result, bit for bit,
// for the inputs qmm.cpp gives it:
//   - float operations run per lane as they do in 512 bits (an FMA is one rounding either way);
//     reductions keep GCC's association (high half + low half, then 4 + 4, lanes 0 + 2 and
//     1 + 3, then those two), which reduce16 in qmm.cpp mirrors;
//   - vpdpbusd is vpmaddubsw + vpmaddwd: exact while no pair of byte products leaves int16,
//     which holds for qmm.cpp's operands (unsigned weights 0..63 or inputs 0..255 times signed
//     values of at most 32 or 127 in magnitude: |pair| <= 16,320);
//   - vdpbf16ps is two FMAs, odd element first, as the instruction's definition orders them
//     (bf16 products are exact in float32; denormals are kept, where the instruction flushes
//     them: a difference no normal input meets);
//   - vcvtneps2bf16 rounds to nearest even (NaN stays NaN).
// So the AVX2 build computes what the AVX-512 build computes, bit for bit (tests/test_quant.py
// compares the two builds on a CPU that runs both; $ADAPLD_QMM_TARGET=avx2 picks this one).
// Cross-lane permutes and partly masked 16-bit loads go through memory (a full mask takes the
// plain load): the permutes sit on the bfloat16-input products only, the partial loads on tails.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace qmm_avx2 {

struct V16f {
  __m256 lo, hi;
};
struct V16i {
  __m256i lo, hi;
};
typedef uint16_t Mask16;

inline V16f mk(__m256 lo, __m256 hi) { return V16f{lo, hi}; }
inline V16i mk(__m256i lo, __m256i hi) { return V16i{lo, hi}; }

// ---- masks: bit i of m -> lane i all ones
inline __m256i mask8(unsigned m) {
  const __m256i bits = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256i v = _mm256_and_si256(_mm256_set1_epi32((int)m), bits);
  return _mm256_cmpeq_epi32(v, bits);
}
inline __m256i mask_lo(Mask16 m) { return mask8(m & 0xFF); }
inline __m256i mask_hi(Mask16 m) { return mask8(m >> 8); }

// ---- float
inline V16f set1_ps(float a) { return mk(_mm256_set1_ps(a), _mm256_set1_ps(a)); }
inline V16f setzero_ps() { return mk(_mm256_setzero_ps(), _mm256_setzero_ps()); }
inline V16f loadu_ps(const float* p) { return mk(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)); }
inline void storeu_ps(float* p, V16f a) {
  _mm256_storeu_ps(p, a.lo);
  _mm256_storeu_ps(p + 8, a.hi);
}
// The masked loads and stores take the plain instruction for a full mask (the attention's and
// quantization's loads but a row's tail): the same values, without vmaskmov's cost.
inline V16f maskz_loadu_ps(Mask16 m, const float* p) {
  if (m == 0xFFFF) return loadu_ps(p);
  return mk(_mm256_maskload_ps(p, mask_lo(m)), _mm256_maskload_ps(p + 8, mask_hi(m)));
}
inline V16f mask_loadu_ps(V16f src, Mask16 m, const float* p) {
  if (m == 0xFFFF) return loadu_ps(p);
  const V16f v = maskz_loadu_ps(m, p);
  return mk(_mm256_blendv_ps(src.lo, v.lo, _mm256_castsi256_ps(mask_lo(m))),
            _mm256_blendv_ps(src.hi, v.hi, _mm256_castsi256_ps(mask_hi(m))));
}
inline void mask_storeu_ps(float* p, Mask16 m, V16f a) {
  if (m == 0xFFFF) return storeu_ps(p, a);
  _mm256_maskstore_ps(p, mask_lo(m), a.lo);
  _mm256_maskstore_ps(p + 8, mask_hi(m), a.hi);
}
inline V16f maskz_mov_ps(Mask16 m, V16f a) {
  return mk(_mm256_and_ps(a.lo, _mm256_castsi256_ps(mask_lo(m))),
            _mm256_and_ps(a.hi, _mm256_castsi256_ps(mask_hi(m))));
}
#define QMM_F2(name, op)                                                         \
  inline V16f name(V16f a, V16f b) { return mk(op(a.lo, b.lo), op(a.hi, b.hi)); }
QMM_F2(add_ps, _mm256_add_ps)
QMM_F2(sub_ps, _mm256_sub_ps)
QMM_F2(mul_ps, _mm256_mul_ps)
QMM_F2(div_ps, _mm256_div_ps)
QMM_F2(max_ps, _mm256_max_ps)
#undef QMM_F2
inline V16f fmadd_ps(V16f a, V16f b, V16f c) {
  return mk(_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi));
}
inline V16f fnmadd_ps(V16f a, V16f b, V16f c) {
  return mk(_mm256_fnmadd_ps(a.lo, b.lo, c.lo), _mm256_fnmadd_ps(a.hi, b.hi, c.hi));
}
inline V16f abs_ps(V16f a) {
  const __m256 m = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  return mk(_mm256_and_ps(a.lo, m), _mm256_and_ps(a.hi, m));
}
template <int IMM>
inline V16f roundscale_ps(V16f a) {  // IMM's scale bits are 0 in qmm.cpp: plain rounding
  static_assert((IMM & 0xF0) == 0, "roundscale with a scale");
  return mk(_mm256_round_ps(a.lo, IMM), _mm256_round_ps(a.hi, IMM));
}
// a * 2^floor(k) for integral k in [-126, 127] (qmm.cpp's exp: k = round(x log2 e), x >= -87.3)
inline V16f scalef_ps(V16f a, V16f k) {
  auto pow2 = [](__m256 e) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(e),
                                                                  _mm256_set1_epi32(127)), 23));
  };
  return mk(_mm256_mul_ps(a.lo, pow2(k.lo)), _mm256_mul_ps(a.hi, pow2(k.hi)));
}
inline float hsum8_to_4_to_1(__m256 t3, bool add) {  // GCC's reduce association from 8 lanes
  const __m128 t6 = add ? _mm_add_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3))
                        : _mm_max_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
  const __m128 t7 = _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2));
  const __m128 t8 = add ? _mm_add_ps(t6, t7) : _mm_max_ps(t6, t7);
  const __m128 t9 = _mm_shuffle_ps(t8, t8, _MM_SHUFFLE(1, 1, 1, 1));
  return _mm_cvtss_f32(add ? _mm_add_ss(t8, t9) : _mm_max_ss(t8, t9));
}
inline float reduce_add_ps(V16f a) { return hsum8_to_4_to_1(_mm256_add_ps(a.hi, a.lo), true); }
inline float reduce_max_ps(V16f a) { return hsum8_to_4_to_1(_mm256_max_ps(a.hi, a.lo), false); }
// 128-bit lanes: dst lanes 0, 1 from a, 2, 3 from b, each chosen by two bits of IMM
template <int IMM>
inline V16f shuffle_f32x4(V16f a, V16f b) {
  return mk(_mm256_permute2f128_ps(a.lo, a.hi, (IMM & 3) | ((IMM >> 2) & 3) << 4),
            _mm256_permute2f128_ps(b.lo, b.hi, ((IMM >> 4) & 3) | ((IMM >> 6) & 3) << 4));
}
template <int IMM>
inline V16f shuffle_ps(V16f a, V16f b) {  // within 128-bit lanes, as in 512 bits
  return mk(_mm256_shuffle_ps(a.lo, b.lo, IMM), _mm256_shuffle_ps(a.hi, b.hi, IMM));
}

// ---- integer
inline V16i setzero_si512() { return mk(_mm256_setzero_si256(), _mm256_setzero_si256()); }
inline V16i set1_epi32(int a) { return mk(_mm256_set1_epi32(a), _mm256_set1_epi32(a)); }
inline V16i set1_epi8(char a) { return mk(_mm256_set1_epi8(a), _mm256_set1_epi8(a)); }
inline V16i loadu_si512(const void* p) {
  return mk(_mm256_loadu_si256((const __m256i*)p), _mm256_loadu_si256((const __m256i*)p + 1));
}
inline V16i load_si512(const void* p) { return loadu_si512(p); }
inline void storeu_si512(void* p, V16i a) {
  _mm256_storeu_si256((__m256i*)p, a.lo);
  _mm256_storeu_si256((__m256i*)p + 1, a.hi);
}
inline V16i set_epi32(int e15, int e14, int e13, int e12, int e11, int e10, int e9, int e8,
                      int e7, int e6, int e5, int e4, int e3, int e2, int e1, int e0) {
  return mk(_mm256_set_epi32(e7, e6, e5, e4, e3, e2, e1, e0),
            _mm256_set_epi32(e15, e14, e13, e12, e11, e10, e9, e8));
}
inline V16i set_epi16(short e31, short e30, short e29, short e28, short e27, short e26,
                      short e25, short e24, short e23, short e22, short e21, short e20,
                      short e19, short e18, short e17, short e16, short e15, short e14,
                      short e13, short e12, short e11, short e10, short e9, short e8, short e7,
                      short e6, short e5, short e4, short e3, short e2, short e1, short e0) {
  return mk(_mm256_set_epi16(e15, e14, e13, e12, e11, e10, e9, e8, e7, e6, e5, e4, e3, e2, e1,
                             e0),
            _mm256_set_epi16(e31, e30, e29, e28, e27, e26, e25, e24, e23, e22, e21, e20, e19,
                             e18, e17, e16));
}
#define QMM_I2(name, op)                                                         \
  inline V16i name(V16i a, V16i b) { return mk(op(a.lo, b.lo), op(a.hi, b.hi)); }
QMM_I2(add_epi32, _mm256_add_epi32)
QMM_I2(sub_epi32, _mm256_sub_epi32)
QMM_I2(sub_epi8, _mm256_sub_epi8)
QMM_I2(mullo_epi32, _mm256_mullo_epi32)
QMM_I2(or_si512, _mm256_or_si256)
QMM_I2(madd_epi16, _mm256_madd_epi16)
QMM_I2(shuffle_epi8, _mm256_shuffle_epi8)  // within 128-bit lanes, as in 512 bits
QMM_I2(and_si512, _mm256_and_si256)
#undef QMM_I2
inline V16i unpacklo_epi16(V16i a, V16i b) {  // per 128-bit lane, as in 512 bits
  return mk(_mm256_unpacklo_epi16(a.lo, b.lo), _mm256_unpacklo_epi16(a.hi, b.hi));
}
inline V16i unpackhi_epi16(V16i a, V16i b) {
  return mk(_mm256_unpackhi_epi16(a.lo, b.lo), _mm256_unpackhi_epi16(a.hi, b.hi));
}
inline V16i slli_epi32(V16i a, int n) { return mk(_mm256_slli_epi32(a.lo, n), _mm256_slli_epi32(a.hi, n)); }
inline V16i srli_epi32(V16i a, int n) { return mk(_mm256_srli_epi32(a.lo, n), _mm256_srli_epi32(a.hi, n)); }
template <int IMM>
inline __m256i tern(__m256i a, __m256i b, __m256i c) {  // bit (a b c) of IMM, per bit
  // the tables qmm.cpp uses, as two instructions (their minterms' sum, simplified)
  if constexpr (IMM == 0xA8) return _mm256_and_si256(_mm256_or_si256(a, b), c);  // (a | b) & c
  if constexpr (IMM == 0xF8) return _mm256_or_si256(a, _mm256_and_si256(b, c));  // a | (b & c)
  if constexpr (IMM == 0xFE) return _mm256_or_si256(_mm256_or_si256(a, b), c);   // a | b | c
  const __m256i ones = _mm256_set1_epi32(-1);
  __m256i r = _mm256_setzero_si256();
  for (int i = 0; i < 8; ++i) {
    if (!((IMM >> i) & 1)) continue;
    const __m256i x = (i & 4) ? a : _mm256_xor_si256(a, ones);
    const __m256i y = (i & 2) ? b : _mm256_xor_si256(b, ones);
    const __m256i z = (i & 1) ? c : _mm256_xor_si256(c, ones);
    r = _mm256_or_si256(r, _mm256_and_si256(x, _mm256_and_si256(y, z)));
  }
  return r;
}
template <int IMM>
inline V16i ternarylogic_epi32(V16i a, V16i b, V16i c) {
  return mk(tern<IMM>(a.lo, b.lo, c.lo), tern<IMM>(a.hi, b.hi, c.hi));
}
// c + 4-byte dot products of unsigned u and signed s (see the contract for the range)
inline V16i dpbusd_epi32(V16i c, V16i u, V16i s) {
  const __m256i one = _mm256_set1_epi16(1);
  return mk(_mm256_add_epi32(c.lo, _mm256_madd_epi16(_mm256_maddubs_epi16(u.lo, s.lo), one)),
            _mm256_add_epi32(c.hi, _mm256_madd_epi16(_mm256_maddubs_epi16(u.hi, s.hi), one)));
}
inline V16i dpwssd_epi32(V16i c, V16i a, V16i b) { return add_epi32(c, madd_epi16(a, b)); }
// c + 4-byte dot products of unsigned u and signed s for any bytes (q8's weights reach 255,
// where vpmaddubsw's int16 pair sums would saturate): each byte widened within its 16-bit
// lane (u by zero-, s by sign-extension), then vpmaddwd on the even and the odd bytes: the
// exact integers vpdpbusd gives.
inline __m256i dpbusd_wide(__m256i c, __m256i u, __m256i s) {
  const __m256i low = _mm256_set1_epi16(0x00FF);
  const __m256i ue = _mm256_and_si256(u, low), uo = _mm256_srli_epi16(u, 8);
  const __m256i se = _mm256_srai_epi16(_mm256_slli_epi16(s, 8), 8), so = _mm256_srai_epi16(s, 8);
  return _mm256_add_epi32(c, _mm256_add_epi32(_mm256_madd_epi16(ue, se), _mm256_madd_epi16(uo, so)));
}
inline V16i dpbusd_wide_epi32(V16i c, V16i u, V16i s) {
  return mk(dpbusd_wide(c.lo, u.lo, s.lo), dpbusd_wide(c.hi, u.hi, s.hi));
}

// A group's scales in the form scaled_dots_i16 takes them: the int32 scale of each column
// (|sc| < 2^15: q4 0..63, q6 -128..127) as two equal int16 in its dword.
inline V16i pair_epi16(V16i sc) {
  const __m256i low = _mm256_set1_epi32(0xFFFF);
  return mk(_mm256_or_si256(_mm256_and_si256(sc.lo, low), _mm256_slli_epi32(sc.lo, 16)),
            _mm256_or_si256(_mm256_and_si256(sc.hi, low), _mm256_slli_epi32(sc.hi, 16)));
}

// One group for R rows (qmm.cpp's scaled_dots): A[r] += sc * the sum over p < P of the 4-byte
// dot products of w[p] and row r's input dword x[p * RS + r] (RS: the rows of the row block's
// layout), per column: the vpdpbusd chain's exact integers times the scale. Without VNNI a
// chain step is three instructions (vpmaddubsw, vpmaddwd, vpaddd); here the byte products are
// summed in int16, which no sum can overflow: q4 (P = 8, unsigned weights 0..15 times signed
// inputs of at most 127) all 8 steps, |sum| <= 16 * 15 * 127 = 30,480; q6 (P = 4, unsigned
// inputs 0..255 times signed weights -32..31) 2 steps, |sum| <= 4 * 255 * 32 = 32,640. One
// vpmaddwd by the scale pair (sc2 = pair_epi16(sc)) then widens and scales them at once:
// |sum * sc| * 2 < 2^23, exact in int32, and no vpmulld (slow on Intel). RT rows at a time:
// their sums fit AVX2's 16 registers (all R = 8 rows' would not), each weight load serves RT
// rows (why two: docs/performance.md, "Figures behind code decisions").
template <int R, int P, int RS>
inline void scaled_dots_i16(const int32_t* x, const V16i* w, V16i sc2, V16i* A) {
  constexpr int STEP = P == 8 ? 8 : 2;
  constexpr int RT = R < 2 ? R : 2;  // rows at a time (R: 8, 4, 2 or 1)
#pragma GCC unroll 8
  for (int r0 = 0; r0 < R; r0 += RT) {
    __m256i lo[RT], hi[RT];  // int32: A's halves
#pragma GCC unroll 8
    for (int r = 0; r < RT; ++r) lo[r] = A[r0 + r].lo, hi[r] = A[r0 + r].hi;
#pragma GCC unroll 4
    for (int p0 = 0; p0 < P; p0 += STEP) {
      __m256i slo[RT], shi[RT];  // int16
#pragma GCC unroll 8
      for (int r = 0; r < RT; ++r) slo[r] = shi[r] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int p = p0; p < p0 + STEP; ++p) {
        const __m256i wl = w[p].lo, wh = w[p].hi;
#pragma GCC unroll 8
        for (int r = 0; r < RT; ++r) {
          const __m256i b = _mm256_set1_epi32(x[p * RS + r0 + r]);
          if constexpr (P == 8) {  // weights unsigned
            slo[r] = _mm256_add_epi16(slo[r], _mm256_maddubs_epi16(wl, b));
            shi[r] = _mm256_add_epi16(shi[r], _mm256_maddubs_epi16(wh, b));
          } else {  // inputs unsigned
            slo[r] = _mm256_add_epi16(slo[r], _mm256_maddubs_epi16(b, wl));
            shi[r] = _mm256_add_epi16(shi[r], _mm256_maddubs_epi16(b, wh));
          }
        }
      }
#pragma GCC unroll 8
      for (int r = 0; r < RT; ++r) {
        lo[r] = _mm256_add_epi32(lo[r], _mm256_madd_epi16(slo[r], sc2.lo));
        hi[r] = _mm256_add_epi32(hi[r], _mm256_madd_epi16(shi[r], sc2.hi));
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < RT; ++r) A[r0 + r] = mk(lo[r], hi[r]);
  }
}
inline V16i maskz_mov_epi32(Mask16 m, V16i a) {
  return mk(_mm256_and_si256(a.lo, mask_lo(m)), _mm256_and_si256(a.hi, mask_hi(m)));
}
inline int reduce_add_epi32(V16i a) {
  alignas(32) int32_t v[16];
  storeu_si512(v, a);
  int s = 0;
  for (int i = 0; i < 16; ++i) s += v[i];
  return s;
}

// ---- conversions
inline V16i cvtepu8_epi32(__m128i a) {
  return mk(_mm256_cvtepu8_epi32(a), _mm256_cvtepu8_epi32(_mm_srli_si128(a, 8)));
}
inline V16i cvtepi8_epi32(__m128i a) {
  return mk(_mm256_cvtepi8_epi32(a), _mm256_cvtepi8_epi32(_mm_srli_si128(a, 8)));
}
inline V16i cvtepu16_epi32(__m256i a) {
  return mk(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(a)),
            _mm256_cvtepu16_epi32(_mm256_extracti128_si256(a, 1)));
}
inline V16f cvtepi32_ps(V16i a) { return mk(_mm256_cvtepi32_ps(a.lo), _mm256_cvtepi32_ps(a.hi)); }
inline V16i cvtps_epi32(V16f a) { return mk(_mm256_cvtps_epi32(a.lo), _mm256_cvtps_epi32(a.hi)); }
inline V16f castsi512_ps(V16i a) {
  return mk(_mm256_castsi256_ps(a.lo), _mm256_castsi256_ps(a.hi));
}
inline V16i castps_si512(V16f a) {
  return mk(_mm256_castps_si256(a.lo), _mm256_castps_si256(a.hi));
}
inline __m128i cvtepi32_epi8(V16i a) {  // truncating, as vpmovdb
  alignas(32) int32_t v[16];
  storeu_si512(v, a);
  alignas(16) int8_t b[16];
  for (int i = 0; i < 16; ++i) b[i] = (int8_t)v[i];
  return _mm_load_si128((const __m128i*)b);
}
inline __m256i bf16_round(__m256 a) {  // float32 bits -> bf16 in the low 16 bits, RNE
  const __m256i u = _mm256_castps_si256(a);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(r, quiet, nan);
}
inline __m256i cvtneps_pbh(V16f a) {  // 16 bf16 in element order
  return _mm256_permute4x64_epi64(_mm256_packus_epi32(bf16_round(a.lo), bf16_round(a.hi)), 0xD8);
}
// acc + a.odd * b.odd + a.even * b.even per lane (bf16 pairs; odd first, as vdpbf16ps)
inline __m256 dpbf16_half(__m256 acc, __m256i a, __m256i b) {
  const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
  acc = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(a, hi)),
                        _mm256_castsi256_ps(_mm256_and_si256(b, hi)), acc);
  return _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(a, 16)),
                         _mm256_castsi256_ps(_mm256_slli_epi32(b, 16)), acc);
}
inline V16f dpbf16_ps(V16f acc, V16i a, V16i b) {
  return mk(dpbf16_half(acc.lo, a.lo, b.lo), dpbf16_half(acc.hi, a.hi, b.hi));
}

// ---- through memory
inline V16f permutexvar_ps(V16i idx, V16f a) {
  alignas(32) int32_t i[16];
  alignas(32) float v[16], r[16];
  storeu_si512(i, idx);
  storeu_ps(v, a);
  for (int k = 0; k < 16; ++k) r[k] = v[i[k] & 15];
  return loadu_ps(r);
}
inline V16i permutexvar_epi16(V16i idx, V16i a) {
  alignas(32) int16_t i[32], v[32], r[32];
  storeu_si512(i, idx);
  storeu_si512(v, a);
  for (int k = 0; k < 32; ++k) r[k] = v[i[k] & 31];
  return loadu_si512(r);
}
inline V16i permutex2var_epi16(V16i a, V16i idx, V16i b) {
  alignas(32) int16_t i[32], v[64], r[32];
  storeu_si512(i, idx);
  storeu_si512(v, a);
  storeu_si512(v + 32, b);
  for (int k = 0; k < 32; ++k) r[k] = v[i[k] & 63];
  return loadu_si512(r);
}
inline __m256i maskz_loadu_epi16(Mask16 m, const void* p) {
  if (m == 0xFFFF) return _mm256_loadu_si256((const __m256i*)p);
  alignas(32) int16_t r[16] = {};
  const int16_t* s = (const int16_t*)p;
  for (int k = 0; k < 16; ++k)
    if ((m >> k) & 1) r[k] = s[k];
  return _mm256_load_si256((const __m256i*)r);
}

}  // namespace qmm_avx2

// qmm.cpp's names for them
#undef __m512
#define __m512 qmm_avx2::V16f
#undef __m512i
#define __m512i qmm_avx2::V16i
#undef __m512bh
#define __m512bh qmm_avx2::V16i
#undef __m256bh
#define __m256bh __m256i
#undef __mmask16
#define __mmask16 qmm_avx2::Mask16
#undef _mm512_set1_ps
#define _mm512_set1_ps qmm_avx2::set1_ps
#undef _mm512_setzero_ps
#define _mm512_setzero_ps qmm_avx2::setzero_ps
#undef _mm512_loadu_ps
#define _mm512_loadu_ps qmm_avx2::loadu_ps
#undef _mm512_storeu_ps
#define _mm512_storeu_ps qmm_avx2::storeu_ps
#undef _mm512_maskz_loadu_ps
#define _mm512_maskz_loadu_ps qmm_avx2::maskz_loadu_ps
#undef _mm512_mask_loadu_ps
#define _mm512_mask_loadu_ps qmm_avx2::mask_loadu_ps
#undef _mm512_mask_storeu_ps
#define _mm512_mask_storeu_ps qmm_avx2::mask_storeu_ps
#undef _mm512_maskz_mov_ps
#define _mm512_maskz_mov_ps qmm_avx2::maskz_mov_ps
#undef _mm512_add_ps
#define _mm512_add_ps qmm_avx2::add_ps
#undef _mm512_sub_ps
#define _mm512_sub_ps qmm_avx2::sub_ps
#undef _mm512_mul_ps
#define _mm512_mul_ps qmm_avx2::mul_ps
#undef _mm512_div_ps
#define _mm512_div_ps qmm_avx2::div_ps
#undef _mm512_max_ps
#define _mm512_max_ps qmm_avx2::max_ps
#undef _mm512_fmadd_ps
#define _mm512_fmadd_ps qmm_avx2::fmadd_ps
#undef _mm512_fnmadd_ps
#define _mm512_fnmadd_ps qmm_avx2::fnmadd_ps
#undef _mm512_abs_ps
#define _mm512_abs_ps qmm_avx2::abs_ps
#undef _mm512_roundscale_ps
#define _mm512_roundscale_ps(a, imm) qmm_avx2::roundscale_ps<(imm)>(a)
#undef _mm512_scalef_ps
#define _mm512_scalef_ps qmm_avx2::scalef_ps
#undef _mm512_reduce_add_ps
#define _mm512_reduce_add_ps qmm_avx2::reduce_add_ps
#undef _mm512_reduce_max_ps
#define _mm512_reduce_max_ps qmm_avx2::reduce_max_ps
#undef _mm512_shuffle_f32x4
#define _mm512_shuffle_f32x4(a, b, imm) qmm_avx2::shuffle_f32x4<(imm)>(a, b)
#undef _mm512_shuffle_ps
#define _mm512_shuffle_ps(a, b, imm) qmm_avx2::shuffle_ps<(imm)>(a, b)
#undef _mm512_setzero_si512
#define _mm512_setzero_si512 qmm_avx2::setzero_si512
#undef _mm512_set1_epi32
#define _mm512_set1_epi32 qmm_avx2::set1_epi32
#undef _mm512_set1_epi8
#define _mm512_set1_epi8 qmm_avx2::set1_epi8
#undef _mm512_loadu_si512
#define _mm512_loadu_si512 qmm_avx2::loadu_si512
#undef _mm512_load_si512
#define _mm512_load_si512 qmm_avx2::load_si512
#undef _mm512_storeu_si512
#define _mm512_storeu_si512 qmm_avx2::storeu_si512
#undef _mm512_set_epi32
#define _mm512_set_epi32 qmm_avx2::set_epi32
#undef _mm512_set_epi16
#define _mm512_set_epi16 qmm_avx2::set_epi16
#undef _mm512_add_epi32
#define _mm512_add_epi32 qmm_avx2::add_epi32
#undef _mm512_sub_epi32
#define _mm512_sub_epi32 qmm_avx2::sub_epi32
#undef _mm512_sub_epi8
#define _mm512_sub_epi8 qmm_avx2::sub_epi8
#undef _mm512_mullo_epi32
#define _mm512_mullo_epi32 qmm_avx2::mullo_epi32
#undef _mm512_or_si512
#define _mm512_or_si512 qmm_avx2::or_si512
#undef _mm512_madd_epi16
#define _mm512_madd_epi16 qmm_avx2::madd_epi16
#undef _mm512_shuffle_epi8
#define _mm512_shuffle_epi8 qmm_avx2::shuffle_epi8
#undef _mm512_unpacklo_epi16
#define _mm512_unpacklo_epi16 qmm_avx2::unpacklo_epi16
#undef _mm512_unpackhi_epi16
#define _mm512_unpackhi_epi16 qmm_avx2::unpackhi_epi16
#undef _mm512_slli_epi32
#define _mm512_slli_epi32 qmm_avx2::slli_epi32
#undef _mm512_srli_epi32
#define _mm512_srli_epi32 qmm_avx2::srli_epi32
#undef _mm512_and_si512
#define _mm512_and_si512 qmm_avx2::and_si512
#undef _mm512_ternarylogic_epi32
#define _mm512_ternarylogic_epi32(a, b, c, imm) qmm_avx2::ternarylogic_epi32<(imm)>(a, b, c)
#undef _mm512_dpbusd_epi32
#define _mm512_dpbusd_epi32 qmm_avx2::dpbusd_epi32
#undef _mm512_dpwssd_epi32
#define _mm512_dpwssd_epi32 qmm_avx2::dpwssd_epi32
#undef _mm512_maskz_mov_epi32
#define _mm512_maskz_mov_epi32 qmm_avx2::maskz_mov_epi32
#undef _mm512_reduce_add_epi32
#define _mm512_reduce_add_epi32 qmm_avx2::reduce_add_epi32
#undef _mm512_cvtepu8_epi32
#define _mm512_cvtepu8_epi32 qmm_avx2::cvtepu8_epi32
#undef _mm512_cvtepi8_epi32
#define _mm512_cvtepi8_epi32 qmm_avx2::cvtepi8_epi32
#undef _mm512_cvtepu16_epi32
#define _mm512_cvtepu16_epi32 qmm_avx2::cvtepu16_epi32
#undef _mm512_cvtepi32_ps
#define _mm512_cvtepi32_ps qmm_avx2::cvtepi32_ps
#undef _mm512_cvtps_epi32
#define _mm512_cvtps_epi32 qmm_avx2::cvtps_epi32
#undef _mm512_castsi512_ps
#define _mm512_castsi512_ps qmm_avx2::castsi512_ps
#undef _mm512_cvtepi32_epi8
#define _mm512_cvtepi32_epi8 qmm_avx2::cvtepi32_epi8
#undef _mm512_cvtneps_pbh
#define _mm512_cvtneps_pbh qmm_avx2::cvtneps_pbh
#undef _mm512_dpbf16_ps
#define _mm512_dpbf16_ps qmm_avx2::dpbf16_ps
#undef _mm512_permutexvar_ps
#define _mm512_permutexvar_ps qmm_avx2::permutexvar_ps
#undef _mm512_permutexvar_epi16
#define _mm512_permutexvar_epi16 qmm_avx2::permutexvar_epi16
#undef _mm512_permutex2var_epi16
#define _mm512_permutex2var_epi16 qmm_avx2::permutex2var_epi16
#undef _mm256_maskz_loadu_epi16
#define _mm256_maskz_loadu_epi16 qmm_avx2::maskz_loadu_epi16
