#!/bin/bash
# tests/mutate.sh [ID...]: proof that the tests bite. Each mutation of
# tests/mutations.txt (or only the named ones) is a small bug put into a
# scratch copy of the tree, one at a time; the suites it names must then
# fail (or time out). Prints `caught` or `NOT caught` for each, then a
# table and a summary line. Exits 1 when a mutation is not caught, 2 when
# an entry of the list is broken (its text not found exactly once, or the
# mutated tree does not compile), 3 when the unmutated tree fails a suite.
#
# Speed: the scratch copy is built once, a .o per source with the
# Makefile's own flags (read from it, so LLVM=1 and the like carry over);
# a mutation recompiles only its file's objects and relinks gpt and
# tests/run (and gpt-mpi when the mpi suite is among its suites).
#
# Settings: MUTATE_TIMEOUT seconds of suites per mutation (default 300),
# MUTATE_JOBS compilers at once for the first build (default 2),
# MUTATE_LIST another list file, MUTATE_KEEP=1 keeps the scratch tree.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
list=${MUTATE_LIST:-$top/tests/mutations.txt}
limit=${MUTATE_TIMEOUT:-300}
jobs=${MUTATE_JOBS:-2}
unset CI # under CI=true a skip is a failure: it would pass for a catch

die() { echo "mutate: $*" >&2; exit 2; }

# ---- the list ----

# Entries start at `id:`; each line is `key: value`, the value the rest of
# the line after the colon and its spaces (trailing blanks dropped).
ids=() areas=() files=() froms=() tos=() suites=() whys=()
parse_list()
{
    local line key val n=-1 lineno=0
    while IFS= read -r line || [ -n "$line" ]; do
        lineno=$((lineno + 1))
        case $line in '#'* | '') continue ;; esac
        key=${line%%:*}
        [ "$key" != "$line" ] || die "$list:$lineno: no 'key:' in: $line"
        val=${line#*:}
        val=${val#"${val%%[! ]*}"}   # leading spaces
        val=${val%"${val##*[! ]}"}   # trailing spaces
        case $key in
        id) n=$((n + 1)); ids[n]=$val; areas[n]=; files[n]=; froms[n]=; tos[n]=
            suites[n]=; whys[n]=; tos_set[n]= ;;
        area | file | from | to | suites | why)
            [ $n -ge 0 ] || die "$list:$lineno: '$key' before the first id"
            case $key in
            area) areas[n]=$val ;; file) files[n]=$val ;; from) froms[n]=$val ;;
            to) tos[n]=$val; tos_set[n]=1 ;; suites) suites[n]=$val ;; why) whys[n]=$val ;;
            esac ;;
        *) die "$list:$lineno: unknown key '$key'" ;;
        esac
    done < "$list"
    local i
    for i in "${!ids[@]}"; do
        [ -n "${files[i]}" ] && [ -n "${froms[i]}" ] && [ -n "${tos_set[i]}" ] &&
            [ -n "${suites[i]}" ] && [ -n "${areas[i]}" ] ||
            die "$list: entry '${ids[i]}' lacks one of area, file, from, to, suites"
    done
}
tos_set=()
[ -r "$list" ] || die "cannot read $list"
parse_list

# The entries to run: all, or those named (each must exist).
pick=()
if [ $# -eq 0 ]; then
    pick=("${!ids[@]}")
else
    for want in "$@"; do
        found=
        for i in "${!ids[@]}"; do
            [ "${ids[i]}" = "$want" ] && pick+=("$i") && found=1
        done
        [ -n "$found" ] || die "no mutation '$want' in $list"
    done
fi

# ---- the scratch tree and its objects ----

S=$(mktemp -d -p "${TMPDIR:-/tmp}" gpt-mutate.$(printf "%.0sX" 1 2 3 4 5 6)) || die "mktemp failed"
cleanup() { [ "${MUTATE_KEEP:-}" = 1 ] && echo "mutate: kept $S" || rm -rf "$S"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# The tracked files as they are in the worktree now (edits included).
if git -C "$top" rev-parse --git-dir > /dev/null 2>&1; then
    (cd "$top" && git ls-files -z | xargs -0 tar -cf - 2> /dev/null) | tar -xf - -C "$S"
else
    cp -a "$top"/. "$S"
fi
rm -rf "$S/build" "$S/tests/tmp"
mkdir -p "$S/obj" "$S/obj.orig"

# The Makefile's variables, as make expands them.
printf '%s\n' 'mutate-vars: ; @: $(foreach v,CC CFLAGS WARN OMP STATIC LDLIBS MPICC MAIN SRC TESTSRC BACKENDS,$(info $(v)=$($(v))))$(foreach b,$(BACKENDS),$(info KFLAGS_$(b)=$(KFLAGS_$(b))))' > "$S/obj/vars.mk"
vars=$(make -s --no-print-directory -C "$S" -f Makefile -f obj/vars.mk mutate-vars) ||
    die "cannot read the Makefile's variables"
mvar() { printf '%s\n' "$vars" | sed -n "s/^$1=//p"; }
CC=$(mvar CC) CFLAGS=$(mvar CFLAGS) WARN=$(mvar WARN) OMP=$(mvar OMP) STATIC=$(mvar STATIC)
LDLIBS=$(mvar LDLIBS) MPICC=$(mvar MPICC) MAIN=$(mvar MAIN) SRC=$(mvar SRC) TESTSRC=$(mvar TESTSRC)
BACKENDS=$(mvar BACKENDS)
BASE="$CC $CFLAGS $WARN $OMP"

# The objects that `make` would, in effect, compile: every source once
# (MAIN's main() is linked into gpt alone; the tests bring their own),
# tensor.c once per backend; for gpt-mpi, the sources that mention GPT_MPI
# again with mpicc.
mpi_src=$(cd "$S" && grep -l 'GPT_MPI' $MAIN $SRC)
# Prints "object<TAB>command" for every object that depends on FILE (all
# of them when FILE is a header).
objects_of()
{
    local f=$1 s b o
    for s in $MAIN $SRC; do
        [ "$f" = "$s" ] || [ "${f%.h}" != "$f" ] || continue
        o=${s%.c}
        o=${o//\//-} # cmd/train.c -> obj/cmd-train.o
        printf 'obj/%s.o\t%s -c -o obj/%s.o %s\n' "$o" "$BASE" "$o" "$s"
        case " $mpi_src " in *" $s "*)
            printf 'obj/mpi-%s.o\t%s %s %s %s -DGPT_MPI -c -o obj/mpi-%s.o %s\n' "$o" \
                "$MPICC" "$CFLAGS" "$WARN" "$OMP" "$o" "$s" ;; esac
    done
    if [ "$f" = tensor.c ] || [ "${f%.h}" != "$f" ]; then
        for b in $kernel_backends; do
            printf 'obj/tensor-%s.o\t%s %s -c -o obj/tensor-%s.o tensor.c\n' "$b" "$BASE" \
                "$(mvar "KFLAGS_$b")" "$b"
        done
    fi
    for s in $TESTSRC; do
        [ "$f" = "$s" ] || [ "${f%.h}" != "$f" ] || [ "$f" = tests/test.h ] || continue
        o=tests-$(basename "${s%.c}")
        printf 'obj/%s.o\t%s -c -o obj/%s.o %s\n' "$o" "$BASE" "$o" "$s"
    done
}
# Runs the commands on stdin ("object<TAB>command"), JOBS at once; the
# MPI ones only with MPI; prints the compilers' errors; fails if one did.
compile()
{
    local with_mpi=$1
    (cd "$S" && while IFS=$'\t' read -r o cmd; do
        [ "$with_mpi" = 1 ] || case $o in obj/mpi-*) continue ;; esac
        printf '%s\0' "$cmd"
    done | xargs -0 -r -P "$jobs" -I{} sh -c '{} 2>> obj/errors || { echo failed >> obj/failed; }')
    [ ! -e "$S/obj/failed" ] && return 0
    rm -f "$S/obj/failed"
    return 1
}

# Links gpt and tests/run (and gpt-mpi when asked) from the objects.
link()
{
    local kobj="" b common="" mpiobjs="" tobj="" main="" mpimain="" s o
    for b in $BACKENDS; do kobj+=" obj/tensor-$b.o"; done
    for s in $MAIN $SRC; do
        o=${s%.c}
        o=${o//\//-}
        case " $mpi_src " in *" $s "*) b=" obj/mpi-$o.o" ;; *) b=" obj/$o.o" ;; esac
        if [ "$s" = "$MAIN" ]; then
            main+=" obj/$o.o" mpimain+=$b
        else
            common+=" obj/$o.o" mpiobjs+=$b
        fi
    done
    for s in $TESTSRC; do tobj+=" obj/tests-$(basename "${s%.c}").o"; done
    (cd "$S" && eval "$BASE $STATIC -o gpt $main $common $kobj $LDLIBS" &&
        eval "$BASE -o tests/run $common $tobj $kobj $LDLIBS" &&
        if [ "$1" = 1 ]; then
            eval "$MPICC $CFLAGS $WARN $OMP -DGPT_MPI -o gpt-mpi $mpimain $mpiobjs $kobj $LDLIBS"
        fi) 2>> "$S/obj/errors"
}

# Does any picked mutation need gpt-mpi?
need_mpi=0
for i in "${pick[@]}"; do
    case " ${suites[i]} " in *" mpi "*) need_mpi=1 ;; esac
done
if [ $need_mpi = 1 ] && ! command -v "${MPICC%% *}" > /dev/null && ! command -v mpicc > /dev/null; then
    die "the list asks for the mpi suite and there is no mpicc"
fi

# Which kernel objects a mutation recompiles: those this CPU can run (the
# others never execute here, so their mutants could not be caught; their
# objects stay unmutated). MUTATE_ALL_BACKENDS=1: every one.
runs_here()
{
    local flags
    flags=" $(grep -m1 '^flags' /proc/cpuinfo 2> /dev/null | cut -d: -f2) "
    case $1 in
    avx512) for x in avx512f avx512bw avx512dq avx512vl; do
                case $flags in *" $x "*) ;; *) return 1 ;; esac
            done ;;
    avx2) case $flags in *" avx2 "*) case $flags in *" fma "*) ;; *) return 1 ;; esac ;;
          *) return 1 ;; esac ;;
    esac
    return 0
}
kernel_backends=$BACKENDS
mutant_backends=
for b in $BACKENDS; do
    if [ "${MUTATE_ALL_BACKENDS:-}" = 1 ] || runs_here "$b"; then mutant_backends+=" $b"; fi
done

t0=$SECONDS
echo "mutate: building the scratch tree in $S (objects one by one, $jobs at once)"
objects_of ALL.h | compile $need_mpi && link $need_mpi || {
    cat "$S/obj/errors" >&2
    die "the unmutated tree does not build"
}
: > "$S/obj/errors"
cp "$S"/obj/*.o "$S/obj.orig/"
[ -x "$S/gpt-mpi" ] && cp "$S/gpt-mpi" "$S/obj.orig/"
echo "mutate: built in $((SECONDS - t0)) s; tensor.c's mutants use the kernels:$mutant_backends"
kernel_backends=$mutant_backends

# ---- running suites ----

# Runs SUITES one by one, in all at most SECONDS (default: the limit per
# mutation); sets ran_result (pass | fail | crash | timeout), ran_suite
# (the one that failed) and ran_times.
run_suites()
{
    local s left start=$SECONDS rc t cap=${2:-$limit}
    ran_result=pass ran_suite=- ran_times=
    rm -rf "$S/tests/tmp"
    for s in $1; do
        t=$SECONDS
        left=$((cap - (SECONDS - start)))
        if [ $left -le 0 ]; then
            ran_result=timeout ran_suite=$s
            return
        fi
        (cd "$S" && timeout -k 10 "$left" ./tests/run "$s") > "$S/obj/out.txt" 2>&1
        rc=$?
        ran_times+=" $s $((SECONDS - t)) s,"
        if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
            ran_result=timeout ran_suite=$s
            return
        elif [ $rc -gt 128 ]; then
            ran_result=crash ran_suite="$s (signal $((rc - 128)))"
            return
        elif [ $rc -ne 0 ]; then
            ran_result=fail ran_suite=$s
            return
        fi
    done
}

# The unmutated tree must pass every suite the picked mutations name:
# otherwise a failure would prove nothing.
all_suites=$(for i in "${pick[@]}"; do printf '%s\n' ${suites[i]}; done | sort -u | tr '\n' ' ')
echo "mutate: the unmutated tree on: $all_suites"
t1=$SECONDS
run_suites "$all_suites" $((limit * $(echo $all_suites | wc -w)))
if [ $ran_result != pass ]; then
    tail -20 "$S/obj/out.txt" >&2
    echo "mutate: the unmutated tree fails suite $ran_suite ($ran_result): fix that first" >&2
    exit 3
fi
echo "mutate: it passes ($((SECONDS - t1)) s:${ran_times%,})"

# ---- the mutations ----

# The entry's file restored with its objects and gpt-mpi (gpt and
# tests/run are relinked for every mutation).
restore()
{
    local f=$1 o
    cp "$S/obj/pristine" "$S/$f"
    for o in $(objects_of "$f" | cut -f1); do
        if [ -e "$S/obj.orig/${o#obj/}" ]; then cp "$S/obj.orig/${o#obj/}" "$S/$o"; fi
    done
    if [ -e "$S/obj.orig/gpt-mpi" ]; then cp "$S/obj.orig/gpt-mpi" "$S/gpt-mpi"; fi
}

# Replaces FROM by TO in FILE when FROM occurs exactly once; else prints
# the count and fails.
apply()
{
    FROM=$2 TO=$3 perl -e '
        my ($f) = @ARGV;
        local $/;
        open(my $h, "<", $f) or die "$f: $!\n";
        my $s = <$h>;
        close $h;
        my ($from, $to) = ($ENV{FROM}, $ENV{TO});
        my ($n, $at) = (0, -1);
        $n++ while ($at = index($s, $from, $at + 1)) >= 0;
        if ($n != 1) { print "$n\n"; exit 3; }
        substr($s, index($s, $from), length $from) = $to;
        open($h, ">", $f) or die "$f: $!\n";
        print $h $s;
        close $h;' "$1"
}

rows=() caught=0 missed=0 broken=0
for i in "${pick[@]}"; do
    id=${ids[i]} f=${files[i]} start=$SECONDS
    printf '%-24s %-10s ' "$id" "${areas[i]}"
    verdict= why=-
    uses_mpi=0
    case " ${suites[i]} " in *" mpi "*) uses_mpi=1 ;; esac
    if [ ! -f "$S/$f" ]; then
        verdict="ERROR" why="no file $f"
    elif ! cp "$S/$f" "$S/obj/pristine"; then
        verdict="ERROR" why="cannot copy $f"
    elif ! count=$(apply "$S/$f" "${froms[i]}" "${tos[i]}"); then
        verdict="ERROR" why="text found ${count:-?} times in $f"
    elif ! objects_of "$f" | compile $uses_mpi || ! link $uses_mpi; then
        verdict="ERROR" why="the mutated tree does not compile"
        sed 's/^/    /' "$S/obj/errors" | head -8
    else
        run_suites "${suites[i]}"
        case $ran_result in
        pass) verdict="NOT caught" why="${suites[i]} passed" ;;
        fail) verdict="caught" why="$ran_suite failed" ;;
        timeout) verdict="caught" why="$ran_suite timed out" ;;
        crash) verdict="caught" why="$ran_suite crashed" ;;
        esac
    fi
    : > "$S/obj/errors"
    if [ -f "$S/$f" ]; then restore "$f"; fi
    secs=$((SECONDS - start))
    echo "$verdict ($why, $secs s)"
    case $verdict in
    caught) caught=$((caught + 1)) ;;
    "NOT caught") missed=$((missed + 1)) ;;
    *) broken=$((broken + 1)) ;;
    esac
    rows+=("$(printf '%-24s %-10s %-11s %-34s %5s' "$id" "${areas[i]}" "$verdict" "$why" "$secs")")
done

echo
printf '%-24s %-10s %-11s %-34s %5s\n' id area result "suite" seconds
printf '%s\n' "${rows[@]}"
echo
echo "mutate: ${#pick[@]} mutations: $caught caught, $missed NOT caught, $broken broken" \
    "($((SECONDS - t0)) s)"
[ $broken -eq 0 ] || exit 2
[ $missed -eq 0 ] || exit 1
exit 0
