//! Process exit: the start of the teardown -> the parent is notified (signal_generate of the
//! exiting task's exit signal, SIGCHLD after fork, or of SIGCHLD, which a traced child sends
//! its tracer). sched_process_free sends the record without a teardown time when no
//! notification was seen (the parent ignores SIGCHLD); a process whose exit signal is 0
//! (clone without one: its parent is only woken) sends it so at once. Not seen: the custom
//! exit signal of a process whose main thread exited before its last thread (the kernel then
//! sends the leader's signal from the last thread).
//!
//! The start is sched_process_exit of the last thread where that tracepoint fires before
//! exit_mm and says whether the group is dead (6.16+). Older kernels fire it after exit_mm with
//! the task as the only argument: there the last thread is the one that finds the signal
//! struct's `live` count at 0, and the teardown starts at the process's exit_group entry (or at
//! sched_process_exit, without exit_mm, for a process killed by a signal).
use aya_ebpf::programs::BtfTracePointContext;
use forkprof_common::{ExitRecord, ExitRecords, active, kind, ld_outcome, stat};

use super::{dynlink, fork::close_child_run, mm::close_cow_window};
use crate::maps::{self, BtfPtr, EVENTS, kernel_layout};

const SIGCHLD: i64 = 17;

const _: () = assert!(core::mem::offset_of!(ExitRecord, comm) % 8 == 0);

/// sched_process_exit(task, group_dead).
#[inline(always)]
pub fn on_exit_group_dead(ctx: &BtfTracePointContext) {
    let group_dead: u64 = ctx.arg(1);
    if group_dead & 0xff != 0 {
        on_last_thread_exit(BtfPtr::new(ctx.arg(0)), 0);
    }
}

/// sched_process_exit(task): the group is dead when no live thread is left.
#[inline(always)]
pub fn on_exit_task_only(ctx: &BtfTracePointContext) {
    let task = BtfPtr::new(ctx.arg(0));
    let signal = task.ptr_at(kernel_layout!(task_signal));
    if signal.is_null() || signal.u32_at(kernel_layout!(signal_live)) != 0 {
        return;
    }
    let tgid = task.u32_at(kernel_layout!(task_tgid));
    let started = match maps::proc_of(tgid) {
        // SAFETY: map value of a traced process.
        Some(ps) => unsafe { (*ps).exit_start_ns },
        None => 0,
    };
    on_last_thread_exit(task, started);
}

/// exit_group entry, on kernels whose sched_process_exit follows exit_mm: the teardown of a
/// process starts here. In trace-all mode a process first seen now is followed from here, so
/// that its teardown is timed whole (its exit would otherwise start it after exit_mm).
pub fn on_exit_group() {
    let (tgid, _) = maps::current_ids();
    if let Some(ps) = maps::proc_state(tgid, true) {
        // SAFETY: map value of a traced process.
        let ps = unsafe { &mut *ps };
        if ps.exit_start_ns == 0 {
            ps.exit_start_ns = maps::now();
        }
    }
}

/// The last thread of a process is exiting; `started` is when its teardown began (0: now).
/// The record waits in the process's own entry (`ProcState::exit`) for the notification.
#[inline(always)]
fn on_last_thread_exit(task: BtfPtr, started: u64) {
    // The exiting task is the current one: its tgid by a load, no helper call.
    let tgid = task.u32_at(kernel_layout!(task_tgid));
    let Some(ps) = maps::proc_state(tgid, true) else {
        return;
    };
    // SAFETY: map value of a traced process.
    let ps = unsafe { &mut *ps };
    // Two threads may both find no live thread left (older kernels); the first one counts.
    if ps.sent_at_exit.exit.hdr.kind == kind::EXIT {
        return;
    }
    let now = maps::now();
    let start = if started != 0 { started } else { now };
    dynlink::close(ps, ld_outcome::INCOMPLETE);
    let cow = close_cow_window(ps);
    let child_run_ns = close_child_run(ps, now);
    // Written field by field into the map value: a record built on the stack and copied in
    // would take more stack than 6.1's verifier allows beside the caller's.
    let key = ps.key;
    let rec = &mut ps.sent_at_exit.exit;
    maps::set_header(&mut rec.hdr, kind::EXIT, now, key);
    rec.exit_code = task.u32_at(kernel_layout!(task_exit_code));
    rec.notified = 0;
    rec.exit_teardown_ns = 0;
    rec.cow_faults = cow.faults;
    rec.cow_fault_ns = cow.ns;
    rec.exit_ns = start;
    rec.child_run_ns = child_run_ns;
    rec.cgroup_id = maps::cgroup_id();
    // The exiting task is the current one.
    maps::put_comm(&mut rec.comm, task.comm());
    maps::active_add(active::EXITS, 1);
    // No exit signal (clone with none): the parent will only be woken, and nothing marks
    // that. The record goes now, not at the task's free, which RCU can put off for seconds.
    if task.u32_at(kernel_layout!(task_exit_signal)) == 0 {
        finish(tgid, false);
    }
}

/// Sends a pending exit record, with the dynamic-linker record held, and forgets the
/// process; nothing for a process whose last thread has not exited (a thread's SIGCHLD, or
/// the parent of an exiting process).
pub fn finish(tgid: u32, notified: bool) {
    let Some(ps) = maps::proc_of(tgid) else {
        return;
    };
    // SAFETY: map value of a traced process.
    let records = unsafe { &mut (*ps).sent_at_exit };
    let rec = &mut records.exit;
    if rec.hdr.kind != kind::EXIT {
        return;
    }
    if notified {
        rec.notified = 1;
        rec.exit_teardown_ns = maps::now() - rec.exit_ns;
    } else {
        maps::count_lost(stat::EXIT_WITHOUT_NOTIFY);
    }
    // With the dynamic-linker record held since the window closed, if any: one record.
    let flags = maps::submit_flags();
    let sent = if records.ld.hdr.kind == kind::LD {
        EVENTS.output::<ExitRecords>(&*records, flags)
    } else {
        EVENTS.output::<ExitRecord>(&records.exit, flags)
    };
    if sent.is_err() {
        maps::count_lost(stat::RINGBUF_FULL);
    }
    maps::remove_proc(tgid);
    maps::active_add(active::EXITS, -1);
}

pub fn on_signal(ctx: &aya_ebpf::programs::RawTracePointContext) {
    if maps::active(active::EXITS) == 0 {
        return;
    }
    let sig = ctx.arg::<i64>(0) & 0xffff_ffff;
    // Only another signal than SIGCHLD costs a helper call and a load: the exiting task's
    // own exit signal.
    if sig != SIGCHLD
        && sig != i64::from(BtfPtr::current_task().u32_at(kernel_layout!(task_exit_signal)))
    {
        return;
    }
    let (tgid, _) = maps::current_ids();
    finish(tgid, true);
}

pub fn on_free(ctx: &BtfTracePointContext) {
    if maps::active(active::EXITS) == 0 {
        return;
    }
    let task = BtfPtr::new(ctx.arg(0));
    let pid = task.u32_at(kernel_layout!(task_pid));
    if pid != task.u32_at(kernel_layout!(task_tgid)) {
        return;
    }
    finish(pid, false);
}
