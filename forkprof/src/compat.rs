//! What this kernel lets forkprof load, beyond the raw tracepoints every phase uses: kprobes,
//! fentry and uprobes (tried with empty probe programs), and glibc's SDT (USDT) rtld notes.
//! `forkprof doctor` prints the result; no default phase depends on any of these.
use std::path::Path;

use anyhow::{Context as _, Result};
use aya::{
    Btf, Ebpf,
    programs::{FEntry, KProbe, UProbe, uprobe::UProbeScope},
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

fn kprobe(ebpf: &mut Ebpf) -> Result<()> {
    let p: &mut KProbe = ebpf
        .program_mut("forkprof_probe_kprobe")
        .context("probe program missing")?
        .try_into()?;
    p.load().context("load")?;
    p.attach("dup_mmap", 0).context("attach to dup_mmap")?;
    Ok(())
}

fn fentry(ebpf: &mut Ebpf) -> Result<()> {
    let btf = Btf::from_sys_fs().context("kernel BTF")?;
    let p: &mut FEntry = ebpf
        .program_mut("forkprof_probe_fentry")
        .context("probe program missing")?
        .try_into()?;
    p.load("dup_mmap", &btf).context("load (BPF_PROG_LOAD)")?;
    p.attach().context("attach to dup_mmap")?;
    Ok(())
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
    let config = kernel_config();
    let kprobes_configured = config
        .as_deref()
        .map(|c| c.lines().any(|l| l == "CONFIG_KPROBES=y"));
    vec![
        cap(
            "kprobes",
            kprobe(ebpf)
                .map(|()| "attached to dup_mmap".to_string())
                .map_err(|e| match kprobes_configured {
                    Some(false) => e.context("CONFIG_KPROBES is not set in this kernel"),
                    _ => e,
                }),
        ),
        cap(
            "fentry/fexit",
            fentry(ebpf).map(|()| "attached to dup_mmap".to_string()),
        ),
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
