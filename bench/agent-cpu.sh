#!/bin/bash
# The CPU time of forkprof's agent per spawn, for two or more builds in the same rounds:
# each round starts `record` (or `monitor`) with each build in turn, runs the fork+exec loop
# beside it once it says it traces, and the loop reads the agent's process CPU clock
# (SPAWN_LOOP_TRACER). Prints each run, then each build's median and the round-by-round
# difference of each build from the first.
# Usage (root, after `cargo xtask bench --only control --pairs 1` has built the loop):
#   [MODE=record|monitor] [ROUNDS=10] bench/agent-cpu.sh [ITERATIONS] FORKPROF...
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/bench/start-agent.sh"
loop=$root/target/bench/spawn_loop
true_dyn=$root/target/bench/true_dyn
mode=${MODE:-record}
n=${1:?usage: agent-cpu.sh ITERATIONS FORKPROF...}
shift
[ $# -ge 1 ] || { echo "agent-cpu: name at least one forkprof build" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
case $mode in
  record) args=(record --force -o "$work/agent.db"); ready="forkprof: recording" ;;
  monitor) args=(monitor --listen 127.0.0.1:0); ready="forkprof: serving metrics" ;;
  *) echo "agent-cpu: MODE is record or monitor" >&2; exit 2 ;;
esac
for round in $(seq "${ROUNDS:-10}"); do
  for fp in "$@"; do
    start_agent "$ready" "$work/agent.err" "$fp" "${args[@]}"
    line=$(SPAWN_LOOP_TRACER=$agent "$loop" "$n" "$true_dyn")
    kill -INT $agent
    wait $agent
    echo "round $round $fp ${line##*tracer_cpu_us_per_iter=}"
  done
done | tee "$work/runs"
python3 - "$work/runs" "$mode" "$n" "$@" <<'PY'
import statistics, sys
runs = [l.split() for l in open(sys.argv[1])]
mode, n, builds = sys.argv[2], sys.argv[3], sys.argv[4:]
by = {b: [float(r[3]) for r in runs if r[2] == b] for b in builds}
print(f"the agent's CPU per spawn under {mode}, {len(by[builds[0]])} rounds of {n} spawns:")
for b in builds:
    print(f"{b}: median {statistics.median(by[b]):.2f} us")
    if b != builds[0]:
        d = sorted(x - y for x, y in zip(by[b], by[builds[0]]))
        print(f"  less {builds[0]}, round by round: median {statistics.median(d):+.2f} us, "
              f"{sum(x < 0 for x in d)} of {len(d)} rounds lower")
PY
