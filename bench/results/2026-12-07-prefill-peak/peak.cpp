// Raw vpdpbusd (zmm) throughput per thread: 12 independent accumulator chains.
#include <immintrin.h>
#include <chrono>
#include <cstdio>
#include <omp.h>
int main() {
  const long iters = 200000000 / 12;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    long sink = 0;
#pragma omp parallel reduction(+ : sink)
    {
      __m512i a[12];
      for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_epi32(i);
      __m512i w = _mm512_set1_epi8(3), x = _mm512_set1_epi8(5);
      for (long n = 0; n < iters; ++n) {
#pragma GCC unroll 12
        for (int i = 0; i < 12; ++i) a[i] = _mm512_dpbusd_epi32(a[i], w, x);
        __asm__ volatile("" : "+v"(w), "+v"(x));
      }
      for (int i = 0; i < 12; ++i) sink += _mm512_reduce_add_epi32(a[i]);
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double gops = omp_get_max_threads() * (double)iters * 12 * 64 * 2 / s / 1e9;
    if (gops > best) best = gops;
    std::printf("threads %d: %.1f GOPS (int8 multiply-adds x2) sink %ld\n", omp_get_max_threads(), gops, sink);
  }
  return 0;
}
