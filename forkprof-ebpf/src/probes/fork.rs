//! Process and thread creation: the parent's fork-family syscall, timed from sys_enter to
//! sys_exit, with the child's identity from task_newtask (which fires late in copy_process,
//! before the child can run).
use aya_ebpf::programs::BtfTracePointContext;
use forkprof_common::{
    ProcKey, ProcState, SpawnRecord, active, child_state, clone_flags, ia32_syscalls, kind, nr,
    nr_ia32, stat,
};

use super::{dynlink, exit::finish as finish_exit, mm::close_cow_window};
use crate::maps::{self, BtfPtr, EVENTS, kernel_layout, regs};

pub fn on_enter(id: i64) {
    // A fork outside the `--cgroup` scope is not traced, even by a followed process.
    if !maps::in_scope() {
        return;
    }
    let (tgid, tid) = maps::current_ids();
    let Some(ps) = maps::proc_state(tgid, true) else {
        return;
    };
    // SAFETY: map value of a traced process.
    maps::start_fork(unsafe { &mut *ps }, tgid, tid, id as u32, maps::now());
}

pub fn on_newtask(ctx: &BtfTracePointContext) {
    // A 32-bit caller's fork-family syscall whose entry no hook saw: where the syscall
    // hooks skip ia32 syscalls, or where sys_enter was attached for them after its entry. No
    // window was opened, and the child is not followed. By the syscall's number: an ia32
    // io_uring_enter that starts an io worker is no spawn, nor is a new thread.
    let mode = maps::ia32_mode();
    if mode != ia32_syscalls::SEEN && maps::in_compat_syscall() {
        let id = maps::current_regs().u64_at(regs::ORIG_AX) as i64;
        let thread = ctx.arg::<u64>(1) & clone_flags::CLONE_THREAD != 0;
        let spawn = !thread
            && matches!(
                id,
                nr_ia32::FORK | nr_ia32::CLONE | nr_ia32::VFORK | nr::CLONE3
            );
        let skipped = mode != ia32_syscalls::RAW_FOR_IA32;
        if skipped || (spawn && maps::fork_in_flight().is_none()) {
            if spawn {
                maps::count_unseen_spawn(maps::current_ids().0);
            }
            return;
        }
    }
    if maps::active(active::FORKS) == 0 {
        return;
    }
    let (tgid, tid) = maps::current_ids();
    let Some(parent) = maps::proc_of(tgid) else {
        return;
    };
    let flags: u64 = ctx.arg(1);
    let task = BtfPtr::new(ctx.arg(0));
    // The child's creation: its own start time, which copy_process took shortly before this
    // tracepoint with the clock of `maps::now` (a load instead of a clock read).
    let created = task.u64_at(kernel_layout!(task_start_time));
    {
        // SAFETY: map value of a traced process; this borrow ends before `parent` is used
        // again below.
        let Some(fs) = maps::fork_of(unsafe { &mut *parent }, tgid, tid) else {
            return;
        };
        fs.child_tid = task.u32_at(kernel_layout!(task_pid));
        fs.clone_flags = flags;
        fs.created_ns = created;
    }
    if flags & clone_flags::CLONE_THREAD != 0 {
        return;
    }
    let child_tgid = task.u32_at(kernel_layout!(task_tgid));
    // SAFETY: as above.
    let parent = unsafe { &mut *parent };
    let shares_vm = flags & clone_flags::CLONE_VM != 0;
    let cow_parent_base = parent.cow_as_parent;
    let cow_ns_parent_base = parent.cow_ns_as_parent;
    if !shares_vm {
        parent.cow_children += 1;
    }
    let child = maps::NewProc {
        key: ProcKey {
            start_ns: created,
            pid: child_tgid,
            mid_life: 0,
        },
        parent_tgid: tgid,
        in_cow_window: u32::from(!shares_vm),
        cow_parent_base,
        cow_ns_parent_base,
        child_state: child_state::AWAITING,
        // A 32-bit parent's child runs its image until it execs.
        ia32: u32::from(parent.ia32 != 0),
    };
    // The task cannot have run yet, so an entry under its pid is a previous process's: it
    // goes, and the new process takes the entry.
    match maps::insert_proc(child_tgid, &child) {
        Ok(_) => {}
        Err(maps::NotInserted::Present) => {
            retire(child_tgid);
            if maps::insert_proc(child_tgid, &child).is_err() {
                return;
            }
        }
        Err(maps::NotInserted::Lost) => return,
    }
    maps::active_add(active::CHILDREN, 1);
    if !shares_vm {
        maps::active_add(active::COW, 1);
    }
}

/// Removes the entry under `tgid` of a previous process with that pid, whose pid a new
/// process has: its exit, if it waits for a notification it will never get (a parent that
/// ignores SIGCHLD: the exit is sent from sched_process_free, after the pid was freed), goes
/// now, counted as without notification; an entry without a pending exit (a process whose
/// exit was never seen) is forgotten.
#[inline(never)]
pub fn retire(tgid: u32) {
    finish_exit(tgid, false);
    if let Some(stale) = maps::proc_of(tgid) {
        // SAFETY: map value of a traced process.
        forget(unsafe { &mut *stale });
    }
    maps::remove_proc(tgid);
}

/// The entry of a process whose exit was never seen, before it is removed: the
/// dynamic-linker record it holds goes, and every window it holds open is closed, so that
/// the counts in `ACTIVE` come back to what the live processes hold. Otherwise the gates
/// they keep open (copy-on-write faults, a fork child's first return, the linker's
/// syscalls, exec attempts, forks in flight) would stay open for the whole session, and
/// every hot hit would pay a lookup. A window's own record is not sent: its process is gone.
/// Its exit record is lost, and counted so (`stat::EXIT_UNSEEN`).
#[inline(never)]
fn forget(stale: &mut ProcState) {
    maps::count_lost(stat::EXIT_UNSEEN);
    dynlink::send_held(stale);
    dynlink::abandon(stale);
    let _ = close_cow_window(stale);
    if stale.child_state == child_state::AWAITING {
        maps::active_add(active::CHILDREN, -1);
    }
    // The main thread's exec attempt in the entry, and those of other threads it counts in
    // `EXEC_ATTEMPTS` (their values there are overwritten when those thread ids exec again).
    let execs = maps::load_u32(&stale.in_exec);
    if execs != 0 {
        maps::active_add(active::EXECS, -i64::from(execs));
    }
    if stale.fork.start_ns != 0 {
        maps::active_add(active::FORKS, -1);
    }
}

const _: () = assert!(core::mem::offset_of!(SpawnRecord, parent_comm) % 8 == 0);

/// The parent's fork-family syscall returns (sys_exit, or fexit on the syscall function).
pub fn on_exit(ret: i64) {
    let (tgid, tid) = maps::current_ids();
    let ps = maps::proc_of(tgid);
    let Some(fs) = maps::take_fork(ps, tgid, tid) else {
        return;
    };
    let parent = match ps {
        // SAFETY: map value of a traced process.
        Some(p) => unsafe { (*p).key },
        None => ProcKey::mid_life(tgid, maps::current_start_time()),
    };

    let end = maps::now();
    let total = end - fs.start_ns;
    let vfork_wait_ns = if fs.clone_flags & clone_flags::CLONE_VFORK != 0 && fs.created_ns != 0 {
        end - fs.created_ns
    } else {
        0
    };
    let is_thread = fs.clone_flags & clone_flags::CLONE_THREAD != 0;
    let proc = if is_thread || fs.created_ns == 0 {
        parent
    } else {
        ProcKey {
            start_ns: fs.created_ns,
            pid: fs.child_tid,
            mid_life: 0,
        }
    };
    let Some(mut entry) = EVENTS.reserve::<SpawnRecord>(0) else {
        maps::count_lost(stat::RINGBUF_FULL);
        return;
    };
    // SAFETY: the reservation is ours until submitted; every field is written below (field
    // by field: a whole struct with a zeroed `parent_comm` would be a `memset` first).
    let rec = unsafe { &mut *entry.as_mut_ptr() };
    maps::set_header(&mut rec.hdr, kind::SPAWN, end, proc);
    rec.parent = parent;
    rec.parent_tid = tid;
    rec.child_tid = fs.child_tid;
    rec.clone_flags = fs.clone_flags;
    rec.syscall = fs.syscall;
    rec.errno = if ret < 0 { ret as i32 } else { 0 };
    rec.start_ns = fs.start_ns;
    rec.fork_ns = total - vfork_wait_ns;
    rec.pagetable_copy_ns = fs.pt_ns;
    rec.vfork_wait_ns = vfork_wait_ns;
    rec.cgroup_id = maps::cgroup_id();
    maps::put_comm(&mut rec.parent_comm, BtfPtr::current_task().comm());
    entry.submit(maps::QUIET);
}

/// A new task's first return to user space: its fork-family syscall returning 0 at
/// sys_exit, or, where the syscall functions are hooked instead, the return of
/// `schedule_tail`, which `ret_from_fork` calls first for every new task (a little earlier:
/// only the syscall's exit work comes between). For the main thread of a traced fork child,
/// `child_run` starts.
pub fn on_child_return() {
    if maps::active(active::CHILDREN) == 0 {
        return;
    }
    let (tgid, tid) = maps::current_ids();
    if tid != tgid {
        return;
    }
    let Some(ps) = maps::proc_of(tgid) else {
        return;
    };
    // SAFETY: map value of a traced process.
    let ps = unsafe { &mut *ps };
    if ps.child_state == child_state::AWAITING {
        ps.child_state = child_state::RUNNING;
        ps.child_t0 = maps::now();
        maps::active_add(active::CHILDREN, -1);
    }
}

/// Ends `child_run` at `now` (the first exec attempt's start, or the exit's): its duration,
/// or 0 when it was not running. The caller's clock read is shared: each costs about 90 ns.
pub fn close_child_run(ps: &mut ProcState, now: u64) -> u64 {
    let ns = match ps.child_state {
        child_state::RUNNING => now - ps.child_t0,
        child_state::AWAITING => {
            maps::active_add(active::CHILDREN, -1);
            0
        }
        _ => 0,
    };
    ps.child_state = child_state::NONE;
    ns
}
