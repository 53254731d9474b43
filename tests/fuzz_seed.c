/* tests/fuzz_seed.c: writes the fuzzer's seed corpus: a real checkpoint of
 * a tiny model and a header-only file. Run by `make fuzz`. */
#include <stdio.h>
#include "cmd/ckpt.h"
#include "gpt.h"

int main(void)
{
    Config c = {.vocab = VOCAB, .context = 8, .embed = 4, .mlp = 8, .heads = 2, .layers = 1};
    Model m;
    char err[256];
    model_init(&m, &c, 1);
    const char *key[] = {"format", "heads"}, *val[] = {"gpt-ckpt-1", "2"};
    if (ckpt_save(&m, "tests/fuzz-corpus/tiny.safetensors", key, val, 2, err, sizeof err)) {
        fprintf(stderr, "fuzz_seed: %s\n", err);
        return 1;
    }
    FILE *f = fopen("tests/fuzz-corpus/header.safetensors", "wb");
    static const char hdr[] = "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}  ";
    unsigned char len[8] = {sizeof hdr - 1};
    fwrite(len, 1, 8, f);
    fwrite(hdr, 1, sizeof hdr - 1, f);
    fwrite("\0\0\x80?", 1, 4, f);
    fclose(f);
    model_free(&m);
    return 0;
}
