# Sourced by the tests that start ranks and then stop, kill or signal them (signal_in_collective.sh,
# simulated_hosts/faults.sh). Reads /proc: no procps in a bare container. Expects $state, the test's
# folder, holding the run's out and err.

# Prints what failed, then the run's output, and exits 1. $fault_case, where set, names the case.
fail() {
  echo "FAIL${fault_case:+ ($fault_case)}: $*" >&2
  echo "---- stdout" >&2; cat "$state/out" >&2
  echo "---- stderr" >&2; cat "$state/err" >&2
  exit 1
}

# A process that has not ended (a zombie no one reaps counts as ended; so does one gone while being read).
alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$stat" ] && ! grep -q '^[^ ]* ([^)]*) Z' <<<"$stat"
}

# The live processes whose parent is $1.
children() {
  local stat pid ppid
  for stat in /proc/[0-9]*/stat; do
    read -r pid _ _ ppid _ 2>/dev/null <"$stat" || continue
    [ "$ppid" = "$1" ] && alive "$pid" && echo "$pid"
  done
}

# Waits until the run (its launcher's pid $2) has logged step $1, for up to 60 s; fails if it ends first.
wait_for_step() {
  for _ in $(seq 1 600); do
    grep -q "^step $1/" "$state/out" 2>/dev/null && return 0
    alive "$2" || fail "the run ended before step $1"
    sleep 0.1
  done
  fail "no step $1 within 60 s"
}
