/* CPU kernels of the native LLM engine (module llm._kernels; Python side: llm/kernels.py).
 * Built with -O3 -fopenmp for any x86-64; the kernels themselves are compiled for
 * AVX2 + FMA + F16C (TARGET) and run only where cpu_supported() says so. OpenMP is the
 * libgomp torch already loaded, so these share torch's thread pool and thread count.
 */
#ifndef VOXRELAY_KERNELS_H
#define VOXRELAY_KERNELS_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86 1
#define TARGET __attribute__((target("avx2,fma,f16c")))
#else
#define HAVE_X86 0
#endif

enum { QK = 32, Q4_1_BYTES = 20, Q8_0_BYTES = 34, MAX_K = 16384, MAX_HEAD_DIM = 256 };

#if HAVE_X86
TARGET static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#endif

/* Whether this CPU runs the kernels (AVX2, FMA, F16C). */
int cpu_supported(void);

/* out (M, N) = x (M, K) @ W.T, W (N, K) in Q4_1 or Q8_0 blocks (block_bytes 20 or 34).
 * Returns 0, or -1 when out of memory. */
int blocks_matmul(int block_bytes, const float *x, const uint8_t *w, float *out, int64_t M,
                  int64_t N, int64_t K);

/* Causal attention of T new tokens per sequence over the paged KV cache, float32.
 * q (B, T, H, D); k_cache, v_cache (slots, Hkv, D); context_slots (B, S): the cache slot
 * of position j of sequence b; positions (B, T): a query at position p attends to keys
 * 0..p. out (B, T, H, D). Returns 0, or -1 when out of memory. */
int paged_attention(const float *q, const float *k_cache, const float *v_cache,
                    const int64_t *context_slots, const int64_t *positions, float *out,
                    int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t D, int64_t S,
                    float scale);

/* out (rows, dim) = x / sqrt(mean(x^2) + eps) * weight, float32; single-threaded (a
 * decode step's rows are a few hundred floats). */
void rms_norm_rows(const float *x, const float *weight, float *out, int64_t rows, int64_t dim,
                   float eps);

#endif
