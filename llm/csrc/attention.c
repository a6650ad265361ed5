/* Attention for the native engine's small forwards (decode steps, prompt tails) on a
 * CPU: one task per (sequence, new token, query head) reads its keys and values straight
 * from the paged cache by slot, so the per-layer gather of the whole context into new
 * tensors (two index_selects) and SDPA's set-up, ~150 us a layer in torch at one token,
 * are gone (docs/llm.md, "Attention kernel"). float32 throughout, softmax with the
 * running maximum subtracted: equal to SDPA to float32 rounding.
 */
#include <math.h>

#include "kernels.h"

#if HAVE_X86

/* Below this many (query head x key) pairs in a call, one thread does it all: waking
 * the second costs more than it saves. */
enum { PARALLEL_MIN_PAIRS = 4096 };

/* e^x for x <= 0 (scores minus their maximum), 8 at a time: x = n ln2 + r with
 * |r| <= ln2 / 2, e^r by its Taylor series to r^7 (relative error < 1e-8, under float32's
 * own rounding), times 2^n built in the exponent bits. Below -87 the result is 0. */
TARGET static inline __m256 exp_nonpositive(__m256 x) {
    const __m256 floor_x = _mm256_set1_ps(-87.0f);
    const __m256 underflow = _mm256_cmp_ps(x, floor_x, _CMP_LT_OQ);
    x = _mm256_max_ps(x, floor_x);
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    /* r = x - n ln2, with ln2 split in two so the product stays exact */
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n),
                                                            _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(underflow, _mm256_mul_ps(p, _mm256_castsi256_ps(bits)));
}

/* One query head over keys 0..keys-1: out (D) = softmax(scale q.k_j) . v_j. */
TARGET static void attend(const float *q, const float *k_cache, const float *v_cache,
                          const int64_t *slots, int64_t keys, int64_t row_stride,
                          int64_t head_offset, int64_t D, float scale, float *scores,
                          float *out) {
    const int64_t lanes = D / 8;
    __m256 qv[MAX_HEAD_DIM / 8];
    for (int64_t i = 0; i < lanes; i++) qv[i] = _mm256_loadu_ps(q + 8 * i);
    float top = -INFINITY;
    for (int64_t j = 0; j < keys; j++) {
        const float *k = k_cache + slots[j] * row_stride + head_offset;
        __m256 acc = _mm256_setzero_ps();
        for (int64_t i = 0; i < lanes; i++) acc = _mm256_fmadd_ps(qv[i], _mm256_loadu_ps(k + 8 * i), acc);
        scores[j] = hsum(acc) * scale;
        top = scores[j] > top ? scores[j] : top;
    }
    /* softmax numerators, 8 at a time; `scores` has room for the padding lanes */
    const __m256 top8 = _mm256_set1_ps(top);
    __m256 total8 = _mm256_setzero_ps();
    for (int64_t j = 0; j < keys; j += 8) {
        __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(scores + j), top8));
        if (keys - j < 8) { /* zero the lanes past the last key */
            const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            const __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(keys - j)), lane);
            e = _mm256_and_ps(e, _mm256_castsi256_ps(live));
        }
        _mm256_storeu_ps(scores + j, e);
        total8 = _mm256_add_ps(total8, e);
    }
    const float total = hsum(total8);
    __m256 sum[MAX_HEAD_DIM / 8];
    for (int64_t i = 0; i < lanes; i++) sum[i] = _mm256_setzero_ps();
    for (int64_t j = 0; j < keys; j++) {
        const float *v = v_cache + slots[j] * row_stride + head_offset;
        const __m256 p = _mm256_set1_ps(scores[j]);
        for (int64_t i = 0; i < lanes; i++) sum[i] = _mm256_fmadd_ps(p, _mm256_loadu_ps(v + 8 * i), sum[i]);
    }
    const __m256 inv = _mm256_set1_ps(1.0f / total);
    for (int64_t i = 0; i < lanes; i++) _mm256_storeu_ps(out + 8 * i, _mm256_mul_ps(sum[i], inv));
}

int paged_attention(const float *q, const float *k_cache, const float *v_cache,
                    const int64_t *context_slots, const int64_t *positions, float *out,
                    int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t D, int64_t S,
                    float scale) {
    const int64_t tasks = B * T * H, group = H / Hkv;
    int failed = 0;
#pragma omp parallel if (tasks * S >= PARALLEL_MIN_PAIRS)
    {
        float *scores = calloc((size_t)S + 8, sizeof(float)); /* + a vector's padding */
        if (scores == NULL) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t task = 0; task < tasks; task++) {
            if (scores == NULL) continue;
            const int64_t b = task / (T * H), t = (task / H) % T, h = task % H;
            int64_t keys = positions[b * T + t] + 1;
            keys = keys < S ? keys : S;
            attend(q + task * D, k_cache, v_cache, context_slots + b * S, keys, Hkv * D,
                   (h / group) * D, D, scale, scores, out + task * D);
        }
        free(scores);
    }
    return failed ? -1 : 0;
}

#endif /* HAVE_X86 */
