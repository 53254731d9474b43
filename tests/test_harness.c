/* tests/test_harness.c: tests/run itself. A suite that crashes, hangs or
 * is stopped with tests/run fails by name with the reason and keeps what
 * it had counted; the suites after it still run; what it started is
 * stopped; the closing line adds it all up and the exit status says it
 * failed. The faults are tests/run's test-only switches GPT_TEST_CRASH
 * and GPT_TEST_HANG (tests/main.c), put on the grads suite (quick: some
 * 40 checks in 0.01 s) with fmath after it, in this very binary run again
 * (the sanitized build under make check-mem checks itself). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "test.h"

#define FAULTY "grads"
#define AFTER "fmath"
#define LOG "tests/tmp/harness.txt"
#define HANG_LIMIT "2" /* seconds: GPT_TEST_TIMEOUT of the hang's run, fmath takes 0.3 */

/* The counts of the line "suite NAME  P passed, F failed, S skipped". */
static int suite_counts(const char *out, const char *name, struct t_counts *c)
{
    char line[64];
    snprintf(line, sizeof line, "\nsuite %-8s ", name);
    const char *at = strstr(out, line);
    return at && sscanf(at + strlen(line), "%d passed, %d failed, %d skipped", &c->pass, &c->fail,
                        &c->skip) == 3;
}

/* The counts of the closing line "P passed, F failed, S skipped", the
 * output's last. */
static int closing_counts(const char *out, struct t_counts *c)
{
    size_t n = strlen(out);
    if (n < 2 || out[n - 1] != '\n')
        return 0;
    const char *last = out + n - 2;
    while (last > out && last[-1] != '\n')
        last--;
    char rest;
    return sscanf(last, "%d passed, %d failed, %d skipped%c", &c->pass, &c->fail, &c->skip,
                  &rest) == 4 && rest == '\n';
}

/* The sleeper the fault started must be gone; killed here if not. */
static void check_sleeper_stopped(const char *out, const char *what)
{
    const char *at = strstr(out, "(sleeper pid ");
    long pid = at ? strtol(at + strlen("(sleeper pid "), NULL, 10) : 0;
    CHECK(pid > 0, "%s: no line names the sleeper it started: %.3000s", what, out);
    if (pid > 0 && t_running(pid, NULL, NULL)) {
        kill((pid_t)pid, SIGKILL);
        CHECK(0, "%s: the sleeper it started (pid %ld) still runs after tests/run", what, pid);
    }
}

/* Runs this binary on FAULTY and AFTER with env set, for the fault fault
 * (a CHECK's description): it must exit want_rc and say "FAIL suite
 * FAULTY: says"; FAULTY must keep its checks, with the one failure, and
 * AFTER must run (unless stopped); the closing line must add them up. */
static void check_fault(const char *exe, const char *fault, const char *env, int want_rc,
                        const char *says, int after_runs)
{
    char cmd[2048], out[64];
    snprintf(cmd, sizeof cmd, "%s %s " FAULTY " " AFTER " > " LOG " 2>&1", env, exe);
    int rc = t_run(cmd, out, sizeof out);
    char *log = (char *)t_slurp(LOG, NULL), want[256];
    if (!log)
        log = strdup("");
    struct t_counts bad = {0}, next = {0}, total = {0};
    snprintf(want, sizeof want, "\nFAIL suite " FAULTY ": %s\n", says);
    CHECK(rc == want_rc && strstr(log, want), "%s: exit %d (want %d), no line '%s': %.3000s",
          fault, rc, want_rc, want + 1, log);
    CHECK(suite_counts(log, FAULTY, &bad) && bad.pass > 0 && bad.fail == 1,
          "%s: suite " FAULTY "'s line lost its checks or its failure: %.3000s", fault, log);
    int ran = suite_counts(log, AFTER, &next);
    CHECK(after_runs ? ran && next.pass > 0 && next.fail == 0 : !ran,
          "%s: suite " AFTER " after it %s: %.3000s", fault,
          after_runs ? "did not run, or failed" : "ran", log);
    CHECK(closing_counts(log, &total) && total.pass == bad.pass + next.pass &&
              total.fail == bad.fail + next.fail && total.skip == bad.skip + next.skip,
          "%s: the closing line is missing or not the suites' sum: %.3000s", fault, log);
    check_sleeper_stopped(log, fault);
    free(log);
}

/* "killed by signal 11 (Segmentation fault)" and the like. */
static const char *by_signal(char *buf, size_t n, const char *how, int sig)
{
    snprintf(buf, n, "%s signal %d (%s)", how, sig, strsignal(sig));
    return buf;
}

void test_harness(void)
{
    char exe[1024], out[256], cmd[1200], says[128];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        CHECK(0, "cannot find this binary (/proc/self/exe)");
        return;
    }
    exe[n] = 0;
    t_run("mkdir -p tests/tmp", out, sizeof out);
    check_fault(exe, "a crash", "GPT_TEST_CRASH=" FAULTY, 1,
                by_signal(says, sizeof says, "killed by", SIGSEGV), 1);
    /* the hang's sleeper ignores SIGTERM: it takes the SIGKILL after */
    check_fault(exe, "a hang", "GPT_TEST_HANG=" FAULTY " GPT_TEST_TIMEOUT=" HANG_LIMIT, 1,
                "still running after " HANG_LIMIT " s (GPT_TEST_TIMEOUT): stopped", 1);
    /* tests/run stopped by SIGTERM (as tests/mutate.sh's timeout does):
     * the suite's group gets it, and the run ends by it, suites left */
    check_fault(exe, "tests/run stopped", "GPT_TEST_HANG=" FAULTY " timeout " HANG_LIMIT, 124,
                by_signal(says, sizeof says, "stopped: tests/run got", SIGTERM), 0);
    snprintf(cmd, sizeof cmd, "GPT_TEST_TIMEOUT=soon %s " FAULTY, exe);
    t_expect_one_line(cmd, 2, "GPT_TEST_TIMEOUT=soon: expected a suite's time limit in seconds");
    snprintf(cmd, sizeof cmd, "GPT_TEST_CRASH=nosuch %s " FAULTY, exe);
    t_expect_one_line(cmd, 2, "GPT_TEST_CRASH=nosuch: no suite 'nosuch'");
}
