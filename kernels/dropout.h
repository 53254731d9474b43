/* kernels/dropout.h: the dropout mask of the attention twins (dropout.c
 * says which elements survive; tensor_ref.c and fused_ref.c apply it). */
#ifndef KERNELS_DROPOUT_H
#define KERNELS_DROPOUT_H
#include <stdint.h>

/* Dropout on the attention probabilities, or none when NULL. */
struct drop_mask {
    const int32_t *key, *rows; /* [2], [B*T] */
    long site;
    float p;
};

/* What survives of P_ij, head h, query row `row`: 1/(1-p) or 0; 1 without
 * dropout (so the products that use it keep their bits). */
float kept_scale(const struct drop_mask *dm, int32_t row, int h, int T, int j);

#endif
