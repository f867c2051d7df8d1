//! `forkprof doctor`: the kernel, its BTF, lockdown, privileges, and every hook and alternative
//! source tried on its own, one line each: attached, or the kernel's reason.
use anyhow::Result;
use serde_json::json;

use crate::btf;
use crate::capabilities;
use crate::cli::DoctorArgs;
use crate::loader::{self, LoadOptions};
use crate::output::width::{self, footnotes};

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
    // Before loading: a refused fentry's reason names the lockdown mode read here.
    let lockdown = capabilities::lockdown_mounting_securityfs();
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
            "lockdown": lockdown,
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
        lockdown
            .unwrap_or_else(|| "unknown (no lockdown LSM, or securityfs could not be read)".into())
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
    // A reason that several hooks give (every fentry under a lockdown) is printed once,
    // under the list, and each of those hooks refers to it: `[1]`.
    let errors: Vec<Vec<&str>> = loaded
        .hooks
        .iter()
        .map(|h| h.error.as_deref().into_iter().collect())
        .collect();
    let reasons = width::shared(&errors);
    let rows: Vec<[String; 3]> = loaded
        .hooks
        .iter()
        .map(|h| {
            let job = format!(
                "{}{}",
                h.job,
                if h.required { " (required job)" } else { "" }
            );
            let reason = h
                .error
                .as_deref()
                .map(|e| match reasons.iter().position(|r| *r == e) {
                    Some(i) => format!("[{}]", i + 1),
                    None => e.to_string(),
                });
            let state = match reason {
                None if h.used => format!("{} (used)", h.status),
                None => h.status.to_string(),
                // "failed (optional; the job uses another source)", not two parentheses.
                Some(e) if served.contains(h.job) => match h.status.strip_suffix(')') {
                    Some(open) => format!("{open}; the job uses another source): {e}"),
                    None => format!("{} (the job uses another source): {e}", h.status),
                },
                Some(e) => format!("{}: {e}", h.status),
            };
            [h.hook.to_string(), job, state]
        })
        .collect();
    let hook_w = rows.iter().map(|r| r[0].chars().count()).max().unwrap_or(0);
    let job_w = rows.iter().map(|r| r[1].chars().count()).max().unwrap_or(0);
    for [hook, job, state] in &rows {
        println!("  {hook:<hook_w$}  {job:<job_w$}  {state}");
    }
    for (i, reason) in reasons.iter().enumerate() {
        println!("  [{}] {reason}", i + 1);
    }
    println!("\nphase sources");
    let (names, texts): (Vec<&str>, Vec<String>) = sources
        .iter_by_name()
        .map(|(phase, source)| (phase.name(), source.to_string()))
        .unzip();
    let (texts, notes) = footnotes(texts);
    for (name, text) in names.iter().zip(&texts) {
        println!("  {name:<15} {text}");
    }
    for (i, note) in notes.iter().enumerate() {
        println!("  [{}] {note}", i + 1);
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
