//! Loads the eBPF object, checks privileges, attaches each hook, and says what attached.
//!
//! Hooks are grouped in jobs. A job has one or more sources, best first; a source is a set
//! of hooks that must all attach. The first source of a job that attaches wholly is used,
//! and the others are left unloaded. A job whose every source fails leaves its phases "not
//! measured", with the kernel's reasons, unless it is required (the fork, exec and exit
//! milestones), which stops forkprof with a message naming the kernel and the hook.
//!
//! Raw tracepoint arguments are each kernel's `TP_PROTO`. A hook on one names the prototype
//! its program was written for (the arguments it reads); it attaches only when this kernel's
//! BTF prototype starts with that, so no program reads a guessed slot.
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use aya::{
    Btf, Ebpf, EbpfLoader,
    programs::{
        BtfTracePoint, FEntry, FExit, KProbe, RawTracePoint, TracePoint,
        tp_btf::BtfTracePointLinkId,
    },
};
use serde::Serialize;

use crate::btf::{self, KernelInfo, Param};
use crate::capabilities;
use crate::model::phases::{Phase, PhaseMap};
use forkprof_common::ia32_syscalls;

/// Where a program attaches.
#[derive(Clone, Copy, Debug)]
pub enum Target {
    /// A raw tracepoint, with the leading arguments its program reads (their kinds).
    RawTp(&'static str, &'static [Param]),
    /// A BTF tracepoint (tp_btf), with the leading arguments its program reads. Its program
    /// loads the fields of the structs they point to directly (the verifier knows their
    /// types), where a raw tracepoint's program calls a helper for each.
    BtfTp(&'static str, &'static [Param]),
    FEntry(&'static str),
    FExit(&'static str),
    KProbe(&'static str),
    KRetProbe(&'static str),
    /// A classic syscall event, `syscalls:NAME` (`sys_enter_clone`): a perf tracepoint that
    /// fires only for its syscall, and never for an ia32 one.
    SyscallEvent(&'static str),
}

impl Target {
    pub fn kind(self) -> &'static str {
        match self {
            Self::RawTp(..) => "raw_tp",
            Self::BtfTp(..) => "tp_btf",
            Self::FEntry(_) => "fentry",
            Self::FExit(_) => "fexit",
            Self::KProbe(_) => "kprobe",
            Self::KRetProbe(_) => "kretprobe",
            Self::SyscallEvent(_) => "tracepoint",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::RawTp(n, _)
            | Self::BtfTp(n, _)
            | Self::FEntry(n)
            | Self::FExit(n)
            | Self::KProbe(n)
            | Self::KRetProbe(n)
            | Self::SyscallEvent(n) => n,
        }
    }

    /// An fentry or fexit hook: a BPF trampoline on a kernel function.
    pub fn is_trampoline(self) -> bool {
        matches!(self, Self::FEntry(_) | Self::FExit(_))
    }

    /// "tp_btf sys_enter", "tracepoint syscalls:sys_enter_clone"
    pub fn label(self) -> String {
        match self {
            Self::SyscallEvent(n) => format!("{} syscalls:{n}", self.kind()),
            _ => format!("{} {}", self.kind(), self.name()),
        }
    }

    /// The label with the arguments a raw tracepoint program reads: "raw_tp
    /// sched_process_exit (ptr, bool)", which tells the variants of one tracepoint apart.
    pub fn detailed_label(self) -> String {
        match self {
            Self::RawTp(_, reads) | Self::BtfTp(_, reads) if !reads.is_empty() => {
                format!("{} {}", self.label(), btf::show_params(reads))
            }
            _ => self.label(),
        }
    }
}

/// One program and where it attaches.
#[derive(Clone, Copy, Debug)]
pub struct Hook {
    pub program: &'static str,
    pub target: Target,
    /// Its source works without it: a kernel without it lacks something its source can do
    /// without (the ia32 syscalls of a kernel without `CONFIG_IA32_EMULATION`).
    pub optional: bool,
}

/// A set of hooks that together measure a job's phases, and what to say about it.
pub struct Source {
    pub hooks: &'static [Hook],
    /// What a phase's source says instead of every hook's label, for a source of many hooks.
    pub label: Option<&'static str>,
    /// Added to the phase source text when this source is used.
    pub note: Option<&'static str>,
    /// Phases of its job that this source does not measure: "not measured", with the reasons
    /// the better sources failed, when it is the one used.
    pub lacks: &'static [Phase],
    /// The option that asks for this source, which is tried only then: it trades something
    /// away for a lower cost.
    pub asked_by: Option<&'static str>,
}

/// What one group of hooks is for.
pub struct Job {
    pub name: &'static str,
    /// Its hook family, as `FORKPROF_BENCH_ONLY` names it (see `FAMILIES`).
    pub family: &'static str,
    pub required: bool,
    /// Its hooks fire on syscalls, mmap-lock events or page faults of every task. With a
    /// `--cgroup` scope they are loaded at start and attached only once the scope has a
    /// process (`LoadOptions::defer_hot`, `arm`): until then, hosts outside it pay nothing for
    /// them.
    pub hot: bool,
    pub feeds: &'static [Phase],
    /// Best first.
    pub sources: &'static [Source],
}

const fn hook(program: &'static str, target: Target) -> Hook {
    Hook {
        program,
        target,
        optional: false,
    }
}

/// A hook its source can do without (`Hook::optional`).
const fn optional(program: &'static str, target: Target) -> Hook {
    Hook {
        program,
        target,
        optional: true,
    }
}

const fn one(hooks: &'static [Hook]) -> Source {
    Source {
        hooks,
        label: None,
        note: None,
        lacks: &[],
        asked_by: None,
    }
}

use Param::{Bool, Int, Ptr};

/// The syscalls job's trampoline source: entry and return of each fork-family and exec
/// syscall, the entries of the five syscalls ld.so's window watches and of exit_group, and a
/// new task's first return (`schedule_tail`, which `ret_from_fork` calls).
const SYSCALL_FUNCTIONS: &[Hook] = &[
    hook("forkprof_clone_entry", Target::FEntry("__x64_sys_clone")),
    hook("forkprof_clone_return", Target::FExit("__x64_sys_clone")),
    hook("forkprof_clone3_entry", Target::FEntry("__x64_sys_clone3")),
    hook("forkprof_clone3_return", Target::FExit("__x64_sys_clone3")),
    // `__x64_sys_fork` and `__x64_sys_vfork` are aliases of these, which BTF names.
    hook("forkprof_fork_entry", Target::FEntry("__do_sys_fork")),
    hook("forkprof_fork_return", Target::FExit("__do_sys_fork")),
    hook("forkprof_vfork_entry", Target::FEntry("__do_sys_vfork")),
    hook("forkprof_vfork_return", Target::FExit("__do_sys_vfork")),
    hook("forkprof_execve_entry", Target::FEntry("__x64_sys_execve")),
    hook("forkprof_execve_return", Target::FExit("__x64_sys_execve")),
    hook(
        "forkprof_execveat_entry",
        Target::FEntry("__x64_sys_execveat"),
    ),
    hook(
        "forkprof_execveat_return",
        Target::FExit("__x64_sys_execveat"),
    ),
    hook("forkprof_access_entry", Target::FEntry("__x64_sys_access")),
    hook("forkprof_openat_entry", Target::FEntry("__x64_sys_openat")),
    hook(
        "forkprof_arch_prctl_entry",
        Target::FEntry("__x64_sys_arch_prctl"),
    ),
    hook("forkprof_munmap_entry", Target::FEntry("__x64_sys_munmap")),
    hook(
        "forkprof_mprotect_entry",
        Target::FEntry("__x64_sys_mprotect"),
    ),
    hook(
        "forkprof_exit_group_entry",
        Target::FEntry("__x64_sys_exit_group"),
    ),
    hook("forkprof_first_return", Target::FExit("schedule_tail")),
    // A 32-bit process's syscalls (fork and vfork: the `__do_sys_` functions above). A
    // kernel without CONFIG_IA32_EMULATION has none of these, and runs no 32-bit process.
    optional(
        "forkprof_ia32_clone_entry",
        Target::FEntry("__ia32_compat_sys_ia32_clone"),
    ),
    optional(
        "forkprof_ia32_clone_return",
        Target::FExit("__ia32_compat_sys_ia32_clone"),
    ),
    optional(
        "forkprof_ia32_clone3_entry",
        Target::FEntry("__ia32_sys_clone3"),
    ),
    optional(
        "forkprof_ia32_clone3_return",
        Target::FExit("__ia32_sys_clone3"),
    ),
    optional(
        "forkprof_ia32_execve_entry",
        Target::FEntry("__ia32_compat_sys_execve"),
    ),
    optional(
        "forkprof_ia32_execve_return",
        Target::FExit("__ia32_compat_sys_execve"),
    ),
    optional(
        "forkprof_ia32_execveat_entry",
        Target::FEntry("__ia32_compat_sys_execveat"),
    ),
    optional(
        "forkprof_ia32_execveat_return",
        Target::FExit("__ia32_compat_sys_execveat"),
    ),
    optional(
        "forkprof_ia32_exit_group_entry",
        Target::FEntry("__ia32_sys_exit_group"),
    ),
];

/// The classic syscall events of the syscalls forkprof needs (`--ia32-syscalls on-demand`
/// or `never`): where trampolines are refused, they cost every other syscall a third to two
/// thirds of what sys_enter and sys_exit do, but they skip every ia32 syscall
/// (docs/kernel-findings.md).
const SYSCALL_EVENTS: &[Hook] = &[
    hook(
        "forkprof_ev_clone_entry",
        Target::SyscallEvent("sys_enter_clone"),
    ),
    hook(
        "forkprof_ev_clone_return",
        Target::SyscallEvent("sys_exit_clone"),
    ),
    hook(
        "forkprof_ev_clone3_entry",
        Target::SyscallEvent("sys_enter_clone3"),
    ),
    hook(
        "forkprof_ev_clone3_return",
        Target::SyscallEvent("sys_exit_clone3"),
    ),
    hook(
        "forkprof_ev_fork_entry",
        Target::SyscallEvent("sys_enter_fork"),
    ),
    hook(
        "forkprof_ev_fork_return",
        Target::SyscallEvent("sys_exit_fork"),
    ),
    hook(
        "forkprof_ev_vfork_entry",
        Target::SyscallEvent("sys_enter_vfork"),
    ),
    hook(
        "forkprof_ev_vfork_return",
        Target::SyscallEvent("sys_exit_vfork"),
    ),
    hook(
        "forkprof_ev_execve_entry",
        Target::SyscallEvent("sys_enter_execve"),
    ),
    hook(
        "forkprof_ev_execve_return",
        Target::SyscallEvent("sys_exit_execve"),
    ),
    hook(
        "forkprof_ev_execveat_entry",
        Target::SyscallEvent("sys_enter_execveat"),
    ),
    hook(
        "forkprof_ev_execveat_return",
        Target::SyscallEvent("sys_exit_execveat"),
    ),
    hook(
        "forkprof_ev_access_entry",
        Target::SyscallEvent("sys_enter_access"),
    ),
    hook(
        "forkprof_ev_openat_entry",
        Target::SyscallEvent("sys_enter_openat"),
    ),
    hook(
        "forkprof_ev_arch_prctl_entry",
        Target::SyscallEvent("sys_enter_arch_prctl"),
    ),
    hook(
        "forkprof_ev_munmap_entry",
        Target::SyscallEvent("sys_enter_munmap"),
    ),
    hook(
        "forkprof_ev_mprotect_entry",
        Target::SyscallEvent("sys_enter_mprotect"),
    ),
    hook(
        "forkprof_ev_exit_group_entry",
        Target::SyscallEvent("sys_enter_exit_group"),
    ),
];

/// The option that asks for the classic syscall events (`SYSCALL_EVENTS`).
pub const IA32_SYSCALLS_OPTION: &str = "--ia32-syscalls on-demand or never";

/// Where the kernel refuses trampolines, how the syscalls job sees ia32 syscalls (a 32-bit
/// process's): `--ia32-syscalls`. Where trampolines attach, they see them all, and this
/// changes nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Ia32Syscalls {
    /// sys_enter and sys_exit from the start: every syscall of every task runs them.
    Always,
    /// The classic per-syscall events, and sys_enter and sys_exit (loaded in standby) for
    /// ia32 syscalls only from the first 32-bit process that a followed process execs or
    /// forkprof sees spawn, until none has been left for 10 s. What a 32-bit process spawns
    /// before they attach is counted.
    #[default]
    OnDemand,
    /// The classic per-syscall events alone: what 32-bit processes spawn is counted, never
    /// timed or followed.
    Never,
}

pub const JOBS: &[Job] = &[
    Job {
        name: "syscalls",
        family: "syscalls",
        required: true,
        hot: true,
        feeds: &[
            Phase::Fork,
            Phase::VforkWait,
            Phase::ChildRun,
            Phase::Exec,
            Phase::ExecFailed,
            Phase::StaticStart,
            Phase::LdStart,
            Phase::LdMap,
            Phase::LdRelocInit,
        ],
        sources: &[
            // Where trampolines are allowed: the syscall functions forkprof needs, which
            // fire only for those syscalls (about 20 hits per spawn of a dynamic binary,
            // where the tracepoints fire on all of its ~34 syscalls, twice each), and no
            // task's syscalls take the tracepoints' slow path.
            Source {
                hooks: SYSCALL_FUNCTIONS,
                label: Some("fentry/fexit __x64_sys_* + fexit schedule_tail"),
                note: None,
                lacks: &[],
                asked_by: None,
            },
            // Asked for where the kernel refuses trampolines: each runs a program only for
            // its syscall, where the two tracepoints below run one for every syscall of every
            // task; but none fires for a 32-bit process's syscall.
            Source {
                hooks: SYSCALL_EVENTS,
                label: Some("tracepoint syscalls:sys_{enter,exit}_*"),
                // Per session: `JobStatus::note`.
                note: None,
                lacks: &[],
                asked_by: Some(IA32_SYSCALLS_OPTION),
            },
            one(&[
                hook(
                    "forkprof_sys_enter",
                    Target::BtfTp("sys_enter", &[Ptr, Int(8)]),
                ),
                hook(
                    "forkprof_sys_exit",
                    Target::BtfTp("sys_exit", &[Ptr, Int(8)]),
                ),
            ]),
        ],
    },
    Job {
        name: "newtask",
        family: "sched",
        required: true,
        hot: false,
        feeds: &[Phase::Fork, Phase::VforkWait],
        sources: &[one(&[hook(
            "forkprof_task_newtask",
            Target::BtfTp("task_newtask", &[Ptr, Int(8)]),
        )])],
    },
    Job {
        name: "exit",
        family: "exit",
        required: true,
        hot: false,
        feeds: &[Phase::ExitTeardown],
        sources: &[
            one(&[hook(
                "forkprof_sched_process_exit",
                Target::BtfTp("sched_process_exit", &[Ptr, Bool]),
            )]),
            Source {
                hooks: &[hook(
                    "forkprof_sched_process_exit_task",
                    Target::BtfTp("sched_process_exit", &[Ptr]),
                )],
                label: None,
                note: Some(
                    "from the exit_group syscall's entry: this kernel's sched_process_exit \
                     follows exit_mm",
                ),
                lacks: &[],
                asked_by: None,
            },
        ],
    },
    Job {
        name: "exit_notify",
        family: "exit",
        required: false,
        hot: false,
        feeds: &[Phase::ExitTeardown],
        sources: &[one(&[hook(
            "forkprof_signal_generate",
            Target::RawTp("signal_generate", &[Int(4)]),
        )])],
    },
    Job {
        name: "free",
        family: "exit",
        required: true,
        hot: false,
        feeds: &[],
        sources: &[one(&[hook(
            "forkprof_sched_process_free",
            Target::BtfTp("sched_process_free", &[Ptr]),
        )])],
    },
    Job {
        name: "exec_point_of_no_return",
        family: "sched",
        required: false,
        hot: false,
        feeds: &[Phase::ExecPrepare, Phase::ExecLoad],
        sources: &[
            one(&[hook(
                "forkprof_sched_prepare_exec",
                Target::RawTp("sched_prepare_exec", &[]),
            )]),
            one(&[hook(
                "forkprof_begin_new_exec_fentry",
                Target::FEntry("begin_new_exec"),
            )]),
            one(&[hook(
                "forkprof_begin_new_exec_kprobe",
                Target::KProbe("begin_new_exec"),
            )]),
        ],
    },
    // Required: a successful exec ends here, and its record goes from here with its path and
    // argv, read from the kernel's copies; the new image's start (static_start, ld_start)
    // begins here.
    Job {
        name: "exec_done",
        family: "sched",
        required: true,
        hot: false,
        feeds: &[
            Phase::Exec,
            Phase::ExecLoad,
            Phase::StaticStart,
            Phase::LdStart,
        ],
        sources: &[one(&[hook(
            "forkprof_sched_process_exec",
            Target::BtfTp("sched_process_exec", &[Ptr, Int(4), Ptr]),
        )])],
    },
    Job {
        name: "dup_mmap",
        family: "mmap",
        required: false,
        hot: true,
        feeds: &[Phase::PagetableCopy],
        sources: &[
            one(&[
                hook("forkprof_dup_mmap_fentry", Target::FEntry("dup_mmap")),
                hook("forkprof_dup_mmap_fexit", Target::FExit("dup_mmap")),
            ]),
            one(&[
                hook("forkprof_dup_mmap_kprobe", Target::KProbe("dup_mmap")),
                hook("forkprof_dup_mmap_kretprobe", Target::KRetProbe("dup_mmap")),
            ]),
            // Where dup_mmap is inlined (6.12): its write-locked span, as the mmap_lock
            // tracepoints below bracket it, from the first calls inside and after it. Two
            // hits per fork, where those fire on every mmap_lock event of every task, and
            // before 6.14 build the lock's memcg path for each one.
            Source {
                hooks: &[
                    hook(
                        "forkprof_dup_mmap_locked_fentry",
                        Target::FEntry("uprobe_dup_mmap"),
                    ),
                    hook(
                        "forkprof_dup_mmap_unlocked_fentry",
                        Target::FEntry("dup_userfaultfd_complete"),
                    ),
                ],
                label: None,
                note: Some("dup_mmap's write-locked span"),
                lacks: &[],
                asked_by: None,
            },
            Source {
                hooks: &[
                    hook(
                        "forkprof_dup_mmap_locked_kprobe",
                        Target::KProbe("uprobe_dup_mmap"),
                    ),
                    hook(
                        "forkprof_dup_mmap_unlocked_kprobe",
                        Target::KProbe("dup_userfaultfd_complete"),
                    ),
                ],
                label: None,
                note: Some("dup_mmap's write-locked span"),
                lacks: &[],
                asked_by: None,
            },
            one(&[
                hook(
                    "forkprof_mmap_lock_acquired",
                    Target::RawTp("mmap_lock_acquire_returned", &[Ptr, Bool, Bool]),
                ),
                hook(
                    "forkprof_mmap_lock_released",
                    Target::RawTp("mmap_lock_released", &[Ptr, Bool]),
                ),
            ]),
            one(&[
                hook(
                    "forkprof_mmap_lock_acquired_memcg",
                    Target::RawTp("mmap_lock_acquire_returned", &[Ptr, Ptr, Bool, Bool]),
                ),
                hook(
                    "forkprof_mmap_lock_released_memcg",
                    Target::RawTp("mmap_lock_released", &[Ptr, Ptr, Bool]),
                ),
            ]),
        ],
    },
    // do_wp_page handles every copy-on-write fault (a huge page's is split and comes back to
    // it): where it can be hooked it gives their count and their time, with a hit per such
    // fault. Only where it cannot is page_fault_user attached for the count, a hot hook that
    // fires on every user page fault of every task.
    Job {
        name: "cow_faults",
        family: "faults",
        required: false,
        hot: true,
        feeds: &[Phase::CowFaults, Phase::CowFaultTime],
        sources: &[
            one(&[
                hook("forkprof_wp_fault_fentry", Target::FEntry("do_wp_page")),
                hook("forkprof_wp_fault_fexit", Target::FExit("do_wp_page")),
            ]),
            one(&[
                hook("forkprof_wp_fault_kprobe", Target::KProbe("do_wp_page")),
                hook(
                    "forkprof_wp_fault_kretprobe",
                    Target::KRetProbe("do_wp_page"),
                ),
            ]),
            Source {
                hooks: &[hook(
                    "forkprof_page_fault_user",
                    Target::RawTp("page_fault_user", &[Int(8), Ptr, Int(8)]),
                )],
                label: None,
                note: Some("write faults on present pages, from user mode"),
                lacks: &[Phase::CowFaultTime],
                asked_by: None,
            },
        ],
    },
    Job {
        name: "dirty_inode",
        family: "atime",
        required: false,
        hot: false,
        feeds: &[Phase::Atime],
        sources: &[one(&[
            hook(
                "forkprof_dirty_inode_start",
                Target::RawTp("writeback_dirty_inode_start", &[]),
            ),
            hook(
                "forkprof_dirty_inode",
                Target::RawTp("writeback_dirty_inode", &[]),
            ),
        ])],
    },
];

/// The tracepoints (raw and BTF) whose prototypes the hooks depend on.
fn tracepoints() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = JOBS
        .iter()
        .flat_map(|j| j.sources.iter())
        .flat_map(|s| s.hooks.iter())
        .filter_map(|h| match h.target {
            Target::RawTp(name, _) | Target::BtfTp(name, _) => Some(name),
            _ => None,
        })
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// What happened to one hook.
#[derive(Debug, Clone, Serialize)]
pub struct HookStatus {
    pub hook: String,
    pub kind: &'static str,
    pub target: &'static str,
    pub job: &'static str,
    pub required: bool,
    /// "attached", "failed", "unused" (a better source of its job attached), "deferred"
    /// (loaded; attached once the `--cgroup` scope has a process, see `arm`), or "standby"
    /// (loaded; attached for ia32 syscalls once a 32-bit process is seen, see
    /// `attach_ia32_hooks`).
    pub status: &'static str,
    /// Whether this hook's source is the one its job uses (doctor attaches every source).
    pub used: bool,
    pub error: Option<String>,
    pub feeds: &'static [Phase],
}

/// What happened to one job: the source used (its index), or the reasons none attached.
#[derive(Clone)]
pub struct JobStatus {
    pub job: &'static Job,
    pub used: Option<usize>,
    pub errors: Vec<String>,
    /// What this session adds to its source's text, in place of `Source::note`.
    pub note: Option<String>,
}

pub struct Loaded {
    pub ebpf: Ebpf,
    pub kernel: KernelInfo,
    pub jobs: Vec<JobStatus>,
    pub hooks: Vec<HookStatus>,
    /// Hooks of hot jobs loaded but not attached (`LoadOptions::defer_hot`), in the order `arm`
    /// attaches them.
    pub deferred: Vec<&'static Hook>,
    /// sys_enter and sys_exit, loaded but not attached (`Ia32Syscalls::OnDemand` where the
    /// classic syscall events are used): `tend_ia32_hooks` attaches them.
    pub standby: Vec<&'static Hook>,
    /// The same hooks while they are attached on demand, and what they did.
    pub ia32: Ia32OnDemand,
    /// The kernel's process slot of a tgid is `tgid & proc_slot_mask` (`PROC_SLOT_MASK`).
    pub proc_slot_mask: u32,
}

/// `--ia32-syscalls on-demand`'s sys_enter and sys_exit once attached: attached while
/// followed 32-bit processes run, and detached `linger` after the last has gone
/// (`tend_ia32_hooks`).
pub struct Ia32OnDemand {
    /// Their links while attached (empty otherwise).
    links: Vec<(&'static Hook, BtfTracePointLinkId)>,
    attaches: u32,
    detaches: u32,
    /// Since when the kernel has counted no followed 32-bit process
    /// (`ia32_syscalls::LIVE`), while attached.
    idle_since: Option<Instant>,
    /// When sys_enter was detached, while sys_exit is still attached (the first of the
    /// detach's two steps).
    entries_detached_at: Option<Instant>,
    /// How long none has to be left before they are detached: 10 s, so that a build that runs
    /// 32-bit tools one after another keeps them (`FORKPROF_TEST_IA32_LINGER_MS`, tests
    /// only, shortens it).
    linger: Duration,
}

impl Ia32OnDemand {
    fn new() -> Self {
        let linger = std::env::var("FORKPROF_TEST_IA32_LINGER_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(Duration::from_secs(10), Duration::from_millis);
        Self {
            links: Vec::new(),
            attaches: 0,
            detaches: 0,
            idle_since: None,
            entries_detached_at: None,
            linger,
        }
    }

    /// Whether sys_enter and sys_exit are attached for ia32 syscalls now.
    pub fn attached(&self) -> bool {
        !self.links.is_empty()
    }

    /// The syscalls job's source note once they have been attached.
    fn note(&self) -> String {
        let base = ia32_note(Ia32Syscalls::OnDemand, true, true);
        if self.detaches == 0 {
            return base;
        }
        let linger = if self.linger.subsec_millis() == 0 {
            format!("{} s", self.linger.as_secs())
        } else {
            format!("{} ms", self.linger.as_millis())
        };
        let times = |n: u32| {
            if n == 1 {
                "once".into()
            } else {
                format!("{n} times")
            }
        };
        base.replace(
            "attached when the first was seen",
            &format!(
                "attached when the first was seen and detached once none was left for {linger} \
                 (attached {}, detached {})",
                times(self.attaches),
                times(self.detaches)
            ),
        )
    }
}

impl Loaded {
    /// For each phase, the hooks that measure it ("tp_btf sys_enter + tp_btf sys_exit"), or
    /// "not measured: <why>".
    pub fn sources(&self) -> PhaseMap<String> {
        phase_sources(&self.jobs)
    }
}

/// For each phase, the hooks of the sources `jobs` used that measure it, or "not measured:
/// <why>".
fn phase_sources(jobs: &[JobStatus]) -> PhaseMap<String> {
    let mut parts: BTreeMap<Phase, Vec<String>> = BTreeMap::new();
    let mut notes: BTreeMap<Phase, Vec<String>> = BTreeMap::new();
    let mut missing: BTreeMap<Phase, String> = BTreeMap::new();
    for js in jobs {
        for &phase in js.job.feeds {
            match js.used {
                Some(i) if js.job.sources[i].lacks.contains(&phase) => {
                    missing
                        .entry(phase)
                        .or_insert_with(|| format!("not measured: {}", js.errors.join("; ")));
                }
                Some(i) => {
                    let source = &js.job.sources[i];
                    let entry = parts.entry(phase).or_default();
                    match source.label {
                        Some(label) => entry.push(label.to_string()),
                        None => entry.extend(source.hooks.iter().map(|h| h.target.label())),
                    }
                    if let Some(note) = js.note.clone().or(source.note.map(String::from)) {
                        notes.entry(phase).or_default().push(note);
                    }
                }
                None => {
                    missing
                        .entry(phase)
                        .or_insert_with(|| format!("not measured: {}", js.errors.join("; ")));
                }
            }
        }
    }
    let mut out: BTreeMap<Phase, String> = parts
        .into_iter()
        .map(|(phase, mut labels)| {
            labels.dedup();
            let mut text = labels.join(" + ");
            for note in notes.get(&phase).into_iter().flatten() {
                text.push_str(&format!(" ({note})"));
            }
            (phase, text)
        })
        .collect();
    // A phase is only as good as its weakest job: one missing job makes it unmeasured.
    out.extend(missing);
    out.insert(Phase::SpawnCost, Phase::spawn_cost_source());
    out.into_iter().collect()
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
    /// Exec records carry argv's strings (else only argc: `--no-args`, top, monitor).
    pub capture_argv: bool,
    /// `forkprof doctor`: try every source of every job, and keep going past a required job
    /// that fails.
    pub try_all: bool,
    /// `--cgroup`: with `trace_all`, follow only the processes of this cgroup v2 subtree (an
    /// open fd of its directory; the rule is in the eBPF crate's `maps::in_scope`).
    pub cgroup_scope: Option<std::os::fd::RawFd>,
    /// Load the hooks of hot jobs (`Job::hot`) without attaching them; `arm` attaches them
    /// later. For a `--cgroup` scope that may be empty.
    pub defer_hot: bool,
    /// How promptly the agent will collect; the programs get its `wakeup_bytes`.
    pub pace: crate::collector::Pace,
    /// `--ia32-syscalls`: where trampolines are refused, whether the classic syscall events
    /// take the place of sys_enter and sys_exit.
    pub ia32_syscalls: Ia32Syscalls,
}

/// The hook families `FORKPROF_BENCH_ONLY` can name.
pub const FAMILIES: &[&str] = &["syscalls", "sched", "exit", "mmap", "faults", "atime"];

/// Switches for measuring forkprof's overhead, from the environment. For benchmarks only:
/// either one makes forkprof's numbers wrong or missing, and it says so on stderr.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BenchSwitches {
    /// `FORKPROF_BENCH_EMPTY=1`: the same hooks attach, and every program returns at entry.
    pub empty: bool,
    /// `FORKPROF_BENCH_ONLY=FAMILY,...`: attach only the jobs of these families.
    pub only: Option<Vec<String>>,
    /// `FORKPROF_BENCH_BURN=STEPS` (with `FORKPROF_BENCH_EMPTY=1`): the empty program at
    /// each exec that passes no arguments (sched_process_exec, argc 1, as the bench loop's)
    /// runs a loop of this many steps that touches only registers. A control: program time
    /// with almost no cache or memory footprint, to set beside the real programs', or
    /// beside execs with an argument in the same run (`spawn_pairs args`,
    /// bench/spawn_pairs.c; BENCHMARKS.md).
    pub burn: u32,
    /// `FORKPROF_BENCH_ARGV_READ=1` (with `FORKPROF_BENCH_EMPTY=1`): the empty program at
    /// each exec that passes no arguments reads the new image's argv as the real program
    /// does, into a buffer of its own: the real programs' user-memory read alone, to set
    /// beside execs with an argument in the same run (`spawn_pairs args`; BENCHMARKS.md).
    pub argv_read: bool,
}

/// A switch that is on (1) or off (0, empty or unset).
fn on_off(name: &str, value: Option<&str>) -> Result<bool> {
    match value {
        None | Some("" | "0") => Ok(false),
        Some("1") => Ok(true),
        Some(v) => bail!("{name} must be 0 or 1, not {v:?}"),
    }
}

/// The environment's values of the benchmark switches, each as it is set (None: unset).
#[derive(Clone, Copy, Debug, Default)]
pub struct BenchVars<'a> {
    pub empty: Option<&'a str>,
    pub only: Option<&'a str>,
    pub burn: Option<&'a str>,
    pub argv_read: Option<&'a str>,
}

impl BenchSwitches {
    pub fn parse(vars: BenchVars) -> Result<Self> {
        let BenchVars {
            empty,
            only,
            burn,
            argv_read,
        } = vars;
        let empty = on_off("FORKPROF_BENCH_EMPTY", empty)?;
        let only = match only {
            None => None,
            Some(list) => {
                let names: Vec<String> = list
                    .split(',')
                    .map(str::trim)
                    .filter(|f| !f.is_empty())
                    .map(String::from)
                    .collect();
                if let Some(bad) = names.iter().find(|f| !FAMILIES.contains(&f.as_str())) {
                    bail!(
                        "FORKPROF_BENCH_ONLY: no hook family {bad:?} (families: {})",
                        FAMILIES.join(", ")
                    );
                }
                Some(names)
            }
        };
        use forkprof_common::BENCH_BURN_MAX;
        let burn = match burn {
            None | Some("" | "0") => 0,
            Some(v) => match v.parse::<u32>() {
                Ok(n) if n <= BENCH_BURN_MAX && empty => n,
                Ok(n) if n <= BENCH_BURN_MAX => {
                    bail!("FORKPROF_BENCH_BURN needs FORKPROF_BENCH_EMPTY=1")
                }
                _ => bail!(
                    "FORKPROF_BENCH_BURN must be a number of steps from 0 to {BENCH_BURN_MAX}, \
                     not {v:?}"
                ),
            },
        };
        let argv_read = on_off("FORKPROF_BENCH_ARGV_READ", argv_read)?;
        if argv_read && !empty {
            bail!("FORKPROF_BENCH_ARGV_READ needs FORKPROF_BENCH_EMPTY=1");
        }
        Ok(Self {
            empty,
            only,
            burn,
            argv_read,
        })
    }

    pub fn from_env() -> Result<Self> {
        let var = |k: &str| std::env::var(k).ok();
        let (empty, only, burn, argv_read) = (
            var("FORKPROF_BENCH_EMPTY"),
            var("FORKPROF_BENCH_ONLY"),
            var("FORKPROF_BENCH_BURN"),
            var("FORKPROF_BENCH_ARGV_READ"),
        );
        Self::parse(BenchVars {
            empty: empty.as_deref(),
            only: only.as_deref(),
            burn: burn.as_deref(),
            argv_read: argv_read.as_deref(),
        })
    }

    fn wants(&self, job: &Job) -> bool {
        self.only
            .as_ref()
            .is_none_or(|only| only.iter().any(|f| f == job.family))
    }

    /// The line forkprof prints when a switch is on.
    pub fn warning(&self) -> Option<String> {
        let mut on = Vec::new();
        if self.empty {
            on.push("FORKPROF_BENCH_EMPTY=1 (every program returns at entry)".to_string());
        }
        if self.burn != 0 {
            on.push(format!(
                "FORKPROF_BENCH_BURN={} (a loop of that many steps at each exec without arguments)",
                self.burn
            ));
        }
        if self.argv_read {
            on.push(
                "FORKPROF_BENCH_ARGV_READ=1 (argv read at each exec without arguments)".to_string(),
            );
        }
        if let Some(only) = &self.only {
            on.push(format!("FORKPROF_BENCH_ONLY={}", only.join(",")));
        }
        (!on.is_empty()).then(|| {
            format!(
                "forkprof: benchmark switches on: {}; the numbers below are not measurements",
                on.join(", ")
            )
        })
    }
}

pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

/// `FORKPROF_TEST_PROC_SLOTS=N` (for tests only): the kernel uses only the first `N` slots of
/// its direct-mapped process array (a power of two, 1 to `PROC_SLOT_COUNT`), so that most
/// processes share a slot and take the spill path, which a machine whose `pid_max` is the
/// array's size never reaches. Returns the slot mask.
pub fn proc_slot_mask(value: Option<&str>) -> Result<u32> {
    let max = forkprof_common::PROC_SLOT_COUNT;
    let Some(v) = value.filter(|v| !v.is_empty()) else {
        return Ok(max - 1);
    };
    match v.parse::<u32>() {
        Ok(n) if n.is_power_of_two() && n <= max => Ok(n - 1),
        _ => bail!("FORKPROF_TEST_PROC_SLOTS must be a power of two from 1 to {max}, not {v:?}"),
    }
}

/// A source left out by `FORKPROF_TEST_NO_FENTRY`.
const NO_FENTRY: &str = "left out by FORKPROF_TEST_NO_FENTRY";

/// `FORKPROF_TEST_NO_FENTRY=1` (for tests only): every source with an fentry or fexit hook is
/// left out, so that a kernel that allows both fentry and kprobes runs the kprobe sources,
/// which kernels that refuse only fentry would use.
pub fn test_no_fentry(value: Option<&str>) -> Result<bool> {
    match value {
        None | Some("" | "0") => Ok(false),
        Some("1") => Ok(true),
        Some(v) => bail!("FORKPROF_TEST_NO_FENTRY must be 0 or 1, not {v:?}"),
    }
}

/// Mounts tracefs at its usual place, `/sys/kernel/tracing`, where it is mounted nowhere: a
/// classic syscall event is attached by its id, which only tracefs tells (aya looks in
/// `/sys/kernel/tracing` and `/sys/kernel/debug/tracing`). It stays mounted, as perf leaves
/// it: an unmount could pull it from under another forkprof that is attaching, and systemd
/// mounts it there at boot on most distributions anyway.
fn ensure_tracefs() -> Result<()> {
    let present = || {
        [
            "/sys/kernel/tracing/events",
            "/sys/kernel/debug/tracing/events",
        ]
        .iter()
        .any(|p| std::path::Path::new(p).is_dir())
    };
    if present() {
        return Ok(());
    }
    // SAFETY: valid NUL-terminated strings; no data argument.
    let rc = unsafe {
        libc::mount(
            c"tracefs".as_ptr(),
            c"/sys/kernel/tracing".as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    // Another forkprof may have mounted it just now.
    if rc != 0 && !present() {
        bail!(
            "mounting tracefs at /sys/kernel/tracing (the classic syscall events are attached \
             through it): {}",
            std::io::Error::last_os_error()
        );
    }
    if rc == 0 {
        eprintln!(
            "forkprof: mounted tracefs at /sys/kernel/tracing, for the classic syscall events"
        );
    }
    Ok(())
}

/// Whether attaching hook `h` needs tracefs.
fn needs_tracefs(h: &Hook) -> bool {
    matches!(h.target, Target::SyscallEvent(_))
}

pub fn load(opts: &LoadOptions) -> Result<Loaded> {
    check_privileges()?;
    let data = btf::read_kernel_btf()?;
    let kernel = btf::inspect(&data, &tracepoints())?;
    let bench = BenchSwitches::from_env()?;
    if let Some(line) = bench.warning() {
        eprintln!("{line}");
    }
    let no_fentry = test_no_fentry(std::env::var("FORKPROF_TEST_NO_FENTRY").ok().as_deref())?;
    if no_fentry {
        eprintln!("forkprof: FORKPROF_TEST_NO_FENTRY=1 (tests only): no fentry or fexit source");
    }
    let trace_all = u32::from(opts.trace_all);
    let precise_ld = u32::from(opts.precise_ld);
    let capture_argv = u32::from(opts.capture_argv);
    let bench_empty = u32::from(bench.empty);
    let cgroup_scoped = u32::from(opts.cgroup_scope.is_some());
    let slot_var = std::env::var("FORKPROF_TEST_PROC_SLOTS").ok();
    let proc_slot_mask = proc_slot_mask(slot_var.as_deref())?;
    if proc_slot_mask != forkprof_common::PROC_SLOT_COUNT - 1 {
        eprintln!(
            "forkprof: test switch on: FORKPROF_TEST_PROC_SLOTS={} (most processes share a slot)",
            proc_slot_mask + 1
        );
    }
    let object: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/forkprof"));
    if object.is_empty() {
        bail!("this forkprof was built without its eBPF programs (AYA_BUILD_SKIP)");
    }
    let mut ebpf = EbpfLoader::new()
        .override_global("TRACE_ALL", &trace_all, true)
        .override_global("PRECISE_LD", &precise_ld, true)
        .override_global("CAPTURE_ARGV", &capture_argv, true)
        .override_global("BENCH_EMPTY", &bench_empty, true)
        .override_global("BENCH_BURN", &bench.burn, true)
        .override_global("BENCH_ARGV_READ", &u32::from(bench.argv_read), true)
        .override_global("WAKEUP_BYTES", &opts.pace.wakeup_bytes, true)
        .override_global("CGROUP_SCOPED", &cgroup_scoped, true)
        .override_global("PROC_SLOT_MASK", &proc_slot_mask, true)
        .override_global("KERNEL_LAYOUT", &kernel.layout, true)
        .load(object)
        .context("loading the eBPF object")?;
    // Filled before any program is attached: until then the scope's slot is empty, and an
    // empty slot reads as outside (nothing is followed), never as everything.
    if let Some(fd) = opts.cgroup_scope {
        let map = ebpf
            .map_mut("CGROUP_SCOPE")
            .context("map CGROUP_SCOPE missing")?;
        let mut scope = aya::maps::CgroupArray::try_from(map)?;
        scope
            .set(0, fd, 0)
            .context("setting the --cgroup scope (map CGROUP_SCOPE)")?;
    }
    let vmlinux = Btf::from_sys_fs().ok();
    let mut jobs = Vec::new();
    let mut hooks = Vec::new();
    let mut deferred: Vec<&'static Hook> = Vec::new();
    let mut standby: Vec<&'static Hook> = Vec::new();
    let classic_asked = opts.ia32_syscalls != Ia32Syscalls::Always;
    for job in JOBS {
        let mut status = JobStatus {
            job,
            used: None,
            errors: Vec::new(),
            note: None,
        };
        if !bench.wants(job) {
            for h in job.sources.iter().flat_map(|s| s.hooks) {
                hooks.push(hook_status(job, h, "left out by FORKPROF_BENCH_ONLY", None));
            }
            status.errors.push("left out by FORKPROF_BENCH_ONLY".into());
            jobs.push(status);
            continue;
        }
        let first_hook = hooks.len();
        let mut source_of = Vec::new();
        for (i, source) in job.sources.iter().enumerate() {
            source_of.extend(std::iter::repeat_n(i, source.hooks.len()));
            if let Some(used) = status.used.filter(|_| !opts.try_all) {
                // On demand, sys_enter and sys_exit wait behind the classic events, loaded.
                if opts.ia32_syscalls == Ia32Syscalls::OnDemand
                    && job.sources[used].asked_by.is_some()
                    && source.asked_by.is_none()
                    && standby.is_empty()
                {
                    standby = load_standby(
                        &mut ebpf,
                        &kernel,
                        vmlinux.as_ref(),
                        job,
                        source,
                        &mut hooks,
                    );
                    continue;
                }
                for h in source.hooks {
                    hooks.push(hook_status(job, h, "unused", None));
                }
                continue;
            }
            if let Some(option) = source.asked_by.filter(|_| !classic_asked && !opts.try_all) {
                for h in source.hooks {
                    hooks.push(hook_status(job, h, "not asked for", None));
                }
                status.errors.push(format!(
                    "{} (not asked for: {option})",
                    source
                        .label
                        .unwrap_or_else(|| source.hooks[0].target.name())
                ));
                continue;
            }
            if no_fentry && source.hooks.iter().any(|h| h.target.is_trampoline()) {
                for h in source.hooks {
                    hooks.push(hook_status(job, h, NO_FENTRY, None));
                }
                status
                    .errors
                    .push(format!("{} ({NO_FENTRY})", source.hooks[0].target.label()));
                continue;
            }
            // tracefs only for a source that may be used. doctor mounts it as `run` does, so
            // that the sources it names are the ones `run` would use; where the mount fails,
            // the events' lines say so ("tracefs not found").
            if classic_asked
                && source.hooks.iter().any(needs_tracefs)
                && let Err(e) = ensure_tracefs()
            {
                eprintln!("forkprof: {e:#}");
            }
            let mut ok = true;
            let mut source_deferred = Vec::new();
            for h in source.hooks {
                let defer = opts.defer_hot && job.hot;
                let result = load_hook(&mut ebpf, &kernel, vmlinux.as_ref(), h).and_then(|()| {
                    if defer {
                        check_attaches(&mut ebpf, h)
                    } else {
                        attach_loaded(&mut ebpf, h)
                    }
                });
                let failure = result
                    .err()
                    .map(|e| capabilities::explain_failure(h.target.kind(), &format!("{e:#}")));
                if let Some((full, hint)) = failure.as_ref().filter(|_| !h.optional) {
                    // One short reason per source is enough for the phase's "not measured";
                    // doctor prints the whole chain.
                    if ok {
                        let short = hint.clone().unwrap_or_else(|| {
                            full.rsplit(": ").next().unwrap_or(full).to_string()
                        });
                        status
                            .errors
                            .push(format!("{} ({short})", h.target.label()));
                    }
                    ok = false;
                }
                let error = failure.map(|(full, _)| full);
                let state = match (&error, defer) {
                    (Some(_), _) if h.optional => "failed (optional)",
                    (Some(_), _) => "failed",
                    (None, true) => {
                        source_deferred.push(h);
                        "deferred"
                    }
                    (None, false) => "attached",
                };
                hooks.push(hook_status(job, h, state, error));
            }
            // doctor tries a source that must be asked for too, but it is not the one a
            // session would use.
            let may_use = source.asked_by.is_none() || classic_asked;
            if ok && status.used.is_none() && may_use {
                status.used = Some(i);
                deferred.extend(source_deferred);
            } else if !ok && !opts.try_all {
                // Leave nothing of a partly attached source behind.
                for h in source.hooks {
                    unload(&mut ebpf, h);
                }
            }
        }
        for (h, source) in hooks[first_hook..].iter_mut().zip(source_of) {
            h.used = status.used == Some(source);
        }
        if status.used.is_none() && job.required && !opts.try_all {
            bail!(
                "this kernel ({}) cannot attach forkprof's {} hook: {}",
                kernel_release(),
                job.name,
                status.errors.join("; ")
            );
        }
        jobs.push(status);
    }
    // Every window a handler keeps is opened at a syscall's entry, directly (a fork, an exec)
    // or through state made there (a child, its copy-on-write window, the dynamic linker's
    // window). Attaching the syscall entries last means no window starts with its first
    // events unseen.
    deferred.sort_by_key(|h| opens_windows(h));
    // Where the syscall hooks in use skip ia32 syscalls, the kernel counts what 32-bit
    // processes spawn, once those hooks are attached (deferred ones: by `arm`): an exec
    // whose entry no hook could see yet is no 32-bit process's.
    let mut classic = false;
    for js in jobs.iter_mut() {
        if js
            .used
            .is_some_and(|i| js.job.sources[i].asked_by == Some(IA32_SYSCALLS_OPTION))
        {
            classic = true;
            // doctor attaches sys_enter and sys_exit as a source of their own, and holds
            // none in standby: its note says what a session would do.
            let on_demand = !standby.is_empty()
                || (opts.try_all && opts.ia32_syscalls == Ia32Syscalls::OnDemand);
            js.note = Some(ia32_note(opts.ia32_syscalls, on_demand, false));
        }
    }
    if classic && !deferred.iter().any(|h| needs_tracefs(h)) {
        set_ia32_mode(&mut ebpf, classic_mode(&standby))?;
    }
    // Only now may the kernel follow processes: a window opened while the program that closes
    // it was still to be attached would stay open, and its gate with it, for the whole session.
    let mut attached = aya::maps::Array::<_, u32>::try_from(
        ebpf.map_mut("ATTACHED").context("map ATTACHED missing")?,
    )?;
    attached
        .set(0, 1, 0)
        .context("marking the programs attached (map ATTACHED)")?;
    Ok(Loaded {
        ebpf,
        kernel,
        jobs,
        hooks,
        deferred,
        standby,
        ia32: Ia32OnDemand::new(),
        proc_slot_mask,
    })
}

/// What the syscalls job's source text says of ia32 syscalls where the classic events are
/// used: skipped, or seen by sys_enter and sys_exit on demand (`attached`: they are now).
fn ia32_note(mode: Ia32Syscalls, standby: bool, attached: bool) -> String {
    match (mode, standby, attached) {
        (_, _, true) => "32-bit processes' syscalls: tp_btf sys_enter + tp_btf sys_exit, \
                         attached when the first was seen, --ia32-syscalls on-demand"
            .into(),
        (Ia32Syscalls::OnDemand, true, false) => "32-bit processes' syscalls: tp_btf sys_enter \
                                                  + tp_btf sys_exit on demand, none seen"
            .into(),
        (Ia32Syscalls::OnDemand, false, false) => "skips 32-bit processes' syscalls: tp_btf \
                                                   sys_enter + tp_btf sys_exit failed to load"
            .into(),
        _ => "skips 32-bit processes' syscalls: --ia32-syscalls never".into(),
    }
}

/// Loads `source`'s hooks without attaching them ("standby"), and returns them; none if any
/// fails to load (its status says why).
fn load_standby(
    ebpf: &mut Ebpf,
    kernel: &KernelInfo,
    vmlinux: Option<&Btf>,
    job: &'static Job,
    source: &'static Source,
    hooks: &mut Vec<HookStatus>,
) -> Vec<&'static Hook> {
    let mut loaded = Vec::new();
    for h in source.hooks {
        match load_hook(ebpf, kernel, vmlinux, h) {
            Ok(()) => {
                loaded.push(h);
                hooks.push(hook_status(job, h, "standby", None));
            }
            Err(e) => hooks.push(hook_status(job, h, "failed", Some(format!("{e:#}")))),
        }
    }
    if loaded.len() != source.hooks.len() {
        for status in hooks.iter_mut().filter(|s| s.status == "standby") {
            status.status = "unused";
        }
        return Vec::new();
    }
    loaded
}

/// The kernel's mode once the classic syscall events are attached: with sys_enter and
/// sys_exit in standby (`standby`), or without.
fn classic_mode(standby: &[&'static Hook]) -> u32 {
    if standby.is_empty() {
        ia32_syscalls::UNSEEN
    } else {
        ia32_syscalls::STANDBY
    }
}

/// The map `IA32_SYSCALLS` (`ia32_syscalls::*` slots).
fn ia32_map(ebpf: &mut Ebpf) -> Result<aya::maps::Array<&mut aya::maps::MapData, u32>> {
    Ok(aya::maps::Array::try_from(
        ebpf.map_mut("IA32_SYSCALLS")
            .context("map IA32_SYSCALLS missing")?,
    )?)
}

/// Tells the kernel how the syscall hooks in use see ia32 syscalls (`ia32_syscalls::MODE`);
/// from `UNSEEN` or `STANDBY` on, it counts what 32-bit processes spawn unseen.
fn set_ia32_mode(ebpf: &mut Ebpf, mode: u32) -> Result<()> {
    ia32_map(ebpf)?
        .set(ia32_syscalls::MODE, mode, 0)
        .context("setting how ia32 syscalls are seen (map IA32_SYSCALLS)")
}

/// `--ia32-syscalls on-demand`, after each batch the agent reads and at each update of a
/// live view: attaches sys_enter and sys_exit from standby once the kernel asks for them,
/// and detaches them again once no followed 32-bit process has been left for
/// `Ia32OnDemand::linger`. Whether it attached them now. After an error in an attach or a
/// detach, both are unloaded, and the kernel goes on counting what it does not see.
pub fn tend_ia32_hooks(loaded: &mut Loaded, now: Instant) -> Result<bool> {
    if loaded.ia32.attached() {
        return detach_idle_ia32_hooks(loaded, now);
    }
    attach_ia32_hooks(loaded)
}

/// `ia32_syscalls::LIVE`: the followed processes that run a 32-bit image now.
fn ia32_live(ebpf: &mut Ebpf) -> Result<u32> {
    Ok(ia32_map(ebpf)?.get(&ia32_syscalls::LIVE, 0)?)
}

/// Attaches sys_enter and sys_exit from standby, for ia32 syscalls only (the classic
/// events keep the rest), once the kernel has seen a 32-bit process that forkprof follows
/// (`ia32_syscalls::WANTED`), or counts one running (`LIVE`: one that exec'd while they
/// were being detached, in the instant between the agent's write of the mode and its read
/// of the count).
fn attach_ia32_hooks(loaded: &mut Loaded) -> Result<bool> {
    if loaded.standby.is_empty() {
        return Ok(false);
    }
    if ia32_map(&mut loaded.ebpf)?.get(&ia32_syscalls::WANTED, 0)? == 0
        && ia32_live(&mut loaded.ebpf)? == 0
    {
        return Ok(false);
    }
    // The mode first: attached in mode STANDBY, they would take every syscall, which the
    // classic events take too. In this mode, a 32-bit spawn whose entry they miss while
    // they attach is counted.
    set_ia32_mode(&mut loaded.ebpf, ia32_syscalls::RAW_FOR_IA32)?;
    let mut hooks = std::mem::take(&mut loaded.standby);
    // sys_exit first: a window opened at an entry is closed at its return.
    hooks.sort_by_key(|h| opens_windows(h));
    attach_on_demand(loaded, &hooks)?;
    loaded.ia32.attaches += 1;
    loaded.ia32.idle_since = None;
    set_standby_status(loaded, &hooks, "standby", "attached");
    Ok(true)
}

/// Attaches `hooks`, taken from standby, for ia32 syscalls, in order, beside the on-demand
/// links already attached. After an error every on-demand hook is unloaded, none left half
/// attached (sys_exit alone would run on every syscall for nothing), and the kernel counts
/// what the classic events skip, as with `never`.
fn attach_on_demand(loaded: &mut Loaded, hooks: &[&'static Hook]) -> Result<()> {
    for (i, &h) in hooks.iter().enumerate() {
        let attached = program(&mut loaded.ebpf, h).and_then(|p| {
            let p: &mut BtfTracePoint = p.try_into()?;
            Ok(p.attach()?)
        });
        match attached {
            Ok(link) => loaded.ia32.links.push((h, link)),
            Err(e) => {
                let all: Vec<&'static Hook> = loaded
                    .ia32
                    .links
                    .drain(..)
                    .map(|(h, _)| h)
                    .chain(hooks[i..].iter().copied())
                    .collect();
                let e = e.context(format!("attaching {}", h.target.label()));
                give_up_ia32_hooks(loaded, &all, "failed to attach", &e)?;
                return Err(e.context(
                    "attaching tp_btf sys_enter and sys_exit for ia32 syscalls (both unloaded: \
                     what 32-bit processes spawn is counted unseen from now on)",
                ));
            }
        }
    }
    Ok(())
}

/// Detaches sys_enter and sys_exit, back to standby, once the kernel has counted no
/// followed 32-bit process (`ia32_syscalls::LIVE`) for `Ia32OnDemand::linger`: from then
/// on, every other syscall pays for the classic events alone again. In two steps, at least
/// `DETACH_STEP` apart: sys_enter, then sys_exit, so that a window sys_enter opened just
/// before it went (in a 32-bit process adopted at that entry, or in a run of it still under
/// way when it was detached) is closed at a return that sys_exit still sees. If such a
/// process shows up in between, sys_enter is attached again instead. Whether it attached
/// anything.
fn detach_idle_ia32_hooks(loaded: &mut Loaded, now: Instant) -> Result<bool> {
    let entries_gone = loaded.ia32.entries_detached_at.is_some();
    if ia32_live(&mut loaded.ebpf)? != 0 {
        loaded.ia32.idle_since = None;
        if !entries_gone {
            return Ok(false);
        }
        // A 32-bit process came between the two steps: sys_enter again.
        let entries = std::mem::take(&mut loaded.standby);
        attach_on_demand(loaded, &entries)?;
        loaded.ia32.entries_detached_at = None;
        set_standby_status(loaded, &entries, "standby", "attached");
        return Ok(true);
    }
    match loaded.ia32.entries_detached_at {
        None => {
            let since = *loaded.ia32.idle_since.get_or_insert(now);
            if now.duration_since(since) < loaded.ia32.linger {
                return Ok(false);
            }
            loaded.ia32.idle_since = None;
            ia32_map(&mut loaded.ebpf)?.set(ia32_syscalls::WANTED, 0, 0)?;
            let detached = detach_links(loaded, opens_windows)?;
            loaded.ia32.entries_detached_at = Some(now);
            set_standby_status(loaded, &detached, "attached", "standby");
        }
        Some(at) if now.duration_since(at) >= DETACH_STEP => {
            let detached = detach_links(loaded, |_| true)?;
            loaded.ia32.entries_detached_at = None;
            // Only now: in mode RAW_FOR_IA32 without the hooks, a 32-bit process's exec asks
            // for nothing, but it is counted in LIVE, which the next tend reads
            // (`attach_ia32_hooks`).
            set_ia32_mode(&mut loaded.ebpf, ia32_syscalls::STANDBY)?;
            loaded.ia32.detaches += 1;
            set_standby_status(loaded, &detached, "attached", "standby");
        }
        Some(_) => {}
    }
    Ok(false)
}

/// The least time between the detach's two steps: far longer than any syscall's entry-to-
/// return path that does not sleep, and than a run of sys_enter still under way on another
/// CPU when it was detached.
const DETACH_STEP: Duration = Duration::from_millis(100);

/// Detaches the on-demand links whose hook `which` picks, back to standby, and returns their
/// hooks. After an error (aya drops a link it cannot detach), both hooks are unloaded and
/// the kernel counts what the classic events skip, as after a failed attach.
fn detach_links(loaded: &mut Loaded, which: impl Fn(&Hook) -> bool) -> Result<Vec<&'static Hook>> {
    let links = std::mem::take(&mut loaded.ia32.links);
    let mut detached = Vec::new();
    let mut failed = None;
    for (h, link) in links {
        if !which(h) || failed.is_some() {
            loaded.ia32.links.push((h, link));
            continue;
        }
        let result = program(&mut loaded.ebpf, h).and_then(|p| {
            let p: &mut BtfTracePoint = p.try_into()?;
            Ok(p.detach(link)?)
        });
        match result {
            Ok(()) => {
                loaded.standby.push(h);
                detached.push(h);
            }
            Err(e) => failed = Some(e.context(format!("detaching {}", h.target.label()))),
        }
    }
    match failed {
        None => Ok(detached),
        Some(e) => {
            let hooks: Vec<&'static Hook> = loaded
                .ia32
                .links
                .drain(..)
                .map(|(h, _)| h)
                .chain(loaded.standby.drain(..))
                .collect();
            give_up_ia32_hooks(loaded, &hooks, "failed to detach", &e)?;
            Err(e.context(
                "detaching tp_btf sys_enter and sys_exit from ia32 syscalls (both unloaded: \
                 what 32-bit processes spawn is counted unseen from now on)",
            ))
        }
    }
}

/// Unloads the on-demand hooks `hooks` after an error, and has the kernel count what the
/// classic events skip, as with `never`; the statuses and the note say what `failed`.
fn give_up_ia32_hooks(
    loaded: &mut Loaded,
    hooks: &[&'static Hook],
    failed: &str,
    e: &anyhow::Error,
) -> Result<()> {
    for h in hooks {
        unload(&mut loaded.ebpf, h);
    }
    set_ia32_mode(&mut loaded.ebpf, ia32_syscalls::UNSEEN)?;
    let labels: Vec<String> = hooks.iter().map(|h| h.target.detailed_label()).collect();
    for status in loaded
        .hooks
        .iter_mut()
        .filter(|s| matches!(s.status, "standby" | "attached") && labels.contains(&s.hook))
    {
        status.status = "failed";
        status.error = Some(format!("{e:#}"));
    }
    for js in loaded.jobs.iter_mut().filter(|js| js.note.is_some()) {
        js.note = Some(format!(
            "skips 32-bit processes' syscalls: tp_btf sys_enter + tp_btf sys_exit {failed}"
        ));
    }
    Ok(())
}

/// The statuses of the on-demand hooks `moved` go from `from` to `to`, and the syscalls
/// job's note says what they have done.
fn set_standby_status(
    loaded: &mut Loaded,
    moved: &[&'static Hook],
    from: &'static str,
    to: &'static str,
) {
    let labels: Vec<String> = moved.iter().map(|h| h.target.detailed_label()).collect();
    for status in loaded
        .hooks
        .iter_mut()
        .filter(|s| s.status == from && labels.contains(&s.hook))
    {
        status.status = to;
    }
    let note = loaded.ia32.note();
    for js in loaded.jobs.iter_mut().filter(|js| js.note.is_some()) {
        js.note = Some(note.clone());
    }
}

/// A syscall-entry hook of the syscalls job: where a fork's or an exec's window opens.
fn opens_windows(h: &Hook) -> bool {
    h.program == "forkprof_sys_enter"
        || (matches!(h.target, Target::FEntry(_))
            && SYSCALL_FUNCTIONS.iter().any(|s| s.program == h.program))
        || matches!(h.target, Target::SyscallEvent(n) if n.starts_with("sys_enter_"))
}

/// Attaches the hooks that `load` deferred, in order, and empties the list. On an error the
/// ones attached stay attached.
pub fn arm(loaded: &mut Loaded) -> Result<()> {
    let classic = loaded.deferred.iter().any(|h| needs_tracefs(h));
    if classic {
        ensure_tracefs()?;
        // Before the events attach: a 32-bit spawn in the scope meanwhile is counted.
        set_ia32_mode(&mut loaded.ebpf, classic_mode(&loaded.standby))?;
    }
    for h in std::mem::take(&mut loaded.deferred) {
        attach_loaded(&mut loaded.ebpf, h)
            .with_context(|| format!("attaching {}", h.target.label()))?;
    }
    for status in &mut loaded.hooks {
        if status.status == "deferred" {
            status.status = "attached";
        }
    }
    Ok(())
}

fn hook_status(
    job: &'static Job,
    h: &Hook,
    status: &'static str,
    error: Option<String>,
) -> HookStatus {
    HookStatus {
        hook: h.target.detailed_label(),
        kind: h.target.kind(),
        target: h.target.name(),
        job: job.name,
        required: job.required,
        status,
        used: false,
        error,
        feeds: job.feeds,
    }
}

fn unload(ebpf: &mut Ebpf, h: &Hook) {
    if let Some(p) = ebpf.program_mut(h.program) {
        let _ = match p {
            aya::programs::Program::RawTracePoint(p) => p.unload(),
            aya::programs::Program::BtfTracePoint(p) => p.unload(),
            aya::programs::Program::FEntry(p) => p.unload(),
            aya::programs::Program::FExit(p) => p.unload(),
            aya::programs::Program::KProbe(p) => p.unload(),
            aya::programs::Program::TracePoint(p) => p.unload(),
            _ => Ok(()),
        };
    }
}

/// Checks that this kernel's prototype of tracepoint `name` starts with the arguments a
/// program reads.
fn check_prototype(kernel: &KernelInfo, name: &str, reads: &[Param]) -> Result<()> {
    let params = kernel
        .params(name)
        .with_context(|| format!("no tracepoint {name} in this kernel's BTF"))?;
    if !params.starts_with(reads) {
        bail!(
            "this kernel's prototype is {}; the program reads {}",
            btf::show_params(params),
            btf::show_params(reads)
        );
    }
    Ok(())
}

/// Loads a raw tracepoint program, once this kernel's prototype of the tracepoint is known to
/// start with the arguments the program reads.
fn load_raw_tp<'a>(
    ebpf: &'a mut Ebpf,
    kernel: &KernelInfo,
    h: &Hook,
) -> Result<&'a mut RawTracePoint> {
    let Target::RawTp(name, reads) = h.target else {
        bail!("{} is not a raw tracepoint", h.target.label());
    };
    check_prototype(kernel, name, reads)?;
    let p: &mut RawTracePoint = program(ebpf, h)?.try_into()?;
    p.load().context("verifier rejected the program")?;
    Ok(p)
}

/// Loads a BTF tracepoint program, once this kernel's prototype of the tracepoint is known to
/// start with the arguments the program reads (the verifier checks the fields it loads).
fn load_btf_tp<'a>(
    ebpf: &'a mut Ebpf,
    kernel: &KernelInfo,
    vmlinux: Option<&Btf>,
    h: &Hook,
) -> Result<&'a mut BtfTracePoint> {
    let Target::BtfTp(name, reads) = h.target else {
        bail!("{} is not a BTF tracepoint", h.target.label());
    };
    check_prototype(kernel, name, reads)?;
    let btf = vmlinux.context("no kernel BTF")?;
    let p: &mut BtfTracePoint = program(ebpf, h)?.try_into()?;
    p.load(name, btf).context("verifier rejected the program")?;
    Ok(p)
}

/// The program of hook `h` in the object.
fn program<'a>(ebpf: &'a mut Ebpf, h: &Hook) -> Result<&'a mut aya::programs::Program> {
    ebpf.program_mut(h.program)
        .ok_or_else(|| anyhow!("program {} missing from the object", h.program))
}

/// Loads the program of hook `h` into the kernel (the verifier runs here) without attaching
/// it.
fn load_hook(ebpf: &mut Ebpf, kernel: &KernelInfo, vmlinux: Option<&Btf>, h: &Hook) -> Result<()> {
    match h.target {
        Target::RawTp(..) => {
            load_raw_tp(ebpf, kernel, h)?;
        }
        Target::BtfTp(..) => {
            load_btf_tp(ebpf, kernel, vmlinux, h)?;
        }
        Target::FEntry(func) => {
            let btf = vmlinux.context("no kernel BTF")?;
            let p: &mut FEntry = program(ebpf, h)?.try_into()?;
            p.load(func, btf).context("load (BPF_PROG_LOAD)")?;
        }
        Target::FExit(func) => {
            let btf = vmlinux.context("no kernel BTF")?;
            let p: &mut FExit = program(ebpf, h)?.try_into()?;
            p.load(func, btf).context("load (BPF_PROG_LOAD)")?;
        }
        Target::KProbe(_) | Target::KRetProbe(_) => {
            let p: &mut KProbe = program(ebpf, h)?.try_into()?;
            p.load().context("load (BPF_PROG_LOAD)")?;
        }
        Target::SyscallEvent(_) => {
            let p: &mut TracePoint = program(ebpf, h)?.try_into()?;
            p.load().context("load (BPF_PROG_LOAD)")?;
        }
    }
    Ok(())
}

/// Whether the loaded program of hook `h`, to be attached later, can attach here. A
/// tracepoint's load has checked that: its prototype was checked and the verifier knows the
/// tracepoint. A kprobe's load checks nothing about its symbol, and a trampoline's does not
/// check that ftrace can patch its function: those attach once and detach again.
fn check_attaches(ebpf: &mut Ebpf, h: &Hook) -> Result<()> {
    match h.target {
        Target::RawTp(..) | Target::BtfTp(..) => {}
        Target::FEntry(_) => {
            let p: &mut FEntry = program(ebpf, h)?.try_into()?;
            let link = p.attach()?;
            p.detach(link)?;
        }
        Target::FExit(_) => {
            let p: &mut FExit = program(ebpf, h)?.try_into()?;
            let link = p.attach()?;
            p.detach(link)?;
        }
        Target::KProbe(func) | Target::KRetProbe(func) => {
            let p: &mut KProbe = program(ebpf, h)?.try_into()?;
            let link = p.attach(func, 0)?;
            p.detach(link)?;
        }
        Target::SyscallEvent(name) => {
            let p: &mut TracePoint = program(ebpf, h)?.try_into()?;
            let link = p.attach("syscalls", name)?;
            p.detach(link)?;
        }
    }
    Ok(())
}

/// Attaches the loaded program of hook `h`.
fn attach_loaded(ebpf: &mut Ebpf, h: &Hook) -> Result<()> {
    match h.target {
        Target::RawTp(name, _) => {
            let p: &mut RawTracePoint = program(ebpf, h)?.try_into()?;
            p.attach(name)?;
        }
        Target::BtfTp(..) => {
            let p: &mut BtfTracePoint = program(ebpf, h)?.try_into()?;
            p.attach()?;
        }
        Target::FEntry(_) => {
            let p: &mut FEntry = program(ebpf, h)?.try_into()?;
            p.attach()?;
        }
        Target::FExit(_) => {
            let p: &mut FExit = program(ebpf, h)?.try_into()?;
            p.attach()?;
        }
        Target::KProbe(func) | Target::KRetProbe(func) => {
            let p: &mut KProbe = program(ebpf, h)?.try_into()?;
            p.attach(func, 0)?;
        }
        Target::SyscallEvent(name) => {
            let p: &mut TracePoint = program(ebpf, h)?.try_into()?;
            p.attach("syscalls", name)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ia32_note_counts_attaches_and_detaches_once_detached() {
        let mut od = Ia32OnDemand {
            links: Vec::new(),
            attaches: 1,
            detaches: 0,
            idle_since: None,
            entries_detached_at: None,
            linger: Duration::from_secs(10),
        };
        assert_eq!(od.note(), ia32_note(Ia32Syscalls::OnDemand, true, true));
        od.detaches = 1;
        assert_eq!(
            od.note(),
            "32-bit processes' syscalls: tp_btf sys_enter + tp_btf sys_exit, attached when the \
             first was seen and detached once none was left for 10 s (attached once, detached \
             once), --ia32-syscalls on-demand"
        );
        od.attaches = 3;
        od.detaches = 2;
        od.linger = Duration::from_millis(200);
        assert!(
            od.note()
                .contains("left for 200 ms (attached 3 times, detached 2 times)"),
            "{}",
            od.note()
        );
    }

    /// The raw tracepoint sources of `job` whose every hook matches `prototypes`, in order.
    fn matching(job: &str, prototypes: &[(&str, &[Param])]) -> Vec<usize> {
        let job = JOBS.iter().find(|j| j.name == job).unwrap();
        let fits = |h: &Hook| match h.target {
            Target::RawTp(name, reads) | Target::BtfTp(name, reads) => prototypes
                .iter()
                .any(|(tp, params)| *tp == name && params.starts_with(reads)),
            _ => false,
        };
        (0..job.sources.len())
            .filter(|&i| job.sources[i].hooks.iter().all(fits))
            .collect()
    }

    /// Prototypes read from each kernel's BTF (KERNEL-NOTES: 6.1 and 6.12 against 6.18).
    const OLD: &[(&str, &[Param])] = &[
        ("sched_process_exit", &[Ptr]),
        ("mmap_lock_acquire_returned", &[Ptr, Ptr, Bool, Bool]),
        ("mmap_lock_released", &[Ptr, Ptr, Bool]),
    ];
    const NEW: &[(&str, &[Param])] = &[
        ("sched_process_exit", &[Ptr, Bool]),
        ("mmap_lock_acquire_returned", &[Ptr, Bool, Bool]),
        ("mmap_lock_released", &[Ptr, Bool]),
    ];

    #[test]
    fn bench_switches_parse_and_every_job_has_a_family() {
        let parse = |empty, only, burn, argv_read| {
            BenchSwitches::parse(BenchVars {
                empty,
                only,
                burn,
                argv_read,
            })
        };
        assert_eq!(
            parse(None, None, None, None).unwrap(),
            BenchSwitches::default()
        );
        assert!(parse(None, None, None, None).unwrap().warning().is_none());
        let s = parse(Some("1"), Some("mmap, faults"), Some("500"), None).unwrap();
        assert!(s.empty);
        assert_eq!(s.burn, 500);
        assert!(!s.argv_read);
        assert!(s.warning().unwrap().contains("FORKPROF_BENCH_BURN=500"));
        // A burn needs the empty programs, and a bound the verifier can follow.
        assert!(parse(None, None, Some("500"), None).is_err());
        assert!(parse(Some("1"), None, Some("50000"), None).is_ok());
        assert!(parse(Some("1"), None, Some("50001"), None).is_err());
        assert!(parse(Some("1"), None, Some("-1"), None).is_err());
        assert_eq!(parse(None, None, Some("0"), None).unwrap().burn, 0);
        // So does the argv read, which is on or off.
        let a = parse(Some("1"), None, None, Some("1")).unwrap();
        assert!(a.argv_read && a.burn == 0);
        assert!(a.warning().unwrap().contains("FORKPROF_BENCH_ARGV_READ=1"));
        let e = parse(None, None, None, Some("1")).unwrap_err();
        assert!(
            e.to_string().contains("needs FORKPROF_BENCH_EMPTY=1"),
            "{e}"
        );
        assert!(parse(Some("1"), None, None, Some("yes")).is_err());
        assert!(!parse(None, None, None, Some("0")).unwrap().argv_read);
        assert_eq!(
            s.only.as_deref(),
            Some(&["mmap".to_string(), "faults".into()][..])
        );
        assert!(s.warning().unwrap().contains("not measurements"));
        assert!(parse(Some("yes"), None, None, None).is_err());
        assert_eq!(proc_slot_mask(None).unwrap(), 32767);
        assert_eq!(proc_slot_mask(Some("1")).unwrap(), 0);
        assert_eq!(proc_slot_mask(Some("4")).unwrap(), 3);
        for bad in ["0", "3", "65536", "x"] {
            assert!(proc_slot_mask(Some(bad)).is_err(), "{bad}");
        }
        let e = parse(None, Some("syscalls,nosuch"), None, None).unwrap_err();
        assert!(e.to_string().contains("\"nosuch\""), "{e}");
        for job in JOBS {
            assert!(FAMILIES.contains(&job.family), "{}", job.name);
            assert!(s.wants(job) == (job.family == "mmap" || job.family == "faults"));
        }
        for f in FAMILIES {
            assert!(JOBS.iter().any(|j| j.family == *f), "{f}");
        }
    }

    #[test]
    fn the_no_fentry_switch_is_0_or_1() {
        assert!(!test_no_fentry(None).unwrap());
        assert!(!test_no_fentry(Some("0")).unwrap());
        assert!(test_no_fentry(Some("1")).unwrap());
        assert!(test_no_fentry(Some("yes")).is_err());
    }

    #[test]
    fn each_kernel_layout_picks_the_program_written_for_it() {
        // The first matching source is the one attached.
        assert_eq!(matching("exit", NEW).first(), Some(&0));
        assert_eq!(matching("exit", OLD), vec![1]);
        assert_eq!(matching("dup_mmap", NEW), vec![4]);
        assert_eq!(matching("dup_mmap", OLD), vec![5]);
        // A prototype nobody wrote a program for matches nothing: never a guessed slot.
        let odd: &[(&str, &[Param])] = &[("sched_process_exit", &[Int(4)])];
        assert!(matching("exit", odd).is_empty());
    }

    #[test]
    fn deferred_syscall_entries_attach_last() {
        let syscalls = JOBS.iter().find(|j| j.name == "syscalls").unwrap();
        let mut hooks: Vec<&Hook> = syscalls.sources.iter().flat_map(|s| s.hooks).collect();
        hooks.sort_by_key(|h| opens_windows(h));
        let first_entry = hooks.iter().position(|h| opens_windows(h)).unwrap();
        // Every entry comes after every return, schedule_tail's and sys_exit included.
        for h in &hooks[..first_entry] {
            assert!(
                matches!(h.target, Target::FExit(_))
                    || h.program == "forkprof_sys_exit"
                    || matches!(h.target, Target::SyscallEvent(n) if n.starts_with("sys_exit_")),
                "{}",
                h.program
            );
        }
        for h in &hooks[first_entry..] {
            assert!(
                matches!(h.target, Target::FEntry(_))
                    || h.program == "forkprof_sys_enter"
                    || matches!(h.target, Target::SyscallEvent(n) if n.starts_with("sys_enter_")),
                "{}",
                h.program
            );
        }
    }

    #[test]
    fn a_many_hook_source_names_itself_by_its_label() {
        let job = JOBS.iter().find(|j| j.name == "syscalls").unwrap();
        let fork_source = |used, note: Option<String>| {
            let status = JobStatus {
                job,
                used: Some(used),
                errors: Vec::new(),
                note,
            };
            phase_sources(&[status]).get(Phase::Fork).unwrap().clone()
        };
        assert_eq!(
            fork_source(0, None),
            "fentry/fexit __x64_sys_* + fexit schedule_tail"
        );
        let classic =
            |mode, standby, attached| fork_source(1, Some(ia32_note(mode, standby, attached)));
        assert_eq!(
            classic(Ia32Syscalls::Never, false, false),
            "tracepoint syscalls:sys_{enter,exit}_* (skips 32-bit processes' syscalls: \
             --ia32-syscalls never)"
        );
        assert_eq!(
            classic(Ia32Syscalls::OnDemand, false, false),
            "tracepoint syscalls:sys_{enter,exit}_* (skips 32-bit processes' syscalls: tp_btf \
             sys_enter + tp_btf sys_exit failed to load)"
        );
        assert_eq!(
            classic(Ia32Syscalls::OnDemand, true, false),
            "tracepoint syscalls:sys_{enter,exit}_* (32-bit processes' syscalls: tp_btf \
             sys_enter + tp_btf sys_exit on demand, none seen)"
        );
        assert_eq!(
            classic(Ia32Syscalls::OnDemand, true, true),
            "tracepoint syscalls:sys_{enter,exit}_* (32-bit processes' syscalls: tp_btf \
             sys_enter + tp_btf sys_exit, attached when the first was seen, --ia32-syscalls \
             on-demand)"
        );
        assert_eq!(fork_source(2, None), "tp_btf sys_enter + tp_btf sys_exit");
    }

    #[test]
    fn every_program_and_phase_is_named_once() {
        let mut programs: Vec<&str> = JOBS
            .iter()
            .flat_map(|j| j.sources.iter())
            .flat_map(|s| s.hooks.iter())
            .map(|h| h.program)
            .collect();
        let n = programs.len();
        programs.sort_unstable();
        programs.dedup();
        assert_eq!(programs.len(), n, "a program is listed twice");
        for j in JOBS {
            assert!(!j.sources.is_empty(), "{} has no source", j.name);
            assert!(
                !j.feeds.contains(&Phase::SpawnCost),
                "{}: spawn_cost is derived",
                j.name
            );
        }
    }
}
