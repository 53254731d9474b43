#!/usr/bin/env bash
# tests/netns.sh (make test-netns): a pod of 4 hosts over real TCP, and a
# host cut off in the middle of a run.
#
# Each host is a Linux network namespace, gptns-0 .. gptns-3, with its own
# hostname (a UTS namespace) and one interface, eth0 at 10.77.0.(h+1)/24,
# the end of a veth pair whose other end sits on a bridge in a fifth
# namespace, gptns-br: the pod's switch. Nothing has a route anywhere else,
# and the root namespace gets no interface. mpirun runs on host 0 and
# starts Open MPI's daemon on the others through an agent that enters the
# host's namespace where a real pod would use ssh (--mca plm_rsh_agent);
# the hostfile names the hosts by address. Open MPI's out-of-band channel
# and the ranks' messages are held to the pod's subnet (oob_tcp_if_include,
# btl_tcp_if_include, --mca btl tcp,self). The checks:
#  (a) 4 hosts x 1 core write the checkpoint bytes of 1 process x 4 cores,
#      and so they do with a delay on every link where the kernel has
#      netem (where it has not, the test says so);
#  (b) host 3's switch port goes down mid-run: its packets vanish, so TCP
#      hangs (no reset, no error), the hard case. Every rank stops on its
#      GPT_COMM_TIMEOUT with one line on its stderr naming the peer it
#      lost, and mpirun exits non-zero, all within bounds;
#  (c) the newest checkpoint loads, and one process resuming it reaches a
#      straight run's bytes.
# It needs root, ip netns, unshare and mpirun. What it cannot run is said
# and counted: it closes with `netns: N passed, N failed, N skipped`. A
# machine that forbids namespaces (or a kernel without netem) is a skip,
# exit 0; so is a missing tool or binary, but under CI=true, which installs
# them, that is a failure (exit 1). The namespaces, the bridge and every
# process in them are removed on exit, even on failure or ^C; if the
# script is killed outright (SIGKILL), a watcher of its own removes them a
# second later (and failing that, the next run does).
set -Eeuo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
W=$ROOT/tests/tmp/netns                  # the runs' files
HOSTS=4                                  # a pod is a power of two of processes
NET=10.77.0                              # host h is $NET.(h+1), namespace gptns-h
CUT=3                                    # the host cut off in (b)
TIMEOUT=10                               # every rank's GPT_COMM_TIMEOUT
# The hosts' TCP gives up on a peer that acknowledges nothing after
# (2^(5+1) - 1) x 200 ms = 12.6 s (net.ipv4.tcp_retries2 = 5 in each
# namespace; Linux's default, 15, takes some 15 minutes). The ranks stop on
# their own timeout well before that, but mpirun cannot reach host 3's
# daemon to end it, and waits until its TCP gives up on that daemon.
TCP_RETRIES=5
TCP_GIVES_UP=13
RANKS_BY=$((TIMEOUT + 10))               # every rank gone, seconds after the cut
MPIRUN_BY=$((TIMEOUT + TCP_GIVES_UP + 15)) # mpirun and every process of the pod gone
NETNS=(gptns-br)
for ((h = 0; h < HOSTS; h++)); do NETNS+=("gptns-$h"); done
TINY=(--embed 16 --heads 2 --layers 1 --context 32 --seq 32 --batch 8 --eval-batch 8
      --eval-every 10 --data "$W/data.txt" --threads 1)

passed=0 failed=0 skipped=0
ok() { echo "ok $*"; passed=$((passed + 1)); }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
summary() { echo "netns: $passed passed, $failed failed, $skipped skipped"; }
# skip WHY: a check this machine cannot run, counted; the test goes on.
skip() { echo "SKIP netns: $*"; skipped=$((skipped + 1)); }
# The pod cannot be built: the machine forbids it (skip_machine, exit 0), or
# a tool or binary is missing (skip_missing: CI installs it, so under
# CI=true a failure).
skip_machine() { skip "the pod: $*"; summary; exit 0; }
skip_missing() {
    if [ "${CI:-}" = true ]; then
        fail "the pod skipped under CI=true, which installs what it needs: $*"
        summary
        exit 1
    fi
    skip_machine "$*"
}
note() { echo "    $*"; }
trap 'echo "FAIL tests/netns.sh line $LINENO: $BASH_COMMAND (exit $?)"' ERR

# Microseconds now, and d microseconds as seconds with one decimal.
now() { local t=${EPOCHREALTIME//[!0-9]/}; echo $((10#$t)); }
secs() { printf '%d.%d' $(($1 / 1000000)) $(($1 % 1000000 / 100000)); }

# Runs a command in the background and waits for it, so that ^C (whose
# trap bash holds back while a foreground command runs) stops us at once.
run() { "$@" 9>&- & wait $!; }

# Every process in the pod's namespaces.
pod_pids() { local ns; for ns in "${NETNS[@]}"; do ip netns pids "$ns" 2>/dev/null || true; done; }

# Ends the processes left in the pod's namespaces (the namespaces stay).
teardown_processes() {
    local i pids
    for ((i = 0; i < 50; i++)); do
        pids=$(pod_pids)
        [ -z "$pids" ] && return
        kill -9 $pids 2>/dev/null || true
        sleep 0.1
    done
}

# Kills every process in the pod's namespaces, then removes them (the
# veths and the bridge go with them).
teardown() {
    local ns
    teardown_processes
    for ns in "${NETNS[@]}" gptns-probe; do
        ip netns del "$ns" 2>/dev/null || true
    done
}
cleanup() {
    trap - ERR
    teardown
    jobs -p | xargs -r kill -9 2>/dev/null || true
}
LOCK=/run/lock/gpt-netns-test.lock

# The watcher (tests/netns.sh --reap PID), in a session of its own: once
# run PID has ended, however it ended, it removes what that run left, under
# the lock, so that it never touches a later run's pod.
if [ "${1:-}" = --reap ]; then
    while kill -0 "$2" 2>/dev/null; do sleep 1; done
    exec 9>"$LOCK"
    flock -w 600 9 && teardown
    exit 0
fi

# ---- can this machine build a pod? ----
[ "$(id -u)" = 0 ] || skip_machine "not root (network namespaces need root)"
for tool in ip:iproute2 tc:iproute2 ss:iproute2 unshare:util-linux flock:util-linux \
            setsid:util-linux timeout:coreutils mpirun:openmpi-bin; do
    command -v "${tool%%:*}" >/dev/null 2>&1 ||
        skip_missing "no ${tool%%:*} on this machine (Debian: ${tool#*:})"
done
[ -x ./gpt ] && [ -x ./gpt-mpi ] || skip_missing "no ./gpt or ./gpt-mpi (make gpt gpt-mpi)"
# One pod at a time on a machine (another checkout may run this test too):
# a lock of our own (ip netns add locks /run/netns itself), which no child
# of ours holds open.
mkdir -p /run/lock 2>/dev/null || skip_machine "cannot create /run/lock"
exec 9>"$LOCK"
if ! flock -w 300 9; then
    echo "FAIL another tests/netns.sh has held the pod's namespaces for 5 minutes"
    exit 1
fi
teardown # a killed run's leftovers
setsid "$ROOT/tests/netns.sh" --reap $$ < /dev/null > /dev/null 2>&1 9>&- &
disown # it outlives us on purpose: not one of the jobs cleanup ends
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
rm -rf "$W" && mkdir -p "$W/ranks"
if ! ip netns add gptns-probe 2>"$W/probe.err" ||
   ! ip -n gptns-probe link add gptns-pb type bridge 2>>"$W/probe.err" ||
   ! ip -n gptns-probe link add gptns-pv type veth peer name gptns-pw 2>>"$W/probe.err"; then
    skip_machine "cannot make network namespaces, bridges and veths here:" \
        "$(tr '\n' ' ' < "$W/probe.err")"
fi
ip netns del gptns-probe

# ---- the pod: hosts, switch, agent, hostfile ----
ip netns add gptns-br
ip -n gptns-br link add gptns-br type bridge
ip -n gptns-br link set gptns-br up
for ((h = 0; h < HOSTS; h++)); do
    ip netns add gptns-$h
    ip link add gptns-v$h netns gptns-br type veth peer name eth0 netns gptns-$h
    ip -n gptns-br link set gptns-v$h master gptns-br up
    ip -n gptns-$h addr add $NET.$((h + 1))/24 dev eth0
    ip -n gptns-$h link set eth0 up
    ip -n gptns-$h link set lo up
    ip netns exec gptns-$h sh -c "echo $TCP_RETRIES > /proc/sys/net/ipv4/tcp_retries2"
    echo "$NET.$((h + 1)) slots=1"
done > "$W/hosts"

# mpirun's ssh: `agent HOST COMMAND...` runs COMMAND on HOST, an address of
# the pod, in that host's namespace under that host's name.
cat > "$W/agent" <<EOF
#!/bin/sh
host=\$1; shift
case \$host in
$NET.[1-9]) h=\$((\${host##*.} - 1)) ;;
*) echo "agent: \$host is no host of the pod" >&2; exit 255 ;;
esac
exec ip netns exec gptns-\$h unshare --uts \\
    sh -c 'echo "\$0" > /proc/sys/kernel/hostname && exec sh -c "\$1"' gptns-\$h "\$*"
EOF
chmod +x "$W/agent"

# pod SECONDS ARGS...: mpirun, from host 0, of one rank on each host.
pod() {
    local seconds=$1
    shift
    timeout -k 5 "$seconds" ip netns exec gptns-0 unshare --uts \
        sh -c 'echo gptns-0 > /proc/sys/kernel/hostname && exec "$@"' sh \
        mpirun --allow-run-as-root --oversubscribe --bind-to none \
        --hostfile "$W/hosts" -np $HOSTS \
        --mca plm_rsh_agent "$W/agent" --mca plm_rsh_no_tree_spawn 1 \
        --mca oob_tcp_if_include $NET.0/24 --mca btl_tcp_if_include $NET.0/24 \
        --mca btl tcp,self \
        -x OMP_NUM_THREADS=1 -x GPT_COMM_TIMEOUT=$TIMEOUT "$@"
}

# One process (timeout SECONDS ./gpt ARGS...).
one() {
    local seconds=$1
    shift
    timeout -k 5 "$seconds" ./gpt "$@"
}

# The data: words at random (bash's generator, seeded).
RANDOM=99
words=(the cat sat on a mat and Holmes said Watson, my dear it is elementary. $'\n')
text=""
while [ ${#text} -lt 40000 ]; do text+="${words[RANDOM % 16]} "; done
printf '%s' "$text" > "$W/data.txt"

sha() { sha256sum "$1" | cut -c1-16; }
ckpt() { printf '%s/ckpt-%08d.safetensors' "$1" "$2"; }
echo "netns: a pod of $HOSTS hosts, gptns-0..$((HOSTS - 1)) on $NET.0/24, mpirun on gptns-0"

# ---- (a) the pod's bytes are one process's ----
# check_bytes NAME LINKS: the pod's run into $W/NAME, LINKS saying how
# the links are (for the message).
check_bytes() {
    local name=$1 links=$2 rc=0 rc1=0
    [ -e "$(ckpt "$W/one" 30)" ] ||
        run one 60 train "${TINY[@]}" --cores $HOSTS --steps 30 --out "$W/one" \
            > "$W/one.log" 2>&1 || rc1=$?
    run pod 120 "$ROOT/gpt-mpi" train "${TINY[@]}" --cores 1 --steps 30 --out "$W/$name" \
        > "$W/$name.log" 2>&1 || rc=$?
    local a b
    a=$(ckpt "$W/$name" 30) b=$(ckpt "$W/one" 30)
    if [ $rc = 0 ] && [ $rc1 = 0 ] && grep -q "pod of $HOSTS hosts" "$W/$name.log" &&
       cmp -s "$a" "$b"; then
        ok "$HOSTS hosts x 1 core over TCP, $links, write the checkpoint bytes of 1 process" \
           "x $HOSTS cores (sha256 $(sha "$a"))"
    else
        fail "$HOSTS hosts x 1 core over TCP, $links (mpirun exit $rc), against 1 process x" \
             "$HOSTS cores (exit $rc1): checkpoints differ or are missing"
        tail -5 "$W/$name.log" "$W/one.log" | sed 's/^/    /'
    fi
}

# The same with every host's link delayed by netem, when the kernel has it.
DELAY=2ms
check_bytes_delayed() {
    local h why
    if ! why=$(ip netns exec gptns-0 tc qdisc add dev eth0 root netem delay $DELAY 2>&1); then
        skip "delayed links: this kernel has no netem (tc says: ${why//$'\n'/ })"
        return
    fi
    for ((h = 1; h < HOSTS; h++)); do
        ip netns exec gptns-$h tc qdisc add dev eth0 root netem delay $DELAY
    done
    check_bytes pod-delayed "every link delayed $DELAY each way"
    for ((h = 0; h < HOSTS; h++)); do
        ip netns exec gptns-$h tc qdisc del dev eth0 root
    done
}

# ---- (b) a host cut off mid-run ----
# rank r's pid and stderr, written by the rank's shell before it becomes gpt-mpi
RANK_SH='r=$OMPI_COMM_WORLD_RANK; echo $$ > "$0/rank$r.pid"; exec "$@" 2> "$0/rank$r.err"'

alive() { # a process that has not exited (a zombie has)
    local state
    state=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) && [ "$state" != Z ]
}

# The addresses of every TCP connection on every host are the pod's own.
check_isolation() {
    local h bad=""
    for ((h = 0; h < HOSTS; h++)); do
        bad+=$(ip netns exec gptns-$h ss -Htn | awk -v net="$NET." '{
            for (i = 4; i <= 5; i++)
                if (index($i, net) != 1 && index($i, "127.0.0.1:") != 1) print $i }')
    done
    if [ -z "$bad" ]; then
        ok "every TCP connection of the pod runs between its own addresses ($NET.0/24," \
           "and each host's loopback)"
    else
        fail "TCP connections outside the pod: $bad"
    fi
}

check_cut() {
    local r pids=() where="" t0 el
    rm -rf "$W/cut" "$W/cut.rc" "$W/ranks"/*
    (
        rc=0
        pod 150 sh -c "$RANK_SH" "$W/ranks" "$ROOT/gpt-mpi" train "${TINY[@]}" --cores 1 \
            --steps 1000000 --ckpt-every 20 --keep 5 --out "$W/cut" > "$W/cut.log" 2>&1 || rc=$?
        echo $rc > "$W/cut.rc"
    ) 9>&- &
    t0=$(now)
    until [ -e "$(ckpt "$W/cut" 40)" ] || [ -e "$W/cut.rc" ] || (($(now) - t0 > 60000000)); do
        sleep 0.05
    done
    if [ ! -e "$(ckpt "$W/cut" 40)" ] || [ -e "$W/cut.rc" ]; then
        fail "the pod's long run did not reach step 40 (mpirun exit $(cat "$W/cut.rc" 2>/dev/null))"
        tail -5 "$W/cut.log" | sed 's/^/    /'
        return
    fi
    for ((r = 0; r < HOSTS; r++)); do
        pids[r]=$(cat "$W/ranks/rank$r.pid" 2>/dev/null || echo 0)
        where+=" $(ip netns identify "${pids[r]}" 2>/dev/null || echo '?')"
    done
    if [ "$where" = "$(printf ' gptns-%d' $(seq 0 $((HOSTS - 1))))" ]; then
        ok "rank h runs on host gptns-h, for each h"
    else
        fail "the ranks run on hosts$where, not on gptns-0..$((HOSTS - 1)) in order"
    fi
    check_isolation

    ip -n gptns-br link set gptns-v$CUT down
    t0=$(now)
    echo "netns: host gptns-$CUT cut off (its switch port down) after step 40"
    local gone=() mpirun_at="" all_at="" left=""
    while :; do
        el=$(($(now) - t0))
        for ((r = 0; r < HOSTS; r++)); do
            [ -z "${gone[r]:-}" ] && ! alive "${pids[r]}" && gone[r]=$el
        done
        [ -z "$mpirun_at" ] && [ -e "$W/cut.rc" ] && mpirun_at=$el
        [ -n "$mpirun_at" ] && [ -z "$(pod_pids)" ] && all_at=$el && break
        ((el > (MPIRUN_BY + 20) * 1000000)) && break
        sleep 0.1
    done
    local ns
    for ns in "${NETNS[@]}"; do
        for r in $(ip netns pids "$ns"); do left+=" $(cat /proc/$r/comm 2>/dev/null)@$ns"; done
    done
    teardown_processes

    # when each went
    local times="" last=0 late=""
    for ((r = 0; r < HOSTS; r++)); do
        if [ -n "${gone[r]:-}" ]; then
            times+=" rank $r $(secs ${gone[r]}) s,"
            ((gone[r] > last)) && last=${gone[r]}
        else
            times+=" rank $r never,"
            late+=" $r"
        fi
    done
    local rc mpirun_said="never" all_said="not by $((MPIRUN_BY + 20)) s (left:$left)"
    rc=$(cat "$W/cut.rc" 2>/dev/null || echo none)
    [ -n "$mpirun_at" ] && mpirun_said="$(secs $mpirun_at) s (exit $rc)"
    [ -n "$all_at" ] && all_said="$(secs $all_at) s"
    echo "netns: gone after the cut:$times mpirun $mpirun_said, the pod's last process $all_said"
    if [ -z "$late" ] && ((last <= RANKS_BY * 1000000)); then
        ok "every rank stopped within ${RANKS_BY} s of the cut (GPT_COMM_TIMEOUT $TIMEOUT s):" \
           "the last after $(secs $last) s"
    else
        fail "not every rank stopped within ${RANKS_BY} s of the cut:$times"
    fi
    if [ -n "$mpirun_at" ] && [ "$rc" != 0 ] && ((mpirun_at <= MPIRUN_BY * 1000000)); then
        ok "mpirun exited with code $rc $(secs $mpirun_at) s after the cut (bound ${MPIRUN_BY} s)"
    else
        fail "mpirun did not exit non-zero within ${MPIRUN_BY} s of the cut: $mpirun_said"
    fi
    if [ -n "$all_at" ] && ((all_at <= MPIRUN_BY * 1000000)); then
        ok "no process of the pod was left $(secs $all_at) s after the cut (mpirun, daemons, ranks)"
    else
        fail "processes of the pod were left ${MPIRUN_BY} s after the cut:$left"
    fi

    # what each rank said
    local lines=() count bad_count="" r_line
    for ((r = 0; r < HOSTS; r++)); do
        count=$(grep -c "^gpt: rank $r: " "$W/ranks/rank$r.err" || true)
        r_line=$(grep -m1 "^gpt: rank $r: " "$W/ranks/rank$r.err" || true)
        lines[r]=$r_line
        note "rank $r's stderr: ${r_line:-(no line)}"
        [ "$count" = 1 ] || bad_count+=" rank $r ($count lines)"
        grep -v "^gpt: rank $r: " "$W/ranks/rank$r.err" | sed "s/^/    rank $r, more: /" | head -5 ||
            true
    done
    if [ -z "$bad_count" ]; then
        ok "each rank said why it stopped in one line on its stderr"
    else
        fail "not one 'gpt: rank R:' line on each rank's stderr:$bad_count"
    fi
    local unnamed="" old=""
    for ((r = 0; r < HOSTS; r++)); do
        if ! grep -Eq '^gpt: rank [0-9]+: .*rank [0-9]+ \(host ' <<< "${lines[r]}"; then
            unnamed+=" $r"
            grep -q 'no answer for [0-9.]* s in .*another rank has died or hung' \
                <<< "${lines[r]}" && old=1
        fi
    done
    if [ -z "$unnamed" ]; then
        ok "each rank's line names the peer it lost: 'rank P (host H)'"
    else
        fail "the lines of ranks$unnamed do not name the peer lost as 'rank P (host H)'" \
             "${old:+(this comm.c says 'no answer for S s in ...; another rank has died or hung'}" \
             "${old:+without naming the peer: the change to comm.c that names it has not landed)}"
    fi
}

# ---- (c) the newest checkpoint is whole, and resumes bit for bit ----
check_resume() {
    local last
    last=$(ls "$W/cut" 2>/dev/null | sed -n 's/^ckpt-0*\([0-9][0-9]*\)\.safetensors$/\1/p' |
           sort -n | tail -1)
    if [ -z "$last" ] || ((last < 40)); then
        fail "no checkpoint from step 40 on survived the cut (newest: ${last:-none})"
        return
    fi
    if run one 60 eval --ckpt "$W/cut" --data "$W/data.txt" > "$W/eval.log" 2>&1; then
        ok "the newest checkpoint after the cut (step $last) loads"
    else
        fail "the newest checkpoint after the cut (step $last) does not load"
        tail -3 "$W/eval.log" | sed 's/^/    /'
        return
    fi
    local steps=$((last + 30)) rc=0 rc1=0
    run one 120 train "${TINY[@]}" --cores $HOSTS --steps $steps --ckpt-every 20 --keep 5 \
        --resume "$W/cut" --out "$W/resumed" > "$W/resumed.log" 2>&1 || rc=$?
    run one 120 train "${TINY[@]}" --cores $HOSTS --steps $steps --ckpt-every 20 --keep 5 \
        --out "$W/straight" > "$W/straight.log" 2>&1 || rc1=$?
    local a b
    a=$(ckpt "$W/resumed" $steps) b=$(ckpt "$W/straight" $steps)
    if [ $rc = 0 ] && [ $rc1 = 0 ] && cmp -s "$a" "$b"; then
        ok "1 process x $HOSTS cores resuming step $last reaches a straight run's step $steps" \
           "(sha256 $(sha "$a"))"
    else
        fail "resuming step $last (exit $rc) differs from a straight run (exit $rc1) at step $steps"
        tail -3 "$W/resumed.log" "$W/straight.log" | sed 's/^/    /'
    fi
}

t_start=$(now)
check_bytes pod "links as they are"
check_bytes_delayed
check_cut
check_resume
echo "netns: $(secs $(($(now) - t_start))) s"
summary
((failed == 0)) || exit 1
