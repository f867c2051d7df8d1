#!/bin/sh
# forkprof with extra flags after its subcommand, for a bench option that takes a forkprof
# binary (`cargo xtask bench --above-floor N --before bench/forkprof-with.sh`): the flags
# come from FORKPROF_WITH (default: --ia32-syscalls always), the binary from FORKPROF (default:
# target/release/forkprof).
root=$(cd "$(dirname "$0")/.." && pwd)
sub=$1
shift
# shellcheck disable=SC2086
exec "${FORKPROF:-$root/target/release/forkprof}" "$sub" ${FORKPROF_WITH:---ia32-syscalls always} "$@"
