// What the kernel library's translation units share (qkernel.cpp: the quantized products;
// decoder_layer.cpp: a whole decoder layer for decode and verify rows, built on them).
#pragma once

#include <ATen/ATen.h>
#include <torch/library.h>

namespace dspark {

// out[M, N] = x[M, K] @ W^T, W in the kernel's code layout (see qkernel.cpp).
at::Tensor qmm(const at::Tensor& x_in, int64_t kind, const at::Tensor& codes, const at::Tensor& scale,
               const at::Tensor& off, int64_t shift, int64_t small_m);

// The fp32 values of rows `ids` of a quantized table.
at::Tensor qrows(const at::Tensor& ids_in, int64_t kind, const at::Tensor& codes, const at::Tensor& scale,
                 const at::Tensor& off, int64_t shift, int64_t K);

// Adds decoder_layer to the library (defined in decoder_layer.cpp).
void register_decoder_layer(torch::Library& lib);

}  // namespace dspark
