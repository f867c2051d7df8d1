//! execve/execveat: one record per attempt, split at the point of no return (the
//! sched_prepare_exec tracepoint from 6.10; before that, the entry of `begin_new_exec`, where
//! that tracepoint was later added, through fentry or a kprobe) and sched_process_exec (new
//! image loaded).
use aya_ebpf::{
    helpers::{bpf_probe_read_user, bpf_probe_read_user_str_bytes},
    programs::RawTracePointContext,
};
use forkprof_common::{
    ARG_SLOTS, ExecArgsRecord, ExecEndRecord, ProcState, active, kind, ld_state, nr, stat,
};

use super::{fork::close_child_run, mm::close_cow_window};
use crate::maps::{self, EVENTS, regs};

/// argv entries counted (not copied) beyond `ARG_SLOTS`.
const ARGC_COUNT_MAX: u32 = 512;

/// Syscall entry: the path and argv go straight into the ring buffer (`ExecArgsRecord`); the
/// attempt's times are kept in the process's own entry until the syscall returns. No map
/// of its own: an attempt costs one reservation, not a hash insert, lookups and a delete of
/// a record this size (docs/kernel-findings.md).
pub fn on_enter(ctx: &RawTracePointContext, id: i64) {
    let (tgid, tid) = maps::current_ids();
    let Some(ps) = maps::proc_state(tgid, true) else {
        return;
    };
    // SAFETY: map value of a traced process.
    let ps = unsafe { &mut *ps };
    let start = maps::now();
    send_args(ctx, id, ps, tid, start);
    if ps.in_exec == 0 {
        maps::active_add(active::EXECS, 1);
    }
    ps.in_exec = 1;
    ps.exec_start_ns = start;
    ps.exec_tid = tid;
    ps.exec_prepared_at = 0;
    ps.exec_loaded_at = 0;
    // Only a fork child's first attempt gets a child_run; later ones get 0.
    ps.child_run_ns = close_child_run(ps);
}

/// The attempt's `ExecArgsRecord`, written in place in the ring buffer.
#[inline(always)]
fn send_args(ctx: &RawTracePointContext, id: i64, ps: &ProcState, tid: u32, start: u64) {
    let Some(mut entry) = EVENTS.reserve::<ExecArgsRecord>(0) else {
        maps::count_lost(stat::RINGBUF_FULL);
        return;
    };
    // SAFETY: the reservation is ours until submitted; every field is written below before
    // the submit (the strings' tails beyond their NUL are never read).
    let rec = unsafe { &mut *entry.as_mut_ptr() };
    let regs_ptr: *const u8 = ctx.arg(0);
    let (path_reg, argv_reg) = if id == nr::EXECVE {
        (regs::DI, regs::SI)
    } else {
        (regs::SI, regs::DX)
    };
    let path = maps::read_kernel_u64(regs_ptr, path_reg) as *const u8;
    let argv = maps::read_kernel_u64(regs_ptr, argv_reg) as *const *const u8;
    maps::set_header(&mut rec.hdr, kind::EXEC_ARGS, start, ps.key);
    rec.tid = tid;
    rec.path[0] = 0;
    // SAFETY: user pointer from the syscall's arguments; the helper validates it.
    let _ = unsafe { bpf_probe_read_user_str_bytes(path, &mut rec.path) };
    let mut argc = 0u32;
    for i in 0..ARG_SLOTS {
        rec.args[i][0] = 0;
    }
    if !argv.is_null() {
        for i in 0..ARG_SLOTS {
            // SAFETY: as above.
            let arg = unsafe { bpf_probe_read_user(argv.add(i)) }.unwrap_or(core::ptr::null());
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
    entry.submit(maps::submit_flags());
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
    entry.submit(maps::submit_flags());
}
