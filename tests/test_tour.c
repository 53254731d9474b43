/* tests/test_tour.c: the code stays readable the way docs/TOUR.md and the
 * design promise. Every function the tour names (`name()`) and every
 * struct (`struct name`) is still defined in the sources; no function is
 * longer than 80 lines; op attributes are read by name, never as the old
 * a[0..3] / f[0..3] slots. */
#include <ctype.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "test.h"

/* Every source file of the program: the .c, .h and .def files of the top
 * level and of its folders (each one layer deep), found by listing them so
 * that a new file or folder is checked too; tests, bench and docs are not
 * the program. */
#define MAX_SOURCES 128
static char *sources[MAX_SOURCES];
static int nsources;

static int is_source(const char *name)
{
    const char *dot = strrchr(name, '.');
    return dot && (!strcmp(dot, ".c") || !strcmp(dot, ".h") || !strcmp(dot, ".def"));
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int is_program_folder(const char *name)
{
    static const char *const not_program[] = {"tests", "bench", "docs", "build"};
    if (name[0] == '.')
        return 0;
    for (size_t i = 0; i < sizeof not_program / sizeof *not_program; i++)
        if (!strcmp(name, not_program[i]))
            return 0;
    return 1;
}

/* Whether a listed entry is a folder: by the listing's own type where it
 * gives one, else (a symbolic link, as arm64.sh's tree of links to the
 * sources has, or a file system that leaves the type unknown) by stat,
 * which follows links. */
static int is_folder(const struct dirent *e, const char *path)
{
    struct stat st;
    if (e->d_type != DT_LNK && e->d_type != DT_UNKNOWN)
        return e->d_type == DT_DIR;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The sources of folder dir ("." for the top level), and of its folders
 * when descend is set. */
static void list_folder(const char *dir, int descend)
{
    DIR *d = opendir(dir);
    CHECK(d != NULL, "cannot list %s", dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        char path[512];
        if (!strcmp(dir, "."))
            snprintf(path, sizeof path, "%s", e->d_name);
        else
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (is_source(e->d_name) && nsources < MAX_SOURCES)
            sources[nsources++] = strdup(path);
        else if (descend && is_folder(e, path) && is_program_folder(e->d_name))
            list_folder(path, 0);
    }
    if (d)
        closedir(d);
}

static void list_sources(void)
{
    list_folder(".", 1);
    qsort(sources, (size_t)nsources, sizeof *sources, by_name);
    CHECK(nsources >= 40, "only %d source files in the program's folders", nsources);
}
#define NSOURCES nsources

static int ident_char(int c) { return isalnum(c) || c == '_'; }

/* A line at column 0 that defines function `name`: "... name(" with no
 * identifier character before the name, not a declaration (no ';'). */
static int defines_function(const char *text, const char *name)
{
    size_t len = strlen(name);
    for (const char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (!ident_char((unsigned char)*line))
            continue;
        const char *end = strchr(line, '\n');
        for (const char *p = line; (p = strstr(p, name)) && (!end || p < end); p++) {
            int starts = p == line || !ident_char((unsigned char)p[-1]);
            if (starts && p[len] == '(') {
                const char *eol = end ? end : p + strlen(p);
                while (eol > p && isspace((unsigned char)eol[-1]))
                    eol--;
                if (eol > p && eol[-1] != ';')
                    return 1;
            }
        }
    }
    return 0;
}

static int defines_struct(const char *text, const char *name)
{
    char pat[160];
    snprintf(pat, sizeof pat, "struct %s {", name);
    return strstr(text, pat) != NULL;
}

/* Each `identifier()` and `struct identifier` of the tour is defined. */
static void check_tour_names(char **src)
{
    char *tour = (char *)t_slurp("docs/TOUR.md", NULL);
    CHECK(tour != NULL, "docs/TOUR.md is missing");
    if (!tour)
        return;
    int names = 0;
    for (char *p = tour; (p = strchr(p, '`'));) {
        char *q = strchr(p + 1, '`');
        if (!q)
            break;
        char word[128];
        size_t n = (size_t)(q - p - 1);
        if (n < sizeof word) {
            memcpy(word, p + 1, n);
            word[n] = 0;
            int is_fn = n > 2 && !strcmp(word + n - 2, "()");
            int is_struct = !strncmp(word, "struct ", 7);
            if (is_fn)
                word[n - 2] = 0;
            const char *name = is_struct ? word + 7 : word;
            int ok = 1;
            for (const char *c = name; *c; c++)
                ok &= ident_char((unsigned char)*c);
            if ((is_fn || is_struct) && ok && *name) {
                int found = 0;
                for (int i = 0; i < NSOURCES && !found; i++)
                    found = src[i] && (is_fn ? defines_function(src[i], name)
                                             : defines_struct(src[i], name));
                CHECK(found, "docs/TOUR.md names %s%s, which no source defines",
                      is_struct ? "struct " : "", name);
                names++;
            }
        }
        p = q + 1;
    }
    CHECK(names >= 60, "the tour names only %d functions and structs", names);
    free(tour);
}

/* A function is a line at column 0 with a '(' that ends in neither ';'
 * nor '}', then a "{" line at column 0 (before any line ending in ';',
 * which would make it a declaration), to the next "}" at column 0. */
static void check_function_lengths(const char *path, const char *text)
{
    enum { NONE, HEADER, BODY } state = NONE;
    int line = 0, start = 0, longest = 0, longest_at = 0;
    char name[96] = "", longest_name[96] = "";
    for (const char *p = text; *p; p += strcspn(p, "\n") + (p[strcspn(p, "\n")] != 0)) {
        size_t len = strcspn(p, "\n");
        char last = len ? p[len - 1] : 0;
        line++;
        if (state != BODY && ident_char((unsigned char)*p) && memchr(p, '(', len) &&
            last != ';' && last != '}') {
            state = HEADER;
            start = line;
            snprintf(name, sizeof name, "%.*s", (int)(len < 80 ? len : 80), p);
        } else if (state == HEADER && *p == '{') {
            state = BODY;
        } else if (state == HEADER && last == ';') {
            state = NONE;
        } else if (state == BODY && *p == '}') {
            state = NONE;
            if (line - start + 1 > longest) {
                longest = line - start + 1;
                longest_at = start;
                memcpy(longest_name, name, sizeof name);
            }
        }
    }
    CHECK(longest <= 80, "%s:%d: a function of %d lines: %s", path, longest_at, longest,
          longest_name);
}

/* Op attributes by name: no a[0..3] / f[0..3] slot numbers left. */
static void check_no_slots(const char *path, const char *text)
{
    for (const char *p = text; (p = strpbrk(p, "af")); p++) {
        int word_start = p == text || !ident_char((unsigned char)p[-1]);
        if (word_start && p[1] == '[' && p[2] >= '0' && p[2] <= '3' && p[3] == ']') {
            CHECK(0, "%s: an op attribute read by slot number: '%.12s'", path, p);
            return;
        }
    }
    /* operands too are read by name (ops.def's NAME_IN_X), never as in[1] */
    for (const char *p = text; (p = strstr(p, "in[")); p++) {
        int word_start = p == text || !ident_char((unsigned char)p[-1]);
        if (word_start && p[3] >= '0' && p[3] <= '9' && p[4] == ']') {
            CHECK(0, "%s: an operand read by position: '%.12s'", path, p);
            return;
        }
    }
}

/* The tour states the plain path's length with the command that counts
 * it: "is N lines by `wc -l FILES`". The figure must be today's. */
static void check_plain_path_length(void)
{
    char *tour = (char *)t_slurp("docs/TOUR.md", NULL), cmd[512], out[256];
    const char *at = tour ? strstr(tour, " lines by `wc -l ") : NULL;
    const char *end = at ? strchr(at + 17, '`') : NULL;
    int stated = 0;
    if (at) { /* the figure before " lines by": digits and commas */
        const char *p = at;
        while (p > tour && (isdigit((unsigned char)p[-1]) || p[-1] == ','))
            p--;
        for (; p < at; p++)
            if (isdigit((unsigned char)*p))
                stated = stated * 10 + (*p - '0');
    }
    CHECK(at && end && end - at < 400, "docs/TOUR.md states no plain-path length");
    if (at && end && end - at < 400) {
        snprintf(cmd, sizeof cmd, "%.*s | tail -1", (int)(end - at - 11), at + 11);
        for (char *c = cmd; *c; c++)
            if (*c == '\n')
                *c = ' ';
        t_run(cmd, out, sizeof out);
        CHECK(atoi(out) == stated, "docs/TOUR.md says the plain path is %d lines; %s counts %d",
              stated, cmd, atoi(out));
    }
    free(tour);
}

void test_tour(void)
{
    check_plain_path_length();
    list_sources();
    char *src[MAX_SOURCES];
    for (int i = 0; i < NSOURCES; i++) {
        src[i] = (char *)t_slurp(sources[i], NULL);
        CHECK(src[i] != NULL, "cannot read %s", sources[i]);
    }
    check_tour_names(src);
    for (int i = 0; i < NSOURCES; i++) {
        if (!src[i])
            continue;
        check_function_lengths(sources[i], src[i]);
        /* where ops and operands are read: the model, the graph and its
         * compiler, the device */
        if (!strcmp(sources[i], "graph.c") || !strcmp(sources[i], "xla_sim.c") ||
            !strcmp(sources[i], "gpt.c") || !strcmp(sources[i], "cmd/train.c") ||
            !strncmp(sources[i], "compiler/", 9) || !strncmp(sources[i], "device/", 7) ||
            !strncmp(sources[i], "model/", 6))
            check_no_slots(sources[i], src[i]);
        free(src[i]);
        free(sources[i]);
    }
    nsources = 0;
}
