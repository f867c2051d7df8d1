//! `forkprof doctor`: the kernel, its BTF, lockdown, privileges, and which hooks attach here.
use anyhow::Result;

use crate::btf;
use crate::compat;
use crate::loader::{self, HOOKS, LoadOptions};

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

pub fn run() -> Result<i32> {
    let release = read_trimmed("/proc/sys/kernel/osrelease").unwrap_or_else(|| "?".into());
    println!("kernel        {release}");
    let btf = match btf::kernel_task_offsets() {
        Ok(o) => format!(
            "yes ({}; task_struct pid@{} tgid@{} exit_code@{})",
            btf::VMLINUX_BTF,
            o.pid,
            o.tgid,
            o.exit_code
        ),
        Err(e) => format!("no: {e:#}"),
    };
    println!("BTF           {btf}");
    let lockdown = read_trimmed("/sys/kernel/security/lockdown")
        .unwrap_or_else(|| "unknown (securityfs not mounted or no lockdown LSM)".into());
    println!("lockdown      {lockdown}");
    let privileged = loader::has_privileges();
    println!(
        "privileges    {}",
        if privileged {
            "CAP_BPF + CAP_PERFMON (or CAP_SYS_ADMIN): yes"
        } else {
            "missing CAP_BPF/CAP_PERFMON: run with sudo"
        }
    );
    if !privileged {
        return Ok(1);
    }
    let mut loaded = loader::load(&LoadOptions::default());
    println!("\nhooks (raw tracepoints)");
    match &mut loaded {
        Ok(l) => {
            for h in &l.hooks {
                let state = match &h.error {
                    None => "ok".to_string(),
                    Some(e) => format!("FAILED: {e}"),
                };
                println!(
                    "  {:<30} {:<8} {:<9} feeds {}",
                    h.tracepoint,
                    state,
                    if h.required { "required" } else { "optional" },
                    h.feeds.join(", ")
                );
            }
            println!("\nphase sources");
            for (phase, source) in l.sources() {
                println!("  {phase:<15} {source}");
            }
            println!("\nother hook kinds (no default phase needs them)");
            for c in compat::probe(&mut l.ebpf) {
                println!(
                    "  {:<30} {:<8} {}",
                    c.name,
                    if c.available { "ok" } else { "no" },
                    c.detail
                );
            }
        }
        Err(e) => {
            println!("  loading failed: {e:#}");
            for h in HOOKS {
                println!("  {:<30} not tried", h.tracepoint);
            }
            return Ok(1);
        }
    }
    println!(
        "\nEvery phase comes from raw tracepoints. Uprobes would bracket the dynamic linker \
         exactly, but cost +8 to +18% per spawn here, so they are not used (see README)."
    );
    Ok(0)
}
