#!/bin/bash
# forkprof's own work per spawn in trace-all mode on a busy host (the overhead issue's
# condition): 10,000 idle processes alive, and two fork+exec loops spawning at once.
# For `record` and `monitor`, with the real programs and with empty ones (the floor), it
# prints the time inside forkprof's eBPF programs per spawn, from kernel.bpf_stats_enabled.
# Usage (root, after `cargo xtask bench --only control --pairs 1` has built the loop):
#   [IDLE=10000] [ROUNDS=2] [SPAWNERS=2] [STOP_AGENT=1] [FORKPROF=path/to/forkprof] bench/busy-host.sh [ITERATIONS]
# SPAWNERS=1 runs one loop: the same trace-all mode without a second spawner. STOP_AGENT=1
# stops the agent (SIGSTOP) while the loops run and lets it go on after: an agent that does
# not drain the ring buffer, as one starved of CPU on a busy host.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/bench/start-agent.sh"
fp=${FORKPROF:-$root/target/release/forkprof}
loop=$root/target/bench/spawn_loop
true_dyn=$root/target/bench/true_dyn
n=${1:-2000}
spawners=${SPAWNERS:-2}
work=$(mktemp -d)
trap 'kill $(cat "$work"/idle.pids) 2>/dev/null || true; rm -rf "$work"' EXIT
touch "$work/idle.pids"
for _ in $(seq "${IDLE:-10000}"); do sleep 3600 & echo $! >> "$work/idle.pids"; done
# The shell has forked them all by now, but each still has to exec sleep and run its
# dynamic linker (about 1 ms of CPU each): measuring before they are all asleep would trace
# seconds of their start-ups too. Wait until every one has exec'd and sleeps.
python3 - "$work/idle.pids" <<'PY'
import sys, time
pids = [p.strip() for p in open(sys.argv[1]) if p.strip()]
def settled(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return True
    comm, state = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2]
    return comm == "sleep" and state == "S"
deadline = time.time() + 300
while pids and time.time() < deadline:
    pids = [p for p in pids if not settled(p)]
    time.sleep(0.2)
if pids:
    sys.exit(f"busy-host: {len(pids)} idle processes never settled")
PY
measure() { # MODE LABEL [ENV...]
  local mode=$1 label=$2; shift 2
  local ready args
  case $mode in
    record) args=(record --force -o "$work/r.db"); ready='forkprof: recording' ;;
    monitor) args=(monitor --listen 127.0.0.1:0); ready='forkprof: serving metrics' ;;
  esac
  local agent
  start_agent "$ready" "$work/agent.err" env "$@" "$fp" "${args[@]}"
  sysctl -qw kernel.bpf_stats_enabled=1
  local pids=() _
  if [ -n "${STOP_AGENT:-}" ]; then kill -STOP "$agent"; fi
  for _ in $(seq "$spawners"); do "$loop" "$n" "$true_dyn" >/dev/null & pids+=($!); done
  wait "${pids[@]}"
  if [ -n "${STOP_AGENT:-}" ]; then kill -CONT "$agent"; fi
  bpftool prog show -j > "$work/progs.json"
  cp "$work/progs.json" "$work/$mode-$label-$((++measured)).json"
  sysctl -qw kernel.bpf_stats_enabled=0
  kill -INT $agent; wait $agent || true
  python3 - "$work/progs.json" "$((spawners * n))" "$mode ($label)" <<'PY'
import json, sys
progs, spawns, label = json.load(open(sys.argv[1])), int(sys.argv[2]), sys.argv[3]
ns = sum(p.get("run_time_ns", 0) for p in progs if p.get("name", "").startswith("forkprof"))
# Every syscall on the host passes sys_enter: its hits per spawn, about 33 for this loop,
# show when something else made syscalls during the measurement.
enters = sum(p.get("run_cnt", 0) for p in progs if p.get("name") == "forkprof_sys_enter")
print(f"{label:<24} {ns / spawns / 1000:6.2f} us per spawn in forkprof's programs"
      f" ({enters / spawns:.1f} sys_enter hits per spawn)")
PY
}
measured=0
for mode in record monitor; do
  for _ in $(seq "${ROUNDS:-2}"); do
    measure $mode real
    measure $mode empty FORKPROF_BENCH_EMPTY=1
  done
done
# Each program's median over the rounds, real and empty, per spawn: where the work above
# the floor goes in trace-all mode.
python3 - "$work" "$((spawners * n))" <<'PY'
import glob, json, os, statistics, sys
work, spawns = sys.argv[1], int(sys.argv[2])
for mode in ("record", "monitor"):
    per, hits = {}, {}  # program -> kind -> [us per spawn], [hits per spawn]
    for path in glob.glob(f"{work}/{mode}-*.json"):
        kind = os.path.basename(path).split("-")[1]
        for p in json.load(open(path)):
            name = p.get("name", "")
            if name.startswith("forkprof"):
                per.setdefault(name, {}).setdefault(kind, []).append(
                    p.get("run_time_ns", 0) / spawns / 1000)
                hits.setdefault(name, {}).setdefault(kind, []).append(
                    p.get("run_cnt", 0) / spawns)
    rows = []
    for name, kinds in per.items():
        real = statistics.median(kinds.get("real", [0]))
        empty = statistics.median(kinds.get("empty", [0]))
        h = [statistics.median(hits[name].get(k, [0])) for k in ("real", "empty")]
        rows.append((real - empty, name, real, empty, h))
    print(f"\n{mode}: medians over the rounds, per spawn")
    print(f"{'program':<30} {'hits real':>9} {'empty':>7} {'us real':>8} {'empty':>7} {'above':>7}")
    for above, name, real, empty, h in sorted(rows, reverse=True):
        if real or empty:
            print(f"{name:<30} {h[0]:9.1f} {h[1]:7.1f} {real:8.2f} {empty:7.2f} {above:7.2f}")
    print(f"{'total':<30} {'':>9} {'':>7} {sum(r[2] for r in rows):8.2f} {sum(r[3] for r in rows):7.2f} {sum(r[0] for r in rows):7.2f}")
PY
