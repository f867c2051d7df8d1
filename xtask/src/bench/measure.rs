//! Runs of the loop: one run, the warm-up, and the (bare, tool) pairs with their retries.
use std::fmt::Write as _;
use std::fs;
use std::process::Stdio;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

use super::BenchArgs;
use super::background::Clock;
use super::stats::pct;
use super::tools::{Paths, Tool, Unavailable, clean_env, shown};

/// One run of the loop.
#[derive(Clone, Copy)]
pub(super) struct Sample {
    /// Microseconds per iteration, as the loop measured it.
    pub(super) us: f64,
    /// CPU microseconds (user + system, the loop and its children) per iteration.
    pub(super) cpu_us: Option<f64>,
    /// CPU microseconds of the tracer's own process (forkprof's agent, strace) per
    /// iteration, over the loop's span; None for the bare loop.
    pub(super) tracer_cpu_us: Option<f64>,
    /// CPUs kept busy by everything but this run (other processes, steal), averaged
    /// over the run: the noise it was measured under.
    pub(super) background: f64,
    /// The share of the CPU time this VM wanted during the run that its host took
    /// (/proc/stat's steal): how busy the host was.
    pub(super) stolen: Option<f64>,
}

/// The measurements of one row of the table.
pub(super) struct Row {
    pub(super) label: &'static str,
    /// Why the tool could not run, or stopped, if it did.
    pub(super) unavailable: Option<String>,
    pub(super) samples: Vec<Sample>,
    /// tool / bare of each pair (None for the bare row).
    pub(super) ratios: Option<Vec<f64>>,
    /// The same, by CPU time.
    pub(super) cpu_ratios: Option<Vec<f64>>,
    /// The same, by the CPU time of the loop and the tracer together, against the bare
    /// loop's: what tracing costs the machine.
    pub(super) total_cpu_ratios: Option<Vec<f64>>,
    /// Pairs kept although their background load stayed above --max-background.
    pub(super) noisy_pairs: usize,
}

impl Row {
    /// A row without samples yet: the bare row (`paired` false) or a tool's.
    pub(super) fn new(label: &'static str, paired: bool) -> Self {
        Row {
            label,
            unavailable: None,
            samples: Vec::new(),
            ratios: paired.then(Vec::new),
            cpu_ratios: paired.then(Vec::new),
            total_cpu_ratios: paired.then(Vec::new),
            noisy_pairs: 0,
        }
    }

    pub(super) fn us(&self) -> Vec<f64> {
        self.samples.iter().map(|s| s.us).collect()
    }

    pub(super) fn cpu_us(&self) -> Vec<f64> {
        self.samples.iter().filter_map(|s| s.cpu_us).collect()
    }

    pub(super) fn tracer_cpu_us(&self) -> Vec<f64> {
        self.samples
            .iter()
            .filter_map(|s| s.tracer_cpu_us)
            .collect()
    }

    pub(super) fn background(&self) -> Vec<f64> {
        self.samples.iter().map(|s| s.background).collect()
    }

    pub(super) fn stolen(&self) -> Vec<f64> {
        self.samples.iter().filter_map(|s| s.stolen).collect()
    }
}

/// A short run of each tool: warms the page cache, and finds the tools that cannot run
/// here (added to `unavailable`). Returns the tools that can.
pub(super) fn warm_up(
    paths: &Paths,
    clock: &Clock,
    tools: &[Tool],
    iterations: u32,
    unavailable: &mut Unavailable,
) -> Result<Vec<Tool>> {
    let probe_iterations = iterations.min(50);
    run_loop(paths, clock, None, probe_iterations).context("the bare loop does not run")?;
    let mut active = Vec::new();
    for &tool in tools {
        if unavailable.iter().any(|(t, _)| *t == tool) {
            continue;
        }
        match run_loop(paths, clock, Some(tool), probe_iterations) {
            Ok(_) => active.push(tool),
            Err(e) => {
                let why = format!("{e:#}");
                eprintln!("xtask: bench: {} cannot run here: {why}", tool.label());
                unavailable.push((tool, why));
            }
        }
    }
    Ok(active)
}

/// The --pairs rounds: in each, every tool of `active` runs right after a bare run of its
/// own. Returns the bare row and one row per tool of `active`, in its order.
pub(super) fn pairs(
    args: &BenchArgs,
    paths: &Paths,
    clock: &Clock,
    active: &[Tool],
) -> Result<(Row, Vec<Row>)> {
    let labels: Vec<&str> = active.iter().map(|t| t.label()).collect();
    eprintln!(
        "xtask: bench: {} pairs of {} iterations, tools: {}",
        args.pairs,
        args.iterations(),
        labels.join(", ")
    );
    let mut bare = Row::new("bare", false);
    let mut rows: Vec<Row> = labels.iter().map(|l| Row::new(l, true)).collect();
    let started = Instant::now();
    for pair in 1..=args.pairs {
        let mut line = format!("xtask: bench: pair {pair}/{}:", args.pairs);
        for (&tool, row) in active.iter().zip(&mut rows) {
            if row.unavailable.is_some() {
                continue;
            }
            let (b, t) = match measure_pair(args, paths, clock, tool, pair)? {
                Ok(samples) => samples,
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
            if let (Some(r), Some(bc), Some(tc)) = (&mut row.cpu_ratios, b.cpu_us, t.cpu_us) {
                r.push(tc / bc);
            }
            if let (Some(r), Some(bc), Some(tc), Some(tracer)) = (
                &mut row.total_cpu_ratios,
                b.cpu_us,
                t.cpu_us,
                t.tracer_cpu_us,
            ) {
                r.push((tc + tracer) / bc);
            }
            // CPU time too, so that a run stopped before its table still gives both
            let cpu = match (b.cpu_us, t.cpu_us) {
                (Some(bc), Some(tc)) => format!(" (CPU {})", pct(tc / bc)),
                _ => String::new(),
            };
            let _ = write!(
                line,
                "\n  bare {:.1} us (bg {:.2}) / {} {:.1} us (bg {:.2}): {}{cpu}",
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
    Ok((bare, rows))
}

/// One (bare, tool) pair, after a quiet moment, run again while it is noisy and --retries
/// allows. A failed bare run is the outer error (it ends the bench); a failed tool run the
/// inner one (it ends only that tool's row).
fn measure_pair(
    args: &BenchArgs,
    paths: &Paths,
    clock: &Clock,
    tool: Tool,
    pair: u32,
) -> Result<Result<(Sample, Sample)>> {
    let mut attempt = 0;
    loop {
        clock.wait_quiet(args.max_background);
        let b = run_loop(paths, clock, None, args.iterations()).context("a bare run failed")?;
        let t = match run_loop(paths, clock, Some(tool), args.iterations()) {
            Ok(t) => t,
            Err(e) => return Ok(Err(e)),
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
        return Ok(Ok((b, t)));
    }
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
    cmd.envs(paths.env(tool));
    cmd.stdin(Stdio::null()).stdout(stdout).stderr(stderr);
    let before = clock.reading();
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
    // One reading of /proc/stat after the run, for both.
    let after = clock.reading();
    let background = clock
        .others(before, after, started.elapsed().as_secs_f64())
        .unwrap_or(0.0);
    let stolen = after.stolen_since(&before);
    let out = fs::read_to_string(&out_path).unwrap_or_default();
    let err = fs::read_to_string(&err_path).unwrap_or_default();
    if !status.success() {
        bail!("{shown} failed ({status}): {}", tail(&err));
    }
    let us = parse_us_per_iter(&out)
        .with_context(|| format!("{shown} printed no spawn_loop result: {}", tail(&err)))?;
    Ok(Sample {
        us,
        cpu_us: parse_field(&out, "cpu_us_per_iter="),
        tracer_cpu_us: parse_value(&out, "tracer_cpu_us_per_iter="),
        background,
        stolen,
    })
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
    parse_field(stdout, "us_per_iter=")
}

/// Finds `KEY=V` (`key` with its `=`) in spawn_loop's result line, V positive.
fn parse_field(stdout: &str, key: &str) -> Option<f64> {
    parse_value(stdout, key).filter(|v| *v > 0.0)
}

/// A field of the loop's result line that may be zero (a tracer that used no CPU).
fn parse_value(stdout: &str, key: &str) -> Option<f64> {
    stdout
        .lines()
        .filter(|l| l.starts_with("spawn_loop:"))
        .flat_map(str::split_whitespace)
        .find_map(|w| w.strip_prefix(key))
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v >= 0.0)
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
        let out = "spawn_loop: iterations=2 total_ns=2 us_per_iter=800.5 cpu_us_per_iter=790.25\n";
        assert_eq!(parse_us_per_iter(out), Some(800.5));
        assert_eq!(parse_field(out, "cpu_us_per_iter="), Some(790.25));
        assert_eq!(
            parse_field("spawn_loop: us_per_iter=1\n", "cpu_us_per_iter="),
            None
        );
        assert_eq!(parse_value(out, "tracer_cpu_us_per_iter="), None);
        let out = "spawn_loop: iterations=2 total_ns=2 us_per_iter=800.5 cpu_us_per_iter=790.25 \
                   tracer_cpu_us_per_iter=0.000\n";
        assert_eq!(parse_field(out, "cpu_us_per_iter="), Some(790.25));
        assert_eq!(parse_value(out, "tracer_cpu_us_per_iter="), Some(0.0));
    }
}
