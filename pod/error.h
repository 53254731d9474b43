/* pod/error.h: the program's errors and its planned exit (error.c). A leaf:
 * it includes no header of the model; in a pod (pod/comm.h) every rank
 * stops together. */
#ifndef ERROR_H
#define ERROR_H

/* Errors: one line on stderr ("gpt: ..."), written at once so that the
 * lines of two ranks never interleave, then exit: 2 for usage, 1 at run
 * time. */
_Noreturn void die(int code, const char *fmt, ...);
/* An error every rank meets alike: the master says it once. */
_Noreturn void die_all(int code, const char *fmt, ...);
void need(int ok, const char *fmt, ...); /* unless ok, a usage error */

/* Exit, every rank together. */
_Noreturn void exit_planned(int code);
/* Whether the exit under way is exit_planned's (pod.c's exit handler). */
int exit_was_planned(void);

#endif
