#!/bin/bash
# What every other syscall on the host pays while forkprof's hooks are attached: a loop of
# bare getppid(2) calls (bench/syscall_loop.c), which forkprof never follows, timed under
# each row and, just before it, bare. Where fentry is refused (as under lockdown), the
# syscalls job hooks the classic events of the syscalls it follows by default
# (`--ia32-syscalls on-demand`: until a 32-bit process shows up), or the sys_enter and
# sys_exit tracepoints (`--ia32-syscalls always`), and then every syscall of every task
# passes two programs while they are attached, in `run` as in `monitor`. Rows:
#   run             forkprof run -- LOOP (the loop is the traced command)
#   run-always      forkprof run --ia32-syscalls always -- LOOP
#   monitor         the loop beside forkprof monitor (trace-all mode)
#   monitor-always  the loop beside forkprof monitor --ia32-syscalls always
#   run-ia32-seen   forkprof run -- sh -c 'SPAWN32; LOOP': a 32-bit spawner first
#                   (tests/fixtures/spawn32.c), so that sys_enter and sys_exit are attached
#                   on demand, for ia32 syscalls only, beside the classic events
#   monitor-ia32-seen  the same beside forkprof monitor: SPAWN32 once, then the loop
#   monitor-ia32-gone  the same, with 13 s between them: the on-demand hooks are detached
#                   once no 32-bit process has been left for 10 s (at monitor's next update
#                   or two), so the loop runs with the classic events alone again
#   monitor-empty   monitor --ia32-syscalls always with FORKPROF_BENCH_EMPTY=1: the floor of
#                   sys_enter and sys_exit with forkprof's programs emptied
#   raw-floor       empty programs on the raw tracepoints sys_enter and sys_exit
#                   (bench/hook-floor.py raw), no forkprof code at all
#   classic-floor   empty programs on those classic syscalls:* events (bench/hook-floor.py
#                   classic), which skip ia32 syscalls (docs/kernel-findings.md)
#   bpftrace        bpftrace bench/phases.bt -c LOOP, the peer of `cargo xtask bench` (classic
#                   syscall events, as classic-floor), where bpftrace is installed
# Prints the bare loop's median ns per call, and for each row its median and the median of
# its difference from the bare run just before it.
# Usage (root): [ROUNDS=7] [FORKPROF=path/to/forkprof] bench/syscall-tax.sh [CALLS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/bench/start-agent.sh"
fp=${FORKPROF:-$root/target/release/forkprof}
calls=${1:-2000000}
work=$(mktemp -d)
tracefs=/sys/kernel/tracing
mounted=
agent=
cleanup() {
  [ -z "$agent" ] || kill -INT "$agent" 2>/dev/null || true
  [ -z "$mounted" ] || umount "$tracefs" || true
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
spawn32=$work/spawn32
gcc -m32 -O1 -static -nostdlib -fno-pic -fno-stack-protector -o "$spawn32" \
  "$root/tests/fixtures/spawn32.c"
measure() { # ROW: the loop's ns per call, into $work/ns
  case $1 in
    bare) "$loop" "$calls" ;;
    run) "$fp" run -- "$loop" "$calls" 2>/dev/null ;;
    run-always) "$fp" run --ia32-syscalls always -- "$loop" "$calls" 2>/dev/null ;;
    # The loop's line is the last: the spawner prints nothing.
    run-ia32-seen) "$fp" run -- sh -c '"$1"; sleep 0.5; "$2" "$3"' sh "$spawn32" "$loop" \
      "$calls" 2>/dev/null ;;
    monitor | monitor-empty | monitor-always | monitor-ia32-seen | monitor-ia32-gone)
      local empty=0 flags=()
      [ "$1" != monitor-empty ] || empty=1
      case $1 in monitor-empty | monitor-always) flags=(--ia32-syscalls always) ;; esac
      start_agent 'forkprof: serving metrics' "$work/agent.err" \
        env FORKPROF_BENCH_EMPTY=$empty "$fp" monitor "${flags[@]}" --listen 127.0.0.1:0
      if [ "$1" = monitor-ia32-seen ]; then "$spawn32"; sleep 0.5; fi
      if [ "$1" = monitor-ia32-gone ]; then "$spawn32"; sleep 13; fi
      "$loop" "$calls"
      kill -INT "$agent"; wait "$agent" || true; agent= ;;
    raw-floor) python3 "$root/bench/hook-floor.py" raw "$loop" "$calls" ;;
    classic-floor) python3 "$root/bench/hook-floor.py" classic "$loop" "$calls" ;;
    # The loop's line among bpftrace's own output.
    bpftrace)
      bpftrace "$root/bench/phases.bt" -c "$loop $calls" > "$work/bpftrace.out" 2>/dev/null
      grep -m1 -E '^[0-9.]+$' "$work/bpftrace.out" ;;
  esac > "$work/ns"
  grep -qE '^[0-9.]+$' "$work/ns" || { echo "syscall-tax: $1 measured nothing" >&2; exit 1; }
}
rows="run run-always run-ia32-seen monitor monitor-always monitor-ia32-seen monitor-ia32-gone monitor-empty raw-floor classic-floor"
if command -v bpftrace > /dev/null; then rows="$rows bpftrace"; fi
for round in $(seq "${ROUNDS:-7}"); do
  for row in $rows; do
    measure bare
    bare=$(cat "$work/ns")
    measure "$row"
    echo "$round $row $bare $(cat "$work/ns")" >> "$work/results"
  done
done
python3 - "$work/results" "$calls" <<'PY'
import collections, statistics, sys
rows, bare = collections.defaultdict(list), []
for line in open(sys.argv[1]):
    rnd, row, b, ns = line.split()
    rows[row].append((float(b), float(ns)))
    bare.append(float(b))
print(f"{sys.argv[2]} getppid calls per measurement; the bare loop: median {statistics.median(bare):.1f} ns per call")
print(f"{'row':<15} {'ns per call':>12} {'above the bare run before it (median)':>39}")
for row, pairs in rows.items():
    diff = statistics.median(ns - b for b, ns in pairs)
    print(f"{row:<15} {statistics.median(ns for _, ns in pairs):12.1f} {diff:+39.1f}")
PY
