//! execve/execveat: one record per attempt (`ExecAttemptRecord`), its times split at the
//! point of no return (the sched_prepare_exec tracepoint from 6.10; before that, the entry of
//! `begin_new_exec`, where that tracepoint was later added, through fentry or a kprobe).
//!
//! A successful attempt ends at sched_process_exec, when the new image is loaded: its record
//! goes from there, with the path and argv from the kernel's own copies (the path is
//! `linux_binprm.filename`, and argv lies end to end on the new image's stack, one read for
//! all of it), and the dynamic-linker window opens there. What the kernel does after it (it
//! frees the exec's bookkeeping and returns to user space, 1-2 µs) is the new image's start.
//! One record, sent where the exec ends, costs one ring-buffer reservation and no work at the
//! syscall's return (docs/kernel-findings.md).
//!
//! A failed attempt ends at its return, where its path and argv are read from the caller's
//! memory, a string at a time (the caller's memory is intact then). Each user-memory read
//! costs a helper call and a hardened-usercopy check, 150-350 ns on the machines measured.
use core::mem::MaybeUninit;

use aya_ebpf::{
    helpers::{bpf_probe_read_user, generated},
    programs::BtfTracePointContext,
};
use forkprof_common::{
    ARG_LEN, ARG_SLOTS, ARGV_LEN, ExecAttemptRecord, ExecState, ProcState, active, ia32_syscalls,
    kind, ld_state, nr, stat,
};

use super::{dynlink, fork::close_child_run, mm::close_cow_window, path, syscalls::Abi};
use crate::maps::{self, BtfPtr, EVENTS, EXEC_ATTEMPTS, kernel_layout, regs};

/// argv entries counted (not copied) beyond `ARG_SLOTS` after a failed attempt.
const ARGC_COUNT_MAX: u32 = 512;

/// Syscall entry: the attempt's times are kept in the process's own entry until the syscall
/// returns. No map of its own: an attempt costs no hash insert, lookups and a delete of a
/// record this size (docs/kernel-findings.md). Only a thread whose process's entry holds
/// another thread's attempt in flight keeps its own in `EXEC_ATTEMPTS`.
pub fn on_enter() {
    let (tgid, tid) = maps::current_ids();
    let Some(ps) = maps::proc_state(tgid, true) else {
        return;
    };
    // SAFETY: map value of a traced process.
    let ps = unsafe { &mut *ps };
    let start = maps::now();
    // The attempt's times are written field by field, never as a struct built on the stack:
    // LLVM turns that struct's two zero words into a `memset` call, a byte loop in BPF.
    match attempt_of(ps, tid) {
        // The same thread again: its last attempt's return was not seen.
        // SAFETY: this thread's attempt, which only this thread writes.
        Some(a) => unsafe { restart(a, start) },
        None => {
            // The entry's attempt is the first thread's to claim it.
            if maps::claim_u64(&mut ps.exec.tid, u64::from(tid)) {
                // SAFETY: the entry's attempt, ours now.
                unsafe { restart(&raw mut ps.exec, start) };
            } else {
                let mut attempt = MaybeUninit::<ExecState>::uninit();
                let a = attempt.as_mut_ptr();
                // SAFETY: every field of the local is written before it is read.
                let attempt = unsafe {
                    (&raw mut (*a).tid).write_volatile(u64::from(tid));
                    restart(a, start);
                    attempt.assume_init_ref()
                };
                if EXEC_ATTEMPTS.insert(tid, attempt, 0).is_err() {
                    maps::count_lost(stat::STATE_MAP_FULL);
                    return;
                }
                maps::add_u32(&mut ps.exec_spilled, 1);
            }
            maps::add_u32(&mut ps.in_exec, 1);
            maps::active_add(active::EXECS, 1);
        }
    }
    // Only a fork child's first attempt gets a child_run; later ones get 0.
    let child_run = close_child_run(ps, start);
    if child_run != 0 {
        ps.child_run_ns = child_run;
    }
}

/// Starts an attempt's times afresh at `start` (its `tid` is the caller's already), with a
/// volatile store each: zero stores side by side would become a `memset` call.
///
/// # Safety
/// `a` is valid for writes (its fields need not be initialized).
#[inline(always)]
unsafe fn restart(a: *mut ExecState, start: u64) {
    // SAFETY: the caller's.
    unsafe {
        (&raw mut (*a).start_ns).write_volatile(start);
        (&raw mut (*a).prepared_at).write_volatile(0);
        (&raw mut (*a).loaded_at).write_volatile(0);
    }
}

/// Thread `tid`'s exec attempt in flight: in its process's entry, or in `EXEC_ATTEMPTS`
/// (looked up only while the process has one there).
#[inline(always)]
fn attempt_of(ps: &mut ProcState, tid: u32) -> Option<*mut ExecState> {
    if ps.exec.tid == u64::from(tid) {
        return Some(&raw mut ps.exec);
    }
    if maps::load_u32(&ps.exec_spilled) == 0 {
        return None;
    }
    EXEC_ATTEMPTS.get_ptr_mut(tid)
}

/// Ends thread `tid`'s exec attempt in flight and returns it.
#[inline(always)]
fn take_attempt(ps: &mut ProcState, tid: u32) -> Option<ExecState> {
    let attempt = if ps.exec.tid == u64::from(tid) {
        let a = ps.exec;
        // The entry is free again once `tid` is 0: last.
        maps::store(&mut ps.exec.tid, 0);
        a
    } else {
        if maps::load_u32(&ps.exec_spilled) == 0 {
            return None;
        }
        // SAFETY: this thread's map value.
        let a = unsafe { *EXEC_ATTEMPTS.get_ptr(tid)? };
        let _ = EXEC_ATTEMPTS.remove(tid);
        maps::add_u32(&mut ps.exec_spilled, -1);
        a
    };
    maps::add_u32(&mut ps.in_exec, -1);
    maps::active_add(active::EXECS, -1);
    Some(attempt)
}

/// A successful attempt's path and argv, at sched_process_exec(task, old_pid, bprm): the
/// kernel's copies, the path in `bprm` and argv on the new image's stack. What is written
/// is the path up to its NUL and the first `argv_len` bytes of `argv`; the agent reads
/// nothing else.
#[inline(always)]
fn write_image_args(rec: &mut ExecAttemptRecord, task: BtfPtr, bprm: BtfPtr) {
    rec.argc = bprm.u32_at(kernel_layout!(bprm_argc));
    let filename = bprm.ptr_at(kernel_layout!(bprm_filename));
    // SAFETY: a kernel string; the helper validates the address, always NUL-terminates, and
    // zeroes the buffer when it fails.
    let given = unsafe {
        generated::bpf_probe_read_kernel_str(
            rec.path.as_mut_ptr().cast(),
            rec.path.len() as u32,
            filename.raw().cast(),
        )
    };
    path::make_absolute(rec, given, Some(bprm));
    if !maps::capture_argv() {
        rec.argv_len = 0;
        return;
    }
    rec.argv_len = maps::read_image_argv(task, rec.argv.as_mut_ptr());
}

/// A failed attempt's path and argv, at its return, from the caller's memory (intact: the
/// attempt failed before the point of no return). Up to `ARG_SLOTS` strings of at most
/// `ARG_LEN - 1` bytes, end to end, as the image's stack would hold them. A 32-bit caller's
/// arguments are in other registers, and its argv holds 4-byte pointers.
#[inline(always)]
fn write_caller_args(rec: &mut ExecAttemptRecord, regs: BtfPtr, id: i64, abi: Abi) {
    // execve(path, argv, ..), execveat(dirfd, path, argv, ..); a constant offset per branch.
    let (path, argv) = match (abi, id == nr::EXECVE) {
        (Abi::X64, true) => (regs.u64_at(regs::DI), regs.u64_at(regs::SI)),
        (Abi::X64, false) => (regs.u64_at(regs::SI), regs.u64_at(regs::DX)),
        (Abi::Ia32, true) => (regs.u64_at(regs::BX), regs.u64_at(regs::CX)),
        (Abi::Ia32, false) => (regs.u64_at(regs::CX), regs.u64_at(regs::DX)),
    };
    let path = path as *const u8;
    // The path first: the verifier follows its walk once for each state it reaches it in,
    // and the argc count below leaves hundreds.
    // SAFETY: user pointer from the syscall's arguments; the helper validates it, always
    // NUL-terminates, and zeroes the buffer when it fails.
    let given = unsafe {
        generated::bpf_probe_read_user_str(
            rec.path.as_mut_ptr().cast(),
            rec.path.len() as u32,
            path.cast(),
        )
    };
    path::make_absolute(rec, given, None);
    let ptrs = if argv == 0 {
        [core::ptr::null(); ARG_SLOTS]
    } else {
        arg_pointers(argv, abi)
    };
    let mut argc = ptrs.iter().take_while(|p| !p.is_null()).count() as u32;
    if argc == ARG_SLOTS as u32 {
        for i in ARG_SLOTS as u32..ARGC_COUNT_MAX {
            if arg_at(argv, i, abi).is_null() {
                break;
            }
            argc += 1;
        }
    }
    rec.argc = argc;
    let mut off = 0usize;
    for &arg in ptrs.iter() {
        if arg.is_null() || !maps::capture_argv() {
            break;
        }
        // A bound the verifier can follow: each string starts at most ARG_SLOTS * ARG_LEN
        // bytes in, and takes at most ARG_LEN.
        let at = off & (ARGV_LEN - 1);
        if at > ARGV_LEN - ARG_LEN {
            break;
        }
        // SAFETY: ARG_LEN bytes of the record from `at`; the helper validates `arg`.
        let n = unsafe {
            generated::bpf_probe_read_user_str(
                rec.argv.as_mut_ptr().add(at).cast(),
                ARG_LEN as u32,
                arg.cast(),
            )
        };
        if n <= 0 {
            break;
        }
        off = at + (n as usize & (ARG_LEN * 2 - 1));
    }
    rec.argv_len = off.min(ARGV_LEN) as u32;
}

/// argv's first `ARG_SLOTS` pointers, up to its NULL (the rest are not read by the caller).
/// A 64-bit caller's in one user read of the whole block; a pointer at a time when the block
/// crosses into an unmapped page, and always for a 32-bit caller's 4-byte pointers (a failed
/// exec of a 32-bit process is rare).
#[inline(always)]
fn arg_pointers(argv: u64, abi: Abi) -> [*const u8; ARG_SLOTS] {
    let mut ptrs = match abi {
        Abi::X64 => {
            // Not zeroed first (a zeroing is a byte loop, `maps::store`): the helper writes
            // every byte, what it read or zeros when it fails.
            let mut ptrs = core::mem::MaybeUninit::<[*const u8; ARG_SLOTS]>::uninit();
            // SAFETY: `ptrs` is ARG_SLOTS writable pointers; the helper validates the user
            // address.
            let whole = unsafe {
                generated::bpf_probe_read_user(
                    ptrs.as_mut_ptr().cast(),
                    core::mem::size_of::<[*const u8; ARG_SLOTS]>() as u32,
                    argv as *const _,
                )
            };
            // SAFETY: written whole by the helper above.
            let ptrs = unsafe { ptrs.assume_init() };
            if whole == 0 {
                return ptrs;
            }
            ptrs // zeros: read it a pointer at a time below
        }
        Abi::Ia32 => [core::ptr::null(); ARG_SLOTS],
    };
    for (i, slot) in ptrs.iter_mut().enumerate() {
        *slot = arg_at(argv, i as u32, abi);
        if slot.is_null() {
            break;
        }
    }
    ptrs
}

/// argv's `i`th pointer, NULL where it cannot be read (x86-64: 8 bytes each; ia32: 4).
#[inline(always)]
fn arg_at(argv: u64, i: u32, abi: Abi) -> *const u8 {
    // SAFETY: user addresses from the syscall's arguments; the helper validates them.
    match abi {
        Abi::X64 => unsafe { bpf_probe_read_user((argv as *const *const u8).add(i as usize)) }
            .unwrap_or(core::ptr::null()),
        Abi::Ia32 => unsafe { bpf_probe_read_user((argv as *const u32).add(i as usize)) }
            .map_or(core::ptr::null(), |p| p as usize as *const u8),
    }
}

/// Process `tgid`'s state, while any of its threads is in an exec attempt. Callers look at
/// `ACTIVE` first, before they spend a helper call on the tgid.
#[inline(always)]
fn process_in_exec(tgid: u32) -> Option<&'static mut ProcState> {
    // SAFETY: map value of a traced process.
    let ps = unsafe { &mut *maps::proc_of(tgid)? };
    (maps::load_u32(&ps.in_exec) != 0).then_some(ps)
}

pub fn on_prepare_exec() {
    if maps::active(active::EXECS) == 0 {
        return;
    }
    let (tgid, tid) = maps::current_ids();
    if let Some(ps) = process_in_exec(tgid)
        && let Some(a) = attempt_of(ps, tid)
    {
        // SAFETY: this thread's attempt.
        unsafe { (*a).prepared_at = maps::now() };
    }
}

/// sched_process_exec(task, old_pid, bprm): the new image is loaded, and the attempt has
/// succeeded. `task` is the current task; `old_pid` is the thread that called exec, whose
/// pid the exec changed to the tgid if it was not the main thread.
pub fn on_process_exec(ctx: &BtfTracePointContext) {
    let task = BtfPtr::new(ctx.arg(0));
    // The task's tgid by a load: no helper call.
    let tgid = task.u32_at(kernel_layout!(task_tgid));
    let attempt = if maps::active(active::EXECS) == 0 {
        None
    } else {
        process_in_exec(tgid).and_then(|ps| Some((take_attempt(ps, ctx.arg::<u64>(1) as u32)?, ps)))
    };
    let Some((mut attempt, ps)) = attempt else {
        // A followed process's exec whose entry was not seen: a 32-bit caller's, where the
        // syscall hooks skip those (or saw them only from later on). (A process never
        // followed, such as the child of a 32-bit fork counted already, or a kernel-started
        // helper, is not counted here.)
        if maps::ia32_mode() != ia32_syscalls::SEEN
            && let Some(ps) = maps::proc_of(tgid)
        {
            maps::count_ia32_unseen();
            // SAFETY: map value of a traced process.
            maps::set_ia32(unsafe { &mut *ps }, maps::is_compat(task));
        }
        return;
    };
    let end = maps::now();
    attempt.loaded_at = end;
    // From exec to its first return, the task's compat status is the new image's.
    let abi = if maps::is_compat(task) {
        Abi::Ia32
    } else {
        Abi::X64
    };
    // A followed process turns 32-bit where the syscall hooks skip ia32 syscalls: before it
    // spawns anything, the agent is woken to attach the hooks that see them, if it holds
    // them in standby.
    let flags = if abi == Abi::Ia32 && maps::ia32_standby() {
        maps::want_ia32_hooks();
        maps::WAKE
    } else {
        maps::QUIET
    };
    finish(
        ps,
        &attempt,
        end,
        0,
        abi,
        ArgsFrom::Image(task, BtfPtr::new(ctx.arg(2))),
        flags,
    );
}

/// The kernel's codes for a syscall that a signal interrupted and that is restarted (its
/// entry comes again: a new attempt) or never returns to user space (the thread dies, as
/// every other thread of a process does when one of them execs). Not failures.
const ERESTARTSYS: i64 = 512;
const ERESTART_RESTARTBLOCK: i64 = 516;

/// The exec syscall returns. A successful attempt has ended at sched_process_exec already,
/// so only failures are left here (and a success whose sched_process_exec was not seen).
pub fn on_exit(regs: BtfPtr, id: i64, ret: i64, abi: Abi) {
    if maps::active(active::EXECS) == 0 {
        return;
    }
    let (tgid, tid) = maps::current_ids();
    let Some(ps) = process_in_exec(tgid) else {
        return;
    };
    let Some(attempt) = take_attempt(ps, tid) else {
        return;
    };
    if (-ERESTART_RESTARTBLOCK..=-ERESTARTSYS).contains(&ret) {
        return;
    }
    // A failure before the point of no return leaves the caller's memory as it was: its
    // path and argv are read there. After it (the new image could not be set up, and the
    // process dies of SIGSEGV) that memory is gone, and there is nothing to read.
    let args = if ret != 0 && attempt.loaded_at == 0 && attempt.prepared_at == 0 {
        ArgsFrom::Caller(regs, id, abi)
    } else {
        ArgsFrom::Nowhere
    };
    let errno = if ret < 0 { -ret as i32 } else { 0 };
    // A success's `abi` is the new image's: the exec rewrote the number and compat status.
    finish(ps, &attempt, maps::now(), errno, abi, args, maps::QUIET);
}

/// Where an attempt's path and argv are read from.
enum ArgsFrom {
    /// The kernel's copies: sched_process_exec's task (the current one) and `linux_binprm`.
    Image(BtfPtr, BtfPtr),
    /// The caller's memory: sys_exit's `pt_regs`, the syscall number and its ABI.
    Caller(BtfPtr, i64, Abi),
    /// Nowhere: the record has no path and no argv.
    Nowhere,
}

/// Ends the attempt in flight at `end` (`errno` 0: it succeeded) and sends its record. A
/// success also ends the fork child's copy-on-write window and, for a 64-bit image (`abi`),
/// opens the dynamic-linker window, which starts where the exec ends, and marks whether the
/// process runs a 32-bit image now (`maps::set_ia32`). A 32-bit image's
/// dynamic linker is i386 ld.so, whose syscalls the window's state machine does not read (it
/// sets TLS with set_thread_area, not arch_prctl): it gets none.
#[inline(always)]
fn finish(
    ps: &mut ProcState,
    attempt: &ExecState,
    end: u64,
    errno: i32,
    abi: Abi,
    args: ArgsFrom,
    submit_flags: u64,
) {
    let (mut cow_faults, mut cow_fault_ns) = (0, 0);
    if errno == 0 {
        let cow = close_cow_window(ps);
        cow_faults = cow.faults;
        cow_fault_ns = cow.ns;
        // A window still open from an earlier exec (its image exec'd again before it closed)
        // is given up without a record; one closed and held goes now, before this exec's.
        dynlink::abandon(ps);
        dynlink::send_held(ps);
        maps::set_ia32(ps, abi == Abi::Ia32);
        if abi == Abi::X64 {
            maps::active_add(active::LD, 1);
            ps.ld_state = ld_state::START;
            ps.ld_t0 = end;
            ps.ld_syscalls = 0;
            ps.ld_openat = 0;
            ps.ld_map_count = 0;
            ps.ld_objects = 0;
        }
    }
    let (atime_count, atime_ns, child_run_ns) = (ps.atime_count, ps.atime_ns, ps.child_run_ns);
    ps.child_run_ns = 0;
    ps.atime_count = 0;
    ps.atime_ns = 0;
    let Some(mut entry) = EVENTS.reserve::<ExecAttemptRecord>(0) else {
        maps::count_lost(stat::RINGBUF_FULL);
        return;
    };
    // SAFETY: the reservation is ours until submitted; every field the agent reads is
    // written below.
    let rec = unsafe { &mut *entry.as_mut_ptr() };
    let start = attempt.start_ns;
    let prepared_at = attempt.prepared_at;
    let loaded_at = attempt.loaded_at;
    maps::set_header(&mut rec.hdr, kind::EXEC_ATTEMPT, end, ps.key);
    rec.tid = attempt.tid as u32;
    rec.errno = errno;
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
    rec.atime_ns = atime_ns;
    rec.cow_faults = cow_faults;
    rec.cow_fault_ns = cow_fault_ns;
    rec.child_run_ns = child_run_ns;
    rec.cgroup_id = maps::cgroup_id();
    match args {
        ArgsFrom::Image(task, bprm) => write_image_args(rec, task, bprm),
        ArgsFrom::Caller(regs, id, abi) => write_caller_args(rec, regs, id, abi),
        ArgsFrom::Nowhere => {
            rec.argc = 0;
            rec.path[0] = 0;
            rec.path_walk = 0;
            rec.argv_len = 0;
        }
    }
    entry.submit(submit_flags);
}
