/* Attention for the native engine's small forwards (decode steps, prompt tails) on a
 * CPU. Each task reads K and V rows straight from the paged cache by slot, so the
 * per-layer gather of the whole context into new tensors (two index_selects) and SDPA's
 * set-up, ~150 us a layer in torch at one token, are gone, and each K row loaded serves
 * every (new token, query head) of its group in the task (docs/llm.md, "Attention
 * kernel"). float32 throughout; softmax with the maximum subtracted: equal to SDPA to
 * float32 rounding.
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

/* Query tokens per task: a task is (sequence, kv head, chunk of new tokens), so a prompt
 * tail splits over the threads while each K/V row, once loaded, serves the chunk's
 * tokens times the group's query heads. */
enum { TOKENS_PER_TASK = 4 };

/* One task: query heads h0..h0+G-1 of tokens t0..t1-1 of one sequence. `lanes` = D / 8 is
 * a compile-time constant where inlined for D = 64, so K rows and sums stay in registers.
 * scores: (rows, width) scratch, rows = (t1 - t0) * G. */
TARGET static inline __attribute__((always_inline)) void attend_group(
    const float *q, const float *k_cache, const float *v_cache, const int64_t *slots,
    const int64_t *positions, int64_t t0, int64_t t1, int64_t H, int64_t G, int64_t h0,
    int64_t row_stride, int64_t head_offset, int64_t S, float scale, float *scores,
    int64_t width, float *out, const int64_t lanes) {
    int64_t keys[TOKENS_PER_TASK], most = 0;
    for (int64_t t = t0; t < t1; t++) {
        const int64_t n = positions[t] + 1;
        keys[t - t0] = n < S ? n : S;
        most = keys[t - t0] > most ? keys[t - t0] : most;
    }
    /* scores: each K row is loaded once for every (token, head) of the task */
    for (int64_t j = 0; j < most; j++) {
        const float *k = k_cache + slots[j] * row_stride + head_offset;
        __m256 kv[MAX_HEAD_DIM / 8];
        for (int64_t i = 0; i < lanes; i++) kv[i] = _mm256_loadu_ps(k + 8 * i);
        for (int64_t t = t0; t < t1; t++) {
            if (j >= keys[t - t0]) continue;
            for (int64_t g = 0; g < G; g++) {
                const float *qr = q + (t * H + h0 + g) * lanes * 8;
                __m256 even = _mm256_setzero_ps(), odd = _mm256_setzero_ps();
                for (int64_t i = 0; i + 1 < lanes; i += 2) {
                    even = _mm256_fmadd_ps(_mm256_loadu_ps(qr + 8 * i), kv[i], even);
                    odd = _mm256_fmadd_ps(_mm256_loadu_ps(qr + 8 * i + 8), kv[i + 1], odd);
                }
                if (lanes & 1)
                    even = _mm256_fmadd_ps(_mm256_loadu_ps(qr + 8 * (lanes - 1)), kv[lanes - 1],
                                           even);
                scores[((t - t0) * G + g) * width + j] = hsum(_mm256_add_ps(even, odd)) * scale;
            }
        }
    }
    for (int64_t t = t0; t < t1; t++) {
        const int64_t n = keys[t - t0];
        for (int64_t g = 0; g < G; g++) {
            float *row = scores + ((t - t0) * G + g) * width;
            /* softmax numerators, 8 at a time; the row has room for the padding lanes */
            float top = -INFINITY;
            for (int64_t j = 0; j < n; j++) top = row[j] > top ? row[j] : top;
            const __m256 top8 = _mm256_set1_ps(top);
            __m256 total8 = _mm256_setzero_ps();
            for (int64_t j = 0; j < n; j += 8) {
                __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(row + j), top8));
                if (n - j < 8) { /* zero the lanes past the last key */
                    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
                    const __m256i live =
                        _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - j)), lane);
                    e = _mm256_and_ps(e, _mm256_castsi256_ps(live));
                }
                _mm256_storeu_ps(row + j, e);
                total8 = _mm256_add_ps(total8, e);
            }
            /* out = sum_j p_j v_j / sum_j p_j, the sums in registers */
            __m256 sum[MAX_HEAD_DIM / 8];
            for (int64_t i = 0; i < lanes; i++) sum[i] = _mm256_setzero_ps();
            for (int64_t j = 0; j < n; j++) {
                const float *v = v_cache + slots[j] * row_stride + head_offset;
                const __m256 p = _mm256_set1_ps(row[j]);
                for (int64_t i = 0; i < lanes; i++)
                    sum[i] = _mm256_fmadd_ps(p, _mm256_loadu_ps(v + 8 * i), sum[i]);
            }
            const __m256 inv = _mm256_set1_ps(1.0f / hsum(total8));
            float *o = out + (t * H + h0 + g) * lanes * 8;
            for (int64_t i = 0; i < lanes; i++)
                _mm256_storeu_ps(o + 8 * i, _mm256_mul_ps(sum[i], inv));
        }
    }
}

TARGET static void attend_group_d64(const float *q, const float *k_cache, const float *v_cache,
                                    const int64_t *slots, const int64_t *positions, int64_t t0,
                                    int64_t t1, int64_t H, int64_t G, int64_t h0,
                                    int64_t row_stride, int64_t head_offset, int64_t S,
                                    float scale, float *scores, int64_t width, float *out) {
    attend_group(q, k_cache, v_cache, slots, positions, t0, t1, H, G, h0, row_stride,
                 head_offset, S, scale, scores, width, out, 8);
}

TARGET static void attend_group_any(const float *q, const float *k_cache, const float *v_cache,
                                    const int64_t *slots, const int64_t *positions, int64_t t0,
                                    int64_t t1, int64_t H, int64_t G, int64_t h0,
                                    int64_t row_stride, int64_t head_offset, int64_t S,
                                    float scale, float *scores, int64_t width, float *out,
                                    int64_t lanes) {
    attend_group(q, k_cache, v_cache, slots, positions, t0, t1, H, G, h0, row_stride,
                 head_offset, S, scale, scores, width, out, lanes);
}

int paged_attention(const float *q, const float *k_cache, const float *v_cache,
                    const int64_t *context_slots, const int64_t *positions, float *out,
                    int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t D, int64_t S,
                    float scale) {
    const int64_t group = H / Hkv, chunks = (T + TOKENS_PER_TASK - 1) / TOKENS_PER_TASK;
    const int64_t tasks = B * Hkv * chunks, width = S + 8;
    int failed = 0;
#pragma omp parallel if (B * T * H * S >= PARALLEL_MIN_PAIRS)
    {
        float *scores = calloc((size_t)(TOKENS_PER_TASK * group * width), sizeof(float));
        if (scores == NULL) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t task = 0; task < tasks; task++) {
            if (scores == NULL) continue;
            const int64_t b = task / (Hkv * chunks), kvh = (task / chunks) % Hkv;
            const int64_t t0 = (task % chunks) * TOKENS_PER_TASK;
            const int64_t t1 = t0 + TOKENS_PER_TASK < T ? t0 + TOKENS_PER_TASK : T;
            const float *qb = q + b * T * H * D;
            float *ob = out + b * T * H * D;
            if (D == 64)
                attend_group_d64(qb, k_cache, v_cache, context_slots + b * S, positions + b * T,
                                 t0, t1, H, group, kvh * group, Hkv * D, kvh * D, S, scale,
                                 scores, width, ob);
            else
                attend_group_any(qb, k_cache, v_cache, context_slots + b * S, positions + b * T,
                                 t0, t1, H, group, kvh * group, Hkv * D, kvh * D, S, scale,
                                 scores, width, ob, D / 8);
        }
        free(scores);
    }
    return failed ? -1 : 0;
}

#endif /* HAVE_X86 */
