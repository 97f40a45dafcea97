// Matrix products straight from GGUF quantized blocks, in fp32, on the file's own codes and scales.
//
// Why a kernel of our own: the stock path dequantizes the file to fp32 once and then streams ~2.5 GB of
// weights per token; torch's int4 kernel wants bf16 activations and bf16 scales and holds 4-bit codes
// only, while most of the default target's file is Q5_0/Q8_0/Q6_K. Here the integer codes and the fp32
// scales (and offsets) of the file are used as they are — no requantization, no rounding of weights —
// and everything else is fp32 arithmetic.
//
// Codes come in two layouts (blocks.py does the conversion once at load time):
//   kind 4: 4-bit codes, two per byte: in each group of 32, byte j holds element j (low nibble) and
//           element j + 16 (high nibble). Q4_K and Q4_1 (and Q4_0, with its zero point in `shift`).
//   kind 8: one int8 per weight, already minus the type's zero point (Q8_0, Q5_*, Q6_K). 5- and 6-bit
//           codes are widened to a byte: on AVX2 unpacking their high-bit planes cost more time than the
//           extra bytes cost bandwidth.
//   scale fp32 [N, G] (or [N, 2G]: a scale per 16 elements, Q6_K); off fp32 [N, G] or empty.
//   weight = scale * (code - shift) + off: what the gguf package's dequantization gives (expand_* below
//   rebuild exactly those values, compiled with -ffp-contract=off, for embeddings and prefill tiles).
//
// Batch invariance (what makes speculative verification equal one-token decoding bit for bit): every
// output element is computed by the same sequence of fp32 operations whatever the number of rows M;
// threads split output columns, never a dot product. Above `small_m` rows (prefill) tiles of rebuilt
// weights go through a regular GEMM instead, which rounds differently; decode and verify forwards stay
// below it.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define DSPARK_AVX2 1
#endif

namespace {

struct Mat {
  const uint8_t* nib;
  const int8_t* q8;
  const float* scale;
  const float* off;
  int64_t G;
  int64_t scales_per_group;
  int32_t shift;
  bool nibbles;
};

// Scalar reference of one group (also the portable path).
inline void expand_group(const Mat& m, int64_t rg, float* w) {
  int32_t q[32];
  if (m.nibbles) {
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
// The layout (nibbles or bytes, offsets, two scales per group) is a template argument throughout, so the
// inner loops carry no branches.
//
// The 32 integer codes of group `rg` (minus the zero point) in four 8-lane registers, widened straight
// from memory (vpmovsxbd / vpmovzxbd), which keeps the shuffle port free.
template <bool NIB>
inline void load_codes(const Mat& m, int64_t rg, __m256i& q0, __m256i& q1, __m256i& q2, __m256i& q3) {
  if (NIB) {
    const uint8_t* nb = m.nib + rg * 16;
    const __m256i lo4 = _mm256_set1_epi32(0x0F);
    const __m256i b0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(nb)));
    const __m256i b1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(nb + 8)));
    q0 = _mm256_and_si256(b0, lo4);
    q1 = _mm256_and_si256(b1, lo4);
    q2 = _mm256_srli_epi32(b0, 4);
    q3 = _mm256_srli_epi32(b1, 4);
    if (m.shift != 0) {  // Q4_0 only (Q4_K and Q4_1 have offsets instead)
      const __m256i sh = _mm256_set1_epi32(m.shift);
      q0 = _mm256_sub_epi32(q0, sh);
      q1 = _mm256_sub_epi32(q1, sh);
      q2 = _mm256_sub_epi32(q2, sh);
      q3 = _mm256_sub_epi32(q3, sh);
    }
  } else {
    const int8_t* c = m.q8 + rg * 32;
    q0 = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c)));
    q1 = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c + 8)));
    q2 = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c + 16)));
    q3 = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c + 24)));
  }
}

// The 32 weights of a group exactly as expand_group builds them, in four 8-lane registers (elements 0-7,
// 8-15, 16-23, 24-31): for embedding rows and prefill tiles.
template <bool NIB, bool OFF, bool TWO>
inline void expand_group_v(const Mat& m, int64_t rg, __m256& w0, __m256& w1, __m256& w2, __m256& w3) {
  __m256i q0, q1, q2, q3;
  load_codes<NIB>(m, rg, q0, q1, q2, q3);
  const __m256 s0 = _mm256_broadcast_ss(m.scale + rg * (TWO ? 2 : 1));
  const __m256 s1 = TWO ? _mm256_broadcast_ss(m.scale + rg * 2 + 1) : s0;
  w0 = _mm256_mul_ps(s0, _mm256_cvtepi32_ps(q0));
  w1 = _mm256_mul_ps(s0, _mm256_cvtepi32_ps(q1));
  w2 = _mm256_mul_ps(s1, _mm256_cvtepi32_ps(q2));
  w3 = _mm256_mul_ps(s1, _mm256_cvtepi32_ps(q3));
  if (OFF) {
    const __m256 o = _mm256_broadcast_ss(m.off + rg);
    w0 = _mm256_add_ps(w0, o);
    w1 = _mm256_add_ps(w1, o);
    w2 = _mm256_add_ps(w2, o);
    w3 = _mm256_add_ps(w3, o);
  }
}


// A group's contribution as s * sum(q * x) (+ offset * sum(x)) rather than sum((s * q + offset) * x): the
// scale is applied once per group instead of to each weight, so the codes are converted once and shared
// by up to 4 rows of x in one pass (measured on one core, Q5_0 4864 x 896: 0.29 / 0.37 / 0.57 / 1.10 ms for
// M = 1 / 2 / 4 / 8, against 0.34 / 0.40 / 0.77 / 1.50 with the weights rebuilt per pass of two rows).
// Each x row keeps one group chain and one 8-lane accumulator, in the same order for every R, so its
// results do not depend on M or on which rows share a pass.
template <bool NIB, bool OFF, bool TWO, int R>
inline void row_dots_factored(const Mat& m, int64_t n, const float* x, int64_t K, const float* xsum, float* out,
                              int64_t N) {
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  const int64_t base = n * m.G;
  for (int64_t g = 0; g < m.G; ++g) {
    const int64_t rg = base + g;
    __m256i q0, q1, q2, q3;
    load_codes<NIB>(m, rg, q0, q1, q2, q3);
    const __m256 f0 = _mm256_cvtepi32_ps(q0), f1 = _mm256_cvtepi32_ps(q1);
    const __m256 f2 = _mm256_cvtepi32_ps(q2), f3 = _mm256_cvtepi32_ps(q3);
    const __m256 s0 = _mm256_broadcast_ss(m.scale + rg * (TWO ? 2 : 1));
    for (int r = 0; r < R; ++r) {
      const float* xp = x + r * K + g * 32;
      if (TWO) {  // Q6_K: a scale per 16 elements, two chains
        const __m256 s1 = _mm256_broadcast_ss(m.scale + rg * 2 + 1);
        __m256 h0 = _mm256_mul_ps(f0, _mm256_loadu_ps(xp));
        h0 = _mm256_fmadd_ps(f1, _mm256_loadu_ps(xp + 8), h0);
        __m256 h1 = _mm256_mul_ps(f2, _mm256_loadu_ps(xp + 16));
        h1 = _mm256_fmadd_ps(f3, _mm256_loadu_ps(xp + 24), h1);
        acc[r] = _mm256_fmadd_ps(s0, h0, acc[r]);
        acc[r] = _mm256_fmadd_ps(s1, h1, acc[r]);
      } else {
        __m256 h = _mm256_mul_ps(f0, _mm256_loadu_ps(xp));
        h = _mm256_fmadd_ps(f1, _mm256_loadu_ps(xp + 8), h);
        h = _mm256_fmadd_ps(f2, _mm256_loadu_ps(xp + 16), h);
        h = _mm256_fmadd_ps(f3, _mm256_loadu_ps(xp + 24), h);
        acc[r] = _mm256_fmadd_ps(s0, h, acc[r]);
      }
      if (OFF) {  // + offset * (sum of the group's x), the sums made once per call (8 lanes per group)
        acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(m.off + rg), _mm256_loadu_ps(xsum + (r * m.G + g) * 8), acc[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    __m128 t = _mm_add_ps(_mm256_castps256_ps128(acc[r]), _mm256_extractf128_ps(acc[r], 1));
    t = _mm_add_ps(t, _mm_movehl_ps(t, t));
    t = _mm_add_ss(t, _mm_shuffle_ps(t, t, 1));
    out[r * N + n] = _mm_cvtss_f32(t);
  }
}

// Weight rows in blocks of NBLOCK, the rows of x in passes of 4 inside a block: a pass's 4 rows of x stay
// in L1 while the block's codes (<= 64 x 4864 bytes) stay in L2, so a long prompt does not stream x from
// memory once per weight row. The order changes nothing in any single output's arithmetic.
constexpr int64_t NBLOCK = 64;

template <bool NIB, bool OFF, bool TWO>
void small_product_t(const Mat& m, const float* xp, int64_t M, int64_t K, int64_t n0, int64_t n1, int64_t N,
                     float* op, const float* xsum) {
  const int64_t G = m.G;
  for (int64_t b0 = n0; b0 < n1; b0 += NBLOCK) {
    const int64_t b1 = std::min(n1, b0 + NBLOCK);
    int64_t r = 0;
    for (; r + 4 <= M; r += 4)
      for (int64_t n = b0; n < b1; ++n)
        row_dots_factored<NIB, OFF, TWO, 4>(m, n, xp + r * K, K, xsum + r * G * 8, op + r * N, N);
    const float* xs = xsum + r * G * 8;
    const float* xr = xp + r * K;
    float* orow = op + r * N;
    switch (M - r) {
      case 3: for (int64_t n = b0; n < b1; ++n) row_dots_factored<NIB, OFF, TWO, 3>(m, n, xr, K, xs, orow, N); break;
      case 2: for (int64_t n = b0; n < b1; ++n) row_dots_factored<NIB, OFF, TWO, 2>(m, n, xr, K, xs, orow, N); break;
      case 1: for (int64_t n = b0; n < b1; ++n) row_dots_factored<NIB, OFF, TWO, 1>(m, n, xr, K, xs, orow, N); break;
      default: break;
    }
  }
}

template <bool NIB, bool OFF, bool TWO>
void expand_row_t(const Mat& m, int64_t row, float* w) {
  for (int64_t g = 0; g < m.G; ++g) {
    __m256 w0, w1, w2, w3;
    expand_group_v<NIB, OFF, TWO>(m, row * m.G + g, w0, w1, w2, w3);
    float* d = w + g * 32;
    _mm256_storeu_ps(d, w0);
    _mm256_storeu_ps(d + 8, w1);
    _mm256_storeu_ps(d + 16, w2);
    _mm256_storeu_ps(d + 24, w3);
  }
}

// Dispatch once per call on the layout (3 flags -> 8 instantiations).
#define DSPARK_DISPATCH(fn, m, ...)                                                 \
  do {                                                                              \
    const bool nib_ = (m).nibbles, off_ = (m).off != nullptr, two_ = (m).scales_per_group == 2; \
    if (nib_) {                                                                     \
      if (off_) { if (two_) fn<true, true, true>(__VA_ARGS__); else fn<true, true, false>(__VA_ARGS__); } \
      else { if (two_) fn<true, false, true>(__VA_ARGS__); else fn<true, false, false>(__VA_ARGS__); } \
    } else {                                                                        \
      if (off_) { if (two_) fn<false, true, true>(__VA_ARGS__); else fn<false, true, false>(__VA_ARGS__); } \
      else { if (two_) fn<false, false, true>(__VA_ARGS__); else fn<false, false, false>(__VA_ARGS__); } \
    }                                                                               \
  } while (0)

void small_product(const Mat& m, const float* xp, int64_t M, int64_t K, int64_t n0, int64_t n1, int64_t N,
                   float* op, const float* xsum) {
  DSPARK_DISPATCH(small_product_t, m, m, xp, M, K, n0, n1, N, op, xsum);
}

// Per row of x and per group: the 8-lane partial sums x[0:8] + x[8:16] + x[16:24] + x[24:32], which the
// offset term of affine types multiplies (fixed order, so the same for every M).
at::Tensor group_sums(const float* xp, int64_t M, int64_t K) {
  const int64_t G = K / 32;
  at::Tensor xs = at::empty({M, G, 8}, at::kFloat);
  float* d = xs.data_ptr<float>();
  for (int64_t r = 0; r < M; ++r)
    for (int64_t g = 0; g < G; ++g) {
      const float* x = xp + r * K + g * 32;
      __m256 t = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(x), _mm256_loadu_ps(x + 8)),
                               _mm256_add_ps(_mm256_loadu_ps(x + 16), _mm256_loadu_ps(x + 24)));
      _mm256_storeu_ps(d + (r * G + g) * 8, t);
    }
  return xs;
}

inline void expand_row(const Mat& m, int64_t row, float* w) { DSPARK_DISPATCH(expand_row_t, m, m, row, w); }
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
  TORCH_CHECK(kind == 4 || kind == 8, "unknown code layout ", kind);
  TORCH_CHECK(scale.dim() == 2 && scale.scalar_type() == at::kFloat && scale.is_contiguous(), "bad scales");
  TORCH_CHECK(codes.is_contiguous(), "codes must be contiguous");
  Mat m{};
  m.G = K / 32;
  const int64_t N = scale.size(0);
  m.scales_per_group = scale.size(1) / m.G;
  TORCH_CHECK(scale.size(1) == m.G * m.scales_per_group && (m.scales_per_group == 1 || m.scales_per_group == 2),
              "bad scale shape");
  m.scale = scale.data_ptr<float>();
  m.off = off.numel() ? off.data_ptr<float>() : nullptr;
  TORCH_CHECK(off.numel() == 0 || (off.numel() == N * m.G && off.scalar_type() == at::kFloat), "bad offsets");
  m.shift = static_cast<int32_t>(shift);
  m.nibbles = kind == 4;
  if (m.nibbles) {
    TORCH_CHECK(codes.numel() == N * K / 2 && codes.scalar_type() == at::kByte, "bad 4-bit codes");
    m.nib = codes.data_ptr<uint8_t>();
    m.q8 = nullptr;
  } else {
    TORCH_CHECK(codes.numel() == N * K && codes.scalar_type() == at::kChar, "bad 8-bit codes");
    m.q8 = codes.data_ptr<int8_t>();
    m.nib = nullptr;
  }
  return m;
}

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
  if (M <= small_m) {
#ifdef DSPARK_AVX2
    at::Tensor xs = m.off != nullptr ? group_sums(xp, M, K) : at::Tensor();
    const float* xsp = xs.defined() ? xs.data_ptr<float>() : nullptr;
#else
    const float* xsp = nullptr;
#endif
    at::parallel_for(0, N, 16, [&](int64_t n0, int64_t n1) { small_product(m, xp, M, K, n0, n1, N, op, xsp); });
    return out;
  }
  // Many rows: rebuild a tile of weight rows, then one GEMM for the tile (compute-bound either way).
  const int64_t tile = std::max<int64_t>(64, (int64_t(2) << 20) / (K * 4));
  at::Tensor wt = at::empty({std::min(tile, N), K}, x.options());
  float* wp = wt.data_ptr<float>();
  for (int64_t n0 = 0; n0 < N; n0 += tile) {
    const int64_t t = std::min(tile, N - n0);
    at::parallel_for(0, t, 8, [&](int64_t a, int64_t b) {
      for (int64_t i = a; i < b; ++i) expand_row(m, n0 + i, wp + i * K);
    });
    out.narrow(1, n0, t).copy_(at::mm(x, wt.narrow(0, 0, t).t()));
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
  at::Tensor out = at::empty({R, K}, scale.options());
  float* op = out.data_ptr<float>();
  at::parallel_for(0, R, 16, [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) expand_row(m, ip[i], op + i * K);
  });
  return out;
}

}  // namespace

TORCH_LIBRARY(dspark_q, lib) {
  lib.def("qmm(Tensor x, int kind, Tensor codes, Tensor scale, Tensor off, int shift, int small_m) -> Tensor", &qmm);
  lib.def("qrows(Tensor ids, int kind, Tensor codes, Tensor scale, Tensor off, int shift, int K) -> Tensor", &qrows);
}
