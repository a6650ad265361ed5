/* Matmuls straight on GGUF's quantized blocks (Q4_1, Q8_0), for the native engine's
 * small forwards on a CPU: decode steps and prompt tails (docs/llm.md, "Session 7").
 *
 * Why: a decode step reads every weight once, so on a CPU it is bound by memory
 * bandwidth. The file's own blocks are 0.625 (Q4_1) and 1.06 (Q8_0) bytes per weight,
 * against 2 for bfloat16 and 4 for float32. Each block is unpacked in registers to the
 * exact values the dequantizer produces (integers q with the block's d, m), and the
 * activations are quantized once per call to int16 per 32-block (error at most 1/65534
 * of the block's largest value), so each block's dot product is two integer
 * multiply-adds (vpmaddwd) and one float FMA.
 *
 * ggml layouts (blocks of 32 weights along a row):
 *   Q4_1: fp16 d, fp16 m, 16 bytes; byte j holds element j (low nibble) and j+16 (high);
 *         w = d * q + m.
 *   Q8_0: fp16 d, 32 int8; w = d * q.
 */
#include "kernels.h"

#if HAVE_X86

TARGET static inline float half(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* Activations, quantized once per call: each 32-block of a row to int16 with its own
 * scale (amax / 32767, so the error is at most 1/65534 of the block's largest value),
 * plus the block's exact float sum (for Q4_1's offset term). */
typedef struct {
    int16_t *q;   /* (M, K) */
    float *scale; /* (M, K / 32) */
    float *sum;   /* (M, K / 32) */
} Activations;

TARGET static void quantize_rows(const float *x, int64_t M, int64_t K, Activations *a) {
    const int64_t nb = K / QK;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < M * nb; i++) {
        const float *xb = x + i * QK;
        __m256 v[4], amax = _mm256_setzero_ps(), total = _mm256_setzero_ps();
        for (int j = 0; j < 4; j++) {
            v[j] = _mm256_loadu_ps(xb + 8 * j);
            amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[j]));
            total = _mm256_add_ps(total, v[j]);
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float block_max = _mm_cvtss_f32(m4);
        a->scale[i] = block_max / 32767.0f;
        a->sum[i] = hsum(total);
        const __m256 inv = _mm256_set1_ps(block_max > 0.0f ? 32767.0f / block_max : 0.0f);
        __m256i w[4];
        for (int j = 0; j < 4; j++) w[j] = _mm256_cvtps_epi32(_mm256_mul_ps(v[j], inv));
        /* packs works within 128-bit lanes; the permute puts elements back in order. */
        const __m256i lo = _mm256_permute4x64_epi64(_mm256_packs_epi32(w[0], w[1]), 0xD8);
        const __m256i hi = _mm256_permute4x64_epi64(_mm256_packs_epi32(w[2], w[3]), 0xD8);
        _mm256_storeu_si256((__m256i *)(a->q + i * QK), lo);
        _mm256_storeu_si256((__m256i *)(a->q + i * QK + 16), hi);
    }
}

/* One weight block as int16: elements 0..15 and 16..31; its scale and offset. */
typedef struct {
    __m256i lo, hi;
    float d, m;
} Block;

/* Two fp16 at p, p + 2 as floats, in one conversion. */
TARGET static inline __m128 halves(const uint8_t *p) {
    int32_t bits;
    memcpy(&bits, p, 4);
    return _mm_cvtph_ps(_mm_cvtsi32_si128(bits));
}

TARGET static inline Block unpack_q4_1(const uint8_t *blk) {
    const __m128i nibble = _mm_set1_epi8(0x0F);
    const __m128i q = _mm_loadu_si128((const __m128i *)(blk + 4));
    const __m128 dm = halves(blk);
    Block b = {_mm256_cvtepu8_epi16(_mm_and_si128(q, nibble)),
               _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(q, 4), nibble)),
               _mm_cvtss_f32(dm), _mm_cvtss_f32(_mm_movehdup_ps(dm))};
    return b;
}

TARGET static inline Block unpack_q8_0(const uint8_t *blk) {
    Block b = {_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 2))),
               _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 18))), half(blk),
               0.0f};
    return b;
}

/* sum over the block of q_w * q_x, 8 partial sums (exact in int32 and in float:
 * |partial| <= 4 * 128 * 32767 < 2^24). */
TARGET static inline __m256 block_dot(const Block *b, const int16_t *xq) {
    const __m256i p = _mm256_add_epi32(
        _mm256_madd_epi16(b->lo, _mm256_loadu_si256((const __m256i *)xq)),
        _mm256_madd_epi16(b->hi, _mm256_loadu_si256((const __m256i *)(xq + 16))));
    return _mm256_cvtepi32_ps(p);
}

typedef Block (*unpack_fn)(const uint8_t *);

enum { ROWS_TILE = 4 }; /* activation rows per pass over a weight row */

/* Adds block b of one weight row, times activation rows m0.., to the sums. */
TARGET static inline __attribute__((always_inline)) void add_block(
    unpack_fn unpack, int block_bytes, const Activations *a, const uint8_t *wr, int64_t nb,
    int64_t b, int64_t m0, const int tile, __m256 *acc, float *offset) {
    const Block blk = unpack(wr + b * block_bytes);
    for (int i = 0; i < tile; i++) {
        const int64_t xb = (m0 + i) * nb + b;
        const __m256 scale = _mm256_set1_ps(blk.d * a->scale[xb]);
        acc[i] = _mm256_fmadd_ps(block_dot(&blk, a->q + xb * QK), scale, acc[i]);
        offset[i] += blk.m * a->sum[xb]; /* constant-folded away for Q8_0 */
    }
}

/* out[m, r] for `tile` activation rows m0.. and one weight row:
 *   sum_b d_b sx_mb (q_b . qx_mb) + m_b sum(x_mb).
 * Always inlined with a constant `tile`, so the sums live in registers; even and odd
 * blocks add into separate sums to keep two FMA chains in flight. */
TARGET static inline __attribute__((always_inline)) void tile_row(
    unpack_fn unpack, int block_bytes, const Activations *a, const uint8_t *wr, float *out,
    int64_t N, int64_t nb, int64_t r, int64_t m0, const int tile) {
    __m256 even[ROWS_TILE], odd[ROWS_TILE];
    float offset[ROWS_TILE];
    for (int i = 0; i < tile; i++) {
        even[i] = odd[i] = _mm256_setzero_ps();
        offset[i] = 0.0f;
    }
    int64_t b = 0;
    for (; b + 1 < nb; b += 2) {
        add_block(unpack, block_bytes, a, wr, nb, b, m0, tile, even, offset);
        add_block(unpack, block_bytes, a, wr, nb, b + 1, m0, tile, odd, offset);
    }
    if (b < nb) add_block(unpack, block_bytes, a, wr, nb, b, m0, tile, even, offset);
    for (int i = 0; i < tile; i++)
        out[(m0 + i) * N + r] = hsum(_mm256_add_ps(even[i], odd[i])) + offset[i];
}

/* Output columns [r0, r1) of out = x @ W.T. Inlined into one function per format, so
 * `unpack` is a direct, inlined call. */
TARGET static inline __attribute__((always_inline)) void rows_kernel(unpack_fn unpack, int block_bytes, const Activations *a,
                               const uint8_t *w, float *out, int64_t M, int64_t N,
                               int64_t K, int64_t r0, int64_t r1) {
    const int64_t nb = K / QK;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *wr = w + r * nb * block_bytes;
        for (int64_t m0 = 0; m0 < M; m0 += ROWS_TILE) {
            switch (M - m0 < ROWS_TILE ? M - m0 : ROWS_TILE) {
            case 1: tile_row(unpack, block_bytes, a, wr, out, N, nb, r, m0, 1); break;
            case 2: tile_row(unpack, block_bytes, a, wr, out, N, nb, r, m0, 2); break;
            case 3: tile_row(unpack, block_bytes, a, wr, out, N, nb, r, m0, 3); break;
            default: tile_row(unpack, block_bytes, a, wr, out, N, nb, r, m0, 4); break;
            }
        }
    }
}

TARGET static void rows_q4_1(const Activations *a, const uint8_t *w, float *out, int64_t M,
                             int64_t N, int64_t K, int64_t r0, int64_t r1) {
    rows_kernel(unpack_q4_1, Q4_1_BYTES, a, w, out, M, N, K, r0, r1);
}

TARGET static void rows_q8_0(const Activations *a, const uint8_t *w, float *out, int64_t M,
                             int64_t N, int64_t K, int64_t r0, int64_t r1) {
    rows_kernel(unpack_q8_0, Q8_0_BYTES, a, w, out, M, N, K, r0, r1);
}

int blocks_matmul(int block_bytes, const float *x, const uint8_t *w,
                    float *out, int64_t M, int64_t N, int64_t K) {
    const int64_t nb = K / QK;
    Activations a;
    a.q = malloc((size_t)(M * K) * sizeof(int16_t));
    a.scale = malloc((size_t)(M * nb) * sizeof(float));
    a.sum = malloc((size_t)(M * nb) * sizeof(float));
    if (a.q == NULL || a.scale == NULL || a.sum == NULL) {
        free(a.q);
        free(a.scale);
        free(a.sum);
        return -1;
    }
    quantize_rows(x, M, K, &a);
    /* Static contiguous chunks: each thread streams its own slice of the weight. */
#pragma omp parallel
    {
#ifdef _OPENMP
        const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
#else
        const int64_t threads = 1, t = 0;
#endif
        const int64_t r0 = N * t / threads, r1 = N * (t + 1) / threads;
        if (block_bytes == Q4_1_BYTES)
            rows_q4_1(&a, w, out, M, N, K, r0, r1);
        else
            rows_q8_0(&a, w, out, M, N, K, r0, r1);
    }
    free(a.q);
    free(a.scale);
    free(a.sum);
    return 0;
}

#endif /* HAVE_X86 */
