//! execve/execveat: one record per attempt, split at the point of no return (the
//! sched_prepare_exec tracepoint from 6.10; before that, the entry of `begin_new_exec`, where
//! that tracepoint was later added, through fentry or a kprobe) and sched_process_exec (new
//! image loaded).
use aya_ebpf::{
    helpers::{bpf_probe_read_user, bpf_probe_read_user_str_bytes},
    programs::RawTracePointContext,
};
use forkprof_common::{ARG_SLOTS, RecordHeader, active, kind, ld_state, nr, stat};

use super::{fork::close_child_run, mm::close_cow_window};
use crate::maps::{self, EVENTS, EXEC_SCRATCH, EXECS, regs};

/// argv entries counted (not copied) beyond `ARG_SLOTS`.
const ARGC_COUNT_MAX: u32 = 512;

pub fn on_enter(ctx: &RawTracePointContext, id: i64) {
    let (tgid, tid) = maps::current_ids();
    let Some(ps) = maps::proc_state(tgid, true) else {
        return;
    };
    let Some(rec) = EXEC_SCRATCH.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: per-CPU scratch value; nothing else runs on this CPU meanwhile.
    let rec = unsafe { &mut *rec };
    let regs_ptr: *const u8 = ctx.arg(0);
    let (path_reg, argv_reg) = if id == nr::EXECVE {
        (regs::DI, regs::SI)
    } else {
        (regs::SI, regs::DX)
    };
    let path = maps::read_kernel_u64(regs_ptr, path_reg) as *const u8;
    let argv = maps::read_kernel_u64(regs_ptr, argv_reg) as *const *const u8;

    rec.hdr = RecordHeader::default();
    rec.tid = tid;
    rec.errno = 0;
    rec.start_ns = maps::now();
    rec.exec_prepare_ns = 0;
    rec.exec_load_ns = 0;
    rec.exec_ns = 0;
    rec.atime_count = 0;
    rec.atime_ns = 0;
    rec.cow_faults = 0;
    rec.cow_fault_ns = 0;
    rec.child_run_ns = 0;
    rec.cgroup_id = 0;
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
    if EXECS.insert(tgid, rec, 0).is_err() {
        maps::count_lost(stat::STATE_MAP_FULL);
        return;
    }
    // SAFETY: map value of a traced process.
    let ps = unsafe { &mut *ps };
    ps.in_exec = 1;
    // Only a fork child's first attempt gets a child_run; later ones get 0.
    ps.child_run_ns = close_child_run(ps);
    maps::active_add(active::EXECS, 1);
}

/// Marks a phase boundary of the exec in flight (absolute time, turned into a duration later).
#[inline(always)]
fn stamp(field: fn(&mut forkprof_common::ExecRecord) -> &mut u64) {
    if maps::active(active::EXECS) == 0 {
        return;
    }
    let (tgid, _) = maps::current_ids();
    if let Some(rec) = EXECS.get_ptr_mut(tgid) {
        // SAFETY: map value of this process's exec in flight.
        *field(unsafe { &mut *rec }) = maps::now();
    }
}

pub fn on_prepare_exec() {
    stamp(|r| &mut r.exec_prepare_ns);
}

pub fn on_process_exec() {
    stamp(|r| &mut r.exec_load_ns);
}

pub fn on_exit(ret: i64) {
    let (tgid, _) = maps::current_ids();
    let Some(rec) = EXECS.get_ptr_mut(tgid) else {
        return;
    };
    // SAFETY: map value of this process's exec in flight.
    let rec = unsafe { &mut *rec };
    let end = maps::now();
    let prepared_at = rec.exec_prepare_ns;
    let loaded_at = rec.exec_load_ns;
    rec.exec_ns = end - rec.start_ns;
    rec.exec_prepare_ns = if prepared_at != 0 {
        prepared_at - rec.start_ns
    } else {
        0
    };
    rec.exec_load_ns = if prepared_at != 0 && loaded_at != 0 {
        loaded_at - prepared_at
    } else {
        0
    };
    rec.errno = if ret < 0 { -ret as i32 } else { 0 };
    if let Some(ps) = maps::proc_state(tgid, false) {
        // SAFETY: map value of a traced process.
        let ps = unsafe { &mut *ps };
        rec.hdr = RecordHeader {
            kind: kind::EXEC,
            _pad: 0,
            ts_ns: end,
            proc: ps.key,
        };
        rec.atime_count = ps.atime_count;
        rec.atime_ns = ps.atime_ns;
        rec.child_run_ns = ps.child_run_ns;
        rec.cgroup_id = maps::cgroup_id();
        ps.child_run_ns = 0;
        ps.atime_count = 0;
        ps.atime_ns = 0;
        ps.in_exec = 0;
        if ret == 0 {
            let cow = close_cow_window(ps);
            rec.cow_faults = cow.faults;
            rec.cow_fault_ns = cow.ns;
            if ps.ld_state == ld_state::NONE {
                maps::active_add(active::LD, 1);
            }
            ps.ld_state = ld_state::START;
            ps.ld_t0 = end;
            ps.ld_syscalls = 0;
            ps.ld_openat = 0;
        }
        if EVENTS
            .output::<forkprof_common::ExecRecord>(&*rec, maps::submit_flags())
            .is_err()
        {
            maps::count_lost(stat::RINGBUF_FULL);
        }
    }
    let _ = EXECS.remove(tgid);
    maps::active_add(active::EXECS, -1);
}
