#!/usr/bin/env bash
# bench/train.sh: training-step time of gpt on the cpu (eager) and xla
# (compiled) devices, and of the PyTorch reference when Debian's
# python3-torch is importable. The contenders run alternately, REPS times,
# so that machine noise falls on all of them alike; medians are reported.
#
#   bench/train.sh [STEPS] [REPS]        (defaults 300 and 5)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-300}
reps=${2:-5}
data=data/sherlock-ascii.txt
[ -s "$data" ] || data/get-data.sh >/dev/null
[ -x ./gpt ] || make -s gpt
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ms/step of one gpt run (training steps only: evals are excluded).
gpt_ms() {
    rm -rf "$tmp/out-$1"
    ./gpt train --device "$1" --steps "$steps" --eval-every 1000000 --final-bytes 0 \
        --data "$data" --out "$tmp/out-$1" | awk '/ms\/step over/ {print $1}'
}

torch_ms() {
    /usr/bin/python3 bench/torch_ref.py --steps "$steps" --data "$data" 2>/dev/null | awk '/ms\/step/ {print $1}'
}

has_torch=0
/usr/bin/python3 -c "import torch" 2>/dev/null && has_torch=1

median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

for ((r = 0; r < reps; r++)); do
    gpt_ms cpu >> "$tmp/cpu"
    gpt_ms xla >> "$tmp/xla"
    [ $has_torch = 1 ] && torch_ms >> "$tmp/torch"
done

cpu=$(median < "$tmp/cpu")
xla=$(median < "$tmp/xla")
printf "%-26s %10s\n" "train step (default config)" "ms/step"
printf "%-26s %10.2f\n" "gpt --device cpu" "$cpu"
printf "%-26s %10.2f   (%.2fx the cpu device)\n" "gpt --device xla" "$xla" "$(awk "BEGIN {print $cpu / $xla}")"
if [ $has_torch = 1 ]; then
    t=$(median < "$tmp/torch")
    printf "%-26s %10.2f   (gpt xla is %.1fx faster)\n" "PyTorch reference" "$t" "$(awk "BEGIN {print $t / $xla}")"
fi
echo "medians of $reps alternating runs of $steps steps, $(nproc) cores"
