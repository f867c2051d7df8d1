//! Record types shared by the kernel programs (`forkprof-ebpf`) and the agent (`forkprof`).
//!
//! Every record is `#[repr(C)]` with explicit padding so that both sides agree on the layout
//! byte for byte; the size asserts at the bottom catch a field added on one side only.
//! One record is sent per lifecycle milestone of a process: it was spawned, it exec'd (once per
//! attempt), its dynamic linker finished, it exited.
#![no_std]

/// Kind tag at the start of every record (`RecordHeader::kind`).
pub mod kind {
    pub const SPAWN: u32 = 1;
    pub const EXEC: u32 = 2;
    pub const LD: u32 = 3;
    pub const EXIT: u32 = 4;
    /// What the kernel sends for an exec attempt (`ExecAttemptRecord`): its times, path and
    /// argv in one record. The agent makes it into an `ExecRecord` (kind `EXEC`), which is
    /// what the rest of forkprof sees.
    pub const EXEC_ATTEMPT: u32 = 5;
}

/// Syscall numbers (x86_64) that the programs care about.
pub mod nr {
    pub const MPROTECT: i64 = 10;
    pub const MUNMAP: i64 = 11;
    pub const ACCESS: i64 = 21;
    pub const CLONE: i64 = 56;
    pub const FORK: i64 = 57;
    pub const VFORK: i64 = 58;
    pub const EXECVE: i64 = 59;
    pub const ARCH_PRCTL: i64 = 158;
    pub const EXIT_GROUP: i64 = 231;
    pub const OPENAT: i64 = 257;
    pub const EXECVEAT: i64 = 322;
    pub const CLONE3: i64 = 435;
}

/// The ia32 numbers of the syscalls forkprof follows, as a 32-bit process (or `int $0x80`)
/// makes them: sys_enter and sys_exit see these, and most collide with x86-64 numbers of
/// other syscalls (`EXECVE` is x86-64 munmap's 11). clone3 is 435 in both tables.
pub mod nr_ia32 {
    pub const FORK: i64 = 2;
    pub const EXECVE: i64 = 11;
    pub const CLONE: i64 = 120;
    pub const VFORK: i64 = 190;
    pub const EXIT_GROUP: i64 = 252;
    pub const EXECVEAT: i64 = 358;

    /// The x86-64 number of the same syscall, for the ones forkprof follows.
    #[inline(always)]
    pub fn to_x86_64(id: i64) -> Option<i64> {
        Some(match id {
            FORK => super::nr::FORK,
            EXECVE => super::nr::EXECVE,
            CLONE => super::nr::CLONE,
            VFORK => super::nr::VFORK,
            EXIT_GROUP => super::nr::EXIT_GROUP,
            EXECVEAT => super::nr::EXECVEAT,
            // clone3 is 435 in both tables.
            super::nr::CLONE3 => super::nr::CLONE3,
            _ => return None,
        })
    }
}

/// x86 `thread_info.status` bit: the task is in an ia32 syscall (`in_ia32_syscall()`), or,
/// from exec to its first return, its new image is 32-bit.
pub const TS_COMPAT: u32 = 0x0002;

/// clone(2) flags used to classify a spawn.
pub mod clone_flags {
    pub const CLONE_VM: u64 = 0x0000_0100;
    pub const CLONE_VFORK: u64 = 0x0000_4000;
    pub const CLONE_THREAD: u64 = 0x0001_0000;
}

/// Indices into the `STATS` per-CPU array: events the kernel side could not deliver.
pub mod stat {
    /// The ring buffer was full when a record was to be sent.
    pub const RINGBUF_FULL: u32 = 0;
    /// A per-process or per-thread state map was full, so a process could not be followed.
    pub const STATE_MAP_FULL: u32 = 1;
    /// Exits whose parent notification was never seen (teardown unmeasured), sent at free.
    pub const EXIT_WITHOUT_NOTIFY: u32 = 2;
    /// Spawns that the syscall hooks in use did not see, where they are the classic syscall
    /// events, which skip ia32 syscalls (`ia32_syscalls`): at task_newtask, a fork-family
    /// syscall of a 32-bit caller that forkprof follows or would follow, whose entry no hook
    /// saw (its child is not followed); at sched_process_exec, an exec of a followed process
    /// whose entry was not seen (a 32-bit caller's).
    pub const IA32_UNSEEN: u32 = 3;
    /// Processes whose exit was never seen, found when a fork reused the pid their entry
    /// still held: their exit record is lost (the process's other records were sent).
    pub const EXIT_UNSEEN: u32 = 4;
    pub const COUNT: u32 = 5;
}

/// The slots of the `IA32_SYSCALLS` map, and the modes of its `MODE` slot: how the syscall
/// hooks in use see ia32 syscalls (a 32-bit process's, or `int $0x80`). Written by the agent,
/// except `WANTED`.
pub mod ia32_syscalls {
    /// Slot: one of the modes below.
    pub const MODE: u32 = 0;
    /// Slot: set to 1 by the kernel in mode `STANDBY` when it sees a 32-bit process it
    /// follows exec or spawn; the agent then attaches sys_enter and sys_exit.
    pub const WANTED: u32 = 1;
    /// Slot: how many followed processes run a 32-bit image now (`ProcState::ia32`). The
    /// agent detaches sys_enter and sys_exit from ia32 syscalls once it has read 0 here for
    /// a while, and goes back to `STANDBY`.
    pub const LIVE: u32 = 2;
    pub const SLOTS: u32 = 3;
    /// The hooks see every syscall: sys_enter and sys_exit, or the syscall functions'
    /// trampolines (which include the ia32 ones).
    pub const SEEN: u32 = 0;
    /// The classic syscall events only (`--ia32-syscalls never`): ia32 syscalls are unseen,
    /// and what they spawn is counted (`stat::IA32_UNSEEN`).
    pub const UNSEEN: u32 = 1;
    /// The same, with sys_enter and sys_exit loaded in standby (`--ia32-syscalls
    /// on-demand`): the kernel also asks for them (`WANTED`).
    pub const STANDBY: u32 = 2;
    /// The classic syscall events for x86-64 syscalls, and sys_enter and sys_exit for ia32
    /// syscalls only (they return at once for any other).
    pub const RAW_FOR_IA32: u32 = 3;
}

/// Slots of `PROC_SLOTS`, the direct-mapped array of traced processes (a power of two: the
/// slot is `tgid & (PROC_SLOT_COUNT - 1)`). Linux's default `pid_max` is 32768 on machines
/// with fewer than 32 CPUs, so there no two live processes share a slot.
pub const PROC_SLOT_COUNT: u32 = 32768;

/// Indices into the `ACTIVE` array: how many windows of each kind are open right now.
/// Hot handlers read these first and return at once when the count is zero.
pub mod active {
    pub const FORKS: u32 = 0;
    pub const EXECS: u32 = 1;
    pub const LD: u32 = 2;
    pub const EXITS: u32 = 3;
    pub const COW: u32 = 4;
    /// Fork children that have not yet returned from the fork (see `child_state`).
    pub const CHILDREN: u32 = 5;
    /// Processes in `PROCS_SPILL` (their `PROC_SLOTS` slot was taken): a lookup that misses
    /// its slot reads the hash map only when this is not zero.
    pub const SPILLED: u32 = 6;
    /// Dynamic-linker windows in `ld_state::STATIC`, the only state that looks at `mprotect`:
    /// the others' mprotect calls (a few per library loaded) pass sys_enter with no lookup.
    pub const STATIC_START: u32 = 7;
    pub const COUNT: u32 = 8;
}

/// Where a fork child is in `child_run`: its first return from the fork-family syscall ->
/// its first exec attempt, or its exit if it never execs.
pub mod child_state {
    /// Not a fork child, or its `child_run` is over.
    pub const NONE: u32 = 0;
    /// Created; it has not yet returned from the fork.
    pub const AWAITING: u32 = 1;
    /// Returned from the fork at `ProcState::child_t0`.
    pub const RUNNING: u32 = 2;
}

/// Dynamic-linker window states, as seen through the linker's syscalls.
pub mod ld_state {
    /// No window open.
    pub const NONE: u32 = 0;
    /// exec done; waiting for `access("/etc/ld.so.preload")`.
    pub const START: u32 = 1;
    /// ld.so is mapping objects; waiting for `arch_prctl(ARCH_SET_FS)`.
    pub const MAP: u32 = 2;
    /// TLS set up; relocating; waiting for the `munmap` of ld.so.cache.
    pub const RELOC: u32 = 3;
    /// No ld.so: `arch_prctl(ARCH_SET_FS)` came first. A static glibc binary's start-up goes
    /// on until its RELRO `mprotect(PROT_READ)`, its last syscall before `main`.
    pub const STATIC: u32 = 4;
}

/// How an `LdRecord` ended (`LdRecord::outcome`).
pub mod ld_outcome {
    /// All three brackets seen: `ld_start`, `ld_map`, `ld_reloc_init` are valid.
    pub const COMPLETE: u32 = 1;
    /// `arch_prctl(ARCH_SET_FS)` came before any glibc ld.so syscall: no glibc dynamic linker.
    /// `static_start_ns` is valid: exec done -> the RELRO `mprotect(PROT_READ)` of static
    /// glibc, or -> `arch_prctl(ARCH_SET_FS)` when no such mprotect follows.
    pub const NO_GLIBC_LD: u32 = 2;
    /// The window was given up (too many syscalls, or an unexpected order).
    pub const INCOMPLETE: u32 = 3;
}

pub const COMM_LEN: usize = 16;
pub const PATH_LEN: usize = 256;
pub const ARG_SLOTS: usize = 8;
pub const ARG_LEN: usize = 64;
/// Bytes of argv an exec attempt's record carries: its strings, each with its NUL, in order.
pub const ARGV_LEN: usize = 1024;

/// The most steps of the `FORKPROF_BENCH_BURN` loop (benchmarks only): the verifier follows
/// each step, about ten instructions, and a million instructions is its limit. On 6.18,
/// 90,000 steps loaded and 100,000 were refused (ENOSPC: the verifier's log filled as it
/// gave up); half the limit leaves room for other kernels' counts.
pub const BENCH_BURN_MAX: u32 = 50_000;
/// Watched syscalls (access, openat, arch_prctl, munmap) after exec that may pass before
/// ld.so's `access` before the window is given up.
pub const LD_START_MAX_SYSCALLS: u32 = 16;
/// Watched syscalls in the dynamic-linker window before it is given up.
pub const LD_MAX_SYSCALLS: u32 = 1024;

/// Identifies one process for the lifetime of a trace, even across pid reuse: its tgid in the
/// initial pid namespace plus the time it was created (`task_struct.start_time`), and whether
/// that creation was traced.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProcKey {
    /// When the process was created, CLOCK_MONOTONIC ns. 0 for a process that forkprof was
    /// asked to trace (`run`'s CMD, `record -p`'s process): one per pid in a session.
    pub start_ns: u64,
    pub pid: u32,
    /// 1: the process was first seen mid-life, its creation not traced (it existed before
    /// tracing began, forkprof was asked to trace it, or it came into a `--cgroup` scope
    /// from outside); no spawn record will name it as a child.
    pub mid_life: u32,
}

impl ProcKey {
    /// The key of a process first seen mid-life (see `mid_life`).
    pub const fn mid_life(pid: u32, start_ns: u64) -> Self {
        Self {
            start_ns,
            pid,
            mid_life: 1,
        }
    }

    /// Whether the process was first seen mid-life (see `mid_life`).
    pub const fn is_mid_life(&self) -> bool {
        self.mid_life != 0
    }

    /// `start_ns` as recordings and exports show it, one number that keeps the key whole:
    /// the start time of a process whose creation was traced, and minus it for one first
    /// seen mid-life (0 for a process forkprof was asked to trace). Start times stay below
    /// 2^63 (CLOCK_MONOTONIC would take 292 years to reach it).
    pub const fn stored_start_ns(&self) -> i64 {
        let start = self.start_ns as i64;
        if self.is_mid_life() { -start } else { start }
    }

    /// The key of process `pid` whose `start_ns` was stored as `stored_start_ns` shows it;
    /// `None` for `i64::MIN`, which no start time gives. Recordings made before schema 8
    /// stored 0 for every process first seen mid-life.
    pub const fn from_stored(pid: u32, stored: i64) -> Option<Self> {
        match stored {
            i64::MIN => None,
            s if s > 0 => Some(Self {
                start_ns: s as u64,
                pid,
                mid_life: 0,
            }),
            s => Some(Self::mid_life(pid, (-s) as u64)),
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RecordHeader {
    pub kind: u32,
    pub _pad: u32,
    /// CLOCK_MONOTONIC (bpf_ktime_get_ns) when the record was sent.
    pub ts_ns: u64,
    /// The process the record is about.
    pub proc: ProcKey,
}

/// A fork/vfork/clone/clone3 syscall returned in the parent (process or thread created).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SpawnRecord {
    pub hdr: RecordHeader,
    /// The parent process.
    pub parent: ProcKey,
    /// The thread of the parent that made the syscall.
    pub parent_tid: u32,
    /// The new task's tid (== its pid for a process).
    pub child_tid: u32,
    pub clone_flags: u64,
    /// Syscall number (`nr::CLONE` ...).
    pub syscall: u32,
    /// Negative errno if the syscall failed, else 0.
    pub errno: i32,
    /// Syscall entry.
    pub start_ns: u64,
    /// Parent's syscall latency, less `vfork_wait_ns`.
    pub fork_ns: u64,
    /// Time in dup_mmap, bracketed by the parent's mm write lock inside the syscall.
    pub pagetable_copy_ns: u64,
    /// CLONE_VFORK: child created -> parent's syscall returns.
    pub vfork_wait_ns: u64,
    /// The parent's cgroup v2 id at the syscall's return: the cgroup the child was created
    /// in (0 where the kernel has no cgroup v2 hierarchy).
    pub cgroup_id: u64,
    pub parent_comm: [u8; COMM_LEN],
}

/// One execve/execveat attempt finished (successfully or not).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ExecRecord {
    pub hdr: RecordHeader,
    /// Calling thread.
    pub tid: u32,
    /// 0 on success, else the positive errno.
    pub errno: i32,
    pub start_ns: u64,
    /// Syscall entry -> sched_prepare_exec (0 if never reached).
    pub exec_prepare_ns: u64,
    /// sched_prepare_exec -> sched_process_exec (0 if never reached).
    pub exec_load_ns: u64,
    /// Syscall entry -> the new image loaded (sched_process_exec) for a successful attempt,
    /// so `exec_prepare_ns + exec_load_ns` where the point of no return is hooked; syscall
    /// entry -> its return for a failed one.
    pub exec_ns: u64,
    /// Inode-dirty events (atime updates) inside the attempt (up to its end as `exec_ns`
    /// has it) and their time.
    pub atime_count: u32,
    /// Number of argv entries (may exceed `ARG_SLOTS`).
    pub argc: u32,
    pub atime_ns: u64,
    /// Copy-on-write faults since the fork, in this process and its parent (success only).
    pub cow_faults: u64,
    /// Time in those faults' write-protect handling (`do_wp_page`), where the kernel lets
    /// forkprof hook it (fentry or kprobe); else 0.
    pub cow_fault_ns: u64,
    /// The first exec attempt of a fork child: its first return from the fork -> this
    /// attempt's entry (`child_run`); else 0.
    pub child_run_ns: u64,
    /// The process's cgroup v2 id at the attempt's end (it may have moved since the fork).
    pub cgroup_id: u64,
    /// How many of `args` hold a string that was read (a string may be empty): at most
    /// `argc` and `ARG_SLOTS`, fewer when argv's first bytes held fewer strings, none when
    /// no argument was read (`--no-args`, or a failure after the point of no return).
    pub args_read: u32,
    pub _pad: u32,
    pub path: [u8; PATH_LEN],
    pub args: [[u8; ARG_LEN]; ARG_SLOTS],
}

/// An exec attempt as the kernel sends it (kind `EXEC_ATTEMPT`), straight into the ring
/// buffer: the times of `ExecRecord`, whose fields of the same names mean the same, and the
/// attempt's path and argv end to end.
///
/// A successful attempt's is sent at sched_process_exec, where its exec ends, from the
/// kernel's copies: the path from `linux_binprm.filename`, argv in one read of the new
/// image's stack (`mm->arg_start..arg_end`), where the kernel laid its strings out end to
/// end. A failed attempt's is sent at its return, its path and argv read from the caller's
/// memory a string at a time, up to `ARG_SLOTS` strings of at most `ARG_LEN - 1` bytes; an
/// attempt that failed after the point of no return has neither (that memory is gone).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ExecAttemptRecord {
    pub hdr: RecordHeader,
    pub tid: u32,
    pub errno: i32,
    pub start_ns: u64,
    pub exec_prepare_ns: u64,
    pub exec_load_ns: u64,
    pub exec_ns: u64,
    pub atime_count: u32,
    /// Number of argv entries (may exceed what `argv` holds).
    pub argc: u32,
    pub atime_ns: u64,
    pub cow_faults: u64,
    pub cow_fault_ns: u64,
    pub child_run_ns: u64,
    pub cgroup_id: u64,
    /// The path as given (NUL-terminated), then, where `path_walk` says so, the names the
    /// kernel walked to make it absolute, each NUL-terminated, the last one first.
    pub path: [u8; PATH_LEN],
    /// Bytes of `argv` that were written.
    pub argv_len: u32,
    /// How `path` was made absolute (`path_walk`): where the names walked end, and flags.
    pub path_walk: u32,
    /// argv's strings, each with its NUL, in order: the first `argv_len` bytes (the last
    /// string may be cut short, without its NUL). The kernel leaves the rest unwritten.
    pub argv: [u8; ARGV_LEN],
}

/// The dynamic-linker window after a successful exec closed.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct LdRecord {
    pub hdr: RecordHeader,
    pub outcome: u32,
    /// openat calls inside the window: ld.so.cache, each object loaded, and each path its
    /// search tried in vain (a RUNPATH's glibc-hwcaps directories, say).
    pub openat_count: u32,
    pub ld_start_ns: u64,
    pub ld_map_ns: u64,
    pub ld_reloc_init_ns: u64,
    pub atime_count: u32,
    /// The window's syscalls that moved or could have moved its state: access, openat,
    /// arch_prctl and munmap, and mprotect once the window is in a static start-up.
    pub syscalls: u32,
    pub atime_ns: u64,
    /// `NO_GLIBC_LD` only: exec done -> the end of a static libc's start-up (see
    /// `ld_outcome::NO_GLIBC_LD`). For a binary with no ELF interpreter this is `static_start`
    /// (CPU feature probes, tunables, IRELATIVE relocations, TLS, RELRO); 0 otherwise.
    pub static_start_ns: u64,
    /// The objects ld.so loaded (`ld_map`): the openat calls after which the process's
    /// mappings grew by two or more, as an object's segments make them grow (ld.so.cache,
    /// one mapping, and a path that was not found, none, are not counted).
    pub objects: u32,
    pub _pad: u32,
}

/// A process (its last thread) exited.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ExitRecord {
    pub hdr: RecordHeader,
    /// task->exit_code: wait-status encoding (signal in bits 0-6, status in bits 8-15).
    pub exit_code: u32,
    /// 1 when the parent notification was seen and `exit_teardown_ns` is valid.
    pub notified: u32,
    /// Start of the teardown -> parent notified (exit_mm, files, exit_notify). The start is
    /// sched_process_exit where it fires before exit_mm (6.16+), else the exit_group entry.
    pub exit_teardown_ns: u64,
    /// Copy-on-write faults since the fork, if the process never exec'd.
    pub cow_faults: u64,
    /// Time in those faults (see `ExecRecord::cow_fault_ns`).
    pub cow_fault_ns: u64,
    /// Start of the teardown.
    pub exit_ns: u64,
    /// A fork child that never exec'd: its first return from the fork -> its exit
    /// (`child_run`); else 0.
    pub child_run_ns: u64,
    /// Its cgroup v2 id when its teardown began (0: not known).
    pub cgroup_id: u64,
    pub comm: [u8; COMM_LEN],
}

/// Per-process kernel state: a slot of the array `PROC_SLOTS` (by tgid modulo
/// `PROC_SLOT_COUNT`), or for a tgid whose slot is taken, an entry of the hash map
/// `PROCS_SPILL`. Presence means "traced".
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcState {
    /// The tgid that holds this slot of `PROC_SLOTS` (0: free), claimed with a
    /// compare-and-exchange; in `PROCS_SPILL`, the key's tgid.
    pub owner: u64,
    pub key: ProcKey,
    pub ld_state: u32,
    pub ld_syscalls: u32,
    pub ld_t0: u64,
    pub ld_t1: u64,
    pub ld_t2: u64,
    pub ld_openat: u32,
    /// `mm_struct.map_count` at the window's last openat (0: none yet), and the objects
    /// counted so far (`LdRecord::objects`).
    pub ld_map_count: u32,
    pub ld_objects: u32,
    /// 1 while this process is a fork child that has not exec'd or exited.
    pub in_cow_window: u32,
    /// Own copy-on-write faults inside the window.
    pub cow_faults: u64,
    /// `cow_as_parent` of the parent at fork time.
    pub cow_parent_base: u64,
    /// Faults while this process had fork children inside their windows.
    pub cow_as_parent: u64,
    pub cow_children: u32,
    pub parent_tgid: u32,
    /// Exec attempts in flight in this process's threads (`exec`, and the rest in
    /// `EXEC_ATTEMPTS`).
    pub in_exec: u32,
    pub atime_count: u32,
    pub atime_start: u64,
    pub atime_ns: u64,
    /// `child_state::*`.
    pub child_state: u32,
    /// Exec attempts of this process's threads in the map `EXEC_ATTEMPTS`: only while one
    /// is there does a thread without the attempt in `exec` look it up.
    pub exec_spilled: u32,
    /// When this fork child first returned from the fork.
    pub child_t0: u64,
    /// `child_run` closed at an exec attempt's entry, for that attempt's record.
    pub child_run_ns: u64,
    /// exit_group entry of this process (kernels whose sched_process_exit follows exit_mm).
    pub exit_start_ns: u64,
    /// Entry of the write-protect fault in progress (`do_wp_page`), 0 when none.
    pub wp_start: u64,
    /// Own time in write-protect faults inside the copy-on-write window.
    pub cow_fault_ns: u64,
    /// `cow_ns_as_parent` of the parent at fork time.
    pub cow_ns_parent_base: u64,
    /// Fault time while this process had fork children inside their windows.
    pub cow_ns_as_parent: u64,
    /// 1 while this process runs a 32-bit image, as far as forkprof saw it: it exec'd one, a
    /// 32-bit parent forked it, it was first seen in an ia32 syscall, or a spawn of it was
    /// counted unseen. Counted in `ia32_syscalls::LIVE` while set. A u64: it changes by an
    /// atomic exchange, which the BPF ISA before v3 (LLVM's `-mcpu` generic, this build's)
    /// has only in 64 bits.
    pub ia32: u64,
    /// The main thread's fork-family syscall in flight (`start_ns` 0: none). Other threads'
    /// forks are in the map `FORKS`: most forks come from a process's main thread, and this
    /// saves them a hash insert, delete and two lookups (docs/kernel-findings.md).
    pub fork: ForkState,
    /// The exec attempt in flight of the first thread to start one (`tid` 0: none). Another
    /// thread's attempt at the same time is in the map `EXEC_ATTEMPTS`, by tid.
    pub exec: ExecState,
    /// The records sent when the process's exit is notified: the exit record, filled at the
    /// last thread's exit, and the dynamic-linker record held back since its window closed
    /// (see `ExitRecords`).
    pub sent_at_exit: ExitRecords,
}

/// What the kernel sends when a process's exit is notified, as one ring-buffer record: its
/// exit record, waiting there for the parent's notification since its last thread exited
/// (`exit.hdr.kind == kind::EXIT` from then on; 0 before), and the record of its last
/// image's dynamic-linker window, held there since the window closed (`ld.hdr.kind ==
/// kind::LD`; 0: none held). Both wait in the process's own entry rather than in maps of
/// their own, and go out together: a ring-buffer record costs a reservation and a commit,
/// about 0.3 µs (docs/kernel-findings.md). Without a held window the exit record goes
/// alone (`ExitRecord`'s size). A held window goes on its own where the process execs
/// again first, and the agent reads the ones still held when a trace ends.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ExitRecords {
    pub exit: ExitRecord,
    pub ld: LdRecord,
}

/// A parent thread inside a fork-family syscall (`ProcState::fork` for a process's main
/// thread, else the map `FORKS`, keyed by tid).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ForkState {
    pub start_ns: u64,
    pub syscall: u32,
    pub child_tid: u32,
    pub clone_flags: u64,
    pub created_ns: u64,
    pub pt_mm: u64,
    pub pt_start: u64,
    pub pt_ns: u64,
}

/// A thread's exec attempt in flight (`ProcState::exec`, or the map `EXEC_ATTEMPTS`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ExecState {
    /// The attempt's entry.
    pub start_ns: u64,
    /// The absolute times of its point of no return and of its new image's load (0: not
    /// yet).
    pub prepared_at: u64,
    pub loaded_at: u64,
    /// The calling thread (0: no attempt). 64 bits: the entry's is claimed with a
    /// compare-and-exchange, which BPF has only for 64-bit words before its v3 ISA.
    pub tid: u64,
}

/// What the programs need to know about the running kernel, read from its BTF by the agent
/// and passed in as the global `KERNEL_LAYOUT`: struct field offsets (aya-ebpf has no CO-RE).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct KernelLayout {
    /// `task_struct.pid`, `.tgid`, `.exit_code`, `.signal`.
    pub task_pid: u32,
    pub task_tgid: u32,
    pub task_exit_code: u32,
    pub task_signal: u32,
    /// `signal_struct.live`: the live threads; 0 once the last one is in do_exit. Used
    /// where sched_process_exit has no `group_dead` argument.
    pub signal_live: u32,
    /// 1: sched_process_exit fires after exit_mm (it has no `group_dead` argument, before
    /// 6.16), so the teardown is timed from the exit_group syscall's entry instead.
    pub exit_at_syscall: u32,
    /// `task_struct.comm`: the command name, 16 bytes with its NUL.
    pub task_comm: u32,
    /// `task_struct.start_time`: when copy_process made the task, CLOCK_MONOTONIC ns (the
    /// clock of `bpf_ktime_get_ns`).
    pub task_start_time: u32,
    /// `task_struct.group_leader`: the process's main thread, whose `start_time` is the
    /// process's.
    pub task_group_leader: u32,
    /// `task_struct.mm`, `mm_struct.arg_start`, `.arg_end`: where a new image's argv lies.
    pub task_mm: u32,
    pub mm_arg_start: u32,
    pub mm_arg_end: u32,
    /// `mm_struct.map_count`: the process's mappings (VMAs).
    pub mm_map_count: u32,
    /// `linux_binprm.filename`, `.argc`.
    pub bprm_filename: u32,
    pub bprm_argc: u32,
    /// `task_struct.thread_info.status` (x86), which holds `TS_COMPAT`.
    pub task_thread_status: u32,
    /// `task_struct.exit_signal`: the signal that tells the parent of the process's exit
    /// (clone's low byte: SIGCHLD from fork, anything from clone; 0 for none).
    pub task_exit_signal: u32,
    /// 1: every offset below was found, and a path that is not absolute (or names a file
    /// descriptor) is made absolute by walking the kernel's dentries (`path_walk`).
    pub walk_paths: u32,
    /// `task_struct.fs`; `fs_struct.root`, `.pwd`; `path.mnt`, `.dentry`.
    pub task_fs: u32,
    pub fs_root: u32,
    pub fs_pwd: u32,
    pub path_mnt: u32,
    pub path_dentry: u32,
    /// `linux_binprm.file`, `.interp` (the same pointer as `.filename` unless a script or
    /// binfmt_misc handler named an interpreter).
    pub bprm_file: u32,
    pub bprm_interp: u32,
    /// `file.f_path`.
    pub file_path: u32,
    /// `dentry.d_parent`; `dentry.d_name.name`.
    pub dentry_parent: u32,
    pub dentry_name: u32,
    /// `vfsmount.mnt_root`; `mount.mnt` (the `vfsmount` inside a `mount`), `.mnt_parent`,
    /// `.mnt_mountpoint`.
    pub vfsmount_root: u32,
    pub mount_mnt: u32,
    pub mount_parent: u32,
    pub mount_mountpoint: u32,
}

/// `ExecAttemptRecord.path_walk`: how the path was made absolute. Zero: it was not (it was
/// absolute as given, or nothing could be walked); `path` holds the path as given.
pub mod path_walk {
    /// Where the names walked end in `path`: they lie between the path as given (with its
    /// NUL) and this byte, each with its NUL.
    pub const END: u32 = 0xffff;
    /// The names are the current directory's: the absolute path is theirs, then the path
    /// as given. Without it, they are the executed file's own (`/dev/fd/N`, `/proc/…/exe`),
    /// and the path as given is replaced.
    pub const FROM_CWD: u32 = 1 << 16;
    /// The walk reached the root (the task's own, or the top mount). Without it, the names
    /// are the path's last ones only.
    pub const COMPLETE: u32 = 1 << 31;
}

#[cfg(feature = "user")]
mod pod {
    use super::*;
    // SAFETY: all of these are repr(C), made of integers and integer arrays, with explicit
    // padding fields, so every bit pattern is valid.
    unsafe impl aya::Pod for ProcKey {}
    unsafe impl aya::Pod for ProcState {}
    unsafe impl aya::Pod for ForkState {}
    unsafe impl aya::Pod for ExecState {}
    unsafe impl aya::Pod for KernelLayout {}
}

const _: () = assert!(core::mem::size_of::<ProcKey>() == 16);
const _: () = assert!(core::mem::size_of::<RecordHeader>() == 32);
const _: () = assert!(core::mem::size_of::<SpawnRecord>() == 32 + 16 + 8 + 8 + 8 + 8 * 5 + 16);
const _: () = assert!(
    core::mem::size_of::<ExecRecord>()
        == 32 + 8 + 8 * 4 + 8 + 8 + 8 + 8 + 8 + 8 + 8 + PATH_LEN + ARG_SLOTS * ARG_LEN
);
const _: () = assert!(core::mem::size_of::<LdRecord>() == 32 + 8 + 24 + 8 + 8 + 8 + 8);
const _: () =
    assert!(core::mem::size_of::<ExitRecord>() == 32 + 8 + 8 + 8 + 8 + 8 + 8 + 8 + COMM_LEN);
// The two records of `ExitRecords` lie end to end, as the agent reads them.
const _: () = assert!(
    core::mem::size_of::<ExitRecords>()
        == core::mem::size_of::<ExitRecord>() + core::mem::size_of::<LdRecord>()
);
const _: () = assert!(
    core::mem::size_of::<ExecAttemptRecord>()
        == 32 + 8 + 8 * 4 + 8 + 8 * 5 + PATH_LEN + 8 + ARGV_LEN
);
// The kernel zeroes a freed `PROC_SLOTS` slot word by word, `owner` (word 0) last.
const _: () = assert!(core::mem::size_of::<ProcState>().is_multiple_of(8));
const _: () = assert!(core::mem::offset_of!(ProcState, owner) == 0);
