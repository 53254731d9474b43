/* tests/main.c: runs every suite and ends with the one summary line. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "test.h"

int t_pass, t_fail;

double max_rel_err(const float *a, const float *b, size_t n, double floor)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        double s = fabs((double)b[i]) > floor ? fabs((double)b[i]) : floor;
        if (!(d / s <= worst)) /* NaN counts as the worst */
            worst = isnan(d) ? INFINITY : d / s;
    }
    return worst;
}

static const struct {
    const char *name;
    void (*run)(void);
} suites[] = {
    {"kernels", test_kernels}, {"grads", test_grads}, {"model", test_model},
    {"ckpt", test_ckpt},       {"xla", test_xla},     {"tpu", test_tpu},
    {"cli", test_cli},
};

int main(int argc, char **argv)
{
    for (size_t i = 0; i < sizeof suites / sizeof *suites; i++) {
        if (argc > 1 && strcmp(argv[1], suites[i].name))
            continue;
        int p = t_pass, f = t_fail;
        suites[i].run();
        fprintf(stderr, "suite %-8s %d passed, %d failed\n", suites[i].name,
                t_pass - p, t_fail - f);
    }
    printf("%d passed, %d failed\n", t_pass, t_fail);
    return t_fail ? 1 : 0;
}
