#!/bin/bash
# What an agent that does not drain the ring buffer costs the processes it traces: the
# fork+exec loop (bench/spawn_loop.c) beside a `forkprof monitor` stopped by SIGSTOP (as one
# starved of CPU on a busy host would be), against the bare loop just before it, and the
# irq_work interrupts the loop's exits raised meanwhile (/proc/interrupts' IWI line: a
# ring-buffer wakeup that a program asks for raises one). With a second build (OLD), its row
# follows in the same rounds. docs/kernel-findings.md, "A stalled agent is woken once per
# fill".
# Usage (root, after `cargo xtask bench --only control --pairs 1` has built the loop):
#   [ROUNDS=3] [FORKPROF=path] bench/stalled-agent.sh [ITERATIONS] [OLD/forkprof]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/bench/start-agent.sh"
loop=$root/target/bench/spawn_loop
true_dyn=$root/target/bench/true_dyn
n=${1:-3000}
builds=("${FORKPROF:-$root/target/release/forkprof}")
if [ -n "${2:-}" ]; then builds+=("$2"); fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
iwi() { awk '/^ *IWI:/ { for (i = 2; i <= NF && $i ~ /^[0-9]+$/; i++) s += $i } END { print s + 0 }' /proc/interrupts; }
us() { "$loop" "$n" "$true_dyn" | grep -o 'us_per_iter=[0-9.]*' | head -1 | cut -d= -f2; }
printf '%-5s %-40s %10s %10s %9s\n' round build us/iter vs-bare irq_work
for round in $(seq "${ROUNDS:-3}"); do
  for fp in "${builds[@]}"; do
    bare=$(us)
    start_agent 'forkprof: serving metrics' "$work/agent.err" "$fp" monitor --listen 127.0.0.1:0
    kill -STOP "$agent"
    before=$(iwi)
    traced=$(us)
    raised=$(($(iwi) - before))
    kill -CONT "$agent"
    kill -INT "$agent"
    wait "$agent" || true
    python3 -c 'import sys; r, b, bare, t, i = sys.argv[1:]; print(f"{r:<5} {b[-40:]:<40} {float(t):10.1f} {100 * (float(t) / float(bare) - 1):+9.1f}% {i:>9}")' \
      "$round" "$fp" "$bare" "$traced" "$raised"
  done
done
