/* device/ops.c: the op table read: each op's name, operand counts,
 * printable attributes and FLOP count, from its row (device/ops_gen.c,
 * generated from ops.def; the FLOP counters are device/flops.c's). The
 * profile, the timeline and the graph dumps read it. */
#include "device/ops.h"
#include <stddef.h>
#include <stdio.h>

const struct kop_info *kop_info(int op) { return &kop_table[op]; }

unsigned kop_writes(int op) { return kop_table[op].written; }

const char *kop_name(int op)
{
    return op >= 0 && op < KOP_COUNT ? kop_table[op].name : "?";
}

double kop_flops(const struct kinstr *k) { return kop_table[k->op].flops(k); }

void kop_format_attrs(char *buf, size_t n, int op, const union kattr *a)
{
    size_t used = 0;
    buf[0] = 0;
    for (const struct kop_attr *f = kop_table[op].attr; f->name; f++) {
        const char *at = (const char *)a + f->offset;
        int w = f->is_float ? snprintf(buf + used, n - used, "%s%s=%g", used ? ", " : "",
                                       f->name, *(const float *)at)
                            : snprintf(buf + used, n - used, "%s%s=%ld", used ? ", " : "",
                                       f->name, *(const long *)at);
        if (w < 0 || (size_t)w >= n - used)
            return;
        used += (size_t)w;
    }
}
