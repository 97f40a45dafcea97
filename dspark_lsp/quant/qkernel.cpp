// Matrix products straight from GGUF quantized blocks, in fp32, with the file's own weight values.
//
// Why a kernel of our own: the stock path dequantizes the file to fp32 once and then streams ~2.5 GB of
// weights per token; torch's int4 kernel wants bf16 activations and bf16 scales and holds 4-bit codes
// only, while most of the default target's file is Q5_0/Q8_0/Q6_K. Here every weight is rebuilt from its
// integer code and its group's fp32 scale (and offset) right where it is used — exactly the value the
// gguf package's dequantization gives — and multiplied in fp32.
//
// Codes come in two layouts (blocks.py does the conversion once at load time):
//   kind 4: 4-bit codes, two per byte: in each group of 32, byte j holds element j (low nibble) and
//           element j + 16 (high nibble). Q4_K and Q4_1.
//   kind 8: one int8 per weight, already minus the type's zero point (Q8_0, Q5_*, Q6_K, Q4_0). 5- and
//           6-bit codes are widened to a byte: on AVX2 unpacking their high-bit planes cost more time than
//           the extra bytes cost bandwidth.
//   scale fp32 [N, G] (or [N, 2G]: a scale per 16 elements, Q6_K); off fp32 [N, G] or empty.
//   value = scale * float(code - shift) (+ off), rounded as numpy rounds it (compiled -ffp-contract=off).
//
// Batch invariance (what makes speculative verification equal one-token decoding bit for bit): every
// output element is one dot product computed in the same order whatever the number of rows M — 32 lanes of
// fused multiply-adds over K, then a fixed reduction tree; threads split output columns, never a dot.
// Above `small_m` rows (prefill) tiles of rebuilt rows go through a regular GEMM instead, which rounds
// differently; decode and verify forwards stay below it.
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
// The same 32 values in four 8-lane registers (elements 0-7, 8-15, 16-23, 24-31). Codes are widened
// straight from memory (vpmovsxbd / vpmovzxbd), which keeps the shuffle port free.
inline void expand_group_v(const Mat& m, int64_t rg, __m256 out[4]) {
  __m256i q[4];
  if (m.nibbles) {
    const uint8_t* nb = m.nib + rg * 16;
    const __m256i lo4 = _mm256_set1_epi32(0x0F);
    const __m256i b0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(nb)));
    const __m256i b1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(nb + 8)));
    q[0] = _mm256_and_si256(b0, lo4);
    q[1] = _mm256_and_si256(b1, lo4);
    q[2] = _mm256_srli_epi32(b0, 4);
    q[3] = _mm256_srli_epi32(b1, 4);
  } else {
    const int8_t* c = m.q8 + rg * 32;
    for (int i = 0; i < 4; ++i)
      q[i] = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c + 8 * i)));
  }
  if (m.shift != 0) {
    const __m256i sh = _mm256_set1_epi32(m.shift);
    for (int i = 0; i < 4; ++i) q[i] = _mm256_sub_epi32(q[i], sh);
  }
  const __m256 s0 = _mm256_set1_ps(m.scale[rg * m.scales_per_group]);
  const __m256 s1 = _mm256_set1_ps(m.scale[rg * m.scales_per_group + m.scales_per_group - 1]);
  out[0] = _mm256_mul_ps(s0, _mm256_cvtepi32_ps(q[0]));
  out[1] = _mm256_mul_ps(s0, _mm256_cvtepi32_ps(q[1]));
  out[2] = _mm256_mul_ps(s1, _mm256_cvtepi32_ps(q[2]));
  out[3] = _mm256_mul_ps(s1, _mm256_cvtepi32_ps(q[3]));
  if (m.off != nullptr) {
    const __m256 o = _mm256_set1_ps(m.off[rg]);
    for (int i = 0; i < 4; ++i) out[i] = _mm256_add_ps(out[i], o);
  }
}

// 32 lanes -> one float, in the same fixed order as the scalar tree below.
inline float reduce32(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 u = _mm256_add_ps(a0, a2), v = _mm256_add_ps(a1, a3);  // j += j + 16
  const __m256 t = _mm256_add_ps(u, v);                                // j += j + 8
  __m128 r = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));  // j += j + 4
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));                         // j += j + 2
  r = _mm_add_ss(r, _mm_shuffle_ps(r, r, 1));                     // j += j + 1
  return _mm_cvtss_f32(r);
}

// One weight row against R rows of x, the row rebuilt group by group in registers; every x row has its
// own 32 lanes, so its result does not depend on R or on which rows share the pass.
template <int R>
inline void row_dots(const Mat& m, int64_t n, const float* x, int64_t K, float* res) {
  __m256 acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < 4; ++i) acc[r][i] = _mm256_setzero_ps();
  for (int64_t g = 0; g < m.G; ++g) {
    __m256 w[4];
    expand_group_v(m, n * m.G + g, w);
    for (int r = 0; r < R; ++r) {
      const float* xp = x + r * K + g * 32;
      for (int i = 0; i < 4; ++i) acc[r][i] = _mm256_fmadd_ps(w[i], _mm256_loadu_ps(xp + 8 * i), acc[r][i]);
    }
  }
  for (int r = 0; r < R; ++r) res[r] = reduce32(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
}

inline void expand_row(const Mat& m, int64_t row, float* w) {
  for (int64_t g = 0; g < m.G; ++g) {
    __m256 v[4];
    expand_group_v(m, row * m.G + g, v);
    for (int i = 0; i < 4; ++i) _mm256_storeu_ps(w + g * 32 + 8 * i, v[i]);
  }
}

void small_product(const Mat& m, const float* xp, int64_t M, int64_t K, int64_t n0, int64_t n1, int64_t N,
                   float* op) {
  for (int64_t n = n0; n < n1; ++n) {
    float res[3];
    int64_t r = 0;
    // Passes of up to 3 rows: 3 x 4 accumulators + 4 weight registers fit AVX2's 16.
    for (; r + 3 <= M; r += 3) {
      row_dots<3>(m, n, xp + r * K, K, res);
      for (int i = 0; i < 3; ++i) op[(r + i) * N + n] = res[i];
    }
    const int64_t left = M - r;
    if (left == 2) row_dots<2>(m, n, xp + r * K, K, res);
    if (left == 1) row_dots<1>(m, n, xp + r * K, K, res);
    for (int64_t i = 0; i < left; ++i) op[(r + i) * N + n] = res[i];
  }
}
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
                   float* op) {
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
    at::parallel_for(0, N, 16, [&](int64_t n0, int64_t n1) { small_product(m, xp, M, K, n0, n1, N, op); });
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
