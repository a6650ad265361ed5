/* RMSNorm of a few rows, float32: out = x / sqrt(mean(x^2) + eps) * weight. torch's CPU
 * rms_norm is a chain of ~7 small ops (~20-30 us for one 576-wide row on this box); a
 * decode step runs 61 of them (docs/llm.md, "Attention kernel"). The sum of squares is
 * accumulated in double: no less accurate than torch's float32 sum. */
#include <math.h>

#include "kernels.h"

#if HAVE_X86

TARGET void rms_norm_rows(const float *x, const float *weight, float *out, int64_t rows,
                          int64_t dim, float eps) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * dim;
        float *o = out + r * dim;
        double squares = 0.0;
        for (int64_t i = 0; i < dim; i++) squares += (double)xr[i] * xr[i];
        const float inv = (float)(1.0 / sqrt(squares / (double)dim + (double)eps));
        const __m256 scale = _mm256_set1_ps(inv);
        int64_t i = 0;
        for (; i + 8 <= dim; i += 8)
            _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(xr + i), scale),
                                                  _mm256_loadu_ps(weight + i)));
        for (; i < dim; i++) o[i] = xr[i] * inv * weight[i];
    }
}

#endif /* HAVE_X86 */
