/* kernels/dropout.c: dropout, in plain C only (an experiment's path, not
 * the reference's: vectors would buy little). Which elements survive is
 * a counter hash of (key, site, row, col) (kernels.h states the rule), so
 * the attention twins ask the same question in the backward pass as in
 * the forward and get the same answer on any thread, core or rank. */
#include "kernels/dropout.h"
#include "kernels/base.h"
#include "util/util.h"

int k_dropout_keep(const int32_t *key, long site, int32_t row, long col, float p)
{
    /* the element's id (site < 2^12, row < 2^28, col < 2^24) under the
     * step's key, then splitmix64's finalizer: 24 uniform bits */
    uint64_t k = (uint64_t)(uint32_t)key[0] | (uint64_t)(uint32_t)key[1] << 32;
    uint64_t id = ((uint64_t)site << 52) ^ ((uint64_t)(uint32_t)row << 24) ^ (uint64_t)col;
    uint64_t z = mix64(k ^ id);
    return (uint32_t)(z >> 40) >= (uint32_t)(p * 16777216.0f);
}

void k_dropout(float *y, const float *x, const int32_t *rows, const int32_t *key, long n, long c,
               long site, float p)
{
    float keep_scale = 1.0f / (1.0f - p);
#pragma omp parallel for schedule(static) if (n * c >= PAR_WORK)
    for (long r = 0; r < n; r++)
        for (long j = 0; j < c; j++)
            y[r * c + j] = k_dropout_keep(key, site, rows[r], j, p) ? x[r * c + j] * keep_scale
                                                                      : 0.0f;
}

float kept_scale(const struct drop_mask *dm, int32_t row, int h, int T, int j)
{
    if (!dm)
        return 1.0f;
    return k_dropout_keep(dm->key, dm->site, row, (long)h * T + j, dm->p) ? 1.0f / (1.0f - dm->p)
                                                                          : 0.0f;
}
