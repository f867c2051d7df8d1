//! `cargo xtask bench-report`: time and peak memory of `forkprof report` and `forkprof
//! export` on synthetic recordings of 1 and 10 million processes (`synth-recording`), each
//! beside a baseline measured in the same run: the sqlite3 shell reading every row of the
//! four event tables, which is the least any report of the file must do. Each command runs
//! under `/usr/bin/time -f '%e %M'` (wall seconds, peak RSS in KB).
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, bail};

#[derive(clap::Args, Debug)]
pub struct ScaleArgs {
    /// Recording sizes, in processes.
    #[arg(long, value_delimiter = ',', default_values_t = [1_000_000u64, 10_000_000])]
    pub sizes: Vec<u64>,
    /// Distinct tool binaries in each recording (a report has a row per binary).
    #[arg(long, default_value_t = 50)]
    pub binaries: u64,
    /// Runs of each command.
    #[arg(long, default_value_t = 2)]
    pub runs: u32,
    /// Where the recordings are kept between runs.
    #[arg(long, default_value = "target/scale")]
    pub dir: PathBuf,
    /// Measure this forkprof binary (an older build, say) instead of building this tree's.
    #[arg(long)]
    pub forkprof: Option<PathBuf>,
    /// Only the default report and the export (not every option).
    #[arg(long)]
    pub quick: bool,
}

struct Measured {
    wall_s: f64,
    max_rss_kb: u64,
}

fn measure(argv: &[String]) -> Result<Measured> {
    let out = Command::new("/usr/bin/time")
        .args(["-f", "%e %M"])
        .args(argv)
        .stdout(std::process::Stdio::null())
        .output()
        .with_context(|| format!("{argv:?} (apt-get install time)"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!("{argv:?} failed: {stderr}");
    }
    let last = stderr.lines().last().unwrap_or_default();
    let mut it = last.split_whitespace();
    let wall_s = it.next().and_then(|v| v.parse().ok());
    let max_rss_kb = it.next().and_then(|v| v.parse().ok());
    match (wall_s, max_rss_kb) {
        (Some(wall_s), Some(max_rss_kb)) => Ok(Measured { wall_s, max_rss_kb }),
        _ => bail!("cannot read /usr/bin/time's line {last:?}"),
    }
}

fn recording(dir: &Path, n: u64, binaries: u64) -> Result<PathBuf> {
    let db = dir.join(format!("synth-{n}-{binaries}.db"));
    if !db.exists() {
        crate::synth::run(&crate::synth::SynthArgs {
            processes: n,
            binaries,
            output: db.clone(),
        })?;
    }
    Ok(db)
}

pub fn run(args: &ScaleArgs) -> Result<()> {
    let forkprof = match &args.forkprof {
        Some(path) => path.clone(),
        None => {
            crate::run(Command::new("cargo").args(["build", "--release", "-p", "forkprof"]))?;
            crate::root().join("target/release/forkprof")
        }
    };
    let dir = crate::root().join(&args.dir);
    std::fs::create_dir_all(&dir)?;
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    println!(
        "host CPU: {cpu}; {} runs each; {} distinct binaries\n",
        args.runs, args.binaries
    );
    println!("| processes | command | wall (s) | s per million | max RSS (MB) | × baseline |");
    println!("|---:|---|---:|---:|---:|---:|");
    for &n in &args.sizes {
        let db = recording(&dir, n, args.binaries)?;
        let db_s = db.display().to_string();
        let out = |name: &str| dir.join(name).display().to_string();
        let baseline: Vec<String> = [
            "sqlite3",
            &db_s,
            "SELECT sum(ts_ns) FROM spawns; SELECT sum(ts_ns) FROM execs; \
             SELECT sum(ts_ns) FROM lds; SELECT sum(ts_ns) FROM exits;",
        ]
        .map(String::from)
        .to_vec();
        let fp = |extra: &[&str]| -> Vec<String> {
            let mut v = vec![
                forkprof.display().to_string(),
                "report".into(),
                db_s.clone(),
            ];
            v.extend(extra.iter().map(|s| s.to_string()));
            v
        };
        let parquet = out("out.parquet");
        let mut commands: Vec<(String, Vec<String>)> = vec![
            ("baseline: sqlite3 reads every row".into(), baseline),
            ("`report`".into(), fp(&[])),
            (
                "`export --parquet`".into(),
                vec![
                    forkprof.display().to_string(),
                    "export".into(),
                    db_s.clone(),
                    "--parquet".into(),
                    parquet.clone(),
                    "--force".into(),
                ],
            ),
        ];
        // Past 2 million processes the per-process outputs keep one binary in fifty (a
        // timeline of every process would be 15 GB): every process is still read and
        // assembled, which is what memory and time measure.
        let big = n > 2_000_000;
        let per_process: &[&str] = if big { &["--filter", "tool1"] } else { &[] };
        if !args.quick {
            let more: [(&str, Vec<String>); 10] = [
                ("`--by parent`", fp(&["--by", "parent"])),
                ("`--by ancestry`", fp(&["--by", "ancestry"])),
                ("`--by unit`", fp(&["--by", "unit"])),
                ("`--format json`", fp(&["--format", "json"])),
                (
                    "`--filter tool1 --from 10s --to 60s`",
                    fp(&["--filter", "tool1", "--from", "10s", "--to", "60s"]),
                ),
                (
                    "`--flamegraph`",
                    fp(&[
                        "--flamegraph",
                        &out("fg.svg"),
                        "--folded",
                        &out("fg.folded"),
                    ]),
                ),
                (
                    if big {
                        "`--format json --processes --filter tool1`"
                    } else {
                        "`--format json --processes`"
                    },
                    fp(&[&["--format", "json", "--processes"][..], per_process].concat()),
                ),
                (
                    if big {
                        "`--perfetto --filter tool1`"
                    } else {
                        "`--perfetto` (all processes)"
                    },
                    fp(&[&["--perfetto", &out("t.json")][..], per_process].concat()),
                ),
                ("`--format csv`", fp(&["--format", "csv"])),
                (
                    if big {
                        "`--format csv --processes --filter tool1`"
                    } else {
                        "`--format csv --processes`"
                    },
                    fp(&[&["--format", "csv", "--processes"][..], per_process].concat()),
                ),
            ];
            commands.extend(more.into_iter().map(|(a, b)| (a.to_string(), b)));
        }
        let mut base_s = None;
        for (name, argv) in &commands {
            let mut best: Option<Measured> = None;
            for _ in 0..args.runs {
                let _ = std::fs::remove_file(&parquet);
                let m = measure(argv)?;
                if best.as_ref().is_none_or(|b| m.wall_s < b.wall_s) {
                    best = Some(Measured {
                        wall_s: m.wall_s,
                        max_rss_kb: best
                            .as_ref()
                            .map_or(m.max_rss_kb, |b| b.max_rss_kb.max(m.max_rss_kb)),
                    });
                } else if let Some(b) = best.as_mut() {
                    b.max_rss_kb = b.max_rss_kb.max(m.max_rss_kb);
                }
            }
            let m = best.expect("runs >= 1");
            let base = *base_s.get_or_insert(m.wall_s);
            println!(
                "| {n} | {name} | {:.2} | {:.2} | {} | {:.2} |",
                m.wall_s,
                m.wall_s / (n as f64 / 1e6),
                m.max_rss_kb / 1024,
                m.wall_s / base.max(0.01),
            );
        }
    }
    println!("\nwall: the fastest run; max RSS: the largest of the runs.");
    Ok(())
}
