#!/bin/sh
# docs/babysit.sh: reruns one command until it exits 0, as Levanter's
# babysit-tpu-vm does for a run on preemptible machines. The command must
# be safe to rerun as it is; `gpt train --auto-resume` is:
#
#   docs/babysit.sh ./gpt train --auto-resume --out run
#   BABYSIT_TRIES=100 BABYSIT_DELAY=60 docs/babysit.sh \
#       mpirun -np 4 --bind-to none ./gpt-mpi train --auto-resume --out run
#
# Each try starts from the newest checkpoint in --out (a fresh run when it
# has none), and a run already done exits 0 at once, which ends the loop.
# Exit 2 (a usage error, such as a flag the checkpoint refuses) ends it
# too: rerunning the same command cannot mend that. So do ^C and a
# SIGTERM to the whole process group (kill -TERM -PGID): the trainer, which
# gets it too, saves a checkpoint and exits, then this script stops. A
# SIGTERM to the trainer alone (a preempted process) is rerun.
#
# BABYSIT_TRIES: tries before giving up (20); BABYSIT_DELAY: seconds
# between tries (10). The script exits with the command's last code.
set -u
tries=${BABYSIT_TRIES:-20}
delay=${BABYSIT_DELAY:-10}
if [ $# -eq 0 ]; then
    echo "usage: babysit.sh COMMAND [ARGUMENTS...]" >&2
    exit 2
fi
# The shell runs a trap once the command in the foreground has ended.
trap 'echo "babysit: interrupted; not rerunning" >&2; exit 130' INT
trap 'echo "babysit: terminated; not rerunning" >&2; exit 143' TERM
try=1
while :; do
    "$@"
    rc=$?
    case $rc in
    0) exit 0 ;;
    2) echo "babysit: exit 2 (a usage error): not rerunning" >&2; exit 2 ;;
    esac
    if [ "$try" -ge "$tries" ]; then
        echo "babysit: try $try of $tries exited $rc; giving up" >&2
        exit "$rc"
    fi
    echo "babysit: try $try of $tries exited $rc; rerunning in $delay s" >&2
    sleep "$delay"
    try=$((try + 1))
done
