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
 *     variables. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "test.h"

#define GEN_DIR "tests/tmp/gen"
#define GEN_OUT GEN_DIR "/out"
/* gen/gen.c writes seven files: ops_gen.h, ops_gen.c and exec_gen.c from
 * ops.def; tensor_impl_gen.h, kernels_gen.h, entry_gen.c and tensor.c's
 * table from kernels.def. */
#define GEN_FILES 7

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
}
