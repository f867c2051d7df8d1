#!/bin/bash
# Where the kernel put the JIT images of forkprof's hot programs (the `mmap_lock` pair and
# `page_fault_user`, whose hooks fire for every task) and of the subprograms they call, and
# what each hot program spent per hit. An image that crosses a 4 KiB page costs every hit
# where the programs' pack is mapped with 4 KiB pages (docs/kernel-findings.md, "A hot
# program's image across a page costs every hit"): run this before comparing two builds'
# hot rows. Each invocation starts an agent (`run` around the loop, or `monitor` beside it),
# runs the fork+exec loop, and prints one line per image: its offset in its page, its span
# to the next symbol in /proc/kallsyms, and "crosses" where that span crosses a page (a
# caller's span is its image, its subprogram following it; a subprogram's may end in
# padding), then each hot program's ns per hit (bpf_stats, over its whole life).
# Usage (root, after `cargo xtask bench --only control --pairs 1` has built the loop):
#   [N=3] [MODE=run|monitor] [FORKPROF=path/to/forkprof] bench/placement.sh [ITERATIONS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/bench/start-agent.sh"
. "$root/bench/loop-inputs.sh"
n=${1:-2000}
mode=${MODE:-run}
loop_inputs placement "kallsyms addresses, bpf_stats"
case $mode in run|monitor) ;; *) echo "placement: MODE is run or monitor" >&2; exit 2 ;; esac
work=$(mktemp -d)
stats_was=$(sysctl -n kernel.bpf_stats_enabled)
trap 'kill $(jobs -p) 2>/dev/null || true; sysctl -q kernel.bpf_stats_enabled="$stats_was"; rm -rf "$work"' EXIT
sysctl -q kernel.bpf_stats_enabled=1

# The symbols, sorted by address (an image ends where the next symbol starts), and every
# program's stats. Exported, for the command that `run` traces.
snapshot() {
  sort /proc/kallsyms > "$work/syms"
  bpftool prog show -j > "$work/progs.json"
}
export -f snapshot
export work

for i in $(seq "${N:-3}"); do
  if [ "$mode" = run ]; then
    # The loop inside `run`, and the snapshot too, while its programs are still loaded.
    "$fp" run -- bash -c '"$0" "$1" "$2" >/dev/null && snapshot' "$loop" "$n" "$true_dyn" \
      >/dev/null 2>"$work/agent.err" || { cat "$work/agent.err" >&2; exit 1; }
  else
    start_agent 'forkprof: serving metrics' "$work/agent.err" "$fp" monitor --listen 127.0.0.1:0
    "$loop" "$n" "$true_dyn" >/dev/null
    snapshot
    kill -INT "$agent"; wait "$agent" || true
  fi
  python3 - "$work/syms" "$work/progs.json" "$i" <<'PY'
import json, re, sys
syms_path, progs_path, run = sys.argv[1], sys.argv[2], sys.argv[3]
hot = re.compile(r"^bpf_prog_[0-9a-f]+_(forkprof_(mmap_lock_acquired|mmap_lock_released|page_fault_user)|write_lock_acquired|write_lock_released|write_fault_in_window)$")
rows = [line.split() for line in open(syms_path)]
out = []
for k, row in enumerate(rows):
    if len(row) < 3 or not hot.match(row[2]):
        continue
    start = int(row[0], 16)
    end = int(rows[k + 1][0], 16) if k + 1 < len(rows) else start
    size = end - start
    crosses = start // 4096 != (start + max(size, 1) - 1) // 4096
    name = hot.match(row[2]).group(1)
    out.append(f"  {name:34} at {start & 0xfff:#05x} {size:5d} bytes to the next{'  crosses' if crosses else ''}")
print(f"invocation {run}:")
print("\n".join(out) if out else "  no hot program loaded (kallsyms hides BPF symbols? see net.core.bpf_jit_kallsyms)")
for p in json.load(open(progs_path)):
    name = p.get("name", "")
    if re.fullmatch(r"forkprof_(mmap_lock_\w+|page_fault_user)", name) and p.get("run_cnt"):
        print(f"  {name:34} {p['run_time_ns'] / p['run_cnt']:6.1f} ns per hit ({p['run_cnt']} hits)")
PY
done
