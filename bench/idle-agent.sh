#!/bin/bash
# What forkprof's agent costs while nothing spawns: for each build and each mode (`run`
# of a sleeping command, `run -o`, `record`, `monitor`, `top --plain`), the CPU time of all
# its threads and their voluntary context switches (one per wakeup) over SECONDS_IDLE
# seconds (default 10), from /proc, after 3 s to settle. Prints one line per build and mode.
# Usage (root): [SECONDS_IDLE=10] bench/idle-agent.sh FORKPROF...
set -eu
secs=${SECONDS_IDLE:-10}
[ $# -ge 1 ] || { echo "idle-agent: name at least one forkprof build" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Sums a field over the threads of $1: schedstat's first (ns on CPU), or a status line.
cpu_ns() { cat /proc/"$1"/task/*/schedstat | awk '{s += $1} END {print s}'; }
wakeups() { grep -h '^voluntary_ctxt_switches' /proc/"$1"/task/*/status | awk '{s += $2} END {print s}'; }
for fp in "$@"; do
  for mode in "run" "run -o" "record" "monitor" "top --plain"; do
    rm -f "$work/idle.db"
    case $mode in
      run) args=(run -- sleep $((secs + 5))) ;;
      "run -o") args=(run -o "$work/idle.db" -- sleep $((secs + 5))) ;;
      record) args=(record -o "$work/idle.db") ;;
      monitor) args=(monitor --listen 127.0.0.1:0) ;;
      "top --plain") args=(top --plain) ;;
    esac
    "$fp" "${args[@]}" > /dev/null 2>&1 &
    agent=$!
    sleep 3
    c0=$(cpu_ns $agent); w0=$(wakeups $agent)
    sleep "$secs"
    c1=$(cpu_ns $agent); w1=$(wakeups $agent)
    kill -INT $agent
    wait $agent || true
    awk -v fp="$fp" -v mode="$mode" -v s="$secs" -v c=$((c1 - c0)) -v w=$((w1 - w0)) 'BEGIN {
      printf "%s %-12s %7.0f us of CPU per second, %5.1f wakeups per second\n", fp, mode, c / 1000 / s, w / s
    }'
  done
done
