#!/bin/bash
# What forkprof costs a spawn, against another spawn in the same run (bench/spawn_pairs.c):
# the host's drift, which moves whole runs of the bench loop apart by 5-10%, cancels pair
# by pair. Each row is one run of PAIRS pairs of spawns of a dynamically linked no-op, A
# less B:
#   bare    two servers, neither traced (the A/A check of the two servers)
#   empty   server A inside `forkprof run` with FORKPROF_BENCH_EMPTY=1, B outside: the same
#           hooks fire for both, every program returning at entry (the A/A check under
#           forkprof)
#   traced  server A inside `forkprof run`, B outside: forkprof's work for a followed spawn,
#           above what its programs spend to leave an unfollowed one at their first checks
#   args    FORKPROF_BENCH_EMPTY=1: a spawn with no arguments against one with one
#           (`spawn_pairs args`), the A/A check of the burn row
#   burn    FORKPROF_BENCH_EMPTY=1 FORKPROF_BENCH_BURN=$BURN: the same, but the spawn with no
#           arguments runs a register-only loop of that many steps in its exec: what program
#           time costs a spawn (less the args row)
#   argv    FORKPROF_BENCH_EMPTY=1 FORKPROF_BENCH_ARGV_READ=1: the same, but the spawn with
#           no arguments has its argv read in its exec as the real programs read it: what
#           that read costs a spawn (less the args row), where bpf_stats counts its time
# the same three server rows in blocks (bench/spawn_pairs.c, BLOCK): BLOCK spawns of one
# server's, then BLOCK of the other's, so that what a followed spawn leaves behind for the
# spawn after it (caches, branch predictors) lands on followed spawns, as it does in a run
# of the bench loop, where in random order it lands on the unfollowed server's spawns three
# times in four (a pair's spawns are then up to 2 BLOCK - 1 apart, so drift cancels less):
#   bare-blocks, empty-blocks, traced-blocks
# and three controls of the `empty` row, which read about -2.5 instead of 0 on one Intel VM
# (BENCHMARKS.md, "A quiet hour on the eIBRS host"), not in the default ROWS:
#   wrapped server A under a shell that waits for it (`sh -c 'SERVER; :'`), nothing traced
#   sigdfl  server A with SIGINT and SIGQUIT at their defaults (a background job of this
#           script inherits them ignored; a `forkprof run` command does not), nothing traced
#   both    each server inside a `forkprof run` of its own, empty programs in both
# The two servers' own difference moves from run to run by a few microseconds (where each
# one sleeps and runs), so take the rows over several runs (REPEAT).
# Usage (root): [FORKPROF=path] [BURN=3300] [BLOCK=50] [REPEAT=3]
#   [ROWS="bare empty traced args burn argv"]
#   (ROWS may also name bare-blocks, empty-blocks, traced-blocks, wrapped, sigdfl and both)
#   bench/spawn-pairs.sh [PAIRS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
fp=${FORKPROF:-$root/target/release/forkprof}
pairs=${1:-3000}
block=${BLOCK:-50}
if [[ " ${ROWS:-} " == *-blocks\ * ]] && ! { [[ $block =~ ^[1-9][0-9]*$ ]] && ((block <= pairs)); }; then
  echo "spawn-pairs: BLOCK must be a whole number from 1 to PAIRS ($pairs), not '$block'" >&2
  exit 2
fi
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
gcc -O2 -o "$work/spawn_pairs" "$root/bench/spawn_pairs.c" -lm
gcc -O2 -o "$work/true_dyn" "$root/bench/true_dyn.c"
clean=(env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8)
sp=$work/spawn_pairs
fail() {
  echo "spawn-pairs: row $1 failed:" >&2
  cat "$work"/*.err >&2
  exit 1
}
# Server A (under forkprof run with the environment given, if any) and server B, on FIFOs,
# then the pairs; each server exits when the client closes its FIFO.
servers() { # NAME BLOCK [forkprof|plain|wrapped|sigdfl|both] [ENV...]
  local name=$1 block=$2 how=$3
  shift 3
  rm -f "$work"/req? "$work"/rep? "$work"/*.err
  mkfifo "$work/reqa" "$work/repa" "$work/reqb" "$work/repb"
  local serve_a=("$sp" serve "$work/true_dyn" "$work/reqa" "$work/repa")
  local serve_b=("$sp" serve "$work/true_dyn" "$work/reqb" "$work/repb")
  case $how in
    forkprof | both)
      "${clean[@]}" "$@" "$fp" run --report "$work/report.txt" -- "${serve_a[@]}" 2> "$work/a.err" & ;;
    wrapped) "${clean[@]}" sh -c '"$@"; :' sh "${serve_a[@]}" 2> "$work/a.err" & ;;
    sigdfl) "${clean[@]}" env --default-signal=INT,QUIT "${serve_a[@]}" 2> "$work/a.err" & ;;
    *) "${clean[@]}" "${serve_a[@]}" 2> "$work/a.err" & ;;
  esac
  local a=$!
  if [ "$how" = both ]; then
    "${clean[@]}" "$@" "$fp" run --report "$work/report-b.txt" -- "${serve_b[@]}" 2> "$work/b.err" &
  else
    "${clean[@]}" "${serve_b[@]}" 2> "$work/b.err" &
  fi
  local b=$!
  local out
  out=$("${clean[@]}" "$sp" servers "$pairs" "$work/reqa" "$work/repa" "$work/reqb" \
    "$work/repb" "$block" 2> "$work/client.err") || fail "$name"
  wait "$a" || fail "$name"
  wait "$b" || fail "$name"
  printf '%-13s %s\n' "$name" "$out"
}
args() { # NAME [ENV...]
  local name=$1 out
  shift
  out=$("${clean[@]}" FORKPROF_BENCH_EMPTY=1 "$@" "$fp" run --report "$work/report.txt" -- \
    "$sp" args "$pairs" "$work/true_dyn" 2> "$work/args.err") || fail "$name"
  printf '%-13s %s\n' "$name" "$(grep -m1 '^spawn_pairs:' <<< "$out")"
}
for _ in $(seq "${REPEAT:-3}"); do
for r in ${ROWS:-bare empty traced args burn argv}; do
  case $r in
    bare) servers bare 1 plain ;;
    empty) servers empty 1 forkprof FORKPROF_BENCH_EMPTY=1 ;;
    traced) servers traced 1 forkprof ;;
    bare-blocks) servers bare-blocks "$block" plain ;;
    empty-blocks) servers empty-blocks "$block" forkprof FORKPROF_BENCH_EMPTY=1 ;;
    traced-blocks) servers traced-blocks "$block" forkprof ;;
    wrapped) servers wrapped 1 wrapped ;;
    sigdfl) servers sigdfl 1 sigdfl ;;
    both) servers both 1 both FORKPROF_BENCH_EMPTY=1 ;;
    args) args args ;;
    burn) args burn FORKPROF_BENCH_BURN="${BURN:-3300}" ;;
    argv) args argv FORKPROF_BENCH_ARGV_READ=1 ;;
    *)
      echo "spawn-pairs: no row $r (rows: bare empty traced args burn argv bare-blocks" \
        "empty-blocks traced-blocks wrapped sigdfl both)" >&2
      exit 2
      ;;
  esac
done
done
