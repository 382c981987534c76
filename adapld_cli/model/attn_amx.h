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
// Per query (row) and head, in order: the query rounded to bfloat16; the score of logical key
// j, the tile sum over d / 32 chunks of 32 dims (one tdpbf16ps each, on a float32 sum started
// at zero); exp_row()'s softmax, each probability rounded to bfloat16 (zero past the last key);
// the output, tile sums over the logical keys' 32-key blocks in order (the keys past the last
// as zero probabilities times zero values). An element of a tile product depends only on its
// row of A, its column of B and its own sum, so neither the pass's other rows (sharing a
// tile) nor where a block's keys were read from changes it.
//
// Layout: a group of up to 16 columns (query, head) of one kv head (16 / G queries of the
// pass, in order) runs together. Its keys below S_g, the group's shortest prefix rounded down
// to 32, come from the call's shared copies of the cache in the tiles' B form (kt: per 16
// keys and chunk, row k = dword k of each key's chunk; vv: per 32 keys and 16 dims, row k =
// keys 2k and 2k+1 interleaved); each query's keys from S_g on (the rest of its prefix, its
// extras) are gathered into the same forms, and its output continues the group's sums. A
// thread runs its groups phase by phase (scores, softmax, sums), each phase a chunk of blocks
// for every group before the next chunk; the order of a group's own operations never changes.
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
// step reads the cache once), and the 32-key blocks a thread runs for each of its groups before
// the next blocks (so a long cache's copy is read from memory once a thread, then from L2);
// docs/performance.md, "AMX tiles for the attention".
constexpr int64_t SHARED_GROUPS = 4, CHUNK_BLOCKS = 16;

// One group of one kv head (a work item): its queries' key counts, its bfloat16 queries, their
// scores and probabilities ([16][LS], column-major by (query, head)) and output sums ([16][d]).
// Its buffers lie in the thread's arenas (kept from call to call: no zeroing, no page faults).
struct AttnGroup {
  int64_t kv = 0, i0 = 0, nr = 0, Sg = 0, LS = 0, Lr[16] = {};
  u16 *q = nullptr, *pb = nullptr;
  float *score = nullptr, *ob = nullptr;
};

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
  // 32-key block b's keys of head kv (2 x C2 tiles) and its values of dims 16 e0 .. (ne tiles)
  void copy_keys(int64_t kv, int64_t b, u16* out) const {
    const u16* rows[16];
    for (int h = 0; h < 2; ++h) {
      for (int j = 0; j < 16; ++j) rows[j] = K + kv * KS + (b * 32 + 16 * h + j) * d;
      for (int64_t c = 0; c < C2; ++c) keys_tile(rows, c, out + (h * C2 + c) * T);
    }
  }
  void copy_values(int64_t kv, int64_t b, int64_t e0, int64_t ne, u16* out) const {
    const u16* rows[32];
    for (int j = 0; j < 32; ++j) rows[j] = V + kv * KS + (b * 32 + j) * d;
    for (int64_t e = 0; e < ne; ++e) values_tile(rows, e0 + e, out + e * T);
  }
  // the shared copy of block b, or the block copied now into buf
  const u16* keys_of(int64_t kv, int64_t b, u16* buf) const {
    if (shared) return kt + (kv * NB + b) * 2 * C2 * T;
    prefetch_row(K + kv * KS + (b + 1) * 32 * d, 32 * d);
    copy_keys(kv, b, buf);
    return buf;
  }
  const u16* values_of(int64_t kv, int64_t b, int64_t h, int64_t ne, u16* buf) const {
    if (shared) return vv + ((kv * NB + b) * DC + h) * T;
    prefetch_row(V + kv * KS + (b + 1) * 32 * d, 32 * d);
    copy_values(kv, b, h, ne, buf);
    return buf;
  }

  // Work item w: its queries, their key counts, S_g (buffers not yet placed)
  void start(int64_t w, AttnGroup& a) const {
    const int64_t g0 = w / KV;
    a.kv = w % KV, a.i0 = g0 * R, a.nr = std::min(R, n - a.i0);
    int64_t Pmin = P[a.i0], Lmax = 0;
    for (int64_t r = 0; r < a.nr; ++r) {
      const int64_t i = a.i0 + r;
      a.Lr[r] = P[i] + ptr[i + 1] - ptr[i];
      Pmin = std::min(Pmin, P[i]);
      Lmax = std::max(Lmax, a.Lr[r]);
    }
    a.Sg = Pmin / 32 * 32, a.LS = (Lmax + 31) / 32 * 32;
  }
  // its buffers from the arenas' cursors; its bfloat16 queries (zero columns past its own)
  void place(AttnGroup& a, float*& f, u16*& h) const {
    a.score = f, a.ob = f + 16 * a.LS, f += 16 * (a.LS + d);
    a.q = h, a.pb = h + 16 * d, h += 16 * (a.LS + d);
    std::memset(a.q, 0, 16 * d * sizeof(u16));
    for (int64_t col = 0; col < a.nr * G; ++col) {
      const float* src = Q + ((a.i0 + col / G) * H + a.kv * G + col % G) * d;
      for (int64_t k = 0; k < d; k += 16) store_bf16(a.q + col * d + k, _mm512_loadu_ps(src + k));
    }
  }

  void load_queries(const AttnGroup& a) const {
    _tile_loadd(4, a.q, d * 2);
    if constexpr (C2 > 1) _tile_loadd(5, a.q + 32, d * 2);
    if constexpr (C2 > 2) _tile_loadd(6, a.q + 64, d * 2);
    if constexpr (C2 > 3) _tile_loadd(7, a.q + 96, d * 2);
  }

  // scores of the shared blocks b0 .. b1 - 1 (below S_g), two 16-key blocks at a time
  void score_blocks(AttnGroup& a, int64_t b0, int64_t b1, u16* buf) const {
    b1 = std::min(b1, a.Sg / 32);
    if (b0 >= b1) return;
    load_queries(a);
    for (int64_t b = b0; b < b1; ++b) {
      const u16* k0 = keys_of(a.kv, b, buf);
      const u16* k1 = k0 + C2 * T;
      _tile_zero(0);
      _tile_zero(1);
#define ATTN_QK(c, tq)              \
  if constexpr (C2 > c) {           \
    _tile_loadd(2, k0 + c * T, 64); \
    _tile_dpbf16ps(0, tq, 2);       \
    _tile_loadd(3, k1 + c * T, 64); \
    _tile_dpbf16ps(1, tq, 3);       \
  }
      ATTN_QK(0, 4) ATTN_QK(1, 5) ATTN_QK(2, 6) ATTN_QK(3, 7)
#undef ATTN_QK
      _tile_stored(0, a.score + b * 32, a.LS * 4);
      _tile_stored(1, a.score + b * 32 + 16, a.LS * 4);
    }
  }

  // each query's scores from S_g on, 16 keys at a time, its own columns kept; then the
  // probabilities [16][LS] (zeros past each query's last key and in unused columns)
  void score_rest(AttnGroup& a, std::vector<u16>& tk, float* ot) const {
    const u16* rows[16];
    load_queries(a);
    tk.resize(C2 * T);
    for (int64_t r = 0; r < a.nr; ++r)
      for (int64_t j0 = a.Sg; j0 < a.Lr[r]; j0 += 16) {
        for (int j = 0; j < 16; ++j)
          rows[j] = j0 + j < a.Lr[r] ? K + a.kv * KS + key(a, r, j0 + j) * d : nullptr;
        for (int64_t c = 0; c < C2; ++c) keys_tile(rows, c, tk.data() + c * T);
        _tile_zero(0);
#define ATTN_QK1(c, tq)                    \
  if constexpr (C2 > c) {                  \
    _tile_loadd(2, tk.data() + c * T, 64); \
    _tile_dpbf16ps(0, tq, 2);              \
  }
        ATTN_QK1(0, 4) ATTN_QK1(1, 5) ATTN_QK1(2, 6) ATTN_QK1(3, 7)
#undef ATTN_QK1
        _tile_stored(0, ot, 64);
        for (int64_t col = r * G; col < (r + 1) * G; ++col)
          std::memcpy(a.score + col * a.LS + j0, ot + col * 16, 16 * sizeof(float));
      }
    for (int64_t col = 0; col < 16; ++col) {
      u16* p = a.pb + col * a.LS;
      if (col >= a.nr * G) {
        std::memset(p, 0, a.LS * sizeof(u16));
        continue;
      }
      probabilities_bf16(a.score + col * a.LS, a.Lr[col / G], p, a.LS);
    }
  }

  // one 32-key block's weighted sums: tile 4 holds its probabilities; vb_expr, its value tiles
  // of dims 16 h .. 16 (h + ne) - 1, go to tiles 5 / 6 and add into sums 0 .. ne - 1
#define ATTN_PV_BODY(vb_expr)                                                              \
  {                                                                                        \
    const u16* vb = vb_expr;                                                               \
    _tile_loadd(5, vb, 64);                                                                \
    _tile_dpbf16ps(0, 4, 5);                                                               \
    if (ne > 1) { _tile_loadd(6, vb + T, 64); _tile_dpbf16ps(1, 4, 6); }                   \
    if (ne > 2) { _tile_loadd(5, vb + 2 * T, 64); _tile_dpbf16ps(2, 4, 5); }               \
    if (ne > 3) { _tile_loadd(6, vb + 3 * T, 64); _tile_dpbf16ps(3, 4, 6); }               \
  }
  void load_sums(const float* src, int64_t h, int64_t ne) const {
    _tile_loadd(0, src + h * 16, d * 4);
    if (ne > 1) _tile_loadd(1, src + h * 16 + 16, d * 4);
    if (ne > 2) _tile_loadd(2, src + h * 16 + 32, d * 4);
    if (ne > 3) _tile_loadd(3, src + h * 16 + 48, d * 4);
  }
  void store_sums(float* dst, int64_t h, int64_t ne) const {
    _tile_stored(0, dst + h * 16, d * 4);
    if (ne > 1) _tile_stored(1, dst + h * 16 + 16, d * 4);
    if (ne > 2) _tile_stored(2, dst + h * 16 + 32, d * 4);
    if (ne > 3) _tile_stored(3, dst + h * 16 + 48, d * 4);
  }

  // the weighted sums of the shared blocks b0 .. b1 - 1 (below S_g), dims 16 h .. (ob: the
  // sums so far; zeros before block 0)
  void weigh_blocks(AttnGroup& a, int64_t h, int64_t b0, int64_t b1, u16* buf) const {
    b1 = std::min(b1, a.Sg / 32);
    const int64_t ne = std::min<int64_t>(4, DC - h);
    if (b0 > 0 && b0 >= b1) return;  // past S_g: the sums are stored
    if (b0 == 0) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
    } else {
      load_sums(a.ob, h, ne);
    }
    for (int64_t b = b0; b < b1; ++b) {
      _tile_loadd(4, a.pb + b * 32, a.LS * 2);
      ATTN_PV_BODY(values_of(a.kv, b, h, ne, buf))
    }
    store_sums(a.ob, h, ne);
  }

  // each query: its blocks from S_g on continue the group's sums; its columns to O
  void weigh_rest(AttnGroup& a, std::vector<u16>& tv, float* ot) const {
    const u16* rows[32];
    for (int64_t r = 0; r < a.nr; ++r) {
      const float* src = a.ob;
      if (a.Lr[r] > a.Sg) {
        const int64_t nb = (a.Lr[r] - a.Sg + 31) / 32;
        tv.resize(nb * DC * T);
        for (int64_t t = 0; t < nb; ++t) {
          for (int j = 0; j < 32; ++j) {
            const int64_t jj = a.Sg + 32 * t + j;
            rows[j] = jj < a.Lr[r] ? V + a.kv * KS + key(a, r, jj) * d : nullptr;
          }
          for (int64_t e = 0; e < DC; ++e) values_tile(rows, e, tv.data() + (t * DC + e) * T);
        }
        for (int64_t h = 0; h < DC; h += 4) {
          const int64_t ne = std::min<int64_t>(4, DC - h);
          load_sums(a.ob, h, ne);
          for (int64_t t = 0; t < nb; ++t) {
            _tile_loadd(4, a.pb + a.Sg + 32 * t, a.LS * 2);
            ATTN_PV_BODY(tv.data() + (t * DC + h) * T)
          }
          store_sums(ot, h, ne);
        }
        src = ot;
      }
      for (int64_t g = 0; g < G; ++g)
        std::memcpy(O + ((a.i0 + r) * H + a.kv * G + g) * d, src + (r * G + g) * d, d * sizeof(float));
    }
  }
#undef ATTN_PV_BODY

  void run() {
    if (shared)
      for (int64_t i = 0; i < n; ++i) NB = std::max(NB, P[i] / 32);
    static thread_local std::vector<u16> kt_, vv_;  // the calling thread's, kept for the next call
    kt_.resize(std::max<int64_t>(1, KV * NB * 2 * C2 * T));
    vv_.resize(std::max<int64_t>(1, KV * NB * DC * T));
    kt = kt_.data(), vv = vv_.data();
    if (NB)
      at::parallel_for(0, KV * NB, 1, [&](int64_t w0, int64_t w1) {
        for (int64_t w = w0; w < w1; ++w) {
          const int64_t kv = w / NB, b = w % NB;
          copy_keys(kv, b, kt + (kv * NB + b) * 2 * C2 * T);
          copy_values(kv, b, 0, DC, vv + (kv * NB + b) * DC * T);
        }
      });
    at::parallel_for(0, NG * KV, 1, [&](int64_t w0, int64_t w1) {
      tiles_on();
      std::vector<AttnGroup> groups(w1 - w0);
      static thread_local std::vector<float> farena;
      static thread_local std::vector<u16> harena, tk, tv;
      alignas(64) u16 buf[8 * T];
      alignas(64) float ot[16 * 128];
      int64_t blocks = 0, room = 0;
      for (int64_t w = w0; w < w1; ++w) {
        start(w, groups[w - w0]);
        blocks = std::max(blocks, groups[w - w0].Sg / 32);
        room += 16 * (groups[w - w0].LS + d);
      }
      if ((int64_t)farena.size() < room) farena.resize(room);
      if ((int64_t)harena.size() < room) harena.resize(room);
      float* f = farena.data();
      u16* h = harena.data();
      for (auto& a : groups) place(a, f, h);
      // shared: a chunk of blocks for every group, then the next chunk; else a group at a time
      const int64_t step = shared ? CHUNK_BLOCKS : std::max<int64_t>(1, blocks);
      auto phases = [&](AttnGroup* first, AttnGroup* last) {
        for (int64_t b0 = 0; b0 < blocks; b0 += step)
          for (AttnGroup* a = first; a != last; ++a) score_blocks(*a, b0, b0 + step, buf);
        for (AttnGroup* a = first; a != last; ++a) score_rest(*a, tk, ot);
        for (int64_t h = 0; h < DC; h += 4)
          for (int64_t b0 = 0; b0 < std::max<int64_t>(1, blocks); b0 += step)
            for (AttnGroup* a = first; a != last; ++a) weigh_blocks(*a, h, b0, b0 + step, buf);
        for (AttnGroup* a = first; a != last; ++a) weigh_rest(*a, tv, ot);
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

// Whether a bfloat16 cache's attention with head size d and G heads per kv head runs here.
inline bool tiles_apply(int64_t d, int64_t G) {
  return d % 32 == 0 && d <= 128 && G <= 16 && amx_ready();
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
