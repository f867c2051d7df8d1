//! `forkprof doctor`: the kernel, its BTF, lockdown, privileges, and every hook and alternative
//! source tried on its own, one line each: attached, or the kernel's reason.
use anyhow::Result;
use serde_json::json;

use crate::btf;
use crate::capabilities;
use crate::cli::DoctorArgs;
use crate::loader::{self, LoadOptions};

pub fn run(args: &DoctorArgs) -> Result<i32> {
    let release = loader::kernel_release();
    let privileged = loader::has_privileges();
    if !privileged {
        if args.json {
            println!(
                "{}",
                json!({"kernel": release, "error": "missing CAP_BPF/CAP_PERFMON: run with sudo"})
            );
        } else {
            println!("kernel        {release}");
            println!("privileges    missing CAP_BPF/CAP_PERFMON: run with sudo");
        }
        return Ok(1);
    }
    let loaded = loader::load(&LoadOptions {
        try_all: true,
        ..Default::default()
    });
    let mut loaded = match loaded {
        Ok(l) => l,
        Err(e) => {
            if args.json {
                println!("{}", json!({"kernel": release, "error": format!("{e:#}")}));
            } else {
                println!("kernel        {release}");
                println!("loading failed: {e:#}");
            }
            return Ok(1);
        }
    };
    let required_ok = loaded
        .jobs
        .iter()
        .all(|j| j.used.is_some() || !j.job.required);
    let capabilities = capabilities::probe(&mut loaded.ebpf);
    let sources = loaded.sources();
    if args.json {
        let caps: Vec<_> = capabilities
            .iter()
            .map(|c| json!({"name": c.name, "available": c.available, "detail": c.detail}))
            .collect();
        let out = json!({
            "kernel": release,
            "lockdown": capabilities::lockdown(),
            "layout": {
                "exit_at_syscall": loaded.kernel.layout.exit_at_syscall != 0,
                "walk_paths": loaded.kernel.layout.walk_paths != 0,
            },
            "tracepoints": loaded.kernel.tracepoints.iter()
                .map(|(tp, params)| (tp.to_string(), btf::show_params(params)))
                .collect::<std::collections::BTreeMap<_, _>>(),
            "hooks": loaded.hooks,
            "phases": sources,
            "capabilities": caps,
        });
        println!("{out}");
        return Ok(if required_ok { 0 } else { 1 });
    }
    println!("kernel        {release}");
    let l = loaded.kernel.layout;
    println!(
        "BTF           {} (task_struct pid@{} tgid@{} exit_code@{})",
        btf::VMLINUX_BTF,
        l.task_pid,
        l.task_tgid,
        l.task_exit_code
    );
    println!(
        "exec paths    {}",
        match &loaded.kernel.walk_paths_missing {
            None => "relative, /dev/fd and /proc paths made absolute (dentry walk)".to_string(),
            Some(why) => format!("shown as given: {why}"),
        }
    );
    println!(
        "lockdown      {}",
        capabilities::lockdown()
            .unwrap_or_else(|| "unknown (securityfs not mounted or no lockdown LSM)".into())
    );
    println!("privileges    CAP_BPF + CAP_PERFMON (or CAP_SYS_ADMIN): yes");
    println!("\nhooks (each tried on its own; a job uses its first source that attaches wholly)");
    // A hook that failed where its job uses another source is no loss: it says so.
    let served: std::collections::BTreeSet<&str> = loaded
        .hooks
        .iter()
        .filter(|h| h.used)
        .map(|h| h.job)
        .collect();
    for h in &loaded.hooks {
        let state = match &h.error {
            None if h.used => format!("{} (used)", h.status),
            None => h.status.to_string(),
            Some(e) if served.contains(h.job) => {
                format!("{} (the job uses another source): {e}", h.status)
            }
            Some(e) => format!("{}: {e}", h.status),
        };
        println!(
            "  {:<40} {:<24} {state}",
            h.hook,
            format!(
                "{}{}",
                h.job,
                if h.required { " (required job)" } else { "" }
            ),
        );
    }
    println!("\nphase sources");
    for (phase, source) in sources.iter_by_name() {
        println!("  {:<15} {source}", phase.name());
    }
    println!("\nother capabilities");
    for c in &capabilities {
        println!(
            "  {:<40} {:<8} {}",
            c.name,
            if c.available { "ok" } else { "no" },
            c.detail
        );
    }
    if !required_ok {
        println!("\nA required hook did not attach: forkprof cannot trace on this kernel.");
        return Ok(1);
    }
    Ok(0)
}
