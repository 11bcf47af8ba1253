# Sourced by the scripts that start and stop processes: waiting for
# readiness and for death, never sleeping and hoping. A pid alone names a
# process only until it is reused (threads take pids too, so that can be
# soon); with its start time it names one process for good.

# proc_start_time PID: the kernel's start time of PID, empty if it is gone.
proc_start_time() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  # Field 22, counted after the command name, which may hold spaces.
  echo "${stat##*) }" | awk '{print $20}'
}

# proc_alive PID [START]: running and not a zombie, and the process that
# started at START when that is given.
proc_alive() {
  local state
  state=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ] || return 1
  [ -z "${2:-}" ] || [ "$(proc_start_time "$1")" = "$2" ]
}

# proc_state PID: the kernel's one-letter state of PID (R, S, D, T when
# stopped by a signal, ...), empty if it is gone.
proc_state() {
  sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null || true
}

# proc_wait_stopped PID [SECONDS]: until PID is stopped (SIGSTOP); with
# --cont, until it runs again (SIGCONT). Fails if PID exits first.
proc_wait_stopped() {
  local want=T cont=0
  if [ "$1" = --cont ]; then cont=1; shift; fi
  local pid="$1" deadline=$((SECONDS + ${2:-10})) state
  while :; do
    state=$(proc_state "$pid")
    [ -n "$state" ] && [ "$state" != Z ] || return 1
    if [ "$cont" = 1 ]; then [ "$state" != "$want" ] && return 0; else [ "$state" = "$want" ] && return 0; fi
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.02
  done
}

# proc_wait_gone PID START [SECONDS]: until that process has exited.
proc_wait_gone() {
  local deadline=$((SECONDS + ${3:-30}))
  while proc_alive "$1" "$2"; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.05
  done
}

# proc_wait_port PID HOST:PORT [SECONDS]: until PID listens on HOST:PORT.
# Fails at once if PID exits first (the port was taken, say).
proc_wait_port() {
  local pid="$1" port="${2##*:}" deadline=$((SECONDS + ${3:-30}))
  until ss -Hltnp "sport = :$port" 2>/dev/null | grep -q "pid=$pid,"; do
    proc_alive "$pid" || return 1
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.05
  done
}

# proc_pick_ports FIRST LAST [WIDTH]: a free base port B in [FIRST, LAST),
# FIRST plus a multiple of WIDTH (default 10), with B to B+WIDTH-1 unused
# by any socket. The range must lie below the kernel's ephemeral ports: a
# port there may be held by any outgoing connection, or by its TIME_WAIT for
# a minute after, and then the bind fails. Scripts that may run at the same
# time take ranges that do not overlap.
proc_pick_ports() {
  local first="$1" last="$2" width="${3:-10}" ephemeral slots base try
  ephemeral=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range)
  [ "$last" -le "$ephemeral" ] || {
    echo "ports $first-$last reach the ephemeral range (from $ephemeral)" >&2
    return 1
  }
  slots=$(((last - first) / width))
  [ "$slots" -ge 1 ] || { echo "ports $first-$last hold no block of $width" >&2; return 1; }
  for try in $(seq 1 50); do
    base=$((first + (RANDOM % slots) * width))
    [ -n "$(ss -Htan "( sport >= :$base and sport <= :$((base + width - 1)) )" 2>/dev/null)" ] ||
      { echo "$base"; return 0; }
  done
  echo "no $width free ports in a row in $first-$last" >&2
  return 1
}
