/* watch.c: the run log, the loss chart and the TensorBoard event file (see
 * watch.h). Read top-down: the log's lines and how a resume keeps them,
 * the chart, the event file, then the RunLog that drives all three. */
#include "watch/watch.h"
#include "util/util.h"
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int fail(char *err, size_t elen, const char *fmt, const char *a, const char *b)
{
    snprintf(err, elen, fmt, a, b);
    return -1;
}

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* ---- a series of points: what the chart and the event file are made of ---- */

typedef struct Series {
    int *step;
    float *value;
    double *wall; /* when it was logged, for the event file */
    int n, cap;
} Series;

static void series_add(Series *s, int step, float v, double wall)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 1024;
        s->step = xrealloc(s->step, sizeof *s->step * (size_t)s->cap);
        s->value = xrealloc(s->value, sizeof *s->value * (size_t)s->cap);
        s->wall = xrealloc(s->wall, sizeof *s->wall * (size_t)s->cap);
    }
    s->step[s->n] = step;
    s->value[s->n] = v;
    s->wall[s->n++] = wall;
}

static void series_free(Series *s)
{
    free(s->step);
    free(s->value);
    free(s->wall);
    *s = (Series){0};
}

/* ---- the log's lines ----
 * Our own lines, in a fixed shape, so a few lookups parse them:
 *   {"kind":"step","step":12,"loss":4.1,"lr":0.001,"time":{"wall":...,...}} */

/* The number after "key": in line, or NAN. */
static double field(const char *line, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    if (!p)
        return NAN;
    char *end;
    double v = strtod(p + strlen(pat), &end);
    return end == p + strlen(pat) ? NAN : v; /* "null": a diverged loss */
}

static int is_kind(const char *line, const char *kind)
{
    char pat[64];
    snprintf(pat, sizeof pat, "{\"kind\":\"%s\"", kind);
    return !strncmp(line, pat, strlen(pat));
}

/* A whole line of ours: a kill may have cut the last one short. */
static int whole(const char *line)
{
    size_t n = strlen(line);
    return n >= 2 && line[0] == '{' && line[n - 2] == '}' && line[n - 1] == '\n';
}

/* A kept line's points go to the series (perf: ms a step, or NULL). */
static void read_points(const char *line, Series *train, Series *test, Series *perf)
{
    double step = field(line, "step"), wall = field(line, "wall");
    if (is_kind(line, "step"))
        series_add(train, (int)step, (float)field(line, "loss"), wall);
    if (is_kind(line, "step") && perf)
        series_add(perf, (int)step, (float)field(line, "ms"), wall);
    else if (is_kind(line, "eval"))
        series_add(test, (int)step, (float)field(line, "test_loss"), wall);
}

/* Reads path's lines: the first config line, then every whole line of a
 * step before `before` (before < 0: all), into the series and, if keep is
 * not NULL, into keep. 0, or -1 if the file cannot be read. */
static int read_log(const char *path, int before, Series *train, Series *test, Series *perf,
                    FILE *keep)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char *line = NULL;
    size_t cap = 0;
    int configs = 0;
    while (getline(&line, &cap, f) > 0) {
        if (!whole(line))
            break; /* a torn last line, and nothing after it is ours */
        if (is_kind(line, "config")) {
            if (configs++ == 0 && keep)
                fputs(line, keep);
            continue;
        }
        double step = field(line, "step");
        if (isnan(step) || (before >= 0 && step >= before))
            continue;
        read_points(line, train, test, perf);
        if (keep)
            fputs(line, keep);
    }
    free(line);
    fclose(f);
    return 0;
}

/* ---- the chart ---- */

/* A round step for an axis of about `ticks` ticks over [lo, hi]. */
static double nice_step(double lo, double hi, int ticks)
{
    double raw = (hi - lo) / ticks, mag = pow(10, floor(log10(raw))), r = raw / mag;
    return mag * (r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10);
}

typedef struct Curve {
    const Series *s;
    const char *color, *label;
    int dashed;
} Curve;

enum { W = 800, H = 480, LEFT = 70, RIGHT = 20, TOP = 40, BOTTOM = 50, MAX_POINTS = 1000 };

static double px(double x, double x0, double x1) { return LEFT + (x - x0) / (x1 - x0) * (W - LEFT - RIGHT); }
static double py(double y, double y0, double y1) { return H - BOTTOM - (y - y0) / (y1 - y0) * (H - TOP - BOTTOM); }

/* A curve as a polyline of at most MAX_POINTS points: a long series is
 * drawn as the means of equal runs of points (a smoothed train loss). */
static void draw_curve(FILE *f, const Curve *c, double x0, double x1, double y0, double y1)
{
    const Series *s = c->s;
    int per = s->n > MAX_POINTS ? (s->n + MAX_POINTS - 1) / MAX_POINTS : 1;
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", c->color,
            c->dashed ? " stroke-dasharray=\"6 4\"" : "");
    for (int i = 0; i < s->n; i += per) {
        double x = 0, y = 0;
        int k = 0;
        for (int d = 0; d < per && i + d < s->n; d++)
            if (isfinite(s->value[i + d])) { /* a diverged step has no point */
                x += s->step[i + d];
                y += s->value[i + d];
                k++;
            }
        if (k)
            fprintf(f, "%.1f,%.1f ", px(x / k, x0, x1), py(y / k, y0, y1));
    }
    fputs("\"/>\n", f);
}

static void draw_axes(FILE *f, double x0, double x1, double y0, double y1)
{
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#444\"/>\n",
            LEFT, TOP, W - LEFT - RIGHT, H - TOP - BOTTOM);
    double dx = nice_step(x0, x1, 8), dy = nice_step(y0, y1, 6);
    for (double x = ceil(x0 / dx) * dx; x <= x1 + 1e-9; x += dx)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ddd\"/>"
                "<text x=\"%.1f\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\">%g</text>\n",
                px(x, x0, x1), TOP, px(x, x0, x1), H - BOTTOM, px(x, x0, x1), H - BOTTOM + 18, x);
    for (double y = ceil(y0 / dy) * dy; y <= y1 + 1e-9; y += dy)
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                "<text x=\"%d\" y=\"%.1f\" font-size=\"12\" text-anchor=\"end\">%g</text>\n",
                LEFT, py(y, y0, y1), W - RIGHT, py(y, y0, y1), LEFT - 6, py(y, y0, y1) + 4, y);
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"14\" text-anchor=\"middle\">step</text>\n"
            "<text x=\"16\" y=\"%d\" font-size=\"14\" text-anchor=\"middle\" transform=\"rotate(-90 "
            "16 %d)\">loss (nats per byte)</text>\n", (LEFT + W - RIGHT) / 2, H - 10,
            (TOP + H - BOTTOM) / 2, (TOP + H - BOTTOM) / 2);
}

/* Text for SVG: &, < and > escaped. */
static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++)
        fputs(*s == '&' ? "&amp;" : *s == '<' ? "&lt;" : *s == '>' ? "&gt;" : (char[]){*s, 0}, f);
}

/* The curves on one chart, written atomically to path. */
static int write_chart(const char *path, const Curve *c, int n, char *err, size_t elen)
{
    double x0 = 0, x1 = 1, y0 = INFINITY, y1 = -INFINITY;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < c[i].s->n; k++) {
            x1 = fmax(x1, c[i].s->step[k]);
            if (isfinite(c[i].s->value[k])) {
                y0 = fmin(y0, c[i].s->value[k]);
                y1 = fmax(y1, c[i].s->value[k]);
            }
        }
    if (!(y0 < y1)) { /* nothing yet, or one value */
        y0 = isfinite(y0) ? y0 - 1 : 0;
        y1 = y0 + 2;
    }
    double pad = 0.05 * (y1 - y0);
    y0 = fmax(0, y0 - pad), y1 += pad;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return fail(err, elen, "%s: cannot write (%s)", path, strerror(errno));
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n"
            "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H, W, H, W, H);
    draw_axes(f, x0, x1, y0, y1);
    for (int i = 0; i < n; i++) {
        draw_curve(f, &c[i], x0, x1, y0, y1);
        fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"%s/>"
                "<text x=\"%d\" y=\"%d\" font-size=\"12\">", LEFT + 10 + 200 * (i % 3),
                14 + 14 * (i / 3), LEFT + 40 + 200 * (i % 3), 14 + 14 * (i / 3), c[i].color,
                c[i].dashed ? " stroke-dasharray=\"6 4\"" : "", LEFT + 46 + 200 * (i % 3),
                18 + 14 * (i / 3));
        xml_text(f, c[i].label);
        fputs("</text>\n", f);
    }
    fputs("</svg>\n", f);
    if (fclose(f) || commit_tmp(tmp, path)) {
        unlink(tmp);
        return fail(err, elen, "%s: cannot write (%s)", path, strerror(errno));
    }
    return 0;
}

/* ---- the TensorBoard event file ----
 * A record: u64 length, u32 masked CRC-32C of those 8 bytes, the data, u32
 * masked CRC-32C of the data. The data is an Event proto:
 *   Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
 *             Summary summary = 5; }
 *   Summary { repeated Value value = 1; }
 *   Value   { string tag = 1; float simple_value = 2; } */

static uint32_t crc32c(const unsigned char *p, size_t n)
{
    static uint32_t table[256];
    if (!table[1])
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1; /* Castagnoli, reflected */
            table[i] = c;
        }
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++)
        c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static unsigned tfrecord_masked_crc(const void *p, size_t n)
{
    uint32_t c = crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

typedef struct Proto {
    unsigned char b[512];
    size_t n;
} Proto;

static void put_varint(Proto *p, uint64_t v)
{
    do {
        p->b[p->n++] = (unsigned char)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
        v >>= 7;
    } while (v);
}

static void put_bytes(Proto *p, int field_no, const void *data, size_t n)
{
    put_varint(p, (uint64_t)field_no << 3 | 2);
    put_varint(p, n);
    memcpy(p->b + p->n, data, n);
    p->n += n;
}

static void write_record(FILE *f, const Proto *e)
{
    unsigned char len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)((uint64_t)e->n >> (8 * i));
    uint32_t c1 = tfrecord_masked_crc(len, 8), c2 = tfrecord_masked_crc(e->b, e->n);
    fwrite(len, 1, 8, f);
    fwrite(&c1, 4, 1, f); /* little-endian, as x86-64 stores it */
    fwrite(e->b, 1, e->n, f);
    fwrite(&c2, 4, 1, f);
}

/* An Event: its wall time and step, then either the file version or one
 * scalar (tag, value). */
static void write_event(FILE *f, double wall, long step, const char *version, const char *tag,
                        float value)
{
    Proto e = {.n = 0}, v = {.n = 0}, s = {.n = 0};
    e.b[e.n++] = 1 << 3 | 1; /* wall_time, 64-bit */
    memcpy(e.b + e.n, &wall, 8);
    e.n += 8;
    put_varint(&e, 2 << 3 | 0); /* step, varint */
    put_varint(&e, (uint64_t)step);
    if (version) {
        put_bytes(&e, 3, version, strlen(version));
    } else {
        put_bytes(&v, 1, tag, strlen(tag));
        v.b[v.n++] = 2 << 3 | 5; /* simple_value, 32-bit */
        memcpy(v.b + v.n, &value, 4);
        v.n += 4;
        put_bytes(&s, 1, v.b, v.n);
        put_bytes(&e, 5, s.b, s.n);
    }
    write_record(f, &e);
}

/* Removes the event files an earlier run of this directory left: the new
 * one carries all of their kept points. */
static void remove_old_events(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[4400];
    while (d && (e = readdir(d)))
        if (!strncmp(e->d_name, "events.out.tfevents.", 20) && strstr(e->d_name, ".gpt")) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    if (d)
        closedir(d);
}

/* ---- the run log ---- */

struct RunLog {
    char dir[4096], log[4200], chart[4200];
    FILE *jsonl, *events;
    Series train, test, perf; /* perf: ms a step, for the event file */
    int failed;
};

/* A JSON string: printable ASCII as it is, every other byte as \u00XX (a
 * continuation may hold half a UTF-8 character; the line stays JSON). */
static void json_string(FILE *f, const char *s, size_t n)
{
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 32 || c == 127 || c >= 128)
            fprintf(f, "\\u%04x", c); /* a byte, not a character: keeps the line valid JSON */
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static int redraw(RunLog *l, char *err, size_t elen)
{
    Curve c[2] = {{&l->train, "#1f77b4", "train loss", 0}, {&l->test, "#d62728", "test loss", 1}};
    return write_chart(l->chart, c, 2, err, elen);
}

RunLog *runlog_open(const char *dir, const char *config_json, int resume_step, char *err,
                    size_t elen)
{
    RunLog *l = xmalloc(sizeof *l);
    memset(l, 0, sizeof *l);
    snprintf(l->dir, sizeof l->dir, "%s", dir);
    snprintf(l->log, sizeof l->log, "%s/metrics.jsonl", dir);
    snprintf(l->chart, sizeof l->chart, "%s/loss.svg", dir);
    char tmp[4300], events[4400];
    snprintf(tmp, sizeof tmp, "%s.tmp", l->log);
    FILE *keep = fopen(tmp, "w");
    if (!keep) {
        fail(err, elen, "%s: cannot write (%s)", tmp, strerror(errno));
        free(l);
        return NULL;
    }
    if (resume_step <= 0 ||
        read_log(l->log, resume_step, &l->train, &l->test, &l->perf, keep) != 0)
        fprintf(keep, "{\"kind\":\"config\",%s}\n", config_json);
    if (fclose(keep) || commit_tmp(tmp, l->log) || !(l->jsonl = fopen(l->log, "a"))) {
        fail(err, elen, "%s: cannot write (%s)", l->log, strerror(errno));
        unlink(tmp);
        runlog_close(l, NULL, 0);
        return NULL;
    }
    remove_old_events(dir);
    snprintf(events, sizeof events, "%s/events.out.tfevents.%010ld.gpt", dir, (long)time(NULL));
    if (!(l->events = fopen(events, "wb"))) {
        fail(err, elen, "%s: cannot write (%s)", events, strerror(errno));
        runlog_close(l, NULL, 0);
        return NULL;
    }
    write_event(l->events, wall_now(), 0, "brain.Event:2", NULL, 0);
    for (int i = 0; i < l->train.n; i++)
        write_event(l->events, l->train.wall[i], l->train.step[i], NULL, "train/loss",
                    l->train.value[i]);
    for (int i = 0; i < l->test.n; i++)
        write_event(l->events, l->test.wall[i], l->test.step[i], NULL, "test/loss",
                    l->test.value[i]);
    for (int i = 0; i < l->perf.n; i++)
        write_event(l->events, l->perf.wall[i], l->perf.step[i], NULL, "perf/ms_per_step",
                    l->perf.value[i]);
    fflush(l->events);
    if (l->train.n && redraw(l, err, elen)) {
        runlog_close(l, NULL, 0);
        return NULL;
    }
    return l;
}

/* A float as JSON: a number, or null (JSON has no NaN or infinity). */
static const char *json_number(char *buf, size_t n, double v)
{
    if (isfinite(v))
        snprintf(buf, n, "%.9g", v);
    else
        snprintf(buf, n, "null");
    return buf;
}

void runlog_step(RunLog *l, const StepFigures *f)
{
    double wall = wall_now();
    char loss[32];
    fprintf(l->jsonl, "{\"kind\":\"step\",\"step\":%d,\"loss\":%s,\"lr\":%.9g,\"time\":{"
            "\"wall\":%.3f,\"ms\":%.4f,\"tokens_per_s\":%.1f,\"compiles\":%ld,\"cache_hits\":%ld,"
            "\"host_reads\":%ld", f->step, json_number(loss, sizeof loss, f->loss), f->lr, wall,
            f->ms, f->tokens_per_s, f->compiles, f->cache_hits, f->host_reads);
    if (f->slowdown > 0) /* the machine is busy: how much slower, and why */
        fprintf(l->jsonl, ",\"busy_slowdown\":%.3f,\"waited_for_core\":%.3f", f->slowdown,
                f->waited);
    fputs("}}\n", l->jsonl);
    fflush(l->jsonl);
    series_add(&l->train, f->step, f->loss, wall);
    write_event(l->events, wall, f->step, NULL, "train/loss", f->loss);
    write_event(l->events, wall, f->step, NULL, "perf/ms_per_step", (float)f->ms);
    fflush(l->events);
    l->failed |= ferror(l->jsonl) || ferror(l->events);
}

void runlog_eval(RunLog *l, int step, float train_loss, float test_loss, double eval_s,
                 const char *text, size_t n, const size_t *windows, int nw)
{
    double wall = wall_now();
    char train[32], test[32];
    fprintf(l->jsonl, "{\"kind\":\"eval\",\"step\":%d,\"train_loss\":%s,\"test_loss\":%s,"
            "\"continuation\":", step, json_number(train, sizeof train, train_loss),
            json_number(test, sizeof test, test_loss));
    json_string(l->jsonl, text, n);
    if (windows) {
        fputs(",\"windows\":[", l->jsonl);
        for (int i = 0; i < nw; i++)
            fprintf(l->jsonl, "%s%zu", i ? "," : "", windows[i]);
        fputc(']', l->jsonl);
    }
    fprintf(l->jsonl, ",\"time\":{\"wall\":%.3f,\"eval_s\":%.3f}}\n", wall, eval_s);
    fflush(l->jsonl);
    series_add(&l->test, step, test_loss, wall);
    write_event(l->events, wall, step, NULL, "test/loss", test_loss);
    fflush(l->events);
    char err[512];
    l->failed |= ferror(l->jsonl) || ferror(l->events) || redraw(l, err, sizeof err);
}

void runlog_note(RunLog *l, int step, const char *kind, const char *time_json)
{
    fprintf(l->jsonl, "{\"kind\":\"%s\",\"step\":%d,\"time\":{%s}}\n", kind, step, time_json);
    fflush(l->jsonl);
}

int runlog_close(RunLog *l, char *err, size_t elen)
{
    if (err && elen)
        err[0] = 0;
    if (!l)
        return 0;
    int bad = l->failed || (l->train.n && redraw(l, err, elen));
    bad |= l->jsonl && fclose(l->jsonl);
    bad |= l->events && fclose(l->events);
    if (bad && err && !strchr(err, ':'))
        fail(err, elen, "%s: cannot write the run log (%s)", l->log, strerror(errno));
    series_free(&l->train);
    series_free(&l->test);
    series_free(&l->perf);
    free(l);
    return bad ? -1 : 0;
}

/* ---- gpt plot ---- */

int plot_runs(const char *const *dirs, int n, const char *out, char *err, size_t elen)
{
    static const char *const colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                         "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};
    Series *s = xmalloc(sizeof *s * 2 * (size_t)n);
    memset(s, 0, sizeof *s * 2 * (size_t)n);
    Curve *c = xmalloc(sizeof *c * 2 * (size_t)n);
    char (*labels)[300] = xmalloc(sizeof *labels * 2 * (size_t)n);
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/metrics.jsonl", dirs[i]);
        if (read_log(path, -1, &s[2 * i], &s[2 * i + 1], NULL, NULL))
            rc = fail(err, elen, "%s: cannot read the run log (%s)", path, strerror(errno));
        snprintf(labels[2 * i], sizeof labels[0], "%s train", dirs[i]);
        snprintf(labels[2 * i + 1], sizeof labels[0], "%s test", dirs[i]);
        c[2 * i] = (Curve){&s[2 * i], colors[i % 8], labels[2 * i], 0};
        c[2 * i + 1] = (Curve){&s[2 * i + 1], colors[i % 8], labels[2 * i + 1], 1};
    }
    if (!rc)
        rc = write_chart(out, c, 2 * n, err, elen);
    for (int i = 0; i < 2 * n; i++)
        series_free(&s[i]);
    free(s);
    free(c);
    free(labels);
    return rc;
}
