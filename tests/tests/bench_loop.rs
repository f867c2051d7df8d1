//! The bench's workload, `bench/spawn_loop.c`: what it reports about the tracer's own CPU
//! (SPAWN_LOOP_TRACER) and about its own CPU and its children's, each checked against a
//! process whose CPU use is known; and `bench/spawn_pairs.c`, which times two kinds of spawn
//! against each other in one run. No root needed, but for the tests of the burn and argv-read
//! switches it serves.
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use forkprof_tests::{gcc, tempdir};

/// The bench's program `name` (bench/NAME.c), built with warnings as errors into `dir`.
fn build_bench(dir: &Path, name: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../bench/{name}.c"));
    let src = src.to_str().unwrap();
    gcc(
        dir,
        &["-O2", "-Wall", "-Wextra", "-Werror", "-o", name, src, "-lm"],
    );
    dir.join(name)
}

/// spawn_loop, built from the bench's source into a fresh directory.
fn spawn_loop() -> (PathBuf, PathBuf) {
    let dir = tempdir();
    let bin = build_bench(&dir, "spawn_loop");
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

#[test]
fn the_loops_cpu_time_is_its_own_and_its_childrens() {
    let (dir, bin) = spawn_loop();
    // The spinner below, which spawn_loop runs without arguments: 2 ms of CPU each.
    std::fs::write(dir.join("spin.c"), SPIN_WITHOUT_ARGS).unwrap();
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

/// A program that spins 2 ms of CPU from the start of main when it is given no arguments,
/// and returns at once when it is given any, or when it is built with NOSPIN defined.
/// Built with KIND defined ('a' or 'b'), it spins instead when the program run before it was
/// of its own kind, as the file named by SPAWN_PAIRS_TEST_LAST says (NOSPIN: never), and then
/// writes its kind there.
const SPIN_WITHOUT_ARGS: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static long long cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
static void spin(void)
{
#ifndef NOSPIN
	long long start = cpu_ns();
	while (cpu_ns() - start < 2000000)
		;
#endif
}
#ifndef KIND
int main(int argc, char **argv)
{
	(void)argv;
	if (argc == 1)
		spin();
	return 0;
}
#else
int main(void)
{
	const char *path = getenv("SPAWN_PAIRS_TEST_LAST");
	if (!path)
		return 3;
	FILE *f = fopen(path, "r");
	int last = f ? fgetc(f) : EOF;
	if (f)
		fclose(f);
	if (last == KIND)
		spin();
	f = fopen(path, "w");
	if (!f || fputc(KIND, f) == EOF || fclose(f) != 0)
		return 4;
	return 0;
}
#endif
"#;

/// bench/spawn_pairs.c and the spinner above (also built with NOSPIN, as `nospin`), built
/// into a fresh directory.
fn spawn_pairs() -> (PathBuf, PathBuf, PathBuf) {
    let dir = tempdir();
    let bin = build_bench(&dir, "spawn_pairs");
    std::fs::write(dir.join("spin.c"), SPIN_WITHOUT_ARGS).unwrap();
    gcc(&dir, &["-O2", "-o", "spin", "spin.c"]);
    gcc(&dir, &["-O2", "-DNOSPIN", "-o", "nospin", "spin.c"]);
    let spin = dir.join("spin");
    (dir, bin, spin)
}

/// The pairs' differences, A less B: the medians of wall and CPU time, in microseconds.
fn pair_medians(out: &std::process::Output) -> (f64, f64) {
    assert!(out.status.success(), "{out:?}");
    let line = String::from_utf8_lossy(&out.stdout).into_owned();
    (
        field(&line, "wall_us=").expect(&line),
        field(&line, "cpu_us=").expect(&line),
    )
}

/// How many pairs the spawn_pairs tests time. One spawn of a program that does nothing
/// varies by hundreds of microseconds (migrations, the other tests' processes): at 20 pairs
/// the median difference of two servers' spawns moved by ±400 µs from run to run, and a CI
/// run saw 1692 µs for the 2 ms spin. At 200 pairs its 90% interval is about ±30 µs, so the
/// 100 µs margin below the spin is more than three times that, for 0.8 s of spawning.
const PAIRS: &str = "200";

#[test]
fn spawn_pairs_args_times_a_spawn_without_arguments_less_one_with() {
    let (dir, bin, spin) = spawn_pairs();
    let out = Command::new(&bin)
        .args(["args", PAIRS, spin.to_str().unwrap()])
        .output()
        .unwrap();
    // A (no arguments) spins 2 ms more than B, whose exec and start-up cost the same but for
    // noise (see PAIRS); rusage truncates to a microsecond. The wall
    // time's difference is at least the spin, and more when the tests beside this one take
    // the CPU from the spinner.
    let (wall, cpu) = pair_medians(&out);
    assert!((1900.0..2500.0).contains(&cpu) && wall >= 1900.0, "{out:?}");
    // Bad usage is exit status 2, with the usage on stderr.
    let bad = Command::new(&bin)
        .args(["args", "5", "x"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    let _ = std::fs::remove_dir_all(dir);
}

/// `spawn_pairs servers PAIRS ... [BLOCK]` against two servers in `dir`, A spawning
/// `program_a` and B `program_b`, both with `env` set if given; the client's output, once
/// both servers have returned (each does when the client closes its FIFO).
fn servers_pairs(
    dir: &Path,
    bin: &Path,
    (program_a, program_b): (&Path, &Path),
    env: Option<(&str, &Path)>,
    block: Option<&str>,
) -> std::process::Output {
    let fifo = |name: &str| {
        let p = dir.join(name);
        let _ = std::fs::remove_file(&p);
        let ok = Command::new("mkfifo").arg(&p).status().unwrap().success();
        assert!(ok, "mkfifo {}", p.display());
        p.to_str().unwrap().to_string()
    };
    let (req_a, rep_a, req_b, rep_b) = (fifo("reqa"), fifo("repa"), fifo("reqb"), fifo("repb"));
    let serve = |program: &Path, req: &str, rep: &str| {
        let mut c = Command::new(bin);
        c.arg("serve").arg(program).args([req, rep]);
        if let Some((key, value)) = env {
            c.env(key, value);
        }
        Spinner(c.spawn().unwrap())
    };
    let mut a = serve(program_a, &req_a, &rep_a);
    let mut b = serve(program_b, &req_b, &rep_b);
    let out = Command::new(bin)
        .args(["servers", PAIRS, &req_a, &rep_a, &req_b, &rep_b])
        .args(block)
        .output()
        .unwrap();
    // A client that failed may not have opened the FIFOs, and its servers would wait for it
    // forever: they are killed on drop instead.
    if !out.status.success() {
        return out;
    }
    for s in [&mut a, &mut b] {
        assert!(s.0.wait().unwrap().success(), "a server failed: {out:?}");
    }
    out
}

#[test]
fn spawn_pairs_servers_times_server_as_spawns_less_server_bs() {
    let (dir, bin, spin) = spawn_pairs();
    // Server A spawns the spinner, which spins 2 ms; B the build that does not.
    let out = servers_pairs(&dir, &bin, (&spin, &dir.join("nospin")), None, None);
    // The two builds' start-up costs the same but for noise (see PAIRS).
    let (wall, cpu) = pair_medians(&out);
    assert!((1900.0..2500.0).contains(&cpu) && wall >= 1900.0, "{out:?}");
    let _ = std::fs::remove_dir_all(dir);
}

/// In blocks, a spawn follows one of its own server's, which random order gives it only a
/// quarter of the time: a program that spins only after its own kind shows the difference.
#[test]
fn spawn_pairs_blocks_put_each_spawn_after_its_own_servers() {
    let (dir, bin, _) = spawn_pairs();
    // The spinner built to spin after its own kind (A), and to never spin (B).
    gcc(&dir, &["-O2", "-DKIND='a'", "-o", "after_a", "spin.c"]);
    gcc(
        &dir,
        &["-O2", "-DKIND='b'", "-DNOSPIN", "-o", "after_b", "spin.c"],
    );
    let programs = (&dir.join("after_a") as &Path, &dir.join("after_b") as &Path);
    let last = dir.join("last");
    let env = Some(("SPAWN_PAIRS_TEST_LAST", last.as_path()));
    // Blocks of 30 (the last one short: 200 pairs are six blocks and 20): all but about one A
    // spawn in 30 follow an A, so the median pair spins. By CPU time only: in blocks, a
    // pair's two spawns are up to 30 spawns apart, so its wall times are less alike.
    let out = servers_pairs(&dir, &bin, programs, env, Some("30"));
    let line = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(line.contains(" block=30 "), "{out:?}");
    let (_, cpu) = pair_medians(&out);
    assert!((1900.0..2500.0).contains(&cpu), "{out:?}");
    // In random order (no BLOCK, or 1), an A spawn follows an A one only when it comes first
    // in its pair and the pair before ended with an A: a quarter of the time, so the median
    // pair does not spin.
    for block in [None, Some("1")] {
        let out = servers_pairs(&dir, &bin, programs, env, block);
        let line = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(line.contains(" block=1 "), "{out:?}");
        let (_, cpu) = pair_medians(&out);
        assert!(cpu < 1000.0, "{out:?}");
    }
    // A block of none, or of more spawns than the pairs, is bad usage: exit status 2.
    for bad in ["0", "201", "x"] {
        let out = Command::new(&bin)
            .args(["servers", PAIRS, "r", "r", "r", "r", bad])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "BLOCK {bad}: {out:?}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A benchmark switch that only the empty programs take (`var=value`) is refused without
/// them, and forkprof says why.
fn refused_without_empty_programs(var: &str, value: &str) {
    let refused = Command::new(forkprof_tests::forkprof())
        .args(["run", "--", "/bin/true"])
        .env(var, value)
        .output()
        .unwrap();
    assert!(!refused.status.success(), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("needs FORKPROF_BENCH_EMPTY=1"),
        "{refused:?}"
    );
}

/// `FORKPROF_BENCH_BURN`: the empty exec program spins at each exec without arguments, and
/// only there. 50,000 steps (the most it takes: every kernel's verifier follows them) of a
/// chain of 64-bit multiplications (each waits on the last, 3 cycles or more on any x86-64)
/// take 25 us or more at 6 GHz; a spawn with an argument costs a microsecond or two more
/// than one without, and the median of 300 pairs moves by a few microseconds (about ±5 at
/// 200 pairs here), so 12 us is a bound that holds either way, and that a burn at every
/// exec, or at none, fails.
#[test]
fn a_bench_burn_spins_only_in_execs_without_arguments() {
    forkprof_tests::needs_root!();
    let (dir, bin, _) = spawn_pairs();
    // A program that returns at once, with or without arguments (GNU true does not: given
    // one, it sets up its locale to look for --help).
    let out = Command::new(forkprof_tests::forkprof())
        .args(["run", "--report"])
        .arg(dir.join("report.txt"))
        .arg("--")
        .arg(&bin)
        .arg("args")
        .arg("300")
        .arg(dir.join("nospin"))
        .env("FORKPROF_BENCH_EMPTY", "1")
        .env("FORKPROF_BENCH_BURN", "50000")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("FORKPROF_BENCH_BURN=50000"), "{stderr}");
    let (wall, cpu) = pair_medians(&out);
    assert!(wall >= 12.0 && cpu >= 12.0, "{out:?}");
    refused_without_empty_programs("FORKPROF_BENCH_BURN", "50000");
    let _ = std::fs::remove_dir_all(dir);
}

/// `forkprof run` of `sh -c script args...` (the report to `dir`/report.txt, stderr piped),
/// with `env` added, once the script has created `dir`/ready (up to 60 s); whether it did.
fn run_until_ready(
    dir: &Path,
    script: &str,
    args: &[&std::ffi::OsStr],
    env: &[(&str, &str)],
) -> (std::process::Child, bool) {
    let agent = Command::new(forkprof_tests::forkprof())
        .args(["run", "--report"])
        .arg(dir.join("report.txt"))
        .args(["--", "sh", "-c", script])
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ready = dir.join("ready");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !ready.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    (agent, ready.exists())
}

/// `FORKPROF_BENCH_ARGV_READ`: the empty exec program reads argv, as the real one does, at
/// each exec without arguments and at no other.
#[test]
fn a_bench_argv_read_reads_argv_only_in_execs_without_arguments() {
    forkprof_tests::needs_root!();
    let (dir, bin, _) = spawn_pairs();
    // The pairs (execs of nospin without an argument and with one), then, until the test has
    // read the buffers, execs with an argument (`sleep 0.05`): had those been read too, the
    // buffer of a CPU that ran one would hold two strings.
    let script = r#""$0" args 100 "$1" > "$2/pairs.out" && touch "$2/ready" &&
        while [ ! -e "$2/done" ]; do sleep 0.05; done"#;
    let (agent, ready) = run_until_ready(
        &dir,
        script,
        &[
            bin.as_os_str(),
            dir.join("nospin").as_os_str(),
            dir.as_os_str(),
        ],
        &[
            ("FORKPROF_BENCH_EMPTY", "1"),
            ("FORKPROF_BENCH_ARGV_READ", "1"),
        ],
    );
    // A few of the loop's execs with an argument.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let buffers = forkprof_tests::map_of(agent.id(), "BENCH_ARGV")
        .and_then(|id| forkprof_tests::per_cpu_values(&id));
    std::fs::write(dir.join("done"), "").unwrap();
    let out = agent.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(ready && out.status.success(), "{out:?}");
    assert!(stderr.contains("FORKPROF_BENCH_ARGV_READ=1"), "{stderr}");
    // Each CPU's last read: its length (a u64), then its bytes. Only execs without
    // arguments are read (the pairs' nospin, or another process's on this machine): one
    // string each, with its NUL.
    let buffers = buffers.expect("the agent's BENCH_ARGV map, through bpftool");
    let reads: Vec<&[u8]> = buffers
        .iter()
        .map(|b| {
            let len = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
            &b[8..8 + len]
        })
        .filter(|r| !r.is_empty())
        .collect();
    assert!(!reads.is_empty(), "no argv was read: {buffers:?}");
    for read in reads {
        let nuls = read.iter().filter(|&&b| b == 0).count();
        assert!(
            nuls == 1 && read.last() == Some(&0),
            "an argv of more than one string was read: {:?}",
            String::from_utf8_lossy(read)
        );
    }
    refused_without_empty_programs("FORKPROF_BENCH_ARGV_READ", "1");
    let _ = std::fs::remove_dir_all(dir);
}

/// The programs on the hooks that fire for every task's user page faults and mmap-lock
/// events turn a hit away in a short function of their own, and leave the rest to a BPF
/// subprogram, which the JIT compiles into an image apart. An early return jumps to the
/// epilogue at the end of the caller's image, so a long image that the kernel happens to
/// place across a 4 KiB page runs two pages on every hit (about 7 ns more per hit on the
/// Intel VM of BENCHMARKS.md, "A hot program's image across a page"). A hot handler inlined
/// back into its program fails this (`mmap_lock_acquired` had 79 instructions and no
/// subprogram before).
#[test]
fn the_hot_programs_turn_hits_away_in_a_short_function_of_their_own() {
    forkprof_tests::needs_root!();
    let dir = tempdir();
    let script = r#"touch "$0/ready" && while [ ! -e "$0/done" ]; do sleep 0.05; done"#;
    let (agent, ready) = run_until_ready(&dir, script, &[dir.as_os_str()], &[]);
    let attached = forkprof_tests::attached_tracepoints(agent.id());
    let agents = forkprof_tests::programs_of(agent.id());
    let hot: Vec<(String, usize, bool)> = forkprof_tests::forkprof_program_names()
        .into_iter()
        .filter(|(id, name)| {
            agents.contains(id)
                && (name.starts_with("forkprof_mmap_lock_") || name == "forkprof_page_fault_user")
        })
        .filter_map(|(id, name)| {
            let (own, calls) = forkprof_tests::program_own_length(id)?;
            Some((name, own, calls))
        })
        .collect();
    std::fs::write(dir.join("done"), "").unwrap();
    let out = agent.wait_with_output().unwrap();
    assert!(ready && out.status.success(), "{out:?}");
    // Each hot tracepoint attached has its program among those checked. (Where do_wp_page
    // and dup_mmap can be hooked, neither is attached, and there is nothing to check.)
    for (tracepoint, program) in [
        ("page_fault_user", "forkprof_page_fault_user"),
        ("mmap_lock_acquire_returned", "forkprof_mmap_lock_acquired"),
        ("mmap_lock_released", "forkprof_mmap_lock_released"),
    ] {
        assert!(
            !attached.iter().any(|t| t == tracepoint)
                || hot.iter().any(|(name, _, _)| name.starts_with(program)),
            "{tracepoint} is attached, but no {program} program was read: {hot:?}"
        );
    }
    if hot.is_empty() {
        eprintln!("no hot tracepoint attached on this kernel ({attached:?}): nothing to check");
    }
    for (name, own, calls) in &hot {
        assert!(
            *own <= 24 && *calls,
            "{name}: {own} instructions of its own, subprogram called: {calls}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}
