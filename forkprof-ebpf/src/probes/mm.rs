//! Address-space costs: the page-table copy inside fork (bracketed by the parent's mm write
//! lock) and copy-on-write faults after fork.
use aya_ebpf::programs::RawTracePointContext;
use forkprof_common::{ProcState, active};

use crate::maps::{self, FORKS, PROCS};

/// x86 page-fault error code bits: the page was present, and the access was a write.
const PF_PROT_WRITE: u64 = 0x1 | 0x2;

pub fn on_lock_acquired(ctx: &RawTracePointContext) {
    if maps::active(active::FORKS) == 0 {
        return;
    }
    let write: u64 = ctx.arg(1);
    let success: u64 = ctx.arg(2);
    if write & 0xff == 0 || success & 0xff == 0 {
        return;
    }
    let (_, tid) = maps::current_ids();
    let Some(fs) = FORKS.get_ptr_mut(tid) else {
        return;
    };
    // SAFETY: this thread's map value.
    let fs = unsafe { &mut *fs };
    // dup_mmap runs before task_newtask; the first write lock in the syscall is the parent's mm.
    if fs.pt_mm == 0 && fs.created_ns == 0 {
        fs.pt_mm = ctx.arg(0);
        fs.pt_start = maps::now();
    }
}

pub fn on_lock_released(ctx: &RawTracePointContext) {
    if maps::active(active::FORKS) == 0 {
        return;
    }
    let write: u64 = ctx.arg(1);
    if write & 0xff == 0 {
        return;
    }
    let (_, tid) = maps::current_ids();
    let Some(fs) = FORKS.get_ptr_mut(tid) else {
        return;
    };
    // SAFETY: this thread's map value.
    let fs = unsafe { &mut *fs };
    let mm: u64 = ctx.arg(0);
    if fs.pt_mm == mm && fs.pt_ns == 0 {
        fs.pt_ns = maps::now() - fs.pt_start;
    }
}

pub fn on_page_fault(ctx: &RawTracePointContext) {
    let error_code: u64 = ctx.arg(2);
    if error_code & PF_PROT_WRITE != PF_PROT_WRITE || maps::active(active::COW) == 0 {
        return;
    }
    let (tgid, _) = maps::current_ids();
    let Some(ps) = PROCS.get_ptr_mut(tgid) else {
        return;
    };
    // SAFETY: map value of a traced process.
    let ps = unsafe { &mut *ps };
    if ps.in_cow_window != 0 {
        ps.cow_faults += 1;
    }
    if ps.cow_children != 0 {
        ps.cow_as_parent += 1;
    }
}

/// Ends a fork child's copy-on-write window (at exec or exit) and returns its faults plus
/// the parent's faults since the fork.
pub fn close_cow_window(ps: &mut ProcState) -> u64 {
    if ps.in_cow_window == 0 {
        return 0;
    }
    ps.in_cow_window = 0;
    maps::active_add(active::COW, -1);
    let mut total = ps.cow_faults;
    if let Some(parent) = PROCS.get_ptr_mut(ps.parent_tgid) {
        // SAFETY: map value of a traced process.
        let parent = unsafe { &mut *parent };
        total += parent.cow_as_parent.saturating_sub(ps.cow_parent_base);
        parent.cow_children = parent.cow_children.saturating_sub(1);
    }
    total
}
