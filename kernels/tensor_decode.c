/* kernels/tensor_decode.c: the plain-C twins of the sampler's attention:
 * one decoding step over a KV cache (k_attention_step_ref) and each
 * window's last query alone (k_attention_last_ref). Both are, for the
 * queries they compute, the attention of tensor_ref.c's twin, in the
 * order of their own kernel (attend_one in tensor.c). */
#include "kernels/tensor_ref.h"
#include <math.h>
#include <stdlib.h>

/* Appends the new token's k and v to the caches: the common first half of
 * every attention_step path. */
static void kv_append(float *kc /* [nb,tmax,C] */, float *vc /* [nb,tmax,C] */,
                      const float *qkv /* [nb,3C] */, int nb, int pos, int tmax, int C, int H)
{
    int hs = C / H;
    for (int s = 0; s < nb; s++)
        for (int h = 0; h < H; h++)
            for (int d = 0; d < hs; d++) {
                size_t at = ((size_t)s * tmax + pos) * C + hs * h + d;
                kc[at] = qkv[(size_t)s * 3 * C + 3 * hs * h + hs + d];
                vc[at] = qkv[(size_t)s * 3 * C + 3 * hs * h + 2 * hs + d];
            }
}

/* One query of one head against nk keys and values (rows ld apart): the
 * decode step's and the windows' last query's attention, in base e. Its
 * kernel puts 16 channels in the lanes: each score is 16 lane sums of one
 * FMA a channel, then vsum's tree, then the scale; the numerators e^(s -
 * max) are summed in 16 lanes over the keys, then the tree; each output
 * channel is one FMA chain over the keys, then / l. s: [nk] scratch. */
static void attend_one_ref(float *o /* [hs] */, const float *q /* [hs] */,
                           const float *k0 /* [nk], rows ld apart */,
                           const float *v0 /* [nk], rows ld apart */, size_t ld, int nk, int hs,
                           float *s /* [nk] */)
{
    float scale = 1.0f / sqrtf((float)hs), mx = -INFINITY, sum[LANES] = {0};
    for (int j = 0; j < nk; j++) {
        float dot[LANES] = {0};
        for (int d = 0; d < hs; d++)
            dot[d % LANES] = fmaf(q[d], k0[(size_t)j * ld + d], dot[d % LANES]);
        s[j] = lanes_sum(dot) * scale;
        mx = s[j] > mx ? s[j] : mx;
    }
    for (int j = 0; j < nk; j++) {
        s[j] = exp_lane(s[j] - mx);
        sum[j % LANES] += s[j];
    }
    float l = lanes_sum(sum);
    for (int d = 0; d < hs; d++) {
        float acc = 0.0f;
        for (int j = 0; j < nk; j++)
            acc = fmaf(s[j], v0[(size_t)j * ld + d], acc);
        o[d] = acc / l;
    }
}

void k_attention_step_ref(float *out /* [nb,C] */, float *kc /* [nb,tmax,C] */,
                          float *vc /* [nb,tmax,C] */, const float *qkv /* [nb,3C] */, int nb,
                          int pos, int tmax, int C, int H)
{
    int hs = C / H;
    float *s = kmalloc(sizeof(float) * (size_t)(pos + 1)); /* [pos+1] */
    kv_append(kc, vc, qkv, nb, pos, tmax, C, H);
    for (int b = 0; b < nb; b++)
        for (int h = 0; h < H; h++) {
            size_t c0 = (size_t)b * tmax * C + hs * h; /* cache row 0, head's col */
            attend_one_ref(out + (size_t)b * C + hs * h, qkv + (size_t)b * 3 * C + 3 * hs * h,
                           kc + c0, vc + c0, (size_t)C, pos + 1, hs, s);
        }
    free(s);
}

void k_attention_last_ref(float *out /* [B,C] */, const float *qkv /* [B,T,3C] */, int B, int T,
                          int C, int H)
{
    int hs = C / H;
    float *s = kmalloc(sizeof(float) * (size_t)T); /* [T] */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const float *x = qkv + (size_t)b * T * 3 * C + 3 * hs * h; /* head's q, row 0 */
            attend_one_ref(out + (size_t)b * C + hs * h, x + (size_t)(T - 1) * 3 * C, x + hs,
                           x + 2 * hs, 3 * (size_t)C, T, hs, s);
        }
    free(s);
}
