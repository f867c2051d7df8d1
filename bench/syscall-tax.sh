#!/bin/bash
# What every other syscall on the host pays while forkprof's hooks are attached: a loop of
# bare getppid(2) calls (bench/syscall_loop.c), which forkprof never follows, timed bare and
# under each mode, the modes alternating round by round. Where fentry is refused (as under
# lockdown), the syscalls job hooks the sys_enter and sys_exit tracepoints, and then every
# syscall of every task passes two programs, in `run` as in `monitor`. The rows:
#   bare            the loop alone
#   run             forkprof run -- LOOP (the loop is the traced command)
#   monitor         the loop beside forkprof monitor (trace-all mode)
#   monitor-empty   the same with FORKPROF_BENCH_EMPTY=1: the hooks' floor
#   raw-floor       empty programs on the raw tracepoints sys_enter and sys_exit
#                   (bench/hook-floor.py raw), no forkprof code at all
#   classic-floor   empty programs on the classic syscalls:* events of the syscalls forkprof
#                   follows (bench/hook-floor.py classic), which forkprof cannot use: they
#                   skip ia32 syscalls (docs/kernel-findings.md)
#   bpftrace        bpftrace bench/phases.bt -c LOOP, the peer of `cargo xtask bench` (classic
#                   syscall events, as classic-floor), where bpftrace is installed
# Prints each row's median ns per call and the median of its difference from the same
# round's bare loop.
# Usage (root): [ROUNDS=7] [FORKPROF=path/to/forkprof] bench/syscall-tax.sh [CALLS]
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/bench/start-agent.sh"
fp=${FORKPROF:-$root/target/release/forkprof}
calls=${1:-2000000}
work=$(mktemp -d)
tracefs=/sys/kernel/tracing
mounted=
cleanup() {
  [ -z "$mounted" ] || umount "$tracefs"
  rm -rf "$work"
}
trap cleanup EXIT
# The classic events' ids are only in tracefs, which a fresh machine may not have mounted.
if [ ! -d "$tracefs/events" ]; then
  mount -t tracefs nodev "$tracefs"
  mounted=1
fi
loop=$work/syscall_loop
gcc -O2 -o "$loop" "$root/bench/syscall_loop.c"
measure() { # ROW: prints the loop's ns per call
  case $1 in
    bare) "$loop" "$calls" ;;
    run) "$fp" run -- "$loop" "$calls" 2>/dev/null ;;
    monitor | monitor-empty)
      local empty=0
      [ "$1" = monitor ] || empty=1
      start_agent 'forkprof: serving metrics' "$work/agent.err" \
        env FORKPROF_BENCH_EMPTY=$empty "$fp" monitor --listen 127.0.0.1:0
      "$loop" "$calls"
      kill -INT $agent; wait $agent || true ;;
    raw-floor) python3 "$root/bench/hook-floor.py" raw "$loop" "$calls" ;;
    classic-floor) python3 "$root/bench/hook-floor.py" classic "$loop" "$calls" ;;
    # The loop's line among bpftrace's own output.
    bpftrace) bpftrace "$root/bench/phases.bt" -c "$loop $calls" 2>/dev/null | grep -m1 -E '^[0-9.]+$' ;;
  esac
}
rows="bare run monitor monitor-empty raw-floor classic-floor"
if command -v bpftrace > /dev/null; then rows="$rows bpftrace"; fi
for round in $(seq "${ROUNDS:-7}"); do
  for row in $rows; do
    echo "$round $row $(measure $row)" >> "$work/results"
  done
done
python3 - "$work/results" "$calls" <<'PY'
import collections, statistics, sys
by = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    rnd, row, ns = line.split()
    by[row][rnd] = float(ns)
bare = by["bare"]
print(f"{sys.argv[2]} getppid calls per measurement, {len(bare)} rounds")
print(f"{'row':<15} {'ns per call':>12} {'above bare (median of rounds)':>31}")
for row, rounds in by.items():
    diff = statistics.median(rounds[r] - bare[r] for r in rounds)
    print(f"{row:<15} {statistics.median(rounds.values()):12.1f} {diff:+31.1f}")
PY
