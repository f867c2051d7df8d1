//! Maps and globals shared by all probes, and the small helpers that touch them.
use core::intrinsics::{AtomicOrdering, atomic_cxchg, atomic_xadd, atomic_xchg};

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns, generated},
    macros::map,
    maps::{Array, CgroupArray, HashMap, PerCpuArray, RingBuf},
};
use forkprof_common::{
    ARGV_LEN, ExecState, ForkState, KernelLayout, PROC_SLOT_COUNT, ProcKey, ProcState,
    RecordHeader, TS_COMPAT, active, ia32_syscalls, stat,
};

/// Records to the agent, one per lifecycle milestone.
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(16 << 20, 0);

/// Traced processes, direct-mapped by tgid: slot `tgid & PROC_SLOT_MASK` belongs to
/// the process whose tgid is in its `owner`. An array lookup is an inlined address
/// computation (16 ns here against 56 for a hash lookup), and a claimed slot needs no
/// allocation: see `proc_of`, `insert_proc` and `remove_proc`, the only code that touches
/// this map and `PROCS_SPILL` (docs/kernel-findings.md).
#[map]
pub static PROC_SLOTS: Array<ProcState> = Array::with_max_entries(PROC_SLOT_COUNT, 0);

/// How the syscall hooks in use see ia32 syscalls (`ia32_syscalls::MODE`: `SEEN`, `UNSEEN`,
/// `STANDBY` or `RAW_FOR_IA32`), and whether the kernel wants sys_enter and sys_exit attached for them
/// (`ia32_syscalls::WANTED`). The agent sets the mode once it knows which hooks attached,
/// before any process is followed; read once per spawn, and by sys_enter and sys_exit on
/// every hit.
#[map]
pub static IA32_SYSCALLS: Array<u32> = Array::with_max_entries(ia32_syscalls::SLOTS, 0);

/// Traced processes whose slot in `PROC_SLOTS` another live process holds, by tgid.
#[map]
pub static PROCS_SPILL: HashMap<u32, ProcState> = HashMap::with_max_entries(32768, 0);

/// Processes the agent asked to trace (`forkprof run`'s command, `record -p`), by tgid. The
/// kernel adopts one into the traced set at its first fork, exec attempt or exit
/// (`proc_state`), which every record of a process starts from.
#[map]
pub static SEEDS: HashMap<u32, u32> = HashMap::with_max_entries(16384, 0);

/// Slot 0 is 1 once the agent has attached every program it attaches at start
/// (`loader::load`). Until then no process is followed (`proc_state` adopts none), so no
/// window opens while a program that would close it is not attached yet: a window left open
/// would keep its `ACTIVE` counter above 0 for the whole session, and every hot hit would
/// then pay a lookup (docs/kernel-findings.md). Read only where a process is adopted.
#[map]
pub static ATTACHED: Array<u32> = Array::with_max_entries(1, 0);

/// Threads other than a process's main thread inside a fork-family syscall, by tid (a main
/// thread's fork is in its process's entry, `ProcState::fork`).
#[map]
pub static FORKS: HashMap<u32, ForkState> = HashMap::with_max_entries(16384, 0);

/// Exec attempts of threads whose process's entry holds another thread's attempt already
/// (`ProcState::exec`), by tid: two threads of one process in execve at once.
#[map]
pub static EXEC_ATTEMPTS: HashMap<u32, ExecState> = HashMap::with_max_entries(4096, 0);

/// The source of every `PROCS_SPILL` insert, one zeroed `ProcState` per CPU: a `ProcState` built
/// on the stack takes more than 6.1's verifier allows beside its callers' frames. Only
/// `insert_proc` writes it, and it leaves it zeroed again.
#[map]
pub static PROC_TEMPLATE: PerCpuArray<ProcState> = PerCpuArray::with_max_entries(1, 0);

/// Loss counters (`stat::*`).
#[map]
pub static STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(stat::COUNT, 0);

/// Open windows of each kind (`active::*`), read first by hot handlers. A global (in
/// `.bss`), not an array map: a read is one load from a constant address, where an array
/// lookup also computes and bounds-checks the index; hot handlers read it on every hit.
#[unsafe(no_mangle)]
static mut ACTIVE: [u64; active::COUNT as usize] = [0; active::COUNT as usize];

/// 1: trace every process on the system (record/top/monitor); 0: only the traced set and
/// its descendants (run, `record -p`).
#[unsafe(no_mangle)]
static TRACE_ALL: u32 = 0;

/// The `--cgroup` scope: slot 0 holds the cgroup whose subtree is traced (the agent writes
/// its directory's fd there). Read only when `CGROUP_SCOPED` is 1; see `in_scope`.
#[map]
pub static CGROUP_SCOPE: CgroupArray = CgroupArray::with_max_entries(1, 0);

/// 1: `record/top/monitor --cgroup`: trace-all mode, but only inside `CGROUP_SCOPE`'s subtree.
/// A read-only global: without a scope the verifier drops the check.
#[unsafe(no_mangle)]
static CGROUP_SCOPED: u32 = 0;

/// 1: the dynamic-linker brackets come from uprobes (`--precise-ld`), not from syscalls.
#[unsafe(no_mangle)]
static PRECISE_LD: u32 = 0;

/// 1: exec records carry argv's strings. 0 where nothing shows them (`--no-args`, `top`,
/// `monitor`): the kernel then does not read them at all, which saves a user-memory read per
/// exec and keeps them out of the ring buffer. argc is kept either way.
#[unsafe(no_mangle)]
static CAPTURE_ARGV: u32 = 1;

/// The slots of `PROC_SLOTS` in use, less one: `PROC_SLOT_COUNT - 1`, or fewer with
/// `FORKPROF_TEST_PROC_SLOTS` (tests only: most processes then take the spill path).
#[unsafe(no_mangle)]
static PROC_SLOT_MASK: u32 = PROC_SLOT_COUNT - 1;

/// The slot of process `tgid` in `PROC_SLOTS`.
#[inline(always)]
fn slot_of(tgid: u32) -> u32 {
    // SAFETY: as in `trace_all`.
    tgid & unsafe { core::ptr::read_volatile(&PROC_SLOT_MASK) }
}

/// 1: every program returns at entry (`FORKPROF_BENCH_EMPTY=1`, for benchmarks only). A
/// read-only global, so the verifier drops whichever branch does not apply.
#[unsafe(no_mangle)]
static BENCH_EMPTY: u32 = 0;

#[inline(always)]
pub fn bench_empty() -> bool {
    // SAFETY: as in `trace_all`.
    unsafe { core::ptr::read_volatile(&BENCH_EMPTY) != 0 }
}

/// Steps of a loop that touches only registers, run by the empty program at each exec that
/// passes no arguments (`FORKPROF_BENCH_BURN`, benchmarks only): program time with almost
/// no footprint. A read-only global, so the verifier knows the bound (0 leaves the loop out).
#[unsafe(no_mangle)]
static BENCH_BURN: u32 = 0;

/// Where the burn loop leaves its result, so that the compiler keeps the loop.
#[unsafe(no_mangle)]
static mut BENCH_BURN_SINK: u64 = 0;

/// 1: the empty program at each exec that passes no arguments reads the new image's argv as
/// the real program does, into `BENCH_ARGV` (`FORKPROF_BENCH_ARGV_READ`, benchmarks only):
/// the real programs' user-memory read alone, to time against execs with an argument.
#[unsafe(no_mangle)]
static BENCH_ARGV_READ: u32 = 0;

/// Where `BENCH_ARGV_READ` reads argv to: one buffer per CPU, the last read's length and
/// bytes (the bytes after them are an earlier read's).
#[map]
pub static BENCH_ARGV: PerCpuArray<BenchArgv> = PerCpuArray::with_max_entries(1, 0);

/// A CPU's last argv read under `BENCH_ARGV_READ`: its length (0: it failed), then its bytes.
#[repr(C)]
pub struct BenchArgv {
    pub len: u64,
    pub bytes: [u8; ARGV_LEN],
}

/// Field offsets and hook choices for the running kernel, from its BTF.
#[unsafe(no_mangle)]
pub(crate) static KERNEL_LAYOUT: KernelLayout = KernelLayout {
    task_pid: 0,
    task_tgid: 0,
    task_exit_code: 0,
    task_signal: 0,
    signal_live: 0,
    exit_at_syscall: 0,
    task_comm: 0,
    task_start_time: 0,
    task_group_leader: 0,
    task_mm: 0,
    mm_arg_start: 0,
    mm_arg_end: 0,
    mm_map_count: 0,
    bprm_filename: 0,
    bprm_argc: 0,
    task_thread_status: 0,
    task_exit_signal: 0,
    walk_paths: 0,
    task_fs: 0,
    fs_root: 0,
    fs_pwd: 0,
    path_mnt: 0,
    path_dentry: 0,
    bprm_file: 0,
    bprm_interp: 0,
    file_path: 0,
    dentry_parent: 0,
    dentry_name: 0,
    vfsmount_root: 0,
    mount_mnt: 0,
    mount_parent: 0,
    mount_mountpoint: 0,
};

/// Unread bytes in the ring buffer above which a submit wakes the agent, set by the agent
/// (its `Pace`: 256 KiB, or 4 MiB for a `run` that nothing reads before it ends). Below it,
/// records are queued silently and the agent collects them on its periodic poll: a wakeup
/// on every record would schedule the agent inside the traced process's syscall return
/// path. A read-only global.
#[unsafe(no_mangle)]
static WAKEUP_BYTES: u64 = 256 << 10;

/// 1 once an exit record has asked for a wakeup past `WAKEUP_BYTES`, until an exit record
/// finds fewer bytes waiting (the agent has drained the ring). A wakeup costs the submitting
/// program an irq_work interrupt, about 16 µs on the VM measured: while the agent does not
/// drain (stopped, or starved of CPU on a busy host), asking again on every exit would cost
/// every spawn that much (docs/kernel-findings.md, "A stalled agent is woken once per
/// fill"). One wakeup per fill is enough: the agent drains the whole ring when woken, and
/// polls anyway.
#[unsafe(no_mangle)]
static mut WAKEUP_ASKED: u64 = 0;
const BPF_RB_AVAIL_DATA: u64 = 0;
const BPF_RB_NO_WAKEUP: u64 = 1;
const BPF_RB_FORCE_WAKEUP: u64 = 2;

/// Flags for a record that must wake the agent at once: a 32-bit process's exec while the
/// agent holds the hooks for its syscalls in standby (`ia32_standby`, `want_ia32_hooks`).
pub const WAKE: u64 = BPF_RB_FORCE_WAKEUP;

/// Flags for the ring-buffer submit of every record but a process's exit: no wakeup. The
/// agent's periodic poll collects them, and the exit record, one per process, asks for a
/// wakeup when `WAKEUP_BYTES` are waiting and no exit has asked since the agent last drained
/// (`submit_flags`): a fill query on every record costs a helper call that reads the agent's
/// consumer position.
pub const QUIET: u64 = BPF_RB_NO_WAKEUP;

/// Flags for a process's exit record (see `WAKEUP_BYTES`, `WAKEUP_ASKED`, `QUIET`).
#[inline(always)]
pub fn submit_flags() -> u64 {
    // SAFETY: as in `trace_all`.
    let full = u64::from(
        EVENTS.query(BPF_RB_AVAIL_DATA) >= unsafe { core::ptr::read_volatile(&WAKEUP_BYTES) },
    );
    let asked = core::ptr::addr_of_mut!(WAKEUP_ASKED);
    // Asked and still full, or not asked and not full: nothing to do. Else the flag follows
    // the fill, and only a fill not asked for yet asks.
    // SAFETY: a global that lives as long as the program, written whole; two CPUs racing
    // here at most ask twice, or clear it once too early (the next full ring asks again).
    unsafe {
        if core::ptr::read_volatile(asked) == full {
            return BPF_RB_NO_WAKEUP;
        }
        core::ptr::write_volatile(asked, full);
    }
    if full != 0 {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    }
}

/// How the syscall hooks in use see ia32 syscalls (`ia32_syscalls::MODE`).
#[inline(always)]
pub fn ia32_mode() -> u32 {
    IA32_SYSCALLS
        .get(ia32_syscalls::MODE)
        .map_or(ia32_syscalls::SEEN, |m| *m)
}

/// Whether the agent holds sys_enter and sys_exit in standby, to attach them for ia32
/// syscalls once asked (`want_ia32_hooks`).
#[inline(always)]
pub fn ia32_standby() -> bool {
    ia32_mode() == ia32_syscalls::STANDBY
}

/// Whether sys_enter and sys_exit are attached beside the classic events, for ia32 syscalls
/// only: they then return at once for every other syscall, which the classic events handle.
#[inline(always)]
pub fn raw_hooks_for_ia32_only() -> bool {
    ia32_mode() == ia32_syscalls::RAW_FOR_IA32
}

/// Adds `delta` to the count of followed 32-bit processes (`ia32_syscalls::LIVE`).
#[inline(always)]
fn ia32_live_add(delta: i32) {
    if let Some(p) = IA32_SYSCALLS.get_ptr_mut(ia32_syscalls::LIVE) {
        // SAFETY: an array value, valid and aligned for the map's life.
        add_u32(unsafe { &mut *p }, delta);
    }
}

/// Marks whether process `ps` runs a 32-bit image now (`ProcState::ia32`), keeping
/// `ia32_syscalls::LIVE` right: the flag is exchanged, so that of two programs that change
/// it at once (an exec and an exit on two CPUs), only one moves the count.
#[inline(always)]
pub fn set_ia32(ps: &mut ProcState, ia32: bool) {
    let new = u64::from(ia32);
    if ps.ia32 == new {
        return;
    }
    // SAFETY: a valid, aligned field of a map value; BPF's 64-bit atomic exchange.
    let old = unsafe { atomic_xchg::<u64, { AtomicOrdering::SeqCst }>(&raw mut ps.ia32, new) };
    if old != new {
        ia32_live_add(if ia32 { 1 } else { -1 });
    }
}

/// Counts a spawn of a 32-bit process that the syscall hooks did not see
/// (`stat::IA32_UNSEEN`), and asks the agent for the hooks that would see the next, if it
/// holds them in standby.
#[inline(always)]
pub fn count_ia32_unseen() {
    count_lost(stat::IA32_UNSEEN);
    if ia32_standby() {
        want_ia32_hooks();
    }
}

/// Asks the agent to attach sys_enter and sys_exit for ia32 syscalls (`ia32_syscalls::WANTED`).
#[inline(always)]
pub fn want_ia32_hooks() {
    if let Some(p) = IA32_SYSCALLS.get_ptr_mut(ia32_syscalls::WANTED) {
        // SAFETY: an array value, valid for the map's life; a plain store of a flag.
        unsafe { core::ptr::write_volatile(p, 1) };
    }
}

/// Counts a fork-family syscall of process `tgid` that the syscall hooks did not see
/// (`count_ia32_unseen`), if forkprof follows the process or would: in trace-all mode (in
/// the `--cgroup` scope), or as one of the processes it was asked to trace, which no hook
/// has adopted yet when none of its syscalls is seen (`SEEDS`).
#[inline(always)]
pub fn count_unseen_spawn(tgid: u32) {
    if (all_attached() && trace_all() && in_scope())
        || proc_of(tgid).is_some()
        || SEEDS.get_ptr(tgid).is_some()
    {
        count_ia32_unseen();
        // Followed from now on, as a 32-bit process (`ia32_syscalls::LIVE`): while it lives,
        // the hooks that see its spawns are kept once attached.
        if let Some(ps) = proc_state(tgid, true) {
            // SAFETY: map value of a traced process.
            set_ia32(unsafe { &mut *ps }, true);
        }
    }
}

/// When the current process was created: its main thread's `start_time`.
#[inline(always)]
pub fn current_start_time() -> u64 {
    BtfPtr::current_task()
        .ptr_at(kernel_layout!(task_group_leader))
        .u64_at(kernel_layout!(task_start_time))
}

/// The current task's `pt_regs` (its user registers at the syscall's entry), typed, for a
/// program whose context does not hold them (a classic syscall event's).
#[inline(always)]
pub fn current_regs() -> BtfPtr {
    // SAFETY: helpers without preconditions; `bpf_task_pt_regs` takes the BTF task pointer
    // `bpf_get_current_task_btf` returns.
    BtfPtr(unsafe {
        generated::bpf_task_pt_regs(generated::bpf_get_current_task_btf().cast()) as *const u8
    })
}

/// Whether the agent has attached every program (`ATTACHED`).
#[inline(always)]
fn all_attached() -> bool {
    ATTACHED.get(0).is_some_and(|a| *a != 0)
}

#[inline(always)]
pub fn trace_all() -> bool {
    // SAFETY: a read of a global that the loader may have rewritten; volatile so the compiler
    // does not fold the initial value.
    unsafe { core::ptr::read_volatile(&TRACE_ALL) != 0 }
}

/// Whether the current task is inside the `--cgroup` subtree (always true without a scope).
///
/// The rule of a cgroup scope, checked in the kernel so that a busy host outside the subtree
/// costs one helper call per fork, exec and exit, and nothing on the hot paths (no process is
/// followed, so every window counter stays 0):
/// - a fork-family syscall is traced only when its caller is inside the subtree at its
///   entry; the child is then followed (it was born there). A followed process that has
///   moved out forks untraced children;
/// - an exec attempt or an exit inside the subtree makes its process followed if it was not
///   (it existed before, or it was created outside and moved in before it exec'd: it is
///   attributed where it exec'd);
/// - once followed, a process is followed to its exit wherever it moves, so that no process
///   is left half recorded. Each record carries the cgroup id of where it happened: a
///   process created inside that moves out and execs is shown where it exec'd, outside
///   the subtree, and never counted in it.
///
/// The check is the kernel's own (`bpf_current_task_under_cgroup`: the task's cgroup v2 is
/// the scope's cgroup or one of its descendants), so it needs no cgroup level and holds in a
/// cgroup namespace. An empty slot (before the agent fills it) reads as outside.
#[inline(always)]
pub fn in_scope() -> bool {
    // SAFETY: as in `trace_all`.
    if unsafe { core::ptr::read_volatile(&CGROUP_SCOPED) } == 0 {
        return true;
    }
    matches!(CGROUP_SCOPE.current_task_under_cgroup(0), Ok(true))
}

#[inline(always)]
pub fn capture_argv() -> bool {
    // SAFETY: as in `trace_all`.
    unsafe { core::ptr::read_volatile(&CAPTURE_ARGV) != 0 }
}

#[inline(always)]
pub fn precise_ld() -> bool {
    // SAFETY: as in `trace_all`.
    unsafe { core::ptr::read_volatile(&PRECISE_LD) != 0 }
}

/// One field of `KERNEL_LAYOUT` as the loader wrote it: a volatile load of that field alone,
/// so that the compiler neither folds the global's initial value nor loads the rest.
macro_rules! kernel_layout {
    ($field:ident) => {
        // SAFETY: a field of a global that lives as long as the program, rewritten by the
        // loader before it is loaded (as in `trace_all`).
        unsafe { core::ptr::read_volatile(core::ptr::addr_of!($crate::maps::KERNEL_LAYOUT.$field)) }
    };
}
pub(crate) use kernel_layout;

/// sched_process_exec(task, old_pid, bprm) with the empty programs: at an exec with no
/// arguments (argc 1, as the bench loop's), `FORKPROF_BENCH_BURN`'s loop, a chain of
/// multiplications each waiting on the last, and `FORKPROF_BENCH_ARGV_READ`'s read of argv;
/// an exec with arguments runs neither, so that one run can alternate the two (`spawn_pairs
/// args`, bench/spawn_pairs.c).
#[inline(always)]
pub fn bench_at_exec(task: BtfPtr, bprm: BtfPtr) {
    // SAFETY: as in `trace_all`.
    let (steps, argv_read) = unsafe {
        (
            core::ptr::read_volatile(&BENCH_BURN),
            core::ptr::read_volatile(&BENCH_ARGV_READ),
        )
    };
    if (steps == 0 && argv_read == 0) || bprm.u32_at(kernel_layout!(bprm_argc)) != 1 {
        return;
    }
    if argv_read != 0
        && let Some(buf) = BENCH_ARGV.get_ptr_mut(0)
    {
        // SAFETY: this CPU's buffer; nothing else runs on this CPU while a program does.
        let buf = unsafe { &mut *buf };
        buf.len = u64::from(read_image_argv(task, buf.bytes.as_mut_ptr()));
    }
    let mut x = u64::from(steps);
    let mut i = 0;
    while i < steps && i < forkprof_common::BENCH_BURN_MAX {
        x = x
            .wrapping_mul(0x5851_f42d_4c95_7f2d)
            .wrapping_add(u64::from(i));
        i += 1;
    }
    // SAFETY: a global of this object; a racy store of a value nobody reads is harmless.
    unsafe { core::ptr::write_volatile(core::ptr::addr_of_mut!(BENCH_BURN_SINK), x) };
}

/// Reads the new image's argv, its strings end to end on its stack (`mm->arg_start ..
/// arg_end`, which the kernel has just written), into `dst`: at most `ARGV_LEN` bytes, in
/// one user-memory read. Returns the bytes read, 0 when the read failed. `task` is
/// sched_process_exec's, the current task, whose mm is the new image's.
#[inline(always)]
pub fn read_image_argv(task: BtfPtr, dst: *mut u8) -> u32 {
    let mm = task.ptr_at(kernel_layout!(task_mm));
    let (start, end) = (
        mm.u64_at(kernel_layout!(mm_arg_start)),
        mm.u64_at(kernel_layout!(mm_arg_end)),
    );
    let len = if end > start {
        (end - start).min(ARGV_LEN as u64) as u32
    } else {
        0
    };
    // SAFETY: the caller's `dst` holds ARGV_LEN bytes; the helper validates the user
    // address.
    let read = unsafe {
        aya_ebpf::helpers::generated::bpf_probe_read_user(dst.cast(), len, start as *const _)
    };
    if read == 0 { len } else { 0 }
}

#[inline(always)]
pub fn now() -> u64 {
    // SAFETY: helper without preconditions.
    unsafe { bpf_ktime_get_ns() }
}

/// The current task's cgroup v2 id (the inode number of its directory in the cgroup2
/// mount); 0 where the kernel has no cgroup v2 hierarchy.
#[inline(always)]
pub fn cgroup_id() -> u64 {
    // SAFETY: helper without preconditions.
    unsafe { aya_ebpf::helpers::bpf_get_current_cgroup_id() }
}

/// Fills a record's header where it lies (a ring-buffer reservation or a map value).
#[inline(always)]
pub fn set_header(hdr: &mut RecordHeader, kind: u32, ts_ns: u64, proc: ProcKey) {
    hdr.kind = kind;
    hdr._pad = 0;
    hdr.ts_ns = ts_ns;
    hdr.proc = proc;
}

/// `*dst = value` as one store that the compiler keeps as it is. A run of zero stores to
/// neighbouring fields is otherwise merged into a call to `memset`, which for BPF is a loop
/// of four instructions per byte: a fork's 44 bytes of state cost more than the rest of
/// its entry.
#[inline(always)]
pub fn store<T>(dst: &mut T, value: T) {
    // SAFETY: `dst` is a valid, aligned, exclusive reference.
    unsafe { core::ptr::write_volatile(dst, value) }
}

/// (tgid, tid) of the current task.
#[inline(always)]
pub fn current_ids() -> (u32, u32) {
    let id = bpf_get_current_pid_tgid();
    ((id >> 32) as u32, id as u32)
}

/// Whether the current task is in an ia32 syscall (the kernel's `in_ia32_syscall()`): a
/// 32-bit process's, or `int $0x80` from 64-bit code. From a successful exec until its first
/// return, whether the new image is 32-bit: the exec sets or clears the bit for the image it
/// loaded.
#[inline(always)]
pub fn in_compat_syscall() -> bool {
    is_compat(BtfPtr::current_task())
}

/// `in_compat_syscall` of `task` (a task pointer, such as a tracepoint's current task).
#[inline(always)]
pub fn is_compat(task: BtfPtr) -> bool {
    task.u32_at(kernel_layout!(task_thread_status)) & TS_COMPAT != 0
}

#[inline(always)]
pub fn active(index: u32) -> u64 {
    // SAFETY: an in-bounds element of a global that lives as long as the program; volatile
    // because other CPUs change it.
    unsafe { core::ptr::read_volatile(core::ptr::addr_of!(ACTIVE[index as usize])) }
}

#[inline(always)]
pub fn active_add(index: u32, delta: i64) {
    // SAFETY: an in-bounds element of a global, valid and 8-byte aligned. The result is
    // unused, so this compiles to BPF's atomic add, which every kernel version supports.
    unsafe {
        let p = core::ptr::addr_of_mut!(ACTIVE[index as usize]);
        atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(p, delta as u64);
    }
}

/// A field shared by a process's threads, read as it is now (another CPU may change it).
#[inline(always)]
pub fn load_u32(field: &u32) -> u32 {
    // SAFETY: a valid, aligned reference.
    unsafe { core::ptr::read_volatile(field) }
}

/// Adds `delta` to a field shared by a process's threads, atomically.
#[inline(always)]
pub fn add_u32(field: &mut u32, delta: i32) {
    // SAFETY: a valid, aligned field of a map value; BPF's 32-bit atomic add.
    unsafe {
        atomic_xadd::<u32, u32, { AtomicOrdering::Relaxed }>(field, delta as u32);
    }
}

/// Sets a field shared by a process's threads from 0 to `value`, unless another thread
/// did first: whether this one did.
#[inline(always)]
pub fn claim_u64(field: &mut u64, value: u64) -> bool {
    // SAFETY: a valid, aligned field of a map value; BPF's 64-bit compare-and-exchange.
    unsafe {
        atomic_cxchg::<u64, { AtomicOrdering::SeqCst }, { AtomicOrdering::SeqCst }>(field, 0, value)
            .1
    }
}

#[inline(always)]
pub fn count_lost(index: u32) {
    if let Some(p) = STATS.get_ptr_mut(index) {
        // SAFETY: per-CPU value, only this CPU writes it.
        unsafe { *p += 1 };
    }
}

// A thread's fork in flight lives in its process's entry (`ProcState::fork`) when it is the
// main thread, else in `FORKS` by tid: these three are the only places that choose.

/// Opens thread `tid`'s fork window (syscall `id`, entered at `now`) and counts it in
/// `ACTIVE`, unless `FORKS` is full (counted as lost).
#[inline(always)]
pub fn start_fork(ps: &mut ProcState, tgid: u32, tid: u32, id: u32, now: u64) {
    if tid == tgid {
        // In place: a `ForkState` built on the stack and copied in costs stack that 6.1's
        // verifier counts against the caller's.
        // SAFETY: the process's own entry, valid and exclusive here.
        unsafe { init_fork(&raw mut ps.fork, now, id) };
        active_add(active::FORKS, 1);
        return;
    }
    let mut st = core::mem::MaybeUninit::<ForkState>::uninit();
    // SAFETY: `init_fork` writes every field before `st` is read.
    let st = unsafe {
        init_fork(st.as_mut_ptr(), now, id);
        st.assume_init_ref()
    };
    if FORKS.insert(tid, st, 0).is_err() {
        count_lost(stat::STATE_MAP_FULL);
        return;
    }
    active_add(active::FORKS, 1);
}

/// Writes a fork window that opens at `now` in syscall `id`: every field, each once (see
/// `store`: a struct literal with zeros would become a `memset`).
///
/// # Safety
/// `fs` is valid for writes and aligned; `ForkState` is `repr(C)` without padding.
#[inline(always)]
unsafe fn init_fork(fs: *mut ForkState, now: u64, id: u32) {
    // SAFETY: as the caller promises.
    unsafe {
        (&raw mut (*fs).start_ns).write_volatile(now);
        (&raw mut (*fs).syscall).write_volatile(id);
        (&raw mut (*fs).child_tid).write_volatile(0);
        (&raw mut (*fs).clone_flags).write_volatile(0);
        (&raw mut (*fs).created_ns).write_volatile(0);
        (&raw mut (*fs).pt_mm).write_volatile(0);
        (&raw mut (*fs).pt_start).write_volatile(0);
        (&raw mut (*fs).pt_ns).write_volatile(0);
    }
}

/// The fork in flight of thread `tid` of process `ps`.
#[inline(always)]
pub fn fork_of(ps: &'static mut ProcState, tgid: u32, tid: u32) -> Option<&'static mut ForkState> {
    if tid == tgid {
        return (ps.fork.start_ns != 0).then_some(&mut ps.fork);
    }
    let fs = FORKS.get_ptr_mut(tid)?;
    // SAFETY: this thread's map value; only this thread writes it.
    Some(unsafe { &mut *fs })
}

/// Closes thread `tid`'s fork window (and its count in `ACTIVE`) and returns what it held. `ps` is its process's entry,
/// if it has one (a thread other than the main one keeps its fork without it).
#[inline(always)]
pub fn take_fork(ps: Option<*mut ProcState>, tgid: u32, tid: u32) -> Option<ForkState> {
    if tid == tgid {
        // SAFETY: map value of a traced process; its fork state is this thread's.
        let ps = unsafe { &mut *ps? };
        if ps.fork.start_ns == 0 {
            return None;
        }
        let fs = ps.fork;
        ps.fork.start_ns = 0;
        active_add(active::FORKS, -1);
        return Some(fs);
    }
    let fs = FORKS.get_ptr(tid)?;
    // SAFETY: this thread's map value.
    let fs = unsafe { *fs };
    let _ = FORKS.remove(tid);
    active_add(active::FORKS, -1);
    Some(fs)
}

/// The current thread's fork in flight, when any fork window is open anywhere.
#[inline(always)]
pub fn fork_in_flight() -> Option<&'static mut ForkState> {
    if active(active::FORKS) == 0 {
        return None;
    }
    let (tgid, tid) = current_ids();
    // SAFETY: the map value of a traced process.
    let ps = unsafe { &mut *proc_of(tgid)? };
    fork_of(ps, tgid, tid)
}

/// The current process's state, when a window of kind `index` (`active::*`) is open anywhere.
#[inline(always)]
pub fn process_in_window(index: u32) -> Option<&'static mut ProcState> {
    if active(index) == 0 {
        return None;
    }
    let (tgid, _) = current_ids();
    let ps = proc_of(tgid)?;
    // SAFETY: map value of a traced process.
    Some(unsafe { &mut *ps })
}

/// Process `tgid`'s slot in `PROC_SLOTS`, if the process holds it.
#[inline(always)]
fn owned_slot(tgid: u32) -> Option<*mut ProcState> {
    let slot = PROC_SLOTS.get_ptr_mut(slot_of(tgid))?;
    // SAFETY: an array value, valid for the map's life; `owner` is only ever written whole.
    (tgid != 0 && unsafe { (*slot).owner } == u64::from(tgid)).then_some(slot)
}

/// The state of traced process `tgid`, if it is traced.
#[inline(always)]
pub fn proc_of(tgid: u32) -> Option<*mut ProcState> {
    if let Some(slot) = owned_slot(tgid) {
        return Some(slot);
    }
    if active(active::SPILLED) == 0 {
        return None;
    }
    PROCS_SPILL.get_ptr_mut(tgid)
}

/// The state of traced process `tgid`, the current task's; a process not yet traced is
/// added, first seen mid-life (`ProcKey::mid_life`), when it is a seed (with `start_ns` 0),
/// or in trace-all mode (inside the `--cgroup` scope, if any: see `in_scope`), once every
/// program is attached (`ATTACHED`).
///
/// An entry first seen mid-life whose start time is not the current process's is a previous
/// process's with the same pid, whose exit went unseen or is still waiting for its task to
/// be freed: a process that came into a `--cgroup` scope from outside, whose creation no
/// hook checked for such an entry. That entry goes first (`fork::retire`).
#[inline(always)]
pub fn proc_state(tgid: u32, create: bool) -> Option<*mut ProcState> {
    if let Some(p) = proc_of(tgid) {
        // SAFETY: map value of a traced process.
        let key = unsafe { (*p).key };
        if key.mid_life == 0 || key.start_ns == 0 || key.start_ns == current_start_time() {
            return Some(p);
        }
        crate::probes::fork::retire(tgid);
    }
    if !create || !all_attached() {
        return None;
    }
    let start_ns = if trace_all() && in_scope() {
        current_start_time()
    } else {
        SEEDS.get_ptr(tgid)?;
        let _ = SEEDS.remove(tgid);
        0
    };
    let fresh = NewProc {
        key: ProcKey::mid_life(tgid, start_ns),
        // First seen in an ia32 syscall: a 32-bit process (see `ProcState::ia32`).
        ia32: u32::from(in_compat_syscall()),
        ..Default::default()
    };
    // Another thread of the process may have added it since the lookup: then that entry
    // is the one.
    match insert_proc(tgid, &fresh) {
        Ok(p) => Some(p),
        Err(NotInserted::Present) => proc_of(tgid),
        Err(NotInserted::Lost) => None,
    }
}

/// The fields of a new entry that are not zero.
#[derive(Default)]
pub struct NewProc {
    pub key: ProcKey,
    pub parent_tgid: u32,
    pub in_cow_window: u32,
    pub child_state: u32,
    pub cow_parent_base: u64,
    pub cow_ns_parent_base: u64,
    /// `ProcState::ia32`, counted in `ia32_syscalls::LIVE` once the entry is in.
    pub ia32: u32,
}

/// `bpf_map_update_elem` flag: fail with `EEXIST` when the key is present.
const BPF_NOEXIST: u64 = 1;
const EEXIST: i64 = 17;

/// Why `insert_proc` did not add an entry.
pub enum NotInserted {
    /// `tgid` has an entry already (left as it is).
    Present,
    /// Its slot was taken and `PROCS_SPILL` is full (counted as lost), or a map is missing.
    Lost,
}

/// Adds process `tgid` to the traced set: it claims the process's slot in `PROC_SLOTS` when
/// that is free (an atomic compare-and-exchange of its `owner`, so two CPUs never both
/// take it), else it goes to `PROCS_SPILL`.
///
/// A free slot is all zeros (`remove_proc` leaves it so), so a claim writes only the fields
/// that are not zero. A new process is not yet visible to lookups of its tgid while they are
/// written: a fork child cannot run before task_newtask returns, and in trace-all mode the
/// only other readers are its own threads, which then see a zero field or two.
///
/// One race is accepted: in trace-all mode, two threads of a new process that both miss its
/// entry, exactly while the process that held its slot exits, may leave one copy in
/// `PROCS_SPILL` that is never read again (it keeps `SPILLED` above 0, which only makes
/// misses read the hash map).
#[inline(always)]
pub fn insert_proc(tgid: u32, new: &NewProc) -> Result<*mut ProcState, NotInserted> {
    if tgid == 0 {
        return Err(NotInserted::Lost);
    }
    if active(active::SPILLED) != 0 && PROCS_SPILL.get_ptr(tgid).is_some() {
        return Err(NotInserted::Present);
    }
    let slot = PROC_SLOTS
        .get_ptr_mut(slot_of(tgid))
        .ok_or(NotInserted::Lost)?;
    // SAFETY: an array value, 8-byte aligned; `owner` is only ever written whole.
    let (held_by, claimed) = unsafe {
        atomic_cxchg::<u64, { AtomicOrdering::SeqCst }, { AtomicOrdering::SeqCst }>(
            &raw mut (*slot).owner,
            0,
            u64::from(tgid),
        )
    };
    if claimed {
        // SAFETY: this slot is ours now.
        fill(unsafe { &mut *slot }, new);
        if new.ia32 != 0 {
            ia32_live_add(1);
        }
        return Ok(slot);
    }
    if held_by == u64::from(tgid) {
        return Err(NotInserted::Present);
    }
    let t = PROC_TEMPLATE.get_ptr_mut(0).ok_or(NotInserted::Lost)?;
    // SAFETY: this CPU's value; nothing else runs on this CPU while a program does.
    let t = unsafe { &mut *t };
    t.owner = u64::from(tgid);
    fill(t, new);
    // By reference: the value itself would be copied onto the stack first.
    let source: &ProcState = t;
    let inserted = PROCS_SPILL.insert(tgid, source, BPF_NOEXIST);
    // Volatile: zero stores side by side would be merged into a `memset` call (a byte loop).
    store(&mut t.owner, 0);
    fill(t, &NewProc::default());
    match inserted {
        Ok(()) => {
            active_add(active::SPILLED, 1);
            if new.ia32 != 0 {
                ia32_live_add(1);
            }
            PROCS_SPILL.get_ptr_mut(tgid).ok_or(NotInserted::Lost)
        }
        Err(e) if -(e as i64) == EEXIST => Err(NotInserted::Present),
        Err(_) => {
            count_lost(stat::STATE_MAP_FULL);
            Err(NotInserted::Lost)
        }
    }
}

/// Writes a new entry's fields that are not zero (or, from a default `NewProc`, zeroes them).
#[inline(always)]
fn fill(ps: &mut ProcState, new: &NewProc) {
    // Volatile, as `owner` in `insert_proc`: no `memset`.
    store(&mut ps.key.start_ns, new.key.start_ns);
    store(&mut ps.key.pid, new.key.pid);
    store(&mut ps.key.mid_life, new.key.mid_life);
    ps.parent_tgid = new.parent_tgid;
    ps.in_cow_window = new.in_cow_window;
    ps.child_state = new.child_state;
    ps.cow_parent_base = new.cow_parent_base;
    ps.cow_ns_parent_base = new.cow_ns_parent_base;
    ps.ia32 = u64::from(new.ia32);
}

/// Removes process `tgid` from the traced set. Its slot is zeroed word by word and then
/// freed (`owner` last), so that the next claim finds it all zeros. A 32-bit process leaves
/// `ia32_syscalls::LIVE`.
#[inline(always)]
pub fn remove_proc(tgid: u32) {
    if let Some(slot) = owned_slot(tgid) {
        // SAFETY: the slot of a traced process.
        set_ia32(unsafe { &mut *slot }, false);
        let words = slot.cast::<u64>();
        const WORDS: usize = core::mem::size_of::<ProcState>() / 8;
        // Word 0 is `owner`: it is freed last.
        for i in 1..WORDS {
            // SAFETY: inside the slot's value (`ProcState` is a multiple of 8 bytes).
            unsafe { core::ptr::write_volatile(words.add(i), 0) };
        }
        // SAFETY: as above.
        unsafe { core::ptr::write_volatile(words, 0) };
        return;
    }
    if active(active::SPILLED) == 0 {
        return;
    }
    if let Some(p) = PROCS_SPILL.get_ptr_mut(tgid) {
        // SAFETY: the map value of a traced process, before it is removed.
        set_ia32(unsafe { &mut *p }, false);
    }
    if PROCS_SPILL.remove(tgid).is_ok() {
        active_add(active::SPILLED, -1);
    }
}

/// The u64 at kernel address `addr`, through `bpf_probe_read_kernel`: 0 where it cannot be
/// read. For a walk of pointers the verifier does not type (a `mount` reached from the
/// `vfsmount` inside it), where `BtfPtr` cannot go. No branch on the helper's result (it
/// zeroes the destination when it fails): a branch would give the verifier two states for
/// each read, a known 0 and an unknown value, and a walk of a few dozen reads too many.
#[inline(always)]
pub fn kernel_u64(addr: u64) -> u64 {
    let mut value = 0u64;
    // SAFETY: the helper validates the address and writes 8 bytes into `value`.
    unsafe {
        generated::bpf_probe_read_kernel(
            (&raw mut value).cast(),
            8,
            addr as *const core::ffi::c_void,
        )
    };
    value
}

/// A kernel pointer whose type the verifier knows: a BTF tracepoint's `pt_regs *`,
/// `task_struct *` or `linux_binprm *` argument, the current task from
/// `bpf_get_current_task_btf`, or a pointer field loaded through one. Its fields are plain loads, where a raw pointer needs a
/// `bpf_probe_read_kernel` call for each. Offsets come from `KERNEL_LAYOUT`, a frozen
/// read-only global, which the verifier reads as constants, or from `regs`: it refuses a
/// variable offset into a typed pointer.
#[derive(Clone, Copy)]
pub struct BtfPtr(*const u8);

impl BtfPtr {
    #[inline(always)]
    pub fn new(ptr: *const u8) -> Self {
        Self(ptr)
    }

    /// The current task (a helper only tracing programs such as BTF tracepoints may call).
    #[inline(always)]
    pub fn current_task() -> Self {
        // SAFETY: helper without preconditions.
        Self(unsafe { aya_ebpf::helpers::generated::bpf_get_current_task_btf() }.cast())
    }

    #[inline(always)]
    pub fn is_null(self) -> bool {
        self.0.is_null()
    }

    /// The pointer itself, for a helper that reads through it.
    #[inline(always)]
    pub fn raw(self) -> *const u8 {
        self.0
    }

    /// The u32 field at byte `offset`.
    #[inline(always)]
    pub fn u32_at(self, offset: u32) -> u32 {
        // SAFETY: a field of the pointed-to struct; the verifier checks the offset against
        // its BTF and makes the load one that cannot fault (a bad pointer reads 0).
        unsafe { core::ptr::read_volatile(self.0.add(offset as usize).cast::<u32>()) }
    }

    /// The u64 field at byte `offset`.
    #[inline(always)]
    pub fn u64_at(self, offset: u32) -> u64 {
        // SAFETY: as in `u32_at`.
        unsafe { core::ptr::read_volatile(self.0.add(offset as usize).cast::<u64>()) }
    }

    /// The pointer field at byte `offset`, typed as its BTF member is.
    #[inline(always)]
    pub fn ptr_at(self, offset: u32) -> Self {
        // SAFETY: as in `u32_at`.
        Self(unsafe { core::ptr::read_volatile(self.0.add(offset as usize).cast::<*const u8>()) })
    }

    /// A task's `comm` (16 bytes, NUL-padded by the kernel) as two 8-byte loads: what
    /// `bpf_get_current_comm` returns, without its string copy and padding.
    #[inline(always)]
    pub fn comm(self) -> [u64; 2] {
        let at = kernel_layout!(task_comm);
        [self.u64_at(at), self.u64_at(at + 8)]
    }
}

/// Writes `comm` (from `BtfPtr::comm`) into a record's 16-byte comm field, which must be
/// 8-byte aligned in an 8-byte aligned record (checked for each record where it is used).
#[inline(always)]
pub fn put_comm(field: &mut [u8; 16], comm: [u64; 2]) {
    let words = field.as_mut_ptr().cast::<u64>();
    // SAFETY: the callers' fields are 8-byte aligned (const assertions beside them).
    unsafe {
        core::ptr::write_volatile(words, comm[0]);
        core::ptr::write_volatile(words.add(1), comm[1]);
    }
}

/// x86_64 `struct pt_regs` offsets (stable ABI).
pub mod regs {
    pub const BX: u32 = 40;
    pub const CX: u32 = 88;
    pub const DX: u32 = 96;
    pub const SI: u32 = 104;
    pub const DI: u32 = 112;
    pub const ORIG_AX: u32 = 120;
}
