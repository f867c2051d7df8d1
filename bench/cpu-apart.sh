#!/bin/bash
# Where forkprof's cost on the fork+exec loop is spent: in the loop process's own CPU time
# (its forks and waits), in its children's (each child's exec, start-up and exit), or in
# neither (wall time only). bench/spawn_loop.c prints the two parts of its CPU time apart.
# Each round runs, each after a bare run of its own: `forkprof run -- LOOP` (row A), row B
# (by default the same with FORKPROF_BENCH_EMPTY=1: the hooks' floor), and a bare run again
# (the A/A control). For each row, the median over the rounds of its difference from the
# bare run before it, in us per iteration, with a 90% interval (order statistics); then A
# less B, round by round. The parts are exact; their split into user and system time is
# not, and is not used (docs/kernel-findings.md, "Wall time and the programs' time").
# Differences between runs of a few us per iteration are within what its A/A control moves
# by; bench/spawn-pairs.sh measures them inside one run.
# Usage (root): [ROUNDS=40] [FORKPROF=path] [A_ENV="VAR=VALUE ..."] [B_ENV="VAR=VALUE ..."]
#   [B_FORKPROF=path] bench/cpu-apart.sh [ITERATIONS]
# B_ENV and B_FORKPROF make row B another switch or another build: for example
# B_ENV=FORKPROF_TEST_PROC_SLOTS=64 (warm process slots), or B_FORKPROF=OLD/forkprof (an
# older build, with its real programs: B_ENV is then empty unless given). A_ENV gives row A
# a switch too: A_ENV="FORKPROF_BENCH_EMPTY=1 FORKPROF_BENCH_BURN=3300" with the default
# row B sets a loop of 3,300 register-only steps at each exec against the bare floor (the
# burn control, BENCHMARKS.md). Each result line
# is printed as it comes (row|before|after), then the summary.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
fp=${FORKPROF:-$root/target/release/forkprof}
fp_b=${B_FORKPROF:-$fp}
if [ -n "${B_FORKPROF:-}" ]; then b_env=${B_ENV-}; else b_env=${B_ENV-FORKPROF_BENCH_EMPTY=1}; fi
a_env=${A_ENV-}
label_a=${a_env:-forkprof run}
label_b="$b_env${B_FORKPROF:+ $B_FORKPROF}"
iterations=${1:-2000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gcc -O2 -o "$work/spawn_loop" "$root/bench/spawn_loop.c"
gcc -O2 -o "$work/true_dyn" "$root/bench/true_dyn.c"
# The bench's clean environment: `cargo` sets LD_LIBRARY_PATH, which adds failed openat
# calls to every exec (BENCHMARKS.md, "What it measures").
clean=(env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8)
loop=("$work/spawn_loop" "$iterations" "$work/true_dyn")
measure() { # ROW: the loop's result line; its stderr (forkprof's too) in $work/ROW.err
  local out
  if ! out=$(
    case $1 in
      bare) "${clean[@]}" "${loop[@]}" ;;
      # shellcheck disable=SC2086
      a) "${clean[@]}" $a_env "$fp" run --json --report "$work/a.json" -- "${loop[@]}" ;;
      # shellcheck disable=SC2086
      b) "${clean[@]}" $b_env "$fp_b" run --json --report "$work/b.json" -- "${loop[@]}" ;;
    esac 2> "$work/$1.err"
  ); then
    echo "cpu-apart: row $1 exited with an error:" >&2
    cat "$work/$1.err" >&2
    exit 1
  fi
  grep -m1 '^spawn_loop:' <<< "$out" || { echo "cpu-apart: row $1 printed no result" >&2; exit 1; }
}
for round in $(seq "${ROUNDS:-40}"); do
  for row in a b control; do
    before=$(measure bare)
    if [ "$row" = control ]; then after=$(measure bare); else after=$(measure "$row"); fi
    echo "$row|$before|$after" | tee -a "$work/results"
  done
done
python3 - "$work/results" "$iterations" "$label_b" "$label_a" <<'PY'
import collections, math, statistics, sys
keys = [("us_per_iter", "wall"), ("loop_cpu_us_per_iter", "loop's own CPU"),
        ("children_cpu_us_per_iter", "children's CPU"), ("cpu_us_per_iter", "CPU in all")]
def fields(line):
    kv = dict(w.split("=", 1) for w in line.split()[1:] if "=" in w)
    return [float(kv[k]) for k, _ in keys]
diffs, bare = collections.defaultdict(list), []
for line in open(sys.argv[1]):
    row, before, after = line.rstrip("\n").split("|")
    b, a = fields(before), fields(after)
    bare.append(b)
    diffs[row].append([x - y for x, y in zip(a, b)])
def ci90(v):
    # The bench's interval (xtask/src/bench/stats.rs, median_ci90): the order statistics
    # x(k) and x(n+1-k) with the largest k whose coverage, 1 - 2 P(Binomial(n, 1/2) < k),
    # is still 90% or more; none under 5 values.
    n, below, k = len(v), 0.0, 0
    while k < n // 2 and 1 - 2 * (below + math.comb(n, k) / 2**n) >= 0.90:
        below += math.comb(n, k) / 2**n
        k += 1
    return f"{v[k - 1]:+.1f} .. {v[n - k]:+.1f}" if k else "-"
def summary(values):
    v = sorted(values)
    return f"{statistics.median(v):+7.1f} ({ci90(v)})"
print(f"{sys.argv[2]} iterations per run, {len(diffs['a'])} rounds; the bare loop, medians in us per "
      "iteration: " + ", ".join(f"{name} {statistics.median(b[i] for b in bare):.1f}"
                               for i, (_, name) in enumerate(keys)))
print("us per iteration above the bare run just before it: median over the rounds (90% CI)")
print(f"{'row':<40}" + "".join(f"{name:>26}" for _, name in keys))
label_b = sys.argv[3].strip() or "forkprof run again"
rows = [("bare again (A/A)", diffs["control"]), (f"A: {sys.argv[4]}", diffs["a"]),
        (f"B: {label_b}", diffs["b"]),
        ("A less B, round by round", [[x - y for x, y in zip(a, b)]
                                      for a, b in zip(diffs["a"], diffs["b"])])]
for name, ds in rows:
    print(f"{name[:39]:<40}" + "".join(f"{summary(d[i] for d in ds):>26}" for i in range(len(keys))))
PY
