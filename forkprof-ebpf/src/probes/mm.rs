//! Address-space costs: the page-table copy inside fork, and copy-on-write faults after fork.
//!
//! The page-table copy is `dup_mmap`, hooked by fentry/fexit or kprobe/kretprobe where the
//! kernel allows it. Where dup_mmap is inlined but fentry is allowed (6.12), the span in which
//! it holds the parent's mm write lock is bracketed by the first functions it calls inside and
//! after that span (`uprobe_dup_mmap`, `dup_userfaultfd_complete`). Else that span comes from
//! the raw mmap_lock tracepoints (their argument positions differ between kernels, so each
//! layout has its own program and the agent attaches the one that matches this kernel's BTF
//! prototype).
//! Copy-on-write faults are counted, and their time summed, at `do_wp_page` where it can be
//! hooked; only where it cannot are they counted from the page_fault_user tracepoint, which
//! fires on every user page fault of every task (the loader attaches one or the other).
use aya_ebpf::programs::RawTracePointContext;
use forkprof_common::{ProcState, active};

use crate::maps;

/// x86 page-fault error code bits: the page was present, and the access was a write.
const PF_PROT_WRITE: u64 = 0x1 | 0x2;

/// mmap_lock_acquire_returned; `write` and `success` are the positions of those arguments.
#[inline(always)]
pub fn on_lock_acquired(ctx: &RawTracePointContext, write: usize, success: usize) {
    if maps::active(active::FORKS) == 0 {
        return;
    }
    let write: u64 = ctx.arg(write);
    let success: u64 = ctx.arg(success);
    if write & 0xff == 0 || success & 0xff == 0 {
        return;
    }
    write_lock_acquired(ctx.arg(0));
}

/// A write lock of `mm` was taken while some fork is in flight. A BPF subprogram, which the
/// JIT places apart from its caller, so that the hot path that turns a hit away stays a short
/// image (see `on_page_fault`).
#[inline(never)]
fn write_lock_acquired(mm: u64) {
    let Some(fs) = maps::fork_in_flight() else {
        return;
    };
    // dup_mmap runs before task_newtask; the first write lock in the syscall is the parent's mm.
    if fs.pt_mm == 0 && fs.created_ns == 0 {
        fs.pt_mm = mm;
        fs.pt_start = maps::now();
    }
}

/// mmap_lock_released; `write` is the position of that argument.
#[inline(always)]
pub fn on_lock_released(ctx: &RawTracePointContext, write: usize) {
    if maps::active(active::FORKS) == 0 {
        return;
    }
    let write: u64 = ctx.arg(write);
    if write & 0xff == 0 {
        return;
    }
    write_lock_released(ctx.arg(0));
}

/// A write lock of `mm` was released while some fork is in flight (a subprogram, as
/// `write_lock_acquired`).
#[inline(never)]
fn write_lock_released(mm: u64) {
    let Some(fs) = maps::fork_in_flight() else {
        return;
    };
    if fs.pt_mm == mm && fs.pt_ns == 0 {
        fs.pt_ns = maps::now() - fs.pt_start;
    }
}

/// Entry of dup_mmap (fentry or kprobe), or of `uprobe_dup_mmap`, which dup_mmap calls once it
/// holds the parent's write lock: only a fork syscall calls them, in the parent.
pub fn on_dup_mmap_entry() {
    if let Some(fs) = maps::fork_in_flight()
        && fs.pt_start == 0
    {
        fs.pt_start = maps::now();
    }
}

/// Return of dup_mmap (fexit or kretprobe), or entry of `dup_userfaultfd_complete`, which
/// dup_mmap calls right after it releases the parent's write lock (only when the copy
/// succeeded: a failed fork's copy stays unmeasured).
pub fn on_dup_mmap_return() {
    if let Some(fs) = maps::fork_in_flight()
        && fs.pt_start != 0
        && fs.pt_ns == 0
    {
        fs.pt_ns = maps::now() - fs.pt_start;
    }
}

pub fn on_page_fault(ctx: &RawTracePointContext) {
    let error_code: u64 = ctx.arg(2);
    if error_code & PF_PROT_WRITE != PF_PROT_WRITE || maps::active(active::COW) == 0 {
        return;
    }
    write_fault_in_window();
}

/// A write fault on a present page while some copy-on-write window is open. A BPF
/// subprogram, which the JIT compiles into an image of its own: the caller's image, which
/// every user page fault on the system runs, is then about 100 bytes. A hot program's early
/// return jumps to the epilogue at its image's end, and an image that crosses a 4 KiB page
/// runs two pages on every hit: about 7 ns more per hit on the Intel VM of BENCHMARKS.md,
/// where a 436-byte image crosses in about one placement in ten (docs/kernel-findings.md,
/// "A hot program's image across a page costs every hit").
#[inline(never)]
fn write_fault_in_window() {
    let (tgid, _) = maps::current_ids();
    let Some(ps) = maps::proc_of(tgid) else {
        return;
    };
    // SAFETY: map value of a traced process.
    count_cow_fault(unsafe { &mut *ps });
}

/// One copy-on-write fault of `ps`: in its own window, and as the parent of children in theirs.
#[inline(always)]
fn count_cow_fault(ps: &mut ProcState) {
    if ps.in_cow_window != 0 {
        ps.cow_faults += 1;
    }
    if ps.cow_children != 0 {
        ps.cow_as_parent += 1;
    }
}

/// The process inside a copy-on-write window (its own, or as a parent of one), if any.
#[inline(always)]
fn cow_process() -> Option<&'static mut ProcState> {
    maps::process_in_window(active::COW).filter(|ps| ps.in_cow_window != 0 || ps.cow_children != 0)
}

/// Entry of do_wp_page (fentry or kprobe): a write fault on a present, write-protected page
/// (a huge page's is split and comes here too). Where this is hooked, page_fault_user is not
/// attached, and the fault is counted here.
pub fn on_wp_fault_entry() {
    if let Some(ps) = cow_process() {
        count_cow_fault(ps);
        ps.wp_start = maps::now();
    }
}

/// Return of do_wp_page (fexit or kretprobe).
pub fn on_wp_fault_return() {
    let Some(ps) = cow_process() else {
        return;
    };
    if ps.wp_start == 0 {
        return;
    }
    let ns = maps::now() - ps.wp_start;
    ps.wp_start = 0;
    if ps.in_cow_window != 0 {
        ps.cow_fault_ns += ns;
    }
    if ps.cow_children != 0 {
        ps.cow_ns_as_parent += ns;
    }
}

/// A fork child's copy-on-write faults and their time: its own plus its parent's since the
/// fork.
pub struct CowTotals {
    pub faults: u64,
    pub ns: u64,
}

/// Ends a fork child's copy-on-write window (at exec or exit).
pub fn close_cow_window(ps: &mut ProcState) -> CowTotals {
    if ps.in_cow_window == 0 {
        return CowTotals { faults: 0, ns: 0 };
    }
    ps.in_cow_window = 0;
    maps::active_add(active::COW, -1);
    let mut totals = CowTotals {
        faults: ps.cow_faults,
        ns: ps.cow_fault_ns,
    };
    if let Some(parent) = maps::proc_of(ps.parent_tgid) {
        // SAFETY: map value of a traced process.
        let parent = unsafe { &mut *parent };
        totals.faults += parent.cow_as_parent.saturating_sub(ps.cow_parent_base);
        totals.ns += parent
            .cow_ns_as_parent
            .saturating_sub(ps.cow_ns_parent_base);
        parent.cow_children = parent.cow_children.saturating_sub(1);
    }
    totals
}
