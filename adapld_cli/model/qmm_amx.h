// The int8 products of q4 and q6 weights on Intel AMX tiles, for passes of AMX_ROWS rows or
// more (prefill chunks, wide verification passes). Included by qmm.cpp, after the pieces it
// shares (QuantRows, Part, close_rows_any, store_row, the unpackers), when the compiler targets
// AMX-INT8 (quant.py's "amx" build: an AVX-512 CPU with amx_tile and amx_int8).
//
// Contract: every output is bit for bit what mm_i8's other forms compute, for any M. They
// keep, per row, column and super-block s of 256 inputs, an exact integer A (q4: sum_g sc_g
// sum(q xq); q6: sum_g sc_g sum(q xq) = A - 128 C of their offset form) and, for q4, B =
// sum_g mn_g X_g, then take close_row's float steps in super-block order. Here the same
// integers come from tile dot products, the group scale folded into the weights:
//   w' = sc_g * q  (q4: 0..945; q6: -4064..4096), split as w' = lo + 256 hi, lo a byte 0..255,
//   hi = floor(w' / 256) (q4: 0..3; q6: -16..16), so
//   A = sum(xq lo) + 256 sum(xq hi)        (tdpbsud, and tdpbsud or tdpbssd for hi)
//   B = sum_g mn_g X_g                     (q4: close_rows_any, as mm_i8's other forms)
// Integer sums are exact in any order (|A| < 2^25), so A and B are the other forms' integers,
// and close_row then runs on the same operands in the same order: the same floats.
//
// Layout: the input rows quantized into tiles (quantize_rows, tiles: 1 KB per block of 16 rows
// and 64 inputs, zero rows and inputs past M and K); tile A = 16 rows x 64 input bytes (two q4
// groups, four q6 groups) in the weights' stored order (evens first per 8 inputs, as the
// weight dwords); tile B = the same 64 inputs as 16 rows of 16 columns x 4 bytes, which is the
// unpacked weight vectors' own form (vector i: dword c = 4 weights of column c). Per tile of 16
// columns and super-block, the weights are unpacked once into lo / hi rows, then every pair of
// row blocks of 16 rows runs 4 chunks of 64 inputs through the tiles and closes its rows.
#pragma once

#include "amx_tiles.h"

namespace {

// Tiles (amx_tiles.h): 0-3 the sums (lo and hi of two row blocks), 4-5 the two blocks'
// inputs, 6-7 the weights' lo and hi.

// Rows from which mm_i8 takes the tiles (docs/performance.md, "Figures behind code decisions").
constexpr int64_t AMX_ROWS = 32;

// Unpacked weight vectors w (dword c = 4 weights of column c, q4 unsigned, q6 signed) times
// the group's scale sc (per column, int32) as the lo and hi bytes of w' = sc q (see above).
template <bool Q4>
inline void split_scaled(__m512i w, __m512i sc, __m512i* lo, __m512i* hi) {
  const __m512i s16 = _mm512_or_si512(_mm512_and_si512(sc, _mm512_set1_epi32(0xFFFF)),
                                      _mm512_slli_epi32(sc, 16));
  const __m512i even = Q4 ? _mm512_and_si512(w, _mm512_set1_epi16(0x00FF))
                          : _mm512_srai_epi16(_mm512_slli_epi16(w, 8), 8);
  const __m512i odd = Q4 ? _mm512_srli_epi16(w, 8) : _mm512_srai_epi16(w, 8);
  const __m512i pe = _mm512_mullo_epi16(even, s16), po = _mm512_mullo_epi16(odd, s16);
  const __mmask64 odd_bytes = 0xAAAAAAAAAAAAAAAAull;
  // lo: each product's low byte in place; hi: its high byte (pe >> 8 keeps the sign for q6)
  *lo = _mm512_mask_blend_epi8(odd_bytes, pe, _mm512_slli_epi16(po, 8));
  *hi = _mm512_mask_blend_epi8(odd_bytes, _mm512_srai_epi16(pe, 8), po);
}

// Super-block s of tile t as tile rows: wt[0..63] lo, wt[64..127] hi; the rows of groups
// past the last (a short last super-block) are zeros.
template <bool Q4>
inline void unpack_tiles(const uint8_t* Q, const uint8_t* SC, int64_t t, int64_t K, int64_t G,
                         int64_t s, __m512i* wt) {
  constexpr int per = Q4 ? 8 : 16, P = Q4 ? 8 : 4;  // groups a super-block, vectors a group
  alignas(64) __m512i w[8], sc[1];
  for (int gl = 0; gl < per; ++gl) {
    const int64_t g = s * per + gl;
    if (g >= G) {
      for (int i = 0; i < P; ++i) wt[gl * P + i] = wt[64 + gl * P + i] = _mm512_setzero_si512();
      continue;
    }
    if (Q4) unpack_q4(Q, SC, t, K, G, g, g + 1, w, sc);
    else unpack_q6(Q, SC, t, K, G, g, g + 1, w, sc);
    for (int i = 0; i < P; ++i) split_scaled<Q4>(w[i], sc[0], wt + gl * P + i, wt + 64 + gl * P + i);
  }
}

// The sums of NB row blocks (xq: the first block's first tile of the super-block, KC tiles a
// row block; NB = 1 or 2) and one super-block (weights wt from unpack_tiles): row r's lo sums
// at lo[16 r], its hi sums at lo[512 + 16 r] (A = lo + 256 hi). Two blocks keep four
// independent sums in flight (a tile product waits for the one before it on the same sums).
template <int NB>
inline void tile_sums(const int8_t* xq, int64_t KC, const __m512i* wt, bool hi_signed,
                      int32_t* lo) {
  _tile_zero(0);
  _tile_zero(1);
  if constexpr (NB == 2) {
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int c = 0; c < 4; ++c) {
    _tile_loadd(6, wt + 16 * c, 64);
    _tile_loadd(7, wt + 64 + 16 * c, 64);
    _tile_loadd(4, xq + 1024 * c, 64);
    _tile_dpbsud(0, 4, 6);
    if (hi_signed) _tile_dpbssd(1, 4, 7);
    else _tile_dpbsud(1, 4, 7);
    if constexpr (NB == 2) {
      _tile_loadd(5, xq + 1024 * (KC + c), 64);
      _tile_dpbsud(2, 5, 6);
      if (hi_signed) _tile_dpbssd(3, 5, 7);
      else _tile_dpbsud(3, 5, 7);
    }
  }
  _tile_stored(0, lo, 64);
  _tile_stored(1, lo + 512, 64);
  if constexpr (NB == 2) {
    _tile_stored(2, lo + 256, 64);
    _tile_stored(3, lo + 768, 64);
  }
}

// mm_i8 on the tiles (q4, q6): tiles of 16 columns split over threads, super-blocks in order
// per tile, row blocks of 16 within each, two at a time. qx: quantize_rows' tiles form. T: the
// tiles of all parts.
void mm_i8_amx(bool q4, const QuantRows& qx, int64_t M, int64_t K, int64_t T, int64_t G,
               int64_t S, const std::vector<Part>& parts, bool out_f32, void* Y) {
  const int64_t GP = (G + 1) / 2, Mp = (M + 15) / 16 * 16, KC = S * 4, per = q4 ? 8 : 16;
  at::parallel_for(0, T, 1, [&](int64_t t0, int64_t t1) {
    tiles_on();
    alignas(64) __m512i wt[128], pr[4], A[32];
    alignas(64) int32_t sums[1024];
    std::vector<__m512> acc(M);
    const int8_t* X = (const int8_t*)qx.xq.data();
    for (int64_t tg = t0; tg < t1; ++tg) {
      int64_t t;
      const Part& part = part_of(parts, tg, &t);
      for (int64_t m = 0; m < M; ++m) acc[m] = _mm512_setzero_ps();
      for (int64_t s = 0; s < S; ++s) {
        if (q4) unpack_tiles<true>(part.Q, part.SC, t, K, G, s, wt);
        else unpack_tiles<false>(part.Q, part.SC, t, K, G, s, wt);
        // close_rows_any's operands: q4 the group pairs' min multipliers; q6 no offset term (A
        // is the true sum here, not the offset form's)
        const int64_t g0 = s * per, g1 = std::min(G, g0 + per), j0 = g0 / 2, j1 = (g1 + 1) / 2;
        if (q4)
          for (int64_t j = j0; j < j1; ++j) pr[j - j0] = mins_pair(part.SC, t, G, j);
        else
          pr[0] = _mm512_setzero_si512();
        const float* dp = part.DD + (t * S + s) * (q4 ? 32 : 16);
        const __m512 d = _mm512_loadu_ps(dp), dmin = q4 ? _mm512_loadu_ps(dp + 16) : _mm512_setzero_ps();
        for (int64_t m0 = 0; m0 < M;) {
          const int64_t nb = m0 + 32 <= Mp ? 2 : 1;
          const int8_t* x = X + ((m0 / 16) * KC + s * 4) * 1024;
          if (nb == 2) tile_sums<2>(x, KC, wt, !q4, sums);
          else tile_sums<1>(x, KC, wt, !q4, sums);
          const int64_t R = std::min<int64_t>(16 * nb, M - m0);
          for (int64_t r = 0; r < R; ++r)
            A[r] = _mm512_add_epi32(_mm512_load_si512(sums + 16 * r),
                                    _mm512_slli_epi32(_mm512_load_si512(sums + 512 + 16 * r), 8));
          for (int64_t r = 0; r < R; r += RB)  // the other forms' float steps, 8 rows at a time
            close_rows_any(q4, (int)std::min<int64_t>(RB, R - r), g1 - g0 == per, qx, m0 + r, S,
                           s, GP, j0, j1, pr, d, dmin, A + r, acc.data());
          m0 += 16 * nb;
        }
      }
      for (int64_t m = 0; m < M; ++m) store_row(acc[m], part.Bias, t, out_f32, Y, m * T * 16 + tg * 16);
    }
    _tile_release();
  });
}

}  // namespace
