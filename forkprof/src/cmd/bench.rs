//! `forkprof bench`: the classic process-creation experiments, each run bare (wall time per
//! iteration) and traced (phase attribution and forkprof's own overhead), with the ratios
//! people have quoted since 1989 and the phase that explains each of them.
use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::fd::{AsRawFd as _, RawFd};
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, Result, bail};

use crate::cli::BenchArgs;
use crate::elf::InterpCache;
use crate::loader;
use crate::model::Report;
use crate::model::bench::{
    HUGE_PAGES_ROW, RATIOS, RowResult, SLOPE, SWEEP_BASELINE, SWEEP_PREFIX, Turns, ratios,
};
use crate::model::phases::{Phase, PhaseMap};
use crate::model::report::Context as ReportContext;
use crate::model::report::ProcessRow;
use crate::output;
use crate::privilege::InvokingUser;
use crate::session::{Options as SessionOptions, TraceSession as Session};

/// The workloads built into forkprof (forkprof/workloads, built by build.rs).
const EMBEDDED: &[(&str, &[u8])] = &[
    (
        "driver-static",
        include_bytes!(concat!(env!("OUT_DIR"), "/workloads/driver-static")),
    ),
    (
        "driver-dynamic",
        include_bytes!(concat!(env!("OUT_DIR"), "/workloads/driver-dynamic")),
    ),
    (
        "true-static",
        include_bytes!(concat!(env!("OUT_DIR"), "/workloads/true-static")),
    ),
    (
        "true-dynamic",
        include_bytes!(concat!(env!("OUT_DIR"), "/workloads/true-dynamic")),
    ),
    (
        "true-libs",
        include_bytes!(concat!(env!("OUT_DIR"), "/workloads/true-libs")),
    ),
];

struct Spec {
    name: &'static str,
    driver: &'static str,
    method: &'static str,
    /// An embedded workload, or an absolute path.
    program: Option<&'static str>,
    args: &'static [&'static str],
    rss_mib: u64,
    /// The parent's `rss_mib` in transparent huge pages (`FP_RSS_HUGE`).
    huge_pages: bool,
    iterations: u64,
    quick_iterations: u64,
}

const fn spec(
    name: &'static str,
    driver: &'static str,
    method: &'static str,
    program: Option<&'static str>,
) -> Spec {
    Spec {
        name,
        driver,
        method,
        program,
        args: &[],
        rss_mib: 0,
        huge_pages: false,
        iterations: 1000,
        quick_iterations: 150,
    }
}

/// Rows of 15-150 µs iterations: more of them, so that a run lasts about as long as the
/// others and its median is as steady.
const fn short(s: Spec) -> Spec {
    Spec {
        iterations: 20000,
        quick_iterations: 2000,
        ..s
    }
}

const fn rss(name: &'static str, mib: u64, iterations: u64, quick: u64) -> Spec {
    Spec {
        rss_mib: mib,
        iterations,
        quick_iterations: quick,
        ..spec(name, "driver-dynamic", "fork", None)
    }
}

const SPECS: &[Spec] = &[
    short(spec(
        "fork+_exit static parent",
        "driver-static",
        "fork",
        None,
    )),
    short(spec(
        "fork+_exit dynamic parent",
        "driver-dynamic",
        "fork",
        None,
    )),
    short(spec(
        "vfork+_exit static parent",
        "driver-static",
        "vfork",
        None,
    )),
    short(spec(
        "vfork+_exit dynamic parent",
        "driver-dynamic",
        "vfork",
        None,
    )),
    spec(
        "fork+exec static",
        "driver-dynamic",
        "fork",
        Some("true-static"),
    ),
    spec(
        "fork+exec dynamic",
        "driver-dynamic",
        "fork",
        Some("true-dynamic"),
    ),
    spec(
        "fork+exec many-libs",
        "driver-dynamic",
        "fork",
        Some("true-libs"),
    ),
    spec(
        "vfork+exec static",
        "driver-dynamic",
        "vfork",
        Some("true-static"),
    ),
    spec(
        "vfork+exec dynamic",
        "driver-dynamic",
        "vfork",
        Some("true-dynamic"),
    ),
    spec(
        "vfork+exec many-libs",
        "driver-dynamic",
        "vfork",
        Some("true-libs"),
    ),
    spec(
        "posix_spawn static",
        "driver-dynamic",
        "posix_spawn",
        Some("true-static"),
    ),
    spec(
        "posix_spawn dynamic",
        "driver-dynamic",
        "posix_spawn",
        Some("true-dynamic"),
    ),
    spec(
        "posix_spawn many-libs",
        "driver-dynamic",
        "posix_spawn",
        Some("true-libs"),
    ),
    Spec {
        args: &["-c", "exit 0"],
        ..spec(
            "fork+exec sh -c 'exit 0'",
            "driver-dynamic",
            "fork",
            Some("/bin/sh"),
        )
    },
    rss("fork rss 0 MiB", 0, 1000, 150),
    rss("fork rss 64 MiB", 64, 300, 0),
    rss("fork rss 256 MiB", 256, 100, 30),
    rss("fork rss 1024 MiB", 1024, 30, 0),
    // Not "fork rss ...": not a point of the sweep, whose slope is per GiB of small pages.
    Spec {
        huge_pages: true,
        ..rss(HUGE_PAGES_ROW, 256, 100, 30)
    },
];

/// Why a row cannot run here, if it cannot: huge pages where the kernel gives none.
fn unavailable(s: &Spec) -> Option<String> {
    if !s.huge_pages {
        return None;
    }
    const THP: &str = "/sys/kernel/mm/transparent_hugepage/enabled";
    // "always [madvise] never": the bracketed word is the mode.
    let mode = std::fs::read_to_string(THP).ok().and_then(|m| {
        let (_, rest) = m.split_once('[')?;
        Some(rest.split_once(']')?.0.to_string())
    });
    match mode.as_deref() {
        Some("always" | "madvise") => None,
        Some(mode) => Some(format!(
            "transparent huge pages are off here ({THP}: {mode})"
        )),
        None => Some(format!(
            "no transparent huge pages in this kernel ({THP} unreadable)"
        )),
    }
}

/// A private directory holding the workloads, readable by the user they run as.
struct Workdir {
    dir: PathBuf,
}

impl Workdir {
    fn new(owner: Option<&InvokingUser>) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("forkprof-bench-{}", std::process::id()));
        std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        if let Some(u) = owner {
            std::os::unix::fs::chown(&dir, Some(u.uid), Some(u.gid))?;
        }
        for (name, bytes) in EMBEDDED {
            if bytes.is_empty() {
                continue;
            }
            let path = dir.join(name);
            std::fs::write(&path, bytes)?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        }
        Ok(Self { dir })
    }

    /// The path of a workload, or None when forkprof was built without it.
    fn path(&self, name: &str) -> Option<PathBuf> {
        if name.starts_with('/') {
            return Path::new(name).exists().then(|| PathBuf::from(name));
        }
        let p = self.dir.join(name);
        p.exists().then_some(p)
    }

    /// If `forkprof bench` is stopped by SIGINT, SIGTERM or SIGHUP, removes the directory
    /// (no destructor runs then) and exits 128 + the signal's number, as a shell would.
    fn remove_on_signal(&self) -> Result<()> {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])?;
        let dir = self.dir.clone();
        std::thread::spawn(move || {
            if let Some(signal) = signals.forever().next() {
                let _ = std::fs::remove_dir_all(&dir);
                eprintln!("\nforkprof bench: stopped by signal {signal}");
                std::process::exit(128 + signal);
            }
        });
        Ok(())
    }
}

impl Drop for Workdir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What every run of a workload shares: where the workloads are, whom they run as, and the
/// CPU they are pinned to.
struct Bench {
    work: Workdir,
    user: Option<InvokingUser>,
    cpu: Option<usize>,
}

/// The number after `key ` in a driver's output.
fn driver_value(stdout: &[u8], key: &str) -> Result<f64> {
    String::from_utf8_lossy(stdout)
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| format!("the workload printed no {key}"))
}

/// A driver's output, or the error it printed.
fn driver_output(what: &str, out: std::process::Output) -> Result<Vec<u8>> {
    if !out.status.success() {
        bail!("{what}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(out.stdout)
}

impl Bench {
    fn argv(&self, s: &Spec, iterations: u64) -> Option<Vec<String>> {
        let driver = self.work.path(s.driver)?;
        let mut v = vec![
            driver.display().to_string(),
            s.method.to_string(),
            iterations.to_string(),
        ];
        if let Some(p) = s.program {
            v.push(self.work.path(p)?.display().to_string());
            v.extend(s.args.iter().map(|a| a.to_string()));
        }
        Some(v)
    }

    /// `program` with the environment a driver reads (FP_RSS_MIB, FP_CPU).
    fn command(&self, s: &Spec, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new(program);
        cmd.env("FP_RSS_MIB", s.rss_mib.to_string());
        match s.huge_pages {
            true => cmd.env("FP_RSS_HUGE", "1"),
            false => cmd.env_remove("FP_RSS_HUGE"),
        };
        match self.cpu {
            Some(cpu) => cmd.env("FP_CPU", cpu.to_string()),
            None => cmd.env_remove("FP_CPU"),
        };
        cmd
    }

    /// Rows `a` and `b` started as two drivers that will take turns iteration by iteration
    /// (FP_TURN over two crossed pipes). They wait for the first turn, which
    /// `TurnTaking::finish` gives.
    fn start_turns(&self, (a, b): (&Spec, &Spec), iterations: u64) -> Result<Option<TurnTaking>> {
        let names = [a.name, b.name];
        let (Some(argv_a), Some(argv_b)) = (self.argv(a, iterations), self.argv(b, iterations))
        else {
            return Ok(None);
        };
        let (a_reads, b_writes) = std::io::pipe()?;
        let (b_reads, a_writes) = std::io::pipe()?;
        let spawn = |s: &Spec, argv: &[String], reads: RawFd, writes: RawFd| {
            let mut cmd = self.command(s, &argv[0]);
            cmd.args(&argv[1..])
                .env("FP_TURN", format!("{TURN_READ_FD},{TURN_WRITE_FD}"))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let user = self.user.clone();
            // SAFETY: the closure only makes raw syscalls between fork and exec.
            unsafe {
                cmd.pre_exec(move || {
                    // dup2 leaves the copies without FD_CLOEXEC, so they survive the exec.
                    if libc::dup2(reads, TURN_READ_FD) < 0 || libc::dup2(writes, TURN_WRITE_FD) < 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                    match &user {
                        Some(u) => u.become_user(),
                        None => Ok(()),
                    }
                })
            };
            cmd.spawn().with_context(|| format!("running {}", argv[0]))
        };
        // a reads what b writes and b reads what a writes: the pipes cross.
        let child_a = spawn(a, &argv_a, a_reads.as_raw_fd(), a_writes.as_raw_fd());
        let child_b = spawn(b, &argv_b, b_reads.as_raw_fd(), b_writes.as_raw_fd());
        match (child_a, child_b) {
            // Only the drivers may hold the pipes now, and the first turn: if one stops, the
            // other reads end-of-file instead of waiting for ever.
            (Ok(a), Ok(b)) => Ok(Some(TurnTaking {
                children: [a, b],
                first_turn: a_writes,
                names,
            })),
            (Err(e), Ok(mut other)) | (Ok(mut other), Err(e)) => {
                let _ = other.kill();
                let _ = other.wait();
                Err(e)
            }
            (Err(e), Err(_)) => Err(e),
        }
    }

    /// Rows `a` and `b` taking turns, bare, in `chunks` runs of fresh drivers with the order
    /// swapped every other run: the means over the runs of each side's median iteration
    /// time. Fresh drivers average out what a single pair of processes is stuck with (where
    /// their memory is, which of the two goes first), which moves a ratio by up to 10% here.
    fn take_turns(
        &self,
        (a, b): (&Spec, &Spec),
        iterations: u64,
        chunks: u64,
    ) -> Result<Option<Turns>> {
        let per_chunk = iterations.div_ceil(chunks).max(1);
        let (mut a_us, mut b_us) = (0.0, 0.0);
        for chunk in 0..chunks {
            let swap = chunk % 2 == 1;
            let pair = if swap { (b, a) } else { (a, b) };
            let Some(turns) = self.start_turns(pair, per_chunk)? else {
                return Ok(None);
            };
            let [first, second] = turns.finish()?;
            let (out_a, out_b) = if swap {
                (second, first)
            } else {
                (first, second)
            };
            a_us += driver_value(&out_a, "us_per_iter_median")? / chunks as f64;
            b_us += driver_value(&out_b, "us_per_iter_median")? / chunks as f64;
        }
        Ok(Some(Turns {
            a_us,
            b_us,
            samples: 1,
            traced: None,
        }))
    }

    /// Rows `a` and `b` taking turns during one tracing session in this process, with the
    /// sides marked in `traced` in the traced set: each side's mean iteration time, and the
    /// phase means of the processes it spawned (none for an untraced side).
    fn take_turns_in_session(
        &self,
        specs: (&Spec, &Spec),
        iterations: u64,
        traced: [bool; 2],
    ) -> Result<Option<[Side; 2]>> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let _in_runtime = runtime.enter();
        let mut session = Session::start(SessionOptions::default())?;
        let Some(turns) = self.start_turns(specs, iterations)? else {
            return Ok(None);
        };
        let pids = turns.children.each_ref().map(|c| c.id());
        for (pid, _) in pids.iter().zip(traced).filter(|(_, t)| *t) {
            // On an error the drivers read end-of-file once `turns` is dropped, and stop.
            session.trace_pid(*pid)?;
        }
        let done = tokio::task::spawn_blocking(move || turns.finish());
        let outputs = runtime.block_on(session.run_until(done))???;
        session.drain()?;
        let loaders = InterpCache::default();
        let is_static = |p: &[u8]| loaders.is_static(p);
        let report = Report::build(&session.trace, &ReportContext::for_run(&is_static));
        let rows = report.processes.unwrap_or_default();
        let side = |pid: u32, out: &[u8]| -> Result<Side> {
            let mut spawned: Vec<&ProcessRow> =
                rows.iter().filter(|p| p.parent_pid == Some(pid)).collect();
            // The driver's first child is its untimed warm-up.
            spawned.sort_by_key(|p| p.start_ns);
            Ok(Side {
                mean_us: driver_value(out, "us_per_iter")?,
                phases_us: phase_means(spawned.iter().skip(1).map(|p| &p.phases)),
            })
        };
        Ok(Some([
            side(pids[0], &outputs[0])?,
            side(pids[1], &outputs[1])?,
        ]))
    }

    /// Rows `a` and `b` taking turns, both traced: their traced wall times and phases, to
    /// explain the ratio of their bare turns.
    fn take_turns_traced(
        &self,
        (a, b): (&Spec, &Spec),
        iterations: u64,
    ) -> Result<Option<(RowResult, RowResult)>> {
        let Some([side_a, side_b]) =
            self.take_turns_in_session((a, b), iterations, [true, true])?
        else {
            return Ok(None);
        };
        let row = |s: &Spec, side: Side| RowResult {
            name: s.name.into(),
            iterations,
            us_per_iter_traced: side.mean_us,
            phases_us: side.phases_us,
            rss_mib: s.rss_mib,
            ..Default::default()
        };
        Ok(Some((row(a, side_a), row(b, side_b))))
    }

    /// One row: the workload traced and the same workload untraced, taking turns. The
    /// untraced side gives the bare time, the traced side the phases, and the two together
    /// forkprof's overhead, with the machine's drift cancelled. A parent with a big address
    /// space runs in `RSS_CHUNKS` shorter runs instead, each with fresh memory and the
    /// traced side swapped: two copies of the same 1 GiB parent can differ by 1.2-1.8× here
    /// (where the host put their memory, found while writing this), and that would
    /// otherwise read as forkprof's overhead.
    fn run_row(&self, s: &Spec, iterations: u64) -> Result<Option<RowResult>> {
        let chunks = if s.rss_mib > 0 { RSS_CHUNKS } else { 1 };
        let per_chunk = iterations.div_ceil(chunks).max(1);
        let (mut bare_us, mut traced_us) = (0.0, 0.0);
        let mut phases_us: PhaseMap<f64> = PhaseMap::default();
        for chunk in 0..chunks {
            let swap = chunk % 2 == 1;
            let sides = [!swap, swap];
            let Some([first, second]) = self.take_turns_in_session((s, s), per_chunk, sides)?
            else {
                return Ok(None);
            };
            let (traced, bare) = if swap {
                (second, first)
            } else {
                (first, second)
            };
            bare_us += bare.mean_us / chunks as f64;
            traced_us += traced.mean_us / chunks as f64;
            for (phase, v) in traced.phases_us.iter() {
                let sum = phases_us.get(phase).copied().unwrap_or(0.0);
                phases_us.insert(phase, sum + v / chunks as f64);
            }
        }
        let cost = phases_us.get(Phase::SpawnCost).copied().unwrap_or(0.0);
        Ok(Some(RowResult {
            name: s.name.into(),
            iterations: per_chunk * chunks,
            us_per_iter: bare_us,
            us_per_iter_traced: traced_us,
            spawn_cost_coverage: cost / traced_us,
            tracing_overhead: traced_us / bare_us - 1.0,
            phases_us,
            rss_mib: s.rss_mib,
        }))
    }
}

/// One driver's share of a turn-taking run.
struct Side {
    /// The mean of its iterations' times (µs).
    mean_us: f64,
    /// Per-iteration phase means of the processes it spawned, if it was traced.
    phases_us: PhaseMap<f64>,
}

/// Two drivers started to take turns, waiting for the first one.
struct TurnTaking {
    children: [std::process::Child; 2],
    first_turn: std::io::PipeWriter,
    names: [&'static str; 2],
}

impl TurnTaking {
    /// Gives the first turn and waits for both drivers: their outputs.
    fn finish(mut self) -> Result<[Vec<u8>; 2]> {
        if let Err(e) = self.first_turn.write_all(&[0]) {
            for child in &mut self.children {
                let _ = child.kill();
                let _ = child.wait();
            }
            return Err(e).context("starting the turns");
        }
        drop(self.first_turn);
        let [a, b] = self.children;
        Ok([
            driver_output(self.names[0], a.wait_with_output()?)?,
            driver_output(self.names[1], b.wait_with_output()?)?,
        ])
    }
}

/// Means of the spawned processes' phases, one process per iteration (µs; cow_faults stays a
/// count). A phase a process did not measure counts as 0.
fn phase_means<'a>(processes: impl Iterator<Item = &'a PhaseMap<u64>>) -> PhaseMap<f64> {
    let mut sums: PhaseMap<f64> = PhaseMap::default();
    let mut count = 0u64;
    for phases in processes {
        count += 1;
        for (phase, &v) in phases.iter() {
            let v = if phase.is_count() {
                v as f64
            } else {
                v as f64 / 1e3
            };
            let sum = sums.get(phase).copied().unwrap_or(0.0);
            sums.insert(phase, sum + v);
        }
    }
    sums.iter()
        .map(|(phase, v)| (phase, v / count.max(1) as f64))
        .collect()
}

/// The file descriptors on which a driver taking turns reads and passes the turn.
const TURN_READ_FD: RawFd = 100;
const TURN_WRITE_FD: RawFd = 101;
/// Runs of fresh drivers for each ratio (see `Bench::take_turns`).
const RATIO_CHUNKS: u64 = 4;
/// Runs of a row whose parent has a big address space (see `Bench::run_row`).
const RSS_CHUNKS: u64 = 6;
/// Iterations of each side in one sample of the fork slope.
const SLOPE_SAMPLE_ITERATIONS: u64 = 4;

pub fn run(args: BenchArgs) -> Result<i32> {
    if let Some(unknown) = args
        .rows
        .iter()
        .find(|r| !SPECS.iter().any(|s| s.name.contains(r.as_str())))
    {
        let names: Vec<&str> = SPECS.iter().map(|s| s.name).collect();
        eprintln!(
            "forkprof: --rows {unknown:?} matches no row; the rows are: {}",
            names.join(", ")
        );
        return Ok(2);
    }
    loader::check_privileges()?;
    let user = InvokingUser::from_env()?;
    let work = Workdir::new(user.as_ref())?;
    work.remove_on_signal()?;
    let cpu = match (args.no_pin, args.cpu) {
        (true, _) => None,
        (false, Some(cpu)) => Some(cpu),
        (false, None) => crate::cli::allowed_cpus().last().copied(),
    };
    let bench = Bench { work, user, cpu };
    match cpu {
        Some(cpu) => eprintln!(
            "forkprof bench: workloads pinned to CPU {cpu} (--no-pin lets the scheduler place them)"
        ),
        None => eprintln!("forkprof bench: workloads not pinned"),
    }
    let selected: Vec<(&Spec, u64)> = SPECS
        .iter()
        .filter(|s| args.rows.is_empty() || args.rows.iter().any(|r| s.name.contains(r.as_str())))
        .map(|s| {
            let iterations = match (args.iterations, args.quick) {
                (Some(n), _) => n,
                (None, true) => s.quick_iterations,
                (None, false) => s.iterations,
            };
            (s, iterations)
        })
        .filter(|&(_, iterations)| iterations > 0)
        .collect();
    // The fork slope: the biggest parent of the sweep against the empty one, taking turns a
    // few times after every row and every ratio, so that its samples are spread through the
    // run. A drift of the machine's speed over a minute (1.5× here) then moves their median
    // far less than it moves any one measurement.
    let slope_pair = selected
        .iter()
        .filter(|(s, _)| s.name.starts_with(SWEEP_PREFIX) && s.rss_mib > 0)
        .max_by_key(|(s, _)| s.rss_mib)
        .zip(selected.iter().find(|(s, _)| s.name == SWEEP_BASELINE))
        .map(|((big, _), (base, _))| (*big, *base));
    let mut slope_samples: Vec<Turns> = Vec::new();
    let mut sample_slope = |bench: &Bench| -> Result<()> {
        if let Some(pair) = slope_pair
            && let Some(t) = bench.take_turns(pair, SLOPE_SAMPLE_ITERATIONS, 1)?
        {
            slope_samples.push(t);
        }
        Ok(())
    };
    let mut results = Vec::new();
    let mut skipped = Vec::new();
    for &(s, iterations) in &selected {
        eprint!("forkprof bench: {:<28} ", s.name);
        let _ = std::io::stderr().flush();
        if let Some(why) = unavailable(s) {
            eprintln!("skipped: {why}");
            skipped.push(s.name);
            continue;
        }
        match bench.run_row(s, iterations)? {
            Some(r) => {
                eprintln!("{:>9.1} µs/iter", r.us_per_iter);
                results.push(r);
            }
            None => {
                eprintln!("skipped: a workload was not built into this forkprof");
                skipped.push(s.name);
            }
        }
        sample_slope(&bench)?;
    }
    let spec = |n: &str| SPECS.iter().find(|s| s.name == n);
    let ran = |n: &str| results.iter().find(|r| r.name == n).map(|r| r.iterations);
    let mut turns = BTreeMap::new();
    for (name, a, b) in RATIOS {
        let (Some(sa), Some(sb), Some(ia), Some(ib)) = (spec(a), spec(b), ran(a), ran(b)) else {
            continue;
        };
        let iterations = ia.min(ib);
        eprint!("forkprof bench: {name:<34} ");
        let _ = std::io::stderr().flush();
        if let Some(mut t) = bench.take_turns((sa, sb), iterations, RATIO_CHUNKS)? {
            eprintln!(
                "{:.1} vs {:.1} µs, taking turns {iterations} times in {RATIO_CHUNKS} runs",
                t.a_us, t.b_us
            );
            t.traced = bench.take_turns_traced((sa, sb), iterations)?;
            turns.insert(name.to_string(), t);
        }
        sample_slope(&bench)?;
    }
    if !slope_samples.is_empty() {
        let median = |f: fn(&Turns) -> f64| {
            let mut v: Vec<f64> = slope_samples.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let t = Turns {
            a_us: median(|t| t.a_us),
            b_us: median(|t| t.b_us),
            samples: slope_samples.len(),
            traced: None,
        };
        eprintln!(
            "forkprof bench: {SLOPE:<34} {:.1} vs {:.1} µs, medians of {} samples",
            t.a_us, t.b_us, t.samples
        );
        turns.insert(SLOPE.to_string(), t);
    }
    let ratios = ratios(&results, &turns);
    let mut out = std::io::stdout().lock();
    if args.json {
        output::bench::json(cpu, &results, &ratios, &skipped, &mut out)?;
    } else {
        output::bench::table(&results, &ratios, output::width::stdout(), &mut out)?;
    }
    Ok(0)
}
