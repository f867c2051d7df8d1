#!/bin/bash
# Between runs of the fork+exec loop, each row against the bare run just before it:
#   followed  forkprof run -- LOOP (the loop is traced)
#   elsewhere the loop beside a `forkprof run` that follows another process (a `sleep`):
#             every program attached and real, none of the loop's spawns followed
#   empty     FORKPROF_BENCH_EMPTY=1 forkprof run -- LOOP: the hooks' floor
# What `elsewhere` costs above `empty` is what real programs cost a spawn they do not
# follow: by bpf_stats, their checks (bench/unfollowed.sh); by the loop's time, also what
# they leave behind for the kernel code after them, which the in-run pairs of
# bench/spawn-pairs.sh cancel (BENCHMARKS.md, "The eIBRS host's last three cells").
# Prints each row's median over the rounds with its 90% interval (order statistics), and
# `followed` and `elsewhere` less `empty` round by round.
# Usage (root, after `cargo xtask bench --only control --pairs 1` has built the loop):
#   [ROUNDS=40] [FORKPROF=path] bench/attached-elsewhere.sh [ITERATIONS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/bench/loop-inputs.sh"
n=${1:-1000}
loop_inputs attached-elsewhere
work=$(mktemp -d)
agent=
trap '{ [ -n "$agent" ] && kill "$agent" 2>/dev/null; } || true; rm -rf "$work"' EXIT
us() { grep -o 'us_per_iter=[0-9.]*' | head -1 | cut -d= -f2; }
gone() { while bpftool prog show 2>/dev/null | grep -q ' name forkprof_'; do sleep 0.05; done; }
for _ in $(seq "${ROUNDS:-40}"); do
  gone
  b1=$("$loop" "$n" "$true_dyn" | us)
  f=$("$fp" run --report /dev/null -- "$loop" "$n" "$true_dyn" 2>/dev/null | us)
  gone
  b2=$("$loop" "$n" "$true_dyn" | us)
  # forkprof starts its command once every program is attached: a `sleep` child says so
  # (under sudo the command runs as the invoking user, who could not write to $work).
  "$fp" run --report /dev/null -- sleep 600 >/dev/null 2>&1 &
  agent=$!
  until pgrep -P "$agent" -x sleep > /dev/null; do
    kill -0 "$agent" 2>/dev/null || { echo "attached-elsewhere: forkprof run exited before its command ran" >&2; exit 1; }
    sleep 0.05
  done
  o=$("$loop" "$n" "$true_dyn" | us)
  kill -INT "$agent"; wait "$agent" 2>/dev/null || true; agent=
  gone
  b3=$("$loop" "$n" "$true_dyn" | us)
  e=$(FORKPROF_BENCH_EMPTY=1 "$fp" run --report /dev/null -- "$loop" "$n" "$true_dyn" 2>/dev/null | us)
  echo "$b1 $f $b2 $o $b3 $e" >> "$work/rounds"
done
python3 - "$work/rounds" <<'PY'
import statistics, sys
from math import comb
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
def interval(v):
    s, n = sorted(v), len(v)
    k = 0
    while sum(comb(n, i) for i in range(k + 1)) / 2**n < 0.05:
        k += 1
    return (s[k - 1], s[n - k]) if k > 0 else (s[0], s[-1])
print(f"{len(rows)} rounds; the bare loop: median {statistics.median(r[0] for r in rows):.1f} us per iteration")
ratio = lambda r, i, j: (r[j] / r[i] - 1) * 100
for name, i, j in [("followed", 0, 1), ("elsewhere", 2, 3), ("empty", 4, 5)]:
    v = [ratio(r, i, j) for r in rows]
    lo, hi = interval(v)
    print(f"{name:<10} {statistics.median(v):+6.1f}%  (90% CI {lo:+.1f} .. {hi:+.1f})")
for name, i, j in [("followed", 0, 1), ("elsewhere", 2, 3)]:
    v = [ratio(r, i, j) - ratio(r, 4, 5) for r in rows]
    lo, hi = interval(v)
    print(f"{name} less empty, round by round: {statistics.median(v):+.1f} points (90% CI {lo:+.1f} .. {hi:+.1f})")
PY
