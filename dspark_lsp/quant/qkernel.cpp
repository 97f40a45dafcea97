// Matrix products straight from GGUF quantized blocks, on the file's own codes and scales.
//
// Why a kernel of our own: the stock path dequantizes the file to fp32 once and then streams ~2.5 GB of
// weights per token; torch's int4 kernel wants bf16 activations and bf16 scales and holds 4-bit codes
// only, while most of the default target's file is Q5_0/Q8_0/Q6_K. Here the integer codes and the fp32
// scales (and offsets) of the file are used as they are — no requantization, no rounding of weights.
// Decode and verify products (few rows) take the activations as int16 per group of 32 and sum exact
// integer products (row_dots_int); prefill (many rows) and embedding rows use the fp32 weight values.
//
// Codes come in two layouts (blocks.py does the conversion once at load time):
//   kind 4: 4-bit codes, two per byte: in each group of 32, byte j holds element j (low nibble) and
//           element j + 16 (high nibble). Q4_K and Q4_1 (and Q4_0, with its zero point in `shift`).
//   kind 8: one int8 per weight, already minus the type's zero point (Q8_0, Q5_*, Q6_K). 5- and 6-bit
//           codes are widened to a byte: measured on this project's AVX2 CPU, unpacking a 5-bit plane
//           (20 bytes per 32 codes instead of 32) cost more arithmetic than the saved bytes saved time —
//           equal at 1 row, ~10% slower at 4 (the 0.5B's 97 products). (That was the row-major layout;
//           Q6_K panels can keep 6-bit codes, kind 16, "6-bit panels" below.)
//   scale fp32 [N, G] (or [N, 2G]: a scale per 16 elements, Q6_K); off fp32 [N, G] or empty. Panels of
//           types with one fp16 scale per group in the file may hold them as fp16 ("fp16 scales" below).
//   weight = scale * (code - shift) + off: what the gguf package's dequantization gives (expand_* below
//   rebuild exactly those values, compiled with -ffp-contract=off, for embeddings and prefill tiles).
//
// Batch invariance (what makes speculative verification equal one-token decoding bit for bit): every
// output element is computed by the same sequence of operations whatever the number of rows M (a row's
// int16 activations depend on that row alone); threads split output columns, never a dot product. Above
// `small_m` rows (prefill) tiles of rebuilt weights go through a regular GEMM instead, which rounds
// differently; decode and verify forwards stay below it.
#include <atomic>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "qkernel.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <cstring>
#include <vector>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define DSPARK_AVX2 1
#endif

#ifndef DSPARK_PF
#define DSPARK_PF 4096
#endif
namespace {

// Rows of x from which two panels run a pass (int8 products with AVX-512, "Two panels a pass" below;
// set_act8_pair_min, for A/B timings). 3 as measured on an Intel Xeon; 6 on AMD family 0x19 (Zen 4 is its
// only member with AVX-512), which runs 512-bit instructions as two 256-bit halves: there, in one process
// alternating, single panels took 0.87 / 0.94 / 1.01 / 1.04 / 1.06x the paired time at 3 / 4 / 5 / 6 / 8
// rows on the 1.5B, 0.81 / 0.85 / 0.90 / 0.93 / 1.00x on the 0.5B (bench/results/2026-12-07-zen4-pairing/).
// Pairing changes no bits, only the time.
int64_t default_pair_min() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &c, &d) == 0) return 3;
  const bool amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;  // "AuthenticAMD"
  if (!amd || __get_cpuid(1, &a, &b, &c, &d) == 0) return 3;
  const unsigned family = ((a >> 8) & 0xFu) + ((a >> 20) & 0xFFu);
  return family == 0x19u ? 6 : 3;
#else
  return 3;
#endif
}
std::atomic<int64_t> g_pair_min{default_pair_min()};

struct Mat {
  const uint8_t* nib;
  const int8_t* q8;
  const float* scale;
  const float* off;
  int64_t G;
  int64_t scales_per_group;
  int32_t shift;
  int layout;  // 4 or 8 (the code layouts above)
  bool panel;  // kinds 14 / 18: the same codes in panels of 8 weight rows (see "Panel layout" below)
  bool compact;  // panels with integer sub-block scales and per-256 factors ("Super-block scales" below)
  int64_t S;     // compact: super-blocks of 256 weights per row (G / 8)
  const uint16_t* scale16;  // fp16 scales per group instead of `scale` ("fp16 scales" below), or null
};

// Scalar reference of one group (also the portable path).
inline void expand_group(const Mat& m, int64_t rg, float* w) {
  int32_t q[32];
  if (m.layout == 4) {
    const uint8_t* nb = m.nib + rg * 16;
    for (int j = 0; j < 16; ++j) {
      q[j] = nb[j] & 15;
      q[j + 16] = nb[j] >> 4;
    }
  } else {
    const int8_t* c = m.q8 + rg * 32;
    for (int j = 0; j < 32; ++j) q[j] = c[j];
  }
  const float s0 = m.scale[rg * m.scales_per_group];
  const float s1 = m.scale[rg * m.scales_per_group + m.scales_per_group - 1];
  for (int j = 0; j < 32; ++j) w[j] = (j < 16 ? s0 : s1) * static_cast<float>(q[j] - m.shift);
  if (m.off != nullptr) {
    const float o = m.off[rg];
    for (int j = 0; j < 32; ++j) w[j] = w[j] + o;
  }
}

#ifdef DSPARK_AVX2
// The layout (4 or 8), offsets and two scales per group are template arguments throughout, so the
// inner loops carry no branches on them.
//
// The 32 codes of group `rg` (minus the zero point) as 16-bit integers: elements 0-15 and 16-31.
template <int L>
inline void load_codes16(const Mat& m, int64_t rg, __m256i& c0, __m256i& c1) {
  if (L == 8) {
    const int8_t* c = m.q8 + rg * 32;
    c0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c)));
    c1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c + 16)));
    return;
  }
  // byte j holds element j (low nibble) and j + 16 (high nibble): widen the 16 bytes, then split.
  const __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(m.nib + rg * 16)));
  c0 = _mm256_and_si256(b, _mm256_set1_epi16(0x0F));
  c1 = _mm256_srli_epi16(b, 4);
  if (m.shift != 0) {  // Q4_0 only (Q4_K and Q4_1 have offsets instead)
    const __m256i sh = _mm256_set1_epi16(static_cast<int16_t>(m.shift));
    c0 = _mm256_sub_epi16(c0, sh);
    c1 = _mm256_sub_epi16(c1, sh);
  }
}

// The 32 weights of a group exactly as expand_group builds them, in four 8-lane registers (elements 0-7,
// 8-15, 16-23, 24-31): for embedding rows and prefill tiles.
template <int L, bool OFF, bool TWO>
inline void expand_group_v(const Mat& m, int64_t rg, __m256& w0, __m256& w1, __m256& w2, __m256& w3) {
  __m256i c0, c1;
  load_codes16<L>(m, rg, c0, c1);
  const __m256 s0 = _mm256_broadcast_ss(m.scale + rg * (TWO ? 2 : 1));
  const __m256 s1 = TWO ? _mm256_broadcast_ss(m.scale + rg * 2 + 1) : s0;
  w0 = _mm256_mul_ps(s0, _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(c0))));
  w1 = _mm256_mul_ps(s0, _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_extracti128_si256(c0, 1))));
  w2 = _mm256_mul_ps(s1, _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(c1))));
  w3 = _mm256_mul_ps(s1, _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_extracti128_si256(c1, 1))));
  if (OFF) {
    const __m256 o = _mm256_broadcast_ss(m.off + rg);
    w0 = _mm256_add_ps(w0, o);
    w1 = _mm256_add_ps(w1, o);
    w2 = _mm256_add_ps(w2, o);
    w3 = _mm256_add_ps(w3, o);
  }
}

// Decode and verify products in integers. Each group of 32 activations is held as int16 with its own fp32
// scale (absmax / 32767, see quantize_rows), so a group's products code * x are exact integer products
// summed exactly in int32 (vpmaddwd: 16 products per instruction); only then does a group's sum become
// fp32, scaled by weight scale * activation scale. The only approximation is the activation's rounding
// to 16 bits — at most absmax/65534 per element, ~250x finer than the 8-bit activations llama.cpp uses
// (its Q8 blocks) — weights are the file's exact values.
//
// Two ways to finish a group. Plain types (one scale, no offset: Q8_0, Q5_0) convert and scale a group's
// 8 partial sums in their own lanes (row_dots_lanes). Types with offsets (Q4_K, Q4_1, Q5_1) or two
// scales per group (Q6_K) first reduce the integer sums of 8 "units" (what one weight scale covers: a
// group, or half a Q6_K group) across lanes (hadd), so that the fp32 part — convert, scale, accumulate,
// add offset * sum(x) — runs once per 8 units on whole sums instead of once per unit on partial ones
// (row_dots_int). Measured on the 2-core Zen 4 host, one thread, fastest of 40: a 9,728 x 1,024 Q4_K
// product 0.56 -> 0.31 ms at 1 row and 1.06 -> 0.78 ms at 4; an 896 x 5,120 Q6_K one 0.31 -> 0.17 ms
// at 1 row (the same at 4); for Q5_0 the reduction cost more than it saved (0.81 vs 0.72 ms at 4 rows),
// so plain types keep the per-group path, with VNNI's dpwssd where the CPU has it (0.70 ms).
//
// Codes are converted once per group and shared by up to 4 rows of x in one pass. Each x row keeps one
// accumulator and one order of operations for every R (integer sums are exact in any order), so its
// results do not depend on M or on which rows share a pass (batch invariance).

// The sum of a vector's 8 lanes, in one fixed order.
inline float hsum8(__m256 v) {
  __m128 t = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  t = _mm_add_ps(t, _mm_movehl_ps(t, t));
  t = _mm_add_ss(t, _mm_shuffle_ps(t, t, 1));
  return _mm_cvtss_f32(t);
}

// The int32 vector of one group's products for one row: the 8 lanes sum to the group's dot product.
// With VNNI the second half is accumulated into the first in the same instruction.
inline __m256i group_dot(__m256i c0, __m256i c1, const int16_t* xp) {
  const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xp));
  const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xp + 16));
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpwssd_epi32(_mm256_madd_epi16(c0, x0), c1, x1);
#else
  return _mm256_add_epi32(_mm256_madd_epi16(c0, x0), _mm256_madd_epi16(c1, x1));
#endif
}

// For each of R rows: the hadd of two units' product vectors — units (u, u + 1) of the pair starting at
// group g (two groups of one unit each, or one Q6_K group's two halves). Groups past G contribute 0.
template <int L, bool TWO, int R, bool FULL>
inline void unit_pair(const Mat& m, int64_t n, int64_t g, const int16_t* xq, int64_t K, __m256i* a) {
  const __m256i z = _mm256_setzero_si256();
  if (TWO) {
    if (!FULL && g >= m.G) {
      for (int r = 0; r < R; ++r) a[r] = z;
      return;
    }
    __m256i c0, c1;
    load_codes16<L>(m, n * m.G + g, c0, c1);
    for (int r = 0; r < R; ++r) {
      const int16_t* xp = xq + r * K + g * 32;
      const __m256i lo = _mm256_madd_epi16(c0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xp)));
      const __m256i hi = _mm256_madd_epi16(c1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xp + 16)));
      a[r] = _mm256_hadd_epi32(lo, hi);
    }
    return;
  }
  const bool has0 = FULL || g < m.G, has1 = FULL || g + 1 < m.G;
  __m256i c0 = z, c1 = z, d0 = z, d1 = z;
  if (has0) load_codes16<L>(m, n * m.G + g, c0, c1);
  if (has1) load_codes16<L>(m, n * m.G + g + 1, d0, d1);
  for (int r = 0; r < R; ++r) {
    const int16_t* xp = xq + r * K + g * 32;
    const __m256i v = has0 ? group_dot(c0, c1, xp) : z;
    const __m256i w = has1 ? group_dot(d0, d1, xp + 32) : z;
    a[r] = _mm256_hadd_epi32(v, w);
  }
}

// Lanes 0..c-1 set: the mask for a tail of c < 8 values (maskload reads nothing past them).
inline __m256i lanes_below(int64_t c) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(c)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// One block of 8 units (from group g0) for R rows, added to their accumulators; FULL: all 8 exist.
template <int L, bool OFF, bool TWO, int R, bool FULL>
inline void block8(const Mat& m, int64_t n, int64_t g0, const int16_t* xq, const float* xsu, int64_t GU8,
                   int64_t K, const float* xs1, int64_t G8, __m256* acc) {
  constexpr int U = TWO ? 2 : 1;      // units per group
  constexpr int GP = TWO ? 1 : 2;     // groups per pair of units
  const int64_t GU = m.G * U;
  const float* ws_row = m.scale + n * GU;
  // Prefetch the codes a few rows ahead: the stream then overlaps the arithmetic.
  const int64_t rg = n * m.G + g0;
  const char* cp = L == 8 ? reinterpret_cast<const char*>(m.q8 + rg * 32) : reinterpret_cast<const char*>(m.nib + rg * 16);
  _mm_prefetch(cp + DSPARK_PF, _MM_HINT_T0);
  _mm_prefetch(cp + DSPARK_PF + 64, _MM_HINT_T0);
  if (L == 8) {
    _mm_prefetch(cp + DSPARK_PF + 128, _MM_HINT_T0);
    _mm_prefetch(cp + DSPARK_PF + 192, _MM_HINT_T0);
  }
  __m256i a0[R], a1[R], ab[R];
  unit_pair<L, TWO, R, FULL>(m, n, g0, xq, K, a0);
  unit_pair<L, TWO, R, FULL>(m, n, g0 + GP, xq, K, a1);
  for (int r = 0; r < R; ++r) ab[r] = _mm256_hadd_epi32(a0[r], a1[r]);
  unit_pair<L, TWO, R, FULL>(m, n, g0 + 2 * GP, xq, K, a0);
  unit_pair<L, TWO, R, FULL>(m, n, g0 + 3 * GP, xq, K, a1);
  const int64_t u0 = g0 * U, left = GU - u0;  // units of this block that exist
  const __m256 ws = FULL || left >= 8 ? _mm256_loadu_ps(ws_row + u0) : _mm256_maskload_ps(ws_row + u0, lanes_below(left));
  __m256 offs = _mm256_setzero_ps();
  if (OFF) offs = FULL || left >= 8 ? _mm256_loadu_ps(m.off + rg) : _mm256_maskload_ps(m.off + rg, lanes_below(left));
  for (int r = 0; r < R; ++r) {
    const __m256i cd = _mm256_hadd_epi32(a0[r], a1[r]);
    // ab: units 0-3's sums in two 128-bit halves, cd: units 4-7's; one add gives the 8 whole sums.
    const __m256i t = _mm256_add_epi32(_mm256_permute2x128_si256(ab[r], cd, 0x20),
                                       _mm256_permute2x128_si256(ab[r], cd, 0x31));
    const __m256 sc = _mm256_mul_ps(ws, _mm256_loadu_ps(xsu + r * GU8 + u0));
    acc[r] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(t), acc[r]);
    if (OFF) acc[r] = _mm256_fmadd_ps(offs, _mm256_loadu_ps(xs1 + r * G8 + g0), acc[r]);
  }
}

// Types with one scale per group and no offsets (Q8_0, Q5_0: most of the default target's weights): a
// group's 8 partial sums are converted and scaled in its own lanes, one group at a time — for them the
// cross-lane reduction above costs more than it saves (measured on the Zen 4 host: 0.81 vs 0.72 ms for
// a 9,728 x 896 Q5_0 product at 4 rows, one thread).
template <int L, int R>
inline void row_dots_lanes(const Mat& m, int64_t n, const int16_t* xq, const float* xsu, int64_t GU8, int64_t K,
                           float* out, int64_t N) {
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  const int64_t base = n * m.G;
  for (int64_t g = 0; g < m.G; ++g) {
    const int64_t rg = base + g;
    const char* cp = L == 8 ? reinterpret_cast<const char*>(m.q8 + rg * 32) : reinterpret_cast<const char*>(m.nib + rg * 16);
    _mm_prefetch(cp + DSPARK_PF, _MM_HINT_T0);
    if ((g & 7) == 0) _mm_prefetch(reinterpret_cast<const char*>(m.scale + rg) + DSPARK_PF / 4, _MM_HINT_T0);
    __m256i c0, c1;
    load_codes16<L>(m, rg, c0, c1);
    const __m256 s0 = _mm256_broadcast_ss(m.scale + rg);
    for (int r = 0; r < R; ++r) {
      const __m256i p = group_dot(c0, c1, xq + r * K + g * 32);
      const __m256 xs = _mm256_broadcast_ss(xsu + r * GU8 + g);
      acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(s0, xs), _mm256_cvtepi32_ps(p), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r * N + n] = hsum8(acc[r]);
}

// xsu: per row, the activation scale of every unit, zero-padded to GU8 (a multiple of 8) entries.
// xs1: per row, every group's fp32 sum of x (affine types), zero-padded to G8 entries.
template <int L, bool OFF, bool TWO, int R>
inline void row_dots_int(const Mat& m, int64_t n, const int16_t* xq, const float* xsu, int64_t GU8, int64_t K,
                         const float* xs1, int64_t G8, float* out, int64_t N) {
  constexpr int GB = TWO ? 4 : 8;  // groups per block of 8 units
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  int64_t g0 = 0;
  for (; g0 + GB <= m.G; g0 += GB) block8<L, OFF, TWO, R, true>(m, n, g0, xq, xsu, GU8, K, xs1, G8, acc);
  if (g0 < m.G) block8<L, OFF, TWO, R, false>(m, n, g0, xq, xsu, GU8, K, xs1, G8, acc);
  for (int r = 0; r < R; ++r) out[r * N + n] = hsum8(acc[r]);
}

// Rows of x as int16 per group of 32 with an fp32 scale each: q = round(x * 32767 / absmax), so
// x ~= q * absmax / 32767. A row's values depend on that row alone (batch invariance).
// The scales go where row_dots_* read them: row r's unit u at sc[r * stride + u], each group's scale
// written U times (once per unit: Q6_K has two per group); the caller zero-pads the rest of a row.
void quantize_rows(const float* xp, int64_t M, int64_t K, int16_t* q, float* sc, int64_t stride, int64_t U) {
  const int64_t G = K / 32;
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t r = 0; r < M; ++r)
    for (int64_t g = 0; g < G; ++g) {
      const float* x = xp + r * K + g * 32;
      __m256 v[4];
      __m256 mx = _mm256_setzero_ps();
      for (int i = 0; i < 4; ++i) {
        v[i] = _mm256_loadu_ps(x + 8 * i);
        mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, v[i]));
      }
      __m128 t = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
      t = _mm_max_ps(t, _mm_movehl_ps(t, t));
      t = _mm_max_ss(t, _mm_shuffle_ps(t, t, 1));
      const float amax = _mm_cvtss_f32(t);
      for (int64_t u = 0; u < U; ++u) sc[r * stride + g * U + u] = amax / 32767.0f;
      const __m256 inv = _mm256_set1_ps(amax > 0.0f ? 32767.0f / amax : 0.0f);
      int16_t* d = q + r * K + g * 32;
      for (int i = 0; i < 4; i += 2) {
        // round to nearest (even); packs saturates to int16 and interleaves 128-bit lanes, permute undoes it
        const __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], inv));
        const __m256i b = _mm256_cvtps_epi32(_mm256_mul_ps(v[i + 1], inv));
        const __m256i p = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xD8);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + 8 * i), p);
      }
    }
}

// Weight rows in blocks of NBLOCK, the rows of x in passes of 4 inside a block: a pass's 4 rows of x stay
// in L1 while the block's codes (<= 64 x 4864 bytes) stay in L2, so a long prompt does not stream x from
// memory once per weight row. The order changes nothing in any single output's arithmetic.
constexpr int64_t NBLOCK = 64;

// One pass of R rows of x over weight row n: the per-group path for plain types, the 8-unit blocks for
// offsets or two scales per group.
template <int L, bool OFF, bool TWO, int R>
inline void row_dots(const Mat& m, int64_t n, const int16_t* xq, const float* xsu, int64_t GU8, int64_t K,
                     const float* xs1, int64_t G8, float* out, int64_t N) {
  if (OFF || TWO) row_dots_int<L, OFF, TWO, R>(m, n, xq, xsu, GU8, K, xs1, G8, out, N);
  else row_dots_lanes<L, R>(m, n, xq, xsu, GU8, K, out, N);
}

template <int L, bool OFF, bool TWO>
void small_product_t(const Mat& m, const int16_t* xq, const float* xsu, int64_t GU8, int64_t M, int64_t K,
                     int64_t n0, int64_t n1, int64_t N, float* op, const float* xs1, int64_t G8) {
  for (int64_t b0 = n0; b0 < n1; b0 += NBLOCK) {
    const int64_t b1 = std::min(n1, b0 + NBLOCK);
    int64_t r = 0;
    for (; r + 4 <= M; r += 4)
      for (int64_t n = b0; n < b1; ++n)
        row_dots<L, OFF, TWO, 4>(m, n, xq + r * K, xsu + r * GU8, GU8, K, OFF ? xs1 + r * G8 : nullptr, G8,
                                 op + r * N, N);
    const int16_t* xr = xq + r * K;
    const float* sr = xsu + r * GU8;
    const float* xs = OFF ? xs1 + r * G8 : nullptr;
    float* orow = op + r * N;
    switch (M - r) {
      case 3: for (int64_t n = b0; n < b1; ++n) row_dots<L, OFF, TWO, 3>(m, n, xr, sr, GU8, K, xs, G8, orow, N); break;
      case 2: for (int64_t n = b0; n < b1; ++n) row_dots<L, OFF, TWO, 2>(m, n, xr, sr, GU8, K, xs, G8, orow, N); break;
      case 1: for (int64_t n = b0; n < b1; ++n) row_dots<L, OFF, TWO, 1>(m, n, xr, sr, GU8, K, xs, G8, orow, N); break;
      default: break;
    }
  }
}

template <int L, bool OFF, bool TWO>
void expand_row_t(const Mat& m, int64_t row, float* w) {
  for (int64_t g = 0; g < m.G; ++g) {
    __m256 w0, w1, w2, w3;
    expand_group_v<L, OFF, TWO>(m, row * m.G + g, w0, w1, w2, w3);
    float* d = w + g * 32;
    _mm256_storeu_ps(d, w0);
    _mm256_storeu_ps(d + 8, w1);
    _mm256_storeu_ps(d + 16, w2);
    _mm256_storeu_ps(d + 24, w3);
  }
}

// Dispatch once per call on the layout (2 layouts x offsets x scales per group -> 8 instantiations).
#define DSPARK_DISPATCH_L(fn, L, m, ...)                                                  \
  do {                                                                                    \
    const bool off_ = (m).off != nullptr, two_ = (m).scales_per_group == 2;               \
    if (off_) { if (two_) fn<L, true, true>(__VA_ARGS__); else fn<L, true, false>(__VA_ARGS__); } \
    else { if (two_) fn<L, false, true>(__VA_ARGS__); else fn<L, false, false>(__VA_ARGS__); }    \
  } while (0)
#define DSPARK_DISPATCH(fn, m, ...)                                                       \
  do {                                                                                    \
    if ((m).layout == 4) DSPARK_DISPATCH_L(fn, 4, m, __VA_ARGS__);                         \
    else DSPARK_DISPATCH_L(fn, 8, m, __VA_ARGS__);                                         \
  } while (0)

void small_product(const Mat& m, const int16_t* xq, const float* xsu, int64_t GU8, int64_t M, int64_t K,
                   int64_t n0, int64_t n1, int64_t N, float* op, const float* xs1, int64_t G8) {
  DSPARK_DISPATCH(small_product_t, m, m, xq, xsu, GU8, M, K, n0, n1, N, op, xs1, G8);
}

inline int64_t round8(int64_t v) { return (v + 7) / 8 * 8; }

// Per row and group: the sum of the group's 32 fp32 values of x, which the offset term of affine types
// multiplies — in one fixed order ((x[0:8] + x[8:16]) + (x[16:24] + x[24:32]), then its 8 lanes), so
// the same for every M; zero-padded to a multiple of 8 groups.
at::Tensor group_sums(const float* xp, int64_t M, int64_t K) {
  const int64_t G = K / 32, G8 = round8(G);
  at::Tensor xs = at::zeros({M, G8}, at::kFloat);
  float* d = xs.data_ptr<float>();
  for (int64_t r = 0; r < M; ++r)
    for (int64_t g = 0; g < G; ++g) {
      const float* x = xp + r * K + g * 32;
      __m256 t = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(x), _mm256_loadu_ps(x + 8)),
                               _mm256_add_ps(_mm256_loadu_ps(x + 16), _mm256_loadu_ps(x + 24)));
      __m128 h = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
      h = _mm_add_ps(h, _mm_movehl_ps(h, h));
      h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
      d[r * G8 + g] = _mm_cvtss_f32(h);
    }
  return xs;
}


// ---------------------------------------------------------------------------------------------------
// Panel layout (kinds 14 and 18; blocks.interleave builds it at load time for matrices whose row count is
// a multiple of 8). The same codes and scales as kinds 4 / 8, stored so that one 256-bit register holds
// the same two inputs of 8 weight rows: lane i = row i of the panel. A decode/verify product then sums
// each weight row's group in its own lane (vpdpwssd with the x pair broadcast) and needs one
// int -> fp32 conversion and one fma per group for 8 weight rows, where the row-at-a-time path above
// spends them per group and per weight row, plus a horizontal sum per output. Codes are widened once per
// panel and group and shared by up to 8 rows of x.
//   kind 18: panel P, group g: 256 bytes; pair p (inputs 2p, 2p + 1) at byte 16p, row i's two codes at
//            bytes 16p + 2i and 16p + 2i + 1.
//   kind 14: panel P, group g: 128 bytes; quad q (inputs 4q .. 4q + 3) at byte 16q; byte 16q + 2i + e
//            holds input 4q + e of row i (low nibble) and input 4q + 2 + e (high nibble).
//   scales [P][G * U][8] (U = 1, or 2 for Q6_K's two scales per group), offsets [P][G][8].
// Batch invariance holds as before: a row of x goes through the same integer sums (exact, so their
// split over accumulators does not matter) and the same fp32 operations in the same order for any M.

//
// Super-block scales (compact panels, K-quants only: Q4_K, Q5_K, Q6_K). The fp32 scale (and offset) per
// group above cost 64 bits per 32 weights of a Q4_K matrix (6 bits a weight in all, against the file's
// 4.5). The file's own form is cheaper: integer sub-block scales (6-bit scale and min codes per 32 for
// Q4_K / Q5_K, int8 scales per 16 for Q6_K) times fp16 factors per super-block of 256 (d, and dmin). The
// reference dequantization forms the fp32 products d * sc and dmin * m per group; the compact panels
// keep the integer codes (one byte each) and the factors (widened to fp32), and form the same products
// in the kernel, one multiply per group for 8 rows: the same fp32 values bit for bit, so the same
// results as the fp32-scale panels (4.75 bits a Q4_K weight, 8.625 a Q6_K one).
//   codes: per panel and group, the code bytes above (128 or 256) followed by 16 bytes: the 8 rows'
//          scale codes then their min codes (types with offsets), or the 8 rows' scales of the group's
//          first half then of its second (Q6_K).
//   scale: d as fp32 [P][S][8] (S = G / 8 super-blocks per row); off: dmin as fp32 [P][S][8] or empty.
// The kernel tells the form by the scale tensor's width: G / 8 per row (compact) or G * U (fp32 scales).
//
// 6-bit panels (kind 16, layout 6: compact Q6_K only). Kind 18 widens Q6_K's 6-bit codes to a byte; here
// they keep 6 bits: per panel and group, 128 bytes of low nibbles exactly as kind 14 lays them out (quad
// q at byte 16q, byte 16q + 2i + e: inputs 4q + e and 4q + 2 + e of row i), then 64 bytes of high bits
// (quads 2j and 2j + 1 at byte 128 + 16j; byte 2i + e: bits 0-1 and 2-3 the high bits of inputs
// 8j + 4 + e and 8j + 6 + e, bits 4-5 and 6-7 those of 8j + e and 8j + 2 + e), then the 16 bytes of
// integer scales: 208 bytes per 256 weights instead of 272. Codes are unsigned, 0..63 (shift 32). A
// 16-byte load of a high plane, widened to 16 bits, serves two quads: the even quad's bits sit at 4-5 and
// 6-7 of each lane, the odd quad's at 0-1 and 2-3 (shifted up by 4), so building a code is an and, an
// or and a subtract on top of kind 14's work. The integer sums are kind 18's exactly, hence its results.

// fp16 scales (panels with one scale per group and no offsets, kinds 14 / 18: Q8_0, Q5_0, Q4_0). Their
// file stores each group's scale as fp16; widened to fp32 it is the same value, so keeping the fp16 bits
// (16 bits per 32 weights instead of 32) and widening them in the kernel, one vcvtph2ps per group for 8
// rows, changes no product. Selected by the scale tensor's dtype (float16).
#ifdef __F16C__
#define DSPARK_F16 1
#endif
// The 8 panel rows' scales at index i (of the scale array) as fp32.
inline __m256 panel_scales(const Mat& m, int64_t i) {
#ifdef DSPARK_F16
  if (m.scale16 != nullptr) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(m.scale16 + i)));
#endif
  return _mm256_loadu_ps(m.scale + i);
}
inline float scale_at(const Mat& m, int64_t i) {
#ifdef DSPARK_F16
  if (m.scale16 != nullptr) return _cvtsh_ss(m.scale16[i]);
#endif
  return m.scale[i];
}

// 8 rows' fp32 products factor * code: lanes i = f[i] * c[i] (c: 8 signed bytes).
inline __m256 compact_scales(const float* f, const int8_t* c) {
  const __m256i ci = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c)));
  return _mm256_mul_ps(_mm256_loadu_ps(f), _mm256_cvtepi32_ps(ci));
}

// The panel functions also take CS (compact scales); a compact matrix has offsets xor two scales per group.
#define DSPARK_DISPATCH_PANEL_L(fn, L, m, ...)                                            \
  do {                                                                                    \
    const bool off_ = (m).off != nullptr, two_ = (m).scales_per_group == 2;               \
    if ((m).compact) { if (off_) fn<L, true, false, true>(__VA_ARGS__); else fn<L, false, true, true>(__VA_ARGS__); } \
    else if (off_) { if (two_) fn<L, true, true, false>(__VA_ARGS__); else fn<L, true, false, false>(__VA_ARGS__); } \
    else { if (two_) fn<L, false, true, false>(__VA_ARGS__); else fn<L, false, false, false>(__VA_ARGS__); }    \
  } while (0)
// Layout 6 (kind 16) is always compact Q6_K: no offsets, two scales per group.
#define DSPARK_DISPATCH_PANEL(fn, m, ...)                                                 \
  do {                                                                                    \
    if ((m).layout == 6) fn<6, false, true, true>(__VA_ARGS__);                            \
    else if ((m).layout == 4) DSPARK_DISPATCH_PANEL_L(fn, 4, m, __VA_ARGS__);              \
    else DSPARK_DISPATCH_PANEL_L(fn, 8, m, __VA_ARGS__);                                   \
  } while (0)

inline __m256i bcast_pair(const int16_t* xp) {
  int32_t v;
  std::memcpy(&v, xp, sizeof v);
  return _mm256_set1_epi32(v);
}

inline __m256i dot_acc(__m256i acc, __m256i c, __m256i x) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpwssd_epi32(acc, c, x);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(c, x));
#endif
}

// A unit's (group's, or Q6_K half-group's) exact integer dots, C chains a row, as fp32: times the panel's
// weight scales ws and the row's activation scale (xsu: the unit's, rows GU8 apart), added to acc. Shared by
// the int16 and int8 products: the fp32 steps, and so the bits, do not depend on the integer path.
template <int R, int C>
inline void fold_unit(__m256i (&s)[R][C], __m256 ws, const float* xsu, int64_t GU8, __m256 (&acc)[R]) {
  for (int r = 0; r < R; ++r) {
    __m256i t = s[r][0];
    for (int c = 1; c < C; ++c) t = _mm256_add_epi32(t, s[r][c]);
    const __m256 sc = _mm256_mul_ps(ws, _mm256_broadcast_ss(xsu + r * GU8));
    acc[r] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(t), acc[r]);
  }
}

// The affine types' offset term of a group: offset x the group's activation sum (xs1: the group's, rows G8
// apart). Compact K-quants rebuild dmin * m, the reference's product; its negation is the offset, so
// fnmadd adds the same term.
template <bool CS, int R>
inline void add_offsets(const Mat& m, int64_t sb, const int8_t* ax, int64_t pg, const float* xs1, int64_t G8,
                        __m256 (&acc)[R]) {
  if (CS) {
    const __m256 dm = compact_scales(m.off + sb, ax + 8);
    for (int r = 0; r < R; ++r) acc[r] = _mm256_fnmadd_ps(dm, _mm256_broadcast_ss(xs1 + r * G8), acc[r]);
  } else {
    const __m256 offs = _mm256_loadu_ps(m.off + pg * 8);
    for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(offs, _mm256_broadcast_ss(xs1 + r * G8), acc[r]);
  }
}

// R rows of x against panel P; C independent integer accumulators per row (few rows: enough chains in
// flight to hide the multiply's latency).
template <int L, bool OFF, bool TWO, bool CS, int R, int C>
inline void panel_dots(const Mat& m, int64_t P, const int16_t* xq, const float* xsu, int64_t GU8, int64_t K,
                       const float* xs1, int64_t G8, float* out, int64_t N) {
  constexpr int U = TWO ? 2 : 1;
  constexpr int PP = 16 / U;  // pairs of inputs per unit
  constexpr int64_t GC = L == 8 ? 256 : L == 6 ? 192 : 128;  // code bytes per panel and group
  constexpr int64_t GB = GC + (CS ? 16 : 0);  // compact: the group's 16 bytes of integer scales follow
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  const char* base = L == 8 ? reinterpret_cast<const char*>(m.q8) : reinterpret_cast<const char*>(m.nib);
  const __m256i low4 = _mm256_set1_epi16(0x0F);
  const __m256i two_bits = _mm256_set1_epi16(0x30);
  const __m256i sh = _mm256_set1_epi16(static_cast<int16_t>(m.shift));
  for (int64_t g = 0; g < m.G; ++g) {
    const int64_t pg = P * m.G + g;
    const char* cp = base + pg * GB;
    // one prefetch per 64 bytes of a group (a compact group's 144 or 272 bytes need one more)
#pragma GCC unroll 8
    for (int64_t o = 0; o < GB; o += 64) _mm_prefetch(cp + DSPARK_PF + o, _MM_HINT_T0);
    // compact: this super-block's factors for the panel's 8 rows, and the group's integer scales
    const int8_t* ax = reinterpret_cast<const int8_t*>(cp + GC);
    const int64_t sb = CS ? (P * m.S + g / 8) * 8 : 0;
    for (int u = 0; u < U; ++u) {
      __m256i s[R][C];
      for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) s[r][c] = _mm256_setzero_si256();
#pragma GCC unroll 16
      for (int p = u * PP; p < (u + 1) * PP; p += (L == 8 ? 1 : L == 6 ? 4 : 2)) {
        if (L == 6) {
          // quads p / 2 and p / 2 + 1 (pairs p .. p + 3) and their shared high plane
          const __m256i ba = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(cp + 8 * p)));
          const __m256i bb = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(cp + 8 * p + 16)));
          const __m256i ha = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(cp + 128 + 4 * p)));
          const __m256i hb = _mm256_slli_epi16(ha, 4);
          const __m256i c[4] = {
              _mm256_sub_epi16(_mm256_or_si256(_mm256_and_si256(ba, low4), _mm256_and_si256(ha, two_bits)), sh),
              _mm256_sub_epi16(_mm256_or_si256(_mm256_srli_epi16(ba, 4),
                                               _mm256_and_si256(_mm256_srli_epi16(ha, 2), two_bits)), sh),
              _mm256_sub_epi16(_mm256_or_si256(_mm256_and_si256(bb, low4), _mm256_and_si256(hb, two_bits)), sh),
              _mm256_sub_epi16(_mm256_or_si256(_mm256_srli_epi16(bb, 4),
                                               _mm256_and_si256(_mm256_srli_epi16(hb, 2), two_bits)), sh)};
          for (int r = 0; r < R; ++r) {
            const int16_t* xp = xq + r * K + g * 32 + 2 * p;
            for (int t = 0; t < 4; ++t) s[r][(p + t) % C] = dot_acc(s[r][(p + t) % C], c[t], bcast_pair(xp + 2 * t));
          }
        } else if (L == 8) {
          const __m256i c = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(cp + 16 * p)));
          for (int r = 0; r < R; ++r)
            s[r][p % C] = dot_acc(s[r][p % C], c, bcast_pair(xq + r * K + g * 32 + 2 * p));
        } else {
          const __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(cp + 8 * p)));
          __m256i c0 = _mm256_and_si256(b, low4), c1 = _mm256_srli_epi16(b, 4);
          if (m.shift != 0) {
            c0 = _mm256_sub_epi16(c0, sh);
            c1 = _mm256_sub_epi16(c1, sh);
          }
          // quad q = p / 2: low nibbles are inputs 4q, 4q + 1 (pair p), high ones 4q + 2, 4q + 3 (pair p + 1)
          for (int r = 0; r < R; ++r) {
            const int16_t* xp = xq + r * K + g * 32 + 2 * p;
            s[r][p % C] = dot_acc(s[r][p % C], c0, bcast_pair(xp));
            s[r][(p + 1) % C] = dot_acc(s[r][(p + 1) % C], c1, bcast_pair(xp + 2));
          }
        }
      }
      const __m256 ws = CS ? compact_scales(m.scale + sb, ax + 8 * u) : panel_scales(m, (pg * U + u) * 8);
      fold_unit<R, C>(s, ws, xsu + g * U + u, GU8, acc);
    }
    if (OFF) add_offsets<CS, R>(m, sb, ax, pg, xs1 + g, G8, acc);
  }
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(out + r * N + P * 8, acc[r]);
}

// Accumulator chains per row: ~8 multiply chains in flight in all. Byte codes with two scales per group
// (Q6_K) from 3 rows on keep one chain a row: that loop holds more registers, and with two chains it ran
// the 1.5B's Q6_K products ~1.3x slower at 4 rows (three chains: ~1.7x), while one chain made the
// one-scale byte types (Q5_0, Q8_0) slower (bench/results/2026-12-04-rows/). Integer sums are exact in
// any order, so the chain count changes no result.
template <int L, bool TWO, int R>
constexpr int chains() { return R <= 2 ? 4 : (L == 8 && TWO) ? 1 : R <= 6 ? 2 : 1; }

template <int L, bool OFF, bool TWO, bool CS, int R>
inline void panel_pass(const Mat& m, int64_t P, const int16_t* xq, const float* xsu, int64_t GU8, int64_t K,
                       const float* xs1, int64_t G8, float* out, int64_t N) {
  panel_dots<L, OFF, TWO, CS, R, chains<L, TWO, R>()>(m, P, xq, xsu, GU8, K, xs1, G8, out, N);
}

template <int L, bool OFF, bool TWO, bool CS>
void panel_product_t(const Mat& m, const int16_t* xq, const float* xsu, int64_t GU8, int64_t M, int64_t K,
                     int64_t p0, int64_t p1, int64_t N, float* op, const float* xs1, int64_t G8) {
  for (int64_t P = p0; P < p1; ++P)
    for (int64_t r = 0; r < M; r += 8) {
      const int16_t* xr = xq + r * K;
      const float* sr = xsu + r * GU8;
      const float* xs = OFF ? xs1 + r * G8 : nullptr;
      float* orow = op + r * N;
      switch (std::min<int64_t>(8, M - r)) {
        case 8: panel_pass<L, OFF, TWO, CS, 8>(m, P, xr, sr, GU8, K, xs, G8, orow, N); break;
        case 7: panel_pass<L, OFF, TWO, CS, 7>(m, P, xr, sr, GU8, K, xs, G8, orow, N); break;
        case 6: panel_pass<L, OFF, TWO, CS, 6>(m, P, xr, sr, GU8, K, xs, G8, orow, N); break;
        case 5: panel_pass<L, OFF, TWO, CS, 5>(m, P, xr, sr, GU8, K, xs, G8, orow, N); break;
        case 4: panel_pass<L, OFF, TWO, CS, 4>(m, P, xr, sr, GU8, K, xs, G8, orow, N); break;
        case 3: panel_pass<L, OFF, TWO, CS, 3>(m, P, xr, sr, GU8, K, xs, G8, orow, N); break;
        case 2: panel_pass<L, OFF, TWO, CS, 2>(m, P, xr, sr, GU8, K, xs, G8, orow, N); break;
        default: panel_pass<L, OFF, TWO, CS, 1>(m, P, xr, sr, GU8, K, xs, G8, orow, N); break;
      }
    }
}

void panel_product(const Mat& m, const int16_t* xq, const float* xsu, int64_t GU8, int64_t M, int64_t K,
                   int64_t p0, int64_t p1, int64_t N, float* op, const float* xs1, int64_t G8) {
  DSPARK_DISPATCH_PANEL(panel_product_t, m, m, xq, xsu, GU8, M, K, p0, p1, N, op, xs1, G8);
}

// ---------------------------------------------------------------------------------------------------
// int8 activations (DSPARK_ACT8=1; set_act8). The int16 products above run near the speed of vpdpwssd,
// 16 multiply-adds an instruction; at 4 or more rows of x a verify forward of the 1.5B is bound by that
// arithmetic, not by memory. llama.cpp rounds activations to int8 instead (its Q8 blocks), which lets
// VNNI's vpdpbusd (u8 x s8, 4 products summed into each int32 lane) do 32 multiply-adds an instruction.
// Here: each group of 32 activations becomes int8 steps of absmax / 127 (round to nearest even), from
// that row's values alone, so batch invariance holds as before. Weights stay the file's exact values.
//
// vpdpbusd wants one operand unsigned. The weight codes are made unsigned: 4-bit codes already are
// (0..15; Q4_0's zero point of 8 stays a shift), and byte codes (stored as code - zero point, signed) get
// 128 added (an xor of the sign bit). The dot is then sum(u * x) - bias * sum(x) with bias 128 (byte
// codes) or the shift (4-bit codes), all exact in int32 (|sum| < 32 * 255 * 127); the bias term, one
// integer per row and unit, is computed with the activations and starts each unit's accumulator.
//
// The panels' bytes are laid out for int16 pairs (lane i: two inputs of row i), vpdpbusd wants four
// inputs of one row in a lane. One VBMI byte permute per 32 bytes of codes moves them there in the
// register (layout unchanged, so one model can run either path): kind 18, two pairs (32 bytes) ->
// lane i = row i's inputs 4j .. 4j + 3; kind 14, a quad's low and high nibbles (vpermt2b of the two
// masked copies) -> lane i = row i's inputs 4q .. 4q + 3. Each activation quad is then one broadcast
// dword. Needs AVX512-VNNI, -VL and -VBMI (Zen 4, Ice Lake and later). Row-major matrices keep the int16
// path.
//
// AVX2 without VNNI (Zen 2 / 3, Intel before Ice Lake: most laptops): the same int8 activations, the same
// exact integer dots and the same fp32 steps, so the same bits as the VNNI path (tests compare the two
// builds). There the int16 products cost two vpmaddwd per 32 products and bind a 4-row verify of the
// 1.5B; vpmaddubsw (u8 x s8, pairs summed into int16) does 32 per instruction. Its int16 sums saturate,
// so it is used where they provably cannot: 4-bit panels (codes 0..15: a pair is at most 2 * 15 * 127,
// and the 8 quads of a group sum to at most 30480 in an int16 lane) and 6-bit panels (codes 0..63, widened
// to int32 after each pair of quads) - see panel_dots8_avx2. Byte panels
// (codes up to 255 once unsigned) run the int16 products on the int8 activations widened to 16 bits:
// the same integer sums, at the int16 path's speed.
#if defined(DSPARK_AVX2)
#define DSPARK_ACT8 1
#if defined(__AVX512VNNI__) && defined(__AVX512VL__) && defined(__AVX512VBMI__)
#define DSPARK_ACT8_VNNI 1
constexpr bool kAct8Vnni = true;
#else
constexpr bool kAct8Vnni = false;
#endif

// Without VNNI, byte codes made unsigned for vpmaddubsw: Q6_K's (two scales per group) are -32..31 as
// stored, +32 gives 0..63; the affine types' (offsets: Q5_1, Q5_K) are 0..31 already. Q5_0 and Q8_0 (plain,
// up to +-128) take the int16 products instead (act8_bytes_via_int16).
constexpr int32_t byte_bias(bool two_scales) { return two_scales ? 32 : 0; }

// Rows of x as int8 per group of 32 with an fp32 scale each: q = round(x * 127 / absmax). Scales go
// where the products read them (row r's unit u at sc[r * stride + u], as quantize_rows writes them);
// corr[r * GU + u] = -bias * (sum of the unit's q), the unsigned codes' correction.
// swap: store each 8 elements as 0 1 4 5 2 3 6 7 (for the AVX2 byte panels, panel_dots8_avx2); the unit
// sums and scales do not depend on the order.
void quantize_rows8(const float* xp, int64_t M, int64_t K, int8_t* q, float* sc, int64_t stride, int64_t U,
                    int32_t* corr, int32_t bias, bool swap = false) {
  const int64_t G = K / 32, GU = G * U;
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t r = 0; r < M; ++r)
    for (int64_t g = 0; g < G; ++g) {
      const float* x = xp + r * K + g * 32;
      __m256 v[4];
      __m256 mx = _mm256_setzero_ps();
      for (int i = 0; i < 4; ++i) {
        v[i] = _mm256_loadu_ps(x + 8 * i);
        mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, v[i]));
      }
      __m128 t = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
      t = _mm_max_ps(t, _mm_movehl_ps(t, t));
      t = _mm_max_ss(t, _mm_shuffle_ps(t, t, 1));
      const float amax = _mm_cvtss_f32(t);
      for (int64_t u = 0; u < U; ++u) sc[r * stride + g * U + u] = amax / 127.0f;
      const __m256 inv = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
      __m256i i32[4];
      for (int i = 0; i < 4; ++i) i32[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], inv));  // nearest even
      // packs interleave the 128-bit lanes; the dword permute puts the 32 bytes back in element order
      // (|q| <= 127: no saturation)
      const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(i32[0], i32[1]), _mm256_packs_epi32(i32[2], i32[3]));
      __m256i o = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      if (swap)
        o = _mm256_shuffle_epi8(o, _mm256_setr_epi8(0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15,
                                                    0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + r * K + g * 32), o);
      // unit sums: elements 0-15 are i32[0..1], 16-31 are i32[2..3]
      const __m256i h0 = _mm256_add_epi32(i32[0], i32[1]), h1 = _mm256_add_epi32(i32[2], i32[3]);
      auto hsum = [](__m256i a) {
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
        return _mm_cvtsi128_si32(s);
      };
      const int32_t s0 = hsum(h0), s1 = hsum(h1);
      if (U == 2) {
        corr[r * GU + g * 2] = -bias * s0;
        corr[r * GU + g * 2 + 1] = -bias * s1;
      } else {
        corr[r * GU + g] = -bias * (s0 + s1);
      }
    }
}

inline __m256i bcast_quad(const int8_t* xp) {
  int32_t v;
  std::memcpy(&v, xp, sizeof v);
  return _mm256_set1_epi32(v);
}

// 6-bit panels: the 16 high-plane bytes of quads q and q + 1 (q even) placed so that one and with 0x30
// gives each low-nibble byte its code's bits 4-5, and a 16-bit shift right by 2 then the same and gives
// each high-nibble byte its own: bytes 0-15 (quad q) hold the plane as stored (its bits 4-5 and 6-7 are
// quad q's), bytes 16-31 (quad q + 1) the plane shifted up by 4 (its bits 0-1 and 2-3 moved there). The
// shifts move bits across a 16-bit lane's bytes only into bits the and clears. lo / hi: the quads' low and
// high nibble bytes (the 4-bit plane masked), which get their codes' bits 4-5 here; every path that reads
// 6-bit panels (panel_dots8, panel_dots8_avx2) builds its codes so.
inline void add_high_plane(const char* hp, __m256i& lo, __m256i& hi) {
  const __m128i h128 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(hp));
  const __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(h128), _mm_slli_epi16(h128, 4), 1);
  const __m256i two_bits = _mm256_set1_epi8(0x30);
  lo = _mm256_or_si256(lo, _mm256_and_si256(h, two_bits));
  hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_srli_epi16(h, 2), two_bits));
}

#ifdef DSPARK_ACT8_VNNI
// Byte permutes that put row i's four inputs in lane i (see above).
//   kind 18: bytes 0-15 hold pair 2j (row i at 2i, 2i + 1), bytes 16-31 pair 2j + 1.
//   kind 14: lo / hi = a quad's low / high nibbles (bytes 2i, 2i + 1: row i's inputs 4q, 4q + 1 in lo
//            and 4q + 2, 4q + 3 in hi); indices >= 32 pick from hi. The second quad of a 32-byte load
//            (bytes 16-31) takes the same indices + 16.
inline __m256i perm_pairs() {
  alignas(32) int8_t idx[32];
  for (int i = 0; i < 8; ++i) {
    idx[4 * i] = static_cast<int8_t>(2 * i);
    idx[4 * i + 1] = static_cast<int8_t>(2 * i + 1);
    idx[4 * i + 2] = static_cast<int8_t>(16 + 2 * i);
    idx[4 * i + 3] = static_cast<int8_t>(16 + 2 * i + 1);
  }
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(idx));
}
inline __m256i perm_nibbles(int first) {
  alignas(32) int8_t idx[32];
  for (int i = 0; i < 8; ++i) {
    idx[4 * i] = static_cast<int8_t>(first + 2 * i);
    idx[4 * i + 1] = static_cast<int8_t>(first + 2 * i + 1);
    idx[4 * i + 2] = static_cast<int8_t>(32 + first + 2 * i);
    idx[4 * i + 3] = static_cast<int8_t>(32 + first + 2 * i + 1);
  }
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(idx));
}

// R rows of int8 x against panel P, C integer chains per row. The fp32 part is panel_dots' own: per
// unit, the exact integer dot becomes fp32 once, times weight scale * activation scale; the offset term
// (affine types) multiplies the group's fp32 sum of x as there.
template <int L, bool OFF, bool TWO, bool CS, int R, int C>
inline void panel_dots8(const Mat& m, int64_t P, const int8_t* xq, const float* xsu, int64_t GU8, int64_t K,
                        const int32_t* corr, int64_t GU, const float* xs1, int64_t G8, float* out, int64_t N) {
  static_assert(L == 4 || L == 6 || L == 8, "int8 activations: 4-bit, 6-bit and byte panels");
  constexpr int U = TWO ? 2 : 1;
  constexpr int QU = 8 / U;  // quads of inputs per unit
  constexpr int64_t GC = L == 8 ? 256 : L == 6 ? 192 : 128;
  constexpr int64_t GB = GC + (CS ? 16 : 0);
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  const char* base = L == 8 ? reinterpret_cast<const char*>(m.q8) : reinterpret_cast<const char*>(m.nib);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  const __m256i pp = perm_pairs(), pn0 = perm_nibbles(0), pn1 = perm_nibbles(16);
  for (int64_t g = 0; g < m.G; ++g) {
    const int64_t pg = P * m.G + g;
    const char* cp = base + pg * GB;
#pragma GCC unroll 8
    for (int64_t o = 0; o < GB; o += 64) _mm_prefetch(cp + DSPARK_PF + o, _MM_HINT_T0);
    const int8_t* ax = reinterpret_cast<const int8_t*>(cp + GC);
    const int64_t sb = CS ? (P * m.S + g / 8) * 8 : 0;
    for (int u = 0; u < U; ++u) {
      __m256i s[R][C];
      for (int r = 0; r < R; ++r) {
        s[r][0] = _mm256_set1_epi32(corr[r * GU + g * U + u]);
        for (int c = 1; c < C; ++c) s[r][c] = _mm256_setzero_si256();
      }
#pragma GCC unroll 8
      for (int q = u * QU; q < (u + 1) * QU; q += 2) {
        // quads q and q + 1 of the group for the panel's 8 rows: w0, w1
        __m256i w0, w1;
        if (L == 8) {
          const __m256i* cq = reinterpret_cast<const __m256i*>(cp + 32 * q);
          w0 = _mm256_permutexvar_epi8(pp, _mm256_xor_si256(_mm256_loadu_si256(cq), flip));
          w1 = _mm256_permutexvar_epi8(pp, _mm256_xor_si256(_mm256_loadu_si256(cq + 1), flip));
        } else {
          const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(cp + 16 * q));
          __m256i lo = _mm256_and_si256(b, low4), hi = _mm256_and_si256(_mm256_srli_epi16(b, 4), low4);
          if (L == 6) add_high_plane(cp + 128 + 8 * q, lo, hi);
          w0 = _mm256_permutex2var_epi8(lo, pn0, hi);
          w1 = _mm256_permutex2var_epi8(lo, pn1, hi);
        }
        for (int r = 0; r < R; ++r) {
          const int8_t* xp = xq + r * K + g * 32 + 4 * q;
          s[r][q % C] = _mm256_dpbusd_epi32(s[r][q % C], w0, bcast_quad(xp));
          s[r][(q + 1) % C] = _mm256_dpbusd_epi32(s[r][(q + 1) % C], w1, bcast_quad(xp + 4));
        }
      }
      const __m256 ws = CS ? compact_scales(m.scale + sb, ax + 8 * u) : panel_scales(m, (pg * U + u) * 8);
      fold_unit<R, C>(s, ws, xsu + g * U + u, GU8, acc);
    }
    if (OFF) add_offsets<CS, R>(m, sb, ax, pg, xs1 + g, G8, acc);
  }
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(out + r * N + P * 8, acc[r]);
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__)
#define DSPARK_ACT8_WIDE 1
// Two panels (16 weight rows) at once in 512-bit registers: each broadcast activation quad then feeds
// 64 products instead of 32, and the fp32 steps run once per 16 rows. Lane for lane the same operations
// as panel_dots8 (exact integer sums, then the same fp32 steps in the same order), so an output's bits do
// not depend on whether its panel ran alone or paired (batch invariance, and the threads' column split).
inline __m512i join256(__m256i a, __m256i b) { return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1); }
inline __m512 join_ps(__m256 a, __m256 b) { return _mm512_insertf32x8(_mm512_castps256_ps512(a), b, 1); }
inline __m256i load256(const char* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// perm_pairs and perm_nibbles for two panels: each 256-bit half picks from its own half (and, for the
// nibbles, from hi at index 64 and up).
inline __m512i perm_pairs512() {
  alignas(64) int8_t idx[64];
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 8; ++i)
      for (int e = 0; e < 4; ++e) idx[32 * h + 4 * i + e] = static_cast<int8_t>(32 * h + (e < 2 ? 0 : 16) + 2 * i + (e & 1));
  return _mm512_load_si512(idx);
}
inline __m512i perm_nibbles512(int first) {
  alignas(64) int8_t idx[64];
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 8; ++i)
      for (int e = 0; e < 4; ++e) idx[32 * h + 4 * i + e] = static_cast<int8_t>((e < 2 ? 0 : 64) + 32 * h + first + 2 * i + (e & 1));
  return _mm512_load_si512(idx);
}

// high_plane for two panels from their whole 64-byte high planes: quads 2j and 2j + 1 of panel P in the
// low 256 bits, of panel P + 1 in the high ones (one lane shuffle and one masked shift).
inline __m512i high_planes2(__m512i hp0, __m512i hp1, int j) {
  __m512i h;
  switch (j) {  // the shuffle takes an immediate; j is a constant once the quad loop is unrolled
    case 0: h = _mm512_shuffle_i32x4(hp0, hp1, 0x00); break;
    case 1: h = _mm512_shuffle_i32x4(hp0, hp1, 0x55); break;
    case 2: h = _mm512_shuffle_i32x4(hp0, hp1, 0xAA); break;
    default: h = _mm512_shuffle_i32x4(hp0, hp1, 0xFF); break;
  }
  return _mm512_mask_slli_epi16(h, 0xFF00FF00u, h, 4);  // 128-bit lanes 1 and 3: the odd quads
}

// The constants of the code unpacking below, built once per call.
struct Unpack512 {
  __m512i low4 = _mm512_set1_epi8(0x0F), two_bits = _mm512_set1_epi8(0x30);
  __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512i pp = perm_pairs512(), pn0 = perm_nibbles512(0), pn1 = perm_nibbles512(16);
};

// Quads q and q + 1 (q even) of group g's codes of panels P and P + 1 in vpdpbusd's order (row i's four
// inputs in 32-bit lane i; panel P + 1's rows in the high 256 bits): w0, w1. cp: panel P's group g;
// next: the distance to panel P + 1's; hp0, hp1: the 6-bit panels' high planes of the group.
template <int L>
inline void codes8x2(const Unpack512& k, const char* cp, int64_t next, int q, __m512i hp0, __m512i hp1,
                     __m512i& w0, __m512i& w1) {
  if (L == 8) {
    const char* c0 = cp + 32 * q;
    w0 = _mm512_permutexvar_epi8(k.pp, _mm512_xor_si512(join256(load256(c0), load256(c0 + next)), k.flip));
    w1 = _mm512_permutexvar_epi8(k.pp, _mm512_xor_si512(join256(load256(c0 + 32), load256(c0 + 32 + next)), k.flip));
    return;
  }
  const char* c0 = cp + 16 * q;
  const __m512i b = join256(load256(c0), load256(c0 + next));
  __m512i lo = _mm512_and_si512(b, k.low4), hi = _mm512_and_si512(_mm512_srli_epi16(b, 4), k.low4);
  if (L == 6) {
    const __m512i h = high_planes2(hp0, hp1, q / 2);
    lo = _mm512_or_si512(lo, _mm512_and_si512(h, k.two_bits));
    hi = _mm512_or_si512(hi, _mm512_and_si512(_mm512_srli_epi16(h, 2), k.two_bits));
  }
  w0 = _mm512_permutex2var_epi8(lo, k.pn0, hi);
  w1 = _mm512_permutex2var_epi8(lo, k.pn1, hi);
}

// A panel pair's codes unpacked once, for many rows of x (prefill blocks): pre[(g * 4 + q / 2) * 2 + e]
// is codes8x2's w0 (e = 0) or w1 (e = 1) of group g, so the row blocks skip the unpacking.
template <int L, bool CS>
void unpack_pair(const Mat& m, int64_t P, __m512i* pre) {
  constexpr int64_t GB = (L == 8 ? 256 : L == 6 ? 192 : 128) + (CS ? 16 : 0);
  const char* base = L == 8 ? reinterpret_cast<const char*>(m.q8) : reinterpret_cast<const char*>(m.nib);
  const int64_t next = m.G * GB;
  const Unpack512 k;
  for (int64_t g = 0; g < m.G; ++g) {
    const char* cp = base + (P * m.G + g) * GB;
    __m512i hp0 = _mm512_setzero_si512(), hp1 = hp0;
    if (L == 6) {
      hp0 = _mm512_loadu_si512(cp + 128);
      hp1 = _mm512_loadu_si512(cp + next + 128);
    }
    for (int q = 0; q < 8; q += 2) codes8x2<L>(k, cp, next, q, hp0, hp1, pre[(g * 4 + q / 2) * 2], pre[(g * 4 + q / 2) * 2 + 1]);
  }
}

// pre: the pair's codes from unpack_pair (PRE), else unpacked here per group.
template <int L, bool OFF, bool TWO, bool CS, int R, int C, bool PRE = false>
inline void panel_dots8x2(const Mat& m, int64_t P, const int8_t* xq, const float* xsu, int64_t GU8, int64_t K,
                          const int32_t* corr, int64_t GU, const float* xs1, int64_t G8, float* out, int64_t N,
                          const __m512i* pre = nullptr) {
  constexpr int U = TWO ? 2 : 1;
  constexpr int QU = 8 / U;
  constexpr int64_t GC = L == 8 ? 256 : L == 6 ? 192 : 128;
  constexpr int64_t GB = GC + (CS ? 16 : 0);
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  const char* base = L == 8 ? reinterpret_cast<const char*>(m.q8) : reinterpret_cast<const char*>(m.nib);
  const int64_t next = m.G * GB;  // panel P + 1's group g, from panel P's
  const Unpack512 k;
  for (int64_t g = 0; g < m.G; ++g) {
    const int64_t pg = P * m.G + g;
    const char* cp = base + pg * GB;
#pragma GCC unroll 8
    for (int64_t o = 0; o < GB && !PRE; o += 64) {
      _mm_prefetch(cp + DSPARK_PF + o, _MM_HINT_T0);
      _mm_prefetch(cp + next + DSPARK_PF + o, _MM_HINT_T0);
    }
    const int8_t* ax = reinterpret_cast<const int8_t*>(cp + GC);
    const int8_t* ax1 = reinterpret_cast<const int8_t*>(cp + next + GC);
    // 6-bit panels: both panels' whole high planes, 64 bytes each (high_planes2)
    __m512i hp0 = _mm512_setzero_si512(), hp1 = hp0;
    if (L == 6 && !PRE) {
      hp0 = _mm512_loadu_si512(cp + 128);
      hp1 = _mm512_loadu_si512(cp + next + 128);
    }
    const int64_t sb = CS ? (P * m.S + g / 8) * 8 : 0, sb1 = sb + m.S * 8;
    for (int u = 0; u < U; ++u) {
      __m512i s[R][C];
      for (int r = 0; r < R; ++r) {
        s[r][0] = _mm512_set1_epi32(corr[r * GU + g * U + u]);
        for (int c = 1; c < C; ++c) s[r][c] = _mm512_setzero_si512();
      }
#pragma GCC unroll 8
      for (int q = u * QU; q < (u + 1) * QU; q += 2) {
        __m512i w0, w1;
        if (PRE) {
          w0 = _mm512_load_si512(pre + (g * 4 + q / 2) * 2);
          w1 = _mm512_load_si512(pre + (g * 4 + q / 2) * 2 + 1);
        } else {
          codes8x2<L>(k, cp, next, q, hp0, hp1, w0, w1);
        }
        for (int r = 0; r < R; ++r) {
          const int8_t* xp = xq + r * K + g * 32 + 4 * q;
          int32_t v0, v1;
          std::memcpy(&v0, xp, 4);
          std::memcpy(&v1, xp + 4, 4);
          s[r][q % C] = _mm512_dpbusd_epi32(s[r][q % C], w0, _mm512_set1_epi32(v0));
          s[r][(q + 1) % C] = _mm512_dpbusd_epi32(s[r][(q + 1) % C], w1, _mm512_set1_epi32(v1));
        }
      }
      const __m512 ws = CS ? join_ps(compact_scales(m.scale + sb, ax + 8 * u), compact_scales(m.scale + sb1, ax1 + 8 * u))
                           : join_ps(panel_scales(m, (pg * U + u) * 8), panel_scales(m, ((pg + m.G) * U + u) * 8));
      for (int r = 0; r < R; ++r) {
        __m512i t = s[r][0];
        for (int c = 1; c < C; ++c) t = _mm512_add_epi32(t, s[r][c]);
        const __m512 sc = _mm512_mul_ps(ws, _mm512_set1_ps(xsu[r * GU8 + g * U + u]));
        acc[r] = _mm512_fmadd_ps(sc, _mm512_cvtepi32_ps(t), acc[r]);
      }
    }
    if (OFF && CS) {
      const __m512 dm = join_ps(compact_scales(m.off + sb, ax + 8), compact_scales(m.off + sb1, ax1 + 8));
      for (int r = 0; r < R; ++r) acc[r] = _mm512_fnmadd_ps(dm, _mm512_set1_ps(xs1[r * G8 + g]), acc[r]);
    } else if (OFF) {
      const __m512 offs = join_ps(_mm256_loadu_ps(m.off + pg * 8), _mm256_loadu_ps(m.off + (pg + m.G) * 8));
      for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(offs, _mm512_set1_ps(xs1[r * G8 + g]), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(out + r * N + P * 8, acc[r]);
}
#endif

#else  // AVX2 without VNNI
// R rows of int8 x against panel P with vpmaddubsw, the codes put as VNNI's path puts them: row i's four
// inputs in 32-bit lane i, by in-lane unpacks instead of a VBMI permute, so that each activation quad is
// one broadcast dword.
//   kind 14: a 32-byte load holds quads q and q + 1; unpacking its low and high nibbles by 16 bits gives
//   rows 0-3 and 4-7 of both quads, and two 128-bit permutes regroup them by quad (inputs 4q .. 4q + 3).
//   vpmaddubsw sums each row's pairs into two int16 lanes; per unit those lanes add up at most 8 quads
//   (|sum| <= 8 * 2 * 15 * 127 = 30480: exact), then one vpmaddwd by ones gives the int32 dot in lane i.
//   kind 18: two 32-byte loads hold pairs 2j .. 2j + 3 (inputs 4j .. 4j + 7); unpacked by 16 bits and
//   regrouped, lane i holds row i's inputs 4j, 4j + 1, 4j + 4, 4j + 5 in one register and 4j + 2, 4j + 3,
//   4j + 6, 4j + 7 in the other, which is why these rows of x are stored with each 8 elements swapped so
//   (quantize_rows8). Codes up to 63: two products' int16 lanes (|sum| <= 2 * 2 * 63 * 127 = 32004) are
//   widened after each pair of loads.
//   kind 16 (6-bit): kind 14's load and regrouping, the 2-bit plane or-ed into the nibble bytes first
//   (add_high_plane); codes up to 63, so widened as kind 18's.
// The exact integer dots and the fp32 steps are panel_dots8's, hence its bits.
template <int L, bool OFF, bool TWO, bool CS, int R>
inline void panel_dots8_avx2(const Mat& m, int64_t P, const int8_t* xq, const float* xsu, int64_t GU8, int64_t K,
                             const int32_t* corr, int64_t GU, const float* xs1, int64_t G8, float* out, int64_t N) {
  constexpr int U = TWO ? 2 : 1;
  constexpr int QU = 8 / U;  // quads of inputs per unit
  constexpr int64_t GC = L == 8 ? 256 : L == 6 ? 192 : 128;
  constexpr int64_t GB = GC + (CS ? 16 : 0);
  constexpr bool WIDE = L != 4;  // codes past 15: int16 sums widened after each pair of quads
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  const char* base = L == 8 ? reinterpret_cast<const char*>(m.q8) : reinterpret_cast<const char*>(m.nib);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i bias8 = _mm256_set1_epi8(static_cast<char>(byte_bias(TWO)));
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t g = 0; g < m.G; ++g) {
    const int64_t pg = P * m.G + g;
    const char* cp = base + pg * GB;
#pragma GCC unroll 8
    for (int64_t o = 0; o < GB; o += 64) _mm_prefetch(cp + DSPARK_PF + o, _MM_HINT_T0);
    const int8_t* ax = reinterpret_cast<const int8_t*>(cp + GC);
    const int64_t sb = CS ? (P * m.S + g / 8) * 8 : 0;
    for (int u = 0; u < U; ++u) {
      __m256i h[R];  // kind 14: int16 sums of the unit; kind 18: int32 sums
      for (int r = 0; r < R; ++r) h[r] = _mm256_setzero_si256();
      // one pass: quads q and q + 1 (no unroll: unrolled, gcc computed every product before summing and
      // spilled them to the stack)
#pragma GCC unroll 1
      for (int q = u * QU; q < (u + 1) * QU; q += 2) {
        __m256i lo, hi;
        if (L == 8) {
          const __m256i a = _mm256_add_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(cp + 32 * q)), bias8);
          const __m256i c = _mm256_add_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(cp + 32 * q + 32)), bias8);
          lo = _mm256_unpacklo_epi16(a, c);
          hi = _mm256_unpackhi_epi16(a, c);
        } else {
          const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(cp + 16 * q));
          __m256i n0 = _mm256_and_si256(b, low4), n1 = _mm256_and_si256(_mm256_srli_epi16(b, 4), low4);
          if (L == 6) add_high_plane(cp + 128 + 8 * q, n0, n1);  // then the 4-bit panels' regrouping
          lo = _mm256_unpacklo_epi16(n0, n1);
          hi = _mm256_unpackhi_epi16(n0, n1);
        }
        const __m256i w0 = _mm256_permute2x128_si256(lo, hi, 0x20);  // rows 0-7, first quad
        const __m256i w1 = _mm256_permute2x128_si256(lo, hi, 0x31);  // rows 0-7, second quad
        for (int r = 0; r < R; ++r) {
          const int8_t* xp = xq + r * K + g * 32 + 4 * q;
          const __m256i t = _mm256_add_epi16(_mm256_maddubs_epi16(w0, bcast_quad(xp)), _mm256_maddubs_epi16(w1, bcast_quad(xp + 4)));
          h[r] = WIDE ? _mm256_add_epi32(h[r], _mm256_madd_epi16(t, ones)) : _mm256_add_epi16(h[r], t);
        }
      }
      __m256i s[R][1];
      for (int r = 0; r < R; ++r) {
        const __m256i d = WIDE ? h[r] : _mm256_madd_epi16(h[r], ones);
        s[r][0] = _mm256_add_epi32(_mm256_set1_epi32(corr[r * GU + g * U + u]), d);
      }
      const __m256 ws = CS ? compact_scales(m.scale + sb, ax + 8 * u) : panel_scales(m, (pg * U + u) * 8);
      fold_unit<R, 1>(s, ws, xsu + g * U + u, GU8, acc);
    }
    if (OFF) add_offsets<CS, R>(m, sb, ax, pg, xs1 + g, G8, acc);
  }
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(out + r * N + P * 8, acc[r]);
}
#endif  // DSPARK_ACT8_VNNI

// Integer chains per row: enough vpdpbusd chains in flight at few rows (latency 5), one a row from 5
// rows on (registers). The integer sums are exact, so the count changes no result.
template <int R>
constexpr int chains8() { return R <= 2 ? 4 : R <= 4 ? 2 : 1; }

template <int L, bool OFF, bool TWO, bool CS>
void panel_product8_t(const Mat& m, const int8_t* xq, const float* xsu, int64_t GU8, int64_t M, int64_t K,
                      const int32_t* corr, int64_t GU, int64_t p0, int64_t p1, int64_t N, float* op,
                      const float* xs1, int64_t G8) {
  for (int64_t P = p0; P < p1;) {
#ifdef DSPARK_ACT8_WIDE
    // Two panels a pass from 3 rows of x on, where the thread's range has them. At 1 and 2 rows the
    // 1.5B's forward was ~5% slower paired than with single panels (A/B, 20 rounds each; at those
    // widths a product streams its weights from memory and the arithmetic saved does not matter).
    const bool pair = P + 1 < p1 && M >= g_pair_min.load(std::memory_order_relaxed);
#define DSPARK_ACT8_DOTS(RR)                                                                            \
  (pre_ptr ? panel_dots8x2<L, OFF, TWO, CS, RR, chains8<RR>(), true>(m, P, xr, sr, GU8, K, cr, GU, xs, G8, orow, N, pre_ptr) \
   : pair ? panel_dots8x2<L, OFF, TWO, CS, RR, chains8<RR>()>(m, P, xr, sr, GU8, K, cr, GU, xs, G8, orow, N) \
          : panel_dots8<L, OFF, TWO, CS, RR, chains8<RR>()>(m, P, xr, sr, GU8, K, cr, GU, xs, G8, orow, N))
#elif defined(DSPARK_ACT8_VNNI)
    const bool pair = false;
#define DSPARK_ACT8_DOTS(RR) panel_dots8<L, OFF, TWO, CS, RR, chains8<RR>()>(m, P, xr, sr, GU8, K, cr, GU, xs, G8, orow, N)
#else
    const bool pair = false;
#define DSPARK_ACT8_DOTS(RR) panel_dots8_avx2<L, OFF, TWO, CS, RR>(m, P, xr, sr, GU8, K, cr, GU, xs, G8, orow, N)
#endif
#ifdef DSPARK_ACT8_WIDE
    // Several row blocks (prefill): the pair's codes unpacked once for all of them (same bits).
    thread_local std::vector<__m512i> pre;
    const __m512i* pre_ptr = nullptr;
    if (pair && M > 8) {
      pre.resize(m.G * 8);
      unpack_pair<L, CS>(m, P, pre.data());
      pre_ptr = pre.data();
    }
#endif
    for (int64_t r = 0; r < M; r += 8) {
      const int8_t* xr = xq + r * K;
      const float* sr = xsu + r * GU8;
      const int32_t* cr = corr + r * GU;
      const float* xs = OFF ? xs1 + r * G8 : nullptr;
      float* orow = op + r * N;
      switch (std::min<int64_t>(8, M - r)) {
        case 8: DSPARK_ACT8_DOTS(8); break;
        case 7: DSPARK_ACT8_DOTS(7); break;
        case 6: DSPARK_ACT8_DOTS(6); break;
        case 5: DSPARK_ACT8_DOTS(5); break;
        case 4: DSPARK_ACT8_DOTS(4); break;
        case 3: DSPARK_ACT8_DOTS(3); break;
        case 2: DSPARK_ACT8_DOTS(2); break;
        default: DSPARK_ACT8_DOTS(1); break;
      }
    }
#undef DSPARK_ACT8_DOTS
    P += pair ? 2 : 1;
  }
}

void panel_product8(const Mat& m, const int8_t* xq, const float* xsu, int64_t GU8, int64_t M, int64_t K,
                    const int32_t* corr, int64_t GU, int64_t p0, int64_t p1, int64_t N, float* op,
                    const float* xs1, int64_t G8) {
  if (m.layout == 6) return panel_product8_t<6, false, true, true>(m, xq, xsu, GU8, M, K, corr, GU, p0, p1, N, op, xs1, G8);
  if (m.layout == 4) DSPARK_DISPATCH_PANEL_L(panel_product8_t, 4, m, m, xq, xsu, GU8, M, K, corr, GU, p0, p1, N, op, xs1, G8);
  else DSPARK_DISPATCH_PANEL_L(panel_product8_t, 8, m, m, xq, xsu, GU8, M, K, corr, GU, p0, p1, N, op, xs1, G8);
}

// Without VNNI, byte panels of plain types (Q5_0, Q8_0: codes up to +-128 would saturate vpmaddubsw's
// int16 sums) take the int16 products on the int8 activations instead (act8_products).
inline bool act8_bytes_via_int16(const Mat& m) {
  return !kAct8Vnni && m.layout == 8 && m.off == nullptr && m.scales_per_group == 1;
}

// The codes' bias (unsigned codes - bias = the stored codes): byte codes go through vpdpbusd with 128
// added; without VNNI, byte_bias (0 for the plain types, whose int16 products use the codes as stored).
inline int32_t act8_bias(const Mat& m) {
  if (m.layout != 8) return m.shift;
  return kAct8Vnni ? 128 : byte_bias(m.scales_per_group == 2);
}
#endif  // int8 activations


// The 8 x 8 transpose of 16-bit values: r[j] = (a[0][j], ..., a[7][j]).
inline void transpose8x16(__m128i* a) {
  __m128i t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm_unpacklo_epi16(a[2 * i], a[2 * i + 1]);
    t[2 * i + 1] = _mm_unpackhi_epi16(a[2 * i], a[2 * i + 1]);
  }
  u[0] = _mm_unpacklo_epi32(t[0], t[2]);
  u[1] = _mm_unpackhi_epi32(t[0], t[2]);
  u[2] = _mm_unpacklo_epi32(t[1], t[3]);
  u[3] = _mm_unpackhi_epi32(t[1], t[3]);
  u[4] = _mm_unpacklo_epi32(t[4], t[6]);
  u[5] = _mm_unpackhi_epi32(t[4], t[6]);
  u[6] = _mm_unpacklo_epi32(t[5], t[7]);
  u[7] = _mm_unpackhi_epi32(t[5], t[7]);
  for (int i = 0; i < 4; ++i) {
    a[2 * i] = _mm_unpacklo_epi64(u[i], u[i + 4]);
    a[2 * i + 1] = _mm_unpackhi_epi64(u[i], u[i + 4]);
  }
}

// The fp32 values of panel P's 8 rows (row i at w + i * ldw), exactly expand_group's values: the codes
// are transposed back to row order, then scaled as in expand_group_v. With only >= 0, just that row of
// the panel, written at w (a lookup of one table row).
// One row's 32 rebuilt weights of a group, stored as fp32 or, for the bf16 prefill, rounded to bf16 as
// they are written (round to nearest even, as at::Tensor::copy_ does: the same bits as converting later).
inline void store32(float* d, __m256 w0, __m256 w1, __m256 w2, __m256 w3) {
  _mm256_storeu_ps(d, w0);
  _mm256_storeu_ps(d + 8, w1);
  _mm256_storeu_ps(d + 16, w2);
  _mm256_storeu_ps(d + 24, w3);
}
#if defined(__AVX512BF16__) && defined(__AVX512F__)
#define DSPARK_BF16_STORE 1
inline void store32(uint16_t* d, __m256 w0, __m256 w1, __m256 w2, __m256 w3) {
  const __m256bh a = _mm512_cvtneps_pbh(_mm512_insertf32x8(_mm512_castps256_ps512(w0), w1, 1));
  const __m256bh b = _mm512_cvtneps_pbh(_mm512_insertf32x8(_mm512_castps256_ps512(w2), w3, 1));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), reinterpret_cast<const __m256i&>(a));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + 16), reinterpret_cast<const __m256i&>(b));
}
#endif

template <int L, bool OFF, bool TWO, bool CS, typename T>
void expand_panel_t(const Mat& m, int64_t P, T* w, int64_t ldw, int only) {
  constexpr int U = TWO ? 2 : 1;
  constexpr int64_t GC = L == 8 ? 256 : L == 6 ? 192 : 128;
  constexpr int64_t GB = GC + (CS ? 16 : 0);
  const char* base = L == 8 ? reinterpret_cast<const char*>(m.q8) : reinterpret_cast<const char*>(m.nib);
  const __m256i sh = _mm256_set1_epi16(static_cast<int16_t>(m.shift));
  for (int64_t g = 0; g < m.G; ++g) {
    const int64_t pg = P * m.G + g;
    __m128i lo[8], hi[8];  // per row: inputs 0-15 and 16-31 as bytes
    if (L == 8) {
      const __m128i* cp = reinterpret_cast<const __m128i*>(base + pg * GB);
      for (int p = 0; p < 8; ++p) {
        lo[p] = _mm_loadu_si128(cp + p);
        hi[p] = _mm_loadu_si128(cp + 8 + p);
      }
      transpose8x16(lo);
      transpose8x16(hi);
    } else {
      __m128i q[8];
      const __m128i* cp = reinterpret_cast<const __m128i*>(base + pg * GB);
      for (int i = 0; i < 8; ++i) q[i] = _mm_loadu_si128(cp + i);
      transpose8x16(q);  // row i: per quad, byte 0 = (4q | 4q+2 << 4), byte 1 = (4q+1 | 4q+3 << 4)
      const __m128i m4 = _mm_set1_epi8(0x0F);
      __m128i h[8];  // layout 6: per row, the high plane's 16-bit word of each quad (from its pair's)
      if (L == 6) {
        for (int j = 0; j < 4; ++j) h[j] = _mm_loadu_si128(cp + 8 + j);
        for (int j = 4; j < 8; ++j) h[j] = _mm_setzero_si128();
        transpose8x16(h);  // row i: words 0-3 = pairs of quads j
        const __m128i hi4 = _mm_set1_epi8(static_cast<char>(0xF0));
        for (int i = 0; i < 8; ++i) {
          const __m128i hq = _mm_unpacklo_epi16(h[i], h[i]);  // word q = pair q / 2's
          // odd quads: their bits 0-3 of each byte moved to 4-7, as the even quads' already are
          h[i] = _mm_blend_epi16(hq, _mm_and_si128(_mm_slli_epi16(hq, 4), hi4), 0xAA);
        }
      }
      for (int i = 0; i < 8; ++i) {
        __m128i a = _mm_and_si128(q[i], m4), b = _mm_and_si128(_mm_srli_epi16(q[i], 4), m4);
        if (L == 6) {
          const __m128i two = _mm_set1_epi8(0x30);
          a = _mm_or_si128(a, _mm_and_si128(h[i], two));
          b = _mm_or_si128(b, _mm_and_si128(_mm_srli_epi16(h[i], 2), two));
        }
        lo[i] = _mm_unpacklo_epi16(a, b);  // inputs 0-15 in order
        hi[i] = _mm_unpackhi_epi16(a, b);  // inputs 16-31
      }
    }
    for (int i = only < 0 ? 0 : only; i < (only < 0 ? 8 : only + 1); ++i) {
      __m256i c0 = L == 8 ? _mm256_cvtepi8_epi16(lo[i]) : _mm256_cvtepu8_epi16(lo[i]);
      __m256i c1 = L == 8 ? _mm256_cvtepi8_epi16(hi[i]) : _mm256_cvtepu8_epi16(hi[i]);
      if (L != 8 && m.shift != 0) {
        c0 = _mm256_sub_epi16(c0, sh);
        c1 = _mm256_sub_epi16(c1, sh);
      }
      const int8_t* ax = reinterpret_cast<const int8_t*>(base + pg * GB + GC);
      const int64_t sb = CS ? (P * m.S + g / 8) * 8 + i : 0;
      // compact: the reference's fp32 products d * sc (and dmin * m), one scalar multiply each
      const __m256 s0 = _mm256_set1_ps(CS ? m.scale[sb] * static_cast<float>(ax[i])
                                          : scale_at(m, (pg * U) * 8 + i));
      const __m256 s1 = _mm256_set1_ps(CS ? m.scale[sb] * static_cast<float>(ax[(U - 1) * 8 + i])
                                          : scale_at(m, (pg * U + U - 1) * 8 + i));
      __m256 w0 = _mm256_mul_ps(s0, _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(c0))));
      __m256 w1 = _mm256_mul_ps(s0, _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_extracti128_si256(c0, 1))));
      __m256 w2 = _mm256_mul_ps(s1, _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(c1))));
      __m256 w3 = _mm256_mul_ps(s1, _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_extracti128_si256(c1, 1))));
      if (OFF) {
        const __m256 o = _mm256_set1_ps(CS ? -(m.off[sb] * static_cast<float>(ax[8 + i])) : m.off[pg * 8 + i]);
        w0 = _mm256_add_ps(w0, o);
        w1 = _mm256_add_ps(w1, o);
        w2 = _mm256_add_ps(w2, o);
        w3 = _mm256_add_ps(w3, o);
      }
      store32((only < 0 ? w + i * ldw : w) + g * 32, w0, w1, w2, w3);
    }
  }
}

template <typename T>
inline void expand_panel(const Mat& m, int64_t P, T* w, int64_t ldw, int only = -1) {
  DSPARK_DISPATCH_PANEL(expand_panel_t, m, m, P, w, ldw, only);
}
inline void expand_row(const Mat& m, int64_t row, float* w) { DSPARK_DISPATCH(expand_row_t, m, m, row, w); }

#if defined(DSPARK_BF16_STORE) && defined(__AVX512BW__) && defined(__AVX512VBMI__)
#define DSPARK_REBUILD512 1
// ---------------------------------------------------------------------------------------------------
// Fast bf16 rebuild of panels (the bf16 prefill's tiles; AVX-512 with VBMI and BF16). expand_panel_t
// above works in 8 lanes: it puts a group's codes in row order with 128-bit unpacks, widens each row's
// codes in four steps and rounds 8 values an instruction. With the bf16 GEMM on AMX (1.5-2 TFLOP/s on
// two cores) that rebuild was ~160 ms of every prefill slice of the 1.5B, paid whatever the slice's length.
// Here a group's 8 x 32 codes reach row order in eight permutes across 64-byte registers (two-source byte
// permutes, then qword permutes), each row's 32 weights are built in two 16-lane registers and rounded
// by one vcvtne2ps2bf16 into one 64-byte store, and the codes a few groups ahead are prefetched.
// Bit for bit the same as expand_panel_t: the same fp32 scales (the same products d * sc, dmin * m, or the
// stored scales), then scale * fp32(code - shift) and + offset, each rounded on its own (no fma: the
// build has -ffp-contract=off and nothing here asks for one), then round to nearest even into bf16 as
// vcvtneps2bf16 does. tests/quant/test_quant_rebuild.py holds every path to torch's own conversion.

// Permute indices, built once. Level 1 takes, from two 64-byte blocks of a group's codes, 16 inputs of
// 4 rows (x: rows 0-3, rows 4-7); level 2 joins a row's inputs 0-15 and 16-31 (qwords of the two level-1
// results) so that one register holds two whole rows, 32 codes each.
struct RebuildIdx {
  __m512i b8[2];  // layout 8: block bytes 16p + 2i + e hold input 2p + e of row i (p < 4: this block's)
  __m512i b4[2];  // layout 4: from (low nibbles, high nibbles) of a block: byte 16q + 2i + e holds
                  // input 4q + e (low) and 4q + 2 + e (high) of row i
  __m512i rows[2];  // level 2: rows (0, 1) and (2, 3) of a level-1 pair
};

inline const RebuildIdx& rebuild_idx() {
  static const RebuildIdx idx = [] {
    alignas(64) uint8_t b8[2][64], b4[2][64];
    alignas(64) const int64_t q[2][8] = {{0, 1, 8, 9, 2, 3, 10, 11}, {4, 5, 12, 13, 6, 7, 14, 15}};
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 16; ++j) {  // output byte 16i + j: input j of row 4h + i
          const int row = 4 * h + i;
          b8[h][16 * i + j] = static_cast<uint8_t>(16 * (j >> 1) + 2 * row + (j & 1));
          b4[h][16 * i + j] = static_cast<uint8_t>(64 * ((j & 3) >> 1) + 16 * (j >> 2) + 2 * row + (j & 1));
        }
    RebuildIdx r{};
    for (int h = 0; h < 2; ++h) {
      r.b8[h] = _mm512_load_si512(b8[h]);
      r.b4[h] = _mm512_load_si512(b4[h]);
      r.rows[h] = _mm512_load_si512(q[h]);
    }
    return r;
  }();
  return idx;
}

// A panel group's codes (minus the zero point) in row order as int8: z[k] holds row 2k (bytes 0-31) and
// row 2k + 1 (bytes 32-63), inputs in order.
template <int L>
inline void group_codes(const char* cp, int32_t shift, const RebuildIdx& ix, __m512i (&z)[4]) {
  __m512i x[2], y[2];  // x: inputs 0-15, y: inputs 16-31; [0] rows 0-3, [1] rows 4-7
  if (L == 8) {
    const __m512i a0 = _mm512_loadu_si512(cp), a1 = _mm512_loadu_si512(cp + 64);
    const __m512i a2 = _mm512_loadu_si512(cp + 128), a3 = _mm512_loadu_si512(cp + 192);
    for (int h = 0; h < 2; ++h) {
      x[h] = _mm512_permutex2var_epi8(a0, ix.b8[h], a1);
      y[h] = _mm512_permutex2var_epi8(a2, ix.b8[h], a3);
    }
  } else {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i b0 = _mm512_loadu_si512(cp), b1 = _mm512_loadu_si512(cp + 64);
    const __m512i l0 = _mm512_and_si512(b0, m4), h0 = _mm512_and_si512(_mm512_srli_epi16(b0, 4), m4);
    const __m512i l1 = _mm512_and_si512(b1, m4), h1 = _mm512_and_si512(_mm512_srli_epi16(b1, 4), m4);
    for (int h = 0; h < 2; ++h) {
      x[h] = _mm512_permutex2var_epi8(l0, ix.b4[h], h0);
      y[h] = _mm512_permutex2var_epi8(l1, ix.b4[h], h1);
    }
  }
  for (int h = 0; h < 2; ++h) {
    z[2 * h] = _mm512_permutex2var_epi64(x[h], ix.rows[0], y[h]);
    z[2 * h + 1] = _mm512_permutex2var_epi64(x[h], ix.rows[1], y[h]);
  }
  if (L == 4 && shift != 0) {  // Q4_0's zero point; codes 0..15 minus 8 fit a signed byte
    const __m512i sh = _mm512_set1_epi8(static_cast<char>(shift));
    for (int k = 0; k < 4; ++k) z[k] = _mm512_sub_epi8(z[k], sh);
  }
}

// The 8 rows' fp32 scales of a group (s0: inputs 0-15, s1: 16-31) and offsets, exactly expand_panel_t's.
struct GroupFactors {
  alignas(32) float s0[8];
  alignas(32) float s1[8];
  alignas(32) float o[8];
};

template <bool OFF, bool TWO, bool CS>
inline void group_factors(const Mat& m, int64_t P, int64_t g, const int8_t* ax, GroupFactors& f) {
  constexpr int U = TWO ? 2 : 1;
  const int64_t pg = P * m.G + g;
  if (CS) {  // the reference's products d * sc (and dmin * m, negated: weight = d*sc*q - dmin*m)
    const int64_t sb = (P * m.S + g / 8) * 8;
    _mm256_store_ps(f.s0, compact_scales(m.scale + sb, ax));
    if (TWO) _mm256_store_ps(f.s1, compact_scales(m.scale + sb, ax + 8));
    if (OFF) _mm256_store_ps(f.o, _mm256_xor_ps(compact_scales(m.off + sb, ax + 8), _mm256_set1_ps(-0.0f)));
  } else {
    _mm256_store_ps(f.s0, panel_scales(m, pg * U * 8));
    if (TWO) _mm256_store_ps(f.s1, panel_scales(m, (pg * U + 1) * 8));
    if (OFF) _mm256_store_ps(f.o, _mm256_loadu_ps(m.off + pg * 8));
  }
}

// Row i's 32 weights as bf16 from its codes (inputs 0-15 in lo, 16-31 in hi, as int8).
template <bool OFF, bool TWO>
inline __m512i row_bf16(__m128i lo, __m128i hi, const GroupFactors& f, int i) {
  const __m512 a = _mm512_set1_ps(f.s0[i]);
  const __m512 b = TWO ? _mm512_set1_ps(f.s1[i]) : a;
  __m512 w0 = _mm512_mul_ps(a, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo)));
  __m512 w1 = _mm512_mul_ps(b, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi)));
  if (OFF) {
    const __m512 o = _mm512_set1_ps(f.o[i]);
    w0 = _mm512_add_ps(w0, o);
    w1 = _mm512_add_ps(w1, o);
  }
  const __m512bh v = _mm512_cvtne2ps_pbh(w1, w0);  // lanes 0-15 from w0, 16-31 from w1
  return reinterpret_cast<const __m512i&>(v);
}

#ifndef DSPARK_REBUILD_PF
#define DSPARK_REBUILD_PF 1024  // bytes ahead in the code stream (4-7 groups)
#endif

// Panels [p0, p1) as bf16 rows, panel p0's first row at w (ldw apart, as expand_panel writes them).
template <int L, bool OFF, bool TWO, bool CS>
void rebuild_panels_t(const Mat& m, int64_t p0, int64_t p1, uint16_t* w, int64_t ldw) {
  static_assert(L == 4 || L == 8, "6-bit panels take expand_panel_t");
  constexpr int64_t GC = L == 8 ? 256 : 128;
  constexpr int64_t GB = GC + (CS ? 16 : 0);
  const char* base = L == 8 ? reinterpret_cast<const char*>(m.q8) : reinterpret_cast<const char*>(m.nib);
  const RebuildIdx& ix = rebuild_idx();
  for (int64_t P = p0; P < p1; ++P) {
    uint16_t* wp = w + (P - p0) * 8 * ldw;
    for (int64_t g = 0; g < m.G; ++g) {
      const char* cp = base + (P * m.G + g) * GB;
      // panels are contiguous, so "ahead" runs on into the next panel's groups
#pragma GCC unroll 8
      for (int64_t o = 0; o < GB; o += 64) _mm_prefetch(cp + DSPARK_REBUILD_PF + o, _MM_HINT_T0);
      GroupFactors f;
      group_factors<OFF, TWO, CS>(m, P, g, reinterpret_cast<const int8_t*>(cp + GC), f);
      __m512i z[4];
      group_codes<L>(cp, m.shift, ix, z);
      uint16_t* d = wp + g * 32;
      for (int k = 0; k < 4; ++k) {
        const __m512i r0 = row_bf16<OFF, TWO>(_mm512_castsi512_si128(z[k]), _mm512_extracti32x4_epi32(z[k], 1), f, 2 * k);
        const __m512i r1 = row_bf16<OFF, TWO>(_mm512_extracti32x4_epi32(z[k], 2), _mm512_extracti32x4_epi32(z[k], 3), f,
                                              2 * k + 1);
        _mm512_storeu_si512(d + 2 * k * ldw, r0);
        _mm512_storeu_si512(d + (2 * k + 1) * ldw, r1);
      }
    }
  }
}

// Layouts 4 and 8; 6-bit panels (kind 16, off by default) keep expand_panel.
inline void rebuild_panels(const Mat& m, int64_t p0, int64_t p1, uint16_t* w, int64_t ldw) {
  if (m.layout == 6) {
    for (int64_t P = p0; P < p1; ++P) expand_panel(m, P, w + (P - p0) * 8 * ldw, ldw);
  } else if (m.layout == 4) {
    DSPARK_DISPATCH_PANEL_L(rebuild_panels_t, 4, m, m, p0, p1, w, ldw);
  } else {
    DSPARK_DISPATCH_PANEL_L(rebuild_panels_t, 8, m, m, p0, p1, w, ldw);
  }
}
#endif  // fast bf16 rebuild
#else
inline void expand_row(const Mat& m, int64_t row, float* w) {
  for (int64_t g = 0; g < m.G; ++g) expand_group(m, row * m.G + g, w + g * 32);
}

inline float dot(const float* __restrict w, const float* __restrict x, int64_t K) {
  float acc[32];
  for (int j = 0; j < 32; ++j) acc[j] = 0.0f;
  for (int64_t k = 0; k < K; k += 32)
    for (int j = 0; j < 32; ++j) acc[j] = std::fma(w[k + j], x[k + j], acc[j]);
  for (int w2 = 16; w2 >= 1; w2 /= 2)
    for (int j = 0; j < w2; ++j) acc[j] = acc[j] + acc[j + w2];
  return acc[0];
}

void small_product(const Mat& m, const float* xp, int64_t M, int64_t K, int64_t n0, int64_t n1, int64_t N,
                   float* op, const float* /*xsum*/) {
  std::vector<float> w(static_cast<size_t>(K));
  for (int64_t n = n0; n < n1; ++n) {
    expand_row(m, n, w.data());
    for (int64_t r = 0; r < M; ++r) op[r * N + n] = dot(w.data(), xp + r * K, K);
  }
}
#endif

Mat make_mat(int64_t kind, const at::Tensor& codes, const at::Tensor& scale, const at::Tensor& off, int64_t K,
             int64_t shift) {
  TORCH_CHECK(K % 32 == 0, "K must be a multiple of 32, got ", K);
  TORCH_CHECK(kind == 4 || kind == 8 || kind == 14 || kind == 16 || kind == 18, "unknown code layout ", kind);
#ifndef DSPARK_AVX2
  TORCH_CHECK(kind < 10, "the panel layout needs AVX2 (kind ", kind, ")");
#endif
  const bool panel = kind >= 10;
  kind %= 10;
  const bool half = scale.scalar_type() == at::kHalf;
  TORCH_CHECK(scale.dim() == 2 && (scale.scalar_type() == at::kFloat || half) && scale.is_contiguous(), "bad scales");
  TORCH_CHECK(codes.is_contiguous(), "codes must be contiguous");
  Mat m{};
  m.G = K / 32;
  const int64_t N = scale.size(0);
  // Compact panels ("Super-block scales"): one fp32 factor per 256 weights of a row instead of per group.
  m.compact = panel && m.G % 8 == 0 && scale.size(1) * 8 == m.G;
  m.S = m.compact ? m.G / 8 : 0;
  const int64_t per_row = m.compact ? m.S : m.G;  // offsets (or dmin factors) per row
  // compact: offsets (Q4_K, Q5_K) go with one scale per group, no offsets (Q6_K) with two
  m.scales_per_group = m.compact ? (off.numel() ? 1 : 2) : scale.size(1) / m.G;
  TORCH_CHECK(m.compact || (scale.size(1) == m.G * m.scales_per_group &&
                            (m.scales_per_group == 1 || m.scales_per_group == 2)),
              "bad scale shape");
  if (half) {
#ifdef DSPARK_F16
    TORCH_CHECK(panel && !m.compact && m.scales_per_group == 1 && off.numel() == 0,
                "fp16 scales need panels with one scale per group and no offsets");
    m.scale16 = reinterpret_cast<const uint16_t*>(scale.data_ptr<at::Half>());
    m.scale = nullptr;
#else
    TORCH_CHECK(false, "this kernel build has no fp16 scales (no F16C)");
#endif
  } else {
    m.scale = scale.data_ptr<float>();
    m.scale16 = nullptr;
  }
  m.off = off.numel() ? off.data_ptr<float>() : nullptr;
  TORCH_CHECK(off.numel() == 0 || (off.numel() == N * per_row && off.scalar_type() == at::kFloat), "bad offsets");
  TORCH_CHECK(off.numel() == 0 || m.scales_per_group == 1, "offsets need one scale per group");
  m.shift = static_cast<int32_t>(shift);
  m.layout = static_cast<int>(kind);
  m.panel = panel;
  TORCH_CHECK(!panel || N % 8 == 0, "the panel layout needs a multiple of 8 rows, got ", N);
  const int64_t aux = m.compact ? N * m.G * 2 : 0;  // 16 bytes per panel and group: 2 per row and group
  TORCH_CHECK(kind != 6 || (m.compact && off.numel() == 0), "6-bit panels are compact Q6_K panels");
  if (kind == 6) {
    TORCH_CHECK(codes.numel() == N * K * 3 / 4 + aux && codes.scalar_type() == at::kByte, "bad 6-bit codes");
    m.nib = codes.data_ptr<uint8_t>();
    m.q8 = nullptr;
  } else if (kind == 4) {
    TORCH_CHECK(codes.numel() == N * K / 2 + aux && codes.scalar_type() == at::kByte, "bad 4-bit codes");
    m.nib = codes.data_ptr<uint8_t>();
    m.q8 = nullptr;
  } else {
    TORCH_CHECK(codes.numel() == N * K + aux && codes.scalar_type() == at::kChar, "bad 8-bit codes");
    m.q8 = codes.data_ptr<int8_t>();
    m.nib = nullptr;
  }
  return m;
}

// The prefill path's buffers (the fp32 weight tile, and the bf16 copies when set_prefill_bf16 is on), one
// set per calling thread, kept between products and grown to the largest size asked for (34.9 MB for the
// 0.5B's fused gate/up rows; never above the 64 MB cap). Why not a fresh tensor per product, as before: each product then allocated and freed 3-35 MB
// between the activations' allocations, and in a worker thread's malloc arena (64 MB heaps; glibc
// serves these sizes from the heaps once its mmap threshold has risen to a freed block's size) the
// freed tiles could not be reused in place, so new heaps were mapped: the language server's RSS rose
// by 300-450 MB during one prefill and came back only with malloc_trim after the request (measured on
// the default pair: peak RSS 1,587-1,676 MB against 1,160-1,190 MB after the trim, issue 14). A buffer
// that stays costs its size once and no page faults per product. Slots: 0 the fp32 weight tile; 1-3 the
// bf16 activations, weight tile and product.
//
// What a caller gets is a fresh tensor over the kept memory, not the kept tensor itself: a tensor made
// under torch.inference_mode is an inference tensor for good, and writing into one outside that mode
// raises. The engine's decode runs in inference mode and transformers' generate (the bench's hf_*
// methods) under no_grad, so a buffer first allocated by one and written by the other crashed the
// prefill (issue 33). A wrapper made per product belongs to the caller's mode, whichever it is. It
// lives for one product only: the next product on this thread may replace the memory it points at.
at::Tensor kept_buffer(int slot, int64_t elems, at::ScalarType dtype) {
  thread_local at::Tensor bufs[4];
  at::Tensor& buf = bufs[slot];
  if (!buf.defined() || buf.numel() < elems) {
    buf = at::Tensor();  // the smaller buffer goes before the larger one is allocated
    buf = at::empty({elems}, dtype);
  }
  return at::from_blob(buf.data_ptr(), {elems}, at::TensorOptions().dtype(dtype));
}

float* prefill_tile(int64_t elems) { return kept_buffer(0, elems, at::kFloat).data_ptr<float>(); }

// How the bf16 prefill rebuilds its weight tiles (set_prefill_rebuild; process-wide). All three give the
// same bits; the switch exists so that tests can hold each to the others and timings can compare them in
// one process. What a build lacks falls back to the next path (rebuild_path_available).
enum RebuildPath : int {
  kRebuildFast = 0,     // rebuild_panels: 16 lanes, a row's 32 weights per conversion (AVX-512 VBMI, BF16)
  kRebuildRows = 1,     // expand_panel<uint16_t>: 8 lanes, rounded as written (AVX512-BF16)
  kRebuildScratch = 2,  // fp32 rows in a per-thread scratch, then rounded one value at a time (any CPU)
};

int rebuild_path_available(int path) {
#ifndef DSPARK_REBUILD512
  if (path == kRebuildFast) path = kRebuildRows;
#endif
#ifndef DSPARK_BF16_STORE
  if (path == kRebuildRows) path = kRebuildScratch;
#endif
  return path;
}

std::atomic<int> g_rebuild{rebuild_path_available(kRebuildFast)};

// fp32 -> bf16, round to nearest even (what at::Tensor::copy_ does, so the prefill's weights keep the
// bits they had when the whole fp32 tile was converted at once). `native`: vcvtneps2bf16 where the build
// has it; else c10's scalar rounding, what a CPU without AVX512-BF16 runs.
inline void to_bf16(const float* src, uint16_t* dst, int64_t n, bool native) {
  int64_t i = 0;
#if defined(__AVX512BF16__) && defined(__AVX512F__)
  for (; native && i + 16 <= n; i += 16) {
    const __m256bh v = _mm512_cvtneps_pbh(_mm512_loadu_ps(src + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), reinterpret_cast<const __m256i&>(v));
  }
#endif
  for (; i < n; ++i) dst[i] = c10::BFloat16(src[i]).x;
}

// Panels [a, b) of a tile (panel a's first row at dst) by the given path.
void panels_bf16(const Mat& m, int64_t P0, int64_t a, int64_t b, int64_t K, uint16_t* dst, int path) {
#ifdef DSPARK_AVX2
#ifdef DSPARK_REBUILD512
  if (path == kRebuildFast) {
    rebuild_panels(m, P0 + a, P0 + b, dst + a * 8 * K, K);
    return;
  }
#endif
#ifdef DSPARK_BF16_STORE
  if (path == kRebuildRows) {
    for (int64_t i = a; i < b; ++i) expand_panel(m, P0 + i, dst + i * 8 * K, K);
    return;
  }
#endif
  // each thread rebuilds 8 rows in an fp32 scratch that stays in its cache and rounds them at once
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<size_t>(8 * K));
  for (int64_t i = a; i < b; ++i) {
    expand_panel(m, P0 + i, scratch.data(), K);
    to_bf16(scratch.data(), dst + i * 8 * K, 8 * K, path != kRebuildScratch);
  }
#else
  (void)m, (void)P0, (void)a, (void)b, (void)K, (void)dst, (void)path;
  TORCH_CHECK(false, "panels need AVX2");
#endif
}

// Rows [n0, n0 + t) of the matrix as bf16 at dst (row-major, K a row), by the process-wide rebuild path:
// panels as panels_bf16 says; row-major matrices one row at a time through a per-thread fp32 scratch.
void expand_tile_bf16(const Mat& m, int64_t n0, int64_t t, int64_t K, uint16_t* dst) {
  const int path = g_rebuild.load(std::memory_order_relaxed);
  if (m.panel) {
    at::parallel_for(0, t / 8, 1, [&](int64_t a, int64_t b) { panels_bf16(m, n0 / 8, a, b, K, dst, path); });
    return;
  }
  at::parallel_for(0, t, 8, [&](int64_t a, int64_t b) {
    thread_local std::vector<float> scratch;
    scratch.resize(static_cast<size_t>(K));
    for (int64_t i = a; i < b; ++i) {
      expand_row(m, n0 + i, scratch.data());
      to_bf16(scratch.data(), dst + i * K, K, path != kRebuildScratch);
    }
  });
}

// Process-wide: prefill products in bf16 (set_prefill_bf16). Off: the exact fp32 GEMM.
std::atomic<bool> g_prefill_bf16{false};
// Process-wide: decode and verify products of panels with int8 activations (set_act8, "int8
// activations" above). Off: the int16 path. Read on every product, so a caller can switch between
// forwards (the A/B tool runs one model both ways).
std::atomic<bool> g_act8{false};
// Process-wide: prefill rows (more than small_m) of int8-capable panels through the int8 row products in
// blocks of this many rows instead of the rebuilt-weight GEMM (set_prefill_int8; 0: off).
std::atomic<int64_t> g_prefill_int8{0};

}  // namespace

namespace dspark {

void set_prefill_bf16(bool on) { g_prefill_bf16.store(on); }
bool prefill_bf16() { return g_prefill_bf16.load(); }

// The bf16 prefill's rebuild path (RebuildPath: 0 fast, 1 rows, 2 scratch); returns the one in effect,
// which is the next one down where this build lacks the path asked for.
int64_t set_prefill_rebuild(int64_t path) {
  TORCH_CHECK(path >= kRebuildFast && path <= kRebuildScratch, "unknown rebuild path ", path);
  g_rebuild.store(rebuild_path_available(static_cast<int>(path)));
  return g_rebuild.load();
}
int64_t prefill_rebuild() { return g_rebuild.load(); }

// Rows [n0, n0 + out.size(0)) of the matrix rebuilt as bf16 into `out` ([rows, K], contiguous) by the
// current rebuild path, exactly as a bf16 prefill product rebuilds its tile: for tests (every path
// against torch's conversion of the file's values) and for timing the rebuild alone.
void rebuild_bf16(const at::Tensor& out, int64_t kind, const at::Tensor& codes, const at::Tensor& scale,
                  const at::Tensor& off, int64_t shift, int64_t n0) {
  TORCH_CHECK(out.dim() == 2 && out.scalar_type() == at::kBFloat16 && out.is_contiguous(), "out must be [rows, K] bf16");
  const int64_t t = out.size(0), K = out.size(1), N = scale.size(0);
  const Mat m = make_mat(kind, codes, scale, off, K, shift);
  TORCH_CHECK(n0 >= 0 && n0 + t <= N, "rows ", n0, "..", n0 + t, " out of ", N);
  TORCH_CHECK(!m.panel || (n0 % 8 == 0 && t % 8 == 0), "panel matrices rebuild whole panels");
  expand_tile_bf16(m, n0, t, K, reinterpret_cast<uint16_t*>(out.data_ptr()));
}

// Whether this build has the int8-activation products (x86 with AVX2), and whether they run on VNNI.
bool act8_available() {
#ifdef DSPARK_ACT8
  return true;
#else
  return false;
#endif
}
bool act8_vnni() {
#ifdef DSPARK_ACT8_VNNI
  return true;
#else
  return false;
#endif
}
// On only where the build has them; returns whether they are now on.
bool set_act8(bool on) {
  g_act8.store(on && act8_available());
  return g_act8.load();
}
bool act8() { return g_act8.load(); }
int64_t set_prefill_int8(int64_t rows) { return g_prefill_int8.exchange(std::max<int64_t>(0, rows)); }
int64_t prefill_int8() { return g_prefill_int8.load(); }
// From how many rows of x two panels run a pass (int8 products with AVX-512); returns the previous value.
int64_t set_act8_pair_min(int64_t rows) { return g_pair_min.exchange(std::max<int64_t>(1, rows)); }

// Whether this build reads fp16 scales (panels of plain types, "fp16 scales" above): F16C.
bool half_scales() {
#if defined(DSPARK_AVX2) && defined(DSPARK_F16)
  return true;
#else
  return false;
#endif
}

// Whether this build has the panel layout's products (kinds 14 / 18): x86 with AVX2 and FMA.
bool panels() {
#ifdef DSPARK_AVX2
  return true;
#else
  return false;
#endif
}

#ifdef DSPARK_ACT8
// A few-row product of a 4-bit or byte panel matrix with int8 activations ("int8 activations" above).
void act8_products(const Mat& m, const float* xp, int64_t M, int64_t K, int64_t N, float* op, const float* xsp,
                   int64_t G8) {
  const int64_t G = K / 32, U = m.scales_per_group, GU = G * U, GU8 = round8(GU);
  at::Tensor xq8 = at::empty({M, K}, at::kChar);
  at::Tensor xsu = at::zeros({M, GU8}, at::kFloat);
  at::Tensor corr = at::empty({M, GU}, at::kInt);
  const bool swap = !kAct8Vnni && m.layout == 8 && !act8_bytes_via_int16(m);  // see panel_dots8_avx2
  quantize_rows8(xp, M, K, xq8.data_ptr<int8_t>(), xsu.data_ptr<float>(), GU8, U, corr.data_ptr<int32_t>(),
                 act8_bias(m), swap);
  const float* xsup = xsu.data_ptr<float>();
  if (act8_bytes_via_int16(m)) {  // the int8 steps widened to int16: the int16 products give the same sums
    const at::Tensor xq16 = xq8.to(at::kShort);
    const int16_t* xqp = xq16.data_ptr<int16_t>();
    at::parallel_for(0, N / 8, 2, [&](int64_t p0, int64_t p1) {
      panel_product(m, xqp, xsup, GU8, M, K, p0, p1, N, op, xsp, G8);
    });
    return;
  }
  const int8_t* xqp = xq8.data_ptr<int8_t>();
  const int32_t* cp = corr.data_ptr<int32_t>();
  at::parallel_for(0, N / 8, 2, [&](int64_t p0, int64_t p1) {
    panel_product8(m, xqp, xsup, GU8, M, K, cp, GU, p0, p1, N, op, xsp, G8);
  });
}
#endif

// out[M, N] = x[M, K] @ W^T
at::Tensor qmm(const at::Tensor& x_in, int64_t kind, const at::Tensor& codes, const at::Tensor& scale,
               const at::Tensor& off, int64_t shift, int64_t small_m) {
  TORCH_CHECK(x_in.dim() == 2, "x must be [M, K]");
  at::Tensor x = x_in.to(at::kFloat).contiguous();
  const int64_t M = x.size(0), K = x.size(1), N = scale.size(0);
  const Mat m = make_mat(kind, codes, scale, off, K, shift);
  at::Tensor out = at::empty({M, N}, x.options());
  const float* xp = x.data_ptr<float>();
  float* op = out.data_ptr<float>();
#ifdef DSPARK_ACT8
  const bool act8_rows = m.panel && g_act8.load(std::memory_order_relaxed);
  const int64_t block = g_prefill_int8.load(std::memory_order_relaxed);
  if (M > small_m && act8_rows && block > 0) {
    // Prefill through the int8 row products, a block of rows at a time: on CPUs without AMX they beat
    // the rebuilt-weight GEMM (bf16 or fp32), and a block's activations stay in cache across panels.
    for (int64_t r0 = 0; r0 < M; r0 += block) {
      const int64_t rows = std::min(block, M - r0);
      at::Tensor xs = m.off != nullptr ? group_sums(xp + r0 * K, rows, K) : at::Tensor();
      act8_products(m, xp + r0 * K, rows, K, N, op + r0 * N, xs.defined() ? xs.data_ptr<float>() : nullptr,
                    round8(K / 32));
    }
    return out;
  }
#endif
  if (M <= small_m) {
#ifdef DSPARK_AVX2
    const int64_t G = K / 32, U = m.scales_per_group;
    at::Tensor xs = m.off != nullptr ? group_sums(xp, M, K) : at::Tensor();
    const float* xsp = xs.defined() ? xs.data_ptr<float>() : nullptr;
    const int64_t GU8 = round8(G * U), G8 = round8(G);
#ifdef DSPARK_ACT8
    if (act8_rows) {
      act8_products(m, xp, M, K, N, op, xsp, G8);
      return out;
    }
#endif
    at::Tensor xq = at::empty({M, K}, at::kShort);
    at::Tensor xsu = at::zeros({M, GU8}, at::kFloat);  // per-unit activation scales, zero-padded
    quantize_rows(xp, M, K, xq.data_ptr<int16_t>(), xsu.data_ptr<float>(), GU8, U);
    const int16_t* xqp = xq.data_ptr<int16_t>();
    const float* xsup = xsu.data_ptr<float>();
    if (m.panel) {
      at::parallel_for(0, N / 8, 2, [&](int64_t p0, int64_t p1) {
        panel_product(m, xqp, xsup, GU8, M, K, p0, p1, N, op, xsp, G8);
      });
    } else {
      at::parallel_for(0, N, 16, [&](int64_t n0, int64_t n1) {
        small_product(m, xqp, xsup, GU8, M, K, n0, n1, N, op, xsp, G8);
      });
    }
#else
    at::parallel_for(0, N, 16, [&](int64_t n0, int64_t n1) { small_product(m, xp, M, K, n0, n1, N, op, nullptr); });
#endif
    return out;
  }
  // Many rows (prefill): rebuild the weight rows in fp32, then a GEMM. Rebuilding costs ~1/40 of the GEMM
  // at 256 rows, but the GEMM wants the whole matrix rather than thin slices of it (plus a copy each):
  // a 256-token prefill of the 0.5B on 2 cores, alternated in one process on a loaded host, took
  // 3.1 s (fastest of 6) with whole matrices against 5.2 s in the old 2 MB tiles. Tiles are capped at
  // 64 MB (a whole vocabulary head would be 545 MB).
  const int64_t tile = std::max<int64_t>(64, (int64_t(64) << 20) / (K * 4)) / 8 * 8;  // whole panels
  const int64_t rows = std::min(tile, N);
  const bool lowp = g_prefill_bf16.load();
  at::Tensor wt = at::from_blob(prefill_tile(lowp ? 0 : rows * K), {lowp ? 0 : rows, K},
                                at::TensorOptions().dtype(at::kFloat));
  float* wp = wt.data_ptr<float>();
  // bf16 (set_prefill_bf16, CPUs with native bf16 products): the file's exact weights and the
  // activations rounded to bf16, ~2.5x the fp32 GEMM's speed on a 2-core AVX512-BF16 host (0.5B, 256
  // rows: 366 vs 148 GFLOP/s). Only prefill: decode and verify rows keep the int16 products above.
  at::Tensor xb, wb, ob;
  if (lowp) {
    xb = kept_buffer(1, M * K, at::kBFloat16).narrow(0, 0, M * K).view({M, K});
    xb.copy_(x);
    wb = kept_buffer(2, rows * K, at::kBFloat16).narrow(0, 0, rows * K).view({rows, K});
    ob = kept_buffer(3, M * rows, at::kBFloat16).narrow(0, 0, M * rows);
  }
  for (int64_t n0 = 0; n0 < N; n0 += tile) {
    const int64_t t = std::min(tile, N - n0);
    if (lowp) {
      // Straight to bf16 (expand_tile_bf16, the path set_prefill_rebuild chose): no fp32 tile (4 bytes a
      // weight written, read back, then 2 written), which was most of a prefill slice's cost once the
      // GEMM ran on AMX.
      expand_tile_bf16(m, n0, t, K, reinterpret_cast<uint16_t*>(wb.data_ptr()));
      at::Tensor wsub = wb.narrow(0, 0, t);
      at::Tensor osub = ob.narrow(0, 0, M * t).view({M, t});
      at::mm_out(osub, xb, wsub.t());
      out.narrow(1, n0, t).copy_(osub);
      continue;
    }
#ifdef DSPARK_AVX2
    if (m.panel) {
      at::parallel_for(0, t / 8, 1, [&](int64_t a, int64_t b) {
        for (int64_t i = a; i < b; ++i) expand_panel(m, n0 / 8 + i, wp + i * 8 * K, K);
      });
    } else
#endif
    at::parallel_for(0, t, 8, [&](int64_t a, int64_t b) {
      for (int64_t i = a; i < b; ++i) expand_row(m, n0 + i, wp + i * K);
    });
    if (t == N) {
      at::mm_out(out, x, wt.t());
    } else {
      out.narrow(1, n0, t).copy_(at::mm(x, wt.narrow(0, 0, t).t()));
    }
  }
  return out;
}

// The fp32 values of rows `ids` (an embedding lookup straight from the quantized table).
at::Tensor qrows(const at::Tensor& ids_in, int64_t kind, const at::Tensor& codes, const at::Tensor& scale,
                 const at::Tensor& off, int64_t shift, int64_t K) {
  at::Tensor ids = ids_in.to(at::kLong).contiguous();
  const Mat m = make_mat(kind, codes, scale, off, K, shift);
  const int64_t R = ids.numel(), N = scale.size(0);
  const int64_t* ip = ids.data_ptr<int64_t>();
  for (int64_t i = 0; i < R; ++i) TORCH_CHECK(ip[i] >= 0 && ip[i] < N, "row id ", ip[i], " out of range");
  at::Tensor out = at::empty({R, K}, scale.options().dtype(at::kFloat));
  float* op = out.data_ptr<float>();
  at::parallel_for(0, R, 16, [&](int64_t a, int64_t b) {
#ifdef DSPARK_AVX2
    if (m.panel) {
      for (int64_t i = a; i < b; ++i) expand_panel(m, ip[i] / 8, op + i * K, K, static_cast<int>(ip[i] % 8));
      return;
    }
#endif
    for (int64_t i = a; i < b; ++i) expand_row(m, ip[i], op + i * K);
  });
  return out;
}

}  // namespace dspark

TORCH_LIBRARY(dspark_q, lib) {
  lib.def("qmm(Tensor x, int kind, Tensor codes, Tensor scale, Tensor off, int shift, int small_m) -> Tensor",
          &dspark::qmm);
  lib.def("qrows(Tensor ids, int kind, Tensor codes, Tensor scale, Tensor off, int shift, int K) -> Tensor",
          &dspark::qrows);
  lib.def("set_prefill_bf16(bool on) -> ()", &dspark::set_prefill_bf16);
  lib.def("prefill_bf16() -> bool", &dspark::prefill_bf16);
  lib.def("set_prefill_rebuild(int path) -> int", &dspark::set_prefill_rebuild);
  lib.def("prefill_rebuild() -> int", &dspark::prefill_rebuild);
  lib.def("rebuild_bf16(Tensor(a!) out, int kind, Tensor codes, Tensor scale, Tensor off, int shift, int n0) -> ()",
          &dspark::rebuild_bf16);
  lib.def("set_act8(bool on) -> bool", &dspark::set_act8);
  lib.def("act8() -> bool", &dspark::act8);
  lib.def("set_prefill_int8(int rows) -> int", &dspark::set_prefill_int8);
  lib.def("prefill_int8() -> int", &dspark::prefill_int8);
  lib.def("act8_available() -> bool", &dspark::act8_available);
  lib.def("act8_vnni() -> bool", &dspark::act8_vnni);
  lib.def("set_act8_pair_min(int rows) -> int", &dspark::set_act8_pair_min);
  lib.def("panels() -> bool", &dspark::panels);
  lib.def("half_scales() -> bool", &dspark::half_scales);
  dspark::register_decoder_layer(lib);
}
