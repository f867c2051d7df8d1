//! The dynamic linker after exec, bracketed by glibc ld.so's own syscalls (no uprobes):
//! exec done -> access("/etc/ld.so.preload") [ld_start] -> arch_prctl(ARCH_SET_FS) once all
//! objects are mapped [ld_map] -> munmap of ld.so.cache, ld.so's last syscall [ld_reloc_init].
//! When `arch_prctl(ARCH_SET_FS)` comes first there is no glibc ld.so; for a statically linked
//! binary, exec done -> its RELRO `mprotect(PROT_READ)`, static glibc's last syscall before
//! `main` (set_tid_address, set_robust_list, rseq, prlimit64, readlink, getrandom and brk come
//! between), is its libc's own start-up [static_start]. Without such an mprotect (no RELRO,
//! another libc), static_start ends at `arch_prctl(ARCH_SET_FS)`.
//!
//! With `--precise-ld` (global PRECISE_LD), uprobes give the outer boundaries: ld.so's first
//! `_dl_debug_state` call (RT_ADD, before any object is loaded) ends `ld_start`, and libc's
//! `__libc_start_main` ends `ld_reloc_init`, so library constructors are included. The
//! map/relocate boundary stays `arch_prctl(ARCH_SET_FS)`: glibc's second `_dl_debug_state`
//! (RT_CONSISTENT) comes only after relocation, just before the ld.so.cache munmap, so it
//! cannot split mapping from relocation (docs/kernel-findings.md).
use forkprof_common::{
    LD_MAX_SYSCALLS, LD_START_MAX_SYSCALLS, LdRecord, ProcState, active, kind, ld_outcome,
    ld_state, nr, stat,
};

use crate::maps::{self, BtfPtr, EVENTS, kernel_layout};

const ARCH_SET_FS: u64 = 0x1002;
const PROT_READ: u64 = 0x1;

/// Called for the syscalls the state machine watches (access, openat, arch_prctl, munmap;
/// mprotect only while some window is in `ld_state::STATIC`); `ld_syscalls` counts those.
pub fn on_syscall(arg: impl Fn(u32) -> u64, id: i64) {
    let (tgid, _) = maps::current_ids();
    let Some(ps) = maps::proc_of(tgid) else {
        return;
    };
    // SAFETY: map value of a traced process.
    let ps = unsafe { &mut *ps };
    // mprotect comes here whenever any window is static; it counts only in a static one.
    if ps.ld_state == ld_state::NONE || (id == nr::MPROTECT && ps.ld_state != ld_state::STATIC) {
        return;
    }
    ps.ld_syscalls += 1;
    let set_fs = || arg(0) == ARCH_SET_FS;
    let precise = maps::precise_ld();
    match ps.ld_state {
        ld_state::START => {
            if id == nr::ACCESS && !precise {
                ps.ld_t1 = maps::now();
                ps.ld_state = ld_state::MAP;
            } else if id == nr::ARCH_PRCTL && set_fs() {
                ps.ld_t1 = maps::now();
                enter_static(ps);
                return;
            } else if ps.ld_syscalls > LD_START_MAX_SYSCALLS {
                // Neither ld.so nor a libc that sets up TLS: nothing measured.
                ps.ld_t1 = ps.ld_t0;
                close(ps, ld_outcome::NO_GLIBC_LD);
                return;
            }
        }
        ld_state::MAP => {
            if id == nr::OPENAT {
                ps.ld_openat += 1;
                count_object(ps);
            } else if id == nr::ARCH_PRCTL && set_fs() {
                ps.ld_t2 = maps::now();
                count_object(ps);
                ps.ld_state = ld_state::RELOC;
            }
        }
        ld_state::STATIC => {
            // The RELRO mprotect ends static glibc's start-up; any other watched syscall
            // means the program runs already, and static_start ends at arch_prctl.
            if id == nr::MPROTECT && arg(2) == PROT_READ {
                ps.ld_t1 = maps::now();
            }
            close(ps, ld_outcome::NO_GLIBC_LD);
            return;
        }
        _ => {
            if id == nr::MUNMAP && !precise {
                close(ps, ld_outcome::COMPLETE);
                return;
            }
        }
    }
    if ps.ld_syscalls > LD_MAX_SYSCALLS {
        close(ps, ld_outcome::INCOMPLETE);
    }
}

/// At an openat of the mapping window, and at its end: whether the openat before loaded an
/// object. An object's segments are two mappings or more (four, with a separate code
/// segment); ld.so.cache is one, and a path its search did not find is none. Counting opens
/// instead counted every such path (dozens for a binary with a RUNPATH, whose glibc-hwcaps
/// subdirectories ld.so tries for each library).
#[inline(always)]
fn count_object(ps: &mut ProcState) {
    let maps = BtfPtr::current_task()
        .ptr_at(kernel_layout!(task_mm))
        .u32_at(kernel_layout!(mm_map_count));
    if ps.ld_map_count != 0 && maps >= ps.ld_map_count.saturating_add(2) {
        ps.ld_objects += 1;
    }
    ps.ld_map_count = maps;
}

/// uprobe on ld.so's `_dl_debug_state`: its first call ends `ld_start`; later ones are ignored.
pub fn on_debug_state() {
    let Some(ps) = maps::process_in_window(active::LD) else {
        return;
    };
    if ps.ld_state == ld_state::START {
        ps.ld_t1 = maps::now();
        ps.ld_state = ld_state::MAP;
    }
}

/// uprobe on libc's `__libc_start_main`: relocation and constructors are done.
pub fn on_libc_start_main() {
    let Some(ps) = maps::process_in_window(active::LD) else {
        return;
    };
    if ps.ld_state == ld_state::RELOC {
        close(ps, ld_outcome::COMPLETE);
    }
}

/// The window turns to a static start-up, which watches mprotect (`active::STATIC_START`).
#[inline(always)]
fn enter_static(ps: &mut ProcState) {
    ps.ld_state = ld_state::STATIC;
    maps::active_add(active::STATIC_START, 1);
}

/// Forgets the window's state without a record (`close` sends one), keeping `ACTIVE`'s
/// counts of it right.
#[inline(always)]
pub fn abandon(ps: &mut ProcState) {
    match ps.ld_state {
        ld_state::NONE => return,
        ld_state::STATIC => maps::active_add(active::STATIC_START, -1),
        _ => {}
    }
    ps.ld_state = ld_state::NONE;
    maps::active_add(active::LD, -1);
}

/// Closes the window and holds its record in the process's entry, to go out with the exit
/// record (`ExitRecords`): a ring-buffer record fewer per exec. Also called at exit for a
/// window still open.
pub fn close(ps: &mut ProcState, outcome: u32) {
    if ps.ld_state == ld_state::NONE {
        return;
    }
    // A static start-up that never reached its RELRO mprotect ended at arch_prctl.
    let outcome = if ps.ld_state == ld_state::STATIC {
        ld_outcome::NO_GLIBC_LD
    } else {
        outcome
    };
    let end = maps::now();
    let (t0, t1, t2) = (ps.ld_t0, ps.ld_t1, ps.ld_t2);
    let (openat, objects, syscalls, atime_count, atime_ns) = (
        ps.ld_openat,
        ps.ld_objects,
        ps.ld_syscalls,
        ps.atime_count,
        ps.atime_ns,
    );
    abandon(ps);
    ps.atime_count = 0;
    ps.atime_ns = 0;
    // A window held already (an exec whose own window closed before it went out) cannot
    // be: the exec that opened this window sent it (`send_held`).
    let key = ps.key;
    let rec = &mut ps.sent_at_exit.ld;
    rec.hdr.ts_ns = end;
    rec.hdr.proc = key;
    rec.outcome = outcome;
    rec.openat_count = openat;
    rec.objects = objects;
    rec.syscalls = syscalls;
    rec.atime_count = atime_count;
    rec.atime_ns = atime_ns;
    // Each field written once: zeros first and values after would become a `memset`.
    let (ld_start, ld_map, ld_reloc_init, static_start) = match outcome {
        ld_outcome::COMPLETE => (t1 - t0, t2 - t1, end - t2, 0),
        ld_outcome::NO_GLIBC_LD => (0, 0, 0, t1 - t0),
        _ => (0, 0, 0, 0),
    };
    maps::store(&mut rec.ld_start_ns, ld_start);
    maps::store(&mut rec.ld_map_ns, ld_map);
    maps::store(&mut rec.ld_reloc_init_ns, ld_reloc_init);
    maps::store(&mut rec.static_start_ns, static_start);
    // Last: the agent, reading a process still running when a trace ends, takes the record
    // as held once its kind says so.
    maps::store(&mut rec.hdr.kind, kind::LD);
}

/// Sends the dynamic-linker record the process holds, if any, on its own: the process
/// execs again (its next window would take the place) or leaves the traced set without an
/// exit record.
pub fn send_held(ps: &mut ProcState) {
    let rec = &mut ps.sent_at_exit.ld;
    if rec.hdr.kind != kind::LD {
        return;
    }
    if EVENTS.output::<LdRecord>(&*rec, maps::QUIET).is_err() {
        maps::count_lost(stat::RINGBUF_FULL);
    }
    maps::store(&mut rec.hdr.kind, 0);
}
