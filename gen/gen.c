/* gen/gen.c: writes the C that device/ops.def and kernels/kernels.def
 * define, as plain C a reader can grep: every enum constant, function,
 * type and table row made from a line of those files is spelled out in a
 * committed file, never made by the preprocessor.
 *
 *   gen SRC OUT   reads SRC/device/ops.def, SRC/kernels/kernels.def and
 *                 SRC/tensor.c and SRC/kernels/reading.c, writes the files below into OUT (the same
 *                 paths), and prints each path it made, one a line.
 *
 * From ops.def: device/ops_gen.h (enum kop, the operand indices),
 * device/ops_gen.c (the op table) and device/exec_gen.c (the point-wise
 * ops' executors, the dispatch table). From kernels.def:
 * kernels/tensor_impl_gen.h (the kernel types, struct kernels),
 * kernels/kernels_gen.h and kernels/entry_gen.c (the entry points that
 * pass their arguments through) and the rows of tensor.c's table and of
 * the reading mode's (kernels/reading.c), between each file's "make gen:
 * begin" and "make gen: end" marks.
 *
 * `make gen` runs it as `build/gen/gen . .`; a file whose text is already
 * the generated one is left untouched. make test's gen suite runs it into
 * a scratch folder and names every committed file that differs. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_ARGS 16   /* arguments of one line of a .def file */
#define MAX_ROWS 64   /* lines of one .def file */
#define WIDTH 100     /* the project's line length */
#define COMMENT_WIDTH 78 /* and its comments' */

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "gen: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        die("%s: %s", path, strerror(errno));
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    for (int c; (c = fgetc(f)) != EOF;)
        fputc(c, mem);
    fclose(f);
    fclose(mem);
    return text;
}

/* ---- reading a .def file ----
 * A .def file is comments and rows: NAME(argument, argument, ...), an
 * argument being any text with its parentheses balanced, commas inside
 * parentheses or comments not splitting it. */

struct row {
    char kind[32];           /* OP, POINTWISE, ATTRS, KERNEL, ... */
    char *arg[MAX_ARGS];     /* whitespace runs made one space */
    int nargs;
    char *comment;           /* the comment just before the row, or NULL */
    int line;
};

/* The end of the comment that starts at p (at its slash). */
static const char *comment_end(const char *p, const char *path, int line)
{
    const char *end = strstr(p + 2, "*/");
    if (!end)
        die("%s:%d: a comment that does not end", path, line);
    return end + 2;
}

/* Text [from, to) with each run of white space one space, trimmed. */
static char *squeeze(const char *from, const char *to)
{
    char *s = malloc((size_t)(to - from) + 1), *o = s;
    for (const char *p = from; p < to; p++) {
        int space = *p == ' ' || *p == '\t' || *p == '\n';
        if (!space)
            *o++ = *p;
        else if (o > s && o[-1] != ' ')
            *o++ = ' ';
    }
    while (o > s && o[-1] == ' ')
        o--;
    *o = 0;
    return s;
}

/* Splits [from, to) at its top-level commas into out; returns the count. */
static int split(const char *from, const char *to, char **out, int max, const char *path,
                 int line)
{
    int n = 0, depth = 0;
    const char *start = from;
    for (const char *p = from; p <= to; p++) {
        if (p < to && p[0] == '/' && p[1] == '*') {
            p = comment_end(p, path, line) - 1;
            continue;
        }
        depth += p < to && *p == '(';
        depth -= p < to && *p == ')';
        if (p == to || (*p == ',' && depth == 0)) {
            if (n == max)
                die("%s:%d: more than %d items", path, line, max);
            out[n++] = squeeze(start, p);
            start = p + 1;
        }
    }
    return n == 1 && !out[0][0] ? 0 : n;
}

/* The rows of a .def file, with the comment before each. */
static int read_rows(const char *path, struct row *rows)
{
    char *text = read_text(path);
    const char *p = text, *comment = NULL, *comment_to = NULL;
    int n = 0, line = 1;
    while (*p) {
        if (*p == '\n' || *p == ' ' || *p == '\t') {
            line += *p++ == '\n';
        } else if (p[0] == '/' && p[1] == '*') {
            comment = p;
            p = comment_to = comment_end(p, path, line);
            for (const char *q = comment; q < p; q++)
                line += *q == '\n';
        } else if ((*p >= 'A' && *p <= 'Z') || *p == '_') {
            struct row *r = &rows[n];
            if (n == MAX_ROWS)
                die("%s: more than %d rows", path, MAX_ROWS);
            size_t len = strspn(p, "ABCDEFGHIJKLMNOPQRSTUVWXYZ_");
            if (len >= sizeof r->kind || p[len] != '(')
                die("%s:%d: expected a row, NAME(...)", path, line);
            snprintf(r->kind, sizeof r->kind, "%.*s", (int)len, p);
            const char *open = p + len, *q = open;
            for (int depth = 0; *q; q++) {
                if (q[0] == '/' && q[1] == '*')
                    q = comment_end(q, path, line) - 1;
                else if (*q == '(')
                    depth++;
                else if (*q == ')' && --depth == 0)
                    break;
            }
            if (!*q)
                die("%s:%d: %s( without its )", path, line, r->kind);
            r->nargs = split(open + 1, q, r->arg, MAX_ARGS, path, line);
            /* a banner (---- name ----) heads a section, not the row */
            int own = comment && strncmp(comment, "/* ----", 7);
            r->comment = own ? strndup(comment, (size_t)(comment_to - comment)) : NULL;
            r->line = line;
            comment = NULL;
            for (; p <= q; p++)
                line += *p == '\n';
            n++;
        } else {
            die("%s:%d: unexpected '%c' (only comments and rows)", path, line, *p);
        }
    }
    free(text);
    return n;
}

/* The items of a parenthesized list argument, "(A, B)". */
static int list_items(const struct row *r, int i, char **out, int max, const char *path)
{
    const char *a = r->arg[i];
    size_t len = strlen(a);
    if (len < 2 || a[0] != '(' || a[len - 1] != ')')
        die("%s:%d: argument %d of %s must be a list in parentheses", path, r->line, i + 1,
            r->kind);
    return split(a + 1, a + len - 1, out, max, path, r->line);
}

/* ---- what the files say ---- */

#define MAX_OPERANDS 8

struct op {
    const char *NAME, *name, *attrs, *flops;
    char *in[MAX_OPERANDS], *out[MAX_OPERANDS];
    int nin, nout, pointwise;
    char *written[MAX_OPERANDS]; /* the inputs it writes in place (a WRITES row) */
    int nwritten;
};

struct attrs {
    const char *member;
    char *field[MAX_ARGS]; /* "long n", "float p" */
    int nfields;
};

struct kernel {
    const char *name;
    char *param[MAX_ARGS], *arg[MAX_ARGS];
    int nparams, nargs;
    int fixed;            /* its entry points are written by hand (entry.c) */
    const char *optional; /* a member of this row's type some backends leave NULL */
    const char *comment;
};

static struct op ops[MAX_ROWS];
static struct attrs attrs[MAX_ROWS];
static struct kernel kernels[MAX_ROWS];
static int nops, nattrs, nkernels;

static void want_args(const struct row *r, int n, const char *path)
{
    if (r->nargs != n)
        die("%s:%d: %s takes %d arguments, not %d", path, r->line, r->kind, n, r->nargs);
}

/* A count argument that must equal its list's length. */
static int count_of(const struct row *r, int count, int list, char **items, const char *path)
{
    int n = list_items(r, list, items, MAX_OPERANDS, path);
    if (atoi(r->arg[count]) != n)
        die("%s:%d: %s says %s operands and lists %d", path, r->line, r->arg[0], r->arg[count],
            n);
    return n;
}

static void read_ops(const char *path)
{
    static struct row rows[MAX_ROWS];
    int n = read_rows(path, rows);
    for (int i = 0; i < n; i++) {
        struct row *r = &rows[i];
        struct op *o = &ops[nops];
        if (!strcmp(r->kind, "OP")) {
            want_args(r, 8, path);
            *o = (struct op){.NAME = r->arg[0], .name = r->arg[1], .attrs = r->arg[2],
                             .flops = r->arg[3]};
            o->nin = count_of(r, 4, 5, o->in, path);
            o->nout = count_of(r, 6, 7, o->out, path);
            nops++;
        } else if (!strcmp(r->kind, "POINTWISE")) {
            want_args(r, 5, path);
            *o = (struct op){.NAME = r->arg[0], .name = r->arg[1], .attrs = "elementwise",
                             .flops = "flops_elementwise", .pointwise = 1};
            o->nin = count_of(r, 2, 3, o->in, path);
            o->nout = list_items(r, 4, o->out, MAX_OPERANDS, path);
            if (o->nout != 1)
                die("%s:%d: a POINTWISE op has one output", path, r->line);
            nops++;
        } else if (!strcmp(r->kind, "WRITES")) {
            want_args(r, 2, path);
            struct op *w = NULL;
            for (int j = 0; j < nops; j++)
                if (!strcmp(ops[j].NAME, r->arg[0]))
                    w = &ops[j];
            if (!w)
                die("%s:%d: WRITES names %s, which no OP row before it defines", path, r->line,
                    r->arg[0]);
            w->nwritten = list_items(r, 1, w->written, MAX_OPERANDS, path);
            for (int k = 0; k < w->nwritten; k++) {
                int known = 0;
                for (int j = 0; j < w->nin; j++)
                    known |= !strcmp(w->in[j], w->written[k]);
                if (!known)
                    die("%s:%d: %s has no input %s", path, r->line, w->NAME, w->written[k]);
            }
        } else if (!strcmp(r->kind, "ATTRS")) {
            struct attrs *a = &attrs[nattrs++];
            a->member = r->arg[0];
            a->nfields = r->nargs - 1;
            for (int f = 0; f < a->nfields; f++) {
                a->field[f] = r->arg[f + 1];
                if (strncmp(a->field[f], "long ", 5) && strncmp(a->field[f], "float ", 6))
                    die("%s:%d: '%s': a field is 'long name' or 'float name'", path, r->line,
                        a->field[f]);
            }
        } else {
            die("%s:%d: unknown row %s", path, r->line, r->kind);
        }
    }
}

static void read_kernels(const char *path)
{
    static struct row rows[MAX_ROWS];
    int n = read_rows(path, rows);
    for (int i = 0; i < n; i++) {
        struct row *r = &rows[i];
        struct kernel *k = &kernels[nkernels++];
        *k = (struct kernel){.name = r->arg[0], .comment = r->comment};
        if (!strcmp(r->kind, "KERNEL") || !strcmp(r->kind, "KERNEL_FIXED")) {
            want_args(r, 3, path);
            k->nparams = list_items(r, 1, k->param, MAX_ARGS, path);
            k->nargs = list_items(r, 2, k->arg, MAX_ARGS, path);
            k->fixed = !strcmp(r->kind, "KERNEL_FIXED");
        } else if (!strcmp(r->kind, "KERNEL_OPTIONAL")) {
            want_args(r, 2, path);
            k->optional = r->arg[1];
        } else {
            die("%s:%d: unknown row %s", path, r->line, r->kind);
        }
    }
}

/* ---- writing ---- */

static const char *out_dir;
static FILE *out;
static char *out_text, out_path[512];
static size_t out_len;

/* A comment of text, its words wrapped at COMMENT_WIDTH. */
static void put_comment(const char *text)
{
    int col = fprintf(out, "/*");
    for (const char *w = text; *w;) {
        int len = (int)strcspn(w, " ");
        if (col + 1 + len > COMMENT_WIDTH)
            col = fprintf(out, "\n *") - 1;
        col += fprintf(out, " %.*s", len, w);
        w += len + strspn(w + len, " ");
    }
    fprintf(out, " */\n");
}

/* Starts the file at path (under OUT), with the note every generated file
 * begins with: what it is, that it is made, from what, and how. */
static void begin(const char *path, const char *what, const char *from)
{
    char note[1024];
    snprintf(out_path, sizeof out_path, "%s", path);
    out = open_memstream(&out_text, &out_len);
    snprintf(note, sizeof note,
             "%s: %s. Generated from %s by gen/gen.c (`make gen`): edit that, not this file, "
             "then run make gen; make test's gen suite fails while this file is stale.",
             path, what, from);
    put_comment(note);
}

static void mkdirs(char *path)
{
    for (char *s = strchr(path + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = 0;
        if (mkdir(path, 0777) && errno != EEXIST)
            die("%s: %s", path, strerror(errno));
        *s = '/';
    }
}

/* Writes the file begun (unless it already holds that text) and names it. */
static void end(void)
{
    char full[1024];
    fclose(out);
    snprintf(full, sizeof full, "%s/%s", out_dir, out_path);
    FILE *old = fopen(full, "rb");
    char *was = old ? read_text(full) : NULL;
    if (old)
        fclose(old);
    if (!was || strcmp(was, out_text)) {
        mkdirs(full);
        FILE *f = fopen(full, "wb");
        if (!f || fwrite(out_text, 1, out_len, f) != out_len || fclose(f))
            die("%s: cannot write", full);
    }
    printf("%s\n", out_path);
    free(was);
    free(out_text);
}

/* head item, item, ..., item tail: the items wrapped at WIDTH, each
 * continuation lined up under the first item. */
static void put_list(const char *head, char *const *items, int n, const char *tail)
{
    int col = fprintf(out, "%s", head), indent = col;
    for (int i = 0; i < n; i++) {
        const char *sep = i + 1 < n ? "," : tail;
        int w = (int)(strlen(items[i]) + strlen(sep));
        if (i > 0 && col + 1 + w > WIDTH) {
            col = fprintf(out, "\n%*s", indent, "") - 1;
        } else if (i > 0) {
            col += fprintf(out, " ");
        }
        col += fprintf(out, "%s%s", items[i], sep);
    }
    if (!n)
        fprintf(out, "%s", tail);
    fprintf(out, "\n");
}

/* ---- from ops.def ---- */

static void ops_header(void)
{
    begin("device/ops_gen.h",
          "every op's number and its operands' indices (device/ops.h includes it)",
          "device/ops.def");
    fprintf(out, "#ifndef DEVICE_OPS_GEN_H\n#define DEVICE_OPS_GEN_H\n\n");
    fprintf(out, "/* The ops, in ops.def's order. */\nenum kop {\n");
    for (int i = 0; i < nops; i++)
        fprintf(out, "    KOP_%s,\n", ops[i].NAME);
    fprintf(out, "    KOP_COUNT\n};\n\n");
    fprintf(out, "/* Each op's operands by name, in its line's order, then their count:\n"
                 " * NAME_IN_X ... NAME_NIN, NAME_OUT_Y ... NAME_NOUT. */\n");
    for (int i = 0; i < nops; i++) {
        const struct op *o = &ops[i];
        char *names[MAX_OPERANDS + 1];
        for (int side = 0; side < 2; side++) {
            int n = side ? o->nout : o->nin;
            const char *kind = side ? "OUT" : "IN";
            for (int j = 0; j < n; j++)
                asprintf(&names[j], "%s_%s_%s", o->NAME, kind, side ? o->out[j] : o->in[j]);
            asprintf(&names[n], "%s_N%s", o->NAME, kind);
            put_list("enum { ", names, n + 1, " };");
            for (int j = 0; j <= n; j++)
                free(names[j]);
        }
    }
    fprintf(out, "\n#endif\n");
    end();
}

static void ops_table(void)
{
    begin("device/ops_gen.c", "the op table, kop_table: a row per op of device/ops.def",
          "device/ops.def");
    fprintf(out, "#include \"device/flops.h\"\n#include \"device/ops.h\"\n#include <stddef.h>\n\n");
    fprintf(out, "/* What the dumps and the profile print of each attribute struct\n"
                 " * (ops.def's ATTRS rows): name, offset in union kattr, is_float; a NULL\n"
                 " * name ends it. */\n");
    for (int i = 0; i < nattrs; i++) {
        const struct attrs *a = &attrs[i];
        fprintf(out, "static const struct kop_attr %s_attrs[] = {\n", a->member);
        for (int f = 0; f < a->nfields; f++) {
            const char *field = strchr(a->field[f], ' ') + 1;
            fprintf(out, "    {\"%s\", offsetof(union kattr, %s.%s), %d},\n", field, a->member,
                    field, !strncmp(a->field[f], "float ", 6));
        }
        fprintf(out, "    {NULL, 0, 0},\n};\n\n");
    }
    fprintf(out, "/* name, operand counts, printable attributes, FLOP count, inputs written */\n");
    fprintf(out, "const struct kop_info kop_table[KOP_COUNT] = {\n");
    for (int i = 0; i < nops; i++) {
        const struct op *o = &ops[i];
        int known = 0;
        for (int a = 0; a < nattrs; a++)
            known |= !strcmp(attrs[a].member, o->attrs);
        if (!known)
            die("device/ops.def: %s's attributes %s have no ATTRS row", o->NAME, o->attrs);
        char head[64], *cells[6];
        snprintf(head, sizeof head, "    [KOP_%s] = {", o->NAME);
        asprintf(&cells[0], "\"%s\"", o->name);
        asprintf(&cells[1], "%s_NIN", o->NAME);
        asprintf(&cells[2], "%s_NOUT", o->NAME);
        asprintf(&cells[3], "%s_attrs", o->attrs);
        asprintf(&cells[4], "%s", o->flops);
        char written[512] = "0";
        for (int k = 0; k < o->nwritten; k++)
            snprintf(written + (k ? strlen(written) : 0), sizeof written - (k ? strlen(written) : 0),
                     "%s1u << %s_IN_%s", k ? " | " : "", o->NAME, o->written[k]);
        asprintf(&cells[5], "%s", written);
        put_list(head, cells, 6, "},");
        for (int c = 0; c < 6; c++)
            free(cells[c]);
    }
    fprintf(out, "};\n");
    end();
}

/* k_name(output, inputs..., n): a point-wise op's executor. */
static void pointwise_exec(const struct op *o)
{
    char *operands[MAX_OPERANDS + 2], head[64];
    int n = 0;
    asprintf(&operands[n++], "k->out[%s_OUT_%s]", o->NAME, o->out[0]);
    for (int j = 0; j < o->nin; j++)
        asprintf(&operands[n++], "k->in[%s_IN_%s]", o->NAME, o->in[j]);
    asprintf(&operands[n++], "k->attr.elementwise.n");
    fprintf(out, "static void exec_%s(const struct kinstr *k)\n{\n", o->name);
    snprintf(head, sizeof head, "    k_%s(", o->name);
    put_list(head, operands, n, ");");
    fprintf(out, "}\n\n");
    for (int j = 0; j < n; j++)
        free(operands[j]);
}

static void dispatch(void)
{
    begin("device/exec_gen.c",
          "dispatch: the point-wise ops' executors, and every op's in a table by its number",
          "device/ops.def");
    fprintf(out, "#include \"device/exec.h\"\n#include \"device/exec_side.h\"\n");
    fprintf(out, "#include \"tensor.h\"\n\n");
    fprintf(out, "/* A POINTWISE row's executor: its kernel takes the output, the inputs in\n"
                 " * the row's order, and n. */\n");
    for (int i = 0; i < nops; i++)
        if (ops[i].pointwise)
            pointwise_exec(&ops[i]);
    fprintf(out, "/* Every op's executor: the point-wise ones above, the others by hand in\n"
                 " * device/exec.c and device/exec_side.c (an op without one does not compile;\n"
                 " * there is no default that would run nothing). */\n");
    fprintf(out, "typedef void exec_fn(const struct kinstr *k);\n");
    fprintf(out, "static exec_fn *const dispatch[KOP_COUNT] = {\n");
    for (int i = 0; i < nops; i++)
        fprintf(out, "    [KOP_%s] = exec_%s,\n", ops[i].NAME, ops[i].name);
    fprintf(out, "};\n\n");
    fprintf(out, "void xs_dispatch(const struct kinstr *k) { dispatch[k->op](k); }\n");
    end();
}

/* ---- from kernels.def ---- */

static const struct kernel *kernel_named(const char *name)
{
    for (int i = 0; i < nkernels; i++)
        if (!strcmp(kernels[i].name, name) && !kernels[i].optional)
            return &kernels[i];
    die("kernels/kernels.def: no row %s", name);
    return NULL;
}

static void kernel_types(void)
{
    begin("kernels/tensor_impl_gen.h",
          "the kernel types and struct kernels (kernels/tensor_impl.h includes it)",
          "kernels/kernels.def");
    fprintf(out, "#ifndef KERNELS_TENSOR_IMPL_GEN_H\n#define KERNELS_TENSOR_IMPL_GEN_H\n");
    fprintf(out, "#include <stddef.h>\n#include <stdint.h>\n\n");
    fprintf(out, "/* Each row's kernel type, name_kernel: a function of the row's\n"
                 " * parameters. */\n");
    for (int i = 0; i < nkernels; i++) {
        const struct kernel *k = &kernels[i];
        char head[128];
        if (k->optional)
            continue;
        fprintf(out, "\n");
        if (k->comment)
            fprintf(out, "%s\n", k->comment);
        snprintf(head, sizeof head, "typedef void %s_kernel(", k->name);
        put_list(head, k->param, k->nparams, ");");
    }
    fprintf(out, "\n/* One backend's kernels: its name (\"avx512\", ...: isa_name()), then a\n"
                 " * pointer per row of kernels.def, in its order (tensor.c fills them). */\n");
    fprintf(out, "struct kernels {\n    const char *name;\n");
    for (int i = 0; i < nkernels; i++) {
        const struct kernel *k = &kernels[i];
        if (k->optional)
            fprintf(out, "    %s_kernel *%s; /* NULL where the backend has none */\n",
                    kernel_named(k->optional)->name, k->name);
        else
            fprintf(out, "    %s_kernel *%s;\n", k->name, k->name);
    }
    fprintf(out, "};\n\n#endif\n");
    end();
}

static void entry_points(void)
{
    begin("kernels/kernels_gen.h",
          "the entry points of kernels.def's KERNEL rows and their twins (kernels/kernels.h "
          "includes it)",
          "kernels/kernels.def");
    fprintf(out, "#ifndef KERNELS_KERNELS_GEN_H\n#define KERNELS_KERNELS_GEN_H\n");
    fprintf(out, "#include <stddef.h>\n#include <stdint.h>\n\n");
    fprintf(out, "/* Each KERNEL row's entry point k_name (kernels/entry_gen.c) and its\n"
                 " * plain-C twin k_name_ref, both with the row's parameters. */\n");
    for (int i = 0; i < nkernels; i++) {
        const struct kernel *k = &kernels[i];
        char head[128];
        if (k->fixed || k->optional)
            continue;
        snprintf(head, sizeof head, "void k_%s(", k->name);
        put_list(head, k->param, k->nparams, ");");
        snprintf(head, sizeof head, "void k_%s_ref(", k->name);
        put_list(head, k->param, k->nparams, ");");
    }
    fprintf(out, "\n#endif\n");
    end();

    begin("kernels/entry_gen.c",
          "the entry points of kernels.def's KERNEL rows, each a call of the current "
          "backend's kernel with its arguments as they came (the KERNEL_FIXED rows' are in "
          "kernels/entry.c)",
          "kernels/kernels.def");
    fprintf(out, "#include \"kernels/tensor_impl.h\"\n");
    for (int i = 0; i < nkernels; i++) {
        const struct kernel *k = &kernels[i];
        char head[128];
        if (k->fixed || k->optional)
            continue;
        snprintf(head, sizeof head, "void k_%s(", k->name);
        fprintf(out, "\n");
        put_list(head, k->param, k->nparams, ")");
        snprintf(head, sizeof head, "    kernels_now()->%s(", k->name);
        fprintf(out, "{\n");
        put_list(head, k->arg, k->nargs, ");");
        fprintf(out, "}\n");
    }
    end();
}

/* A backend's table in FILE: the rows between its "make gen: begin" and
 * "make gen: end" marks rewritten. tensor.c's (twins 0) sets each member
 * to its backend's function of the same name (an optional member is
 * tensor.c's own); kernels/reading.c's (twins 1) sets each KERNEL row's
 * member to its twin, k_NAME_ref (the KERNEL_FIXED rows' adapters and the
 * optional members are written by hand after the marks). */
static void backend_table(const char *src, const char *file, int twins)
{
    static const char begin_mark[] = "make gen: begin", end_mark[] = "/* make gen: end";
    char path[512];
    snprintf(path, sizeof path, "%s/%s", src, file);
    char *text = read_text(path);
    char *b = strstr(text, begin_mark), *close = b ? strstr(b, "*/") : NULL;
    char *from = close ? strchr(close, '\n') : NULL, *to = from ? strstr(from, end_mark) : NULL;
    if (!to)
        die("%s: no '%s' ... '%s */' marks around the table's rows", path, begin_mark, end_mark);
    while (to > from && to[-1] == ' ')
        to--;
    snprintf(out_path, sizeof out_path, "%s", file);
    out = open_memstream(&out_text, &out_len);
    fprintf(out, "%.*s\n", (int)(from - text), text);
    for (int i = 0; i < nkernels; i++) {
        if (kernels[i].optional || (twins && kernels[i].fixed))
            continue;
        if (twins)
            fprintf(out, "    .%s = k_%s_ref,\n", kernels[i].name, kernels[i].name);
        else
            fprintf(out, "    .%s = %s,\n", kernels[i].name, kernels[i].name);
    }
    fprintf(out, "%s", to);
    end();
    free(text);
}

int main(int argc, char **argv)
{
    char path[512];
    if (argc != 3) {
        fprintf(stderr, "usage: gen SRC OUT (make gen: gen . .)\n");
        return 2;
    }
    out_dir = argv[2];
    snprintf(path, sizeof path, "%s/device/ops.def", argv[1]);
    read_ops(path);
    snprintf(path, sizeof path, "%s/kernels/kernels.def", argv[1]);
    read_kernels(path);
    ops_header();
    ops_table();
    dispatch();
    kernel_types();
    entry_points();
    backend_table(argv[1], "tensor.c", 0);
    backend_table(argv[1], "kernels/reading.c", 1);
    return 0;
}
