#!/bin/bash
# mpirun over two simulated hosts on this machine, nodea and nodeb, two slots each: one daemon per host
# (started by agent.sh, each under its host's name), ranks placed by the host list, every byte between
# ranks over TCP on the loopback interface (no shared memory, no other address), as between servers.
#
#   mpirun.sh [mpirun options] PROGRAM ARGS...
#
# $DLBENCH_SIMULATED_HOSTS_DIR: a folder for the host file, the daemons' pid files and each host's data/
# view (agent.sh); unset, a temporary one, removed at the end.
# Exit 77, with the reason on stderr, when this machine cannot simulate hosts (the callers skip).
set -u
here=$(cd "$(dirname "$0")" && pwd)
if ! reason=$("$here/agent.sh" --probe 2>&1); then
  echo "cannot simulate two hosts: $reason" >&2
  exit 77
fi
if [ -z "${DLBENCH_SIMULATED_HOSTS_DIR:-}" ]; then
  DLBENCH_SIMULATED_HOSTS_DIR=$(mktemp -d)
  trap 'rm -rf "$DLBENCH_SIMULATED_HOSTS_DIR"' EXIT
fi
export DLBENCH_SIMULATED_HOSTS_DIR
state=$DLBENCH_SIMULATED_HOSTS_DIR
printf 'nodea slots=2\nnodeb slots=2\n' >"$state/hostfile"
rm -f "$state"/*.pid
mpirun --allow-run-as-root --hostfile "$state/hostfile" \
  --mca plm_rsh_agent "$here/agent.sh" --mca plm_rsh_no_tree_spawn 1 \
  --mca btl tcp,self --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
  ${DLBENCH_MPIRUN_EXTRA:-} -x DLBENCH_SIMULATED_HOSTS_DIR "$@" &
mpirun=$!
# A `timeout` around this script signals the script: mpirun ends the job on it, as it would have directly.
trap 'kill -TERM $mpirun 2>/dev/null' TERM INT
wait $mpirun
status=$?
while kill -0 $mpirun 2>/dev/null; do  # the wait was cut short by the signal: wait for mpirun's end
  wait $mpirun
  status=$?
done
exit $status
