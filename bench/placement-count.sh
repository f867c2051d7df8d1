#!/bin/bash
# Where the fork+exec loop's processes run, bare, under `forkprof run` with empty programs
# (the hooks' floor) and under `forkprof run`: the question is whether tracing moves them
# between CPUs, which would cost each move the cross-CPU price of docs/kernel-findings.md.
# For each row, over one run of the loop (bench/spawn_loop.c, `cargo xtask bench` builds it):
#   migrations  the loop's and its children's moves between CPUs (sched_migrate_task of
#               spawn_loop and true_dyn tasks)
#   new-apart   children whose first CPU (sched_wakeup_new's target_cpu) is not the CPU of
#               the parent that woke them, of all children
#   agent-ticks the forkprof process's own CPU time over the loop (all its threads, in clock
#               ticks of 10 ms): what the agent ran beside the loop
# The loop's wall time is printed too, but perf's recording of the scheduler events slows it:
# time the loop with `cargo xtask bench`, not here. Rows alternate, ROUNDS times.
# Usage (root, perf installed): [ROUNDS=3] [FORKPROF=path] bench/placement-count.sh [ITERATIONS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
fp=${FORKPROF:-$root/target/release/forkprof}
loop=$root/target/bench/spawn_loop
true_dyn=$root/target/bench/true_dyn
n=${1:-2000}
command -v perf >/dev/null || { echo "placement-count: needs perf" >&2; exit 2; }
[ -x "$loop" ] && [ -x "$true_dyn" ] || {
  echo "placement-count: build the loop first (cargo xtask bench --only control --pairs 1)" >&2
  exit 2
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The loop, then the CPU ticks of the process that started it (forkprof's agent, or this
# script's shell for the bare row) before and after.
inner="awk '{print \$14 + \$15}' /proc/\$PPID/stat > $work/t0; $loop $n $true_dyn > $work/loop.out;"
inner+=" awk '{print \$14 + \$15}' /proc/\$PPID/stat > $work/t1"
printf '%-7s %10s %11s %10s %12s\n' row us/iter migrations new-apart agent-ticks
for _ in $(seq "${ROUNDS:-3}"); do
  for row in bare empty traced; do
    case $row in
      bare) cmd=(sh -c "$inner") ;;
      empty) cmd=(env FORKPROF_BENCH_EMPTY=1 "$fp" run --report "$work/report" -- sh -c "$inner") ;;
      traced) cmd=("$fp" run --report "$work/report" -- sh -c "$inner") ;;
    esac
    perf record -q -a -o "$work/perf.data" -e sched:sched_wakeup_new -e sched:sched_migrate_task \
      -- "${cmd[@]}" > "$work/perf.out" 2>&1 || { cat "$work/perf.out" >&2; exit 1; }
    perf script -i "$work/perf.data" -F comm,cpu,event,trace 2> /dev/null > "$work/events"
    us=$(grep -o 'us_per_iter=[0-9.]*' "$work/loop.out" | head -1 | cut -d= -f2)
    ticks=$(($(cat "$work/t1") - $(cat "$work/t0")))
    [ "$row" = bare ] && ticks=-
    python3 - "$work/events" "$row" "$us" "$ticks" <<'PY'
import re, sys
path, row, us, ticks = sys.argv[1:]
migrations = spawned = apart = 0
for line in open(path):
    if "sched_migrate_task" in line and re.search(r"comm=(spawn_loop|true_dyn) ", line):
        migrations += 1
    elif "sched_wakeup_new" in line and line.split()[0] == "spawn_loop":
        cpu = int(re.search(r"\[(\d+)\]", line).group(1))
        target = int(re.search(r"target_cpu=(\d+)", line).group(1))
        spawned += 1
        apart += cpu != target
print(f"{row:<7} {float(us):10.1f} {migrations:11d} {apart:4d}/{spawned:<5d} {ticks:>12}")
PY
  done
done
