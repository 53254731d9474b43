/* tests/test_house.c: the house the design card draws, held to the code.
 *
 * README.md's map lists the layers top to bottom, each line naming its
 * files and folders. This suite checks that the map is true:
 *   - the top level holds the card's four files and at most six .c files;
 *   - every file of the program is on the map, once;
 *   - includes and calls go down the map, never up, and no files call or
 *     include each other in a loop (calls read from the objects make
 *     builds, by the symbols each one takes from another);
 *   - no function of the project has two names' worth of copies in the
 *     binary: each name is defined once, so perf and valgrind say which
 *     code ran (the kernels carry their backend in their names). */
#include <ctype.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "test.h"

#define MAX_FILES 160
#define MAX_LAYERS 16
#define MAX_PLACES 64

/* ---- the map ---- */

/* A place on the map: a file ("gpt.c") or a folder ("cmd/"), and the rank
 * of its line (0 is the top). */
struct place {
    char path[64];
    int rank;
};
static struct place places[MAX_PLACES];
static int nplaces, nranks;

static int is_path_token(const char *t)
{
    size_t n = strlen(t);
    return n > 1 && (t[n - 1] == '/' || (n > 2 && !strcmp(t + n - 2, ".c")) ||
                     (n > 2 && !strcmp(t + n - 2, ".h")) || (n > 4 && !strcmp(t + n - 4, ".def")));
}

/* The fenced block after README's "## The map": each line with a path is
 * one layer, below the lines above it. */
static int read_map(void)
{
    char *readme = (char *)t_slurp("README.md", NULL);
    CHECK(readme != NULL, "cannot read README.md");
    char *at = readme ? strstr(readme, "\n## The map") : NULL;
    char *open = at ? strstr(at, "\n```") : NULL;
    char *body = open ? strchr(open + 1, '\n') : NULL;
    char *close = body ? strstr(body, "\n```") : NULL;
    CHECK(close != NULL, "README.md has no '## The map' with a fenced block of layers");
    if (!close) {
        free(readme);
        return 0;
    }
    *close = 0;
    for (char *line = body + 1; line && *line;) {
        char *next = strchr(line, '\n');
        if (next)
            *next++ = 0;
        int found = 0;
        for (char *tok = strtok(line, " \t"); tok; tok = strtok(NULL, " \t"))
            if (is_path_token(tok) && nplaces < MAX_PLACES) {
                snprintf(places[nplaces].path, sizeof places[nplaces].path, "%s", tok);
                places[nplaces++].rank = nranks;
                found = 1;
            }
        nranks += found;
        line = next;
    }
    free(readme);
    CHECK(nranks >= 5, "README.md's map has %d layers", nranks);
    return nranks;
}

/* The rank of a source file: the map's longest place that holds it, or -1. */
static int rank_of_path(const char *file)
{
    int best = -1;
    size_t best_len = 0;
    for (int i = 0; i < nplaces; i++) {
        size_t n = strlen(places[i].path);
        int folder = places[i].path[n - 1] == '/';
        int holds = folder ? !strncmp(file, places[i].path, n) : !strcmp(file, places[i].path);
        if (holds && n > best_len) {
            best = places[i].rank;
            best_len = n;
        }
    }
    return best;
}

/* ---- the program's files ---- */

static int room_of(const char *path);

static char *files[MAX_FILES];
static int nfiles;

static int is_source(const char *name)
{
    const char *dot = strrchr(name, '.');
    return dot && (!strcmp(dot, ".c") || !strcmp(dot, ".h") || !strcmp(dot, ".def"));
}

/* Not the program: its tests, benchmark, docs and build, and gen/, the
 * generator of its _gen files (make gen), which the binary never links. */
static int is_program_folder(const char *name)
{
    return name[0] != '.' && strcmp(name, "tests") && strcmp(name, "bench") &&
           strcmp(name, "docs") && strcmp(name, "build") && strcmp(name, "gen");
}

static void list_files(const char *dir, int depth)
{
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        char path[600];
        snprintf(path, sizeof path, "%s%s%s", strcmp(dir, ".") ? dir : "", strcmp(dir, ".") ? "/" : "",
                 e->d_name);
        struct stat st;
        if (stat(path, &st) != 0)
            continue;
        if (S_ISDIR(st.st_mode) && depth == 0 && is_program_folder(e->d_name))
            list_files(path, 1);
        else if (S_ISREG(st.st_mode) && is_source(e->d_name) && nfiles < MAX_FILES)
            files[nfiles++] = strdup(path);
    }
    if (d)
        closedir(d);
}

static int file_index(const char *path)
{
    for (int i = 0; i < nfiles; i++)
        if (!strcmp(files[i], path))
            return i;
    return -1;
}

/* The rank of a file's room (gpt.h's is gpt.c's). */
static int rank_of(const char *file)
{
    int room = room_of(file);
    return rank_of_path(room >= 0 ? files[room] : file);
}

/* ---- the top level ---- */

static void check_top_level(void)
{
    static const char *const card[] = {"gpt.c", "graph.c", "xla_sim.c", "tensor.c"};
    int top_c = 0;
    for (int i = 0; i < nfiles; i++)
        top_c += !strchr(files[i], '/') && strstr(files[i], ".c");
    for (size_t i = 0; i < sizeof card / sizeof *card; i++)
        CHECK(file_index(card[i]) >= 0, "the design card's %s is not at the top level", card[i]);
    CHECK(top_c <= 6, "%d .c files at the top level (the card's four, at most six)", top_c);
    for (int i = 0; i < nfiles; i++)
        CHECK(rank_of(files[i]) >= 0, "%s is on no line of README.md's map", files[i]);
}

/* ---- edges: includes and calls ---- */

/* edge[a][b]: file a includes or calls file b (by index into files). */
static unsigned char edge[MAX_FILES][MAX_FILES];
static char why[MAX_FILES][MAX_FILES][48];

static void add_edge(int a, int b, const char *what)
{
    if (a < 0 || b < 0 || a == b)
        return;
    if (!edge[a][b])
        snprintf(why[a][b], sizeof why[a][b], "%s", what);
    edge[a][b] = 1;
}

/* A header counts as its source file's room: gpt.h is gpt.c's. */
static int room_of(const char *path)
{
    char c[256];
    size_t n = strlen(path);
    if (n > 2 && !strcmp(path + n - 2, ".h")) {
        snprintf(c, sizeof c, "%.*s.c", (int)(n - 2), path);
        int i = file_index(c);
        if (i >= 0)
            return i;
    }
    return file_index(path);
}

static void read_includes(void)
{
    for (int i = 0; i < nfiles; i++) {
        char *text = (char *)t_slurp(files[i], NULL);
        for (char *p = text; p && (p = strstr(p, "#include \"")); p++) {
            char name[128];
            if (sscanf(p + 10, "%127[^\"]", name) == 1) {
                /* a header is a room of its own here: including gpt.h for
                 * its types does not call gpt.c */
                int to = file_index(name), from = file_index(files[i]);
                char what[48];
                snprintf(what, sizeof what, "#include \"%.30s\"", name);
                if (to >= 0 && from >= 0 && from != to)
                    add_edge(from, to, what);
            }
        }
        free(text);
    }
}

/* The objects make builds for gpt: build/gpt/DIR/NAME.o for DIR/NAME.c;
 * build/gpt/tensor-ISA.o for tensor.c. */
static int source_of_object(const char *obj)
{
    char src[256];
    const char *rel = obj + strlen("build/gpt/");
    if (!strncmp(rel, "tensor-", 7))
        return file_index("tensor.c");
    snprintf(src, sizeof src, "%.*s.c", (int)(strlen(rel) - 2), rel);
    return file_index(src);
}

#define MAX_SYMS 8192
struct sym {
    char name[128];
    int file;
};

/* Every object's global definitions and undefined references, by nm. */
static void read_calls(void)
{
    static struct sym defs[MAX_SYMS], uses[MAX_SYMS];
    int ndefs = 0, nuses = 0, nobj = 0;
    char line[512];
    FILE *f = popen("find build/gpt -name '*.o' | sort | xargs -r nm -A -P 2>/dev/null", "r");
    CHECK(f != NULL, "cannot run nm over build/gpt");
    while (f && fgets(line, sizeof line, f)) {
        char obj[256], name[128], type[8];
        /* "build/gpt/cmd/train.o: name T value size" */
        char *colon = strstr(line, ".o: ");
        if (!colon || sscanf(colon + 4, "%127s %7s", name, type) != 2)
            continue;
        snprintf(obj, sizeof obj, "%.*s", (int)(colon + 2 - line), line);
        int file = source_of_object(obj);
        if (file < 0)
            continue;
        if (type[0] == 'U' && nuses < MAX_SYMS) {
            snprintf(uses[nuses].name, sizeof uses[nuses].name, "%s", name);
            uses[nuses++].file = file;
        } else if (strchr("TDBRW", type[0]) && ndefs < MAX_SYMS) {
            snprintf(defs[ndefs].name, sizeof defs[ndefs].name, "%s", name);
            defs[ndefs++].file = file;
        }
        nobj++;
    }
    if (f)
        pclose(f);
    CHECK(nobj > 100, "build/gpt holds no objects to read calls from (make builds them)");
    for (int u = 0; u < nuses; u++)
        for (int d = 0; d < ndefs; d++)
            if (!strcmp(uses[u].name, defs[d].name)) {
                char what[48];
                snprintf(what, sizeof what, "calls %.38s", uses[u].name);
                add_edge(uses[u].file, defs[d].file, what);
                break;
            }
}

/* ---- the checks ---- */

static void check_down_only(void)
{
    for (int a = 0; a < nfiles; a++)
        for (int b = 0; b < nfiles; b++)
            if (edge[a][b])
                CHECK(rank_of(files[a]) <= rank_of(files[b]),
                      "%s (layer %d) -> %s (layer %d, above it): %s", files[a], rank_of(files[a]),
                      files[b], rank_of(files[b]), why[a][b]);
}

/* Depth-first search for a loop of edges; colour 1 = on the path. */
static int find_loop(int at, char *colour, int *path, int depth)
{
    colour[at] = 1;
    path[depth] = at;
    for (int b = 0; b < nfiles; b++) {
        if (!edge[at][b])
            continue;
        if (colour[b] == 1) {
            char loop[1024] = "";
            int start = depth;
            while (start > 0 && path[start] != b)
                start--;
            for (int i = start; i <= depth; i++)
                snprintf(loop + strlen(loop), sizeof loop - strlen(loop), "%s (%s) -> ",
                         files[path[i]], why[path[i]][i < depth ? path[i + 1] : b]);
            CHECK(0, "files in a loop: %s%s", loop, files[b]);
            return 1;
        }
        if (colour[b] == 0 && find_loop(b, colour, path, depth + 1))
            return 1;
    }
    colour[at] = 2;
    return 0;
}

static void check_no_loops(void)
{
    char colour[MAX_FILES] = {0};
    int path[MAX_FILES], loops = 0;
    for (int a = 0; a < nfiles; a++)
        if (!colour[a])
            loops += find_loop(a, colour, path, 0);
    CHECK(loops == 0, "%d loop(s) of files that call or include each other", loops);
}

/* nm -l ./gpt: the functions whose line information points into the
 * tree (the tests' own aside), each name once, counting a compiler's
 * clones under the name they were made from. */
static void check_unique_names(void)
{
    FILE *f = popen("nm -l ./gpt 2>/dev/null", "r");
    char line[1024], cwd[512];
    CHECK(f != NULL && getcwd(cwd, sizeof cwd), "cannot run nm -l ./gpt");
    static char seen[MAX_SYMS][256];
    int nseen = 0, twice = 0;
    size_t cwd_len = strlen(cwd);
    while (f && fgets(line, sizeof line, f)) {
        char addr[32], type[8], name[256], where[512] = "";
        if (sscanf(line, "%31s %7s %255s %511s", addr, type, name, where) < 4 ||
            !strchr("tTwW", type[0]) || strncmp(where, cwd, cwd_len) || where[cwd_len] != '/' ||
            !strncmp(where + cwd_len, "/tests/", 7))
            continue;
        /* a compiler's copy (xrealloc.part.0, f.cold, f.isra.0) is the
         * function's name twice, as perf and valgrind show it */
        name[strcspn(name, ".")] = 0;
        int dup = 0;
        for (int i = 0; i < nseen && !dup; i++)
            dup = !strcmp(seen[i], name);
        if (dup && ++twice <= 10)
            CHECK(0, "nm -l ./gpt: %s is defined twice (again at %s)", name, where + cwd_len + 1);
        if (!dup && nseen < MAX_SYMS)
            snprintf(seen[nseen++], sizeof seen[0], "%s", name);
    }
    if (f)
        pclose(f);
    CHECK(nseen > 300, "nm -l ./gpt shows only %d project functions", nseen);
    CHECK(twice == 0, "nm -l ./gpt: %d function names defined more than once", twice);
}

/* One op, one place: GELU, the op added to prove it, is named by its
 * row (ops.def, kernels.def), its builder and derivative (graph.c), its
 * constants and steps (kernels/gelu.h), its twin (kernels/tensor_ref.c),
 * its vector kernel (tensor.c), the flag (cmd/train.c) and the model
 * (gpt.c), and by no other source written by
 * hand (the _gen files and the table rows between make gen's marks are
 * written from the .def rows). */
static void check_one_op_one_place(void)
{
    char out[4096];
    /* each source but the _gen files, without the rows make gen writes
     * between its marks (tensor.c's and kernels/reading.c's tables) */
    int rc = t_run("for f in $(find cmd model compiler device kernels pod data watch safetensors "
                   "util gpt.c gpt.h graph.c graph.h xla_sim.c xla_sim.h tensor.c tensor.h "
                   "\\( -name '*.c' -o -name '*.h' -o -name '*.def' \\) ! -name '*_gen.[ch]'); do "
                   "awk '/make gen: begin/ { made = 1 } !made { print } /make gen: end/ { made = 0 }' "
                   "$f | grep -qi gelu && echo $f; done | sort",
                   out, sizeof out);
    int n = 0;
    for (const char *p = out; rc == 0 && (p = strchr(p, '\n')); p++)
        n++;
    CHECK(rc == 0 && n <= 8, "%d sources name GELU (at most 8: its rows, builder, steps, "
          "twin, kernel, flag and model):\n%s", n, out);
}

void test_house(void)
{
    list_files(".", 0);
    if (!read_map())
        return;
    check_top_level();
    read_includes();
    read_calls();
    check_down_only();
    check_no_loops();
    check_unique_names();
    check_one_op_one_place();
    for (int i = 0; i < nfiles; i++)
        free(files[i]);
    nfiles = nplaces = nranks = 0;
    memset(edge, 0, sizeof edge);
}
