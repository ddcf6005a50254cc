"""CUDA source shared by the channels-last forward and backward: how an (N, HW, C) tensor is cut into tiles.

A channels-last input (NHWC, NDHWC) is an (N, HW, C) array with C fastest: row (n, hw) is the C channels of
one spatial position. Group g of sample n is a strided set of HW runs of C / G contiguous channels, so no
kernel can stream one group's elements contiguously; instead every kernel here streams whole row segments
and keeps per-channel quantities in registers:

  tile     `tile_rows` rows x `cw` channels of one sample; CTA b takes tile (n, hw_tile, c_tile) with c_tile
           fastest, then hw_tile, then n, so consecutive CTAs stream consecutive memory.
  thread   thread t owns vector column t % tc of the tile (channels c0 + (t % tc) * vec .. + vec) and rows
           t / tc, t / tc + rows, ... of it: its channels never change, so the per-channel constants (shift,
           scale, affine parameters, group statistics) are loaded once per CTA, and a warp's accesses cover
           contiguous memory (whole rows when the tile spans all channels).
  columns  tc = C / vec vectors when that is at most 256 (every C of the models this package serves), else
           C split into c_tiles tiles of at most 256 vectors; rows = 256 / tc rows per CTA step.

The grid is sized from the device (resident CTAs), not from the shape, so that N = 1 fills every SM: the
spatial dimension is split into as many tiles as needed, but never below `min_rows_per_thread` rows per
thread, so that per-tile partial results stay small next to the data.
"""

CL_TILING_CUDA = r"""
#ifndef GN_INLINE_CL_TILING
#define GN_INLINE_CL_TILING
#include <algorithm>
#include <cstdint>

namespace gn_cl {

constexpr int kMaxThreads = 256;   // CTA size bound of every channels-last kernel
constexpr int kUnroll = 4;         // rows loaded before first use, per thread

// The tiling of one (N, HW, C) tensor; see the module docstring. Passed to kernels by value.
struct Tiling {
  int vec = 1;            // elements per access along C (C % vec == 0)
  int tc = 1;             // vector columns per CTA
  int rows = 1;           // rows per CTA step; blockDim = tc * rows
  int64_t cw = 1;         // channels per tile (tc * vec; the last channel tile may be narrower)
  int64_t c_tiles = 1;
  int64_t hw_tiles = 1;   // per sample
  int64_t tile_rows = 1;
  int64_t N = 0, HW = 0, C = 0;
  int threads() const { return tc * rows; }
  int64_t ctas() const { return N * hw_tiles * c_tiles; }
};

// The forward's CTA reductions (cl_stats, cl_fused, cl_block) keep every thread's per-channel partial sums in
// shared memory as planes, one per element k of the thread's vector: thread (r, col) (r < rows row slots,
// col < tc columns) stores element k at k * plane + r * tc + col, so a warp's stores are consecutive words.
// plane >= rows * tc is padded to tc modulo 32, so that the reads down the rows of every column (thread
// e = k * tc + col reading k * plane + r * tc + col) also fall in distinct banks when tc < 32. (A thread's
// partials side by side, the layout this replaced, made every store of half data a 16-way bank conflict: 0.4-1.2
// us of the few-MB rows' kernels on an H200. The backward's cl_sums keeps that layout: moved to planes, its
// kernel was no faster on any row and up to 3 us slower at (2, 640, 64, 64) fp16.)
__host__ __device__ __forceinline__ int sums_plane(int rows, int tc) {
  const int n = rows * tc;
  return n + ((tc - n) % 32 + 32) % 32;
}

// Where CTA `cta` works: sample n, rows [row0, row1), channel tile c_tile.
struct Tile {
  int64_t n, c_tile, hw_tile, row0, row1;
};

__host__ __device__ __forceinline__ Tile tile_of(const Tiling& t, int64_t cta) {
  Tile p;
  p.c_tile = cta % t.c_tiles;
  const int64_t rest = cta / t.c_tiles;
  p.hw_tile = rest % t.hw_tiles;
  p.n = rest / t.hw_tiles;
  p.row0 = p.hw_tile * t.tile_rows;
  p.row1 = p.row0 + t.tile_rows < t.HW ? p.row0 + t.tile_rows : t.HW;
  return p;
}

// Column tiling for `vec`-element accesses, rows split into about `target_ctas` tiles in all (at least one
// per (n, c_tile)), each of at least min_rows_per_thread rows per thread.
inline Tiling make_tiling(int64_t N, int64_t HW, int64_t C, int vec, int64_t target_ctas, int min_rows_per_thread) {
  Tiling t;
  t.N = N;
  t.HW = HW;
  t.C = C;
  t.vec = vec;
  const int64_t cv = C / vec;
  t.c_tiles = (cv + kMaxThreads - 1) / kMaxThreads;
  t.tc = static_cast<int>((cv + t.c_tiles - 1) / t.c_tiles);
  t.rows = std::max(1, kMaxThreads / t.tc);
  t.cw = static_cast<int64_t>(t.tc) * vec;
  const int64_t min_rows = static_cast<int64_t>(t.rows) * min_rows_per_thread;
  const int64_t max_hw_tiles = std::max<int64_t>(1, HW / min_rows);
  const int64_t per_sample = std::max<int64_t>(1, target_ctas / std::max<int64_t>(1, N * t.c_tiles));
  int64_t hw_tiles = std::min(per_sample, max_hw_tiles);
  // Whole CTA steps per tile, so every thread of a tile has the same number of rows.
  int64_t tile_rows = (HW + hw_tiles - 1) / hw_tiles;
  tile_rows = (tile_rows + t.rows - 1) / t.rows * t.rows;
  t.tile_rows = tile_rows;
  t.hw_tiles = (HW + tile_rows - 1) / tile_rows;
  return t;
}

}  // namespace gn_cl
#endif  // GN_INLINE_CL_TILING
"""
