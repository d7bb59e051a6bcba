#!/bin/bash
# A rank asked to stop (SIGTERM) while it waits in a collective that cannot complete says where it
# stopped, in one line, and ends: the path a survivor takes when mpirun tears a job down after losing a
# host (tests/parallel/simulated_hosts/faults.sh kill). There the signal races mpirun's own end of the
# ranks; here nothing else ends them, so the line must come every time.
#
# Two CPU ranks train under plain mpirun. Rank 1 is stopped (SIGSTOP): rank 0 is left waiting in a
# collective, far inside the watchdog's --timeout. Rank 0 then gets SIGTERM, as from a
# launcher, and must within a few seconds
#   - print "dlbench: error: rank 0 (host H) stopped by SIGTERM at step N while waiting S s in
#     all_reduce_sum (collective #K)" (or another collective), once;
#   - end with no other stop line (its watchdog did not speak: the signal did).
#
#   signal_in_collective.sh DLBENCH_BINARY MPIEXEC
# Exit 0: passed; 1: failed (saying what).
set -u
dlbench=$1
mpiexec=$2
state=$(mktemp -d)
source "$(dirname "$0")/processes.sh"

cleanup() {
  [ -n "${rank1:-}" ] && kill -KILL "$rank1" 2>/dev/null
  [ -n "${mpirun:-}" ] && kill -KILL "$mpirun" 2>/dev/null
  rm -rf "$state"
}
trap cleanup EXIT

# The pid of mpirun's child whose environment names it rank $1.
rank_pid() {
  local pid
  for pid in $(children "$mpirun"); do
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" && echo "$pid"
  done
}

timeout 120 "$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$dlbench" train --device cpu --threads 1 \
  --model resnet20 --data synthetic --batch-size 8 --steps 100000 --log-every 1 --timeout 60 \
  </dev/null >"$state/out" 2>"$state/err" &
launcher=$!

wait_for_step 3 "$launcher"
# `timeout` runs mpirun as its child.
mpirun=$(children "$launcher" | head -n 1)
[ -n "$mpirun" ] || fail "mpirun's process not found"
rank0=$(rank_pid 0)
rank1=$(rank_pid 1)
[ -n "$rank0" ] && [ -n "$rank1" ] || fail "the two ranks' processes not found (rank 0: '$rank0', 1: '$rank1')"

kill -STOP "$rank1"
sleep 1  # rank 0 finishes its step's computation and waits on rank 1
kill -TERM "$rank0"
for _ in $(seq 1 100); do
  alive "$rank0" || break
  sleep 0.05
done
alive "$rank0" && fail "rank 0 still runs 5 s after its SIGTERM"
kill -KILL "$rank1"
wait $launcher
status=$?
[ $status -ne 0 ] || fail "mpirun exited 0"
[ $status -ne 124 ] || fail "mpirun hung (the time limit ended it)"

# The collective is whichever rank 1 was stopped short of: the step's gradient all-reduce, the sum of the
# logged loss, the max by which the ranks agree whether to stop.
pattern="^dlbench: error: rank 0 \(host [^)]+\) stopped by SIGTERM at step [0-9]+ while waiting [0-9.]+ s in \
[a-z_]+ \(collective #[0-9]+\)"
n=$(grep -cE "$pattern" "$state/err")
[ "$n" = 1 ] || fail "$n lines from rank 0 saying it stopped by SIGTERM in a collective (one expected)"
# Rank 1 may speak too, once mpirun wakes it (SIGCONT) to end it; rank 0 has nothing more to say.
others=$(grep -E "rank 0[ )]" "$state/err" | grep -cvE "$pattern")
[ "$others" = 0 ] || fail "other lines about rank 0 than its own"
echo "passed: $(grep -E "$pattern" "$state/err" | cut -c1-110)"
