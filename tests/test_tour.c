/* tests/test_tour.c: the code stays readable the way docs/TOUR.md and the
 * design promise. Every claim of the tour (and of README.md's map) that
 * the checker below can read is true of the sources: each function is
 * defined in the file its sentence gives it, each "a() calls b(), c()"
 * and "a() -> b()" is a call in a's body (in that order), each struct,
 * union, enum and type exists, and each quote of the traced example is in
 * it (the tour's head states the conventions); docs/examples is what
 * `make docs` makes of the code today; the plain path's size is docs/plain-path.txt's total;
 * no function is longer than 80 lines; op attributes are read by name,
 * never as the old a[0..3] / f[0..3] slots.
 *
 * The checker reads text, not a compiler's view: a definition is a line
 * that starts with an identifier character and holds "name(...)" followed
 * by '{'; a call is "name(" inside the caller's braces, comments and
 * strings blanked. A sentence whose function moved to another file, or
 * whose caller stopped calling, fails naming the document's line. */
#include <ctype.h>
#include <dirent.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "test.h"

/* Every source file of the program: the .c, .h and .def files of the top
 * level and of its folders (each one layer deep), found by listing them so
 * that a new file or folder is checked too; tests, bench and docs are not
 * the program. */
#define MAX_SOURCES 128
static char *sources[MAX_SOURCES];
static char *src_text[MAX_SOURCES]; /* each source's text */
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

/* ---- the sources as code ---- */

/* Each source with its comments, strings and character constants blanked
 * (newlines kept), so that a name in a comment is neither a definition
 * nor a call. */
static char *code_of[MAX_SOURCES];

static char *blank_comments(const char *text)
{
    char *c = strdup(text);
    for (char *p = c; *p; p++) {
        if (p[0] == '/' && (p[1] == '*' || p[1] == '/')) {
            char *e = p[1] == '*' ? strstr(p + 2, "*/") : strchr(p, '\n');
            char *stop = !e ? p + strlen(p) : p[1] == '*' ? e + 2 : e;
            for (; p < stop; p++)
                if (*p != '\n')
                    *p = ' ';
            p--;
        } else if (*p == '"' || *p == '\'') {
            char quote = *p;
            for (p++; *p && *p != quote && *p != '\n'; p++) {
                if (*p == '\\' && p[1] && p[1] != '\n')
                    *p++ = ' ';
                *p = ' ';
            }
            if (!*p)
                p--;
        }
    }
    return c;
}

/* p at '(' or '{': the character past its match, or NULL. */
static const char *past_match(const char *p)
{
    char open = *p, close = open == '(' ? ')' : '}';
    int depth = 0;
    for (; *p; p++) {
        if (*p == open)
            depth++;
        else if (*p == close && --depth == 0)
            return p + 1;
    }
    return NULL;
}

/* The body of function name in code (blanked): the '{' after "name(...)"
 * on a line that starts with an identifier character (so neither a
 * macro's #define nor a call inside a body, which is indented), or NULL
 * when code only declares or calls it. */
static const char *body_of(const char *code, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = code; (p = strstr(p, name)); p += len) {
        const char *line = p;
        while (line > code && line[-1] != '\n')
            line--;
        if ((p > code && ident_char((unsigned char)p[-1])) || !ident_char((unsigned char)*line))
            continue;
        const char *q = p + len;
        while (*q == ' ')
            q++;
        if (*q != '(' || !(q = past_match(q)))
            continue;
        while (isspace((unsigned char)*q))
            q++;
        if (*q == '{')
            return q;
    }
    return NULL;
}

/* Where, from the start of body (its '{'), the body first calls callee:
 * "callee(" as a whole name. -1: it never does. */
static long first_call(const char *body, const char *callee)
{
    const char *end = past_match(body);
    size_t n = strlen(callee);
    for (const char *p = body; (p = strstr(p, callee)) && (!end || p < end); p += n) {
        const char *q = p + n;
        while (*q == ' ')
            q++;
        if (!ident_char((unsigned char)p[-1]) && *q == '(')
            return p - body;
    }
    return -1;
}

/* "struct name {" (or union), or a typedef's name: "} name;" or a
 * "typedef ... name;" line. */
static int defines_aggregate(const char *code, const char *what, const char *name)
{
    size_t wl = strlen(what), nl = strlen(name);
    for (const char *p = code; (p = strstr(p, what)); p += wl) {
        const char *q = p + wl;
        if ((p > code && ident_char((unsigned char)p[-1])) || *q != ' ')
            continue;
        q += strspn(q, " ");
        if (strncmp(q, name, nl) || ident_char((unsigned char)q[nl]))
            continue;
        q += nl;
        q += strspn(q, " \n");
        if (*q == '{')
            return 1;
    }
    return 0;
}

static int defines_type(const char *code, const char *name)
{
    size_t nl = strlen(name);
    for (const char *p = code; (p = strstr(p, name)); p += nl) {
        const char *q = p + nl, *line = p;
        if ((p > code && ident_char((unsigned char)p[-1])) || q[strspn(q, " ")] != ';')
            continue;
        while (line > code && line[-1] != '\n')
            line--;
        if (*line == '}' || !strncmp(line, "typedef ", 8))
            return 1;
    }
    return 0;
}

/* The program's source a document names: its path, or a name that ends
 * exactly one source's path after a '/' ("trace.c"). -1: none; -2: more
 * than one. */
static int source_named(const char *name)
{
    int found = -1;
    for (int i = 0; i < nsources; i++) {
        const char *slash = strrchr(sources[i], '/');
        if (!strcmp(sources[i], name))
            return i;
        if (slash && !strcmp(slash + 1, name))
            found = found == -1 ? i : -2;
    }
    return found;
}

/* ---- the documents' claims ----
 * A document is read as sentences: a paragraph or list item splits at
 * '.', '?' or '!' before a space (not "e.g." nor "i.e."); a heading is one
 * sentence; so is each line of a fenced block. A sentence is a list of
 * tokens: files (a name ending in .c, .h or .def), and in backticks
 * functions `name()`, `struct name`, `union name`, `enum name` and types
 * (`Node`: a capital, then a lower-case letter), quotes of the traced
 * example (`%5 = matmul(...) -> [64,48] {...}`); "->", words and the
 * punctuation ( ) , ; : that the claims below read, each with its depth in
 * parentheses ("'s" is passed over).
 * In a fenced block a name followed by '(' is a function, and comments
 * name files only. */
enum tok_kind {
    T_FUNC, T_STRUCT, T_UNION, T_ENUM, T_TYPE, T_FILE, T_QUOTE, T_WORD, T_PUNCT, T_ARROW
};
struct tok {
    enum tok_kind kind;
    int depth; /* how many parentheses enclose it */
    int file;  /* T_FILE: source_named()'s answer */
    char text[96];
};
#define MAX_TOKS 1024
struct sentence {
    const char *doc;
    int line; /* where it starts in doc */
    int code; /* a line of a fenced block */
    int file; /* a fenced block's file so far (source index, -1 none) */
    char text[4096];
    struct tok tok[MAX_TOKS];
    int n;
};
/* what the tour's checks met, for the counts at the end */
static int functions_named, calls_checked;

static int is_ident(const char *w, size_t n)
{
    if (!n || isdigit((unsigned char)*w))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!ident_char((unsigned char)w[i]))
            return 0;
    return 1;
}

static int is_file_name(const char *w)
{
    const char *dot = strrchr(w, '.');
    if (!dot || dot == w || !ident_char((unsigned char)*w))
        return 0;
    return !strcmp(dot, ".c") || !strcmp(dot, ".h") || !strcmp(dot, ".def");
}

static void add_tok(struct sentence *s, enum tok_kind kind, int depth, const char *text, size_t n)
{
    if (s->n == MAX_TOKS) /* tokenize() says so */
        return;
    struct tok *t = &s->tok[s->n++];
    t->kind = kind;
    t->depth = depth;
    snprintf(t->text, sizeof t->text, "%.*s", (int)n, text);
    t->file = kind == T_FILE ? source_named(t->text) : -1;
}

/* What a span in backticks claims; a flag or an expression claims nothing. */
static void code_span(struct sentence *s, const char *w, size_t n, int depth)
{
    if (n > 2 && !strncmp(w + n - 2, "()", 2) && is_ident(w, n - 2))
        add_tok(s, T_FUNC, depth, w, n - 2);
    else if (n > 7 && !strncmp(w, "struct ", 7) && is_ident(w + 7, n - 7))
        add_tok(s, T_STRUCT, depth, w + 7, n - 7);
    else if (n > 6 && !strncmp(w, "union ", 6) && is_ident(w + 6, n - 6))
        add_tok(s, T_UNION, depth, w + 6, n - 6);
    else if (n > 5 && !strncmp(w, "enum ", 5) && is_ident(w + 5, n - 5))
        add_tok(s, T_ENUM, depth, w + 5, n - 5);
    else if (n > 4 && *w == '%' && memchr(w, '=', n))
        add_tok(s, T_QUOTE, depth, w, n);
    else if (n > 1 && is_ident(w, n) && isupper((unsigned char)w[0]) && islower((unsigned char)w[1]))
        add_tok(s, T_TYPE, depth, w, n);
    else if (n < 96) {
        char name[96];
        snprintf(name, sizeof name, "%.*s", (int)n, w);
        if (is_file_name(name))
            add_tok(s, T_FILE, depth, w, n);
    }
}

static int is_keyword(const char *w, size_t n)
{
    static const char *const keywords[] = {"if", "for", "while", "switch", "return", "sizeof"};
    for (size_t i = 0; i < sizeof keywords / sizeof *keywords; i++)
        if (strlen(keywords[i]) == n && !strncmp(w, keywords[i], n))
            return 1;
    return 0;
}

/* A word: a file, a function of a fenced block, or a plain word. */
static const char *word(struct sentence *s, const char *p, int depth, int comment)
{
    size_t n = strspn(p, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./");
    while (n > 1 && (p[n - 1] == '.' || p[n - 1] == '/'))
        n--; /* a sentence's full stop, a folder's slash */
    char w[128];
    snprintf(w, sizeof w, "%.*s", (int)n, p);
    if (is_file_name(w))
        add_tok(s, T_FILE, depth, p, n);
    else if (s->code && !comment && p[n] == '(' && is_ident(p, n) && !is_keyword(p, n))
        add_tok(s, T_FUNC, depth, p, n);
    else if (!comment)
        add_tok(s, T_WORD, depth, p, n);
    return p + n;
}

static void tokenize(struct sentence *s)
{
    int depth = 0, comment = 0;
    s->n = 0;
    for (const char *p = s->text; *p;) {
        if (s->code && !strncmp(p, comment ? "*/" : "/*", 2)) {
            comment = !comment;
            p += 2;
        } else if (*p == '`' && !s->code) {
            const char *e = strchr(p + 1, '`');
            if (!e)
                break;
            code_span(s, p + 1, (size_t)(e - p - 1), depth);
            p = e + 1;
        } else if (ident_char((unsigned char)*p)) {
            p = word(s, p, depth, comment);
        } else if (!strncmp(p, "'s", 2) && !ident_char((unsigned char)p[2])) {
            p += 2;
        } else if (!strncmp(p, "->", 2)) {
            if (!s->code)
                add_tok(s, T_ARROW, depth, p, 2);
            p += 2;
        } else {
            if (*p == ')' && depth > 0)
                depth--;
            if (!comment && strchr("(),;:", *p))
                add_tok(s, T_PUNCT, depth, p, 1);
            if (*p == '(')
                depth++;
            p++;
        }
    }
}

static void claim_fails(const struct sentence *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void claim_fails(const struct sentence *s, const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    CHECK(0, "%s:%d: %s, in: \"%.110s%s\"", s->doc, s->line, why, s->text,
          strlen(s->text) > 110 ? "..." : "");
}

static int is_punct(const struct tok *t, char c) { return t->kind == T_PUNCT && t->text[0] == c; }
static int is_word(const struct tok *t, const char *w) { return t->kind == T_WORD && !strcmp(t->text, w); }

/* The file token right after name i: "name() (file" or "name() in file". */
static int file_after(const struct sentence *s, int i)
{
    if (i + 2 < s->n && s->tok[i + 2].kind == T_FILE &&
        (is_punct(&s->tok[i + 1], '(') || is_word(&s->tok[i + 1], "in")))
        return i + 2;
    return -1;
}

/* The source that defines function name, for a failure's hint. */
static const char *definer(const char *name)
{
    for (int i = 0; i < nsources; i++)
        if (body_of(code_of[i], name))
            return sources[i];
    return NULL;
}

/* A file token names a file of the project: a source, or a file beside
 * the tests ("test_golden.c"). */
static void check_file(const struct sentence *s, const struct tok *t)
{
    char tests[160];
    snprintf(tests, sizeof tests, "tests/%s", t->text);
    if (t->file == -2)
        claim_fails(s, "%s could be more than one source: give its folder", t->text);
    else if (t->file == -1 && access(t->text, F_OK) && access(tests, F_OK))
        claim_fails(s, "%s is no file of the project", t->text);
}

/* Function i, in the source of file token f (-1: the sentence named no
 * file before it): defined there. Returns the source, or -1. */
static int check_function(const struct sentence *s, int i, int src, const char *file)
{
    const char *name = s->tok[i].text, *where = definer(name);
    functions_named++;
    if (!file) {
        claim_fails(s, "names `%s()` before any file: name its file first, or right after it "
                    "in parentheses", name);
        return -1;
    }
    if (src < 0) {
        claim_fails(s, "gives `%s()` to %s, which is not one of the program's sources", name, file);
        return -1;
    }
    if (!body_of(code_of[src], name)) {
        claim_fails(s, "`%s()` is not defined in %s (%s%s)", name, sources[src],
                    where ? "it is in " : "no source defines it", where ? where : "");
        return -1;
    }
    return src;
}

/* A struct, union, enum or type: in the file named right after it, else
 * in some source. */
static void check_aggregate(const struct sentence *s, int i)
{
    const struct tok *t = &s->tok[i];
    int f = file_after(s, i), found = 0;
    const char *what = t->kind == T_STRUCT ? "struct"
                       : t->kind == T_UNION ? "union"
                       : t->kind == T_ENUM  ? "enum"
                                            : "";
    for (int k = 0; k < nsources && !found; k++) {
        if (f >= 0 && k != s->tok[f].file)
            continue;
        found = t->kind == T_TYPE ? defines_type(code_of[k], t->text)
                                  : defines_aggregate(code_of[k], what, t->text);
    }
    if (!found)
        claim_fails(s, "%s%s%s is not defined %s%s", what, *what ? " " : "", t->text,
                    f >= 0 ? "in " : "in any source", f >= 0 ? s->tok[f].text : "");
}

/* A line quoted from docs/examples/train-step-traced.txt is in it, up to
 * its attributes (" {", which the quote may shorten). */
static void check_quote(const struct sentence *s, const struct tok *t)
{
    char *traced = (char *)t_slurp("docs/examples/train-step-traced.txt", NULL), line[96];
    const char *brace = strstr(t->text, " {");
    snprintf(line, sizeof line, "\n%.*s", (int)(brace ? brace - t->text : (long)strlen(t->text)),
             t->text);
    if (!traced || (strncmp(traced, line + 1, strlen(line + 1)) && !strstr(traced, line)))
        claim_fails(s, "quotes `%s`, which docs/examples/train-step-traced.txt does not hold",
                    t->text);
    free(traced);
}

/* caller's body calls each of callee[0..n) in that order. */
static void check_calls(const struct sentence *s, int caller, int src, const int *callee, int n)
{
    const char *body = src >= 0 ? body_of(code_of[src], s->tok[caller].text) : NULL;
    long last = -1; /* where the latest call named so far is */
    int latest = 0;
    for (int k = 0; body && k < n; k++) {
        long at = first_call(body, s->tok[callee[k]].text);
        calls_checked++;
        if (at < 0)
            claim_fails(s, "`%s()` (%s) never calls `%s()`", s->tok[caller].text, sources[src],
                        s->tok[callee[k]].text);
        else if (at < last)
            claim_fails(s, "`%s()` calls `%s()` before `%s()`, not after", s->tok[caller].text,
                        s->tok[callee[k]].text, s->tok[callee[latest]].text);
        if (at > last)
            last = at, latest = k;
    }
}

/* "a() -> b()": file notes may stand between a and the arrow ("a() (f)",
 * "a() in f"), and a file before b ("-> f's b()"). */
static void check_arrow(const struct sentence *s, int i, const int *src)
{
    int a = i - 1, b = i + 1;
    while (a >= 0 && (s->tok[a].kind == T_FILE || is_punct(&s->tok[a], '(') ||
                      is_punct(&s->tok[a], ')') || is_word(&s->tok[a], "in")))
        a--;
    if (b < s->n && s->tok[b].kind == T_FILE)
        b++;
    if (a < 0 || b >= s->n || s->tok[a].kind != T_FUNC || s->tok[b].kind != T_FUNC) {
        claim_fails(s, "an arrow that does not stand between two functions");
        return;
    }
    check_calls(s, a, src[a], &b, 1);
}

/* "a() calls b(), c() and then d()": the caller is the last function
 * before "calls" at its depth or outside its parentheses, back to a ';'
 * (so "a() makes x (it calls b())" is a's); the callees follow at that
 * depth, joined by ",", "and" and "then", file notes and parentheses
 * between them passed over; ", and" or any other word ends the list. A
 * list with no caller in its sentence ("It calls b()") fails; "calls"
 * with neither ("a file calls ...") is no claim. */
static void check_calls_word(const struct sentence *s, int i, const int *src)
{
    int d = s->tok[i].depth, caller = -1, callee[64], n = 0, comma = 0;
    for (int j = i - 1, at = d; j >= 0 && caller < 0; j--) {
        if (s->tok[j].depth > at)
            continue; /* a parenthesis closed before "calls" */
        at = s->tok[j].depth; /* "a() does x (it calls b())": out to a */
        if (is_punct(&s->tok[j], ';'))
            break;
        if (s->tok[j].kind == T_FUNC)
            caller = j;
    }
    for (int j = i + 1; j < s->n && n < 64; j++) {
        const struct tok *t = &s->tok[j];
        if (t->depth < d)
            break;
        if (t->depth > d || t->kind == T_FILE || is_punct(t, '(') || is_punct(t, ')') ||
            is_word(t, "in") || is_word(t, "then") || (!comma && is_word(t, "and")))
            continue;
        if (t->kind == T_FUNC)
            callee[n++] = j;
        else if (!is_punct(t, ','))
            break;
        comma = is_punct(t, ',');
    }
    if (caller < 0 && n) /* "It calls b()": whose call, the checker cannot tell */
        claim_fails(s, "says \"calls `%s()`\" with no function before it in the sentence",
                    s->tok[callee[0]].text);
    else if (caller >= 0 && !n)
        claim_fails(s, "`%s()` calls, it says, but names no function", s->tok[caller].text);
    else if (caller >= 0)
        check_calls(s, caller, src[caller], callee, n);
}

/* Every claim of one sentence. A function's file is the one named right
 * after it ("name() (file" or "name() in file"), else the file named last
 * before it in the sentence; in a fenced block, the first file on its
 * line, else the block's file so far. */
static void check_sentence(struct sentence *s)
{
    static int src[MAX_TOKS];
    int file = s->code ? s->file : -1;
    const char *file_name = file >= 0 ? sources[file] : NULL;
    tokenize(s);
    if (s->n == MAX_TOKS)
        claim_fails(s, "a sentence of more than %d words: split it", MAX_TOKS);
    for (int i = 0; s->code && i < s->n; i++)
        if (s->tok[i].kind == T_FILE) {
            file = s->tok[i].file, file_name = s->tok[i].text;
            break;
        }
    for (int i = 0; i < s->n; i++) {
        const struct tok *t = &s->tok[i];
        int f = t->kind == T_FUNC ? file_after(s, i) : -1;
        if (t->kind == T_FILE) {
            check_file(s, t);
            if (!s->code)
                file = t->file, file_name = t->text;
        } else if (t->kind == T_FUNC) {
            src[i] = check_function(s, i, f >= 0 ? s->tok[f].file : file,
                                    f >= 0 ? s->tok[f].text : file_name);
        } else if (t->kind == T_STRUCT || t->kind == T_UNION || t->kind == T_ENUM ||
                   t->kind == T_TYPE) {
            check_aggregate(s, i);
        } else if (t->kind == T_QUOTE) {
            check_quote(s, t);
        }
    }
    for (int i = 0; i < s->n; i++) {
        if (s->tok[i].kind == T_ARROW)
            check_arrow(s, i, src);
        else if (is_word(&s->tok[i], "calls"))
            check_calls_word(s, i, src);
    }
    if (s->code)
        s->file = file;
}

/* ---- reading a document into sentences ---- */
struct reader {
    const char *doc;
    char para[8192]; /* the paragraph so far, newlines kept */
    size_t len;
    int line;        /* where it starts */
};
static struct sentence sentence;

static int ends_sentence(const char *p, const char *start)
{
    if (!strchr(".?!", *p) || (p[1] && !isspace((unsigned char)p[1])))
        return 0;
    return p - start < 3 || (strncmp(p - 3, "e.g", 3) && strncmp(p - 3, "i.e", 3));
}

static void check_text(const char *doc, int line, const char *text, size_t n)
{
    struct sentence *s = &sentence;
    s->doc = doc;
    s->line = line;
    s->code = 0;
    if (n >= sizeof s->text)
        CHECK(0, "%s:%d: a sentence of more than %zu bytes", doc, line, sizeof s->text);
    snprintf(s->text, sizeof s->text, "%.*s", (int)n, text);
    for (char *c = s->text; *c; c++)
        if (*c == '\n')
            *c = ' ';
    check_sentence(s);
}

static void flush(struct reader *r)
{
    const char *start = r->para;
    int line = r->line, ticks = 0;
    for (const char *p = r->para; p < r->para + r->len; p++) {
        ticks += *p == '`';
        if (ticks % 2 == 0 && ends_sentence(p, r->para)) {
            check_text(r->doc, line, start, (size_t)(p - start));
            for (; start <= p; start++)
                line += *start == '\n';
            while (isspace((unsigned char)*start))
                line += *start++ == '\n';
        }
    }
    if (start < r->para + r->len)
        check_text(r->doc, line, start, (size_t)(r->para + r->len - start));
    r->len = 0;
}

/* A list item's marker ("- ", "1. ") at the line's start: its length. */
static size_t list_marker(const char *line)
{
    size_t n = strspn(line, " "), d = strspn(line + n, "0123456789");
    if (!d && line[n] == '-' && line[n + 1] == ' ')
        return n + 2;
    if (d && line[n + d] == '.' && line[n + d + 1] == ' ')
        return n + d + 2;
    return 0;
}

static void add_line(struct reader *r, const char *line, size_t n, int at)
{
    if (!r->len)
        r->line = at;
    if (r->len + n + 1 >= sizeof r->para)
        CHECK(0, "%s:%d: a paragraph of more than %zu bytes", r->doc, r->line, sizeof r->para);
    if (r->len + n + 1 < sizeof r->para) {
        memcpy(r->para + r->len, line, n);
        r->len += n;
        r->para[r->len++] = '\n';
    }
}

/* The claims of path's text from the line `from` (NULL: the start) to the
 * next line that starts with `to` (NULL: the end). */
static void check_document(const char *path, const char *from, const char *to)
{
    char *text = (char *)t_slurp(path, NULL);
    struct reader r = {.doc = path};
    int at = 1, block = 0, on = from == NULL;
    CHECK(text != NULL, "cannot read %s", path);
    for (const char *p = text; p && *p; at++) {
        size_t n = strcspn(p, "\n"), m = list_marker(p);
        if (from && !strncmp(p, from, strlen(from)))
            on = 1;
        else if (on && to && !strncmp(p, to, strlen(to)))
            break;
        if (!on) {
            /* before the section */
        } else if (!strncmp(p, "```", 3)) {
            flush(&r);
            block = !block;
            sentence.file = -1;
        } else if (block) {
            sentence.doc = path, sentence.line = at, sentence.code = 1;
            snprintf(sentence.text, sizeof sentence.text, "%.*s", (int)n, p);
            check_sentence(&sentence);
        } else if (!n || *p == '#' || *p == '|' || m) {
            flush(&r);
            if (n && m)
                add_line(&r, p + m, n - m, at);
            else if (n)
                check_text(path, at, p, n);
        } else {
            add_line(&r, p, n, at);
        }
        p = p[n] ? p + n + 1 : NULL;
    }
    flush(&r);
    free(text);
}

/* The tour and README.md's map, claim by claim. */
static void check_claims(void)
{
    for (int i = 0; i < nsources; i++)
        code_of[i] = blank_comments(src_text[i]);
    functions_named = calls_checked = 0;
    check_document("docs/TOUR.md", NULL, NULL);
    int tour_functions = functions_named;
    check_document("README.md", "## The map", "## ");
    CHECK(tour_functions >= 100, "the tour names only %d functions", tour_functions);
    CHECK(calls_checked >= 30, "the tour claims only %d calls the checker reads", calls_checked);
    printf("tour: %d functions named, %d calls checked\n", functions_named, calls_checked);
    for (int i = 0; i < nsources; i++)
        free(code_of[i]);
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

/* The tour states the plain path's size as docs/plain-path.txt totals it
 * (the plain suite holds that list to what a step runs): the tour's
 * "(N functions, M lines)" must be the list's last line, "# total: N
 * functions, M lines". */
static void check_plain_path_length(void)
{
    char *tour = (char *)t_slurp("docs/TOUR.md", NULL);
    char *list = (char *)t_slurp("docs/plain-path.txt", NULL);
    const char *total = list ? strstr(list, "# total: ") : NULL;
    int nf = 0, nl = 0, tf = -1, tl = -1;
    CHECK(total && sscanf(total, "# total: %d functions, %d lines", &nf, &nl) == 2,
          "docs/plain-path.txt ends with no '# total: N functions, M lines'");
    const char *at = tour ? strstr(tour, "docs/plain-path.txt (") : NULL;
    CHECK(at && sscanf(at, "docs/plain-path.txt (%d functions, %d lines)", &tf, &tl) == 2,
          "docs/TOUR.md states no 'docs/plain-path.txt (N functions, M lines)'");
    CHECK(tf == nf && tl == nl,
          "docs/TOUR.md says the plain path is %d functions, %d lines; docs/plain-path.txt totals %d, %d",
          tf, tl, nf, nl);
    free(tour);
    free(list);
}

/* ---- docs/examples ----
 * What `make docs` makes of one training step, made again into tests/tmp
 * by the same rule (make docs-examples) and compared: the trace, the
 * program and its DOT byte for byte, the compile summary but for its time
 * ("; 0.23 ms"), and the SVG against the DOT it was drawn from (each
 * node's label lines as its text, as many nodes and edges), which needs
 * no graphviz. */
#define EXAMPLES "docs/examples/"
#define REMADE "tests/tmp/tour-docs/"

/* Blanks what follows the last "; " of each line of text that ends in
 * " ms" (a time). */
static void blank_times(char *text)
{
    for (char *t = text, *end; t && (end = strstr(t, " ms\n")); t = end + 4) {
        char *cut = end;
        while (cut > t && cut[-1] != '\n' && strncmp(cut, "; ", 2))
            cut--;
        memset(cut, ' ', (size_t)(end + 3 - cut));
    }
}

/* Files a and b agree but for their times. */
static int same_but_times(const char *a, const char *b)
{
    char *x = (char *)t_slurp(a, NULL), *y = (char *)t_slurp(b, NULL);
    blank_times(x);
    blank_times(y);
    int same = x && y && !strcmp(x, y);
    free(x);
    free(y);
    return same;
}

static int count(const char *text, const char *what)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)); p += strlen(what))
        n++;
    return n;
}

/* The SVG drawn from the DOT: each line of each node's label is one of
 * its texts, and it has as many texts, nodes and edges. */
static void check_svg(const char *dot, const char *svg)
{
    int lines = 0, missing = 0;
    char first[160] = "";
    for (const char *p = dot; (p = strstr(p, "label=\""));) {
        const char *end = strchr(p += 7, '"');
        for (const char *q = p; end && q < end; lines++) {
            const char *nl = strstr(q, "\\n");
            size_t n = (size_t)((nl && nl < end ? nl : end) - q);
            char text[160];
            snprintf(text, sizeof text, ">%.*s</text>", (int)n, q);
            if (!strstr(svg, text) && !missing++)
                snprintf(first, sizeof first, "%s", text);
            q += n + (nl && nl < end ? 2 : 0);
        }
        p = end ? end : p;
    }
    CHECK(!missing && count(svg, "<text") == lines,
          "docs/examples/train-step-program.svg has %d texts, its DOT %d label lines, %d of "
          "them not in the SVG (first: %s): make docs redraws it",
          count(svg, "<text"), lines, missing, first);
    CHECK(count(svg, "class=\"node\"") == count(dot, "label=\"") &&
              count(svg, "class=\"edge\"") == count(dot, " -> "),
          "docs/examples/train-step-program.svg has %d nodes and %d edges, the DOT %d and %d: "
          "make docs redraws it", count(svg, "class=\"node\""), count(svg, "class=\"edge\""),
          count(dot, "label=\""), count(dot, " -> "));
}

static void check_examples(void)
{
    static const char *const same[] = {"train-step-traced.txt", "train-step-program.txt",
                                       "train-step-program.dot"};
    char out[2048], a[160], b[160];
    int rc = t_run("rm -rf " REMADE " && MAKEFLAGS= make -s docs-examples DOCS_OUT=" REMADE " 2>&1", out,
                   sizeof out);
    CHECK(rc == 0, "make docs-examples: exit %d: %s", rc, out);
    for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
        snprintf(a, sizeof a, EXAMPLES "%s", same[i]);
        snprintf(b, sizeof b, REMADE "%s", same[i]);
        CHECK(t_same_file(a, b), "%s is not what the code makes now (%s): make docs", a, b);
    }
    CHECK(same_but_times(EXAMPLES "train-step-compile.txt", REMADE "train-step-compile.txt"),
          EXAMPLES "train-step-compile.txt is not what the code makes now (" REMADE
                   "train-step-compile.txt): make docs");
    char *dot = (char *)t_slurp(EXAMPLES "train-step-program.dot", NULL);
    char *svg = (char *)t_slurp(EXAMPLES "train-step-program.svg", NULL);
    CHECK(dot && svg, "docs/examples has no train-step-program.dot or .svg");
    if (dot && svg)
        check_svg(dot, svg);
    free(dot);
    free(svg);
}

void test_tour(void)
{
    check_plain_path_length();
    list_sources();
    for (int i = 0; i < NSOURCES; i++) {
        src_text[i] = (char *)t_slurp(sources[i], NULL);
        CHECK(src_text[i] != NULL, "cannot read %s", sources[i]);
        if (!src_text[i])
            src_text[i] = strdup("");
    }
    check_claims();
    check_examples();
    for (int i = 0; i < NSOURCES; i++) {
        check_function_lengths(sources[i], src_text[i]);
        /* where ops and operands are read: the model, the graph and its
         * compiler, the device */
        if (!strcmp(sources[i], "graph.c") || !strcmp(sources[i], "xla_sim.c") ||
            !strcmp(sources[i], "gpt.c") || !strcmp(sources[i], "cmd/train.c") ||
            !strncmp(sources[i], "compiler/", 9) || !strncmp(sources[i], "device/", 7) ||
            !strncmp(sources[i], "model/", 6))
            check_no_slots(sources[i], src_text[i]);
        free(src_text[i]);
        free(sources[i]);
    }
    nsources = 0;
}
