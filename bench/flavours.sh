#!/usr/bin/env bash
# The two builds side by side: the static gcc/libgomp gpt and the dynamic
# clang/libomp/mimalloc gpt-llvm (make LLVM=1), on the same training runs,
# alternately, round after round; medians of ms/step and their ratio.
#   bench/flavours.sh GCC_BINARY LLVM_BINARY [--quick]
set -euo pipefail
gcc_bin=$1 llvm_bin=$2 rounds=5 steps=60
[ "${3:-}" = --quick ] && rounds=2 steps=20
data=data/sherlock-ascii.txt
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ ! -s "$data" ]; then # a stand-in: pseudo-English from a fixed seed
    data=$tmp/text.txt
    awk 'BEGIN { srand(7); split("the of and to a in that it was he his is with as had for you", w, " ");
                 for (i = 0; i < 400000; i++) printf "%s%s", w[int(rand() * 17) + 1], (i % 13 ? " " : ".\n") }' > "$data"
fi

ms() { # binary, flags...: the run's ms/step
    local bin=$1; shift
    rm -rf "$tmp/out"
    "$bin" train --data "$data" --steps "$steps" --eval-every 100000 --ckpt-every 100000 \
        --final-bytes 0 --out "$tmp/out" "$@" | awk '/ms\/step over/ { print $1 }'
}
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "flavours: the same training step, $rounds alternating rounds of $steps steps, median ms/step"
printf '  %-34s %12s %12s %9s\n' "layout" "gcc/libgomp" "clang/libomp" "ratio"
for layout in "--cores 1" "--tpu v3-8" "--tpu v3-8 --precision bf16"; do
    : > "$tmp/g"; : > "$tmp/l"
    for _ in $(seq "$rounds"); do
        ms "$gcc_bin" $layout >> "$tmp/g"
        ms "$llvm_bin" $layout >> "$tmp/l"
    done
    g=$(median < "$tmp/g") l=$(median < "$tmp/l")
    awk -v n="$layout" -v g="$g" -v l="$l" 'BEGIN { printf "  %-34s %12.2f %12.2f %8.2fx\n", n, g, l, l / g }'
done
echo "  (ratio: clang ms over gcc ms; above 1 the gcc build is faster)"
