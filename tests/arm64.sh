#!/bin/sh
# tests/arm64.sh [SUITE...]: the arm64 build's tests on an x86-64 machine,
# under qemu-aarch64-static (Debian: qemu-user-static). `make test-arm64`
# runs it after `make arm64` has built gpt-arm64 and tests/run-arm64.
#
# The suites find the program as ./gpt and write under tests/tmp, both
# relative to the current directory, so they run in a folder of their own,
# build/arm64/root: the source tree linked in, tests/tmp its own, and ./gpt
# a two-line script that runs gpt-arm64 under qemu. (A child that the test
# binary starts is an arm64 ELF that the kernel cannot run without a
# binfmt_misc entry, which containers often lack; the script works with or
# without one.) Each suite is timed; ARM64_JOBS=N runs them in N lanes
# side by side. The summary line closes the output, and the exit status is
# 1 if any suite failed.
#
# With no SUITE, every suite runs (as `tests/run` does natively) but those
# named in ARM64_SKIP (space-separated), which `make test-arm64` sets to
# the two that cannot pass under qemu without binfmt_misc: homework's
# `gpt sweep` re-executes /proc/self/exe, an arm64 binary the kernel cannot
# start, and cli's SIGTERM test waits for the handler in /proc's SigCgt,
# which qemu itself sets before gpt installs its handler; and house, which
# reads the native build's objects and binary with nm (the source tree's
# shape, the same on every architecture, checked by the native make test),
# and plain, which runs the native coverage build (build/cov) and gcov;
# and lock, config and harness, about processes, file locks, flag files
# and tests/run itself rather than arithmetic (the same code on every
# architecture, checked natively; lock's runs freeze and kill trainers on
# a clock qemu would stretch, and harness re-executes /proc/self/exe).
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
QEMU=${QEMU:-qemu-aarch64-static}
# A suite's time limit (tests/run's is 10 minutes): under qemu golden
# alone takes 8-9 minutes, and longer in a lane beside another suite.
GPT_TEST_TIMEOUT=${GPT_TEST_TIMEOUT:-1800}
export GPT_TEST_TIMEOUT
root=$top/build/arm64/root

command -v "$QEMU" >/dev/null 2>&1 || { echo "arm64.sh: $QEMU not found (Debian: qemu-user-static)" >&2; exit 2; }
for f in gpt-arm64 tests/run-arm64; do
    [ -x "$top/$f" ] || { echo "arm64.sh: $f missing: make arm64" >&2; exit 2; }
done

# The folder: every top-level entry but the builds, tests/ entry by entry.
rm -rf "$root" && mkdir -p "$root/tests" || exit 2
for e in "$top"/* "$top"/.[!.]*; do
    case ${e##*/} in
    build | tests | gpt | gpt-* | out | .git | .flavour | Makefile) ;;
    *) [ -e "$e" ] && ln -s "$e" "$root/${e##*/}" ;;
    esac
done
for e in "$top"/tests/*; do
    case ${e##*/} in
    tmp | run | run-*) ;;
    *) ln -s "$e" "$root/tests/${e##*/}" ;;
    esac
done
printf '#!/bin/sh\nexec %s -0 "$0" %s "$@"\n' "$QEMU" "$top/gpt-arm64" > "$root/gpt"
chmod +x "$root/gpt"
# The watch suite runs `make install`: the project's Makefile, told that
# ./gpt (the script) is up to date rather than to build an x86-64 one.
printf 'Makefile: ;\n%%:: FORCE\n\t@$(MAKE) -f %s -o gpt $@\nFORCE: ;\n.PHONY: FORCE\n' \
    "$top/Makefile" > "$root/Makefile"

skip=0 # suites left out, then the suites' own skips
if [ $# -eq 0 ]; then
    set -- $(grep -o '{"[a-z0-9_]*", *test_' "$top/tests/main.c" | sed 's/{"\([a-z0-9_]*\)".*/\1/')
    [ $# -gt 0 ] || { echo "arm64.sh: no suites found in tests/main.c" >&2; exit 2; }
    for s in "$@"; do
        case " ${ARM64_SKIP:-} " in
        *" $s "*) echo "SKIP arm64 suite $s: cannot pass under qemu, or not about the architecture (ARM64_SKIP)"
                  skip=$((skip + 1)) ;;
        *) set -- "$@" "$s" ;;
        esac
        shift
    done
fi

cd "$root" || exit 2
start=$(date +%s)

# One suite under qemu: its output to log-SUITE.txt (with one lane, to the
# terminal too, as it runs), its exit status to log-SUITE.txt.rc and its
# seconds to log-SUITE.txt.s.
run_suite() {
    t0=$(date +%s)
    { "$QEMU" "$top/tests/run-arm64" "$1" 2>&1; echo $? > "$root/log-$1.txt.rc"; } |
        if [ "$jobs" -eq 1 ]; then tee "$root/log-$1.txt"; else cat > "$root/log-$1.txt"; fi
    echo $(($(date +%s) - t0)) > "$root/log-$1.txt.s"
}

# ARM64_JOBS lanes (default 1) each run their share of the suites one
# after another, the suites dealt to the lanes in turn. A suite under qemu
# keeps about 1.5 of 2 cores busy, so two lanes finish sooner; with more
# than one, each suite's output is printed whole, in order, once all have run.
jobs=${ARM64_JOBS:-1}
case $jobs in '' | *[!0-9]* | 0) echo "arm64.sh: ARM64_JOBS must be a count of lanes, got '$jobs'" >&2; exit 2 ;; esac
lane=0
while [ $lane -lt "$jobs" ]; do
    (
        i=0
        for s in "$@"; do
            [ $((i % jobs)) -eq $lane ] && run_suite "$s"
            i=$((i + 1))
        done
    ) &
    lane=$((lane + 1))
done
wait

pass=0 fail=0 bad=""
for s in "$@"; do
    log=$root/log-$s.txt
    [ "$jobs" -gt 1 ] && cat "$log"
    rc=$(cat "$log.rc" 2>/dev/null || echo 1)
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$log" | tail -1)
    p=${line%% passed*}
    f=${line#*passed, }
    f=${f%% failed*}
    k=${line#*failed, }
    k=${k%% skipped*}
    if [ -z "$line" ]; then # crashed or killed: no summary
        p=0 f=1 k=0
    fi
    [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
    pass=$((pass + p)) fail=$((fail + f)) skip=$((skip + k))
    [ "$f" -ne 0 ] && bad="$bad $s"
    echo "arm64 suite $s: $p passed, $f failed, $k skipped, exit $rc, $(cat "$log.s") s"
done
echo "arm64 (qemu, $jobs lane(s), $(($(date +%s) - start)) s):${bad:+ failed:$bad}"
echo "arm64: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
