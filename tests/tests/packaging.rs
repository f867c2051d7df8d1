//! forkprof as a service: the Prometheus rules (promtool), the systemd unit (systemd-analyze,
//! and a real `forkprof monitor` run with the unit's credentials and traced for its system
//! calls), and the Debian package `cargo xtask dist` makes, installed with dpkg into an
//! empty root that holds only what the package depends on.
//!
//! systemd is not PID 1 on the machines these tests run on, so the unit itself cannot be
//! started: its parts are checked one by one instead (what the kernel sees of them).
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use forkprof_tests::{
    Terminated, forkprof, free_port, needs_root, root_required, scrape, succeeded, target_dir,
    tempdir, wait_for,
};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the workspace")
        .to_path_buf()
}

fn unit_file() -> PathBuf {
    workspace().join("packaging/systemd/forkprof-monitor.service")
}

fn rules_dir() -> PathBuf {
    workspace().join("packaging/prometheus")
}

/// Runs a tool `cargo xtask setup` installs; a missing one fails the test with what to do.
fn tool(name: &str, configure: impl FnOnce(&mut Command)) -> Output {
    let mut c = Command::new(name);
    configure(&mut c);
    c.output()
        .unwrap_or_else(|e| panic!("cannot run {name} ({e}): cargo xtask setup installs it"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The values of `Key=` in the unit (every line of it, in order).
fn unit_values(key: &str) -> Vec<String> {
    let unit = std::fs::read_to_string(unit_file()).expect("the unit");
    let prefix = format!("{key}=");
    unit.lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(str::to_string)
        .collect()
}

/// setpriv's spelling of the unit's capability set: `+bpf,+perfmon,...`.
fn unit_caps() -> String {
    let bounding = unit_values("CapabilityBoundingSet");
    let ambient = unit_values("AmbientCapabilities");
    assert_eq!(
        bounding, ambient,
        "the unit must grant (ambient) what it bounds"
    );
    let caps: Vec<String> = bounding[0]
        .split_whitespace()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect();
    assert!(caps.contains(&"+bpf".to_string()), "{caps:?}");
    caps.join(",")
}

#[test]
fn rules_pass_promtool_check_and_their_unit_tests() {
    let check = tool("promtool", |c| {
        c.args(["check", "rules", "forkprof-rules.yml"])
            .current_dir(rules_dir());
    });
    succeeded(&check);
    assert!(text(&check.stdout).contains("SUCCESS"), "{check:?}");
    let test = tool("promtool", |c| {
        c.args(["test", "rules", "forkprof-rules.test.yml"])
            .current_dir(rules_dir());
    });
    assert!(
        test.status.success() && text(&test.stdout).contains("SUCCESS"),
        "promtool test rules failed:\n{}{}",
        text(&test.stdout),
        text(&test.stderr)
    );
}

/// The unit with ExecStart pointing at `binary`, in a fresh directory, and a MANPATH that
/// holds forkprof's man page (verify runs `man` for `Documentation=man:forkprof(1)`).
fn unit_for(binary: &Path) -> (PathBuf, PathBuf) {
    let dir = tempdir();
    let unit = std::fs::read_to_string(unit_file())
        .unwrap()
        .replace("/usr/bin/forkprof", binary.to_str().unwrap());
    let path = dir.join("forkprof-monitor.service");
    std::fs::write(&path, unit).unwrap();
    let man1 = dir.join("man/man1");
    std::fs::create_dir_all(&man1).unwrap();
    let page = tool(forkprof().to_str().unwrap(), |c| {
        c.arg("man");
    });
    succeeded(&page);
    std::fs::write(man1.join("forkprof.1"), &page.stdout).unwrap();
    (path, dir.join("man"))
}

#[test]
fn unit_passes_systemd_analyze_verify_and_security() {
    let (unit, manpath) = unit_for(&forkprof());
    let verify = tool("systemd-analyze", |c| {
        c.arg("verify").arg(&unit).env("MANPATH", &manpath);
    });
    // verify exits 0 on some warnings (an unknown key, a bad value): none is accepted.
    assert!(
        verify.status.success() && verify.stderr.is_empty() && verify.stdout.is_empty(),
        "systemd-analyze verify: {}{}",
        text(&verify.stdout),
        text(&verify.stderr)
    );
    // The same unit with a misspelled key must draw a warning: this check can fail.
    let broken = unit.with_file_name("broken.service");
    let body = std::fs::read_to_string(&unit).unwrap();
    std::fs::write(
        &broken,
        body.replace("ProtectClock=yes", "ProtectClocks=yes"),
    )
    .unwrap();
    let bad = tool("systemd-analyze", |c| {
        c.arg("verify").arg(&broken).env("MANPATH", &manpath);
    });
    assert!(
        text(&bad.stderr).contains("ProtectClocks"),
        "{}",
        text(&bad.stderr)
    );
    // systemd's own score of the sandbox (0 safest, 10 none). 2.3 when the unit was written;
    // this fails if hardening is dropped without thought.
    let security = tool("systemd-analyze", |c| {
        c.args(["security", "--offline=true", "--no-pager"])
            .arg(&unit);
    });
    let report = text(&security.stdout) + &text(&security.stderr);
    let exposure: f64 = report
        .lines()
        .find_map(|l| l.split("forkprof-monitor.service: ").nth(1))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in:\n{report}"));
    assert!(exposure <= 3.0, "exposure {exposure} > 3.0:\n{report}");
    let _ = std::fs::remove_dir_all(unit.parent().unwrap());
}

/// The value of one sample line `name{labels} value` in a scrape.
fn sample(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

/// Scrapes until `done` holds for the body (30 s at most).
fn scrape_until(port: u16, what: &str, done: impl Fn(&str) -> bool) -> String {
    wait_for(
        &format!("monitor to have {what}"),
        Duration::from_secs(30),
        || scrape(port).filter(|body| done(body)),
    )
}

/// Spawns /usr/bin/true `n` times, waiting for each.
fn spawn_true(n: usize) {
    for _ in 0..n {
        assert!(Command::new("/usr/bin/true").status().unwrap().success());
    }
}

/// `forkprof monitor` as the unit runs it, as far as this machine allows without systemd as
/// PID 1: an unprivileged user (the unit's DynamicUser=) holding only the unit's
/// capabilities, no_new_privs, and every file system read-only in its own mount namespace
/// (ProtectSystem=strict, ProtectKernelTunables=, ProtectControlGroups=). It loads its
/// programs, counts processes spawned, and serves every metric the rules read.
#[test]
fn monitor_runs_with_the_units_credentials_and_read_only_file_systems() {
    needs_root!();
    let caps = unit_caps();
    // A copy that the unprivileged user can execute, whatever the checkout's modes.
    let dir = tempdir();
    let binary = dir.join("forkprof");
    std::fs::copy(forkprof(), &binary).unwrap();
    let port = free_port();
    let script = format!(
        "findmnt -rno TARGET | while read -r m; do \
           mount -o remount,bind,ro \"$(printf '%b' \"$m\")\" 2>/dev/null; done; \
         touch /var/tmp/forkprof-rw-check 2>/dev/null && {{ echo 'file systems still writable'; exit 99; }}; \
         exec setpriv --reuid=65534 --regid=65534 --clear-groups --no-new-privs \
           --inh-caps=-all,{caps} --ambient-caps=-all,{caps} --bounding-set=-all,{caps} \
           {bin} monitor --listen 127.0.0.1:{port} --top-binaries 1000",
        bin = binary.display()
    );
    let monitor = Terminated(
        Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    scrape_until(port, "served /metrics", |_| true);
    let series = "forkprof_binary_spawns_total{binary=\"/usr/bin/true\"}";
    spawn_true(20);
    let body = scrape_until(port, "counted 20 spawns of /usr/bin/true", |b| {
        sample(b, series).is_some_and(|n| n >= 20.0)
    });
    // Every forkprof series the rules read is served.
    let rules = std::fs::read_to_string(rules_dir().join("forkprof-rules.yml")).unwrap();
    let mut names: Vec<&str> = rules
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("forkprof_") && w.ends_with("_total"))
        .collect();
    names.sort_unstable();
    names.dedup();
    assert!(names.len() >= 4, "{names:?}");
    for name in names {
        assert!(
            body.lines().any(|l| l.starts_with(name)),
            "the rules read {name}, which monitor does not serve:\n{body}"
        );
    }
    drop(monitor);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The names of the system calls an allow-list `SystemCallFilter=` value admits, expanded
/// by systemd-analyze (groups include groups).
fn allowed_syscalls(filter: &str) -> std::collections::HashSet<String> {
    let mut out = std::collections::HashSet::new();
    for item in filter.split_whitespace() {
        if !item.starts_with('@') {
            out.insert(item.to_string());
            continue;
        }
        let listing = tool("systemd-analyze", |c| {
            c.args(["syscall-filter", "--no-pager", item]);
        });
        succeeded(&listing);
        for line in text(&listing.stdout).lines().skip(1) {
            let word = line.trim();
            if word.starts_with('@') {
                out.extend(allowed_syscalls(word));
            } else if !word.is_empty() && !word.starts_with('#') {
                out.insert(word.to_string());
            }
        }
    }
    out
}

/// Every system call `forkprof monitor` makes (loading and attaching its programs, serving a
/// scrape, stopping on SIGTERM), traced with strace, is one the unit's SystemCallFilter=
/// allows: seccomp would otherwise fail it with EPERM under systemd.
#[test]
fn monitor_makes_only_system_calls_the_units_filter_allows() {
    needs_root!();
    let filters = unit_values("SystemCallFilter");
    assert_eq!(filters.len(), 1, "one allow list: {filters:?}");
    let allowed = allowed_syscalls(&filters[0]);
    assert!(
        allowed.contains("bpf") && allowed.contains("read"),
        "{allowed:?}"
    );
    let dir = tempdir();
    let log = dir.join("strace.log");
    let port = free_port();
    let strace = Command::new("strace")
        .args(["-f", "-qq", "-o"])
        .arg(&log)
        .arg(forkprof())
        .args(["monitor", "--listen", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("strace (cargo xtask setup installs it)");
    let strace = Terminated(strace);
    scrape_until(port, "served /metrics under strace", |b| {
        b.contains("forkprof_spawns_total")
    });
    spawn_true(5);
    std::thread::sleep(Duration::from_secs(1));
    scrape(port).expect("a second scrape");
    let pid = forkprof_tests::wait_for_child(strace.0.id(), "forkprof");
    // SAFETY: kill has no memory-safety preconditions; pid is forkprof's under strace.
    unsafe { libc::kill(pid.parse().unwrap(), libc::SIGTERM) };
    let mut strace = strace;
    let status = strace.0.wait().unwrap();
    assert!(status.success(), "forkprof monitor under strace: {status}");
    let trace = std::fs::read_to_string(&log).unwrap();
    let mut used = std::collections::BTreeSet::new();
    for line in trace.lines() {
        // "PID name(args...) = ret", "PID name(args <unfinished ...>", "PID <... name resumed>"
        let rest = line.split_once(' ').map_or(line, |(_, r)| r).trim_start();
        if rest.starts_with('<') || rest.starts_with("---") || rest.starts_with("+++") {
            continue;
        }
        if let Some((name, _)) = rest.split_once('(')
            && !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            used.insert(name.to_string());
        }
    }
    assert!(used.contains("bpf"), "strace saw no bpf() call: {used:?}");
    let refused: Vec<&String> = used.iter().filter(|s| !allowed.contains(*s)).collect();
    assert!(
        refused.is_empty(),
        "forkprof monitor calls {refused:?}, which SystemCallFilter={} refuses",
        filters[0]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The newest target/debian/forkprof_*.deb. `cargo xtask test` makes it (`cargo xtask dist`,
/// a release build, once per run) before the tests; a plain `cargo test` without it skips.
fn deb() -> Option<PathBuf> {
    let dir = target_dir()
        .parent()
        .expect("target/<profile>")
        .join("debian");
    let newest = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("forkprof_") && n.ends_with(".deb"))
        })
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok());
    if newest.is_none() {
        assert!(
            !root_required(),
            "no forkprof_*.deb in {}: cargo xtask test makes it (cargo xtask dist)",
            dir.display()
        );
        eprintln!(
            "skipped: no forkprof_*.deb in {}: run cargo xtask dist",
            dir.display()
        );
    }
    newest
}

/// Copies the files the host's package `name` installed into `root` (their paths kept).
fn copy_package_files(name: &str, root: &Path) {
    let list = tool("dpkg", |c| {
        c.args(["-L", name]);
    });
    succeeded(&list);
    for path in text(&list.stdout).lines() {
        let p = Path::new(path);
        let Ok(meta) = p.symlink_metadata() else {
            continue;
        };
        // A directory, or a merged-/usr link to one (/lib64): its files are listed too.
        if meta.is_dir() || p.is_dir() {
            continue;
        }
        let to = root.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(p).unwrap();
            let _ = std::fs::remove_file(&to);
            std::os::unix::fs::symlink(target, &to).unwrap();
        } else {
            std::fs::copy(p, &to).unwrap_or_else(|e| panic!("copy {path}: {e}"));
        }
    }
}

/// `chroot ROOT ARGS...` with /proc and /sys mounted inside, in a private mount namespace.
fn in_root(root: &Path, args: &str) -> Output {
    let r = root.display();
    let script = format!(
        "mkdir -p {r}/proc {r}/sys && mount -t proc proc {r}/proc && mount --rbind /sys {r}/sys \
         && exec chroot {r} {args}"
    );
    tool("unshare", |c| {
        c.args(["--mount", "--propagation", "private", "sh", "-c", &script]);
    })
}

/// The package installs with dpkg into an empty root, with its conffile and unit; there,
/// with nothing but the packages it depends on (no compiler, no cargo), its binary runs,
/// its man page is forkprof's own, and `doctor` loads the embedded eBPF programs.
#[test]
fn deb_installs_and_runs_in_an_empty_root() {
    needs_root!("to install a package with dpkg and chroot");
    let Some(deb) = deb() else { return };
    let field = |name: &str| {
        let o = tool("dpkg-deb", |c| {
            c.args(["-f"]).arg(&deb).arg(name);
        });
        succeeded(&o);
        text(&o.stdout).trim().to_string()
    };
    assert_eq!(field("Package"), "forkprof");
    // Only the C runtime: libc6 (and libgcc-s1, which Rust's unwinder links).
    let depends = field("Depends");
    let deps: Vec<String> = depends
        .split([',', '|'])
        .map(|d| d.split_whitespace().next().unwrap_or("").to_string())
        .filter(|d| !d.is_empty())
        .collect();
    assert!(deps.contains(&"libc6".to_string()), "Depends: {depends}");
    for d in &deps {
        assert!(
            ["libc6", "libgcc-s1"].contains(&d.as_str()),
            "unexpected dependency {d} in Depends: {depends}"
        );
    }

    let dir = tempdir();
    let root = dir.join("root");
    for d in ["var/lib/dpkg/info", "var/lib/dpkg/updates", "bin", "tmp"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::write(root.join("var/lib/dpkg/status"), "").unwrap();
    // The maintainer scripts run chrooted in ROOT with /bin/sh: a static busybox.
    std::fs::copy("/bin/busybox", root.join("bin/sh"))
        .expect("/bin/busybox (busybox-static; cargo xtask setup installs it)");
    // dpkg checks that the dependencies are installed in ROOT's database; they are not
    // (their files are copied in below), hence --force-depends.
    let install = tool("dpkg", |c| {
        c.arg("--root")
            .arg(&root)
            .args(["--force-depends", "-i"])
            .arg(&deb)
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
    });
    succeeded(&install);
    let status = tool("dpkg", |c| {
        c.arg("--root").arg(&root).args(["-s", "forkprof"]);
    });
    let status = text(&status.stdout);
    assert!(status.contains("Status: install ok installed"), "{status}");
    assert!(
        status.contains("/etc/default/forkprof "),
        "conffile: {status}"
    );
    for file in [
        "usr/bin/forkprof",
        "usr/share/man/man1/forkprof.1.gz",
        "usr/share/bash-completion/completions/forkprof",
        "usr/share/zsh/vendor-completions/_forkprof",
        "usr/share/fish/vendor_completions.d/forkprof.fish",
        "usr/share/forkprof/prometheus/forkprof-rules.yml",
        "etc/default/forkprof",
    ] {
        let meta = root.join(file).metadata();
        assert!(
            meta.is_ok_and(|m| m.len() > 0),
            "{file} missing or empty in the installed root"
        );
    }
    let unit = ["lib", "usr/lib"]
        .iter()
        .map(|d| root.join(d).join("systemd/system/forkprof-monitor.service"))
        .find(|p| p.exists())
        .expect("forkprof-monitor.service installed");
    assert_eq!(
        std::fs::read(&unit).unwrap(),
        std::fs::read(unit_file()).unwrap(),
        "the packaged unit is packaging/systemd/forkprof-monitor.service"
    );
    // Not enabled on install: no symlink in any .wants directory.
    let wants = root.join("etc/systemd/system/multi-user.target.wants");
    assert!(
        !wants.join("forkprof-monitor.service").exists(),
        "the package enabled the unit"
    );

    // The installed man pages are the ones this forkprof generates: forkprof(1), and each
    // forkprof-NAME(1) that it names (they used to be named and missing).
    let ours = |args: &[&str]| {
        tool(forkprof().to_str().unwrap(), |c| {
            c.args(args);
        })
    };
    let installed = |name: &str| {
        let page = tool("gzip", |c| {
            c.arg("-dc")
                .arg(root.join(format!("usr/share/man/man1/{name}.1.gz")));
        });
        succeeded(&page);
        text(&page.stdout)
    };
    let top = ours(&["man"]);
    assert_eq!(installed("forkprof"), text(&top.stdout), "man page");
    let named: Vec<String> = text(&top.stdout)
        .split("forkprof\\-")
        .skip(1)
        .filter_map(|rest| Some(rest.split_once("(1)")?.0.to_string()))
        // Names, not the placeholder in `man`'s own description (forkprof-SUBCOMMAND(1)).
        .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_lowercase()))
        .collect();
    assert!(named.iter().any(|n| n == "run"), "{named:?}");
    for name in &named {
        assert_eq!(
            installed(&format!("forkprof-{name}")),
            text(&ours(&["man", name]).stdout),
            "forkprof-{name}(1)"
        );
    }

    // Only the declared dependencies' files, then run it there.
    for d in &deps {
        copy_package_files(d, &root);
    }
    let version = in_root(&root, "/usr/bin/forkprof --version");
    succeeded(&version);
    let ours = tool(forkprof().to_str().unwrap(), |c| {
        c.arg("--version");
    });
    assert_eq!(text(&version.stdout), text(&ours.stdout));
    for forbidden in [
        "usr/bin/cc",
        "usr/bin/gcc",
        "usr/bin/cargo",
        "usr/bin/rustc",
        "usr/bin/ld",
    ] {
        assert!(!root.join(forbidden).exists(), "{forbidden} in the root");
    }
    let help = in_root(&root, "/usr/bin/forkprof monitor --help");
    succeeded(&help);
    assert!(text(&help.stdout).contains("--listen"), "{help:?}");
    let doctor = in_root(&root, "/usr/bin/forkprof doctor");
    succeeded(&doctor);
    let said = text(&doctor.stdout);
    assert!(
        said.contains("privileges") && said.contains(": yes") && said.contains("attached"),
        "doctor in the installed root:\n{said}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
