# Sourced by the bench scripts. `start_agent READY ERR CMD...` starts CMD (a forkprof
# agent) in the background with its stderr to the file ERR, and returns once a line of it
# starts with READY; the agent's pid is then in $agent. If the agent exits first, or says
# nothing for 30 s, it shows ERR and exits 1.
#
# ERR is emptied first. The background child truncates it only once it runs, and a script
# reuses the file from run to run: a poll before the truncation would find the last run's
# ready line, and the workload would start while the agent still attaches its programs or
# reads /proc (about 64,000 reads with 10,000 idle processes, each a syscall that passes
# the programs being measured). bench/busy-host.sh, whose bash holds 10,000 jobs and forks
# slowly, met that in about half its measurements (BENCHMARKS.md, "The benchmarks' ready
# check").
#
# It refuses to start one while forkprof programs stay loaded (another agent, left
# running): the scripts sum bpf_stats over every program named forkprof_*, and another
# agent's programs also slow the loops down. The last run's agent has exited by then, but
# the kernel frees its programs a moment later, so it waits up to 10 s for them to go.
start_agent() {
  local ready=$1 err=$2 waited=0
  shift 2
  while bpftool prog show 2>/dev/null | grep -q ' name forkprof_'; do
    if [ $waited -ge 200 ]; then
      echo "forkprof programs are still loaded (another agent?): stop it first" >&2
      exit 1
    fi
    sleep 0.05; waited=$((waited + 1))
  done
  waited=0
  : > "$err"
  "$@" 2> "$err" & agent=$!
  until grep -q "^$ready" "$err"; do
    kill -0 $agent 2>/dev/null && [ $waited -lt 600 ] || { cat "$err" >&2; exit 1; }
    sleep 0.05; waited=$((waited + 1))
  done
}
