/* pod/error.c: the program's errors and its planned exit (error.h). In a pod
 * (pod/comm.h: with one process, a pod of one) an error stops every rank:
 * that half is why it lives beside the transport, above util/. */
#include "pod/error.h"
#include "pod/comm.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* Set just before a planned exit: every rank leaves the pod together. Any
 * other exit (an error in a lower layer) aborts the pod, so the other
 * ranks do not wait for this one (pod.c's exit handler asks which). */
static int planned_exit;

int exit_was_planned(void) { return planned_exit; }

_Noreturn void exit_planned(int code)
{
    planned_exit = 1;
    fflush(stdout);
    exit(code);
}

/* "gpt: [rank R: ]MESSAGE\n" on stderr in one write (rank < 0: none), so
 * that the lines of ranks sharing a terminal or a pipe never interleave. */
static void say_line(int rank, const char *fmt, va_list ap)
{
    char line[4096];
    int n = rank >= 0 ? snprintf(line, sizeof line, "gpt: rank %d: ", rank)
                      : snprintf(line, sizeof line, "gpt: ");
    n += vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    if (n > (int)sizeof line - 2)
        n = (int)sizeof line - 2; /* cut short, the newline still last */
    line[n++] = '\n';
    fwrite(line, 1, (size_t)n, stderr);
}

/* Usage errors exit 2, runtime errors 1; both are one line on stderr. In
 * a pod a usage error is every rank's (they run the same flags), so the
 * master alone says it while the others wait for it to; a runtime error is
 * said, with its rank, by the rank that meets it. Either way every rank
 * stops. */
static _Noreturn void vdie(int code, const char *fmt, va_list ap)
{
    int waited = 0;
    if (code == 2 && comm_rank() != 0 && comm_size() > 1) {
        /* the master's abort ends this wait; aborting first could cut its line */
        comm_set_timeout(30);
        comm_barrier();
        waited = 1; /* the master met no such error: say it here */
    }
    if (code != 2 || comm_rank() == 0 || waited)
        say_line(comm_size() > 1 && (code != 2 || waited) ? comm_rank() : -1, fmt, ap);
    if (comm_size() > 1)
        comm_abort(code);
    exit(code);
}

_Noreturn void die(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vdie(code, fmt, ap);
}

/* A usage error unless ok: for the checks of flags. */
void need(int ok, const char *fmt, ...)
{
    if (ok)
        return;
    va_list ap;
    va_start(ap, fmt);
    vdie(2, fmt, ap);
}

/* An error every rank meets at the same point from the same bytes (a
 * diverged loss, a bad checkpoint): the master says it once and every rank
 * leaves the pod together. */
_Noreturn void die_all(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (comm_size() == 1)
        vdie(code, fmt, ap);
    if (comm_rank() == 0)
        say_line(-1, fmt, ap);
    va_end(ap);
    comm_barrier();
    exit_planned(code);
}
