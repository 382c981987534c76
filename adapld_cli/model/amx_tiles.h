// What every use of the AMX tiles shares (qmm_amx.h's products, attn_amx.h's attention): the
// permission to use them and the one tile configuration both use.
#pragma once

#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

namespace {

// Linux hands out the tile registers only to a process that asks (arch_prctl); asked once.
inline bool amx_ready() {
  static const bool ok = [] {
    constexpr long ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18;
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
  }();
  return ok;
}

// Palette 1, every tile 16 rows of 64 bytes (what each user assigns to which tile: its own).
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

inline void tiles_on() {
  TileConfig cfg;
  for (int i = 0; i < 8; ++i) cfg.colsb[i] = 64, cfg.rows[i] = 16;
  _tile_loadconfig(&cfg);
}

}  // namespace
