//! `--bpf-stats`: one more forkprof run with kernel.bpf_stats_enabled=1, and its table.
use std::fmt::Write as _;
use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context as _, Result, bail};
use serde::Serialize;

use super::floor::FloorMode;
use super::tools::{
    MONITOR_ARGS, Paths, RECORDING, SERVING, clean_env, record_args, while_tracing,
};

/// How long one of forkprof's eBPF programs ran during one run of the loop.
#[derive(Debug, PartialEq, Serialize)]
pub(super) struct ProgStat {
    #[serde(rename = "program")]
    pub(super) name: String,
    pub(super) run_ns: u64,
    pub(super) runs: u64,
}

/// One more forkprof run, with kernel.bpf_stats_enabled=1 and `bpftool prog show` run
/// inside the traced command right after the loop, while the programs are still loaded.
/// Only programs loaded after the run started count, so another forkprof loaded before
/// (a test, say) is left out.
pub(super) fn measure(paths: &Paths, iterations: u32) -> Result<Vec<ProgStat>> {
    measure_with(paths, &paths.forkprof, FloorMode::Run, false, iterations)
}

/// `measure` with the binary `forkprof` in `mode`, and with empty programs
/// (FORKPROF_BENCH_EMPTY=1) when `empty` is set.
pub(super) fn measure_with(
    paths: &Paths,
    forkprof: &Path,
    mode: FloorMode,
    empty: bool,
    iterations: u32,
) -> Result<Vec<ProgStat>> {
    let sysctl = Path::new("/proc/sys/kernel/bpf_stats_enabled");
    // Found on this PATH, and passed by its path: the traced command runs with a fixed
    // PATH (`clean_env`), which may not hold it.
    let bpftool = std::env::var_os("PATH")
        .and_then(|path| find_on(&path, "bpftool"))
        .context(
            "bpftool is not on PATH (Debian's package bpftool; `cargo xtask setup` installs it)",
        )?;
    let before = bpftool_progs(&crate::output(
        Command::new(&bpftool).args(["prog", "show"]),
    ));
    let old = fs::read_to_string(sysctl).context("cannot read kernel.bpf_stats_enabled")?;
    fs::write(sysctl, "1").context("cannot set kernel.bpf_stats_enabled")?;
    let out = paths.dir.join("bpf-stats.txt");
    // bpftool right before the loop and right after it, while the programs are still
    // loaded ($0 is the loop): the statistics are the difference, so that whatever ran
    // between the programs' attach and the loop (forkprof's start-up; under record and
    // monitor, the script's polls for the ready line, each a grep and a sleep traced in
    // full) is not charged to the loop.
    let then_bpftool = "\"$4\" prog show > \"$3.start\" && \"$0\" \"$1\" \"$2\" \
                        && \"$4\" prog show > \"$3\"";
    let mut cmd = match mode {
        FloorMode::Run => {
            let mut c = Command::new(forkprof);
            c.args(["run", "--report"])
                .arg(paths.dir.join("forkprof-stats-report.txt"))
                .args(["--", "/bin/sh", "-c", then_bpftool]);
            c
        }
        // Trace-all: the agent starts first and the loop once it says it traces, as in the
        // pairs.
        FloorMode::Record | FloorMode::Monitor => {
            let db = paths.dir.join("floor-record.db");
            let db = db.to_str().context("a path that is not UTF-8")?;
            let (args, ready) = if mode == FloorMode::Record {
                (record_args(db).to_vec(), RECORDING)
            } else {
                (MONITOR_ARGS.to_vec(), SERVING)
            };
            let stderr = paths.dir.join("floor-agent.stderr");
            let mut c = while_tracing(forkprof, &stderr, &args, ready, Path::new("/bin/sh"));
            c.args(["-c", then_bpftool]);
            c
        }
    };
    cmd.arg(&paths.spawn_loop)
        .arg(iterations.to_string())
        .arg(paths.loop_arg())
        .arg(&out)
        .arg(&bpftool)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    clean_env(&mut cmd);
    if empty {
        cmd.env("FORKPROF_BENCH_EMPTY", "1");
    }
    let result = cmd.status();
    // restore it whatever happened: it costs two clock reads per program run
    let restored = fs::write(sysctl, old.trim());
    let status = result.context("cannot start forkprof")?;
    restored.context("cannot restore kernel.bpf_stats_enabled")?;
    if !status.success() {
        bail!(
            "forkprof {} for the statistics failed: {status}",
            mode.name()
        );
    }
    let read = |path: &Path| {
        fs::read_to_string(path).with_context(|| format!("bpftool wrote no {}", path.display()))
    };
    let start = bpftool_progs(&read(&out.with_extension("txt.start"))?);
    let end = bpftool_progs(&read(&out)?);
    let old_ids: Vec<u32> = before.iter().map(|(id, _)| *id).collect();
    let stats: Vec<ProgStat> = during(&start, end)
        .into_iter()
        .filter(|(id, p)| !old_ids.contains(id) && p.name.starts_with("forkprof"))
        .map(|(_, p)| p)
        .collect();
    if stats.is_empty() {
        bail!("bpftool showed no forkprof programs");
    }
    Ok(stats)
}

/// The first executable file called `name` in the directories of `path` (a PATH value).
fn find_on(path: &std::ffi::OsStr, name: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    std::env::split_paths(path)
        .map(|dir| dir.join(name))
        .find(|p| fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// Each program's statistics at `end` less those it had at `start` (all of them for one
/// that `start` does not show).
fn during(start: &[(u32, ProgStat)], end: Vec<(u32, ProgStat)>) -> Vec<(u32, ProgStat)> {
    end.into_iter()
        .map(|(id, mut p)| {
            if let Some((_, s)) = start.iter().find(|(i, _)| *i == id) {
                p.run_ns = p.run_ns.saturating_sub(s.run_ns);
                p.runs = p.runs.saturating_sub(s.runs);
            }
            (id, p)
        })
        .collect()
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

/// The width of a table's first column: its longest program name, and at least "program".
pub(super) fn name_width<'a>(names: impl Iterator<Item = &'a str>) -> usize {
    names.map(str::len).max().unwrap_or(0).max("program".len())
}

/// The text table of `stats`, per iteration of the loop.
pub(super) fn table(stats: &[ProgStat], iterations: u32, bare_us: Option<f64>) -> String {
    let n = f64::from(iterations);
    let mut sorted: Vec<&ProgStat> = stats.iter().collect();
    sorted.sort_by_key(|p| std::cmp::Reverse(p.run_ns));
    let width = name_width(sorted.iter().map(|p| p.name.as_str()));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_an_executable_on_a_path_value() {
        let path = std::ffi::OsStr::new("/nonexistent:/etc:/bin");
        // /etc/passwd is a file but not executable; /bin/sh is both
        assert_eq!(find_on("/nonexistent:/etc".as_ref(), "passwd"), None);
        assert_eq!(find_on(path, "sh"), Some("/bin/sh".into()));
        assert_eq!(find_on(path, "no-such-program"), None);
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
    fn statistics_are_those_of_the_loop_alone() {
        let stat = |name: &str, run_ns, runs| ProgStat {
            name: name.to_owned(),
            run_ns,
            runs,
        };
        let start = [(7, stat("forkprof_sys_enter", 1000, 10))];
        let end = vec![
            (7, stat("forkprof_sys_enter", 5000, 45)),
            (8, stat("forkprof_sys_exit", 300, 3)),
        ];
        assert_eq!(
            during(&start, end),
            vec![
                (7, stat("forkprof_sys_enter", 4000, 35)),
                (8, stat("forkprof_sys_exit", 300, 3)),
            ]
        );
    }

    #[test]
    fn table_per_iteration() {
        let stats = [ProgStat {
            name: "forkprof_sys_enter".to_owned(),
            run_ns: 1_005_879,
            runs: 3565,
        }];
        let expected = "\n\
forkprof's eBPF programs, one more run of 2000 iterations with kernel.bpf_stats_enabled=1:\n\
\n\
program              hits/iter   ns/hit   us/iter\n\
---------------------------------------------------\n\
forkprof_sys_enter         1.8      282      0.50\n\
total                                        0.50 (0.1% of the bare median)\n\
time inside the programs only (each hit also pays the tracepoint's own entry); bpf_stats adds two clock reads to every hit\n\
";
        assert_eq!(table(&stats, 2000, Some(1000.75)), expected);
    }
}
