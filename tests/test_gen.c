/* tests/test_gen.c: the C made from device/ops.def and kernels/kernels.def
 * is committed, and is what gen/gen.c makes of them now.
 *   - gen/gen.c compiles without a warning and, run into tests/tmp/gen,
 *     writes every generated file; each must equal the committed one, or
 *     it is stale (an edited .def without make gen, or a generated file
 *     edited by hand) and is named;
 *   - nothing in the program is made where grep cannot find it: no source
 *     includes anything but a header (no X-macro reads a .def), none
 *     defines a macro named as a .def row (OP, KERNEL, ...), and none
 *     pastes tokens (##) but the loop macros that name their own
 *     variables;
 *   - every function of ./gpt is spelled out where it is defined: the
 *     line its debug information names, or one of the 3 before it, holds
 *     its name (an X-macro's function would point at a .def row or an
 *     #include line instead). */
#include <ctype.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "test.h"

#define GEN_DIR "tests/tmp/gen"
#define GEN_OUT GEN_DIR "/out"
/* gen/gen.c writes eight files: ops_gen.h, ops_gen.c and exec_gen.c from
 * ops.def; tensor_impl_gen.h, kernels_gen.h, entry_gen.c, tensor.c's table
 * and the reading mode's (kernels/reading.c) from kernels.def. */
#define GEN_FILES 8

static void check_generated_files(void)
{
    char out[4096];
    if (!t_have("cc --version")) {
        SKIP_MISSING("gcc", "no cc to compile gen/gen.c: the generated files are not checked");
        return;
    }
    int rc = t_run("rm -rf " GEN_DIR " && mkdir -p " GEN_DIR " && cc -O1 -std=c11 -D_GNU_SOURCE "
                   "-Wall -Wextra -Wshadow -Werror -o " GEN_DIR "/gen gen/gen.c 2>&1",
                   out, sizeof out);
    CHECK(rc == 0, "gen/gen.c does not compile without warnings:\n%s", out);
    if (rc != 0)
        return;
    rc = t_run(GEN_DIR "/gen . " GEN_OUT " 2>&1", out, sizeof out);
    CHECK(rc == 0, "gen/gen.c fails on device/ops.def and kernels/kernels.def:\n%s", out);
    if (rc != 0)
        return;
    int made = 0;
    for (char *path = strtok(out, "\n"); path; path = strtok(NULL, "\n")) {
        char fresh[512];
        snprintf(fresh, sizeof fresh, "%s/%s", GEN_OUT, path);
        CHECK(t_same_file(fresh, path),
              "%s is stale: gen/gen.c makes it otherwise from device/ops.def and "
              "kernels/kernels.def now (make gen rewrites it; diff %s %s shows how)",
              path, path, fresh);
        made++;
    }
    CHECK(made == GEN_FILES, "gen/gen.c made %d files, not %d", made, GEN_FILES);
}

/* ---- no X-macros ---- */

/* Macros that may paste (##): each names its own loop's variables from
 * the one it is given (i -> i_lo, i_hi), never a function, type or enum
 * constant. */
static const char *const pasting_allowed[] = {"FOR_SHARED", "FOR_SHARED_CHUNKS"};
/* The rows of the .def files: a macro of one of these names would be an
 * X-macro's consumer. */
static const char *const row_names[] = {"OP", "POINTWISE", "ATTRS", "KERNEL", "KERNEL_FIXED",
                                        "KERNEL_OPTIONAL"};

/* The name of the macro whose #define precedes at in text. */
static void macro_before(const char *text, const char *at, char *name, size_t n)
{
    const char *d = NULL;
    for (const char *p = text; (p = strstr(p, "#define ")) && p < at; p++)
        d = p;
    snprintf(name, n, "?");
    if (d)
        sscanf(d + 8, "%63[A-Za-z0-9_]", name);
}

static void check_no_x_macros(const char *path)
{
    char *text = (char *)t_slurp(path, NULL), name[64];
    CHECK(text != NULL, "cannot read %s", path);
    for (const char *p = text; text && (p = strstr(p, "#include \"")); p++) {
        char file[128] = "";
        sscanf(p + 10, "%127[^\"]", file);
        size_t n = strlen(file);
        if (n < 2 || strcmp(file + n - 2, ".h"))
            CHECK(0, "%s includes \"%s\": only headers are included (gen/gen.c reads the .def "
                  "files)", path, file);
    }
    for (const char *p = text; text && (p = strstr(p, "#define ")); p++) {
        sscanf(p + 8, "%63[A-Za-z0-9_]", name);
        for (size_t i = 0; i < sizeof row_names / sizeof *row_names; i++)
            if (!strcmp(name, row_names[i]) && p[8 + strlen(name)] == '(')
                CHECK(0, "%s defines %s(...), an X-macro's row: generate the code instead "
                      "(gen/gen.c)", path, name);
    }
    for (const char *p = text; text && (p = strstr(p, "##")); p += 2) {
        macro_before(text, p, name, sizeof name);
        int allowed = 0;
        for (size_t i = 0; i < sizeof pasting_allowed / sizeof *pasting_allowed; i++)
            allowed |= !strcmp(name, pasting_allowed[i]);
        if (!allowed)
            CHECK(0, "%s: macro %s pastes a name (##) that grep cannot find: write it out, or "
                  "generate it (gen/gen.c)", path, name);
    }
    free(text);
}

/* ---- every function where grep finds it ---- */

#define MAX_SOURCES 256
#define LINES_BEFORE 3 /* a definition's name may sit above the line nm names */

/* The program's sources as lines, each read once. */
static struct source {
    char path[256];
    char *text;
    char **line;
    int nlines;
} sources[MAX_SOURCES];
static int nsources;

static const struct source *source(const char *path)
{
    for (int i = 0; i < nsources; i++)
        if (!strcmp(sources[i].path, path))
            return &sources[i];
    if (nsources == MAX_SOURCES)
        return NULL;
    struct source *s = &sources[nsources];
    s->text = (char *)t_slurp(path, NULL);
    if (!s->text)
        return NULL;
    snprintf(s->path, sizeof s->path, "%s", path);
    for (char *p = s->text; p; p = strchr(p, '\n'))
        s->nlines++, p += *p == '\n';
    s->line = calloc((size_t)s->nlines, sizeof *s->line);
    int n = 0;
    for (char *p = s->text; p && n < s->nlines; n++) {
        s->line[n] = p;
        if ((p = strchr(p, '\n')))
            *p++ = 0;
    }
    nsources++;
    return s;
}

/* Whether text holds name as a whole word. */
static int has_word(const char *text, const char *name, size_t n)
{
    for (const char *p = text; (p = strstr(p, name)); p++) {
        int before = p > text && (isalnum((unsigned char)p[-1]) || p[-1] == '_');
        int after = isalnum((unsigned char)p[n]) || p[n] == '_';
        if (!before && !after)
            return 1;
    }
    return 0;
}

/* Whether lines [at - LINES_BEFORE, at] of path spell the function name:
 * itself, or for tensor.c's kernels the name before its backend
 * (matmul_ex_avx2 is matmul_ex; kernels/backend-names.sh). */
static int spelled_near(const char *name, const char *path, int at)
{
    static const char *const backends[] = {"_avx512", "_avx2", "_scalar", "_neon"};
    const struct source *s = source(path);
    char base[256];
    if (!s || at < 1 || at > s->nlines)
        return 0;
    for (int l = at > LINES_BEFORE ? at - LINES_BEFORE : 1; l <= at; l++) {
        const char *text = s->line[l - 1];
        if (has_word(text, name, strlen(name)))
            return 1;
        for (size_t b = 0; b < sizeof backends / sizeof *backends; b++)
            for (const char *p = strstr(name, backends[b]); p; p = strstr(p + 1, backends[b])) {
                size_t n = (size_t)(p - name), end = n + strlen(backends[b]);
                snprintf(base, sizeof base, "%.*s", (int)n, name);
                if ((name[end] == 0 || name[end] == '_') && has_word(text, base, n))
                    return 1;
            }
    }
    return 0;
}

/* nm -l ./gpt: each function whose line information points into the tree
 * (but the tests), save an OpenMP region's body (named for the function
 * that holds it, defined by a pragma). */
static void check_functions_spelled_out(void)
{
    char line[1024], cwd[512];
    if (!t_have("nm ./gpt") || !getcwd(cwd, sizeof cwd)) {
        SKIP_MACHINE("nm cannot read ./gpt here (not this machine's binary): its functions "
                     "are not checked");
        return;
    }
    FILE *f = popen("nm -l ./gpt 2>/dev/null", "r");
    size_t cwd_len = strlen(cwd);
    int functions = 0, hidden = 0;
    while (f && fgets(line, sizeof line, f)) {
        char addr[32], type[8], name[256], where[512] = "";
        if (sscanf(line, "%31s %7s %255s %511s", addr, type, name, where) < 4 ||
            !strchr("tTwW", type[0]) || strncmp(where, cwd, cwd_len) || where[cwd_len] != '/' ||
            !strncmp(where + cwd_len, "/tests/", 7) || strstr(name, "omp_fn"))
            continue;
        char *colon = strrchr(where, ':');
        if (!colon)
            continue;
        *colon = 0;
        name[strcspn(name, ".")] = 0; /* a compiler's clone: f.part.0 is f */
        functions++;
        if (!spelled_near(name, where + cwd_len + 1, atoi(colon + 1)) && ++hidden <= 10)
            CHECK(0, "%s:%s defines %s, a name written nowhere near: made by a macro? "
                  "write it out, or generate it (gen/gen.c)", where + cwd_len + 1, colon + 1,
                  name);
    }
    if (f)
        pclose(f);
    CHECK(functions > 300, "nm -l ./gpt shows only %d project functions", functions);
    CHECK(hidden == 0, "%d functions of ./gpt not spelled out where they are defined", hidden);
    for (int i = 0; i < nsources; i++) {
        free(sources[i].text);
        free(sources[i].line);
    }
    nsources = 0;
}

/* Every .c and .h of the program: the top level and its folders, but the
 * tests, the benchmark, the docs, the build and the generator. */
static int check_folder(const char *dir, int descend)
{
    static const char *const not_program[] = {"tests", "bench", "docs", "build", "gen"};
    DIR *d = opendir(dir);
    int files = 0;
    CHECK(d != NULL, "cannot list %s", dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        char path[512];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (e->d_name[0] == '.' || stat(path, &st) != 0)
            continue;
        int skip = 0;
        for (size_t i = 0; i < sizeof not_program / sizeof *not_program; i++)
            skip |= !strcmp(e->d_name, not_program[i]);
        const char *dot = strrchr(e->d_name, '.');
        if (S_ISDIR(st.st_mode) && descend && !skip)
            files += check_folder(path, 0);
        else if (S_ISREG(st.st_mode) && dot && (!strcmp(dot, ".c") || !strcmp(dot, ".h"))) {
            check_no_x_macros(path + 2); /* without "./" */
            files++;
        }
    }
    if (d)
        closedir(d);
    return files;
}

void test_gen(void)
{
    check_generated_files();
    int files = check_folder(".", 1);
    CHECK(files >= 90, "only %d sources of the program read for X-macros", files);
    check_functions_spelled_out();
}
