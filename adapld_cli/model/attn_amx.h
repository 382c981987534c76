// Exact attention on AMX tiles (bfloat16 pair products, tdpbf16ps), for a bfloat16 cache with
// d a multiple of 32 up to 128 and at most 16 heads a kv head. Included by qmm.cpp in the amx
// build, which runs it for every pass (attend_any), single steps included.
//
// Contract: attend()'s (qmm.cpp): query i attends keys 0..P[i]-1, then extra[ptr[i]..ptr[i+1]),
// and every output depends only on the query, its key sequence and d, so a draft-tree node
// gets the very result of a single step over the same keys whatever else is in the pass. The
// arithmetic is not attend_bf()'s (the tiles sum a 32-product chunk in their own order): a
// process computes all its passes here, and its outputs differ from the vector builds' in
// the last bits (docs/design.md, "AMX tiles for the attention").
//
// Per query (row) and head, flash-style over its logical keys' 64-key blocks in order (no
// scores kept past their block): the query rounded to bfloat16; a block's scores, each the
// tile sum over d / 32 chunks of 32 dims (one tdpbf16ps each, on a float32 sum started at
// zero); m' = max(m, the block's scores) (m: the largest score so far); the exponentials
// exp(s - m') (exp512) rounded to bfloat16, zero past the last key; the running sums (d
// weighted values, and the sum of the weights as their product with a tile of ones) times
// exp(m - m') where m' > m, plus the block's tile sums over its two 32-key halves in order;
// at the end, the weighted values over the weights' sum. Block boundaries are logical key
// positions (multiples of 64), so a query's blocks are the same in any pass. An element of a
// tile product depends only on its row of A, its column of B and its own sum, so neither the
// pass's other rows (sharing a tile) nor where a block's keys were read from changes it.
//
// Layout: a group of up to 16 columns (query, head) of one kv head (16 / G queries of the
// pass, in order) runs together, its running state kept per column. Its keys below S_g, the
// group's shortest prefix rounded down to 64, come from the call's shared copies of the cache
// in the tiles' B form (kt: per 16 keys and chunk, row k = dword k of each key's chunk; vv:
// per 32 keys and 16 dims, row k = keys 2k and 2k+1 interleaved); each query's keys from S_g
// on (the rest of its prefix, its extras) are gathered into the same forms and continue a
// copy of the group's state. A thread runs a chunk of blocks for every group of its own
// before the next chunk; the order of a group's own operations never changes.
#pragma once

#include "amx_tiles.h"

namespace {

// Tiles: 0-1 score sums, 2-3 keys, 4-7 the group's query chunks; then 0-3 output sums of 64
// dims, 4 probabilities, 5-6 values.

// A 16 x 16 dword block transposed in place: four butterfly stages, stage s swapping the
// off-diagonal s x s blocks of every 2s x 2s block.
inline void transpose16(__m512i* r) {
  struct Idx {
    alignas(64) int32_t lo[4][16], hi[4][16];
    Idx() {
      for (int t = 0, s = 8; s >= 1; ++t, s /= 2)
        for (int q = 0; q < 16; ++q) {
          lo[t][q] = (q & s) ? 16 + q - s : q;
          hi[t][q] = (q & s) ? 16 + q : q + s;
        }
    }
  };
  static const Idx idx;
  for (int t = 0, s = 8; s >= 1; ++t, s /= 2) {
    const __m512i il = _mm512_load_si512(idx.lo[t]), ih = _mm512_load_si512(idx.hi[t]);
    for (int a = 0; a < 16; ++a) {
      if (a & s) continue;
      const __m512i x = r[a], y = r[a + s];
      r[a] = _mm512_permutex2var_epi32(x, il, y);
      r[a + s] = _mm512_permutex2var_epi32(x, ih, y);
    }
  }
}

// B tile of 16 keys' chunk c (32 dims) for the scores: row k holds dims 2k, 2k+1 of each key
// (rows[j] null: a zero key).
inline void keys_tile(const u16* const* rows, int64_t c, u16* out) {
  __m512i r[16];
  for (int j = 0; j < 16; ++j)
    r[j] = rows[j] ? _mm512_loadu_si512(rows[j] + 32 * c) : _mm512_setzero_si512();
  transpose16(r);
  for (int k = 0; k < 16; ++k) _mm512_storeu_si512(out + 32 * k, r[k]);
}

// B tile of 32 keys' dims 16 e .. 16 e + 15 for the weighted sum: row k holds keys 2k and
// 2k + 1 interleaved per dim (rows[j] null: a zero value row).
inline void values_tile(const u16* const* rows, int64_t e, u16* out) {
  struct Idx {
    alignas(64) int16_t v[32];
    Idx() {
      for (int m = 0; m < 16; ++m) v[2 * m] = m, v[2 * m + 1] = 32 + m;
    }
  };
  static const Idx idx;
  const __m512i il = _mm512_load_si512(idx.v);
  auto half = [&](const u16* row) {
    return row ? _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)(row + 16 * e)))
               : _mm512_setzero_si512();
  };
  for (int k = 0; k < 16; ++k)
    _mm512_storeu_si512(out + 32 * k, _mm512_permutex2var_epi16(half(rows[2 * k]), il,
                                                                half(rows[2 * k + 1])));
}

// Groups of a call from which the call copies the cache's blocks once for all of them (fewer:
// each group copies the blocks it uses as it goes, into a buffer that stays in L1, so a single
// step reads the cache once), and the 64-key blocks a thread runs for each of its groups before
// the next blocks (so a long cache's copy is read from memory once a thread, then from L2);
// docs/performance.md, "AMX tiles for the attention" and "Flash-style tile attention".
constexpr int64_t SHARED_GROUPS = 4, CHUNK_BLOCKS = 8;

// One group of one kv head (a work item): its queries, their key counts (Lr) and each column's
// (lim: its query's, zero for unused columns), its bfloat16 queries ([16][d]) and the running
// state of its columns: the largest score so far (m) and the sums (ob, [16][d + 16]: d
// weighted values, then 16 lanes of the weights' sum). Its buffers lie in the thread's arenas
// (kept from call to call: no zeroing, no page faults).
struct AttnGroup {
  int64_t kv = 0, i0 = 0, nr = 0, Sg = 0, Lr[16] = {}, lim[16] = {};
  alignas(64) float m[16];
  u16* q = nullptr;
  float* ob = nullptr;
};

// A thread's scratch for one block: its scores ([16][64]), their rounded exponentials ([16][64],
// the two probabilities tiles) and each column's rescale factor.
struct BlockScratch {
  alignas(64) float sc[16 * 64];
  alignas(64) u16 pb[16 * 64];
  alignas(64) float alpha[16];
};

// Rows of the cache a call that copies as it goes prefetches ahead of the rows it copies, and
// how: each row of a copied block asks for its counterpart PREFETCH_ROWS rows on (into the
// outer caches, _MM_HINT_T2), spread over the copy. A single step streams the whole cache, K
// and V side by side; asking for a whole block at once stalled the thread on full fill buffers
// (docs/performance.md, "Flash-style tile attention").
constexpr int64_t PREFETCH_ROWS = 256;

inline void prefetch_rows(const u16* const* rows, int n, int64_t ahead, int64_t d) {
  for (int j = 0; j < n; ++j)
    for (int64_t l = 0; l < d; l += 32) _mm_prefetch((const char*)(rows[j] + ahead + l), _MM_HINT_T2);
}

// Lane c: the largest of x[c]'s 16 lanes (four stages of shuffles, then the columns' order).
inline __m512 max_lanes(const __m512* x) {
  auto net = [](const __m512* x) {
    __m512 y[8], z[4], w[2];
    for (int c = 0; c < 8; ++c)
      y[c] = _mm512_max_ps(_mm512_shuffle_f32x4(x[2 * c], x[2 * c + 1], 0x44),
                           _mm512_shuffle_f32x4(x[2 * c], x[2 * c + 1], 0xEE));
    for (int c = 0; c < 4; ++c)
      z[c] = _mm512_max_ps(_mm512_shuffle_f32x4(y[2 * c], y[2 * c + 1], 0x88),
                           _mm512_shuffle_f32x4(y[2 * c], y[2 * c + 1], 0xDD));
    for (int c = 0; c < 2; ++c)
      w[c] = _mm512_max_ps(_mm512_shuffle_ps(z[2 * c], z[2 * c + 1], 0x44),
                           _mm512_shuffle_ps(z[2 * c], z[2 * c + 1], 0xEE));
    return _mm512_max_ps(_mm512_shuffle_ps(w[0], w[1], 0x88), _mm512_shuffle_ps(w[0], w[1], 0xDD));
  };
  static const __m512i order = [&] {  // where the network leaves column c
    __m512 tag[16];
    for (int c = 0; c < 16; ++c) tag[c] = _mm512_set1_ps((float)c);
    alignas(64) float out[16];
    alignas(64) int32_t idx[16];
    _mm512_store_ps(out, net(tag));
    for (int lane = 0; lane < 16; ++lane) idx[(int)out[lane]] = lane;
    return _mm512_load_si512(idx);
  }();
  return _mm512_permutexvar_ps(order, net(x));
}

// A B tile of ones for the weighted sums: its product with the probabilities is their sum.
inline const u16* ones_tile() {
  struct Ones {
    alignas(64) u16 v[512];
    Ones() { std::fill(v, v + 512, (u16)0x3F80); }
  };
  static const Ones ones;
  return ones.v;
}

template <int C2>
struct TileAttention {
  static constexpr int64_t T = 512;  // u16 a tile
  const float* Q;
  const u16 *K, *V;
  const int64_t *P, *ptr, *extra;
  float* O;
  int64_t n, H, KV, KS, d, G, R, NG, DC, NB = 0;
  bool shared;
  u16 *kt = nullptr, *vv = nullptr;  // the shared copies (shared: blocks below NB)

  // cache row of group a's query r's j-th key
  int64_t key(const AttnGroup& a, int64_t r, int64_t j) const {
    const int64_t i = a.i0 + r;
    return j < P[i] ? j : extra[ptr[i] + j - P[i]];
  }
  // 32-key block b's keys of head kv (2 x C2 tiles) and values (DC tiles)
  // (ahead: also each row's counterpart that many rows on, toward the caches: prefetch_rows)
  void copy_keys(int64_t kv, int64_t b, u16* out, int64_t ahead = 0) const {
    const u16* rows[16];
    for (int h = 0; h < 2; ++h) {
      for (int j = 0; j < 16; ++j) rows[j] = K + kv * KS + (b * 32 + 16 * h + j) * d;
      if (ahead) prefetch_rows(rows, 16, ahead * d, d);
      for (int64_t c = 0; c < C2; ++c) keys_tile(rows, c, out + (h * C2 + c) * T);
    }
  }
  void copy_values(int64_t kv, int64_t b, u16* out, int64_t ahead = 0) const {
    const u16* rows[32];
    for (int j = 0; j < 32; ++j) rows[j] = V + kv * KS + (b * 32 + j) * d;
    if (ahead) prefetch_rows(rows, 32, ahead * d, d);
    for (int64_t e = 0; e < DC; ++e) values_tile(rows, e, out + e * T);
  }
  // the shared copies of 64-key block f (32-key blocks 2 f, 2 f + 1), or the blocks copied now
  // into kbuf (4 x C2 tiles) / vbuf (2 x DC tiles)
  const u16* keys_of(int64_t kv, int64_t f, u16* kbuf) const {
    if (shared) return kt + (kv * NB + 2 * f) * 2 * C2 * T;
    copy_keys(kv, 2 * f, kbuf, PREFETCH_ROWS);
    copy_keys(kv, 2 * f + 1, kbuf + 2 * C2 * T, PREFETCH_ROWS);
    return kbuf;
  }
  const u16* values_of(int64_t kv, int64_t f, u16* vbuf) const {
    if (shared) return vv + (kv * NB + 2 * f) * DC * T;
    copy_values(kv, 2 * f, vbuf, PREFETCH_ROWS);
    copy_values(kv, 2 * f + 1, vbuf + DC * T, PREFETCH_ROWS);
    return vbuf;
  }

  // Work item w: its queries, their key counts, S_g (buffers not yet placed)
  void start(int64_t w, AttnGroup& a) const {
    const int64_t g0 = w / KV;
    a.kv = w % KV, a.i0 = g0 * R, a.nr = std::min(R, n - a.i0);
    int64_t Pmin = P[a.i0];
    for (int64_t r = 0; r < a.nr; ++r) {
      const int64_t i = a.i0 + r;
      a.Lr[r] = P[i] + ptr[i + 1] - ptr[i];
      Pmin = std::min(Pmin, P[i]);
    }
    for (int64_t c = 0; c < 16; ++c) {
      a.lim[c] = c < a.nr * G ? a.Lr[c / G] : 0;
      a.m[c] = -INFINITY;
    }
    a.Sg = Pmin / 64 * 64;
  }
  // its buffers from the arenas' cursors; its bfloat16 queries (zero columns past its own)
  void place(AttnGroup& a, float*& f, u16*& h) const {
    a.ob = f, f += 16 * (d + 16);
    a.q = h, h += 16 * d;
    std::memset(a.q, 0, 16 * d * sizeof(u16));
    for (int64_t col = 0; col < a.nr * G; ++col) {
      const float* src = Q + ((a.i0 + col / G) * H + a.kv * G + col % G) * d;
      for (int64_t k = 0; k < d; k += 16) store_bf16(a.q + col * d + k, _mm512_loadu_ps(src + k));
    }
  }

  void load_queries(const u16* q) const {
    _tile_loadd(4, q, d * 2);
    if constexpr (C2 > 1) _tile_loadd(5, q + 32, d * 2);
    if constexpr (C2 > 2) _tile_loadd(6, q + 64, d * 2);
    if constexpr (C2 > 3) _tile_loadd(7, q + 96, d * 2);
  }

  // The logical keys j0 .. j0 + 63 of every column c with lim[c] > j0 (the others keep their
  // state; their rows of ob only gain zero probabilities' products): k, the block's key tiles
  // (4 x C2: per 16 keys, its C2 chunks), v its value tiles (2 x DC: per 32 keys, its DC dims
  // tiles), q the group's queries ([16][d]). The header's arithmetic, per column: the scores
  // (tile sums over d / 32 chunks, from zero); m' = max(m, the block's scores); the rounded
  // exponentials exp(s - m') (zero past the column's last key); ob = ob * exp(m - m') (not at
  // all where m' = m: a factor of one) + the tile sums of the rounded exponentials times the
  // values of keys j0 .. j0 + 31, then j0 + 32 .. j0 + 63 (times ones, for the weights' sum).
  // Block 0 starts from zero.
  void block(const u16* q, float* m, float* ob, const int64_t* lim, int64_t j0, const u16* k,
             const u16* v, BlockScratch& s) const {
    const int64_t OD = d + 16;
    // the scores of the four 16-key parts in tiles 0-3, a query chunk (tile 4) at a time
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
#define ATTN_QK(c)                              \
  if constexpr (C2 > c) {                       \
    _tile_loadd(4, q + 32 * c, d * 2);          \
    _tile_loadd(5, k + (0 * C2 + c) * T, 64);   \
    _tile_dpbf16ps(0, 4, 5);                    \
    _tile_loadd(6, k + (1 * C2 + c) * T, 64);   \
    _tile_dpbf16ps(1, 4, 6);                    \
    _tile_loadd(7, k + (2 * C2 + c) * T, 64);   \
    _tile_dpbf16ps(2, 4, 7);                    \
    _tile_loadd(5, k + (3 * C2 + c) * T, 64);   \
    _tile_dpbf16ps(3, 4, 5);                    \
  }
    ATTN_QK(0) ATTN_QK(1) ATTN_QK(2) ATTN_QK(3)
#undef ATTN_QK
    _tile_stored(0, s.sc, 256);
    _tile_stored(1, s.sc + 16, 256);
    _tile_stored(2, s.sc + 32, 256);
    _tile_stored(3, s.sc + 48, 256);
    // each column's valid keys here (lane masks of its four 16-key parts), its scores (-inf
    // past them), their maximum
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __mmask16 km[16][4];
    __m512 top[16];
    for (int c = 0; c < 16; ++c) {
      const int64_t left = lim[c] - j0;
      top[c] = ninf;
      for (int u = 0; u < 4; ++u) {
        km[c][u] = left > 16 * u ? tail_mask(left - 16 * u) : 0;
        top[c] = _mm512_max_ps(top[c], _mm512_mask_loadu_ps(ninf, km[c][u], s.sc + c * 64 + 16 * u));
      }
    }
    const __m512 was = _mm512_load_ps(m), now = _mm512_max_ps(was, max_lanes(top));
    const __mmask16 moved = j0 > 0 ? _mm512_cmp_ps_mask(now, was, _CMP_NEQ_OQ) : 0;
    _mm512_store_ps(m, now);
    _mm512_store_ps(s.alpha, _mm512_mask_mov_ps(_mm512_set1_ps(1.f), moved,
                                                 exp512(_mm512_sub_ps(was, now))));
    for (int c = 0; c < 16; ++c) {
      u16* p = s.pb + c * 64;
      const __m512 t = _mm512_set1_ps(m[c]);
      for (int u = 0; u < 4; u += 2) {
        if (!km[c][u]) {
          _mm512_storeu_si512(p + 16 * u, _mm512_setzero_si512());
          continue;
        }
        const float* sc = s.sc + c * 64 + 16 * u;
        const __m512 e0 = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(km[c][u], sc), t));
        const __m512 e1 = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(km[c][u + 1], sc + 16), t));
        _mm512_storeu_si512(p + 16 * u,
                            (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_mov_ps(km[c][u + 1], e1),
                                                         _mm512_maskz_mov_ps(km[c][u], e0)));
      }
    }
    for (int c = 0; c < 16; ++c) {
      if (!((moved >> c) & 1)) continue;
      const __m512 f = _mm512_set1_ps(s.alpha[c]);
      for (int64_t e = 0; e < OD; e += 16)
        _mm512_storeu_ps(ob + c * OD + e, _mm512_mul_ps(f, _mm512_loadu_ps(ob + c * OD + e)));
    }
    // the sums: probabilities of keys j0 .. j0 + 31 in tile 2, the rest in tile 3
    _tile_loadd(2, s.pb, 128);
    _tile_loadd(3, s.pb + 32, 128);
    const u16* v1 = v + DC * T;
    for (int64_t e = 0; e < DC; e += 2) {
      if (j0 == 0) {
        _tile_zero(0);
        _tile_zero(1);
      } else {
        _tile_loadd(0, ob + 16 * e, OD * 4);
        _tile_loadd(1, ob + 16 * e + 16, OD * 4);
      }
      _tile_loadd(4, v + e * T, 64);
      _tile_loadd(5, v + (e + 1) * T, 64);
      _tile_loadd(6, v1 + e * T, 64);
      _tile_loadd(7, v1 + (e + 1) * T, 64);
      _tile_dpbf16ps(0, 2, 4);
      _tile_dpbf16ps(1, 2, 5);
      _tile_dpbf16ps(0, 3, 6);
      _tile_dpbf16ps(1, 3, 7);
      _tile_stored(0, ob + 16 * e, OD * 4);
      _tile_stored(1, ob + 16 * e + 16, OD * 4);
    }
    if (j0 == 0)
      _tile_zero(0);
    else
      _tile_loadd(0, ob + d, OD * 4);
    _tile_loadd(4, ones_tile(), 64);
    _tile_dpbf16ps(0, 2, 4);
    _tile_dpbf16ps(0, 3, 4);
    _tile_stored(0, ob + d, OD * 4);
  }

  // the group's shared blocks b0 .. b1 - 1 (below S_g)
  void shared_blocks(AttnGroup& a, int64_t b0, int64_t b1, u16* kbuf, u16* vbuf,
                     BlockScratch& s) const {
    b1 = std::min(b1, a.Sg / 64);
    for (int64_t b = b0; b < b1; ++b)
      block(a.q, a.m, a.ob, a.lim, b * 64, keys_of(a.kv, b, kbuf), values_of(a.kv, b, vbuf), s);
  }

  // each query: its blocks from S_g on (gathered) continue a copy of the group's state; its
  // columns, the sums over the weights' sum, to O
  void finish(AttnGroup& a, std::vector<u16>& tkv, std::vector<float>& tob, BlockScratch& s) const {
    const int64_t OD = d + 16;
    const u16* rows[64];
    tkv.resize((4 * C2 + 2 * DC) * T);
    tob.resize(16 * OD);
    u16 *tk = tkv.data(), *tv = tk + 4 * C2 * T;
    for (int64_t r = 0; r < a.nr; ++r) {
      const float* ob = a.ob;
      if (a.Lr[r] > a.Sg) {
        int64_t lim[16];
        alignas(64) float tm[16];
        for (int c = 0; c < 16; ++c) lim[c] = c / G == r ? a.Lr[r] : 0;
        std::memcpy(tm, a.m, sizeof tm);
        if (a.Sg > 0) std::memcpy(tob.data(), a.ob, 16 * OD * sizeof(float));
        for (int64_t j0 = a.Sg; j0 < a.Lr[r]; j0 += 64) {
          for (int j = 0; j < 64; ++j)
            rows[j] = j0 + j < a.Lr[r] ? K + a.kv * KS + key(a, r, j0 + j) * d : nullptr;
          for (int h = 0; h < 4; ++h)
            for (int64_t c = 0; c < C2; ++c) keys_tile(rows + 16 * h, c, tk + (h * C2 + c) * T);
          for (int j = 0; j < 64; ++j)
            if (rows[j]) rows[j] = V + a.kv * KS + key(a, r, j0 + j) * d;
          for (int h = 0; h < 2; ++h)
            for (int64_t e = 0; e < DC; ++e) values_tile(rows + 32 * h, e, tv + (h * DC + e) * T);
          block(a.q, tm, tob.data(), lim, j0, tk, tv, s);
        }
        ob = tob.data();
      }
      for (int64_t g = 0; g < G; ++g) {
        const float* src = ob + (r * G + g) * OD;
        const __m512 total = _mm512_set1_ps(src[d]);
        float* out = O + ((a.i0 + r) * H + a.kv * G + g) * d;
        for (int64_t e = 0; e < d; e += 16)
          _mm512_storeu_ps(out + e, _mm512_div_ps(_mm512_loadu_ps(src + e), total));
      }
    }
  }

  void run() {
    if (shared)
      for (int64_t i = 0; i < n; ++i) NB = std::max(NB, P[i] / 64 * 2);
    static thread_local std::vector<u16> kt_, vv_;  // the calling thread's, kept for the next call
    kt_.resize(std::max<int64_t>(1, KV * NB * 2 * C2 * T));
    vv_.resize(std::max<int64_t>(1, KV * NB * DC * T));
    kt = kt_.data(), vv = vv_.data();
    if (NB)
      at::parallel_for(0, KV * NB, 1, [&](int64_t w0, int64_t w1) {
        for (int64_t w = w0; w < w1; ++w) {
          const int64_t kv = w / NB, b = w % NB;
          copy_keys(kv, b, kt + (kv * NB + b) * 2 * C2 * T);
          copy_values(kv, b, vv + (kv * NB + b) * DC * T);
        }
      });
    at::parallel_for(0, NG * KV, 1, [&](int64_t w0, int64_t w1) {
      tiles_on();
      std::vector<AttnGroup> groups(w1 - w0);
      static thread_local std::vector<float> farena, tob;
      static thread_local std::vector<u16> harena, tkv;
      alignas(64) u16 kbuf[16 * T], vbuf[16 * T];
      BlockScratch s;
      int64_t blocks = 0;
      for (int64_t w = w0; w < w1; ++w) {
        start(w, groups[w - w0]);
        blocks = std::max(blocks, groups[w - w0].Sg / 64);
      }
      const int64_t room = (w1 - w0) * 16 * (d + 16);
      if ((int64_t)farena.size() < room) farena.resize(room);
      if ((int64_t)harena.size() < room) harena.resize(room);
      float* f = farena.data();
      u16* h = harena.data();
      for (auto& a : groups) place(a, f, h);
      // shared: a chunk of blocks for every group, then the next chunk; else a group at a time
      const int64_t step = shared ? CHUNK_BLOCKS : std::max<int64_t>(1, blocks);
      auto phases = [&](AttnGroup* first, AttnGroup* last) {
        for (int64_t b0 = 0; b0 < blocks; b0 += step)
          for (AttnGroup* a = first; a != last; ++a) shared_blocks(*a, b0, b0 + step, kbuf, vbuf, s);
        for (AttnGroup* a = first; a != last; ++a) finish(*a, tkv, tob, s);
      };
      if (shared) {
        phases(groups.data(), groups.data() + groups.size());
      } else {
        for (auto& a : groups) phases(&a, &a + 1);
      }
      _tile_release();
    });
  }
};

template <int C2>
void attend_amx(const float* Q, const at::BFloat16* K, const at::BFloat16* V, const int64_t* P,
                const int64_t* ptr, const int64_t* extra, float* O, int64_t n, int64_t H,
                int64_t KV, int64_t KS, int64_t d) {
  const int64_t G = H / KV, R = 16 / G, NG = (n + R - 1) / R;
  TileAttention<C2> t{Q, (const u16*)K, (const u16*)V, P, ptr, extra, O, n, H, KV, KS, d,
                      G, R, NG, d / 16, 0, NG >= SHARED_GROUPS};
  t.run();
}

// Whether a bfloat16 cache's attention with head size d and G heads per kv head runs here:
// not where $ADAPLD_ATTN_TILES is 0 (quant.ENV_ATTN_TILES; read once, so a process keeps one
// arithmetic: the vector kernels' then, the avx512 build's bits, which the cross-build test
// compares).
inline bool tiles_apply(int64_t d, int64_t G) {
  static const bool off = [] {
    const char* v = std::getenv("ADAPLD_ATTN_TILES");
    return v && std::strcmp(v, "0") == 0;
  }();
  return !off && d % 32 == 0 && d <= 128 && G <= 16 && amx_ready();
}

// attend_amx() for this call, or false where it does not apply (then the vector forms run).
inline bool attend_tiles(const float* Q, const at::BFloat16* K, const at::BFloat16* V,
                         const int64_t* P, const int64_t* ptr, const int64_t* extra, float* O,
                         int64_t n, int64_t H, int64_t KV, int64_t KS, int64_t d) {
  if (!tiles_apply(d, H / KV)) return false;
  switch (d / 32) {
    case 1: attend_amx<1>(Q, K, V, P, ptr, extra, O, n, H, KV, KS, d); break;
    case 2: attend_amx<2>(Q, K, V, P, ptr, extra, O, n, H, KV, KS, d); break;
    case 3: attend_amx<3>(Q, K, V, P, ptr, extra, O, n, H, KV, KS, d); break;
    default: attend_amx<4>(Q, K, V, P, ptr, extra, O, n, H, KV, KS, d);
  }
  return true;
}

}  // namespace
