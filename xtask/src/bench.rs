//! `cargo xtask bench`: forkprof's overhead on a fork+exec loop, side by side with peers.
//!
//! The workload is `bench/spawn_loop.c`: fork + execl of a dynamically linked
//! `int main(){return 0;}` (`bench/true_dyn.c`) + waitpid, N iterations. The loop times
//! itself with CLOCK_MONOTONIC and prints microseconds per iteration, so a tracer's own
//! start-up and tear-down are not in the number.
//!
//! Every tool (an A/A control that is the bare loop again, forkprof run, strace -f -c,
//! perf trace -s, bench/phases.bt under bpftrace) is run in pairs with a bare run just
//! before it (bare, tool, bare, tool, ...), and its overhead is the median of the per-pair
//! ratios, with a distribution-free 90% interval. Runs get a fixed minimal environment and
//! their own cgroup, so that the load of other processes can be measured and noisy pairs
//! run again. A tool that cannot run here is reported with the reason and left out; the
//! rest of the bench goes on. See BENCHMARKS.md.
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// fork+exec+wait iterations in each run of the loop.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    iterations: u32,
    /// Alternating (bare, tool) pairs per tool; overheads are medians of per-pair ratios.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    pairs: u32,
    /// Tools to compare with bare runs (comma-separated; default: all of them).
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Tool>,
    /// A run during which other processes kept more than this many CPUs busy (on average)
    /// is noisy: its pair is run again, up to --retries times, then kept and flagged.
    #[arg(long, default_value_t = 0.25)]
    max_background: f64,
    /// How many times a noisy pair is run again before it is kept anyway.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=10))]
    retries: u32,
    /// After the pairs, one more forkprof run with kernel.bpf_stats_enabled=1: the time each
    /// of its eBPF programs ran, per hit and per iteration (needs bpftool).
    #[arg(long)]
    bpf_stats: bool,
    /// Print the results as one JSON document on stdout (progress stays on stderr).
    #[arg(long)]
    json: bool,
    /// Use target/release/forkprof as it is instead of running `cargo build --release`.
    #[arg(long)]
    no_build: bool,
    /// Do not install missing packages (gcc, strace, linux-perf, bpftrace) with apt-get.
    #[arg(long)]
    no_install: bool,
}

/// The tools compared with bare runs, in the order of the table.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Tool {
    /// the bare loop again: an A/A control that shows the noise floor
    Control,
    /// `forkprof run` (default mode)
    Forkprof,
    /// `strace -f -c -o /dev/null`
    Strace,
    /// `perf trace -s -o /dev/null`
    Perf,
    /// `bpftrace bench/phases.bt`
    Bpftrace,
}

const ALL_TOOLS: [Tool; 5] = [
    Tool::Control,
    Tool::Forkprof,
    Tool::Strace,
    Tool::Perf,
    Tool::Bpftrace,
];

impl Tool {
    fn label(self) -> &'static str {
        match self {
            Tool::Control => "bare again (A/A)",
            Tool::Forkprof => "forkprof run",
            Tool::Strace => "strace -f -c",
            Tool::Perf => "perf trace -s",
            Tool::Bpftrace => "bpftrace phases.bt",
        }
    }

    /// The Debian package that provides the tool, if it is not built here.
    fn package(self) -> Option<&'static str> {
        match self {
            Tool::Control | Tool::Forkprof => None,
            Tool::Strace => Some("strace"),
            Tool::Perf => Some("linux-perf"),
            Tool::Bpftrace => Some("bpftrace"),
        }
    }
}

/// Paths of everything a run needs.
struct Paths {
    dir: PathBuf,
    spawn_loop: PathBuf,
    true_dyn: PathBuf,
    forkprof: PathBuf,
    phases_bt: PathBuf,
}

impl Paths {
    fn new() -> Self {
        let root = crate::root();
        let dir = root.join("target/bench");
        Paths {
            spawn_loop: dir.join("spawn_loop"),
            true_dyn: dir.join("true_dyn"),
            forkprof: root.join("target/release/forkprof"),
            phases_bt: root.join("bench/phases.bt"),
            dir,
        }
    }

    /// The command line of one run: the loop alone (`tool` None) or under a tool.
    fn command(&self, tool: Option<Tool>, iterations: u32) -> Result<Command> {
        let n = iterations.to_string();
        let mut cmd = match tool {
            None | Some(Tool::Control) => Command::new(&self.spawn_loop),
            Some(Tool::Forkprof) => {
                let mut c = Command::new(&self.forkprof);
                c.args(["run", "--json", "--report"])
                    .arg(self.dir.join("forkprof-report.json"))
                    .arg("--")
                    .arg(&self.spawn_loop);
                c
            }
            Some(Tool::Strace) => {
                let mut c = Command::new("strace");
                c.args(["-f", "-c", "-o", "/dev/null", "--"])
                    .arg(&self.spawn_loop);
                c
            }
            Some(Tool::Perf) => {
                let mut c = Command::new("perf");
                c.args(["trace", "-s", "-o", "/dev/null", "--"])
                    .arg(&self.spawn_loop);
                c
            }
            Some(Tool::Bpftrace) => {
                // bpftrace -c takes one string and splits it on spaces.
                let line = format!(
                    "{} {n} {}",
                    path_str(&self.spawn_loop)?,
                    path_str(&self.true_dyn)?
                );
                let mut c = Command::new("bpftrace");
                c.arg("-o")
                    .arg(self.dir.join("bpftrace-phases.txt"))
                    .arg(&self.phases_bt)
                    .arg("-c")
                    .arg(line);
                return Ok(c);
            }
        };
        cmd.arg(&n).arg(&self.true_dyn);
        Ok(cmd)
    }
}

/// Gives `cmd` a fixed, minimal environment: what the workload sees must not depend on who
/// runs the bench. `cargo run` sets LD_LIBRARY_PATH, for one, and then every exec'd binary
/// searches its directories first: more syscalls per spawn, which made strace's overhead
/// several times larger.
fn clean_env(cmd: &mut Command) {
    cmd.env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .env("LANG", "C.UTF-8");
    if let Some(home) = std::env::var_os("HOME") {
        cmd.env("HOME", home);
    }
}

/// A command line as a shell would show it (for messages).
fn shown(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

fn path_str(p: &Path) -> Result<&str> {
    match p.to_str() {
        Some(s) if !s.contains(char::is_whitespace) => Ok(s),
        _ => bail!(
            "{}: bpftrace -c cannot take a path with spaces or invalid UTF-8",
            p.display()
        ),
    }
}

/// One run of the loop.
#[derive(Clone, Copy)]
struct Sample {
    /// Microseconds per iteration, as the loop measured it.
    us: f64,
    /// CPUs kept busy by everything but this run (other processes, steal), averaged
    /// over the run: the noise it was measured under.
    background: f64,
}

/// The measurements of one row of the table.
struct Row {
    label: &'static str,
    /// Why the tool could not run, or stopped, if it did.
    unavailable: Option<String>,
    samples: Vec<Sample>,
    /// tool / bare of each pair (None for the bare row).
    ratios: Option<Vec<f64>>,
    /// Pairs kept although their background load stayed above --max-background.
    noisy_pairs: usize,
}

impl Row {
    fn us(&self) -> Vec<f64> {
        self.samples.iter().map(|s| s.us).collect()
    }

    fn background(&self) -> Vec<f64> {
        self.samples.iter().map(|s| s.background).collect()
    }
}

pub fn run(args: &BenchArgs) -> Result<()> {
    if !crate::is_root() {
        bail!(
            "the bench loads eBPF programs (forkprof, bpftrace, perf trace): \
             run `cargo xtask bench` as root"
        );
    }
    if !(args.max_background.is_finite() && args.max_background > 0.0) {
        bail!("--max-background must be a positive number of CPUs");
    }
    let tools: Vec<Tool> = if args.only.is_empty() {
        ALL_TOOLS.to_vec()
    } else {
        ALL_TOOLS
            .into_iter()
            .filter(|t| args.only.contains(t))
            .collect()
    };
    let paths = Paths::new();
    let mut unavailable: Vec<(Tool, String)> = Vec::new();

    ensure_packages(&tools, args.no_install, &mut unavailable)?;
    ensure_tracefs(&tools, &mut unavailable);
    if tools.contains(&Tool::Forkprof) && !args.no_build {
        crate::setup()?;
        crate::run(Command::new("cargo").current_dir(crate::root()).args([
            "build",
            "--release",
            "-p",
            "forkprof",
        ]))?;
    }
    compile_loop(&paths)?;
    let clock = Clock::new()?;

    // A short run of each: warms the page cache, and finds the tools that cannot run here.
    let probe_iterations = args.iterations.min(50);
    run_loop(&paths, &clock, None, probe_iterations).context("the bare loop does not run")?;
    let mut active = Vec::new();
    for &tool in &tools {
        if unavailable.iter().any(|(t, _)| *t == tool) {
            continue;
        }
        match run_loop(&paths, &clock, Some(tool), probe_iterations) {
            Ok(_) => active.push(tool),
            Err(e) => {
                let why = format!("{e:#}");
                eprintln!("xtask: bench: {} cannot run here: {why}", tool.label());
                unavailable.push((tool, why));
            }
        }
    }

    eprintln!(
        "xtask: bench: {} pairs of {} iterations, tools: {}",
        args.pairs,
        args.iterations,
        active
            .iter()
            .map(|t| t.label())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut bare = Row {
        label: "bare",
        unavailable: None,
        samples: Vec::new(),
        ratios: None,
        noisy_pairs: 0,
    };
    let mut rows: Vec<Row> = active
        .iter()
        .map(|t| Row {
            label: t.label(),
            unavailable: None,
            samples: Vec::new(),
            ratios: Some(Vec::new()),
            noisy_pairs: 0,
        })
        .collect();
    let started = Instant::now();
    for pair in 1..=args.pairs {
        let mut line = format!("xtask: bench: pair {pair}/{}:", args.pairs);
        for (&tool, row) in active.iter().zip(&mut rows) {
            if row.unavailable.is_some() {
                continue;
            }
            let mut attempt = 0;
            let (b, t) = loop {
                clock.wait_quiet(args.max_background);
                let b =
                    run_loop(&paths, &clock, None, args.iterations).context("a bare run failed")?;
                let t = match run_loop(&paths, &clock, Some(tool), args.iterations) {
                    Ok(t) => t,
                    Err(e) => break (b, Err(e)),
                };
                let background = b.background.max(t.background);
                if background > args.max_background && attempt < args.retries {
                    attempt += 1;
                    eprintln!(
                        "xtask: bench: pair {pair}, {}: {background:.2} CPUs busy elsewhere \
                         (over --max-background {}): running it again",
                        tool.label(),
                        args.max_background
                    );
                    continue;
                }
                break (b, Ok(t));
            };
            let t = match t {
                Ok(t) => t,
                Err(e) => {
                    let why = format!("failed in pair {pair}: {e:#}");
                    eprintln!("xtask: bench: {}: {why}", tool.label());
                    row.unavailable = Some(why);
                    continue;
                }
            };
            let ratio = t.us / b.us;
            if b.background.max(t.background) > args.max_background {
                row.noisy_pairs += 1;
            }
            bare.samples.push(b);
            row.samples.push(t);
            if let Some(r) = &mut row.ratios {
                r.push(ratio);
            }
            let _ = write!(
                line,
                "\n  bare {:.1} us (bg {:.2}) / {} {:.1} us (bg {:.2}): {}",
                b.us,
                b.background,
                tool.label(),
                t.us,
                t.background,
                pct(ratio)
            );
        }
        eprintln!("{line}");
    }
    eprintln!(
        "xtask: bench: measured in {:.0} s",
        started.elapsed().as_secs_f64()
    );

    let mut table_rows = vec![bare];
    let mut rows = rows.into_iter();
    for &tool in &tools {
        if active.contains(&tool) {
            table_rows.extend(rows.next());
            continue;
        }
        let why = unavailable
            .iter()
            .find(|(t, _)| *t == tool)
            .map_or_else(|| "not run".to_owned(), |(_, why)| why.clone());
        table_rows.push(Row {
            label: tool.label(),
            unavailable: Some(why),
            samples: Vec::new(),
            ratios: Some(Vec::new()),
            noisy_pairs: 0,
        });
    }
    let rows = table_rows;

    let stats = if args.bpf_stats && active.contains(&Tool::Forkprof) {
        match bpf_stats(&paths, args.iterations) {
            Ok(s) => Some(s),
            Err(e) => {
                eprintln!("xtask: bench: --bpf-stats: {e:#}");
                None
            }
        }
    } else {
        None
    };
    let bare_median = median(&rows[0].us());

    let machine = Machine::probe();
    let forkprof_check = if active.contains(&Tool::Forkprof) {
        forkprof_check(&paths)
    } else {
        None
    };
    if args.json {
        println!(
            "{}",
            json(
                args,
                &machine,
                &rows,
                forkprof_check.as_deref(),
                stats.as_deref()
            )
        );
    } else {
        print!(
            "{}",
            table(args, &machine, &rows, forkprof_check.as_deref())
        );
        if let Some(stats) = &stats {
            print!("{}", stats_table(stats, args.iterations, bare_median));
        }
    }
    Ok(())
}

/// Installs the missing packages the selected tools need. gcc is required; a peer whose
/// package cannot be installed is marked unavailable.
fn ensure_packages(
    tools: &[Tool],
    no_install: bool,
    unavailable: &mut Vec<(Tool, String)>,
) -> Result<()> {
    let installed = |p: &str| {
        crate::output(Command::new("dpkg-query").args(["-W", "-f=${Status}", p]))
            .contains("install ok installed")
    };
    let mut wanted = vec!["gcc"];
    wanted.extend(tools.iter().filter_map(|t| t.package()));
    let missing: Vec<&str> = wanted.into_iter().filter(|p| !installed(p)).collect();
    if !missing.is_empty() && !no_install {
        let updated = crate::run(Command::new("apt-get").args(["update", "-qq"]));
        if let Err(e) = updated {
            eprintln!("xtask: bench: apt-get update failed: {e:#}");
        }
        for p in &missing {
            // one at a time, so that a package this distribution lacks costs only its peer
            let result = crate::run(
                Command::new("apt-get")
                    .args(["install", "-y", "-qq", "--no-install-recommends", p])
                    .env("DEBIAN_FRONTEND", "noninteractive"),
            );
            if let Err(e) = result {
                eprintln!("xtask: bench: cannot install {p}: {e:#}");
            }
        }
    }
    if !installed("gcc") && Command::new("gcc").arg("--version").output().is_err() {
        bail!("gcc is needed to build the bench loop: apt-get install gcc");
    }
    for &tool in tools {
        if let Some(p) = tool.package()
            && !installed(p)
        {
            let why = if no_install {
                format!("package {p} is not installed (--no-install)")
            } else {
                format!("package {p} could not be installed")
            };
            eprintln!("xtask: bench: {}: {why}", tool.label());
            unavailable.push((tool, why));
        }
    }
    Ok(())
}

/// perf trace and bpftrace read tracepoint formats from tracefs, which a fresh machine may
/// not have mounted.
fn ensure_tracefs(tools: &[Tool], unavailable: &mut Vec<(Tool, String)>) {
    let needs = |t: &Tool| matches!(t, Tool::Perf | Tool::Bpftrace);
    if !tools.iter().any(needs) || Path::new("/sys/kernel/tracing/events").is_dir() {
        return;
    }
    let mounted =
        crate::run(Command::new("mount").args(["-t", "tracefs", "tracefs", "/sys/kernel/tracing"]));
    if let Err(e) = mounted {
        let why = format!("tracefs is not mounted and mounting it failed: {e:#}");
        for &tool in tools.iter().filter(|t| needs(t)) {
            eprintln!("xtask: bench: {}: {why}", tool.label());
            unavailable.push((tool, why.clone()));
        }
    }
}

fn compile_loop(paths: &Paths) -> Result<()> {
    fs::create_dir_all(&paths.dir)
        .with_context(|| format!("cannot create {}", paths.dir.display()))?;
    let src = crate::root().join("bench");
    crate::run(
        Command::new("gcc")
            .args(["-O2", "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(&paths.spawn_loop)
            .arg(src.join("spawn_loop.c")),
    )?;
    // dynamically linked on purpose: ld.so's start-up is part of what is measured
    crate::run(
        Command::new("gcc")
            .args(["-O2", "-o"])
            .arg(&paths.true_dyn)
            .arg(src.join("true_dyn.c")),
    )
}

/// Where the CPU time of the machine went: to find how busy other processes kept it
/// while a run was measured.
struct Clock {
    /// USER_HZ: the unit of /proc/stat and /proc/self/stat.
    ticks_per_s: f64,
    /// A cgroup v2 group every run is started in, so that its CPU time is known even when
    /// a tool does not reap the loop (perf trace does not). Without one, a run's CPU time
    /// is what this process's reaped descendants used.
    cgroup: Option<PathBuf>,
}

impl Clock {
    fn new() -> Result<Self> {
        let hz = crate::output(Command::new("getconf").arg("CLK_TCK"));
        let ticks_per_s = hz.trim().parse::<f64>().unwrap_or(100.0);
        let mut clock = Clock {
            ticks_per_s,
            cgroup: None,
        };
        clock.busy().context("cannot read /proc/stat")?;
        clock.ours().context("cannot read /proc/self/stat")?;
        clock.cgroup = make_cgroup();
        if clock.cgroup.is_none() {
            eprintln!(
                "xtask: bench: no cgroup v2 to run in: a tool that does not reap the loop \
                 will show its CPU time as background load"
            );
        }
        Ok(clock)
    }

    /// Seconds all CPUs spent busy (user, nice, system, irq, softirq) or stolen by the host.
    fn busy(&self) -> Option<f64> {
        let stat = fs::read_to_string("/proc/stat").ok()?;
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let v: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        // user nice system idle iowait irq softirq steal (guest time is inside user)
        let ticks: u64 = v
            .get(..8)?
            .iter()
            .enumerate()
            .filter(|(i, _)| !matches!(i, 3 | 4))
            .map(|(_, t)| t)
            .sum();
        Some(ticks as f64 / self.ticks_per_s)
    }

    /// Seconds of CPU used by this process and by the runs: the runs' cgroup if there is
    /// one, else every descendant this process has reaped.
    fn ours(&self) -> Option<f64> {
        let stat = fs::read_to_string("/proc/self/stat").ok()?;
        let fields: Vec<&str> = stat
            .get(stat.rfind(')')? + 1..)?
            .split_whitespace()
            .collect();
        // after "pid (comm)": state is field 3; utime, stime, cutime, cstime are 14..=17
        let ticks: Option<Vec<u64>> = fields
            .get(11..15)?
            .iter()
            .map(|f| f.parse::<u64>().ok())
            .collect();
        let ticks = ticks?;
        match &self.cgroup {
            None => Some(ticks.iter().sum::<u64>() as f64 / self.ticks_per_s),
            Some(dir) => {
                let own = (ticks[0] + ticks[1]) as f64 / self.ticks_per_s;
                let stat = fs::read_to_string(dir.join("cpu.stat")).ok()?;
                let usec: u64 = stat
                    .lines()
                    .find_map(|l| l.strip_prefix("usage_usec "))?
                    .trim()
                    .parse()
                    .ok()?;
                Some(own + usec as f64 / 1e6)
            }
        }
    }

    /// CPUs kept busy by others, on average, between two (busy, ours) readings.
    fn others(&self, before: (Option<f64>, Option<f64>), seconds: f64) -> Option<f64> {
        let (b0, o0) = (before.0?, before.1?);
        let (b1, o1) = (self.busy()?, self.ours()?);
        (seconds > 0.0).then(|| ((b1 - b0) - (o1 - o0)).max(0.0) / seconds)
    }

    /// `cmd`, started inside the runs' cgroup when there is one (its environment is not
    /// carried over: set it on the result).
    fn wrap(&self, cmd: Command) -> Command {
        let Some(dir) = &self.cgroup else {
            return cmd;
        };
        let mut sh = Command::new("/bin/sh");
        sh.args(["-c", "echo $$ > \"$1\" && shift && exec \"$@\"", "sh"])
            .arg(dir.join("cgroup.procs"))
            .arg(cmd.get_program())
            .args(cmd.get_args());
        sh
    }

    /// Waits (up to 20 s) for half a second in which other processes keep fewer than
    /// `max_background` CPUs busy, so that a pair does not start in the middle of a build.
    fn wait_quiet(&self, max_background: f64) {
        let window = Duration::from_millis(500);
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut said = false;
        while Instant::now() < deadline {
            let before = (self.busy(), self.ours());
            thread::sleep(window);
            let Some(cpus) = self.others(before, window.as_secs_f64()) else {
                return;
            };
            if cpus <= max_background {
                return;
            }
            if !said {
                eprintln!(
                    "xtask: bench: {cpus:.2} CPUs busy elsewhere: waiting (up to 20 s) \
                     for the machine to be quieter"
                );
                said = true;
            }
        }
    }
}

impl Drop for Clock {
    fn drop(&mut self) {
        if let Some(dir) = &self.cgroup {
            // fails only if a process is still inside; the empty group is harmless then
            let _ = fs::remove_dir(dir);
        }
    }
}

/// A fresh cgroup v2 group for the runs, if this machine has a writable cgroup2 mount.
fn make_cgroup() -> Option<PathBuf> {
    let mounts = fs::read_to_string("/proc/mounts").ok()?;
    let mount = mounts.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (_, dir, fstype) = (f.next()?, f.next()?, f.next()?);
        (fstype == "cgroup2").then(|| PathBuf::from(dir))
    })?;
    let dir = mount.join(format!("forkprof-bench-{}", std::process::id()));
    if !dir.is_dir() {
        fs::create_dir(&dir).ok()?;
    }
    let procs = dir.join("cgroup.procs");
    // what every run will do: a shell moves itself in, then execs the run
    let moved = Command::new("/bin/sh")
        .args(["-c", "echo $$ > \"$1\"", "sh"])
        .arg(&procs)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let usable = moved
        && fs::read_to_string(dir.join("cpu.stat"))
            .is_ok_and(|s| s.lines().any(|l| l.starts_with("usage_usec ")));
    if !usable {
        let _ = fs::remove_dir(&dir);
        return None;
    }
    Some(dir)
}

/// Runs the loop (under `tool`, if any): its microseconds per iteration and how busy the
/// rest of the machine was meanwhile.
fn run_loop(paths: &Paths, clock: &Clock, tool: Option<Tool>, iterations: u32) -> Result<Sample> {
    let out_path = paths.dir.join("run.stdout");
    let err_path = paths.dir.join("run.stderr");
    // Files, not pipes: nothing can block on a full pipe, and nothing reads while the loop runs.
    let stdout = fs::File::create(&out_path)
        .with_context(|| format!("cannot create {}", out_path.display()))?;
    let stderr = fs::File::create(&err_path)
        .with_context(|| format!("cannot create {}", err_path.display()))?;
    let inner = paths.command(tool, iterations)?;
    let shown = shown(&inner);
    let mut cmd = clock.wrap(inner);
    clean_env(&mut cmd);
    cmd.stdin(Stdio::null()).stdout(stdout).stderr(stderr);
    let before = (clock.busy(), clock.ours());
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start {shown}"))?;
    let limit = Duration::from_secs(60) + Duration::from_millis(20) * iterations;
    let status = loop {
        if let Some(status) = child.try_wait().context("waiting for the run")? {
            break status;
        }
        if started.elapsed() > limit {
            // best effort: the child may have exited in between
            let _ = child.kill();
            let _ = child.wait();
            bail!("{shown} ran past {} s and was killed", limit.as_secs());
        }
        thread::sleep(Duration::from_millis(50));
    };
    let background = clock
        .others(before, started.elapsed().as_secs_f64())
        .unwrap_or(0.0);
    let out = fs::read_to_string(&out_path).unwrap_or_default();
    let err = fs::read_to_string(&err_path).unwrap_or_default();
    if !status.success() {
        bail!("{shown} failed ({status}): {}", tail(&err));
    }
    let us = parse_us_per_iter(&out)
        .with_context(|| format!("{shown} printed no spawn_loop result: {}", tail(&err)))?;
    Ok(Sample { us, background })
}

/// How long one of forkprof's eBPF programs ran during one run of the loop.
#[derive(Debug, PartialEq)]
struct ProgStat {
    name: String,
    run_ns: u64,
    runs: u64,
}

/// One more forkprof run, with kernel.bpf_stats_enabled=1 and `bpftool prog show` run
/// inside the traced command right after the loop, while the programs are still loaded.
/// Only programs loaded after the run started count, so another forkprof loaded before
/// (a test, say) is left out.
fn bpf_stats(paths: &Paths, iterations: u32) -> Result<Vec<ProgStat>> {
    let sysctl = Path::new("/proc/sys/kernel/bpf_stats_enabled");
    let before = bpftool_progs(&crate::output(
        Command::new("bpftool").args(["prog", "show"]),
    ));
    let old = fs::read_to_string(sysctl).context("cannot read kernel.bpf_stats_enabled")?;
    fs::write(sysctl, "1").context("cannot set kernel.bpf_stats_enabled")?;
    let out = paths.dir.join("bpf-stats.txt");
    let mut cmd = Command::new(&paths.forkprof);
    cmd.args(["run", "--report"])
        .arg(paths.dir.join("forkprof-stats-report.txt"))
        .args([
            "--",
            "/bin/sh",
            "-c",
            "\"$0\" \"$1\" \"$2\" && bpftool prog show > \"$3\"",
        ])
        .arg(&paths.spawn_loop)
        .arg(iterations.to_string())
        .arg(&paths.true_dyn)
        .arg(&out)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    clean_env(&mut cmd);
    let result = cmd.status();
    // restore it whatever happened: it costs two clock reads per program run
    let restored = fs::write(sysctl, old.trim());
    let status = result.context("cannot start forkprof")?;
    restored.context("cannot restore kernel.bpf_stats_enabled")?;
    if !status.success() {
        bail!("forkprof run for the statistics failed: {status}");
    }
    let text =
        fs::read_to_string(&out).with_context(|| format!("bpftool wrote no {}", out.display()))?;
    let old_ids: Vec<u32> = before.iter().map(|(id, _)| *id).collect();
    let stats: Vec<ProgStat> = bpftool_progs(&text)
        .into_iter()
        .filter(|(id, p)| !old_ids.contains(id) && p.name.starts_with("forkprof"))
        .map(|(_, p)| p)
        .collect();
    if stats.is_empty() {
        bail!("bpftool showed no forkprof programs");
    }
    Ok(stats)
}

/// (id, statistics) of each program in `bpftool prog show`'s plain output, whose first
/// line per program reads `ID: TYPE  name NAME  tag ..  run_time_ns N run_cnt M`.
fn bpftool_progs(text: &str) -> Vec<(u32, ProgStat)> {
    text.lines()
        .filter_map(|line| {
            let (id, rest) = line.split_once(": ")?;
            let id = id.trim().parse().ok()?;
            let words: Vec<&str> = rest.split_whitespace().collect();
            let after = |key: &str| {
                let i = words.iter().position(|w| *w == key)?;
                words.get(i + 1).copied()
            };
            Some((
                id,
                ProgStat {
                    name: after("name")?.to_owned(),
                    run_ns: after("run_time_ns")
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0),
                    runs: after("run_cnt").and_then(|v| v.parse().ok()).unwrap_or(0),
                },
            ))
        })
        .collect()
}

fn stats_table(stats: &[ProgStat], iterations: u32, bare_us: Option<f64>) -> String {
    let n = f64::from(iterations);
    let mut sorted: Vec<&ProgStat> = stats.iter().collect();
    sorted.sort_by_key(|p| std::cmp::Reverse(p.run_ns));
    let width = sorted
        .iter()
        .map(|p| p.name.len())
        .max()
        .unwrap_or(0)
        .max(7);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nforkprof's eBPF programs, one more run of {iterations} iterations \
         with kernel.bpf_stats_enabled=1:\n"
    );
    let _ = writeln!(
        out,
        "{:<width$}  {:>10}  {:>7}  {:>8}",
        "program", "hits/iter", "ns/hit", "us/iter"
    );
    let _ = writeln!(out, "{}", "-".repeat(width + 33));
    let mut total_ns = 0;
    for p in sorted {
        total_ns += p.run_ns;
        let per_hit = if p.runs == 0 {
            0.0
        } else {
            p.run_ns as f64 / p.runs as f64
        };
        let _ = writeln!(
            out,
            "{:<width$}  {:>10.1}  {:>7.0}  {:>8.2}",
            p.name,
            p.runs as f64 / n,
            per_hit,
            p.run_ns as f64 / n / 1000.0
        );
    }
    let total_us = total_ns as f64 / n / 1000.0;
    let share = bare_us.map_or_else(String::new, |b| {
        format!(" ({:.1}% of the bare median)", total_us / b * 100.0)
    });
    let _ = writeln!(
        out,
        "{:<width$}  {:>10}  {:>7}  {:>8.2}{share}",
        "total", "", "", total_us
    );
    let _ = writeln!(
        out,
        "time inside the programs only (each hit also pays the tracepoint's own entry); \
         bpf_stats adds two clock reads to every hit"
    );
    out
}

/// The last non-empty lines of a tool's stderr, on one line, for error messages.
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let start = lines.len().saturating_sub(3);
    let joined = lines[start..].join(" | ");
    if joined.is_empty() {
        "(no output on stderr)".to_owned()
    } else {
        joined
    }
}

/// Finds `us_per_iter=U` in spawn_loop's result line.
fn parse_us_per_iter(stdout: &str) -> Option<f64> {
    stdout
        .lines()
        .filter(|l| l.starts_with("spawn_loop:"))
        .flat_map(str::split_whitespace)
        .find_map(|w| w.strip_prefix("us_per_iter="))
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v > 0.0)
}

/// A line on what forkprof saw in its last run, from its JSON report: it must have
/// traced every process and lost nothing, or its overhead is not comparable.
fn forkprof_check(paths: &Paths) -> Option<String> {
    let text = fs::read_to_string(paths.dir.join("forkprof-report.json")).ok()?;
    let processes = json_u64(&text, "processes")?;
    let execs = json_u64(&text, "execs")?;
    let lost = json_u64(&text, "lost_events")?;
    Some(format!(
        "forkprof's last run saw {processes} processes, {execs} execs, {lost} lost events"
    ))
}

/// The first value of `"key": N` in a JSON text that is an unsigned integer.
fn json_u64(text: &str, key: &str) -> Option<u64> {
    let pattern = format!("\"{key}\"");
    text.match_indices(&pattern).find_map(|(i, _)| {
        let rest = text[i + pattern.len()..].trim_start().strip_prefix(':')?;
        let rest = rest.trim_start();
        let end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        rest[..end].parse().ok()
    })
}

struct Machine {
    nproc: usize,
    kernel: String,
    cpu: String,
}

impl Machine {
    fn probe() -> Self {
        let cpu = fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".to_owned());
        Machine {
            nproc: thread::available_parallelism().map_or(0, |n| n.get()),
            kernel: crate::output(Command::new("uname").arg("-r"))
                .trim()
                .to_owned(),
            cpu,
        }
    }
}

fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

/// A confidence interval of at least 90% for the median of `values`: the order statistics
/// x(k) and x(n+1-k) with the largest k whose coverage, 1 - 2 P(Binomial(n, 1/2) < k),
/// is still 90% or more. It assumes nothing about the distribution; with 5 values it is
/// [min, max] (93.75%), and with fewer than 5 there is none.
fn median_ci90(values: &[f64]) -> Option<(f64, f64)> {
    let n = values.len();
    // P(B <= j) for B ~ Binomial(n, 1/2), j = 0, 1, ...
    let mut term = 0.5f64.powi(i32::try_from(n).ok()?);
    let mut below = 0.0; // P(B < k)
    let mut k = 0;
    while k < n / 2 {
        // coverage of [x(k+1), x(n-k)] is 1 - 2 P(B <= k)
        if 1.0 - 2.0 * (below + term) < 0.90 {
            break;
        }
        below += term;
        term *= (n - k) as f64 / (k + 1) as f64;
        k += 1;
    }
    if k == 0 {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    Some((v[k - 1], v[n - k]))
}

fn min(values: &[f64]) -> Option<f64> {
    values.iter().copied().reduce(f64::min)
}

fn max(values: &[f64]) -> Option<f64> {
    values.iter().copied().reduce(f64::max)
}

fn pct(ratio: f64) -> String {
    format!("{:+.1}%", (ratio - 1.0) * 100.0)
}

fn table(args: &BenchArgs, machine: &Machine, rows: &[Row], check: Option<&str>) -> String {
    let us = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.1}"));
    let mut cells: Vec<[String; 7]> = vec![[
        "run".to_owned(),
        "median us/iter".to_owned(),
        "min".to_owned(),
        "max".to_owned(),
        "overhead vs bare".to_owned(),
        "90% CI".to_owned(),
        "background CPUs".to_owned(),
    ]];
    let mut notes = Vec::new();
    for row in rows {
        if let Some(why) = &row.unavailable
            && row.samples.is_empty()
        {
            cells.push([
                row.label.to_owned(),
                "n/a".to_owned(),
                "-".to_owned(),
                "-".to_owned(),
                "n/a".to_owned(),
                "-".to_owned(),
                "-".to_owned(),
            ]);
            notes.push(format!("{}: not run: {why}", row.label));
            continue;
        }
        if let Some(why) = &row.unavailable {
            notes.push(format!("{}: stopped early: {why}", row.label));
        }
        if row.noisy_pairs > 0 {
            notes.push(format!(
                "{}: {} of {} pairs kept with more than {} CPUs busy elsewhere",
                row.label,
                row.noisy_pairs,
                row.samples.len(),
                args.max_background
            ));
        }
        let values = row.us();
        let (overhead, range) = match &row.ratios {
            None => ("-".to_owned(), "-".to_owned()),
            Some(r) => (
                median(r).map_or_else(|| "-".to_owned(), pct),
                median_ci90(r).map_or_else(
                    || "-".to_owned(),
                    |(lo, hi)| format!("{} .. {}", pct(lo), pct(hi)),
                ),
            ),
        };
        cells.push([
            row.label.to_owned(),
            us(median(&values)),
            us(min(&values)),
            us(max(&values)),
            overhead,
            range,
            median(&row.background()).map_or_else(|| "-".to_owned(), |v| format!("{v:.2}")),
        ]);
    }
    let mut widths = [0usize; 7];
    for c in &cells {
        for (w, s) in widths.iter_mut().zip(c) {
            *w = (*w).max(s.chars().count());
        }
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "fork+exec+wait of a dynamically linked `int main(){{return 0;}}`: {} iterations per run, \
         {} alternating pairs per tool",
        args.iterations, args.pairs
    );
    let _ = writeln!(
        out,
        "machine: {} CPUs ({}), kernel {}",
        machine.nproc, machine.cpu, machine.kernel
    );
    let _ = writeln!(out);
    for (n, c) in cells.iter().enumerate() {
        let mut line = format!("{:<w$}", c[0], w = widths[0]);
        for (s, w) in c.iter().zip(widths).skip(1) {
            let _ = write!(line, "  {s:>w$}");
        }
        let _ = writeln!(out, "{}", line.trim_end());
        if n == 0 {
            let total = widths.iter().sum::<usize>() + 2 * (widths.len() - 1);
            let _ = writeln!(out, "{}", "-".repeat(total));
        }
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "overhead vs bare: median over pairs of (tool run / the bare run just before it) - 1"
    );
    let _ = writeln!(
        out,
        "90% CI: of that median (order statistics; none under 5 pairs); A/A shows the noise floor"
    );
    let _ = writeln!(
        out,
        "background CPUs: median over runs of the CPUs other processes kept busy during a run"
    );
    if let Some(check) = check {
        let _ = writeln!(out, "{check}");
    }
    for note in notes {
        let _ = writeln!(out, "{note}");
    }
    out
}

fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn json_num(v: Option<f64>) -> String {
    v.map_or_else(|| "null".to_owned(), |v| format!("{v:.3}"))
}

fn json_list(values: &[f64]) -> String {
    let items: Vec<String> = values.iter().map(|v| format!("{v:.3}")).collect();
    format!("[{}]", items.join(","))
}

fn json(
    args: &BenchArgs,
    machine: &Machine,
    rows: &[Row],
    check: Option<&str>,
    stats: Option<&[ProgStat]>,
) -> String {
    let stats = stats.map_or_else(
        || "null".to_owned(),
        |stats| {
            let items: Vec<String> = stats
                .iter()
                .map(|p| {
                    format!(
                        "{{\"program\":{},\"run_ns\":{},\"runs\":{}}}",
                        json_str(&p.name),
                        p.run_ns,
                        p.runs
                    )
                })
                .collect();
            format!("[{}]", items.join(","))
        },
    );
    let mut runs = Vec::new();
    for row in rows {
        let pct = |r: Option<f64>| json_num(r.map(|r| (r - 1.0) * 100.0));
        let (overhead, ratios, ci) = match &row.ratios {
            None => ("null".to_owned(), "null".to_owned(), "null".to_owned()),
            Some(r) => (
                pct(median(r)),
                json_list(r),
                median_ci90(r).map_or_else(
                    || "null".to_owned(),
                    |(lo, hi)| format!("[{},{}]", pct(Some(lo)), pct(Some(hi))),
                ),
            ),
        };
        runs.push(format!(
            "{{\"run\":{},\"available\":{},\"reason\":{},\"median_us\":{},\"min_us\":{},\
             \"max_us\":{},\"overhead_pct\":{},\"overhead_ci90_pct\":{},\"samples_us\":{},\"ratios\":{},\
             \"background_cpus\":{},\"noisy_pairs\":{}}}",
            json_str(row.label),
            row.unavailable.is_none(),
            row.unavailable
                .as_deref()
                .map_or_else(|| "null".to_owned(), json_str),
            json_num(median(&row.us())),
            json_num(min(&row.us())),
            json_num(max(&row.us())),
            overhead,
            ci,
            json_list(&row.us()),
            ratios,
            json_list(&row.background()),
            row.noisy_pairs,
        ));
    }
    format!(
        "{{\"iterations\":{},\"pairs\":{},\"max_background\":{},\"machine\":{{\"nproc\":{},\"cpu\":{},\"kernel\":{}}},\
         \"forkprof_check\":{},\"runs\":[{}],\"bpf_stats\":{}}}",
        args.iterations,
        args.pairs,
        args.max_background,
        machine.nproc,
        json_str(&machine.cpu),
        json_str(&machine.kernel),
        check.map_or_else(|| "null".to_owned(), json_str),
        runs.join(","),
        stats
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_loop_result() {
        let out = "Attaching 18 probes...\n\
                   spawn_loop: iterations=2000 total_ns=2511156288 us_per_iter=1255.578\n";
        assert_eq!(parse_us_per_iter(out), Some(1255.578));
        assert_eq!(parse_us_per_iter("spawn_loop: us_per_iter=abc\n"), None);
        assert_eq!(parse_us_per_iter("us_per_iter=12\n"), None);
        assert_eq!(parse_us_per_iter(""), None);
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }

    #[test]
    fn median_interval_uses_order_statistics() {
        assert_eq!(median_ci90(&[1.0, 2.0, 3.0, 4.0]), None);
        assert_eq!(median_ci90(&[5.0, 1.0, 3.0, 2.0, 4.0]), Some((1.0, 5.0)));
        // n = 20: P(B <= 5) = 0.0207, P(B <= 6) = 0.0577: [x(6), x(15)], 95.9%
        let values: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(median_ci90(&values), Some((6.0, 15.0)));
    }

    #[test]
    fn finds_integers_in_json() {
        let text = r#"{"summary":{"processes":2001,"lost_events":0},"processes":[{"pid":1}]}"#;
        assert_eq!(json_u64(text, "processes"), Some(2001));
        assert_eq!(json_u64(text, "lost_events"), Some(0));
        assert_eq!(json_u64(text, "missing"), None);
        let text = r#"{"processes": [], "summary": {"processes": 7}}"#;
        assert_eq!(json_u64(text, "processes"), Some(7));
    }

    #[test]
    fn parses_bpftool_output() {
        let text = "6218: raw_tracepoint  name forkprof_sys_enter  tag a5af  gpl \
                    run_time_ns 1005879 run_cnt 3565\n\
                    \tloaded_at 2026-11-30T00:32:55+0000  uid 0\n\
                    \txlated 5120B  jited 3227B  memlock 8192B  map_ids 4062,4065\n\
                    12: cgroup_skb  tag 6deef7357e7b4530  gpl\n";
        let progs = bpftool_progs(text);
        assert_eq!(progs.len(), 1);
        assert_eq!(
            progs[0],
            (
                6218,
                ProgStat {
                    name: "forkprof_sys_enter".to_owned(),
                    run_ns: 1_005_879,
                    runs: 3565
                }
            )
        );
    }

    #[test]
    fn escapes_json_strings() {
        assert_eq!(json_str("a\"b\\c\n\u{1}"), r#""a\"b\\c\n\u0001""#);
    }
}
