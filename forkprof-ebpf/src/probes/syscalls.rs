//! sys_enter / sys_exit (BTF tracepoints): dispatch by syscall number. Every syscall on the
//! system passes here, so the common path is one compare chain plus (when no window is open)
//! a load of a window counter. Where the kernel allows trampolines, fentry and fexit on the
//! syscall functions forkprof needs take their place (`on_enter_of`, `on_return_of`): they
//! fire only for those syscalls, and no task's syscalls take the tracepoints' slow path.
use aya_ebpf::{
    EbpfContext as _,
    programs::{BtfTracePointContext, TracePointContext},
};
use forkprof_common::{active, nr, nr_ia32};

use super::{dynlink, exec, exit, fork};
use crate::maps::{self, BtfPtr, kernel_layout, regs};

/// The calling convention of a syscall: which table its number is from, and where its
/// arguments are (x86-64: di, si, dx; ia32: bx, cx, dx).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Abi {
    X64,
    Ia32,
}

/// A syscall number as sys_enter and sys_exit see it, in the x86-64 table, with its ABI; None
/// for one forkprof does not follow. A number that names a followed syscall in either table
/// (x86-64 fork is ia32 setpgid; ia32 execve is x86-64 munmap) costs a read of the task's
/// compat status; every other number passes as it is, as x86-64's. The dynamic-linker
/// syscalls need no check: only a 64-bit image has a dynamic-linker window, so an ia32
/// syscall with one of their numbers finds no window to move.
#[inline(always)]
fn as_x86_64(id: i64) -> Option<(i64, Abi)> {
    match id {
        nr::CLONE
        | nr::FORK
        | nr::VFORK
        | nr::EXECVE
        | nr::EXIT_GROUP
        | nr::EXECVEAT
        | nr::CLONE3
        | nr_ia32::FORK
        | nr_ia32::EXECVE
        | nr_ia32::CLONE
        | nr_ia32::VFORK
        | nr_ia32::EXIT_GROUP
        | nr_ia32::EXECVEAT => {
            if maps::in_compat_syscall() {
                nr_ia32::to_x86_64(id).map(|id| (id, Abi::Ia32))
            } else {
                Some((id, Abi::X64))
            }
        }
        _ => Some((id, Abi::X64)),
    }
}

#[inline(always)]
pub fn on_enter(ctx: &BtfTracePointContext) {
    if maps::raw_hooks_for_ia32_only() && !maps::in_compat_syscall() {
        return;
    }
    if let Some((id, _)) = as_x86_64(ctx.arg(1)) {
        on_enter_of(|i| arg_in_regs(BtfPtr::new(ctx.arg(0)), i), id);
    }
}

/// Argument `i` (0-based, up to 2) of an x86-64 syscall, from the caller's `pt_regs`.
#[inline(always)]
pub fn arg_in_regs(regs: BtfPtr, i: u32) -> u64 {
    regs.u64_at(match i {
        0 => regs::DI,
        1 => regs::SI,
        _ => regs::DX,
    })
}

/// A syscall's entry (in the x86-64 table, whatever its ABI: no entry reads an argument that
/// the ABI moves): from sys_enter, or from fentry on its syscall function, which passes its
/// number as a constant (the other branches then compile away), or from a classic syscall
/// event (`on_event_entry`). `arg(i)` gives the syscall's argument `i`, for the two entries
/// that read one (arch_prctl's first, mprotect's third): from the caller's `pt_regs`, or
/// from a classic event's own record.
#[inline(always)]
pub fn on_enter_of(arg: impl Fn(u32) -> u64, id: i64) {
    match id {
        nr::CLONE | nr::FORK | nr::VFORK | nr::CLONE3 => fork::on_enter(id),
        nr::EXECVE | nr::EXECVEAT => exec::on_enter(),
        // Only the syscalls that move the dynamic-linker state machine look anything up:
        // a spawn makes ~33 syscalls, and most of them pass here with a compare.
        nr::ACCESS | nr::OPENAT | nr::ARCH_PRCTL | nr::MUNMAP if maps::active(active::LD) != 0 => {
            dynlink::on_syscall(arg, id)
        }
        // mprotect matters only to a static start-up; ld.so makes one per library (RELRO).
        nr::MPROTECT if maps::active(active::STATIC_START) != 0 => dynlink::on_syscall(arg, id),
        // Once per process, and only where sched_process_exit follows exit_mm (a constant
        // for the verifier: the branch is pruned on other kernels).
        nr::EXIT_GROUP if kernel_layout!(exit_at_syscall) != 0 => exit::on_exit_group(),
        _ => {}
    }
}

#[inline(always)]
pub fn on_exit(ctx: &BtfTracePointContext) {
    if !any_window() || (maps::raw_hooks_for_ia32_only() && !maps::in_compat_syscall()) {
        return;
    }
    let regs = BtfPtr::new(ctx.arg(0));
    let Some((id, abi)) = as_x86_64(regs.u64_at(regs::ORIG_AX) as i64) else {
        return;
    };
    let ret: i64 = ctx.arg(1);
    match id {
        // 0: the new task's first return; the parent gets the child's pid or an error.
        nr::CLONE | nr::FORK | nr::VFORK | nr::CLONE3 if ret == 0 => fork::on_child_return(),
        _ => on_return_of(regs, id, ret, abi),
    }
}

/// One test of the three counters that a syscall's return can close, rather than three
/// branches.
#[inline(always)]
fn any_window() -> bool {
    maps::active(active::FORKS) | maps::active(active::EXECS) | maps::active(active::CHILDREN) != 0
}

/// The return of a fork-family syscall to its caller, or of an exec attempt: from sys_exit,
/// or from fexit on its syscall function (constant `id` and `abi`). A fork child's first
/// return never passes through the function: see `fork::on_child_return`.
#[inline(always)]
pub fn on_return_of(regs: BtfPtr, id: i64, ret: i64, abi: Abi) {
    match id {
        nr::CLONE | nr::FORK | nr::VFORK | nr::CLONE3 if maps::active(active::FORKS) != 0 => {
            fork::on_exit(ret)
        }
        nr::EXECVE | nr::EXECVEAT => exec::on_exit(regs, id, ret, abi),
        _ => {}
    }
}

/// A classic syscall event's entry (`syscalls:sys_enter_NAME`): the kernel runs it only for
/// its syscall, and never for an ia32 one. Its context holds the arguments themselves (not
/// the `pt_regs`): after the common header and the syscall number, from byte 16, eight bytes
/// each (`struct syscall_trace_enter`), so reading one costs a load and no helper call.
#[inline(always)]
pub fn on_event_entry(ctx: &TracePointContext, id: i64) {
    on_enter_of(
        |i| {
            // SAFETY: a tracepoint context is readable for the event's size, which holds the
            // syscall's arguments from byte 16; only arch_prctl's first and mprotect's third
            // are read, each within its event. (The kernel refuses to attach a program that
            // reads past its event's fields, EACCES, and the job would fall back to
            // sys_enter and sys_exit.) A load the verifier checks.
            unsafe {
                core::ptr::read_volatile(
                    ctx.as_ptr()
                        .cast::<u8>()
                        .add(16 + 8 * i as usize)
                        .cast::<u64>(),
                )
            }
        },
        id,
    );
}

/// A classic syscall event's return (`syscalls:sys_exit_NAME`): `ret` at byte 16 of its
/// context (after the common header and the syscall number). A fork child's first return
/// fires it too, with 0, as sys_exit does.
#[inline(always)]
pub fn on_event_return(ctx: &TracePointContext, id: i64) {
    if !any_window() {
        return;
    }
    // SAFETY: a tracepoint context is readable for the event's size; `ret` is a long at 16
    // (`struct syscall_trace_exit`), a load the verifier checks.
    let ret = unsafe { core::ptr::read_volatile(ctx.as_ptr().cast::<u8>().add(16).cast::<i64>()) };
    match id {
        nr::CLONE | nr::FORK | nr::VFORK | nr::CLONE3 if ret == 0 => fork::on_child_return(),
        // Only a failed exec reads its caller's arguments.
        nr::EXECVE | nr::EXECVEAT => on_return_of(maps::current_regs(), id, ret, Abi::X64),
        _ => on_return_of(BtfPtr::new(core::ptr::null()), id, ret, Abi::X64),
    }
}
