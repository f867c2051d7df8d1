#!/bin/sh
# forkprof with extra flags after its subcommand, and optionally a command in front of the
# traced one, for a bench option that takes a forkprof binary (`cargo xtask bench
# --above-floor N --before bench/forkprof-with.sh`): the flags come from FORKPROF_WITH
# (default: --ia32-syscalls always; set and empty: none), the command from FORKPROF_WRAP
# (put after the first `--`: `FORKPROF_WITH= FORKPROF_WRAP="taskset -c 0"` runs the traced
# command on CPU 0), the binary from FORKPROF (default: target/release/forkprof).
root=$(cd "$(dirname "$0")/.." && pwd)
sub=$1
shift
if [ -n "${FORKPROF_WRAP:-}" ]; then
  wrapped=
  for arg in "$@"; do
    shift
    set -- "$@" "$arg"
    if [ "$arg" = -- ] && [ -z "$wrapped" ]; then
      # shellcheck disable=SC2086
      set -- "$@" $FORKPROF_WRAP
      wrapped=1
    fi
  done
fi
# shellcheck disable=SC2086
exec "${FORKPROF:-$root/target/release/forkprof}" "$sub" ${FORKPROF_WITH---ia32-syscalls always} "$@"
