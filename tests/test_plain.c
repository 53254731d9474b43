/* tests/test_plain.c: the plain path the tour walks (docs/plain-path.txt)
 * is what runs. tests/plain_path.py runs one lazy and one eager default
 * training step in the coverage build (build/cov, which make test makes
 * for this suite) and lists every function they run from
 * model_train_step down; the committed list must name the same functions
 * in the same files, and stay within its line budget. `make plain-path`
 * rewrites the list. */
#include <string.h>
#include "test.h"

#define NOW "tests/tmp/plain-path.txt"         /* what runs, as listed now */
#define DOCTORED "tests/tmp/plain-doctored.txt" /* the committed list, one entry off, one made up */

void test_plain(void)
{
    static char out[1 << 16];
    /* the list to /dev/null, what went wrong (stderr) to out */
    int rc = t_run("mkdir -p tests/tmp && { tests/plain_path.py --write " NOW " > /dev/null; }",
                   out, sizeof out);
    CHECK(rc == 0, "tests/plain_path.py could not list the plain path (exit %d): %s", rc, out);
    if (rc != 0)
        return;
    rc = t_run("tests/plain_path.py --compare docs/plain-path.txt " NOW, out, sizeof out);
    CHECK(rc == 0, "docs/plain-path.txt is not what a default step runs (`make plain-path` "
          "writes it anew; the tour reads it):\n%s", out);

    /* The comparison bites: the committed list without its first function
     * and with one nothing has, against what runs. */
    rc = t_run("awk '!/^#/ && !done { done = 1; next } { print } "
               "END { print \"gpt.c:1-2 2 no_such_function\" }' docs/plain-path.txt > " DOCTORED
               " && tests/plain_path.py --compare " DOCTORED " " NOW, out, sizeof out);
    CHECK(rc == 1 && strstr(out, "the list lacks it") && strstr(out, "no_such_function"),
          "a list that lacks a function and names one that never runs passed (exit %d): %s", rc,
          out);
}
