//! Loads the eBPF object, checks privileges, attaches each hook, and says what attached.
use std::collections::BTreeMap;

use anyhow::{Context as _, Result, bail};
use aya::{Ebpf, EbpfLoader, programs::RawTracePoint};

use crate::btf;

/// One kernel hook: the program in the object, the raw tracepoint it attaches to, and the
/// phases it feeds. A required hook that fails to attach stops forkprof; an optional one
/// leaves its phases "not measured" and says why.
pub struct Hook {
    pub program: &'static str,
    pub tracepoint: &'static str,
    pub required: bool,
    pub feeds: &'static [&'static str],
}

pub const HOOKS: &[Hook] = &[
    Hook {
        program: "forkprof_sys_enter",
        tracepoint: "sys_enter",
        required: true,
        feeds: &[
            "fork",
            "exec",
            "exec_failed",
            "static_start",
            "ld_start",
            "ld_map",
            "ld_reloc_init",
        ],
    },
    Hook {
        program: "forkprof_sys_exit",
        tracepoint: "sys_exit",
        required: true,
        feeds: &["fork", "vfork_wait", "exec", "exec_failed"],
    },
    Hook {
        program: "forkprof_task_newtask",
        tracepoint: "task_newtask",
        required: true,
        feeds: &["fork", "vfork_wait"],
    },
    Hook {
        program: "forkprof_sched_process_exit",
        tracepoint: "sched_process_exit",
        required: true,
        feeds: &["exit_teardown"],
    },
    Hook {
        program: "forkprof_signal_generate",
        tracepoint: "signal_generate",
        required: false,
        feeds: &["exit_teardown"],
    },
    Hook {
        program: "forkprof_sched_process_free",
        tracepoint: "sched_process_free",
        required: true,
        feeds: &[],
    },
    Hook {
        program: "forkprof_sched_prepare_exec",
        tracepoint: "sched_prepare_exec",
        required: false,
        feeds: &["exec_prepare", "exec_load"],
    },
    Hook {
        program: "forkprof_sched_process_exec",
        tracepoint: "sched_process_exec",
        required: false,
        feeds: &["exec_load"],
    },
    Hook {
        program: "forkprof_mmap_lock_acquired",
        tracepoint: "mmap_lock_acquire_returned",
        required: false,
        feeds: &["pagetable_copy"],
    },
    Hook {
        program: "forkprof_mmap_lock_released",
        tracepoint: "mmap_lock_released",
        required: false,
        feeds: &["pagetable_copy"],
    },
    Hook {
        program: "forkprof_page_fault_user",
        tracepoint: "page_fault_user",
        required: false,
        feeds: &["cow_faults"],
    },
    Hook {
        program: "forkprof_dirty_inode_start",
        tracepoint: "writeback_dirty_inode_start",
        required: false,
        feeds: &["atime"],
    },
    Hook {
        program: "forkprof_dirty_inode",
        tracepoint: "writeback_dirty_inode",
        required: false,
        feeds: &["atime"],
    },
];

/// What happened to each hook.
#[derive(Debug, Clone)]
pub struct HookStatus {
    pub tracepoint: &'static str,
    pub required: bool,
    pub feeds: &'static [&'static str],
    pub error: Option<String>,
}

pub struct Loaded {
    pub ebpf: Ebpf,
    pub hooks: Vec<HookStatus>,
}

impl Loaded {
    /// For each phase, the hooks that measure it ("raw_tp sys_enter + raw_tp sys_exit"), or
    /// "not measured: <hook> unavailable (<why>)".
    pub fn sources(&self) -> BTreeMap<&'static str, String> {
        let mut by_phase: BTreeMap<&'static str, Vec<&HookStatus>> = BTreeMap::new();
        for h in &self.hooks {
            for &phase in h.feeds {
                by_phase.entry(phase).or_default().push(h);
            }
        }
        by_phase
            .into_iter()
            .map(|(phase, hooks)| {
                let text = match hooks.iter().find(|h| h.error.is_some()) {
                    Some(bad) => format!(
                        "not measured: raw_tp {} unavailable ({})",
                        bad.tracepoint,
                        bad.error.as_deref().unwrap_or("")
                    ),
                    None => hooks
                        .iter()
                        .map(|h| format!("raw_tp {}", h.tracepoint))
                        .collect::<Vec<_>>()
                        .join(" + "),
                };
                (phase, text)
            })
            .collect()
    }
}

/// Linux capability numbers.
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Effective capabilities of this process, from /proc/self/status.
fn effective_caps() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(0)
}

pub fn has_privileges() -> bool {
    let caps = effective_caps();
    let has = |cap: u32| caps & (1 << cap) != 0;
    has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON))
}

pub fn check_privileges() -> Result<()> {
    if !has_privileges() {
        bail!(
            "forkprof needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN) to load its eBPF programs; \
             run it with sudo"
        );
    }
    Ok(())
}

#[derive(Default)]
pub struct LoadOptions {
    /// Trace every process (record/top/monitor) rather than one tree (run).
    pub trace_all: bool,
    /// Bracket the dynamic linker with uprobes instead of its syscalls.
    pub precise_ld: bool,
}

pub fn load(opts: &LoadOptions) -> Result<Loaded> {
    check_privileges()?;
    let offsets = btf::kernel_task_offsets()?;
    let trace_all = u32::from(opts.trace_all);
    let precise_ld = u32::from(opts.precise_ld);
    let object: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/forkprof"));
    if object.is_empty() {
        bail!("this forkprof was built without its eBPF programs (AYA_BUILD_SKIP)");
    }
    let mut ebpf = EbpfLoader::new()
        .override_global("TRACE_ALL", &trace_all, true)
        .override_global("PRECISE_LD", &precise_ld, true)
        .override_global("TASK_OFFSETS", &offsets, true)
        .load(object)
        .context("loading the eBPF object")?;
    let mut hooks = Vec::new();
    for hook in HOOKS {
        let result = attach(&mut ebpf, hook);
        if let Err(e) = &result
            && hook.required
        {
            bail!(
                "this kernel cannot attach forkprof's hook on raw tracepoint {}: {e:#}",
                hook.tracepoint
            );
        }
        hooks.push(HookStatus {
            tracepoint: hook.tracepoint,
            required: hook.required,
            feeds: hook.feeds,
            error: result.err().map(|e| format!("{e:#}")),
        });
    }
    Ok(Loaded { ebpf, hooks })
}

fn attach(ebpf: &mut Ebpf, hook: &Hook) -> Result<()> {
    let program: &mut RawTracePoint = ebpf
        .program_mut(hook.program)
        .with_context(|| format!("program {} missing from the object", hook.program))?
        .try_into()?;
    program.load().context("verifier rejected the program")?;
    program.attach(hook.tracepoint)?;
    Ok(())
}
