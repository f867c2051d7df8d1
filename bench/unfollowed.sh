#!/bin/bash
# What forkprof's programs spend on a spawn they do not follow: the checks that turn it away
# (the hot hooks' open-window gates, the once-per-spawn programs' process lookups). The
# fork+exec loop runs outside `forkprof run`, whose own command only waits, with real and
# empty programs (FORKPROF_BENCH_EMPTY=1) alternating; the programs' time comes from
# kernel.bpf_stats_enabled, summed over this forkprof's programs only, before and after the
# loop. Prints each run's ns per spawn, and each round's real less empty.
# Usage (root, after `cargo xtask bench --only control --pairs 1` has built the loop):
#   [ROUNDS=3] [FORKPROF=path/to/forkprof] bench/unfollowed.sh [ITERATIONS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/bench/loop-inputs.sh"
n=${1:-2000}
loop_inputs unfollowed
work=$(mktemp -d)
stats_was=$(sysctl -n kernel.bpf_stats_enabled)
trap 'kill $(jobs -p) 2>/dev/null || true; sysctl -q kernel.bpf_stats_enabled="$stats_was"; rm -rf "$work"' EXIT
sysctl -q kernel.bpf_stats_enabled=1

# `ids`: the ids of forkprof's programs now loaded; `ns`: the time run so far by those not
# listed in $work/old (the ids taken before this run's forkprof started).
programs() { # ids|ns
  bpftool prog show -j | python3 -c '
import json, sys
old = set(open(sys.argv[2]).read().split()) if sys.argv[1] == "ns" else set()
mine = [p for p in json.load(sys.stdin)
        if p.get("name", "").startswith("forkprof") and str(p["id"]) not in old]
if sys.argv[1] == "ids":
    print(" ".join(str(p["id"]) for p in mine))
else:
    print(sum(p.get("run_time_ns", 0) for p in mine))' "$1" "$work/old"
}

# One run: forkprof (with the environment given) attached, its command waiting on a FIFO
# while the loop runs beside it; prints ns per spawn.
measure() { # [ENV...]
  programs ids > "$work/old"
  rm -f "$work/ready" "$work/go"
  mkfifo "$work/go"
  # A clean environment, without sudo's SUDO_UID: the waiting command stays root, as the FIFO's
  # directory is root's.
  env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@" "$fp" run --report /dev/null -- sh -c "touch '$work/ready'; read _ < '$work/go'" \
    2> "$work/agent.err" &
  local agent=$!
  for _ in $(seq 300); do [ -e "$work/ready" ] && break; sleep 0.1; done
  [ -e "$work/ready" ] || { echo "unfollowed: forkprof did not start:" >&2; cat "$work/agent.err" >&2; exit 1; }
  local before after
  before=$(programs ns)
  "$loop" "$n" "$true_dyn" > /dev/null
  after=$(programs ns)
  echo > "$work/go"
  wait "$agent"
  echo $(((after - before) / n))
}

echo "$n spawns per run, outside forkprof run; ns of forkprof's programs per unfollowed spawn"
for round in $(seq "${ROUNDS:-3}"); do
  real=$(measure FORKPROF_BENCH_EMPTY=0)
  empty=$(measure FORKPROF_BENCH_EMPTY=1)
  echo "round $round: real $real, empty $empty, real less empty $((real - empty))"
done
