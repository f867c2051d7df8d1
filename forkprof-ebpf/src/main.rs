//! forkprof's kernel programs. Each hook is a thin entry that calls into the probe module for
//! its subsystem. Tracepoints whose arguments are kernel structs read (`pt_regs`,
//! `task_struct`) are `#[btf_tracepoint]`s, so their fields are loads, not helper calls; the
//! others are `#[raw_tracepoint]`s. Hot hooks (every syscall, mmap lock, page fault)
//! read the `ACTIVE` window counters first and return when nothing is in flight. With
//! `FORKPROF_BENCH_EMPTY=1` (benchmarks only) every program returns at entry, so the same
//! hooks fire and cost only their dispatch: the floor that forkprof's own work sits on.
#![no_std]
#![no_main]
#![allow(internal_features)]
#![feature(core_intrinsics)]

mod maps;
mod probes;

use forkprof_common::nr;
use probes::syscalls::Abi;

use aya_ebpf::{
    macros::{
        btf_tracepoint, fentry, fexit, kprobe, kretprobe, raw_tracepoint, tracepoint, uprobe,
    },
    programs::{
        BtfTracePointContext, FEntryContext, FExitContext, ProbeContext, RawTracePointContext,
        RetProbeContext, TracePointContext,
    },
};

// BTF tracepoints: their `pt_regs` argument is typed, so its fields are plain loads.
#[btf_tracepoint(function = "sys_enter")]
pub fn forkprof_sys_enter(ctx: BtfTracePointContext) -> i32 {
    if maps::bench_empty() {
        return 0;
    }
    probes::syscalls::on_enter(&ctx);
    0
}

#[btf_tracepoint(function = "sys_exit")]
pub fn forkprof_sys_exit(ctx: BtfTracePointContext) -> i32 {
    if maps::bench_empty() {
        return 0;
    }
    probes::syscalls::on_exit(&ctx);
    0
}

// Where the kernel allows trampolines: fentry and fexit on the syscall functions forkprof
// needs, in place of the two tracepoints above. They fire only for those syscalls, and no
// task's syscalls take the slow path that a probe on sys_enter or sys_exit imposes on all of
// them. Each passes its syscall number as a constant. fork and vfork take no arguments: their
// `__x64_sys_` functions are aliases of `__do_sys_fork` and `__do_sys_vfork`, the names in BTF.

/// fentry on a syscall function (its one argument is the caller's `pt_regs`).
macro_rules! syscall_entry {
    ($program:ident, $function:tt, $nr:expr) => {
        #[fentry(function = $function)]
        pub fn $program(ctx: FEntryContext) -> i32 {
            if maps::bench_empty() {
                return 0;
            }
            probes::syscalls::on_enter_of(
                |i| probes::syscalls::arg_in_regs(maps::BtfPtr::new(ctx.arg(0)), i),
                $nr,
            );
            0
        }
    };
}

/// fexit on a syscall function: its argument, then its return value.
macro_rules! syscall_return {
    ($program:ident, $function:tt, $nr:expr) => {
        syscall_return!($program, $function, $nr, Abi::X64);
    };
    ($program:ident, $function:tt, $nr:expr, $abi:expr) => {
        #[fexit(function = $function)]
        pub fn $program(ctx: FExitContext) -> i32 {
            if maps::bench_empty() {
                return 0;
            }
            let regs = maps::BtfPtr::new(ctx.arg(0));
            probes::syscalls::on_return_of(regs, $nr, ctx.arg(1), $abi);
            0
        }
    };
}

syscall_entry!(forkprof_clone_entry, "__x64_sys_clone", nr::CLONE);
syscall_return!(forkprof_clone_return, "__x64_sys_clone", nr::CLONE);
syscall_entry!(forkprof_clone3_entry, "__x64_sys_clone3", nr::CLONE3);
syscall_return!(forkprof_clone3_return, "__x64_sys_clone3", nr::CLONE3);
syscall_entry!(forkprof_fork_entry, "__do_sys_fork", nr::FORK);
syscall_return!(forkprof_fork_return, "__do_sys_fork", nr::FORK);
syscall_entry!(forkprof_vfork_entry, "__do_sys_vfork", nr::VFORK);
syscall_return!(forkprof_vfork_return, "__do_sys_vfork", nr::VFORK);
syscall_entry!(forkprof_execve_entry, "__x64_sys_execve", nr::EXECVE);
syscall_return!(forkprof_execve_return, "__x64_sys_execve", nr::EXECVE);
syscall_entry!(forkprof_execveat_entry, "__x64_sys_execveat", nr::EXECVEAT);
syscall_return!(forkprof_execveat_return, "__x64_sys_execveat", nr::EXECVEAT);
syscall_entry!(forkprof_access_entry, "__x64_sys_access", nr::ACCESS);
syscall_entry!(forkprof_openat_entry, "__x64_sys_openat", nr::OPENAT);
syscall_entry!(
    forkprof_arch_prctl_entry,
    "__x64_sys_arch_prctl",
    nr::ARCH_PRCTL
);
syscall_entry!(forkprof_munmap_entry, "__x64_sys_munmap", nr::MUNMAP);
syscall_entry!(forkprof_mprotect_entry, "__x64_sys_mprotect", nr::MPROTECT);
syscall_entry!(
    forkprof_exit_group_entry,
    "__x64_sys_exit_group",
    nr::EXIT_GROUP
);

// A 32-bit process's syscalls go through the ia32 table's functions (fork and vfork through
// the same `__do_sys_` functions as above). Its arguments are in other registers; the number
// passed is the x86-64 one, with the ABI.
syscall_entry!(
    forkprof_ia32_clone_entry,
    "__ia32_compat_sys_ia32_clone",
    nr::CLONE
);
syscall_return!(
    forkprof_ia32_clone_return,
    "__ia32_compat_sys_ia32_clone",
    nr::CLONE,
    Abi::Ia32
);
syscall_entry!(forkprof_ia32_clone3_entry, "__ia32_sys_clone3", nr::CLONE3);
syscall_return!(
    forkprof_ia32_clone3_return,
    "__ia32_sys_clone3",
    nr::CLONE3,
    Abi::Ia32
);
syscall_entry!(
    forkprof_ia32_execve_entry,
    "__ia32_compat_sys_execve",
    nr::EXECVE
);
syscall_return!(
    forkprof_ia32_execve_return,
    "__ia32_compat_sys_execve",
    nr::EXECVE,
    Abi::Ia32
);
syscall_entry!(
    forkprof_ia32_execveat_entry,
    "__ia32_compat_sys_execveat",
    nr::EXECVEAT
);
syscall_return!(
    forkprof_ia32_execveat_return,
    "__ia32_compat_sys_execveat",
    nr::EXECVEAT,
    Abi::Ia32
);
syscall_entry!(
    forkprof_ia32_exit_group_entry,
    "__ia32_sys_exit_group",
    nr::EXIT_GROUP
);

// The classic per-syscall events (`syscalls:sys_enter_NAME`), with `--ia32-syscalls
// on-demand` or `never` where trampolines are refused: every syscall still takes the slow
// path, but the kernel runs a program only for the syscalls named, where sys_enter and
// sys_exit run two for every syscall of every task. They never fire for an ia32 syscall
// (x86's `ARCH_TRACE_IGNORE_COMPAT_SYSCALLS`): task_newtask and sched_process_exec count what
// a 32-bit process spawned unseen (`stat::IA32_UNSEEN`), and on demand the agent then
// attaches sys_enter and sys_exit for ia32 syscalls only (`ia32_syscalls::RAW_FOR_IA32`).

/// A classic event at a syscall's entry.
macro_rules! syscall_event_entry {
    ($program:ident, $event:tt, $nr:expr) => {
        #[tracepoint(category = "syscalls", name = $event)]
        pub fn $program(ctx: TracePointContext) -> u32 {
            if maps::bench_empty() {
                return 0;
            }
            probes::syscalls::on_event_entry(&ctx, $nr);
            0
        }
    };
}

/// A classic event at a syscall's return.
macro_rules! syscall_event_return {
    ($program:ident, $event:tt, $nr:expr) => {
        #[tracepoint(category = "syscalls", name = $event)]
        pub fn $program(ctx: TracePointContext) -> u32 {
            if maps::bench_empty() {
                return 0;
            }
            probes::syscalls::on_event_return(&ctx, $nr);
            0
        }
    };
}

syscall_event_entry!(forkprof_ev_clone_entry, "sys_enter_clone", nr::CLONE);
syscall_event_return!(forkprof_ev_clone_return, "sys_exit_clone", nr::CLONE);
syscall_event_entry!(forkprof_ev_clone3_entry, "sys_enter_clone3", nr::CLONE3);
syscall_event_return!(forkprof_ev_clone3_return, "sys_exit_clone3", nr::CLONE3);
syscall_event_entry!(forkprof_ev_fork_entry, "sys_enter_fork", nr::FORK);
syscall_event_return!(forkprof_ev_fork_return, "sys_exit_fork", nr::FORK);
syscall_event_entry!(forkprof_ev_vfork_entry, "sys_enter_vfork", nr::VFORK);
syscall_event_return!(forkprof_ev_vfork_return, "sys_exit_vfork", nr::VFORK);
syscall_event_entry!(forkprof_ev_execve_entry, "sys_enter_execve", nr::EXECVE);
syscall_event_return!(forkprof_ev_execve_return, "sys_exit_execve", nr::EXECVE);
syscall_event_entry!(
    forkprof_ev_execveat_entry,
    "sys_enter_execveat",
    nr::EXECVEAT
);
syscall_event_return!(
    forkprof_ev_execveat_return,
    "sys_exit_execveat",
    nr::EXECVEAT
);
syscall_event_entry!(forkprof_ev_access_entry, "sys_enter_access", nr::ACCESS);
syscall_event_entry!(forkprof_ev_openat_entry, "sys_enter_openat", nr::OPENAT);
syscall_event_entry!(
    forkprof_ev_arch_prctl_entry,
    "sys_enter_arch_prctl",
    nr::ARCH_PRCTL
);
syscall_event_entry!(forkprof_ev_munmap_entry, "sys_enter_munmap", nr::MUNMAP);
syscall_event_entry!(
    forkprof_ev_mprotect_entry,
    "sys_enter_mprotect",
    nr::MPROTECT
);
syscall_event_entry!(
    forkprof_ev_exit_group_entry,
    "sys_enter_exit_group",
    nr::EXIT_GROUP
);

/// A new task's first return never passes through its syscall's function: `ret_from_fork`
/// calls `schedule_tail` first, for every new task.
#[fexit(function = "schedule_tail")]
pub fn forkprof_first_return(_ctx: FExitContext) -> i32 {
    if maps::bench_empty() {
        return 0;
    }
    probes::fork::on_child_return();
    0
}

#[btf_tracepoint(function = "task_newtask")]
pub fn forkprof_task_newtask(ctx: BtfTracePointContext) -> i32 {
    if maps::bench_empty() {
        return 0;
    }
    probes::fork::on_newtask(&ctx);
    0
}

// The mmap_lock tracepoints had a `memcg_path` argument before `write` until 6.14: one
// program per layout; the agent attaches the one that matches this kernel's BTF prototype.

/// mmap_lock_acquire_returned(mm, write, success)
#[raw_tracepoint(tracepoint = "mmap_lock_acquire_returned")]
pub fn forkprof_mmap_lock_acquired(ctx: RawTracePointContext) -> i32 {
    if maps::bench_empty() {
        return 0;
    }
    probes::mm::on_lock_acquired(&ctx, 1, 2);
    0
}

/// mmap_lock_acquire_returned(mm, memcg_path, write, success)
#[raw_tracepoint(tracepoint = "mmap_lock_acquire_returned")]
pub fn forkprof_mmap_lock_acquired_memcg(ctx: RawTracePointContext) -> i32 {
    if maps::bench_empty() {
        return 0;
    }
    probes::mm::on_lock_acquired(&ctx, 2, 3);
    0
}

/// mmap_lock_released(mm, write)
#[raw_tracepoint(tracepoint = "mmap_lock_released")]
pub fn forkprof_mmap_lock_released(ctx: RawTracePointContext) -> i32 {
    if maps::bench_empty() {
        return 0;
    }
    probes::mm::on_lock_released(&ctx, 1);
    0
}

/// mmap_lock_released(mm, memcg_path, write)
#[raw_tracepoint(tracepoint = "mmap_lock_released")]
pub fn forkprof_mmap_lock_released_memcg(ctx: RawTracePointContext) -> i32 {
    if maps::bench_empty() {
        return 0;
    }
    probes::mm::on_lock_released(&ctx, 2);
    0
}

#[fentry(function = "dup_mmap")]
pub fn forkprof_dup_mmap_fentry(_ctx: FEntryContext) -> i32 {
    if maps::bench_empty() {
        return 0;
    }
    probes::mm::on_dup_mmap_entry();
    0
}

#[fexit(function = "dup_mmap")]
pub fn forkprof_dup_mmap_fexit(_ctx: FExitContext) -> i32 {
    if maps::bench_empty() {
        return 0;
    }
    probes::mm::on_dup_mmap_return();
    0
}

// Where dup_mmap is inlined (6.12): the first call it makes once it holds the parent's mmap
// write lock, and the first after it releases it, bracket the span the mmap_lock tracepoints
// bracket, with two hits per fork instead of one per mmap_lock event of every task.

#[fentry(function = "uprobe_dup_mmap")]
pub fn forkprof_dup_mmap_locked_fentry(_ctx: FEntryContext) -> i32 {
    if maps::bench_empty() {
        return 0;
    }
    probes::mm::on_dup_mmap_entry();
    0
}

#[fentry(function = "dup_userfaultfd_complete")]
pub fn forkprof_dup_mmap_unlocked_fentry(_ctx: FEntryContext) -> i32 {
    if maps::bench_empty() {
        return 0;
    }
    probes::mm::on_dup_mmap_return();
    0
}

#[kprobe]
pub fn forkprof_dup_mmap_locked_kprobe(_ctx: ProbeContext) -> u32 {
    if maps::bench_empty() {
        return 0;
    }
    probes::mm::on_dup_mmap_entry();
    0
}

#[kprobe]
pub fn forkprof_dup_mmap_unlocked_kprobe(_ctx: ProbeContext) -> u32 {
    if maps::bench_empty() {
        return 0;
    }
    probes::mm::on_dup_mmap_return();
    0
}

#[kprobe]
pub fn forkprof_dup_mmap_kprobe(_ctx: ProbeContext) -> u32 {
    if maps::bench_empty() {
        return 0;
    }
    probes::mm::on_dup_mmap_entry();
    0
}

#[kretprobe]
pub fn forkprof_dup_mmap_kretprobe(_ctx: RetProbeContext) -> u32 {
    if maps::bench_empty() {
        return 0;
    }
    probes::mm::on_dup_mmap_return();
    0
}

#[fentry(function = "do_wp_page")]
pub fn forkprof_wp_fault_fentry(_ctx: FEntryContext) -> i32 {
    if maps::bench_empty() {
        return 0;
    }
    probes::mm::on_wp_fault_entry();
    0
}

#[fexit(function = "do_wp_page")]
pub fn forkprof_wp_fault_fexit(_ctx: FExitContext) -> i32 {
    if maps::bench_empty() {
        return 0;
    }
    probes::mm::on_wp_fault_return();
    0
}

#[kprobe]
pub fn forkprof_wp_fault_kprobe(_ctx: ProbeContext) -> u32 {
    if maps::bench_empty() {
        return 0;
    }
    probes::mm::on_wp_fault_entry();
    0
}

#[kretprobe]
pub fn forkprof_wp_fault_kretprobe(_ctx: RetProbeContext) -> u32 {
    if maps::bench_empty() {
        return 0;
    }
    probes::mm::on_wp_fault_return();
    0
}

#[raw_tracepoint(tracepoint = "page_fault_user")]
pub fn forkprof_page_fault_user(ctx: RawTracePointContext) -> i32 {
    if maps::bench_empty() {
        return 0;
    }
    probes::mm::on_page_fault(&ctx);
    0
}

#[raw_tracepoint(tracepoint = "sched_prepare_exec")]
pub fn forkprof_sched_prepare_exec(_ctx: RawTracePointContext) -> i32 {
    if maps::bench_empty() {
        return 0;
    }
    probes::exec::on_prepare_exec();
    0
}

// Before 6.10 there is no sched_prepare_exec: the entry of begin_new_exec is the same point.
#[fentry(function = "begin_new_exec")]
pub fn forkprof_begin_new_exec_fentry(_ctx: FEntryContext) -> i32 {
    if maps::bench_empty() {
        return 0;
    }
    probes::exec::on_prepare_exec();
    0
}

#[kprobe]
pub fn forkprof_begin_new_exec_kprobe(_ctx: ProbeContext) -> u32 {
    if maps::bench_empty() {
        return 0;
    }
    probes::exec::on_prepare_exec();
    0
}

#[btf_tracepoint(function = "sched_process_exec")]
pub fn forkprof_sched_process_exec(ctx: BtfTracePointContext) -> i32 {
    if maps::bench_empty() {
        maps::bench_at_exec(maps::BtfPtr::new(ctx.arg(0)), maps::BtfPtr::new(ctx.arg(2)));
        return 0;
    }
    probes::exec::on_process_exec(&ctx);
    0
}

#[raw_tracepoint(tracepoint = "writeback_dirty_inode_start")]
pub fn forkprof_dirty_inode_start(_ctx: RawTracePointContext) -> i32 {
    if maps::bench_empty() {
        return 0;
    }
    probes::atime::on_dirty_start();
    0
}

#[raw_tracepoint(tracepoint = "writeback_dirty_inode")]
pub fn forkprof_dirty_inode(_ctx: RawTracePointContext) -> i32 {
    if maps::bench_empty() {
        return 0;
    }
    probes::atime::on_dirty_end();
    0
}

/// sched_process_exit(task, group_dead): 6.16+, before exit_mm.
#[btf_tracepoint(function = "sched_process_exit")]
pub fn forkprof_sched_process_exit(ctx: BtfTracePointContext) -> i32 {
    if maps::bench_empty() {
        return 0;
    }
    probes::exit::on_exit_group_dead(&ctx);
    0
}

/// sched_process_exit(task): older kernels, after exit_mm.
#[btf_tracepoint(function = "sched_process_exit")]
pub fn forkprof_sched_process_exit_task(ctx: BtfTracePointContext) -> i32 {
    if maps::bench_empty() {
        return 0;
    }
    probes::exit::on_exit_task_only(&ctx);
    0
}

#[raw_tracepoint(tracepoint = "signal_generate")]
pub fn forkprof_signal_generate(ctx: RawTracePointContext) -> i32 {
    if maps::bench_empty() {
        return 0;
    }
    probes::exit::on_signal(&ctx);
    0
}

#[btf_tracepoint(function = "sched_process_free")]
pub fn forkprof_sched_process_free(ctx: BtfTracePointContext) -> i32 {
    if maps::bench_empty() {
        return 0;
    }
    probes::exit::on_free(&ctx);
    0
}

#[uprobe]
pub fn forkprof_ld_debug_state(_ctx: ProbeContext) -> u32 {
    if maps::bench_empty() {
        return 0;
    }
    probes::dynlink::on_debug_state();
    0
}

#[uprobe]
pub fn forkprof_libc_start_main(_ctx: ProbeContext) -> u32 {
    if maps::bench_empty() {
        return 0;
    }
    probes::dynlink::on_libc_start_main();
    0
}

// A capability probe for `forkprof doctor`: an empty uprobe that tells whether this kernel
// lets forkprof attach the uprobes of `--precise-ld`.

#[uprobe]
pub fn forkprof_probe_uprobe(_ctx: ProbeContext) -> u32 {
    0
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
