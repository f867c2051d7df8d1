//! `cargo xtask bench`: forkprof's overhead on a fork+exec loop, side by side with peers.
//!
//! The workload is `bench/spawn_loop.c`: fork + execl of a dynamically linked
//! `int main(){return 0;}` (`bench/true_dyn.c`) + waitpid, N iterations. The loop times
//! itself with CLOCK_MONOTONIC and prints microseconds per iteration, so a tracer's own
//! start-up and tear-down are not in the number.
//!
//! Every tool (forkprof run, strace -f -c, perf trace -s, bench/phases.bt under bpftrace)
//! is run in pairs with a bare run just before it (bare, tool, bare, tool, ...), and its
//! overhead is the median of the per-pair ratios. A tool that cannot run here is reported
//! with the reason and left out; the rest of the bench goes on. See BENCHMARKS.md.
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
    /// `forkprof run` (default mode)
    Forkprof,
    /// `strace -f -c -o /dev/null`
    Strace,
    /// `perf trace -s -o /dev/null`
    Perf,
    /// `bpftrace bench/phases.bt`
    Bpftrace,
}

const ALL_TOOLS: [Tool; 4] = [Tool::Forkprof, Tool::Strace, Tool::Perf, Tool::Bpftrace];

impl Tool {
    fn label(self) -> &'static str {
        match self {
            Tool::Forkprof => "forkprof run",
            Tool::Strace => "strace -f -c",
            Tool::Perf => "perf trace -s",
            Tool::Bpftrace => "bpftrace phases.bt",
        }
    }

    /// The Debian package that provides the tool, if it is not built here.
    fn package(self) -> Option<&'static str> {
        match self {
            Tool::Forkprof => None,
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
            None => Command::new(&self.spawn_loop),
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

fn path_str(p: &Path) -> Result<&str> {
    match p.to_str() {
        Some(s) if !s.contains(char::is_whitespace) => Ok(s),
        _ => bail!(
            "{}: bpftrace -c cannot take a path with spaces or invalid UTF-8",
            p.display()
        ),
    }
}

/// The measurements of one row of the table.
struct Row {
    label: &'static str,
    /// Why the tool could not run, if it could not.
    unavailable: Option<String>,
    /// us per iteration of each run.
    samples: Vec<f64>,
    /// tool / bare of each pair (None for the bare row).
    ratios: Option<Vec<f64>>,
}

pub fn run(args: &BenchArgs) -> Result<()> {
    if !crate::is_root() {
        bail!(
            "the bench loads eBPF programs (forkprof, bpftrace, perf trace): \
             run `cargo xtask bench` as root"
        );
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

    // A short run of each: warms the page cache, and finds the tools that cannot run here.
    let probe_iterations = args.iterations.min(50);
    run_loop(&paths, None, probe_iterations).context("the bare loop does not run")?;
    let mut active = Vec::new();
    for &tool in &tools {
        if unavailable.iter().any(|(t, _)| *t == tool) {
            continue;
        }
        match run_loop(&paths, Some(tool), probe_iterations) {
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
    let mut bare_samples = Vec::new();
    let mut tool_samples: Vec<Vec<f64>> = vec![Vec::new(); active.len()];
    let mut tool_ratios: Vec<Vec<f64>> = vec![Vec::new(); active.len()];
    let started = Instant::now();
    for pair in 1..=args.pairs {
        let mut line = format!("xtask: bench: pair {pair}/{}:", args.pairs);
        for (i, &tool) in active.iter().enumerate() {
            if unavailable.iter().any(|(t, _)| *t == tool) {
                continue;
            }
            let bare = run_loop(&paths, None, args.iterations).context("bare run failed")?;
            let traced = match run_loop(&paths, Some(tool), args.iterations) {
                Ok(us) => us,
                Err(e) => {
                    let why = format!("failed in pair {pair}: {e:#}");
                    eprintln!("xtask: bench: {}: {why}", tool.label());
                    unavailable.push((tool, why));
                    continue;
                }
            };
            bare_samples.push(bare);
            tool_samples[i].push(traced);
            tool_ratios[i].push(traced / bare);
            let _ = write!(
                line,
                "  bare {bare:.1} / {} {traced:.1} us ({:+.1}%)",
                tool.label(),
                (traced / bare - 1.0) * 100.0
            );
        }
        eprintln!("{line}");
    }
    eprintln!(
        "xtask: bench: measured in {:.0} s",
        started.elapsed().as_secs_f64()
    );

    let mut rows = vec![Row {
        label: "bare",
        unavailable: None,
        samples: bare_samples,
        ratios: None,
    }];
    for &tool in &tools {
        let reason = unavailable
            .iter()
            .find(|(t, _)| *t == tool)
            .map(|(_, why)| why.clone());
        let (samples, ratios) = match active.iter().position(|t| *t == tool) {
            Some(i) => (tool_samples[i].clone(), tool_ratios[i].clone()),
            None => (Vec::new(), Vec::new()),
        };
        rows.push(Row {
            label: tool.label(),
            unavailable: reason,
            samples,
            ratios: Some(ratios),
        });
    }

    let machine = Machine::probe();
    let forkprof_check = if active.contains(&Tool::Forkprof) {
        forkprof_check(&paths)
    } else {
        None
    };
    if args.json {
        println!("{}", json(args, &machine, &rows, forkprof_check.as_deref()));
    } else {
        print!(
            "{}",
            table(args, &machine, &rows, forkprof_check.as_deref())
        );
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

/// Runs the loop (under `tool`, if any) and returns its microseconds per iteration.
fn run_loop(paths: &Paths, tool: Option<Tool>, iterations: u32) -> Result<f64> {
    let out_path = paths.dir.join("run.stdout");
    let err_path = paths.dir.join("run.stderr");
    // Files, not pipes: nothing can block on a full pipe, and nothing reads while the loop runs.
    let stdout = fs::File::create(&out_path)
        .with_context(|| format!("cannot create {}", out_path.display()))?;
    let stderr = fs::File::create(&err_path)
        .with_context(|| format!("cannot create {}", err_path.display()))?;
    let mut cmd = paths.command(tool, iterations)?;
    cmd.stdin(Stdio::null()).stdout(stdout).stderr(stderr);
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start {cmd:?}"))?;
    let limit = Duration::from_secs(60) + Duration::from_millis(20) * iterations;
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().context("waiting for the run")? {
            break status;
        }
        if started.elapsed() > limit {
            // best effort: the child may have exited in between
            let _ = child.kill();
            let _ = child.wait();
            bail!("{cmd:?} ran past {} s and was killed", limit.as_secs());
        }
        thread::sleep(Duration::from_millis(50));
    };
    let out = fs::read_to_string(&out_path).unwrap_or_default();
    let err = fs::read_to_string(&err_path).unwrap_or_default();
    if !status.success() {
        bail!("{cmd:?} failed ({status}): {}", tail(&err));
    }
    parse_us_per_iter(&out)
        .with_context(|| format!("{cmd:?} printed no spawn_loop result: {}", tail(&err)))
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
    let mut cells: Vec<[String; 6]> = vec![[
        "run".to_owned(),
        "median us/iter".to_owned(),
        "min".to_owned(),
        "max".to_owned(),
        "overhead vs bare".to_owned(),
        "per-pair range".to_owned(),
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
            ]);
            notes.push(format!("{}: not run: {why}", row.label));
            continue;
        }
        if let Some(why) = &row.unavailable {
            notes.push(format!("{}: stopped early: {why}", row.label));
        }
        let (overhead, range) = match &row.ratios {
            None => ("-".to_owned(), "-".to_owned()),
            Some(r) => (
                median(r).map_or_else(|| "-".to_owned(), pct),
                match (min(r), max(r)) {
                    (Some(lo), Some(hi)) => format!("{} .. {}", pct(lo), pct(hi)),
                    _ => "-".to_owned(),
                },
            ),
        };
        cells.push([
            row.label.to_owned(),
            us(median(&row.samples)),
            us(min(&row.samples)),
            us(max(&row.samples)),
            overhead,
            range,
        ]);
    }
    let mut widths = [0usize; 6];
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

fn json(args: &BenchArgs, machine: &Machine, rows: &[Row], check: Option<&str>) -> String {
    let mut runs = Vec::new();
    for row in rows {
        let pct = |r: Option<f64>| json_num(r.map(|r| (r - 1.0) * 100.0));
        let (overhead, ratios) = match &row.ratios {
            None => ("null".to_owned(), "null".to_owned()),
            Some(r) => (pct(median(r)), json_list(r)),
        };
        runs.push(format!(
            "{{\"run\":{},\"available\":{},\"reason\":{},\"median_us\":{},\"min_us\":{},\
             \"max_us\":{},\"overhead_pct\":{},\"samples_us\":{},\"ratios\":{}}}",
            json_str(row.label),
            row.unavailable.is_none(),
            row.unavailable
                .as_deref()
                .map_or_else(|| "null".to_owned(), json_str),
            json_num(median(&row.samples)),
            json_num(min(&row.samples)),
            json_num(max(&row.samples)),
            overhead,
            json_list(&row.samples),
            ratios,
        ));
    }
    format!(
        "{{\"iterations\":{},\"pairs\":{},\"machine\":{{\"nproc\":{},\"cpu\":{},\"kernel\":{}}},\
         \"forkprof_check\":{},\"runs\":[{}]}}",
        args.iterations,
        args.pairs,
        machine.nproc,
        json_str(&machine.cpu),
        json_str(&machine.kernel),
        check.map_or_else(|| "null".to_owned(), json_str),
        runs.join(",")
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
    fn finds_integers_in_json() {
        let text = r#"{"summary":{"processes":2001,"lost_events":0},"processes":[{"pid":1}]}"#;
        assert_eq!(json_u64(text, "processes"), Some(2001));
        assert_eq!(json_u64(text, "lost_events"), Some(0));
        assert_eq!(json_u64(text, "missing"), None);
        let text = r#"{"processes": [], "summary": {"processes": 7}}"#;
        assert_eq!(json_u64(text, "processes"), Some(7));
    }

    #[test]
    fn escapes_json_strings() {
        assert_eq!(json_str("a\"b\\c\n\u{1}"), r#""a\"b\\c\n\u0001""#);
    }
}
