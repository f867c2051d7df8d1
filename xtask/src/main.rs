//! Project tasks: `cargo xtask setup | test | demo`.
//!
//! - setup: installs what a fresh machine lacks to build the eBPF side (nightly rust-src,
//!   LLVM 22 development packages, bpf-linker built against them) and the tools the tests
//!   drive (DuckDB's Python package among them). Idempotent: it checks first and says what
//!   it does.
//! - test:  setup, then fmt and clippy (warnings denied, eBPF crate included), unit tests,
//!   and the end-to-end tests that load the real eBPF programs (root).
//! - demo:  setup, build, and `forkprof run` on a built-in spawn workload.
//! - vm-test: forkprof's functional checks on Debian's 6.1 and 6.12 kernels, in qemu (also
//!   the last step of `test`, unless `--no-vm` or a test filter is given).
use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context as _, Result, bail};
use clap::{Parser, Subcommand};

mod bench;
mod dist;
mod scale;
mod synth;
mod vm;

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install the build and test prerequisites that are missing.
    Setup,
    /// Check formatting and lints, then run every test (the eBPF ones need root).
    Test {
        /// Skip `vm-test` (Debian's kernels in qemu, a few minutes).
        #[arg(long)]
        no_vm: bool,
        /// Arguments passed to the test binaries (e.g. a test name filter).
        #[arg(trailing_var_arg = true)]
        filter: Vec<String>,
    },
    /// Build and run forkprof on a built-in workload, showing its report.
    Demo,
    /// Boot Debian's kernels in qemu and run forkprof's functional checks inside.
    VmTest {
        #[command(flatten)]
        args: vm::VmArgs,
    },
    /// Run the fuzz targets (fuzz/) for a while.
    Fuzz {
        /// Seconds per target.
        #[arg(long, default_value_t = 60)]
        seconds: u32,
    },
    /// Write a synthetic recording of N processes (for benchmarking `forkprof report`).
    SynthRecording {
        #[command(flatten)]
        args: synth::SynthArgs,
    },
    /// Benchmarks: forkprof's overhead on a spawn loop, side by side with peers.
    Bench {
        #[command(flatten)]
        args: bench::BenchArgs,
    },
    /// Time and peak memory of `report` and `export` on 1 and 10 million synthetic
    /// processes, beside sqlite3 reading every row.
    BenchReport {
        #[command(flatten)]
        args: scale::ScaleArgs,
    },
    /// Build the Debian package (cargo-deb) and print its path.
    Dist,
}

const APT_PACKAGES: &[&str] = &[
    // bpf-linker's LLVM (same major as the nightly's LLVM)
    "llvm-22-dev",
    "libpolly-22-dev",
    "libzstd-dev",
    "zlib1g-dev",
    // used by the end-to-end tests
    "bpftool",
    "util-linux",
    "e2fsprogs",
    "tmux",
    "sqlite3",
    "prometheus",
    "curl",
    // the accuracy tests' C fixtures: static, dynamic, and linked to several libraries
    "gcc",
    "libc6-dev",
    "libssl-dev",
    // cargo xtask vm-test: Debian's kernels booted in qemu from an initramfs
    "qemu-system-x86",
    "cpio",
    "busybox-static",
    // `forkprof export --parquet`'s tests read the files with DuckDB's Python package
    "python3",
    "python3-pip",
    // `cargo xtask dist` and its tests: dpkg-shlibdeps (cargo-deb's $auto depends),
    // systemd-analyze verify, strace (the unit's system-call filter)
    "dpkg-dev",
    "systemd",
    "strace",
];

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

pub fn run(cmd: &mut Command) -> Result<()> {
    eprintln!("xtask: $ {cmd:?}");
    let status = cmd
        .status()
        .with_context(|| format!("cannot start {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok(())
}

pub fn output(cmd: &mut Command) -> String {
    cmd.output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

pub fn is_root() -> bool {
    output(Command::new("id").arg("-u")).trim() == "0"
}

/// The bpf-linker that `setup` installs (built against LLVM 22, the nightly's).
const BPF_LINKER_VERSION: &str = "=0.13.0";

pub fn setup() -> Result<()> {
    let toolchains = output(Command::new("rustup").args(["toolchain", "list"]));
    if !toolchains.lines().any(|l| l.starts_with("nightly")) {
        run(Command::new("rustup").args([
            "toolchain",
            "install",
            "nightly",
            "--profile",
            "minimal",
        ]))?;
    }
    let components = output(Command::new("rustup").args([
        "component",
        "list",
        "--installed",
        "--toolchain",
        "nightly",
    ]));
    for component in ["rust-src", "clippy", "rustfmt"] {
        if !components.lines().any(|l| l.starts_with(component)) {
            run(Command::new("rustup").args([
                "component",
                "add",
                component,
                "--toolchain",
                "nightly",
            ]))?;
        }
    }
    let missing: Vec<&str> = APT_PACKAGES
        .iter()
        .copied()
        .filter(|p| {
            !output(Command::new("dpkg-query").args(["-W", "-f=${Status}", p]))
                .contains("install ok installed")
        })
        .collect();
    if !missing.is_empty() {
        if !is_root() {
            bail!("missing packages {missing:?}: run `cargo xtask setup` as root");
        }
        run(Command::new("apt-get").args(["update", "-qq"]))?;
        run(Command::new("apt-get")
            .args(["install", "-y", "-qq", "--no-install-recommends"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive"))?;
    }
    let duckdb_ok = Command::new("python3")
        .args(["-c", "import duckdb"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !duckdb_ok {
        let pip = |extra: &[&str]| {
            run(Command::new("python3")
                .args(["-m", "pip", "install", "--quiet", "duckdb"])
                .args(extra))
        };
        // Debian's own python3 refuses pip outside a virtual environment (PEP 668); DuckDB
        // is a test tool of this machine, so it goes there all the same.
        if pip(&[]).is_err() {
            pip(&["--break-system-packages"])?;
        }
    }
    let fuzz_ok = Command::new("cargo")
        .args(["fuzz", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !fuzz_ok {
        run(Command::new("cargo").args(["install", "cargo-fuzz", "--locked"]))?;
    }
    let deb_ok = Command::new("cargo")
        .args(["deb", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !deb_ok {
        run(Command::new("cargo").args(["install", "cargo-deb", "--locked"]))?;
    }
    // One version on every machine: the linker's LLVM passes shape the programs' code, and
    // forkprof's benchmarks compare programs built on different days. Another version is
    // replaced.
    let linker_ok = Command::new("bpf-linker")
        .arg("--version")
        .output()
        .is_ok_and(|o| {
            o.status.success()
                && String::from_utf8_lossy(&o.stdout).trim()
                    == format!("bpf-linker {}", BPF_LINKER_VERSION.trim_start_matches('='))
        });
    if !linker_ok {
        run(Command::new("cargo")
            .args([
                "install",
                "--force",
                "bpf-linker",
                "--version",
                BPF_LINKER_VERSION,
                "--no-default-features",
                "--features",
                "llvm-22",
                "--locked",
            ])
            .env("LLVM_PREFIX", "/usr/lib/llvm-22"))?;
    }
    eprintln!("xtask: setup complete");
    Ok(())
}

fn cargo() -> Command {
    let mut c = Command::new("cargo");
    c.current_dir(root());
    c
}

fn test(filter: &[String], no_vm: bool) -> Result<()> {
    setup()?;
    run(cargo().args(["fmt", "--all", "--check"]))?;
    run(cargo().args([
        "clippy",
        "--workspace",
        "--exclude",
        "forkprof-ebpf",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    run(Command::new("rustup")
        .current_dir(root().join("forkprof-ebpf"))
        .args([
            "run",
            "nightly",
            "cargo",
            "clippy",
            "--release",
            "--target",
            "bpfel-unknown-none",
            "-Z",
            "build-std=core",
            "--",
            "-D",
            "warnings",
        ]))?;
    if !is_root() {
        bail!(
            "the end-to-end tests load eBPF programs: run `cargo xtask test` as root \
             (sudo -E cargo xtask test)"
        );
    }
    // The end-to-end tests drive the forkprof binary, which `cargo test` alone does not build.
    run(cargo().args([
        "build",
        "--workspace",
        "--exclude",
        "forkprof-ebpf",
        "--bins",
    ]))?;
    // tests/tests/packaging.rs installs the .deb: a release build, made once here.
    let deb = dist::build()?;
    eprintln!("xtask: packaged {}", deb.display());
    let (passed, failed) = run_tests(
        cargo()
            .args(["test", "--workspace", "--exclude", "forkprof-ebpf"])
            // Every test binary runs even after one fails, so one run shows every failure.
            .args(["--no-fail-fast", "--lib", "--bins", "--tests", "--"])
            .args(["--test-threads", "1"])
            .args(filter)
            // Here a test that needs root fails rather than skips (tests/src/lib.rs).
            .env("FORKPROF_REQUIRE_ROOT", "1"),
    )?;
    if filter.is_empty() {
        fuzz(FUZZ_SECONDS)?;
    }
    let vm = if filter.is_empty() && !no_vm {
        vm::run_vm(&vm::VmArgs {
            kernel: vm::Which::All,
            update_readme: false,
        })
    } else {
        Ok(())
    };
    // One closing line for the whole run (cargo prints one per test binary).
    println!("tests: {passed} passed, {failed} failed");
    vm
}

/// Runs `cargo test`, passing its output through, and adds up its "test result" lines.
fn run_tests(cmd: &mut Command) -> Result<(u64, u64)> {
    use std::io::BufRead as _;
    eprintln!("xtask: $ {cmd:?}");
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {cmd:?}"))?;
    let (mut passed, mut failed) = (0, 0);
    let stdout = child.stdout.take().context("cargo test's stdout")?;
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line?;
        println!("{line}");
        if let Some(rest) = line.strip_prefix("test result: ") {
            let count = |word: &str| -> u64 {
                rest.split(';')
                    .find_map(|part| part.trim().strip_suffix(word))
                    .and_then(|n| n.trim().rsplit(' ').next()?.parse().ok())
                    .unwrap_or(0)
            };
            passed += count(" passed");
            failed += count(" failed");
        }
    }
    let status = child.wait()?;
    if !status.success() {
        println!("tests: {passed} passed, {failed} failed");
        bail!("{cmd:?} failed: {status}");
    }
    Ok((passed, failed))
}

/// Seconds each fuzz target runs in `cargo xtask test`.
const FUZZ_SECONDS: u32 = 20;
const FUZZ_TARGETS: &[&str] = &["decode_record", "recording_reader"];

/// Runs each fuzz target for a bounded time from the corpus kept in fuzz/corpus. New inputs
/// go to a scratch directory; a crash fails the run and leaves its input in fuzz/artifacts.
fn fuzz(seconds: u32) -> Result<()> {
    for target in FUZZ_TARGETS {
        let scratch = std::env::temp_dir().join(format!("forkprof-fuzz-{target}"));
        std::fs::create_dir_all(&scratch)?;
        run(Command::new("rustup")
            .current_dir(root())
            .args(["run", "nightly", "cargo", "fuzz", "run", target])
            .arg(&scratch)
            .arg(format!("fuzz/corpus/{target}"))
            .arg("--")
            .arg(format!("-max_total_time={seconds}"))
            .env("AYA_BUILD_SKIP", "1"))?;
        let _ = std::fs::remove_dir_all(&scratch);
    }
    Ok(())
}

fn demo() -> Result<()> {
    setup()?;
    run(cargo().args([
        "build",
        "--release",
        "-p",
        "forkprof",
        "-p",
        "forkprof-tests",
    ]))?;
    let target = root().join("target/release");
    let forkprof = target.join("forkprof");
    if !is_root() {
        bail!("forkprof loads eBPF programs: run `cargo xtask demo` as root");
    }
    run(Command::new(&forkprof)
        .args(["run", "--"])
        .arg(target.join("fp-workload"))
        .arg("demo"))
}

fn main() -> Result<()> {
    match Cli::parse().task {
        Task::Setup => setup(),
        Task::Test { filter, no_vm } => test(&filter, no_vm),
        Task::VmTest { args } => vm::run_vm(&args),
        Task::Demo => demo(),
        Task::Fuzz { seconds } => fuzz(seconds),
        Task::Bench { args } => bench::run(&args),
        Task::SynthRecording { args } => synth::run(&args),
        Task::Dist => dist::dist(),
        Task::BenchReport { args } => scale::run(&args),
    }
}
