/* tests/fuzz_tar.c: libFuzzer target for the tar reader and the WebDataset
 * grouping on any bytes, read through fmemopen as a stream (the pipe path:
 * no file size to check against, every skip a read). Every document is
 * read in odd pieces; then the shard is read again from the last
 * document's sample, as a resumed run would. `make fuzz` builds it with
 * ASan and UBSan and runs it from the seeds in tests/fuzz-tar-corpus/. */
#include <stdint.h>
#include <stdio.h>
#include "data/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Reads every document from start; returns the last one's sample offset. */
static uint64_t read_all(const uint8_t *data, size_t size, uint64_t start)
{
    FILE *f = fmemopen((void *)data, size, "r");
    if (!f)
        return 0;
    WdsReader w;
    WdsDoc d;
    char buf[777];
    uint64_t last = 0;
    wds_begin(&w, f, "fuzz", start);
    while (wds_next(&w, &d) == 1) {
        last = d.sample_off;
        while (wds_read(&w, buf, sizeof buf) > 0)
            ;
    }
    wds_end(&w);
    fclose(f);
    return last;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    uint64_t last = read_all(data, size, 0);
    if (last)
        read_all(data, size, last);
    return 0;
}
