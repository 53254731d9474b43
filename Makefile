# gpt: one static binary. `make`, `make test`, `make debug`, `make clean`.
CC      ?= gcc
CFLAGS  ?= -O2 -g
# No -march=native: the shipped binary runs on any CPU of its architecture
# and picks its kernels at run time (tensor.c, compiled once per backend).
# -ffp-contract=off: no a*b+c fused into an FMA behind our back, so every
# compiler and every backend gives the same bits.
WARN    := -I. -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -Wno-unused-parameter -ffp-contract=off
OMP     := -fopenmp
LDLIBS  := -lm
# The four files of the design card at the top, each layer's other rooms in
# a folder named for it (README.md, "The map"). Every include is written
# from the top (-I.): #include "compiler/compiler.h". The program's main()
# is MAIN's alone: the tests and the benchmark link SRC with a main() of
# their own.
MAIN    := cmd/main.c
# The kernel layer's files compiled once (tensor.c is compiled per backend,
# below): the entry points, the ISA choice, the twins, the shared floor.
KONCE   := kernels/entry.c kernels/entry_gen.c kernels/isa.c kernels/reading.c kernels/tensor_ref.c kernels/fused_ref.c kernels/dropout.c kernels/tensor_seg.c \
           kernels/tensor_decode.c kernels/tensor_bf16.c kernels/base.c kernels/bf16_model.c
SRC     := cmd/train.c cmd/schedule.c cmd/sweep.c cmd/commands.c cmd/flags.c cmd/rundir.c \
           gpt.c model/accum.c model/eager_board.c cmd/sample.c model/replicas.c cmd/ckpt.c cmd/evaluate.c \
           graph.c compiler/graph_side.c compiler/remat.c compiler/record.c compiler/precision.c compiler/compile.c \
           compiler/trace.c compiler/cache.c compiler/fuse.c compiler/plan.c compiler/lower.c \
           compiler/dump.c compiler/explain.c \
           xla_sim.c device/exec.c device/exec_gen.c device/exec_side.c device/allreduce.c device/metrics.c \
           device/board.c device/ops.c device/ops_gen.c device/flops.c device/redo.c \
           $(KONCE) cmd/pod.c pod/comm.c \
           data/batch.c data/data.c data/loader.c data/text.c watch/watch.c watch/pace.c watch/trial.c \
           safetensors/safetensors.c util/util.c pod/error.c util/rng.c util/fmath.c util/threads.c util/pool.c
HDR     := gpt.h model/model.h graph.h xla_sim.h tensor.h cmd/commands.h cmd/flags.h \
           cmd/rundir.h cmd/schedule.h cmd/sample.h cmd/ckpt.h cmd/evaluate.h compiler/compiler.h compiler/record.h compiler/node.h compiler/graph_side.h \
           device/ops.h device/ops_gen.h device/flops.h device/exec.h device/exec_side.h device/board.h \
           device/metrics.h device/allreduce.h device/redo.h kernels/tensor_impl.h kernels/tensor_impl_gen.h \
           kernels/tiles.h kernels/attention_layout.h kernels/bf16_sim.h \
           kernels/kernels.h kernels/kernels_gen.h kernels/base.h kernels/tensor_ref.h kernels/dropout.h kernels/gelu.h kernels/vec.h cmd/pod.h \
           pod/comm.h data/batch.h data/data.h data/loader.h data/text.h \
           watch/watch.h watch/pace.h watch/trial.h safetensors/safetensors.h util/util.h pod/error.h util/rng.h util/fmath.h util/threads.h util/pool.h
TESTSRC := tests/main.c tests/test_kernels.c tests/test_grads.c tests/test_model.c \
           tests/test_ckpt.c tests/test_xla.c tests/test_tpu.c tests/test_cli.c \
           tests/test_mpi.c tests/test_tour.c tests/test_data.c \
           tests/test_loader.c tests/test_watch.c tests/test_homework.c tests/test_fmath.c \
           tests/test_golden.c tests/test_numbers.c tests/test_optim.c \
           tests/test_house.c tests/test_lock.c tests/test_config.c \
           tests/test_progress.c tests/test_remat.c tests/test_shard.c \
           tests/test_accum.c tests/test_bytes.c \
           tests/test_harness.c tests/test_plain.c tests/test_gen.c
TESTHDR := tests/test.h tests/adam_reference.h tests/gelu_reference.h

# The kernels: tensor.c is written once over the vector layer (vec.h) and
# compiled once per backend, each object with its own -m flags (with it,
# the three headers it alone includes: kernels/tiles.h, the performance
# machinery; kernels/attention_layout.h; kernels/bf16_sim.h, the bf16
# simulation; so they need no objects of their own); each
# object registers its table with kernels/isa.c before main() (a
# constructor: link the object and the path is there), and the binary
# picks one at run time (GPT_ISA lowers the choice). x86-64 gets AVX-512,
# AVX2 and plain C; arm64 NEON and plain C (make CC=aarch64-linux-gnu-gcc).
# $(call kernels,DIR,COMPILER AND FLAGS) compiles them into DIR;
# $(call kobjs,DIR) names them.
#
# Each object's functions then get its backend in their names (matmul_ex ->
# matmul_ex_avx2; kernels/backend-names.sh says how clones are named), so
# every function has one name in the binary and a profile says which
# backend ran: $(call backend_names,OBJECT,BACKEND,NM,OBJCOPY).
NM      ?= nm
OBJCOPY ?= objcopy
backend_names = kernels/backend-names.sh $(3) $(4) $(1) $(2)
ARCH          := $(shell $(CC) -dumpmachine 2>/dev/null)
BACKENDS      := $(if $(findstring aarch64,$(ARCH)),neon scalar,avx512 avx2 scalar)
KFLAGS_avx512 := -DVEC_AVX512 -mavx512f -mavx512bw -mavx512dq -mavx512vl -mfma
KFLAGS_avx2   := -DVEC_AVX2 -mavx2 -mfma
KFLAGS_neon   := -DVEC_NEON
KFLAGS_scalar :=
# gcc ends AVX code with vzeroupper (without it the SSE code that follows,
# libm's fmaf among it, pays for the vector registers' dirty upper halves:
# on an Intel Xeon the kernels suite's plain twins ran 50x slower) only
# under -fexpensive-optimizations, which -O2 turns on: the -O1 and -O0
# builds below (debug, dyn, cov) ask for it. clang always ends it so.
# $(call vzeroupper,COMPILER,BACKEND) is that flag where it is needed.
vzeroupper = $(if $(findstring clang,$(1)),,$(if $(filter avx2 avx512,$(2)),-fexpensive-optimizations))
kernels = mkdir -p $(1) && $(foreach b,$(BACKENDS),$(2) $(KFLAGS_$(b)) $(call vzeroupper,$(2),$(b)) -c -o $(1)/tensor-$(b).o tensor.c && \
          $(call backend_names,$(1)/tensor-$(b).o,$(b),$(NM),$(OBJCOPY)) &&) true
kobjs   = $(foreach b,$(BACKENDS),$(1)/tensor-$(b).o)
KSRC    := tensor.c

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

# Switching flavours rebuilds: this stamp changes when the flavour does.
FLAVOUR := .flavour
$(FLAVOUR): FORCE
	@echo '$(CC) $(OMP) $(LDLIBS)' | cmp -s - $@ || echo '$(CC) $(OMP) $(LDLIBS)' > $@
FORCE:

all: gpt

# The program's own kernel objects (the other builds below compile theirs
# with their own flags in their own folders).
KOBJ := $(call kobjs,build/gpt)
build/gpt/tensor-%.o: tensor.c $(HDR) kernels/backend-names.sh $(FLAVOUR)
	@mkdir -p build/gpt
	$(CC) $(CFLAGS) $(WARN) $(OMP) $(KFLAGS_$*) $(call vzeroupper,$(CC),$*) -c -o $@ tensor.c
	$(call backend_names,$@,$*,$(NM),$(OBJCOPY))

# One object per source under build/gpt (make test's house suite reads
# which file calls which from them).
OBJ     := $(SRC:%.c=build/gpt/%.o)
MAINOBJ := $(MAIN:%.c=build/gpt/%.o)
build/gpt/%.o: %.c $(HDR) $(FLAVOUR)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(WARN) $(OMP) -c -o $@ $<

gpt: $(MAINOBJ) $(OBJ) $(KOBJ)
	$(CC) $(CFLAGS) $(OMP) $(STATIC) -o $@ $(MAINOBJ) $(OBJ) $(KOBJ) $(LDLIBS)

# The LLVM flavour under its own name, for make bench-flavours.
LLVMCC  := clang $(CFLAGS) $(WARN) $(LLVM_OMP)
LLVMOBJ := $(MAIN:%.c=build/llvm/%.o) $(SRC:%.c=build/llvm/%.o) $(call kobjs,build/llvm)
build/llvm/tensor-%.o: tensor.c $(HDR) kernels/backend-names.sh
	@mkdir -p build/llvm
	$(LLVMCC) $(KFLAGS_$*) -c -o $@ tensor.c
	$(call backend_names,$@,$*,$(NM),$(OBJCOPY))
build/llvm/%.o: %.c $(HDR)
	@mkdir -p $(dir $@)
	$(LLVMCC) -c -o $@ $<
gpt-llvm: $(LLVMOBJ)
	$(LLVMCC) -o $@ $(LLVMOBJ) $(LLVM_LIBS)

# gpt-mpi: the same program over Open MPI (Debian: openmpi-bin,
# libopenmpi-dev), for runs of several processes: mpirun -np N ./gpt-mpi.
# Only pod/comm.c reads GPT_MPI: the rest are gpt's own objects.
MPIOBJ  := $(MAINOBJ) $(filter-out build/gpt/pod/comm.o,$(OBJ)) build/mpi/pod/comm.o $(KOBJ)
build/mpi/pod/comm.o: pod/comm.c $(HDR) $(FLAVOUR)
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) $(WARN) $(OMP) -DGPT_MPI -c -o $@ pod/comm.c
gpt-mpi: $(MPIOBJ)
	$(MPICC) $(CFLAGS) $(OMP) -o $@ $(MPIOBJ) $(LDLIBS)

mpi: gpt-mpi

# The tests link the same sources but MAIN (tests/main.c is theirs). With mpicc
# on the machine, make test builds gpt-mpi too and the mpi suite runs it.
MPI_BIN := $(if $(shell command -v mpicc 2>/dev/null),gpt-mpi)
tests/run: $(OBJ) $(KOBJ) $(HDR) $(TESTSRC) $(TESTHDR) $(FLAVOUR)
	$(CC) $(CFLAGS) $(WARN) $(OMP) -o $@ $(OBJ) $(TESTSRC) $(KOBJ) $(LDLIBS)

# make gen: the C that device/ops.def and kernels/kernels.def define,
# written by gen/gen.c into the tree (device/ops_gen.h, device/ops_gen.c,
# device/exec_gen.c, kernels/tensor_impl_gen.h, kernels/kernels_gen.h,
# kernels/entry_gen.c and the rows of tensor.c's and kernels/reading.c's
# tables) and committed: the
# build compiles those files and never runs the generator. make test's gen
# suite runs it into tests/tmp and names each committed file that differs.
HOSTCC  ?= cc
GENFLAGS := -O1 -g -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow
build/gen/gen: gen/gen.c
	@mkdir -p build/gen
	$(HOSTCC) $(GENFLAGS) -o $@ gen/gen.c
gen: build/gen/gen
	build/gen/gen . .

# SUITES="kernels model" runs those suites alone; the coverage build is
# made when the plain suite is among them.
COVDIR    := build/cov
PLAIN_BIN := $(if $(SUITES),$(if $(filter plain,$(SUITES)),$(COVDIR)/gpt),$(COVDIR)/gpt)
test: gpt $(MPI_BIN) tests/run $(PLAIN_BIN)
	./tests/run $(SUITES)

# Proof that the tests bite: tests/mutations.txt's small bugs, one at a
# time, in a scratch copy of the tree (its own objects; nothing here is
# built or touched); each must make its suites fail. MUTATIONS='id1 id2'
# runs only those. Not part of make test, nor of CI: it takes ~30 minutes.
mutate:
	tests/mutate.sh $(MUTATIONS)

# A pod of 4 hosts over real TCP: Linux network namespaces joined by veth
# pairs on this machine, one host cut off mid-run (root; skipped, saying
# why, where namespaces cannot be made).
test-netns: gpt gpt-mpi
	tests/netns.sh

# The benchmark: dynamic, to time OpenBLAS's sgemm on our matmul shapes
# when it is installed (Debian: libopenblas-dev). A header alone proves
# nothing (Debian's reference BLAS ships a cblas.h too), so the test is
# that a call to cblas_sgemm links against -lopenblas (with pkg-config's
# include path where it knows one). Deferred (=): only the bench runs it.
BLAS_CFLAGS = $(shell pkg-config --cflags openblas 2>/dev/null)
BLAS = $(shell if printf '\043include <cblas.h>\nint main(void){cblas_sgemm(0,0,0,0,0,0,0,0,0,0,0,0,0,0);return 0;}\n' | \
          $(CC) $(BLAS_CFLAGS) -x c - -o /dev/null -lopenblas >/dev/null 2>&1; then \
          echo -DHAVE_OPENBLAS $(BLAS_CFLAGS) -lopenblas; fi)
bench/bench: $(OBJ) $(KOBJ) $(HDR) bench/bench.c
	$(CC) $(CFLAGS) $(WARN) $(OMP) -o $@ $(OBJ) bench/bench.c $(KOBJ) $(BLAS) $(LDLIBS)

# With clang, libomp and mimalloc there, both builds are made first, so
# bench/bench's flavours section can time clang's step against gcc's
# (make bench-flavours times three layouts). The load section runs ./gpt
# (and ./gpt-mpi, where mpicc is) as a user does.
bench: bench/bench gpt $(MPI_BIN)
	if [ -n "$(HAVE_LLVM)" ]; then $(MAKE) --no-print-directory gpt-llvm bench/gpt-gcc; fi
	./bench/bench $(BENCH_FLAGS)

# Both builds side by side (when clang, libomp and mimalloc are there).
HAVE_LLVM = $(shell printf '\043include <omp.h>\n\043include <mimalloc.h>\nint main(void){return omp_get_max_threads() < 0;}\n' | \
          clang -fopenmp=libomp -x c - -o /dev/null -lmimalloc >/dev/null 2>&1 && echo yes)
# (in plain make's flavour that is gpt itself)
ifeq ($(LLVM),1)
bench/gpt-gcc: $(MAIN) $(SRC) $(KSRC) $(HDR)
	$(call kernels,build/gcc,gcc $(CFLAGS) $(WARN) -fopenmp)
	gcc $(CFLAGS) $(WARN) -fopenmp -static -o $@ $(MAIN) $(SRC) $(call kobjs,build/gcc) -lm
else
bench/gpt-gcc: gpt
	cp gpt $@
endif
bench-flavours: bench/gpt-gcc gpt-llvm
	bench/flavours.sh bench/gpt-gcc ./gpt-llvm $(BENCH_FLAGS)

# What a step's joins cost beside a busy process, apart from gpt: a
# synthetic step on OpenMP's regions or on one persistent team
# (bench/README.md, "Under load, fourth round").
bench/team_probe: bench/team_probe.c
	$(CC) $(CFLAGS) $(WARN) -fopenmp -pthread -o $@ bench/team_probe.c

# The cross-host all-reduce's cost on this machine: 2, 4 and 8 ranks over
# TCP on loopback (as between hosts; 4 and 8 share 2 cores, so their times
# mostly measure waiting, their bytes are exact) and 2 over shared memory.
MPIRUN := mpirun --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 \
          --mca btl_vader_single_copy_mechanism none
bench/comm_bench: pod/comm.c $(KONCE) util/util.c util/fmath.c $(KOBJ) $(HDR) bench/comm_bench.c
	$(MPICC) $(CFLAGS) $(WARN) $(OMP) -DGPT_MPI -I. -o $@ pod/comm.c $(KONCE) util/util.c util/fmath.c bench/comm_bench.c $(KOBJ) $(LDLIBS)

bench-mpi: bench/comm_bench
	$(MPIRUN) --mca btl self,tcp -np 2 ./bench/comm_bench "TCP on loopback"
	$(MPIRUN) --mca btl self,tcp -np 4 ./bench/comm_bench "TCP on loopback"
	$(MPIRUN) --mca btl self,tcp -np 8 ./bench/comm_bench "TCP on loopback"
	$(MPIRUN) -np 2 ./bench/comm_bench "shared memory"

# ASan + UBSan build of the binary and the tests (not static: the
# sanitizer runtimes are shared libraries), one object per source under
# build/debug, shared by both (make -j2 compiles two at a time). The
# kernels without gcc's variable tracking by assignments: on tensor.c it
# gives up anyway ("size limit exceeded, retrying without"), after
# minutes (the plain-C object took 385 s with it, 96 s without).
DEBUGCC := $(CC) -O1 -g $(WARN) $(OMP) -fsanitize=address,undefined -fno-omit-frame-pointer
DEBUGOBJ := $(SRC:%.c=build/debug/%.o)
DEBUGKOBJ := $(call kobjs,build/debug)
build/debug/tensor-%.o: tensor.c $(HDR) kernels/backend-names.sh $(FLAVOUR)
	@mkdir -p build/debug
	$(DEBUGCC) -fno-var-tracking-assignments $(KFLAGS_$*) $(call vzeroupper,$(CC),$*) -c -o $@ tensor.c
	$(call backend_names,$@,$*,$(NM),$(OBJCOPY))
build/debug/%.o: %.c $(HDR) $(TESTHDR) $(FLAVOUR)
	@mkdir -p $(dir $@)
	$(DEBUGCC) -c -o $@ $<
gpt-debug: $(MAIN:%.c=build/debug/%.o) $(DEBUGOBJ) $(DEBUGKOBJ)
	$(DEBUGCC) -o $@ $(MAIN:%.c=build/debug/%.o) $(DEBUGOBJ) $(DEBUGKOBJ) $(LDLIBS)
tests/run-debug: $(DEBUGOBJ) $(TESTSRC:%.c=build/debug/%.o) $(DEBUGKOBJ)
	$(DEBUGCC) -o $@ $(DEBUGOBJ) $(TESTSRC:%.c=build/debug/%.o) $(DEBUGKOBJ) $(LDLIBS)
debug: gpt-debug tests/run-debug

# valgrind needs a dynamically linked binary to see malloc and free:
# gpt-dyn, its objects under build/dyn (the fuzzers' seed tool shares them).
DYNCC   := $(CC) -O1 -g $(WARN) $(OMP)
DYNOBJ  := $(SRC:%.c=build/dyn/%.o)
DYNKOBJ := $(call kobjs,build/dyn)
build/dyn/tensor-%.o: tensor.c $(HDR) kernels/backend-names.sh $(FLAVOUR)
	@mkdir -p build/dyn
	$(DYNCC) -fno-var-tracking-assignments $(KFLAGS_$*) $(call vzeroupper,$(CC),$*) -c -o $@ tensor.c
	$(call backend_names,$@,$*,$(NM),$(OBJCOPY))
build/dyn/%.o: %.c $(HDR) $(FLAVOUR)
	@mkdir -p $(dir $@)
	$(DYNCC) -c -o $@ $<
gpt-dyn: $(MAIN:%.c=build/dyn/%.o) $(DYNOBJ) $(DYNKOBJ)
	$(DYNCC) -o $@ $(MAIN:%.c=build/dyn/%.o) $(DYNOBJ) $(DYNKOBJ) $(LDLIBS)
MEMRUN := --embed 16 --heads 2 --layers 1 --context 32 --seq 32 --batch 4 \
          --eval-batch 8 --eval-every 5 --steps 10 --data tests/tmp/mem.txt
# libgomp's worker threads keep their thread-local blocks until exit
# ("possibly lost"); definite and indirect leaks are errors.
VALGRIND := valgrind --error-exitcode=1 --leak-check=full \
            --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect

# Each valgrind run is a target of its own (mem-*), so that make -j2 runs
# two at a time: valgrind runs a program's threads one after another, on
# one core. Side by side, each run sees the other busy and its trial goes
# on with one thread, or the redo team (the busy machine's paths, under
# valgrind too); `make -j1 mem-runs` keeps two threads throughout, some
# four times slower (2 spinning threads on valgrind's one). The sanitized
# suites (tests/run-debug) run after them, alone: they start ./gpt and
# ./gpt-mpi, and some checks skip beside busy programs; slower under the
# sanitizers, each gets an hour, not 10 minutes.
MEMGPT := OMP_NUM_THREADS=2 $(VALGRIND) ./gpt-dyn
# the training runs, each with its flags beyond $(MEMRUN), into tests/tmp/<target>
MEM_TRAINS := mem-train mem-cpu mem-cpu-lent mem-bf16 mem-pure mem-lent
MEMFLAGS_mem-cpu  := --device cpu
MEMFLAGS_mem-cpu-lent := --device cpu --batch 8 --redo 3 --metrics
MEMFLAGS_mem-bf16 := --cores 2 --precision bf16
MEMFLAGS_mem-pure := --cores 4 --precision bf16-pure
MEMFLAGS_mem-lent := --batch 8 --redo 3 --metrics
MEM_RUNS := $(MEM_TRAINS) mem-sample mem-eval mem-eval-lent mem-sample-lent mem-resume mem-shards
check-mem: gpt $(MPI_BIN) debug $(COVDIR)/gpt mem-runs
	GPT_TEST_TIMEOUT=3600 ./tests/run-debug
mem-runs: $(MEM_RUNS)
$(MEM_RUNS): gpt-dyn
mem-data:
	mkdir -p tests/tmp
	yes "the cat sat on the mat, and Holmes said: elementary, my dear Watson." | head -c 20000 > tests/tmp/mem.txt
$(MEM_TRAINS): mem-data
	rm -rf tests/tmp/$@
	$(MEMGPT) train $(MEMRUN) $(MEMFLAGS_$@) --out tests/tmp/$@
# mem-train's checkpoint, sampled and evaluated, on one core and on a lent board
MEMCKPT := --ckpt tests/tmp/mem-train
mem-sample: mem-train
	$(MEMGPT) sample $(MEMCKPT) --bytes 48
mem-eval: mem-train
	$(MEMGPT) eval $(MEMCKPT) --data tests/tmp/mem.txt
mem-eval-lent: mem-train
	$(MEMGPT) eval $(MEMCKPT) --data tests/tmp/mem.txt --chunk 8 --redo 3
mem-sample-lent: mem-train
	$(MEMGPT) sample $(MEMCKPT) --num-samples 8 --bytes 48 --redo 3
# a run resumed from a torn checkpoint, then from its own
mem-resume: mem-train gpt
	rm -rf tests/tmp/mem-auto && ./gpt train $(MEMRUN) --ckpt-every 5 --auto-resume --out tests/tmp/mem-auto
	head -c 4000 tests/tmp/mem-train/ckpt-00000010.safetensors > tests/tmp/mem-auto/ckpt-00000010.safetensors
	$(MEMGPT) train $(MEMRUN) --ckpt-every 5 --auto-resume --out tests/tmp/mem-auto
	$(MEMGPT) train $(MEMRUN) --ckpt-every 5 --auto-resume --out tests/tmp/mem-auto
# streamed tar shards, then resumed mid-shard
MEMSHARDS := --data 'pipe:cat tests/tmp/mem-sh/train-00000{0..3}.tar' --test-data tests/tmp/mem.txt
mem-shards: mem-data gpt
	rm -rf tests/tmp/mem-in tests/tmp/mem-sh tests/tmp/mem-st && mkdir -p tests/tmp/mem-in
	split -b 4000 tests/tmp/mem.txt tests/tmp/mem-in/part-
	./gpt shard --out tests/tmp/mem-sh --max-bytes 9K tests/tmp/mem-in > /dev/null
	$(MEMGPT) train $(MEMRUN) $(MEMSHARDS) --shuffle-buffer 16 --ckpt-every 5 --out tests/tmp/mem-st
	rm tests/tmp/mem-st/ckpt-00000010.safetensors
	$(MEMGPT) train $(MEMRUN) $(MEMSHARDS) --resume --out tests/tmp/mem-st

# libFuzzer on the checkpoint loader and on the tar reader, each for
# FUZZ_SECONDS. New inputs go to tests/tmp/fuzz*; the seeds are committed.
# The kernels, which no fuzzed input reaches, are the seed tool's plain
# objects: instrumented, the vector code takes clang many minutes to build.
FUZZ_SECONDS ?= 60
FUZZ_CC := clang -O1 -g -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -I.
fuzz: fuzz-ckpt fuzz-tar
# libFuzzer runs on one core: make -j2 runs the two side by side
fuzz-ckpt: $(DYNOBJ) $(DYNKOBJ) $(SRC) $(HDR) tests/fuzz_ckpt.c tests/fuzz_seed.c
	mkdir -p tests/tmp/fuzz tests/fuzz-corpus
	$(DYNCC) -o tests/tmp/fuzz-seed $(DYNOBJ) tests/fuzz_seed.c $(DYNKOBJ) $(LDLIBS)
	./tests/tmp/fuzz-seed
	$(FUZZ_CC) -fopenmp=libgomp -o tests/tmp/fuzz-ckpt $(SRC) tests/fuzz_ckpt.c $(DYNKOBJ) $(LDLIBS)
	./tests/tmp/fuzz-ckpt -max_total_time=$(FUZZ_SECONDS) -max_len=131072 -timeout=60 \
	    -artifact_prefix=tests/tmp/ \
	    tests/tmp/fuzz tests/fuzz-corpus
fuzz-tar: data/data.c util/util.c tests/fuzz_tar.c $(HDR)
	mkdir -p tests/tmp/fuzz-tar
	$(FUZZ_CC) -o tests/tmp/fuzz_tar data/data.c util/util.c tests/fuzz_tar.c
	./tests/tmp/fuzz_tar -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -timeout=60 \
	    -artifact_prefix=tests/tmp/tar- \
	    tests/tmp/fuzz-tar tests/fuzz-tar-corpus

# docs/examples: what the compiler makes of one training step of a 1-layer
# model, for readers of docs/TOUR.md. docs-examples writes the text and DOT
# files into DOCS_OUT (the tour suite makes them into tests/tmp and compares
# them with the committed ones); docs draws the SVG too (graphviz's dot).
DOCS_OUT ?= docs/examples
DOCTMP := $(DOCS_OUT)/tmp
DOCRUN := --layers 1 --embed 16 --heads 2 --mlp 32 --context 16 --seq 16 --batch 4 \
          --eval-batch 4 --steps 1 --threads 1 --data $(DOCTMP)/d.txt
docs-examples: gpt
	rm -rf $(DOCTMP) && mkdir -p $(DOCTMP)
	yes "the cat sat on the mat, and Holmes said: elementary, my dear Watson." | \
	    head -c 20000 > $(DOCTMP)/d.txt
	GPT_XLA_DEBUG=1 GPT_SAVE_GRAPHS=$(DOCTMP)/g ./gpt train $(DOCRUN) \
	    --out $(DOCTMP)/a 2> $(DOCTMP)/debug.txt > /dev/null
	GPT_SAVE_GRAPHS_FMT=dot GPT_SAVE_GRAPHS=$(DOCTMP)/g ./gpt train $(DOCRUN) \
	    --out $(DOCTMP)/b > /dev/null
	cp $(DOCTMP)/g-000-before.txt $(DOCS_OUT)/train-step-traced.txt
	cp $(DOCTMP)/g-000-after.txt $(DOCS_OUT)/train-step-program.txt
	cp $(DOCTMP)/g-000-after.dot $(DOCS_OUT)/train-step-program.dot
	head -2 $(DOCTMP)/debug.txt > $(DOCS_OUT)/train-step-compile.txt
	rm -rf $(DOCTMP)
docs: docs-examples
	dot -Tsvg $(DOCS_OUT)/train-step-program.dot > $(DOCS_OUT)/train-step-program.svg
.PHONY: docs-examples

# The plain path (docs/plain-path.txt): every function of the project that
# one default training step runs, lazy and eager, in the reading mode
# (GPT_ISA=ref), from model_train_step down, with its lines.
# tests/plain_path.py says how it is counted. Its build is its own, in
# build/cov (-O0 and gcov's counters, each function and datum in a section
# of its own so the objects' relocations give the call graph; the step
# wrapped so that only the step is counted), the program's objects
# untouched. `make plain-path` writes the list; the plain suite of make
# test checks it against what runs. gcc's build whatever the flavour:
# tests/plain_path.py reads its counts with gcc's gcov.
COVCC    := gcc -O0 -g --coverage -ffunction-sections -fdata-sections $(WARN) -fopenmp
COVOBJ   := $(MAIN:%.c=$(COVDIR)/%.o) $(SRC:%.c=$(COVDIR)/%.o) $(COVDIR)/tests/plain_path_step.o
COVKOBJ  := $(call kobjs,$(COVDIR))
$(COVDIR)/tensor-%.o: tensor.c $(HDR) kernels/backend-names.sh
	@mkdir -p $(COVDIR)
	$(COVCC) $(KFLAGS_$*) $(call vzeroupper,gcc,$*) -c -o $@ tensor.c
	$(call backend_names,$@,$*,$(NM),$(OBJCOPY))
$(COVDIR)/%.o: %.c $(HDR)
	@mkdir -p $(dir $@)
	$(COVCC) -c -o $@ $<
$(COVDIR)/gpt: $(COVOBJ) $(COVKOBJ)
	$(COVCC) -static -Wl,--wrap=model_train_step -o $@ $(COVOBJ) $(COVKOBJ) -lm
plain-path: $(COVDIR)/gpt
	tests/plain_path.py --write docs/plain-path.txt

# arm64. On an arm64 machine plain `make` and `make test` build and test
# gpt natively, with the NEON and plain-C kernels. From x86-64, `make arm64`
# cross-builds the same static binary as gpt-arm64, its tests as
# tests/run-arm64 and the benchmark as bench/bench-arm64 (kernel objects in
# build/arm64; Debian: gcc-aarch64-linux-gnu, which brings the static
# libgomp, and libc6-dev-arm64-cross), and `make test-arm64` runs the
# suites under qemu-aarch64-static (Debian: qemu-user-static) through
# tests/arm64.sh: ARM64_SUITES if set, else all but ARM64_SKIP (two that
# user-mode qemu cannot pass, the house and plain suites, which read the
# native builds, and three about processes and files rather than arithmetic: the
# run directory's lock, --config files and tests/run's own harness;
# tests/arm64.sh says why), in some 20 minutes on 2 cores. ARM64_JOBS=2
# runs the suites in two lanes side by side (only suites that write no
# file in common: the lanes share the folder's tests/tmp).
ARM64_CC     := aarch64-linux-gnu-gcc
ARM64_NM     := aarch64-linux-gnu-nm
ARM64_OBJCOPY := aarch64-linux-gnu-objcopy
ARM64_CFLAGS  = $(CFLAGS) $(WARN) -fopenmp -static
ARM64_KOBJ   := build/arm64/tensor-neon.o build/arm64/tensor-scalar.o
ARM64_SUITES ?=
ARM64_JOBS   ?= 1
ARM64_SKIP   ?= cli homework house plain lock config harness
build/arm64/tensor-%.o: tensor.c $(HDR) kernels/backend-names.sh
	@mkdir -p build/arm64
	$(ARM64_CC) $(CFLAGS) $(WARN) -fopenmp $(KFLAGS_$*) -c -o $@ tensor.c
	$(call backend_names,$@,$*,$(ARM64_NM),$(ARM64_OBJCOPY))
# every other source once, as an object the three links share
ARM64_OBJ    := $(SRC:%.c=build/arm64/%.o)
build/arm64/%.o: %.c $(HDR) $(TESTHDR)
	@mkdir -p $(dir $@)
	$(ARM64_CC) $(CFLAGS) $(WARN) -fopenmp -c -o $@ $<
gpt-arm64: $(MAIN:%.c=build/arm64/%.o) $(ARM64_OBJ) $(ARM64_KOBJ)
	$(ARM64_CC) $(ARM64_CFLAGS) -o $@ $^ -lm
tests/run-arm64: $(ARM64_OBJ) $(TESTSRC:%.c=build/arm64/%.o) $(ARM64_KOBJ)
	$(ARM64_CC) $(ARM64_CFLAGS) -o $@ $^ -lm
bench/bench-arm64: $(ARM64_OBJ) build/arm64/bench/bench.o $(ARM64_KOBJ)
	$(ARM64_CC) $(ARM64_CFLAGS) -o $@ $^ -lm
arm64: gpt-arm64 tests/run-arm64 bench/bench-arm64
test-arm64: gpt-arm64 tests/run-arm64
	ARM64_SKIP='$(ARM64_SKIP)' ARM64_JOBS='$(ARM64_JOBS)' tests/arm64.sh $(ARM64_SUITES)

# make install [PREFIX=/usr/local] [DESTDIR=...]: the binary (and gpt-mpi
# when built) and the man page.
PREFIX ?= /usr/local
install: gpt docs/gpt.1
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 755 gpt $(DESTDIR)$(PREFIX)/bin/gpt
	if [ -x gpt-mpi ]; then install -m 755 gpt-mpi $(DESTDIR)$(PREFIX)/bin/gpt-mpi; fi
	install -m 644 docs/gpt.1 $(DESTDIR)$(PREFIX)/share/man/man1/gpt.1

clean:
	rm -f gpt gpt-mpi gpt-debug gpt-dyn gpt-llvm tests/run tests/run-debug bench/bench bench/comm_bench bench/team_probe
	rm -f gpt-arm64 tests/run-arm64 bench/bench-arm64
	rm -rf tests/tmp build

.PHONY: all mpi docs gen test mutate test-netns bench bench-mpi bench-flavours debug check-mem fuzz install \
        mem-runs mem-data $(MEM_RUNS) fuzz-ckpt fuzz-tar \
        clean FORCE arm64 test-arm64 plain-path
