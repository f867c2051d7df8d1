//! `cargo xtask vm-test`: boots Debian's 6.1 and 6.12 kernels in qemu and runs fp-vmcheck,
//! which also runs the host test binaries of `HOST_TESTS` there.
use std::io::{BufRead as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use clap::{Args, ValueEnum};

use crate::{is_root, output, root, run};

#[derive(Args)]
pub struct VmArgs {
    /// Which kernel to boot.
    #[arg(long, value_enum, default_value_t = Which::All)]
    pub kernel: Which,
    /// Replace the table between README.md's kernel-support markers (needs every kernel).
    #[arg(long)]
    pub update_readme: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Which {
    #[value(name = "debian-6.1")]
    Debian61,
    #[value(name = "debian-6.12")]
    Debian612,
    All,
}

/// A kernel series: our name for it, and the apt meta-package whose dependency is its newest
/// image package.
struct Kernel {
    name: &'static str,
    meta: &'static str,
}

const KERNELS: &[Kernel] = &[
    Kernel {
        name: "debian-6.1",
        meta: "linux-image-cloud-amd64",
    },
    Kernel {
        name: "debian-6.12",
        meta: "linux-image-6.12-cloud-amd64",
    },
];

/// fp-vmcheck is killed after this long inside the guest ...
const GUEST_GUARD_S: u64 = 18 * 60;
/// ... and qemu after this long, so that the guard fires first and its output is seen.
const VM_TIMEOUT: Duration = Duration::from_secs(20 * 60);
/// The workspace binaries the guest runs, from target/debug.
const BINS: &[&str] = &["forkprof", "fp-workload", "fp-vmcheck"];
/// Host test files (tests/tests/NAME.rs) whose binaries the guest runs whole, from its
/// /fp/deps (so that they find forkprof and fp-workload in /fp, as on the host in
/// target/debug): the ones that need no gcc, terminal or service the guest lacks.
const HOST_TESTS: &[&str] = &["cgroups"];

const INIT: &str = r#"#!/bin/busybox sh
export PATH=/bin:/fp
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tracefs tracefs /sys/kernel/tracing || echo "VMINFO tracefs not mounted"
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null || echo "VMINFO debugfs not mounted"
mount -t cgroup2 cgroup2 /sys/fs/cgroup || echo "VMINFO cgroup2 not mounted"
echo "VMINFO release $(uname -r)"
cd /tmp
timeout -s KILL @GUARD@ /fp/fp-vmcheck
echo "VMINFO fp-vmcheck exit $?"
poweroff -f
"#;

/// What one boot printed.
#[derive(Default)]
struct Boot {
    release: Option<String>,
    /// (check, verdict, detail)
    checks: Vec<(String, String, String)>,
    done: bool,
    doctor: Option<String>,
    log_tail: Vec<String>,
    /// The guest kernel died of an int3 Oops (see `run_vm`).
    int3_oops: bool,
    ended: String,
}

pub fn run_vm(args: &VmArgs) -> Result<()> {
    crate::setup()?;
    let dir = root().join("target/vm");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    run(Command::new("cargo").current_dir(root()).args([
        "build",
        "-p",
        "forkprof",
        "-p",
        "forkprof-tests",
        "--bins",
    ]))?;
    let host_tests = build_host_tests()?;
    let initrd = build_initramfs(&dir, &host_tests)?;
    let mut failed = 0;
    let mut columns = vec![("host".to_string(), host_doctor(&dir))];
    let mut summary = Vec::new();
    for kernel in KERNELS {
        let selected = match args.kernel {
            Which::All => true,
            Which::Debian61 => kernel.name == "debian-6.1",
            Which::Debian612 => kernel.name == "debian-6.12",
        };
        if !selected {
            continue;
        }
        let doctor = dir.join(format!("{}.doctor.json", kernel.name));
        let _ = std::fs::remove_file(&doctor);
        let start = Instant::now();
        let mut booted =
            fetch_kernel(&dir, kernel).and_then(|vmlinuz| boot(&dir, kernel, &vmlinuz, &initrd));
        // Under TCG a guest CPU can run a kernel text site half patched while another one
        // rewrites a static branch (attaching a tracepoint does): the guest dies of an int3
        // Oops in kernel text, which no program of forkprof's can cause. One fresh boot, said.
        if let Ok(b) = &booted
            && !b.done
            && b.int3_oops
        {
            println!(
                "{} harness: the guest died of an int3 Oops in kernel text (emulated \
                 cross-modifying code); booting it once more",
                kernel.name
            );
            booted = fetch_kernel(&dir, kernel)
                .and_then(|vmlinuz| boot(&dir, kernel, &vmlinuz, &initrd));
        }
        let secs = start.elapsed().as_secs();
        let boot = match booted {
            Ok(b) => b,
            Err(e) => {
                println!("{} harness FAIL {e:#}", kernel.name);
                summary.push(format!("{}: harness failed ({secs} s)", kernel.name));
                columns.push((kernel.name.to_string(), None));
                failed += 1;
                continue;
            }
        };
        for (check, verdict, detail) in &boot.checks {
            println!("{} {check} {verdict} {detail}", kernel.name);
        }
        let count = |v: &str| boot.checks.iter().filter(|c| c.1 == v).count();
        // Anything but PASS or SKIP (a garbled verdict included) is a failure.
        failed += boot.checks.len() - count("PASS") - count("SKIP");
        if !boot.done {
            failed += 1;
            println!(
                "{} harness FAIL no VMCHECK-DONE: {}; last lines of the log:",
                kernel.name, boot.ended
            );
            for line in &boot.log_tail {
                println!("    {line}");
            }
        }
        if let Some(json) = &boot.doctor {
            std::fs::write(&doctor, json)?;
        }
        columns.push((
            kernel.name.to_string(),
            boot.doctor.is_some().then_some(doctor),
        ));
        summary.push(format!(
            "{} ({}): {} passed, {} failed, {} skipped, {secs} s",
            kernel.name,
            boot.release.as_deref().unwrap_or("?"),
            count("PASS"),
            count("FAIL"),
            count("SKIP")
        ));
    }
    for line in &summary {
        println!("vm-test: {line}");
    }
    let table = support_table(&dir, &columns)?;
    if columns.iter().any(|(_, c)| c.is_some()) {
        println!("\n{table}");
    } else {
        eprintln!("xtask: no `forkprof doctor --json` output anywhere: the support table is empty");
    }
    if args.update_readme {
        if failed > 0 || args.kernel != Which::All || columns.iter().any(|(_, c)| c.is_none()) {
            eprintln!(
                "xtask: README.md not updated: it needs every kernel's doctor and no failure"
            );
            failed += 1;
        } else {
            update_readme(&table)?;
        }
    }
    if failed > 0 {
        bail!("vm-test: {failed} failures");
    }
    Ok(())
}

/// The host's own `forkprof doctor --json`, saved for the table (root only).
fn host_doctor(dir: &Path) -> Option<PathBuf> {
    let path = dir.join("host.doctor.json");
    let _ = std::fs::remove_file(&path);
    if !is_root() {
        return None;
    }
    let json =
        output(Command::new(root().join("target/debug/forkprof")).args(["doctor", "--json"]));
    if !json.trim_start().starts_with('{') {
        eprintln!(
            "xtask: the host's `forkprof doctor --json` gave no JSON; its column stays empty"
        );
        return None;
    }
    std::fs::write(&path, json).ok()?;
    Some(path)
}

/// Markdown table of each kernel's phase sources, also written to target/vm/kernel-support.md.
fn support_table(dir: &Path, columns: &[(String, Option<PathBuf>)]) -> Result<String> {
    let mut cmd = Command::new(root().join("target/debug/fp-vmcheck"));
    cmd.arg("support-table");
    for (label, path) in columns {
        let path = path
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        cmd.arg(format!("{label}={path}"));
    }
    let out = cmd
        .output()
        .with_context(|| format!("cannot start {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    let path = dir.join("kernel-support.md");
    std::fs::write(&path, &table).with_context(|| format!("cannot write {}", path.display()))?;
    eprintln!("xtask: wrote {}", path.display());
    Ok(table)
}

fn update_readme(table: &str) -> Result<()> {
    let path = root().join("README.md");
    let text = std::fs::read_to_string(&path).context("cannot read README.md")?;
    let lines: Vec<&str> = text.lines().collect();
    let find = |marker: &str| lines.iter().position(|l| l.trim() == marker);
    let (Some(begin), Some(end)) = (
        find("<!-- kernel-support:begin -->"),
        find("<!-- kernel-support:end -->"),
    ) else {
        eprintln!("xtask: README.md has no kernel-support markers; left unchanged");
        return Ok(());
    };
    if end < begin {
        bail!("README.md: kernel-support:end comes before kernel-support:begin");
    }
    let mut new = lines[..=begin].join("\n");
    new.push('\n');
    new.push_str(table.trim_end());
    new.push('\n');
    new.push_str(&lines[end..].join("\n"));
    new.push('\n');
    std::fs::write(&path, new).context("cannot write README.md")?;
    eprintln!("xtask: README.md's kernel-support table updated");
    Ok(())
}

/// The newest image package of `kernel`'s series, extracted once: returns its vmlinuz, cached
/// as target/vm/kernels/PACKAGE.vmlinuz.
fn fetch_kernel(dir: &Path, kernel: &Kernel) -> Result<PathBuf> {
    let depends = || {
        output(Command::new("apt-cache").args(["depends", kernel.meta]))
            .lines()
            .find_map(|l| l.trim().strip_prefix("Depends: "))
            .filter(|p| p.starts_with("linux-image-"))
            .map(str::to_string)
    };
    let package = match depends() {
        Some(p) => p,
        None => {
            run(Command::new("apt-get").args(["update", "-qq"]))?;
            depends()
                .with_context(|| format!("apt-cache depends {}: no linux-image-*", kernel.meta))?
        }
    };
    let cache = dir.join("kernels");
    let vmlinuz = cache.join(format!("{package}.vmlinuz"));
    if vmlinuz.exists() {
        eprintln!("xtask: {}: {package} (cached)", kernel.name);
        return Ok(vmlinuz);
    }
    let work = cache.join(format!("{package}.download"));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    // apt downloads as its _apt user when it can write there (else it warns).
    std::fs::set_permissions(&work, std::os::unix::fs::PermissionsExt::from_mode(0o777))?;
    run(Command::new("apt-get")
        .current_dir(&work)
        .args(["download", "-qq", &package]))?;
    let deb = std::fs::read_dir(&work)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .with_context(|| format!("apt-get download {package} left no .deb"))?;
    let tree = work.join("x");
    run(Command::new("dpkg").arg("-x").arg(&deb).arg(&tree))?;
    let found = find_vmlinuz(&tree.join("boot"))
        .or_else(|| find_vmlinuz(&tree))
        .with_context(|| format!("{package} has no vmlinuz-*"))?;
    eprintln!(
        "xtask: {}: {package}, kernel at {}",
        kernel.name,
        found.display()
    );
    std::fs::copy(&found, &vmlinuz)?;
    std::fs::remove_dir_all(&work)?;
    Ok(vmlinuz)
}

fn find_vmlinuz(dir: &Path) -> Option<PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        let kind = entry.file_type().ok()?;
        if kind.is_dir() {
            if let Some(p) = find_vmlinuz(&path) {
                return Some(p);
            }
        } else if kind.is_file() && entry.file_name().to_string_lossy().starts_with("vmlinuz") {
            return Some(path);
        }
    }
    None
}

/// Builds the `HOST_TESTS` binaries and returns each one's name and path.
fn build_host_tests() -> Result<Vec<(&'static str, PathBuf)>> {
    let mut cargo = Command::new("cargo");
    cargo.current_dir(root()).args([
        "test",
        "-p",
        "forkprof-tests",
        "--no-run",
        "--message-format=json",
    ]);
    for name in HOST_TESTS {
        cargo.args(["--test", name]);
    }
    let said = output(&mut cargo);
    HOST_TESTS
        .iter()
        .map(|&name| {
            said.lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .find(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == name)
                .and_then(|m| m["executable"].as_str().map(PathBuf::from))
                .map(|path| (name, path))
                .with_context(|| format!("cargo test --no-run built no test binary {name}"))
        })
        .collect()
}

/// A cpio (newc, gzip) archive: busybox, /init, the binaries under /fp and their libraries,
/// and the host test binaries `host_tests` under /fp/deps.
fn build_initramfs(dir: &Path, host_tests: &[(&str, PathBuf)]) -> Result<PathBuf> {
    let stage = dir.join("initramfs");
    if stage.exists() {
        std::fs::remove_dir_all(&stage)?;
    }
    for d in ["bin", "fp", "etc", "proc", "sys", "dev", "tmp", "root"] {
        std::fs::create_dir_all(stage.join(d))?;
    }
    let busybox = Path::new("/bin/busybox");
    std::fs::copy(busybox, stage.join("bin/busybox"))
        .context("cannot copy /bin/busybox (busybox-static)")?;
    for applet in output(Command::new(busybox).arg("--list")).lines() {
        let link = stage.join("bin").join(applet.trim());
        if applet.trim().is_empty() || applet.contains('/') || link.exists() {
            continue;
        }
        std::os::unix::fs::symlink("busybox", link)?;
    }
    let fp = stage.join("fp");
    let mut dynamic = Vec::new();
    for (name, flags) in [("dyn_true", &[][..]), ("static_true", &["-static"][..])] {
        let src = dir.join("true.c");
        std::fs::write(&src, "int main(void) { return 0; }\n")?;
        run(Command::new("gcc")
            .args(["-O2", "-o"])
            .arg(fp.join(name))
            .arg(&src)
            .args(flags))?;
        if flags.is_empty() {
            dynamic.push(fp.join(name));
        }
    }
    // A 32-bit process that spawns through the ia32 syscall table only, and one that waits
    // and execs another, for fp-vmcheck's ia32 checks: built by the same functions as the
    // host tests'.
    for fixture in ["spawn32", "wait32"] {
        run(Command::new(root().join("target/debug/fp-vmcheck"))
            .arg(format!("build-{fixture}"))
            .arg(fp.join(fixture)))?;
    }
    for bin in BINS {
        let src = root().join("target/debug").join(bin);
        // Without debug info: forkprof's is most of its size, and the guest never needs it.
        run(Command::new("strip")
            .args(["--strip-debug", "-o"])
            .arg(fp.join(bin))
            .arg(&src))?;
        dynamic.push(fp.join(bin));
    }
    std::fs::create_dir_all(fp.join("deps"))?;
    for (name, src) in host_tests {
        let dst = fp.join("deps").join(name);
        run(Command::new("strip")
            .args(["--strip-debug", "-o"])
            .arg(&dst)
            .arg(src))?;
        dynamic.push(dst);
    }
    for bin in &dynamic {
        let ldd = output(Command::new("ldd").arg(bin));
        for lib in ldd.split_whitespace().filter(|t| t.starts_with('/')) {
            let dst = stage.join(lib.trim_start_matches('/'));
            if !dst.exists() {
                std::fs::create_dir_all(dst.parent().context("library path")?)?;
                std::fs::copy(lib, &dst).with_context(|| format!("cannot copy {lib}"))?;
            }
        }
    }
    let etc = stage.join("etc");
    std::fs::write(etc.join("passwd"), "root:x:0:0:root:/root:/bin/sh\n")?;
    std::fs::write(etc.join("group"), "root:x:0:\n")?;
    std::fs::write(etc.join("ld.so.conf"), "")?;
    // ld.so opens and unmaps /etc/ld.so.cache as on a real system: ld_reloc_init ends there.
    let _ = Command::new("ldconfig")
        .arg("-r")
        .arg(&stage)
        .stderr(Stdio::null())
        .status();
    if !etc.join("ld.so.cache").exists() {
        eprintln!(
            "xtask: ldconfig -r made no ld.so.cache; the guest's ld.so searches its default paths"
        );
    }
    let init = stage.join("init");
    std::fs::write(&init, INIT.replace("@GUARD@", &GUEST_GUARD_S.to_string()))?;
    std::fs::set_permissions(&init, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    let initrd = dir.join("initramfs.cpio.gz");
    run(Command::new("sh")
        .current_dir(&stage)
        .args([
            "-c",
            "find . | cpio -o -H newc --quiet | gzip -1 > \"$1\"",
            "sh",
        ])
        .arg(&initrd))?;
    let size = std::fs::metadata(&initrd)?.len();
    if size < 1024 {
        bail!("{} is only {size} bytes", initrd.display());
    }
    eprintln!("xtask: {} ({} MiB)", initrd.display(), size >> 20);
    Ok(initrd)
}

/// Boots `vmlinuz` with the initramfs, logging the console to target/vm/KERNEL.log.
fn boot(dir: &Path, kernel: &Kernel, vmlinuz: &Path, initrd: &Path) -> Result<Boot> {
    let accel = std::env::var("FORKPROF_VM_ACCEL").unwrap_or_else(|_| "tcg".into());
    let log_path = dir.join(format!("{}.log", kernel.name));
    let log = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&log_path)
        .with_context(|| format!("cannot create {}", log_path.display()))?;
    let mut cmd = Command::new("qemu-system-x86_64");
    cmd.args([
        "-accel", &accel, "-cpu", "max", "-m", "2G", "-smp", "2", "-kernel",
    ])
    .arg(vmlinuz)
    .arg("-initrd")
    .arg(initrd)
    .args(["-append", "console=ttyS0 rdinit=/init panic=-1 quiet"])
    .args(["-nographic", "-no-reboot"])
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(log.try_clone()?);
    eprintln!("xtask: $ {cmd:?}");
    eprintln!("xtask: {}: console in {}", kernel.name, log_path.display());
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start {cmd:?}"))?;
    let stdout = child.stdout.take().context("qemu's stdout")?;
    let name = kernel.name;
    let reader = std::thread::spawn(move || {
        let (mut log, mut lines) = (log, Vec::new());
        let mut input = std::io::BufReader::new(stdout);
        let mut buf = Vec::new();
        while matches!(input.read_until(b'\n', &mut buf), Ok(n) if n > 0) {
            let line = plain(&String::from_utf8_lossy(&buf));
            buf.clear();
            let _ = writeln!(log, "{line}");
            let shown: String = line.chars().take(160).collect();
            eprintln!("  [{name}] {shown}");
            lines.push(line);
        }
        lines
    });
    let start = Instant::now();
    let ended = loop {
        if let Some(status) = child.try_wait()? {
            break format!(
                "qemu exited ({status}) after {} s",
                start.elapsed().as_secs()
            );
        }
        if start.elapsed() > VM_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            break format!("timed out: qemu killed after {} s", VM_TIMEOUT.as_secs());
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let lines = reader
        .join()
        .map_err(|_| anyhow::anyhow!("the console reader panicked"))?;
    let mut boot = parse(&lines);
    boot.ended = ended;
    // qemu's own stderr went to the log too: show the log's end, not only the console's.
    let log_text = std::fs::read_to_string(&log_path).unwrap_or_default();
    let all: Vec<&str> = log_text.lines().collect();
    boot.int3_oops = log_text.contains("Oops: int3");
    boot.log_tail = all[all.len().saturating_sub(25)..]
        .iter()
        .map(|l| l.to_string())
        .collect();
    Ok(boot)
}

/// `line` without the firmware's terminal escapes (ESC c, ESC [ ... letter), the serial line's
/// \r and other control characters.
fn plain(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            if chars.next() == Some('[') {
                chars.by_ref().find(|c| c.is_ascii_alphabetic());
            }
        } else if !c.is_control() || c == '\t' {
            out.push(c);
        }
    }
    out
}

/// Finds fp-vmcheck's lines in the console output (a kernel message may precede one).
fn parse(lines: &[String]) -> Boot {
    let mut boot = Boot::default();
    for line in lines {
        if line.contains("VMCHECK-DONE") {
            boot.done = true;
        } else if let Some(i) = line.find("VMCHECK ") {
            let mut parts = line[i + "VMCHECK ".len()..].splitn(3, ' ');
            let check = parts.next().unwrap_or("?").to_string();
            let verdict = parts.next().unwrap_or("?").to_string();
            boot.checks
                .push((check, verdict, parts.next().unwrap_or("").to_string()));
        } else if let Some(i) = line.find("VMDOCTOR ") {
            boot.doctor = Some(line[i + "VMDOCTOR ".len()..].to_string());
        } else if let Some(i) = line.find("VMINFO release ") {
            boot.release = Some(line[i + "VMINFO release ".len()..].trim().to_string());
        }
    }
    boot
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn console_lines_are_found_behind_escapes_and_kernel_messages() {
        let lines: Vec<String> = [
            "\x1bc\x1b[?7l\x1b[2JVMINFO release 6.1.0-57-cloud-amd64\r",
            "VMCHECK doctor PASS attached [tp_btf sys_enter]; failed []",
            "[   12.3] random: crng init doneVMCHECK lineage FAIL pid 5 parent 1 (root 2)",
            "VMDOCTOR {\"kernel\":\"6.1\"}",
            "VMCHECK-DONE passed=1 failed=1",
        ]
        .iter()
        .map(|l| plain(l))
        .collect();
        let boot = parse(&lines);
        assert_eq!(boot.release.as_deref(), Some("6.1.0-57-cloud-amd64"));
        assert_eq!(boot.checks.len(), 2);
        assert_eq!(boot.checks[1].0, "lineage");
        assert_eq!(boot.checks[1].1, "FAIL");
        assert_eq!(boot.checks[1].2, "pid 5 parent 1 (root 2)");
        assert_eq!(boot.doctor.as_deref(), Some("{\"kernel\":\"6.1\"}"));
        assert!(boot.done);
    }
}
