//! The bench's workload, `bench/spawn_loop.c`: what it reports about the tracer's own CPU
//! (SPAWN_LOOP_TRACER) and about its own CPU and its children's, each checked against a
//! process whose CPU use is known. No root needed.
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use forkprof_tests::{gcc, tempdir};

/// spawn_loop, built from the bench's source into a fresh directory.
fn spawn_loop() -> (PathBuf, PathBuf) {
    let dir = tempdir();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/spawn_loop.c");
    gcc(
        &dir,
        &[
            "-O2",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-o",
            "spawn_loop",
            src.to_str().unwrap(),
        ],
    );
    let bin = dir.join("spawn_loop");
    (dir, bin)
}

/// A field of the loop's result line.
fn field(line: &str, key: &str) -> Option<f64> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key))
        .map(|v| v.parse().unwrap())
}

fn run(bin: &Path, tracer: Option<&str>, iterations: &str) -> std::process::Output {
    let mut c = Command::new(bin);
    c.args([iterations, "/bin/true"]);
    if let Some(t) = tracer {
        c.env("SPAWN_LOOP_TRACER", t);
    }
    c.output().unwrap()
}

/// SIGKILLs the spinner when dropped, so that a failed test leaves nothing running.
struct Spinner(std::process::Child);

impl Drop for Spinner {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_tracers_cpu_is_its_process_clock_over_the_loop() {
    let (dir, bin) = spawn_loop();
    // Without the variable, no tracer field.
    let out = run(&bin, None, "20");
    assert!(out.status.success());
    let line = String::from_utf8(out.stdout).unwrap();
    assert!(field(&line, "us_per_iter=").is_some(), "{line}");
    assert_eq!(field(&line, "tracer_cpu_us_per_iter="), None, "{line}");

    // A process that spins all the time it runs: over the loop it uses at most the loop's
    // wall time (one thread), and on a machine that is not starved, a good part of it.
    let spinner = Spinner(
        Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = spinner.0.id().to_string();
    let out = run(&bin, Some(&pid), "300");
    assert!(out.status.success(), "{:?}", out);
    let line = String::from_utf8(out.stdout).unwrap();
    let wall = field(&line, "us_per_iter=").unwrap();
    let tracer = field(&line, "tracer_cpu_us_per_iter=").unwrap();
    // 2% above for the clocks' reads around the loop, which come just before and after it.
    assert!(
        tracer <= wall * 1.02 && tracer >= wall * 0.2,
        "a spinning tracer used {tracer} us per iteration of {wall}: {line}"
    );
    drop(spinner);

    // By name: the nearest ancestor with that comm, here this test (its parent), which
    // only waits meanwhile.
    let me = std::fs::read_to_string("/proc/self/comm").unwrap();
    let out = run(&bin, Some(me.trim()), "20");
    assert!(out.status.success(), "{:?}", out);
    let line = String::from_utf8(out.stdout).unwrap();
    let waiting = field(&line, "tracer_cpu_us_per_iter=").unwrap();
    let wall = field(&line, "us_per_iter=").unwrap();
    assert!(
        waiting < wall * 0.5,
        "a waiting parent used {waiting} of {wall}: {line}"
    );

    // A name that no ancestor has, or a pid that is not running: a clear error, exit 2.
    for missing in ["no-such-tracer", "999999999"] {
        let out = run(&bin, Some(missing), "1");
        assert_eq!(out.status.code(), Some(2), "{missing}: {out:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains("no process SPAWN_LOOP_TRACER="), "{err}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A child that spins until it has used 2 ms of CPU, then exits 0.
const SPIN_2MS: &str = r#"
#include <time.h>
int main(void)
{
	struct timespec ts;
	do
		clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	while (ts.tv_sec == 0 && ts.tv_nsec < 2000000);
	return 0;
}
"#;

#[test]
fn the_loops_cpu_time_is_its_own_and_its_childrens() {
    let (dir, bin) = spawn_loop();
    std::fs::write(dir.join("spin.c"), SPIN_2MS).unwrap();
    gcc(&dir, &["-O2", "-o", "spin", "spin.c"]);
    let out = Command::new(&bin)
        .args(["20", dir.join("spin").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let line = String::from_utf8(out.stdout).unwrap();
    let wall = field(&line, "us_per_iter=").unwrap();
    let cpu = field(&line, "cpu_us_per_iter=").unwrap();
    let own = field(&line, "loop_cpu_us_per_iter=").unwrap();
    let children = field(&line, "children_cpu_us_per_iter=").unwrap();
    // The parts make the whole (each printed to 0.001 us).
    assert!((own + children - cpu).abs() < 0.005, "{line}");
    // Each child used at least its 2 ms of spinning (getrusage truncates to a microsecond),
    // and the loop itself only forks and waits.
    assert!(children >= 1990.0, "children: {line}");
    assert!(own < children / 4.0, "the loop's own: {line}");
    // The loop waits for each child, so the two seldom run at once: the CPU time is at most
    // about the wall time (a parent's return from fork may overlap its child's start).
    assert!(cpu <= wall * 1.05, "more CPU than wall time: {line}");
    let _ = std::fs::remove_dir_all(dir);
}
