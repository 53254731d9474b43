/* data.h: where training text comes from. A corpus named on the command
 * line (a file, a directory, a glob, brace-expanded tar shards, pipe:CMD)
 * becomes a list of parts; each part is read as a stream of documents.
 * Tar shards are read in WebDataset's layout, sequentially from a FILE*
 * (which may be a pipe), never whole in memory; every header and document
 * comes with its byte offset in the shard, so that a resumed run can
 * re-open a shard at a sample. It also writes reproducible shards. It
 * knows nothing of the model. */
#ifndef DATA_H
#define DATA_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- naming: patterns to paths ---- */

#define DATA_MAX_PATHS 1000000 /* a pattern may expand to at most this many */

typedef struct DataList {
    char **path; /* [n], each malloc'd */
    int n, cap;
} DataList;
void data_list_add(DataList *l, const char *path);
void data_list_free(DataList *l);

/* Bash's brace expansion: {a..b} and {a..b..step} count (keeping a's or
 * b's zero padding, as bash does), {x,y,z} lists; several braces and
 * nesting; \{ \} \, are literal. A brace with neither a comma nor a range,
 * such as {a}, stays as it is. Appends the expansions to out in bash's
 * order. Returns 0, or -1 with "PATTERN: expands to nothing", "...: expands
 * to more than N paths" or "...: unbalanced brace at offset K" in err. */
int data_expand_braces(const char *pattern, DataList *out, char *err, size_t elen);
/* The regular files under dir, recursively, in byte order of their paths
 * (LC_ALL=C sort); hidden entries (names starting with '.') are skipped,
 * symbolic links to directories are not followed. Empty is an error. */
int data_list_dir(const char *dir, DataList *out, char *err, size_t elen);
/* glob(3)'s matches in byte order; a matched directory is listed as
 * data_list_dir lists it. No match, or only empty directories, is an error. */
int data_glob(const char *pattern, DataList *out, char *err, size_t elen);

/* ---- reading tar shards ---- */

/* One member of an archive: a regular file (other members are skipped). */
typedef struct TarMember {
    const char *path;  /* after pax path= and GNU long names; valid until the next call */
    uint64_t size;     /* bytes of data (after pax size=) */
    uint64_t hdr_off;  /* offset of its first header (a pax or long-name header if any) */
    uint64_t data_off; /* offset of its data */
} TarMember;

/* A streaming reader: POSIX ustar, pax extended headers (path=, size=),
 * GNU long names. Every header's checksum is checked. Writers end an
 * archive with two zero blocks; a zero block followed by the end of the
 * stream is accepted too, one followed by a header is an error, and a
 * stream that stops at a header without them is truncated. */
typedef struct TarReader {
    FILE *f;
    const char *name;  /* for errors: the shard's path, or pipe:CMD */
    uint64_t pos;      /* bytes of the stream consumed */
    int64_t file_size; /* a regular file's size, else -1 (a pipe) */
    TarMember cur;     /* the current member */
    uint64_t left;     /* its unread data bytes */
    uint64_t pad;      /* its padding after them */
    char *path;        /* its path (cur.path) */
    char *long_path;   /* a pending pax path= or GNU long name */
    int64_t long_size; /* a pending pax size=, or -1 */
    int done;          /* 1 after the end blocks, -1 after an error */
    char err[1024];    /* the error, one line naming the shard and offset */
} TarReader;

/* Starts reading f at offset start, which must be a header's offset (0, or
 * a TarMember's hdr_off from an earlier read). f stays the caller's. */
void tar_begin(TarReader *t, FILE *f, const char *name, uint64_t start);
/* The next regular member: 1, 0 at the end of the archive, -1 on error
 * (t->err). Skips what is left of the previous member's data. */
int tar_next(TarReader *t, TarMember *m);
/* Up to n bytes of the current member's data: the count, 0 at its end, -1
 * on error (a truncated member). */
long tar_read(TarReader *t, void *buf, size_t n);
void tar_end(TarReader *t); /* frees the reader's memory (not f) */

/* ---- WebDataset samples ---- */

/* A document: the text member ("KEY.txt" or "KEY.text") of a sample. */
typedef struct WdsDoc {
    const char *key;     /* the sample's key; valid until the next call */
    uint64_t size;       /* bytes of text */
    uint64_t data_off;   /* where they start in the shard */
    uint64_t sample_off; /* offset of the sample's first header: resume here */
} WdsDoc;

/* Groups a shard's members into samples by key. A member's key is its
 * path up to the first '.' of its basename, its extension the rest
 * ("a/b/c.d.e": key "a/b/c", extension "d.e"); consecutive members with
 * one key form a sample; a member whose basename starts with '.' or has
 * no '.' belongs to none. Extensions compare case-insensitively. */
typedef struct WdsReader {
    TarReader tar;
    char *key;         /* the current sample's key */
    uint64_t key_off;  /* its first header */
    int key_has_doc;   /* it has yielded its document */
    long samples;      /* samples seen, with or without a document */
    long skipped;      /* samples without a text member */
    long docs;
} WdsReader;

void wds_begin(WdsReader *w, FILE *f, const char *name, uint64_t start);
/* The next document: 1, 0 at the end, -1 on error (w->tar.err). */
int wds_next(WdsReader *w, WdsDoc *d);
/* Up to n bytes of the current document, as tar_read. */
long wds_read(WdsReader *w, void *buf, size_t n);
void wds_end(WdsReader *w);

/* "a/b/c.d.e" -> key length 5 ("a/b/c"), *ext "d.e"; -1 if it has no key. */
int wds_split(const char *path, const char **ext);

/* ---- a corpus: the parts --data names ---- */

/* A corpus is a list of parts, each a text file (one document) or a tar
 * shard (pipe:CMD is always a shard; a file is one when its name ends in
 * ".tar"). The spec is brace-expanded first; then each word is pipe:CMD,
 * a glob (it has * ? or [), a directory, or a file. */
typedef struct DataSource {
    DataList parts; /* paths, or "pipe:CMD" */
} DataSource;
int data_source_open(DataSource *s, const char *spec, char *err, size_t elen);
int data_part_is_shard(const char *part);
void data_source_free(DataSource *s);

/* One part open for reading: its documents, in order. */
typedef struct DataPart {
    const char *name; /* the part, as in the source */
    FILE *f;
    int is_pipe, is_shard, state; /* state: 0 reading, 1 at the end, -1 failed */
    int yielded;                  /* a text file: its document was returned */
    WdsReader w;                  /* a shard's reader */
    uint64_t size, left;          /* a text file: its size and unread bytes */
    char err[1024];
} DataPart;

/* Opens part `name`; start is a WdsDoc's sample_off to resume at (0: the
 * beginning). A pipe: part runs `sh -c CMD` and reads its stdout. Returns
 * 0, or -1 with p->err. */
int data_part_open(DataPart *p, const char *name, uint64_t start);
/* The next document, as wds_next; a text file is one document whose key
 * is its path. At a pipe's end its command must have exited 0: "pipe:CMD
 * exited with status 3" is an error, not a short part. */
int data_part_next(DataPart *p, WdsDoc *d);
long data_part_read(DataPart *p, void *buf, size_t n);
/* Closes the part; 0, or -1 with p->err if it failed. A pipe closed before
 * its end is not judged by its command's exit (closing may kill it). */
int data_part_close(DataPart *p);

/* ---- writing tar shards ---- */

/* Reproducible ustar: mode 0644, uid and gid 0, no user or group names,
 * mtime 0; a path too long for ustar's name field goes in the prefix field
 * when it splits there, else in a pax header (as does a size of 8 GiB or
 * more). Members are written in the order added: the caller sorts them.
 * The archive is written to PATH.tmp and renamed to PATH when it is
 * whole, so a crash never leaves half a shard under PATH. */
typedef struct TarWriter {
    FILE *f;
    char *path, *tmp;
    uint64_t pos; /* bytes written */
    char err[1024];
} TarWriter;

int tar_write_open(TarWriter *w, const char *path);
/* A member from memory, or from `size` bytes of src read in pieces (src
 * named src_name in errors). 0, or -1 with w->err. */
int tar_write_member(TarWriter *w, const char *path, const void *data, uint64_t size);
int tar_write_file(TarWriter *w, const char *path, FILE *src, const char *src_name,
                   uint64_t size);
/* Ends the archive (two zero blocks), syncs it and renames it into place;
 * after an error, or instead, tar_write_abort removes the temporary file.
 * Both free w's memory. */
int tar_write_close(TarWriter *w);
void tar_write_abort(TarWriter *w);
/* The bytes tar_write_member adds for this path and size. */
uint64_t tar_member_bytes(const char *path, uint64_t size);

#endif
