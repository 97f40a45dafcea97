// One Qwen2 decoder layer for a decode or verify forward (1 to 16 rows on a KV cache), in C++.
//
// Why: with the weights in the quantized kernel, a one-token forward of the 0.5B spent ~30 ms in matrix
// products and ~12 ms in everything else, most of it the per-call cost of ~1,800 small tensor
// operations (norms, rotary, cache writes, one attention call per row and head group, SiLU, residuals).
// Issuing the same ATen calls from C++ (the previous version of this file) removed Python's share, but
// each ATen call still cost ~10 us of dispatch and allocation, and the one-row attention ~120 us a layer
// (sdpa's math path: a GQA expansion, a softmax and two small bmm per call). Here the row operations are
// plain loops over the rows' own floats, and attention is one pass per (row, query head) over exactly
// the keys that row may see: ~2.5 ms of a 1-row and ~7 ms of a 3-row forward less (measured, see
// bench/results).
//
// Batch invariance, which makes a k-row verify forward give the logits of k one-row forwards bit for bit
// (speculative output == one-token decoding): every value a row produces is computed from that row's own
// inputs by the same sequence of operations, whatever the number of rows; the products are batch
// invariant (qkernel.cpp), and threads split rows and heads here, never one reduction.
//
// The arithmetic is fp32 throughout, in a fixed order that differs from transformers' kernels (their
// reductions are blocked differently and their exp is Sleef's): results are transformers' to ~1e-6
// relative, not bit for bit (tested with a tolerance; the Python layer loop in models/lean_forward.py
// stays bit-identical to transformers for the cases that do not come here).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "qkernel.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define DSPARK_AVX2 1
#endif

namespace {

#ifdef DSPARK_AVX2
// e^x for 8 lanes: x = n ln2 + r with |r| <= ln2 / 2, e^r = 1 + r + r^2 P(r) with P of degree 5 (the
// classic single-precision coefficients, as in Cephes' expf), 2^n put straight into the exponent bits. Inputs are clamped to where
// neither the result nor 2^n overflows or goes subnormal; ~1 ulp against expf on that range.
inline __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // ln2 in two parts, so n * ln2 is subtracted without losing r's low bits.
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#endif

// out[i] = e^(x[i]) for n values. Elements past the last multiple of 8 go through the same 8-lane code
// (padded), so each element's value depends on its own input only.
void exp_n(const float* x, float* out, int64_t n) {
#ifdef DSPARK_AVX2
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, exp8(_mm256_loadu_ps(x + i)));
  if (i < n) {
    alignas(32) float tmp[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t j = i; j < n; ++j) tmp[j - i] = x[j];
    _mm256_store_ps(tmp, exp8(_mm256_load_ps(tmp)));
    for (int64_t j = i; j < n; ++j) out[j] = tmp[j - i];
  }
#else
  for (int64_t i = 0; i < n; ++i) out[i] = std::exp(x[i]);
#endif
}

// Σ a[i] * b[i] in a fixed order (8 lanes, then lanes summed), for n a multiple of 8 or not.
inline float dot(const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  float s = 0.0f;
#ifdef DSPARK_AVX2
  __m256 acc = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  s = hsum8(acc);
#endif
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// y += w * x for n values.
inline void axpy(float w, const float* x, float* y, int64_t n) {
  int64_t i = 0;
#ifdef DSPARK_AVX2
  const __m256 wv = _mm256_set1_ps(w);
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
#endif
  for (; i < n; ++i) y[i] += w * x[i];
}

// Qwen2RMSNorm of each row: weight * (x / sqrt(mean(x^2) + eps)).
void rms_rows(const float* x, const float* weight, float* out, int64_t rows, int64_t d, double eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float* o = out + r * d;
    const float mean = dot(xr, xr, d) / static_cast<float>(d);
    const float inv = 1.0f / std::sqrt(mean + static_cast<float>(eps));
    for (int64_t i = 0; i < d; ++i) o[i] = weight[i] * (xr[i] * inv);
  }
}

// Rotary embedding of one head vector: x * cos + rotate_half(x) * sin, rotate_half(x) = [-x2, x1].
inline void rope_into(const float* x, const float* cos, const float* sin, float* out, int64_t hd) {
  const int64_t half = hd / 2;
  for (int64_t i = 0; i < half; ++i) out[i] = x[i] * cos[i] + (-x[i + half]) * sin[i];
  for (int64_t i = half; i < hd; ++i) out[i] = x[i] * cos[i] + x[i - half] * sin[i];
}

// A projection through the quantized kernel: [rows, K] -> [rows, N] (+ bias when given).
at::Tensor project(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scale, const at::Tensor& off,
                   int64_t kind, int64_t shift, int64_t small_m) {
  return dspark::qmm(x, kind, codes, scale, off, shift, small_m);
}

// y[r, i] += h[r, i]: the residual (float addition is commutative, so h + y's bits).
void add_into(float* y, const float* h, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = h[i] + y[i];
}

struct Attention {
  const float* q;  // [t, nh, hd], rotated
  const float* k;  // the layer's key buffer, [kv heads, capacity, hd] (strides below)
  const float* v;
  int64_t k_head_stride, k_pos_stride, v_head_stride, v_pos_stride;
  int64_t t, nh, group, hd, past;
  float scaling;
  std::vector<const int64_t*> keys;  // per row: the key positions it sees, or empty: causal
  std::vector<int64_t> counts;
};

// What one (row r, query head j) attends over: its key count and positions (idx null: keys 0..n-1, causal),
// its query vector, and its key / value head's buffers.
struct HeadTask {
  int64_t n;
  const int64_t* idx;
  const float* q;
  const float* kb;
  const float* vb;
};

inline HeadTask head_task(const Attention& a, int64_t r, int64_t j) {
  const int64_t kvh = j / a.group;
  return {a.keys.empty() ? a.past + r + 1 : a.counts[r], a.keys.empty() ? nullptr : a.keys[r],
          a.q + (r * a.nh + j) * a.hd, a.k + kvh * a.k_head_stride, a.v + kvh * a.v_head_stride};
}

// out[r, j, :] = softmax(scaling * q[r, j] . K[keys(r)]) @ V[keys(r)] for one (row, query head).
void attend(const Attention& a, int64_t r, int64_t j, float* scores, float* out) {
  const auto [n, idx, q, kb, vb] = head_task(a, r, j);
  for (int64_t i = 0; i < a.hd; ++i) out[i] = 0.0f;
  if (n == 0) return;
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t s = 0; s < n; ++s) {
    const int64_t p = idx ? idx[s] : s;
    scores[s] = dot(q, kb + p * a.k_pos_stride, a.hd) * a.scaling;
    mx = scores[s] > mx ? scores[s] : mx;
  }
  for (int64_t s = 0; s < n; ++s) scores[s] -= mx;
  exp_n(scores, scores, n);
  float total = 0.0f;
  for (int64_t s = 0; s < n; ++s) {
    const int64_t p = idx ? idx[s] : s;
    total += scores[s];
    axpy(scores[s], vb + p * a.v_pos_stride, out, a.hd);
  }
  const float inv = 1.0f / total;
  for (int64_t i = 0; i < a.hd; ++i) out[i] *= inv;
}

#ifdef DSPARK_AVX2
// attend() for a head size of C * 8 floats, with the same arithmetic in the same order, so the same bits:
// each score is dot()'s fma chain over the head's 8-float chunks then hsum8, and each output lane is
// axpy()'s fma over the keys in order. What changes is where the operands live. In attend() every key's
// dot reloads q and is one dependent chain of C fmas (~4 cycles each), and every key's axpy loads and
// stores the whole output vector. Here q and the output stay in registers (C <= 16: 16 + 4 of the 32
// registers AVX-512VL gives 256-bit code), and four keys' dots run as four independent chains. Measured
// (bench/results/2026-12-04-attention/): a 4-row verify forward on 1,024 cached tokens 8% faster on the
// 0.5B, logits identical.
template <int C>
void attend_fixed(const Attention& a, int64_t r, int64_t j, float* scores, float* out) {
  const auto [n, idx, q, kb, vb] = head_task(a, r, j);
  if (n == 0) {
    for (int64_t i = 0; i < C * 8; ++i) out[i] = 0.0f;
    return;
  }
  __m256 qv[C];
  for (int c = 0; c < C; ++c) qv[c] = _mm256_loadu_ps(q + 8 * c);
  const int64_t ks = a.k_pos_stride;
  int64_t s = 0;
  for (; s + 4 <= n; s += 4) {
    const float* k0 = kb + (idx ? idx[s] : s) * ks;
    const float* k1 = kb + (idx ? idx[s + 1] : s + 1) * ks;
    const float* k2 = kb + (idx ? idx[s + 2] : s + 2) * ks;
    const float* k3 = kb + (idx ? idx[s + 3] : s + 3) * ks;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int c = 0; c < C; ++c) {
      a0 = _mm256_fmadd_ps(qv[c], _mm256_loadu_ps(k0 + 8 * c), a0);
      a1 = _mm256_fmadd_ps(qv[c], _mm256_loadu_ps(k1 + 8 * c), a1);
      a2 = _mm256_fmadd_ps(qv[c], _mm256_loadu_ps(k2 + 8 * c), a2);
      a3 = _mm256_fmadd_ps(qv[c], _mm256_loadu_ps(k3 + 8 * c), a3);
    }
    scores[s] = hsum8(a0) * a.scaling;
    scores[s + 1] = hsum8(a1) * a.scaling;
    scores[s + 2] = hsum8(a2) * a.scaling;
    scores[s + 3] = hsum8(a3) * a.scaling;
  }
  for (; s < n; ++s) {
    const float* k0 = kb + (idx ? idx[s] : s) * ks;
    __m256 a0 = _mm256_setzero_ps();
    for (int c = 0; c < C; ++c) a0 = _mm256_fmadd_ps(qv[c], _mm256_loadu_ps(k0 + 8 * c), a0);
    scores[s] = hsum8(a0) * a.scaling;
  }
  float mx = -std::numeric_limits<float>::infinity();
  for (s = 0; s < n; ++s) mx = scores[s] > mx ? scores[s] : mx;
  for (s = 0; s < n; ++s) scores[s] -= mx;
  exp_n(scores, scores, n);
  float total = 0.0f;
  __m256 o[C];
  for (int c = 0; c < C; ++c) o[c] = _mm256_setzero_ps();
  for (s = 0; s < n; ++s) {
    const float* v = vb + (idx ? idx[s] : s) * a.v_pos_stride;
    total += scores[s];
    const __m256 w = _mm256_set1_ps(scores[s]);
    for (int c = 0; c < C; ++c) o[c] = _mm256_fmadd_ps(w, _mm256_loadu_ps(v + 8 * c), o[c]);
  }
  const float inv = 1.0f / total;
  for (int c = 0; c < C; ++c) _mm256_storeu_ps(out + 8 * c, o[c]);
  for (int64_t i = 0; i < C * 8; ++i) out[i] *= inv;
}
#endif

// The attention of one (row, query head): the register-resident version for the head sizes the shipped
// models have (64: the 0.5B, 128: the 1.5B), the generic one otherwise.
void attend_any(const Attention& a, int64_t r, int64_t j, float* scores, float* out) {
#ifdef DSPARK_AVX2
  if (a.hd == 64) return attend_fixed<8>(a, r, j, scores, out);
  if (a.hd == 128) return attend_fixed<16>(a, r, j, scores, out);
#endif
  attend(a, r, j, scores, out);
}

// act[i] = silu(g[i]) * u[i] = g / (1 + e^-g) * u, for the rows of gu = [g | u].
void silu_mul(const float* gu, float* act, int64_t rows, int64_t inter) {
  std::vector<float> e(inter);
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gu + r * 2 * inter;
    const float* u = g + inter;
    float* o = act + r * inter;
    for (int64_t i = 0; i < inter; ++i) e[i] = -g[i];
    exp_n(e.data(), e.data(), inter);
    for (int64_t i = 0; i < inter; ++i) o[i] = (g[i] / (1.0f + e[i])) * u[i];
  }
}

// A group of projections of the same input (q/k/v, or gate/up): one fused kernel operand, or one per
// projection when their layouts could not be fused (e.g. v in Q6_K, q/k in Q4_K). Unfused parts are run
// one after the other and their columns joined, in the fused operand's order: each output column is the
// kernel's product of its own weight row, so the joined result is what a fused call of the same rows
// would give, and the rest of the layer reads it the same way.
at::Tensor project_group(const at::Tensor& x, at::TensorList w, size_t& wi, at::IntArrayRef meta, size_t& mi,
                         int64_t parts, int64_t small_m) {
  std::vector<at::Tensor> outs;
  for (int64_t p = 0; p < parts; ++p, wi += 3, mi += 2)
    outs.push_back(project(x, w[wi], w[wi + 1], w[wi + 2], meta[mi], meta[mi + 1], small_m));
  return parts == 1 ? outs[0] : at::cat(outs, 1);
}

// With nq q/k/v operands (1: fused, 3: q, k, v) and ng gate/up operands (1: fused, 2: gate, up):
// weights: [norm1, (codes, scale, off) x nq, qkv bias (joined), o codes, o scale, o off, norm2,
//           (codes, scale, off) x ng, down codes, down scale, down off]
// meta:    [(kind, shift) x nq, o kind, o shift, (kind, shift) x ng, down kind, down shift,
//           heads, kv heads, head_dim, small_m, nq, ng]
// k_buf / v_buf: the layer's preallocated cache [1, kv heads, capacity, head_dim]; rows are written at
// `past`. row_keys: per row, the key positions it may see (a tree forward), or empty: plain causal rows.
// cos / sin: the rows' rotary tables, [.., t, head_dim] (any leading dims of size 1).
at::Tensor decoder_layer(const at::Tensor& h_in, at::TensorList w, at::IntArrayRef meta, double eps, double scaling,
                         const at::Tensor& cos_in, const at::Tensor& sin_in, const at::Tensor& k_buf,
                         const at::Tensor& v_buf, int64_t past, at::TensorList row_keys) {
  TORCH_CHECK(meta.size() >= 6, "decoder_layer: meta too short");
  const int64_t nq = meta[meta.size() - 2], ng = meta[meta.size() - 1];
  TORCH_CHECK((nq == 1 || nq == 3) && (ng == 1 || ng == 2), "decoder_layer: 1 or 3 q/k/v and 1 or 2 gate/up operands");
  TORCH_CHECK(static_cast<int64_t>(w.size()) == 9 + 3 * (nq + ng) &&
                  static_cast<int64_t>(meta.size()) == 10 + 2 * (nq + ng),
              "decoder_layer: weight or meta count does not match the operand counts");
  const size_t tail = meta.size() - 6;
  TORCH_CHECK(h_in.dim() == 3 && h_in.size(0) == 1 && h_in.scalar_type() == at::kFloat,
              "decoder_layer: h must be fp32 [1, T, D]");
  const int64_t t = h_in.size(1), d = h_in.size(2), nh = meta[tail], nkv = meta[tail + 1], hd = meta[tail + 2],
                small_m = meta[tail + 3];
  TORCH_CHECK(row_keys.empty() || static_cast<int64_t>(row_keys.size()) == t, "one key list per row");
  TORCH_CHECK(k_buf.size(2) >= past + t && v_buf.size(2) >= past + t, "KV buffers too short");
  TORCH_CHECK(k_buf.scalar_type() == at::kFloat && v_buf.scalar_type() == at::kFloat && k_buf.stride(3) == 1 &&
                  v_buf.stride(3) == 1 && nkv > 0 && nh % nkv == 0,
              "decoder_layer: fp32 KV buffers with contiguous head vectors expected");
  const at::Tensor h = h_in.contiguous();
  const at::Tensor cos = cos_in.reshape({-1, hd}).contiguous(), sin = sin_in.reshape({-1, hd}).contiguous();
  TORCH_CHECK(cos.size(0) == t && sin.size(0) == t, "decoder_layer: one rotary row per input row");
  const float* hp = h.data_ptr<float>();
  auto fp = [](const at::Tensor& x) {
    TORCH_CHECK(x.is_contiguous() && x.scalar_type() == at::kFloat, "decoder_layer: fp32 contiguous norms/bias");
    return x.data_ptr<float>();
  };

  // Attention input: norm, fused q/k/v (+ bias), rotary; keys and values written into the cache.
  at::Tensor x = at::empty({t, d}, h.options());
  rms_rows(hp, fp(w[0]), x.data_ptr<float>(), t, d, eps);
  size_t wi = 1, mi = 0;
  at::Tensor y = project_group(x, w, wi, meta, mi, nq, small_m);
  const at::Tensor& qkv_bias = w[wi++];
  const int64_t width = (nh + 2 * nkv) * hd;
  TORCH_CHECK(y.size(1) == width, "decoder_layer: q/k/v widths do not match the head counts");
  float* yp = y.data_ptr<float>();
  if (qkv_bias.numel()) {
    TORCH_CHECK(qkv_bias.numel() == width, "decoder_layer: q/k/v bias size");
    const float* b = fp(qkv_bias);
    for (int64_t r = 0; r < t; ++r) add_into(yp + r * width, b, width);  // b + y: transformers adds y + b
  }
  at::Tensor qrot = at::empty({t, nh, hd}, h.options());
  float* qp = qrot.data_ptr<float>();
  float* kp = k_buf.data_ptr<float>();
  float* vp = v_buf.data_ptr<float>();
  const int64_t ks1 = k_buf.stride(1), ks2 = k_buf.stride(2), vs1 = v_buf.stride(1), vs2 = v_buf.stride(2);
  const float* cp = cos.data_ptr<float>();
  const float* sp = sin.data_ptr<float>();
  for (int64_t r = 0; r < t; ++r) {
    const float* yr = yp + r * width;
    for (int64_t j = 0; j < nh; ++j) rope_into(yr + j * hd, cp + r * hd, sp + r * hd, qp + (r * nh + j) * hd, hd);
    for (int64_t j = 0; j < nkv; ++j) {
      rope_into(yr + (nh + j) * hd, cp + r * hd, sp + r * hd, kp + j * ks1 + (past + r) * ks2, hd);
      const float* vr = yr + (nh + nkv + j) * hd;
      float* vd = vp + j * vs1 + (past + r) * vs2;
      for (int64_t i = 0; i < hd; ++i) vd[i] = vr[i];
    }
  }

  Attention a{qp, kp, vp, ks1, ks2, vs1, vs2, t, nh, nh / nkv, hd, past, static_cast<float>(scaling), {}, {}};
  std::vector<at::Tensor> idx_hold;
  int64_t longest = past + t;
  if (!row_keys.empty()) {
    for (int64_t r = 0; r < t; ++r) {
      at::Tensor idx = row_keys[r].to(at::kLong).contiguous();
      const int64_t* ip = idx.data_ptr<int64_t>();
      for (int64_t s = 0; s < idx.numel(); ++s)
        TORCH_CHECK(ip[s] >= 0 && ip[s] < past + t, "decoder_layer: key position ", ip[s], " out of range");
      a.keys.push_back(ip);
      a.counts.push_back(idx.numel());
      longest = std::max<int64_t>(longest, idx.numel());
      idx_hold.push_back(std::move(idx));
    }
  }
  at::Tensor attn = at::empty({t, nh * hd}, h.options());
  at::Tensor scores = at::empty({t * nh, longest + 8}, h.options());
  float* ap = attn.data_ptr<float>();
  float* scp = scores.data_ptr<float>();
  const int64_t stride_sc = longest + 8;
  at::parallel_for(0, t * nh, 1, [&](int64_t b, int64_t e) {
    for (int64_t task = b; task < e; ++task) {
      const int64_t r = task / nh, j = task % nh;
      attend_any(a, r, j, scp + task * stride_sc, ap + (r * nh + j) * hd);
    }
  });

  // Output projection and residual; MLP: norm, fused gate/up, SiLU(gate) * up, down, residual.
  at::Tensor out = project(attn, w[wi], w[wi + 1], w[wi + 2], meta[mi], meta[mi + 1], small_m);
  wi += 3, mi += 2;
  float* op = out.data_ptr<float>();
  add_into(op, hp, t * d);
  at::Tensor x2 = at::empty({t, d}, h.options());
  rms_rows(op, fp(w[wi++]), x2.data_ptr<float>(), t, d, eps);
  at::Tensor gu = project_group(x2, w, wi, meta, mi, ng, small_m);
  const int64_t inter = gu.size(1) / 2;
  at::Tensor act = at::empty({t, inter}, h.options());
  silu_mul(gu.data_ptr<float>(), act.data_ptr<float>(), t, inter);
  at::Tensor res = project(act, w[wi], w[wi + 1], w[wi + 2], meta[mi], meta[mi + 1], small_m);
  add_into(res.data_ptr<float>(), op, t * d);
  return res.view({1, t, d});
}

}  // namespace

namespace dspark {

void register_decoder_layer(torch::Library& lib) {
  lib.def("decoder_layer(Tensor h, Tensor[] w, int[] meta, float eps, float scaling, Tensor cos, Tensor sin, "
          "Tensor(a!) k_buf, Tensor(b!) v_buf, int past, Tensor[] row_keys) -> Tensor",
          &decoder_layer);
}

}  // namespace dspark
