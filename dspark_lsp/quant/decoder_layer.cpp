// One Qwen2 decoder layer for a decode or verify forward (1 to 16 rows on a KV cache), in C++.
//
// Why: with the weights in the quantized kernel, the rest of a one-token forward of the 0.5B was 1,810
// small tensor operations issued from Python (profiler count: norms, rotary, cache writes, per-row
// attention, residuals), ~12 ms against ~30 ms of matrix products; issued from here they skip Python's
// per-call cost (131 operations left in Python per forward). The operations are the same ATen calls, with the same arguments and in the same order, as
// transformers' Qwen2 layer with the row-wise attention (models/rowwise_attention.py) and the direct
// forward (models/lean_forward.py), so the results are the same bits (tested against transformers).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <vector>

#include "qkernel.h"

namespace {

// Qwen2RMSNorm: weight * (x * rsqrt(mean(x^2) + eps)), fp32 throughout.
at::Tensor rms(const at::Tensor& x, const at::Tensor& weight, double eps) {
  return weight * (x * at::rsqrt(x.pow(2).mean(-1, true) + eps));
}

// q * cos + rotate_half(q) * sin, rotate_half(q) = cat(-q[..., half:], q[..., :half]).
at::Tensor rope(const at::Tensor& q, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = q.size(-1) / 2;
  at::Tensor rot = at::cat({-q.slice(-1, half), q.slice(-1, 0, half)}, -1);
  return (q * cos) + (rot * sin);
}

// A projection through the quantized kernel, as QuantLinear.run computes it.
at::Tensor project(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scale, const at::Tensor& off,
                   const at::Tensor& bias, int64_t kind, int64_t shift, int64_t small_m) {
  at::Tensor out = dspark::qmm(x.reshape({-1, x.size(-1)}), kind, codes, scale, off, shift, small_m);
  if (bias.defined() && bias.numel()) out = out + bias;
  auto shape = x.sizes().vec();
  shape.back() = out.size(-1);
  return out.view(shape);
}

// One query row's attention over its keys, as transformers' sdpa path runs a one-row query (GQA
// through sdpa's enable_gqa, no mask): out [1, 1, heads, head_dim].
at::Tensor one_row(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scaling) {
  at::Tensor out = at::scaled_dot_product_attention(q, k, v, {}, 0.0, false, scaling, true);
  out = out.reshape({out.size(0), -1, q.size(2), v.size(-1)});
  return out.transpose(1, 2).contiguous();
}

// weights: [norm1, qkv codes, qkv scale, qkv off, qkv bias, o codes, o scale, o off, norm2,
//           gate_up codes, gate_up scale, gate_up off, down codes, down scale, down off]
// meta:    [qkv kind, qkv shift, o kind, o shift, gate_up kind, gate_up shift, down kind, down shift,
//           heads, kv heads, head_dim, small_m]
// k_buf / v_buf: the layer's preallocated cache [1, kv heads, capacity, head_dim]; rows are written at
// `past`. row_keys: per row, the key positions it may see (a tree forward), or empty: plain causal rows.
at::Tensor decoder_layer(const at::Tensor& h, at::TensorList w, at::IntArrayRef meta, double eps, double scaling,
                         const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& k_buf,
                         const at::Tensor& v_buf, int64_t past, at::TensorList row_keys) {
  TORCH_CHECK(w.size() == 15 && meta.size() == 12, "decoder_layer: 15 weight tensors and 12 ints expected");
  TORCH_CHECK(h.dim() == 3 && h.size(0) == 1, "decoder_layer: h must be [1, T, D]");
  const int64_t t = h.size(1), nh = meta[8], nkv = meta[9], hd = meta[10], small_m = meta[11];
  TORCH_CHECK(row_keys.empty() || static_cast<int64_t>(row_keys.size()) == t, "one key list per row");
  TORCH_CHECK(k_buf.size(2) >= past + t && v_buf.size(2) >= past + t, "KV buffers too short");

  at::Tensor y = project(rms(h, w[0], eps), w[1], w[2], w[3], w[4], meta[0], meta[1], small_m);
  at::Tensor q = y.slice(-1, 0, nh * hd).view({1, t, -1, hd}).transpose(1, 2);
  at::Tensor k = y.slice(-1, nh * hd, (nh + nkv) * hd).view({1, t, -1, hd}).transpose(1, 2);
  at::Tensor v = y.slice(-1, (nh + nkv) * hd, (nh + 2 * nkv) * hd).view({1, t, -1, hd}).transpose(1, 2);
  q = rope(q, cos, sin);
  k = rope(k, cos, sin);
  k_buf.slice(2, past, past + t).copy_(k);
  v_buf.slice(2, past, past + t).copy_(v);
  const int64_t kv_len = past + t;
  at::Tensor keys = k_buf.slice(2, 0, kv_len), values = v_buf.slice(2, 0, kv_len);

  std::vector<at::Tensor> rows;
  rows.reserve(t);
  for (int64_t i = 0; i < t; ++i) {
    at::Tensor ki, vi;
    if (row_keys.empty()) {  // plain causal: the keys up to this row's own position
      ki = keys.slice(2, 0, past + i + 1);
      vi = values.slice(2, 0, past + i + 1);
    } else {
      const at::Tensor& idx = row_keys[i];
      const int64_t n = idx.numel();
      if (n == kv_len) {
        ki = keys;
        vi = values;
      } else if (n && idx[n - 1].item<int64_t>() == n - 1) {  // a prefix: a view, no copy
        ki = keys.slice(2, 0, n);
        vi = values.slice(2, 0, n);
      } else {
        ki = keys.index_select(2, idx);
        vi = values.index_select(2, idx);
      }
    }
    rows.push_back(one_row(q.slice(2, i, i + 1), ki, vi, scaling));
  }
  at::Tensor a = t == 1 ? rows[0] : at::cat(rows, 1);
  at::Tensor out = h + project(a.reshape({1, t, -1}).contiguous(), w[5], w[6], w[7], {}, meta[2], meta[3], small_m);
  at::Tensor gu = project(rms(out, w[8], eps), w[9], w[10], w[11], {}, meta[4], meta[5], small_m);
  const int64_t inter = gu.size(-1) / 2;
  at::Tensor act = at::silu(gu.slice(-1, 0, inter)) * gu.slice(-1, inter);
  return out + project(act, w[12], w[13], w[14], {}, meta[6], meta[7], small_m);
}

}  // namespace

namespace dspark {

void register_decoder_layer(torch::Library& lib) {
  lib.def("decoder_layer(Tensor h, Tensor[] w, int[] meta, float eps, float scaling, Tensor cos, Tensor sin, "
          "Tensor(a!) k_buf, Tensor(b!) v_buf, int past, Tensor[] row_keys) -> Tensor",
          &decoder_layer);
}

}  // namespace dspark
