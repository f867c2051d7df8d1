# Sourced by the bench scripts that run the fork+exec loop themselves, with $root set to the
# repository: sets fp (FORKPROF, default target/release/forkprof), loop and true_dyn (built
# by `cargo xtask bench --only control --pairs 1`). `loop_inputs NAME [WHY]` exits 2 with a
# message naming the script unless each of the three is there and this is root (WHY says
# what root is for).
fp=${FORKPROF:-$root/target/release/forkprof}
loop=$root/target/bench/spawn_loop
true_dyn=$root/target/bench/true_dyn
loop_inputs() {
  local name=$1 why=${2:-} f
  for f in "$fp" "$loop" "$true_dyn"; do
    [ -x "$f" ] || { echo "$name: $f is missing (build it first)" >&2; exit 2; }
  done
  [ "$(id -u)" = 0 ] || { echo "$name: needs root${why:+ ($why)}" >&2; exit 2; }
}
