# gpt: one static binary. `make`, `make test`, `make debug`, `make clean`.
CC      ?= gcc
CFLAGS  ?= -O2 -g
# No -march=native: the shipped binary runs on any x86-64 and picks its
# kernels at run time (tensor.c compiles each SIMD path with target attributes).
WARN    := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -Wno-unused-parameter
OMP     := -fopenmp
LDLIBS  := -lm
SRC     := gpt.c sweep.c safetensors.c data.c loader.c watch.c graph.c xla_sim.c comm.c tensor.c
HDR     := gpt.h safetensors.h data.h loader.h watch.h graph.h xla_sim.h comm.h tensor.h
TESTSRC := tests/main.c tests/test_kernels.c tests/test_grads.c tests/test_model.c \
           tests/test_ckpt.c tests/test_xla.c tests/test_tpu.c tests/test_cli.c \
           tests/test_mpi.c tests/test_tour.c tests/test_data.c \
           tests/test_loader.c tests/test_watch.c tests/test_homework.c

# make LLVM=1: the second flavour the design card names: clang, LLVM's
# libomp and mimalloc (Debian: clang, libomp-dev, libmimalloc-dev),
# dynamically linked. Plain make is the static gcc/libgomp binary.
LLVM_OMP  := -ffp-contract=off -fopenmp=libomp -DGPT_RUNTIME='"libomp, mimalloc"'
LLVM_LIBS := -lmimalloc -lm
MPICC   := mpicc
ifeq ($(LLVM),1)
CC      := clang
MPICC   := OMPI_CC=clang mpicc
OMP     := $(LLVM_OMP)
LDLIBS  := $(LLVM_LIBS)
STATIC  :=
else
STATIC  := -static
endif

# plain `make` builds gpt (the flavour stamp below would otherwise come first)
.DEFAULT_GOAL := all

# -ffp-contract=off: no a*b+c fused into an FMA behind our back (gcc's
# ISO C default), so both flavours give the same bits.
# Switching flavours rebuilds: this stamp changes when the flavour does.
FLAVOUR := .flavour
$(FLAVOUR): FORCE
	@echo '$(CC) $(OMP) $(LDLIBS)' | cmp -s - $@ || echo '$(CC) $(OMP) $(LDLIBS)' > $@
FORCE:

all: gpt

gpt: $(SRC) $(HDR) $(FLAVOUR)
	$(CC) $(CFLAGS) $(WARN) $(OMP) $(STATIC) -o $@ $(SRC) $(LDLIBS)

# The LLVM flavour under its own name, for make bench-flavours.
gpt-llvm: $(SRC) $(HDR)
	clang $(CFLAGS) $(WARN) $(LLVM_OMP) -o $@ $(SRC) $(LLVM_LIBS)

# gpt-mpi: the same program over Open MPI (Debian: openmpi-bin,
# libopenmpi-dev), for runs of several processes: mpirun -np N ./gpt-mpi.
gpt-mpi: $(SRC) $(HDR) $(FLAVOUR)
	$(MPICC) $(CFLAGS) $(WARN) $(OMP) -DGPT_MPI -o $@ $(SRC) $(LDLIBS)

mpi: gpt-mpi

# The tests link the same sources with gpt.c's main() left out. With mpicc
# on the machine, make test builds gpt-mpi too and the mpi suite runs it.
MPI_BIN := $(if $(shell command -v mpicc 2>/dev/null),gpt-mpi)
tests/run: $(SRC) $(HDR) $(TESTSRC) tests/test.h $(FLAVOUR)
	$(CC) $(CFLAGS) $(WARN) $(OMP) -DGPT_NO_MAIN -I. -o $@ $(SRC) $(TESTSRC) $(LDLIBS)

test: gpt $(MPI_BIN) tests/run
	./tests/run

# The benchmark: dynamic, to time OpenBLAS's sgemm on our matmul shapes
# when it is installed (Debian: libopenblas-dev). A header alone proves
# nothing (Debian's reference BLAS ships a cblas.h too), so the test is
# that a call to cblas_sgemm links against -lopenblas (with pkg-config's
# include path where it knows one). Deferred (=): only the bench runs it.
BLAS_CFLAGS = $(shell pkg-config --cflags openblas 2>/dev/null)
BLAS = $(shell if printf '\043include <cblas.h>\nint main(void){cblas_sgemm(0,0,0,0,0,0,0,0,0,0,0,0,0,0);return 0;}\n' | \
          $(CC) $(BLAS_CFLAGS) -x c - -o /dev/null -lopenblas >/dev/null 2>&1; then \
          echo -DHAVE_OPENBLAS $(BLAS_CFLAGS) -lopenblas; fi)
bench/bench: $(SRC) $(HDR) bench/bench.c
	$(CC) $(CFLAGS) $(WARN) $(OMP) -DGPT_NO_MAIN -I. -o $@ $(SRC) bench/bench.c $(BLAS) $(LDLIBS)

bench: bench/bench
	./bench/bench $(BENCH_FLAGS)
	if [ -n "$(HAVE_LLVM)" ]; then $(MAKE) --no-print-directory bench-flavours; fi

# Both builds side by side (when clang, libomp and mimalloc are there).
HAVE_LLVM = $(shell printf '\043include <omp.h>\n\043include <mimalloc.h>\nint main(void){return omp_get_max_threads() < 0;}\n' | \
          clang -fopenmp=libomp -x c - -o /dev/null -lmimalloc >/dev/null 2>&1 && echo yes)
bench/gpt-gcc: $(SRC) $(HDR)
	gcc $(CFLAGS) $(WARN) -fopenmp -static -o $@ $(SRC) -lm
bench-flavours: bench/gpt-gcc gpt-llvm
	bench/flavours.sh bench/gpt-gcc ./gpt-llvm $(BENCH_FLAGS)

# The cross-host all-reduce's cost on this machine: 2 and 4 ranks, over
# TCP on loopback (as between hosts) and over shared memory.
MPIRUN := mpirun --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 \
          --mca btl_vader_single_copy_mechanism none
bench/comm_bench: comm.c comm.h tensor.c tensor.h bench/comm_bench.c
	$(MPICC) $(CFLAGS) $(WARN) $(OMP) -DGPT_MPI -I. -o $@ comm.c tensor.c bench/comm_bench.c $(LDLIBS)

bench-mpi: bench/comm_bench
	$(MPIRUN) --mca btl self,tcp -np 2 ./bench/comm_bench "TCP on loopback"
	$(MPIRUN) --mca btl self,tcp -np 4 ./bench/comm_bench "TCP on loopback"
	$(MPIRUN) -np 2 ./bench/comm_bench "shared memory"

# ASan + UBSan build of the binary and the tests (not static: the
# sanitizer runtimes are shared libraries).
debug: $(SRC) $(HDR) $(TESTSRC)
	$(CC) -O1 -g $(WARN) $(OMP) -fsanitize=address,undefined -fno-omit-frame-pointer \
	    -o gpt-debug $(SRC) $(LDLIBS)
	$(CC) -O1 -g $(WARN) $(OMP) -fsanitize=address,undefined -fno-omit-frame-pointer \
	    -DGPT_NO_MAIN -I. -o tests/run-debug $(SRC) $(TESTSRC) $(LDLIBS)

# valgrind needs a dynamically linked binary to see malloc and free.
MEMRUN := --embed 16 --heads 2 --layers 1 --context 32 --seq 32 --batch 4 \
          --eval-batch 8 --eval-every 5 --steps 10 --data tests/tmp/mem.txt
# libgomp's worker threads keep their thread-local blocks until exit
# ("possibly lost"); definite and indirect leaks are errors.
VALGRIND := valgrind --error-exitcode=1 --leak-check=full \
            --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect

check-mem: gpt debug
	rm -rf tests/tmp/mem tests/tmp/mem-cpu tests/tmp/mem-bf16 tests/tmp/mem-pure && mkdir -p tests/tmp
	$(CC) -O1 -g $(WARN) $(OMP) -o gpt-dyn $(SRC) $(LDLIBS)
	yes "the cat sat on the mat, and Holmes said: elementary, my dear Watson." | head -c 20000 > tests/tmp/mem.txt
	OMP_NUM_THREADS=2 $(VALGRIND) ./gpt-dyn train $(MEMRUN) --out tests/tmp/mem
	OMP_NUM_THREADS=2 $(VALGRIND) ./gpt-dyn train $(MEMRUN) --device cpu --out tests/tmp/mem-cpu
	OMP_NUM_THREADS=2 $(VALGRIND) ./gpt-dyn train $(MEMRUN) --cores 2 --precision bf16 \
	    --out tests/tmp/mem-bf16
	OMP_NUM_THREADS=2 $(VALGRIND) ./gpt-dyn train $(MEMRUN) --cores 4 --precision bf16-pure \
	    --out tests/tmp/mem-pure
	OMP_NUM_THREADS=2 $(VALGRIND) ./gpt-dyn sample --ckpt tests/tmp/mem --bytes 48
	OMP_NUM_THREADS=2 $(VALGRIND) ./gpt-dyn eval --ckpt tests/tmp/mem --data tests/tmp/mem.txt
	rm -rf tests/tmp/mem-in tests/tmp/mem-sh tests/tmp/mem-st && mkdir -p tests/tmp/mem-in
	split -b 4000 tests/tmp/mem.txt tests/tmp/mem-in/part-
	./gpt shard --out tests/tmp/mem-sh --max-bytes 9K tests/tmp/mem-in > /dev/null
	OMP_NUM_THREADS=2 $(VALGRIND) ./gpt-dyn train $(MEMRUN) --data 'pipe:cat tests/tmp/mem-sh/train-00000{0..3}.tar' \
	    --test-data tests/tmp/mem.txt --shuffle-buffer 16 --ckpt-every 5 --out tests/tmp/mem-st
	rm tests/tmp/mem-st/ckpt-00000010.safetensors
	OMP_NUM_THREADS=2 $(VALGRIND) ./gpt-dyn train $(MEMRUN) --data 'pipe:cat tests/tmp/mem-sh/train-00000{0..3}.tar' \
	    --test-data tests/tmp/mem.txt --resume --out tests/tmp/mem-st
	./tests/run-debug

# libFuzzer on the checkpoint loader, then on the tar reader, each for
# FUZZ_SECONDS. New inputs go to tests/tmp/fuzz*; the seeds are committed.
FUZZ_SECONDS ?= 60
FUZZ_CC := clang -O1 -g -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -I.
fuzz: $(SRC) $(HDR) tests/fuzz_ckpt.c tests/fuzz_seed.c tests/fuzz_tar.c
	mkdir -p tests/tmp/fuzz tests/fuzz-corpus tests/tmp/fuzz-tar
	$(CC) -O1 -g $(WARN) $(OMP) -DGPT_NO_MAIN -I. -o tests/tmp/fuzz-seed $(SRC) tests/fuzz_seed.c $(LDLIBS)
	./tests/tmp/fuzz-seed
	$(FUZZ_CC) -fopenmp=libgomp -DGPT_NO_MAIN -o tests/tmp/fuzz-ckpt $(SRC) tests/fuzz_ckpt.c $(LDLIBS)
	./tests/tmp/fuzz-ckpt -max_total_time=$(FUZZ_SECONDS) -max_len=131072 -timeout=60 \
	    -artifact_prefix=tests/tmp/ \
	    tests/tmp/fuzz tests/fuzz-corpus
	$(FUZZ_CC) -o tests/tmp/fuzz_tar data.c tests/fuzz_tar.c
	./tests/tmp/fuzz_tar -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -timeout=60 \
	    -artifact_prefix=tests/tmp/tar- \
	    tests/tmp/fuzz-tar tests/fuzz-tar-corpus

# docs/examples: what the compiler makes of one training step of a 1-layer
# model, for readers of docs/TOUR.md (needs graphviz's dot for the SVG).
DOCRUN := --layers 1 --embed 16 --heads 2 --mlp 32 --context 16 --seq 16 --batch 4 \
          --eval-batch 4 --steps 1 --threads 1 --data docs/examples/tmp/d.txt
docs: gpt
	rm -rf docs/examples/tmp && mkdir -p docs/examples/tmp
	yes "the cat sat on the mat, and Holmes said: elementary, my dear Watson." | \
	    head -c 20000 > docs/examples/tmp/d.txt
	GPT_XLA_DEBUG=1 GPT_SAVE_GRAPHS=docs/examples/tmp/g ./gpt train $(DOCRUN) \
	    --out docs/examples/tmp/a 2> docs/examples/tmp/debug.txt > /dev/null
	GPT_SAVE_GRAPHS_FMT=dot GPT_SAVE_GRAPHS=docs/examples/tmp/g ./gpt train $(DOCRUN) \
	    --out docs/examples/tmp/b > /dev/null
	cp docs/examples/tmp/g-000-before.txt docs/examples/train-step-traced.txt
	cp docs/examples/tmp/g-000-after.txt docs/examples/train-step-program.txt
	cp docs/examples/tmp/g-000-after.dot docs/examples/train-step-program.dot
	head -1 docs/examples/tmp/debug.txt > docs/examples/train-step-compile.txt
	dot -Tsvg docs/examples/train-step-program.dot > docs/examples/train-step-program.svg
	rm -rf docs/examples/tmp

# make install [PREFIX=/usr/local] [DESTDIR=...]: the binary (and gpt-mpi
# when built) and the man page.
PREFIX ?= /usr/local
install: gpt gpt.1
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 755 gpt $(DESTDIR)$(PREFIX)/bin/gpt
	if [ -x gpt-mpi ]; then install -m 755 gpt-mpi $(DESTDIR)$(PREFIX)/bin/gpt-mpi; fi
	install -m 644 gpt.1 $(DESTDIR)$(PREFIX)/share/man/man1/gpt.1

clean:
	rm -f gpt gpt-mpi gpt-debug gpt-dyn tests/run tests/run-debug bench/bench bench/comm_bench
	rm -rf tests/tmp

.PHONY: all mpi docs test bench bench-mpi bench-flavours debug check-mem fuzz install clean FORCE
