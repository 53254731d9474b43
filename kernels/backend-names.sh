#!/bin/sh
# kernels/backend-names.sh NM OBJCOPY OBJECT BACKEND: puts the backend in
# the name of every function of one kernel object (tensor.c compiled for
# BACKEND), so each function has one name in the binary and a profile says
# which backend ran:
#   matmul_ex                  -> matmul_ex_avx2
#   mm_edge.constprop.0        -> mm_edge_avx2_constprop_0   (a compiler's clone)
#   matmul_ex._omp_fn.1        -> matmul_ex_avx2_omp_fn_1    (an OpenMP region)
# No dot is left, so a name cut at its first dot (as one finds a clone's
# original) still tells each clone from its original and from the other
# clones. The list comes from the object's own symbols (nm: t, T, W are
# functions) and is kept beside it as OBJECT.names.
set -e
nm=$1 objcopy=$2 obj=$3 backend=$4
"$nm" "$obj" | awk -v b="$backend" '$2 ~ /^[tTwW]$/ {
    s = $3; i = index(s, ".")
    if (!i) { print s, s "_" b; next }
    rest = substr(s, i + 1); sub(/^_/, "", rest); gsub(/\./, "_", rest)
    print s, substr(s, 1, i - 1) "_" b "_" rest
}' > "$obj.names"
"$objcopy" --redefine-syms="$obj.names" "$obj"
