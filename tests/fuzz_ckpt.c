/* tests/fuzz_ckpt.c: libFuzzer target for the checkpoint loader: the
 * safetensors parser, config inference and weight loading, on any bytes.
 * `make fuzz` builds it with ASan and UBSan and runs it for a bounded time
 * from the seed corpus in tests/fuzz-corpus/. */
#include <stdlib.h>
#include <string.h>
#include "cmd/ckpt.h"
#include "gpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    unsigned char *buf = malloc(size ? size : 1);
    memcpy(buf, data, size);
    StFile f;
    char err[256];
    if (st_parse(&f, buf, size, err, sizeof err) == 0) {
        Config c;
        if (ckpt_config(&f, &c, 2) == 0) {
            Model m;
            model_init(&m, &c, 0);
            ckpt_load_weights(&m, &f, 1, err, sizeof err);
            model_free(&m);
        }
    }
    st_free(&f);
    return 0;
}
