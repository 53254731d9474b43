# gpt: one static binary. `make`, `make test`, `make debug`, `make clean`.
CC      ?= gcc
CFLAGS  ?= -O2 -g
# No -march=native: the shipped binary runs on any x86-64 and picks its
# kernels at run time (tensor.c compiles each SIMD path with target attributes).
WARN    := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -Wno-unused-parameter
OMP     := -fopenmp
LDLIBS  := -lm
SRC     := gpt.c graph.c xla_sim.c tensor.c
HDR     := gpt.h graph.h xla_sim.h tensor.h
TESTSRC := tests/main.c tests/test_kernels.c tests/test_grads.c tests/test_model.c \
           tests/test_ckpt.c tests/test_xla.c tests/test_cli.c

all: gpt

gpt: $(SRC) $(HDR)
	$(CC) $(CFLAGS) $(WARN) $(OMP) -static -o $@ $(SRC) $(LDLIBS)

# The tests link the same sources with gpt.c's main() left out.
tests/run: $(SRC) $(HDR) $(TESTSRC) tests/test.h
	$(CC) $(CFLAGS) $(WARN) $(OMP) -DGPT_NO_MAIN -I. -o $@ $(SRC) $(TESTSRC) $(LDLIBS)

test: gpt tests/run
	./tests/run

# ASan + UBSan build of the binary and the tests (not static: the
# sanitizer runtimes are shared libraries).
debug: $(SRC) $(HDR) $(TESTSRC)
	$(CC) -O1 -g $(WARN) $(OMP) -fsanitize=address,undefined -fno-omit-frame-pointer \
	    -o gpt-debug $(SRC) $(LDLIBS)
	$(CC) -O1 -g $(WARN) $(OMP) -fsanitize=address,undefined -fno-omit-frame-pointer \
	    -DGPT_NO_MAIN -I. -o tests/run-debug $(SRC) $(TESTSRC) $(LDLIBS)

clean:
	rm -f gpt gpt-debug tests/run tests/run-debug
	rm -rf tests/tmp

.PHONY: all test debug clean
