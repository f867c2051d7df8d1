//! What this kernel lets forkprof do beyond its hooks: uprobes (for `--precise-ld`, tried with
//! an empty probe program), glibc's SDT (USDT) rtld notes, and why kprobes or fentry may be
//! refused (kernel configuration, lockdown). `forkprof doctor` prints the result.
use std::path::Path;

use anyhow::{Context as _, Result};
use aya::{
    Ebpf,
    programs::{UProbe, uprobe::UProbeScope},
};
use object::Object as _;

pub struct Capability {
    pub name: &'static str,
    pub available: bool,
    pub detail: String,
}

/// glibc's C library, where forkprof's uprobe probe attaches (only to this process).
const LIBC_CANDIDATES: &[&str] = &[
    "/lib/x86_64-linux-gnu/libc.so.6",
    "/usr/lib/x86_64-linux-gnu/libc.so.6",
    "/lib64/libc.so.6",
    "/usr/lib64/libc.so.6",
];
const LDSO_CANDIDATES: &[&str] = &[
    "/lib64/ld-linux-x86-64.so.2",
    "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
];

fn first_existing(paths: &[&'static str]) -> Option<&'static str> {
    paths.iter().copied().find(|p| Path::new(p).exists())
}

fn uprobe(ebpf: &mut Ebpf) -> Result<&'static str> {
    let libc = first_existing(LIBC_CANDIDATES).context("glibc's libc.so.6 not found")?;
    let p: &mut UProbe = ebpf
        .program_mut("forkprof_probe_uprobe")
        .context("probe program missing")?
        .try_into()?;
    p.load().context("load")?;
    p.attach("__libc_start_main", libc, UProbeScope::CallingProcess)
        .context("attach to __libc_start_main")?;
    Ok(libc)
}

/// Whether ld.so carries SDT notes (Fedora's glibc has rtld probes; Debian's has none).
fn sdt_notes() -> Result<(bool, &'static str)> {
    let ldso = first_existing(LDSO_CANDIDATES).context("ld.so not found")?;
    let data = std::fs::read(ldso).with_context(|| format!("read {ldso}"))?;
    let file = object::File::parse(&*data).with_context(|| format!("parse {ldso}"))?;
    Ok((file.section_by_name(".note.stapsdt").is_some(), ldso))
}

fn cap(name: &'static str, result: Result<String>) -> Capability {
    match result {
        Ok(detail) => Capability {
            name,
            available: true,
            detail,
        },
        Err(e) => Capability {
            name,
            available: false,
            detail: format!("{e:#}"),
        },
    }
}

pub fn probe(ebpf: &mut Ebpf) -> Vec<Capability> {
    vec![
        cap(
            "uprobes",
            uprobe(ebpf).map(|libc| format!("attached to {libc}:__libc_start_main")),
        ),
        cap(
            "SDT rtld notes",
            sdt_notes().and_then(|(found, ldso)| {
                if found {
                    Ok(format!("{ldso} has .note.stapsdt"))
                } else {
                    anyhow::bail!("{ldso} has no .note.stapsdt section")
                }
            }),
        ),
    ]
}

/// A failed attach of a hook of `kind`, as one readable line: aya's empty "Verifier output"
/// is dropped, and the likely cause is added (kprobes not built in; fentry refused by a
/// kernel lockdown or a security module).
pub fn explain_failure(kind: &str, error: &str) -> (String, Option<String>) {
    let text = match error.find(". Verifier output: ") {
        Some(i) if error[i..].trim_end().len() <= ". Verifier output: :".len() + 40 => {
            let rest = &error[i + ". Verifier output: ".len()..];
            if rest.trim_start_matches(':').trim().is_empty()
                || error[..i].ends_with(rest.trim_start_matches(':').trim())
            {
                error[..i].to_string()
            } else {
                error.to_string()
            }
        }
        _ => error.to_string(),
    };
    let hint = match kind {
        "kprobe" | "kretprobe" => kernel_config()
            .filter(|c| !c.lines().any(|l| l == "CONFIG_KPROBES=y"))
            .map(|_| "CONFIG_KPROBES is not set in this kernel".to_string()),
        "fentry" | "fexit" if text.contains("Operation not permitted") => {
            Some(match lockdown().as_deref().and_then(active_mode) {
                Some(mode) if mode != "none" => format!("refused by the kernel lockdown: {mode}"),
                _ => "refused by the kernel: lockdown or a security module".to_string(),
            })
        }
        _ => None,
    };
    match hint {
        Some(h) => (format!("{text} ({h})"), Some(h)),
        None => (text, None),
    }
}

static LOCKDOWN: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

const SECURITYFS: &str = "/sys/kernel/security";

/// The kernel's lockdown modes, the active one in brackets: securityfs's `lockdown`, e.g.
/// "none [integrity] confidentiality". None where there is no lockdown LSM, or where
/// securityfs is mounted nowhere (unless `lockdown_mounting_securityfs` ran first). Read once
/// per process.
pub fn lockdown() -> Option<String> {
    LOCKDOWN
        .get_or_init(|| read_lockdown(std::path::Path::new(SECURITYFS)))
        .clone()
}

/// `lockdown`, for `doctor`: where init mounts securityfs nowhere, it is read through a mount
/// of its own. Call it before anything asks `lockdown`, which then says the same. Not for
/// `run`, `record` or `monitor`: the service's system call filter refuses `mount`.
pub fn lockdown_mounting_securityfs() -> Option<String> {
    LOCKDOWN
        .get_or_init(|| {
            // Mounted where init usually mounts it: it says, or there is no lockdown LSM.
            if std::path::Path::new(SECURITYFS).join("lsm").exists() {
                return read_lockdown(std::path::Path::new(SECURITYFS));
            }
            with_securityfs(read_lockdown)
        })
        .clone()
}

/// The active mode of securityfs's `lockdown` text: the one in brackets.
fn active_mode(modes: &str) -> Option<&str> {
    let start = modes.find('[')? + 1;
    let len = modes[start..].find(']')?;
    Some(&modes[start..start + len])
}

fn read_lockdown(securityfs: &std::path::Path) -> Option<String> {
    std::fs::read_to_string(securityfs.join("lockdown"))
        .ok()
        .map(|s| s.trim().to_string())
}

/// `f` on securityfs where it is mounted nowhere (a host whose init does not mount it): a
/// read-only mount of its own in a new directory (mode 0700) of the temporary directory,
/// detached and removed at once. None without the privilege to mount.
fn with_securityfs<T>(f: impl FnOnce(&std::path::Path) -> Option<T>) -> Option<T> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::DirBuilderExt;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir = std::env::temp_dir().join(format!(
        "forkprof-securityfs-{}-{nanos}",
        std::process::id()
    ));
    // A new directory (never one found there), which only its owner may enter.
    std::fs::DirBuilder::new().mode(0o700).create(&dir).ok()?;
    let target = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok();
    let mounted = target.as_ref().is_some_and(|t| {
        // SAFETY: valid NUL-terminated strings; no data argument.
        unsafe {
            libc::mount(
                c"securityfs".as_ptr(),
                t.as_ptr(),
                c"securityfs".as_ptr(),
                libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                std::ptr::null(),
            ) == 0
        }
    });
    let out = if mounted { f(&dir) } else { None };
    if let (true, Some(t)) = (mounted, &target) {
        // SAFETY: a valid NUL-terminated path, mounted above.
        unsafe { libc::umount2(t.as_ptr(), libc::MNT_DETACH) };
    }
    let _ = std::fs::remove_dir(&dir);
    out
}

/// The kernel's build configuration, from /proc/config.gz (gzip) via `zcat`, if present.
fn kernel_config() -> Option<String> {
    let out = std::process::Command::new("zcat")
        .arg("/proc/config.gz")
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::explain_failure;

    #[test]
    fn the_active_lockdown_mode_is_the_bracketed_one() {
        use super::active_mode;
        assert_eq!(
            active_mode("none [integrity] confidentiality"),
            Some("integrity")
        );
        assert_eq!(
            active_mode("[none] integrity confidentiality"),
            Some("none")
        );
        assert_eq!(active_mode("none integrity"), None);
        assert_eq!(active_mode("none [integrity"), None);
    }

    #[test]
    fn drops_an_empty_verifier_output() {
        let e = "load (BPF_PROG_LOAD): the BPF_PROG_LOAD syscall returned Operation not \
                 permitted (os error 1). Verifier output: : Operation not permitted (os error 1)";
        let (text, hint) = explain_failure("raw_tp", e);
        assert_eq!(hint, None);
        assert!(!text.contains("Verifier output"), "{text}");
        assert!(
            text.ends_with("Operation not permitted (os error 1)"),
            "{text}"
        );
        let real = "load: invalid. Verifier output: 0: R1=ctx() R10=fp0\n1: (79) r2 = *(u64 *)(r1 +8)\ninvalid bpf_context access off=8 size=8";
        assert_eq!(explain_failure("raw_tp", real).0, real);
    }
}
