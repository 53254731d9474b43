/* safetensors.h: the safetensors file format: a strict reader, a writer
 * that saves atomically, and the checksum our files carry. It knows
 * nothing of the model; cmd/ckpt.c maps the model to and from these tensors. */
#ifndef SAFETENSORS_H
#define SAFETENSORS_H
#include <stddef.h>
#include <stdint.h>

enum st_dtype { ST_F32, ST_I32, ST_BF16, ST_F16, ST_F64, ST_I64, ST_I16, ST_I8, ST_U8, ST_BOOL };
const char *st_dtype_name(int dtype); /* "F32", ... */

/* ---- reading ---- */
typedef struct StEntry {
    char *name;
    int dtype, ndim;
    int64_t shape[8];
    size_t begin, end; /* in the data section */
} StEntry;
typedef struct StFile {
    unsigned char *buf; /* whole file */
    size_t size, data_off;
    size_t sum_at; /* where the "checksum" value's 16 hex digits sit in buf; 0: none */
    int n, nmeta;
    StEntry *e;
    char **mkey, **mval;
} StFile;
/* Parses a whole file held in buf (ownership passes to f, even on error).
 * Returns 0, or -1 with a one-line reason in err. It checks the structure
 * only: st_check_checksum checks the bytes. */
int st_parse(StFile *f, unsigned char *buf, size_t size, char *err, size_t elen);
/* Reads, parses and checks the checksum: a damaged or truncated file is
 * refused here, so every command that reads one refuses it. */
int st_load(StFile *f, const char *path, char *err, size_t elen);
void st_free(StFile *f);
const StEntry *st_find(const StFile *f, const char *name);
const char *st_meta(const StFile *f, const char *key);
const void *st_data(const StFile *f, const StEntry *e);
/* The "format" metadata of the files gpt writes: such a file always has a
 * checksum, so one without has lost it to damage. */
#define ST_OUR_FORMAT "gpt-ckpt-1"
/* 0 if the file matches its "checksum" metadata (the whole file, header
 * included; or, in a file written before that, the data) or has none and
 * is not ours (files written by PyTorch); else -1 with the reason in err. */
int st_check_checksum(const StFile *f, char *err, size_t elen);

/* ---- writing ---- */
typedef struct StBuf {
    unsigned char *p;
    size_t n, cap;
} StBuf;
typedef struct StWriter {
    StBuf hdr, data; /* zero-initialise: StWriter w = {0} */
} StWriter;
/* Appends a tensor; the file lists them in the order they are added. */
void st_add(StWriter *w, const char *name, int dtype, int ndim, const int64_t *shape,
            const void *src, size_t bytes);
/* Writes path atomically with metadata: "checksum" (of the whole file,
 * see st_check_checksum) first, then the nmeta key/value pairs. Frees w's buffers. Returns 0, or -1
 * with a one-line reason in err. */
int st_write(StWriter *w, const char *path, const char *const *mkey,
             const char *const *mval, int nmeta, char *err, size_t elen);

#endif
