//! Process exit: sched_process_exit (last thread, before exit_mm) -> the parent is notified
//! (signal_generate of SIGCHLD from the exiting task). sched_process_free sends the record
//! without a teardown time when no notification was seen.
use aya_ebpf::{helpers::bpf_get_current_comm, programs::RawTracePointContext};
use forkprof_common::{ExitRecord, RecordHeader, active, kind, ld_outcome, stat};

use super::{dynlink, fork::close_child_run, mm::close_cow_window};
use crate::maps::{self, EVENTS, EXITING, PROCS};

const SIGCHLD: i64 = 17;

pub fn on_exit(ctx: &RawTracePointContext) {
    let group_dead: u64 = ctx.arg(1);
    if group_dead & 0xff == 0 {
        return;
    }
    let (tgid, _) = maps::current_ids();
    let Some(ps) = maps::proc_state(tgid, true) else {
        return;
    };
    // SAFETY: map value of a traced process.
    let ps = unsafe { &mut *ps };
    let task: *const u8 = ctx.arg(0);
    let now = maps::now();
    dynlink::close(ps, ld_outcome::INCOMPLETE);
    let rec = ExitRecord {
        hdr: RecordHeader {
            kind: kind::EXIT,
            _pad: 0,
            ts_ns: now,
            proc: ps.key,
        },
        exit_code: maps::read_kernel_u32(task, maps::offsets().exit_code),
        notified: 0,
        exit_teardown_ns: 0,
        cow_faults: close_cow_window(ps),
        exit_ns: now,
        child_run_ns: close_child_run(ps),
        comm: bpf_get_current_comm().unwrap_or([0; 16]),
    };
    if EXITING.insert(tgid, rec, 0).is_err() {
        maps::count_lost(stat::STATE_MAP_FULL);
        return;
    }
    maps::active_add(active::EXITS, 1);
}

fn finish(tgid: u32, notified: bool) {
    let Some(rec) = EXITING.get_ptr_mut(tgid) else {
        return;
    };
    // SAFETY: map value of this process's pending exit.
    let rec = unsafe { &mut *rec };
    if notified {
        rec.notified = 1;
        rec.exit_teardown_ns = maps::now() - rec.exit_ns;
    } else {
        maps::count_lost(stat::EXIT_WITHOUT_NOTIFY);
    }
    if EVENTS
        .output::<ExitRecord>(&*rec, maps::submit_flags())
        .is_err()
    {
        maps::count_lost(stat::RINGBUF_FULL);
    }
    let _ = EXITING.remove(tgid);
    let _ = PROCS.remove(tgid);
    maps::active_add(active::EXITS, -1);
}

pub fn on_signal(ctx: &RawTracePointContext) {
    if maps::active(active::EXITS) == 0 {
        return;
    }
    let sig: i64 = ctx.arg(0);
    if sig & 0xffff_ffff != SIGCHLD {
        return;
    }
    let (tgid, _) = maps::current_ids();
    finish(tgid, true);
}

pub fn on_free(ctx: &RawTracePointContext) {
    if maps::active(active::EXITS) == 0 {
        return;
    }
    let task: *const u8 = ctx.arg(0);
    let off = maps::offsets();
    let pid = maps::read_kernel_u32(task, off.pid);
    if pid != maps::read_kernel_u32(task, off.tgid) {
        return;
    }
    finish(pid, false);
}
