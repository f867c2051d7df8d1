//! execve/execveat: one record per attempt, split at the point of no return (the
//! sched_prepare_exec tracepoint from 6.10; before that, the entry of `begin_new_exec`, where
//! that tracepoint was later added, through fentry or a kprobe) and sched_process_exec (new
//! image loaded).
use aya_ebpf::helpers::{bpf_probe_read_user, bpf_probe_read_user_str_bytes, generated};
use forkprof_common::{
    ARG_SLOTS, ExecArgsRecord, ExecEndRecord, ProcState, active, kind, ld_state, nr, stat,
};

use super::{fork::close_child_run, mm::close_cow_window};
use crate::maps::{self, EVENTS, Regs, regs};

/// argv entries counted (not copied) beyond `ARG_SLOTS`.
const ARGC_COUNT_MAX: u32 = 512;

/// Syscall entry: the path and argv go straight into the ring buffer (`ExecArgsRecord`); the
/// attempt's times are kept in the process's own entry until the syscall returns. No map
/// of its own: an attempt costs one reservation, not a hash insert, lookups and a delete of
/// a record this size (docs/kernel-findings.md).
pub fn on_enter(regs: Regs, id: i64) {
    let (tgid, tid) = maps::current_ids();
    let Some(ps) = maps::proc_state(tgid, true) else {
        return;
    };
    // SAFETY: map value of a traced process.
    let ps = unsafe { &mut *ps };
    let start = maps::now();
    send_args(regs, id, ps, tid, start);
    if ps.in_exec == 0 {
        maps::active_add(active::EXECS, 1);
    }
    ps.in_exec = 1;
    ps.exec_start_ns = start;
    ps.exec_tid = tid;
    maps::store(&mut ps.exec_prepared_at, 0);
    maps::store(&mut ps.exec_loaded_at, 0);
    // Only a fork child's first attempt gets a child_run; later ones get 0.
    ps.child_run_ns = close_child_run(ps, start);
}

/// The attempt's `ExecArgsRecord`, written in place in the ring buffer.
#[inline(always)]
fn send_args(regs: Regs, id: i64, ps: &ProcState, tid: u32, start: u64) {
    let Some(mut entry) = EVENTS.reserve::<ExecArgsRecord>(0) else {
        maps::count_lost(stat::RINGBUF_FULL);
        return;
    };
    // SAFETY: the reservation is ours until submitted; every field is written below before
    // the submit, except what the agent never reads: the strings' tails beyond their NUL and
    // the argument slots from `argc` on.
    let rec = unsafe { &mut *entry.as_mut_ptr() };
    // execve(path, argv, ..), execveat(dirfd, path, argv, ..); a constant offset per branch.
    let (path, argv) = if id == nr::EXECVE {
        (regs.get(regs::DI), regs.get(regs::SI))
    } else {
        (regs.get(regs::SI), regs.get(regs::DX))
    };
    let (path, argv) = (path as *const u8, argv as *const *const u8);
    maps::set_header(&mut rec.hdr, kind::EXEC_ARGS, start, ps.key);
    rec.tid = tid;
    rec.path[0] = 0;
    // SAFETY: user pointer from the syscall's arguments; the helper validates it.
    let _ = unsafe { bpf_probe_read_user_str_bytes(path, &mut rec.path) };
    // The slots from `argc` on are left as the ring buffer had them: the agent reads only
    // the first `argc`, and not zeroing them spares writing a cache line per slot.
    let mut argc = 0u32;
    if !argv.is_null() {
        let ptrs = arg_pointers(argv);
        for (i, &arg) in ptrs.iter().enumerate() {
            if arg.is_null() {
                break;
            }
            // SAFETY: as above.
            let _ = unsafe { bpf_probe_read_user_str_bytes(arg, &mut rec.args[i]) };
            argc += 1;
        }
        if argc == ARG_SLOTS as u32 {
            for i in ARG_SLOTS as u32..ARGC_COUNT_MAX {
                // SAFETY: as above.
                let arg = unsafe { bpf_probe_read_user(argv.add(i as usize)) }
                    .unwrap_or(core::ptr::null());
                if arg.is_null() {
                    break;
                }
                argc += 1;
            }
        }
    }
    rec.argc = argc;
    entry.submit(maps::QUIET);
}

/// argv's first `ARG_SLOTS` pointers, up to its NULL (the rest are not read by the caller).
/// One user read of the whole block, where each read costs a helper call and a hardened
/// usercopy check: a pointer at a time only when the block crosses into an unmapped page.
#[inline(always)]
fn arg_pointers(argv: *const *const u8) -> [*const u8; ARG_SLOTS] {
    // Not zeroed first (a zeroing is a byte loop, `maps::store`): the helper writes every
    // byte, what it read or zeros when it fails.
    let mut ptrs = core::mem::MaybeUninit::<[*const u8; ARG_SLOTS]>::uninit();
    // SAFETY: `ptrs` is ARG_SLOTS writable pointers; the helper validates the user address.
    let whole = unsafe {
        generated::bpf_probe_read_user(
            ptrs.as_mut_ptr().cast(),
            core::mem::size_of::<[*const u8; ARG_SLOTS]>() as u32,
            argv.cast(),
        )
    };
    // SAFETY: written whole by the helper above.
    let mut ptrs = unsafe { ptrs.assume_init() };
    if whole != 0 {
        for (i, slot) in ptrs.iter_mut().enumerate() {
            // SAFETY: as above.
            *slot = unsafe { bpf_probe_read_user(argv.add(i)) }.unwrap_or(core::ptr::null());
            if slot.is_null() {
                break;
            }
        }
    }
    ptrs
}

/// The current process's exec attempt in flight, if any.
#[inline(always)]
fn exec_in_flight() -> Option<&'static mut ProcState> {
    maps::process_in_window(active::EXECS).filter(|ps| ps.in_exec != 0)
}

pub fn on_prepare_exec() {
    if let Some(ps) = exec_in_flight() {
        ps.exec_prepared_at = maps::now();
    }
}

pub fn on_process_exec() {
    if let Some(ps) = exec_in_flight() {
        ps.exec_loaded_at = maps::now();
    }
}

pub fn on_exit(ret: i64) {
    let Some(ps) = exec_in_flight() else {
        return;
    };
    // Two threads' attempts at once: the window is the latest attempt's, and another
    // thread's failure does not close it. A success closes it whichever thread made the
    // attempt (one that was not the main thread returns with the main thread's id).
    let (_, tid) = maps::current_ids();
    if ret != 0 && tid != ps.exec_tid {
        return;
    }
    let end = maps::now();
    ps.in_exec = 0;
    maps::active_add(active::EXECS, -1);
    let (mut cow_faults, mut cow_fault_ns) = (0, 0);
    if ret == 0 {
        let cow = close_cow_window(ps);
        cow_faults = cow.faults;
        cow_fault_ns = cow.ns;
        if ps.ld_state == ld_state::NONE {
            maps::active_add(active::LD, 1);
        }
        ps.ld_state = ld_state::START;
        ps.ld_t0 = end;
        ps.ld_syscalls = 0;
        ps.ld_openat = 0;
    }
    let (atime_count, atime_ns, child_run_ns) = (ps.atime_count, ps.atime_ns, ps.child_run_ns);
    ps.child_run_ns = 0;
    ps.atime_count = 0;
    ps.atime_ns = 0;
    let Some(mut entry) = EVENTS.reserve::<ExecEndRecord>(0) else {
        maps::count_lost(stat::RINGBUF_FULL);
        return;
    };
    // SAFETY: the reservation is ours until submitted; every field is written below.
    let rec = unsafe { &mut *entry.as_mut_ptr() };
    let start = ps.exec_start_ns;
    let prepared_at = ps.exec_prepared_at;
    let loaded_at = ps.exec_loaded_at;
    maps::set_header(&mut rec.hdr, kind::EXEC_END, end, ps.key);
    rec.tid = ps.exec_tid;
    rec.errno = if ret < 0 { -ret as i32 } else { 0 };
    rec.start_ns = start;
    rec.exec_prepare_ns = if prepared_at != 0 {
        prepared_at - start
    } else {
        0
    };
    rec.exec_load_ns = if prepared_at != 0 && loaded_at != 0 {
        loaded_at - prepared_at
    } else {
        0
    };
    rec.exec_ns = end - start;
    rec.atime_count = atime_count;
    rec._pad = 0;
    rec.atime_ns = atime_ns;
    rec.cow_faults = cow_faults;
    rec.cow_fault_ns = cow_fault_ns;
    rec.child_run_ns = child_run_ns;
    rec.cgroup_id = maps::cgroup_id();
    entry.submit(maps::QUIET);
}
