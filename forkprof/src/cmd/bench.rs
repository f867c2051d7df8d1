//! `forkprof bench`: the classic process-creation experiments, each run bare (wall time per
//! iteration) and traced (phase attribution and forkprof's own overhead), with the ratios
//! people have quoted since 1989 and the phase that explains each of them.
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, bail};
use comfy_table::{Cell, Table, presets::UTF8_FULL_CONDENSED};

use crate::cli::BenchArgs;
use crate::loader;
use crate::model::bench::{RATIOS, RowResult, ratios};
use crate::privilege::InvokingUser;

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
        iterations: 1000,
        quick_iterations: 150,
    }
}

/// Rows of 50-200 µs iterations: more of them, so that a run lasts as long as the others
/// and its median is as steady.
const fn short(s: Spec) -> Spec {
    Spec {
        iterations: 5000,
        quick_iterations: 500,
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
];

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
}

impl Drop for Workdir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn us_per_iter(stdout: &[u8]) -> Result<f64> {
    String::from_utf8_lossy(stdout)
        .lines()
        .find_map(|l| l.strip_prefix("us_per_iter "))
        .and_then(|v| v.trim().parse().ok())
        .context("the workload printed no us_per_iter")
}

fn argv(work: &Workdir, s: &Spec, iterations: u64) -> Option<Vec<String>> {
    let driver = work.path(s.driver)?;
    let mut v = vec![
        driver.display().to_string(),
        s.method.to_string(),
        iterations.to_string(),
    ];
    if let Some(p) = s.program {
        v.push(work.path(p)?.display().to_string());
        v.extend(s.args.iter().map(|a| a.to_string()));
    }
    Some(v)
}

/// One run of the driver alone, as the invoking user: µs per iteration.
fn bare_run(s: &Spec, argv: &[String], user: Option<&InvokingUser>) -> Result<f64> {
    let mut bare = Command::new(&argv[0]);
    bare.args(&argv[1..])
        .env("FP_RSS_MIB", s.rss_mib.to_string());
    if let Some(u) = user.cloned() {
        // SAFETY: the closure only makes raw syscalls between fork and exec.
        unsafe { bare.pre_exec(move || u.become_user()) };
    }
    let out = bare
        .output()
        .with_context(|| format!("running {}", argv[0]))?;
    if !out.status.success() {
        bail!(
            "{}: {}",
            s.name,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    us_per_iter(&out.stdout)
}

/// The median of a/b over PAIRED_RUNS runs of rows `a` and `b` in turn.
fn paired_ratio(
    work: &Workdir,
    (a, b): (&Spec, &Spec),
    iterations: (u64, u64),
    user: Option<&InvokingUser>,
) -> Result<Option<f64>> {
    let (Some(argv_a), Some(argv_b)) = (argv(work, a, iterations.0), argv(work, b, iterations.1))
    else {
        return Ok(None);
    };
    let mut ratios = Vec::with_capacity(PAIRED_RUNS);
    for _ in 0..PAIRED_RUNS {
        let ta = bare_run(a, &argv_a, user)?;
        let tb = bare_run(b, &argv_b, user)?;
        ratios.push(ta / tb);
    }
    ratios.sort_by(f64::total_cmp);
    Ok(Some(ratios[ratios.len() / 2]))
}

fn run_row(
    work: &Workdir,
    s: &Spec,
    iterations: u64,
    user: Option<&InvokingUser>,
) -> Result<Option<RowResult>> {
    let Some(argv) = argv(work, s, iterations) else {
        return Ok(None);
    };
    // Bare: the driver alone, as the invoking user; the median of BARE_RUNS runs, because
    // single runs vary by 10-15% on a noisy machine.
    let mut runs = Vec::with_capacity(BARE_RUNS);
    for _ in 0..BARE_RUNS {
        runs.push(bare_run(s, &argv, user)?);
    }
    runs.sort_by(f64::total_cmp);
    let bare_us = runs[runs.len() / 2];
    // Traced: the same through `forkprof run`.
    let report = work.dir.join("report.json");
    let out = Command::new(std::env::current_exe()?)
        .args(["run", "--json", "--report"])
        .arg(&report)
        .arg("--")
        .args(&argv)
        .env("FP_RSS_MIB", s.rss_mib.to_string())
        .output()?;
    if !out.status.success() {
        bail!(
            "{} (traced): {}",
            s.name,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let traced_us = us_per_iter(&out.stdout)?;
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&report)?)?;
    let mut sums: std::collections::BTreeMap<String, f64> = Default::default();
    for p in json["processes"].as_array().into_iter().flatten() {
        if p["method"] == "unknown" {
            continue; // the driver itself
        }
        for (k, v) in p["phases"].as_object().into_iter().flatten() {
            let v = v.as_f64().unwrap_or(0.0);
            let v = if k == "cow_faults" { v } else { v / 1e3 };
            *sums.entry(k.clone()).or_default() += v;
        }
    }
    let phases_us: std::collections::BTreeMap<String, f64> = sums
        .into_iter()
        .map(|(k, v)| (k, v / iterations as f64))
        .collect();
    let cost = phases_us.get("spawn_cost").copied().unwrap_or(0.0);
    Ok(Some(RowResult {
        name: s.name.into(),
        iterations,
        us_per_iter: bare_us,
        us_per_iter_traced: traced_us,
        spawn_cost_coverage: cost / traced_us,
        tracing_overhead: traced_us / bare_us - 1.0,
        phases_us,
        rss_mib: s.rss_mib,
    }))
}

/// Bare runs per row; the median is reported.
const BARE_RUNS: usize = 3;
/// Runs of each row in the paired measurement of a ratio.
const PAIRED_RUNS: usize = 5;

const COLUMNS: [&str; 10] = [
    "fork",
    "pagetable_copy",
    "vfork_wait",
    "exec_prepare",
    "exec_load",
    "ld_start",
    "ld_map",
    "ld_reloc_init",
    "cow_faults",
    "exit_teardown",
];

pub fn run(args: BenchArgs) -> Result<i32> {
    loader::check_privileges()?;
    let user = InvokingUser::from_env()?;
    let work = Workdir::new(user.as_ref())?;
    let mut results = Vec::new();
    let mut skipped = Vec::new();
    for s in SPECS {
        if !args.rows.is_empty() && !args.rows.iter().any(|r| s.name.contains(r.as_str())) {
            continue;
        }
        let iterations = match (args.iterations, args.quick) {
            (Some(n), _) => n,
            (None, true) => s.quick_iterations,
            (None, false) => s.iterations,
        };
        if iterations == 0 {
            continue;
        }
        eprint!("forkprof bench: {:<28} ", s.name);
        let _ = std::io::stderr().flush();
        match run_row(&work, s, iterations, user.as_ref())? {
            Some(r) => {
                eprintln!("{:>9.1} µs/iter", r.us_per_iter);
                results.push(r);
            }
            None => {
                eprintln!("skipped: a workload was not built into this forkprof");
                skipped.push(s.name);
            }
        }
    }
    let mut paired = std::collections::BTreeMap::new();
    for (name, a, b) in RATIOS {
        let spec = |n: &str| SPECS.iter().find(|s| s.name == n);
        let ran = |n: &str| results.iter().find(|r| r.name == n).map(|r| r.iterations);
        if let (Some(sa), Some(sb), Some(ia), Some(ib)) = (spec(a), spec(b), ran(a), ran(b)) {
            eprint!("forkprof bench: {name:<34} ");
            let _ = std::io::stderr().flush();
            let iterations = (ia.div_ceil(2), ib.div_ceil(2));
            if let Some(v) = paired_ratio(&work, (sa, sb), iterations, user.as_ref())? {
                eprintln!("{v:.2}× over {PAIRED_RUNS} paired runs");
                paired.insert(name.to_string(), v);
            }
        }
    }
    let ratios = ratios(&results, &paired);
    if args.json {
        let doc = serde_json::json!({"rows": results, "ratios": ratios, "skipped": skipped});
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(0);
    }
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    let mut header = vec![
        "experiment",
        "µs/iter",
        "traced overhead",
        "spawn_cost coverage",
    ];
    header.extend(COLUMNS);
    t.set_header(header);
    for r in &results {
        let mut row = vec![
            Cell::new(&r.name),
            Cell::new(format!("{:.1}", r.us_per_iter)),
            Cell::new(format!("{:+.1}%", 100.0 * r.tracing_overhead)),
            Cell::new(format!("{:.0}%", 100.0 * r.spawn_cost_coverage)),
        ];
        for c in COLUMNS {
            row.push(Cell::new(match r.phases_us.get(c) {
                Some(v) if c == "cow_faults" => format!("{v:.1}"),
                Some(v) => format!("{v:.1}"),
                None => "-".into(),
            }));
        }
        t.add_row(row);
    }
    println!(
        "Per iteration (µs; cow_faults: faults). Phase columns: means over the spawned processes."
    );
    println!("{t}");
    println!("\nRatios");
    for r in &ratios {
        println!("  {}", r.text);
    }
    Ok(0)
}
