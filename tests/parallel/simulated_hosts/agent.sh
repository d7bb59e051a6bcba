#!/bin/sh
# The launch agent of the simulated hosts (mpirun --mca plm_rsh_agent): where mpirun would ssh to a host
# and start its daemon there, this starts the daemon on this machine, in a UTS namespace of its own whose
# host name is the host's, so that the daemon and its ranks report that name as a real node's would.
#
#   agent.sh [ssh options] HOST COMMAND...   what mpirun runs (ssh's arguments)
#   agent.sh --probe                         exit 0 when this machine can give a process its own host name
#
# Each host has a file system view of its own, as servers do: where $DLBENCH_SIMULATED_HOSTS_DIR/HOST.data
# exists, it is that host's $DLBENCH_SIMULATED_HOSTS_DIR/data (bound over it in the host's mount
# namespace), so that one path holds another copy of a data set on each host.
#
# The daemon runs in the foreground (mpirun's --daemonize is dropped), as the agent's own process: its pid
# is written to $DLBENCH_SIMULATED_HOSTS_DIR/HOST.pid, for the tests that kill or stop a host.
set -u

# unshare --uts needs CAP_SYS_ADMIN; without it (a container), a user namespace may still give one.
namespace() {
  if unshare --uts --mount true 2>/dev/null; then
    echo "unshare --uts --mount"
  elif unshare --user --map-root-user --uts --mount true 2>/dev/null; then
    echo "unshare --user --map-root-user --uts --mount"
  else
    return 1
  fi
}

if [ "${1:-}" = "--probe" ]; then
  if ! command -v unshare >/dev/null 2>&1; then
    echo "unshare (util-linux) is not installed" >&2
    exit 1
  fi
  if ! namespace >/dev/null; then
    echo "unshare --uts: $(unshare --uts true 2>&1 | head -n 1); this machine gives no process a host name" \
         "of its own (it needs CAP_SYS_ADMIN or user namespaces)" >&2
    exit 1
  fi
  exit 0
fi

while [ $# -gt 0 ]; do
  case "$1" in
    -*) shift ;;  # ssh's own options (-x, ...)
    *) break ;;
  esac
done
host=$1
shift
command=$(printf '%s' "$*" | sed 's/--daemonize//')
unshare=$(namespace) || { echo "simulated host $host: cannot set a host name (unshare --uts)" >&2; exit 1; }
state=${DLBENCH_SIMULATED_HOSTS_DIR:-}
if [ -n "$state" ]; then
  echo $$ >"$state/$host.pid"
fi
# exec all the way down: this process becomes the host's daemon.
exec $unshare -- sh -c '
  hostname "$0" || exit 1
  if [ -n "$2" ] && [ -d "$2/$0.data" ]; then mount --bind "$2/$0.data" "$2/data" || exit 1; fi
  exec sh -c "exec $1"' "$host" "$command" "$state"
