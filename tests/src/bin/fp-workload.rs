//! Workloads with known ground truth for forkprof's end-to-end tests. Each subcommand does
//! exactly what it says and prints its own measurements as one JSON line on stdout.
//!
//!   spawn METHOD COUNT [PROGRAM]   METHOD = fork | fork-raw | fork-spin | fork-held | vfork |
//!                                  posix_spawn | posix_spawn-raw | thread | clone-sigusr1 |
//!                                  clone-nosignal (fork by clone(2) with exit signal
//!                                  SIGUSR1, or none); children _exit(0)
//!                                  at once (fork-spin: a bare fork syscall whose child
//!                                  reads the clock first and spins `SPIN_NS`; fork-held: once
//!                                  the parent has read its clock, blocked on a pipe until
//!                                  then, so that no teardown of the child falls in the
//!                                  parent's timing), or exec PROGRAM (posix_spawn and
//!                                  posix_spawn-raw need one).
//!                                  posix_spawn-raw: the clone(CLONE_VM|CLONE_VFORK) at the
//!                                  heart of glibc's posix_spawn, without the wrapper's mmap
//!                                  and munmap of the child's stack and its signal masks.
//!                                  With FP_RSS_MIB=N the parent first touches N MiB.
//!                                  Prints the mean call time and each call's `[pid, ns]`
//!                                  (pid 0 for a thread); fork-spin also each child's own
//!                                  time from its first clock read to its last (`spun`).
//!   mix COUNT PROGRAM              COUNT children each by fork, vfork and posix_spawn, in
//!                                  that order, each exec'ing PROGRAM and waited for
//!   execvp NAME                    execvp(NAME) with the caller's PATH; prints the errno
//!   execv PATH ARG0 [ARGS...]      execv(PATH) with exactly that argv (ARG0 may be empty)
//!   exit CODE                      exit with CODE
//!   kill SIGNAL                    kill itself with SIGNAL
//!   cow PAGES                      fork a child that waits, write PAGES pages in the parent,
//!                                  then let the child exit (copy-on-write ground truth)
//!   storm SECONDS THREADS          THREADS threads each fork+_exit+wait as fast as they can
//!                                  for SECONDS; prints how many processes they created
//!   reuse                          fork a child that execs /bin/true, then (setting
//!                                  kernel.ns_last_pid) one that gets the same pid and execs
//!                                  /bin/false; prints the pid (needs root)
//!   move-in-reuse CGROUP_DIR       as `reuse`, but each child (forked outside the cgroup)
//!                                  is moved into CGROUP_DIR before it execs `/bin/sleep
//!                                  1`, then `/bin/sleep 2`; prints the pid (needs root)
//!   fork-onto PID [CGROUP_DIR]     (setting kernel.ns_last_pid) fork a child that gets pid
//!                                  PID, if no other process took it, and _exits at once
//!                                  (with CGROUP_DIR: is moved there, then execs
//!                                  /bin/true); prints the pid it got (needs root)
//!   exec-threads COUNT PROGRAM     two threads each make COUNT failing execs of
//!                                  /nonexistent/fp-exec-both at once; then a thread loops on
//!                                  failing execs of /nonexistent/fp-exec-race while the main
//!                                  thread execs PROGRAM. Prints `{"failed":2*COUNT}` first
//!   exec-paths DIR PROGRAM         copies PROGRAM to DIR/a/t and DIR/b/t, then, a child
//!                                  each, execs paths that are not absolute: ./t in DIR/a,
//!                                  t and ../a/./t in DIR/b, ./missing in DIR/b (ENOENT),
//!                                  fexecve of DIR/b/t and of a memfd holding PROGRAM,
//!                                  execveat(DIR/a, "t"), /proc/self/exe, and ./t in a
//!                                  directory 40 levels deep (more than the kernel
//!                                  walks: `…/` and the last names). Each exec's argv[0]
//!                                  is fp-path-CASE;
//!                                  prints `{"CASE": [absolute path, errno], ...}`
//!   vfork-killed                   four processes, each killed 100 ms after one of its
//!                                  threads entered vfork's wait for a child that sleeps
//!                                  1 s: a thread other than the main one vforks and the
//!                                  main thread calls exit_group, or execs /bin/true; the
//!                                  main thread vforks and another thread does either.
//!                                  Returns once the children are gone
//!   demo                           a mix of all of the above, for `cargo xtask demo`
use std::ffi::CString;
use std::time::Instant;

fn die(msg: &str) -> ! {
    eprintln!("fp-workload: {msg}");
    std::process::exit(2)
}

fn cstring(s: &str) -> CString {
    CString::new(s).unwrap_or_else(|_| die("NUL in argument"))
}

/// `exec-paths DIR PROGRAM`: each exec in a child of its own, from the directory it needs;
/// prints what each case's binary is (canonical paths, as the workload sees them) and the
/// errno its exec gives.
fn exec_paths(dir: &str, program: &str) -> ! {
    use std::os::unix::ffi::OsStrExt;
    let dir = std::path::Path::new(dir);
    for sub in ["a", "b"] {
        let _ = std::fs::create_dir_all(dir.join(sub));
        std::fs::copy(program, dir.join(sub).join("t"))
            .unwrap_or_else(|e| die(&format!("copy {program}: {e}")));
    }
    // 40 levels: deeper than the kernel walks (30 steps), so the path is its last names.
    let deep: String = (1..=40)
        .map(|i| format!("n{i}"))
        .collect::<Vec<_>>()
        .join("/");
    let deep = format!("deep/{deep}");
    let _ = std::fs::create_dir_all(dir.join(&deep));
    std::fs::copy(program, dir.join(&deep).join("t"))
        .unwrap_or_else(|e| die(&format!("copy {program}: {e}")));
    let deep_shown: String = (11..=40).map(|i| format!("n{i}/")).collect();
    let deep_shown = format!("…/{deep_shown}t");
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|e| die(&format!("{e}")));
    let path = |rel: &str| cstring(dir.join(rel).to_str().unwrap_or_else(|| die("path")));
    let own = std::fs::canonicalize("/proc/self/exe").unwrap_or_else(|e| die(&format!("{e}")));
    // (case, directory to run in, what the exec does, the binary, the exec's errno)
    enum How {
        Execv(&'static str),
        Fexecve(&'static str),
        Execveat(&'static str, &'static str),
        Memfd,
    }
    let cases = [
        ("dot", "a", How::Execv("./t"), "a/t", 0),
        ("bare", "b", How::Execv("t"), "b/t", 0),
        ("up", "b", How::Execv("../a/./t"), "a/t", 0),
        (
            "missing",
            "b",
            How::Execv("./missing"),
            "b/missing",
            libc::ENOENT,
        ),
        ("fexecve", "b", How::Fexecve("b/t"), "b/t", 0),
        ("execveat", "b", How::Execveat("a", "t"), "a/t", 0),
        // A memfd's dentry is in no tree: d_path calls it /memfd:NAME (deleted).
        ("memfd", "b", How::Memfd, "/memfd:fp-memfd", 0),
        ("self", "b", How::Execv("/proc/self/exe"), "", 0),
        ("deep", &deep, How::Execv("./t"), &deep_shown, 0),
    ];
    let mut truth = Vec::new();
    for (case, cwd, how, binary, errno) in cases {
        let arg0 = cstring(&format!("fp-path-{case}"));
        // The workload itself, re-run by /proc/self/exe, only exits.
        let (exit, zero) = (cstring("exit"), cstring("0"));
        let argv = [
            arg0.as_ptr(),
            exit.as_ptr(),
            zero.as_ptr(),
            std::ptr::null(),
        ];
        let envp: [*const libc::c_char; 1] = [std::ptr::null()];
        let cwd = path(cwd);
        let binary = if binary.is_empty() {
            own.clone()
        } else if binary.starts_with('…') {
            std::path::PathBuf::from(binary)
        } else {
            dir.join(binary)
        };
        // The memfd, filled before the fork.
        let memfd = if matches!(how, How::Memfd) {
            let name = cstring("fp-memfd");
            // SAFETY: a valid name; the fd is the child's to exec.
            let fd = unsafe { libc::memfd_create(name.as_ptr(), 0) };
            let bytes = std::fs::read(program).unwrap_or_else(|e| die(&format!("{e}")));
            // SAFETY: writes `bytes` to our own fd.
            let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
            if fd < 0 || n != bytes.len() as isize {
                die("memfd_create or write failed");
            }
            fd
        } else {
            -1
        };
        truth.push(format!(
            "{:?}: [{:?}, {errno}]",
            case,
            String::from_utf8_lossy(binary.as_os_str().as_bytes())
        ));
        // Everything the child needs is made before the fork.
        let target = match &how {
            How::Execv(p) => cstring(p),
            How::Fexecve(p) | How::Execveat(p, _) => path(p),
            How::Memfd => cstring(""),
        };
        let name = match &how {
            How::Execveat(_, n) => cstring(n),
            _ => cstring(""),
        };
        // SAFETY: the child only makes syscalls before it execs or exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: valid NUL-terminated strings, argv and (empty) envp.
            unsafe {
                if libc::chdir(cwd.as_ptr()) != 0 {
                    libc::_exit(3);
                }
                match how {
                    How::Execv(_) => {
                        libc::execv(target.as_ptr(), argv.as_ptr());
                    }
                    How::Fexecve(_) => {
                        let fd = libc::open(target.as_ptr(), libc::O_RDONLY);
                        libc::fexecve(fd, argv.as_ptr(), envp.as_ptr());
                    }
                    How::Memfd => {
                        libc::fexecve(memfd, argv.as_ptr(), envp.as_ptr());
                    }
                    How::Execveat(..) => {
                        let fd = libc::open(target.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY);
                        libc::syscall(
                            libc::SYS_execveat,
                            fd,
                            name.as_ptr(),
                            argv.as_ptr(),
                            envp.as_ptr(),
                            0,
                        );
                    }
                }
                libc::_exit(if *libc::__errno_location() == errno {
                    0
                } else {
                    4
                });
            }
        }
        if pid < 0 {
            die("fork failed");
        }
        if memfd >= 0 {
            // SAFETY: our own fd, no longer needed here.
            unsafe { libc::close(memfd) };
        }
        let mut status = 0;
        // SAFETY: plain syscall with a valid out-pointer.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
            die(&format!("case {case}: child status {status:#x}"));
        }
    }
    println!("{{{}}}", truth.join(", "));
    std::process::exit(0)
}

/// Makes `pid` the next pid this pid namespace gives out, if it is free then
/// (`kernel.ns_last_pid`; needs root).
fn next_pid_is(pid: libc::pid_t) {
    if std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string()).is_err() {
        die("cannot write /proc/sys/kernel/ns_last_pid (needs root)");
    }
}

/// `reuse`, `move-in-reuse`: runs `first` in a child, then (setting kernel.ns_last_pid)
/// `second` in one that gets the same pid, each as `fork_exec_after` runs it with `release`;
/// prints the pid once two children had it.
fn reuse(first: &[&str], second: &[&str], release: impl Fn(libc::pid_t)) {
    for _ in 0..500 {
        let pid = fork_exec_after(first, &release);
        next_pid_is(pid);
        if fork_exec_after(second, &release) == pid {
            println!("{{\"pid\":{pid}}}");
            return;
        }
    }
    die("no pid was reused in 500 tries");
}

/// Forks a child that waits until `release` has run in the parent with its pid, then execs
/// `argv` (no environment); waits for it, and returns its pid.
fn fork_exec_after(argv: &[&str], release: impl FnOnce(libc::pid_t)) -> libc::pid_t {
    let args: Vec<CString> = argv.iter().map(|a| cstring(a)).collect();
    let mut ptrs: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    let envp: [*const libc::c_char; 1] = [std::ptr::null()];
    let mut go = [0; 2];
    // SAFETY: plain syscall with a valid out-array.
    if unsafe { libc::pipe(go.as_mut_ptr()) } != 0 {
        die("pipe failed");
    }
    // SAFETY: the child only reads, execs or exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let mut byte = 0u8;
        // SAFETY: in the child; valid buffers.
        unsafe {
            libc::close(go[1]);
            libc::read(go[0], (&raw mut byte).cast(), 1);
            libc::execve(args[0].as_ptr(), ptrs.as_ptr(), envp.as_ptr());
            libc::_exit(127);
        }
    }
    if pid < 0 {
        die("fork failed");
    }
    release(pid);
    // SAFETY: plain syscalls on our pipe; closing it without a write releases the child too.
    unsafe {
        libc::close(go[0]);
        libc::close(go[1]);
    }
    wait_child(pid);
    pid
}

fn wait_child(pid: libc::pid_t) {
    let mut status = 0;
    // SAFETY: plain syscall with a valid out-pointer.
    // __WALL: a clone child whose exit signal is not SIGCHLD is waited for too.
    while unsafe { libc::waitpid(pid, &mut status, libc::__WALL) } < 0 {
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            die("waitpid failed");
        }
    }
}

/// vfork(2), then in the child the syscall `nr` with the arguments `args` and, should it
/// return, _exit(`code`), without ever returning to Rust: the child borrows the parent's
/// stack, so it must not touch it. Written in assembly because a function that returns twice
/// cannot be expressed safely in Rust. The calling thread waits in vfork until the child
/// execs or exits, or until the thread is killed.
///
/// # Safety
/// `args` must be valid for syscall `nr`.
unsafe fn vfork_then(nr: i64, args: [u64; 3], code: i32) -> libc::pid_t {
    let ret: i64;
    // SAFETY: the caller upholds the syscall's requirements; the child path ends in exit.
    // The child starts with the parent's registers as they were at the vfork.
    unsafe {
        std::arch::asm!(
            "mov eax, 58",      // vfork
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "mov rax, r8",      // nr(rdi, rsi, rdx)
            "syscall",
            "mov edi, r9d",
            "mov eax, 60",      // _exit(code)
            "syscall",
            "2:",
            inout("rdi") args[0] => _,
            in("rsi") args[1],
            in("rdx") args[2],
            in("r8") nr,
            in("r9") i64::from(code),
            lateout("rax") ret,
            out("rcx") _,
            out("r11") _,
        );
    }
    ret as libc::pid_t
}

/// vfork(2), then in the child execve(path), or _exit(0) when `path` is null (see
/// `vfork_then`); 127 when the exec fails.
///
/// # Safety
/// `path`, `argv` and `envp` must be valid for execve (or `path` null).
unsafe fn vfork_exec(
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
) -> libc::pid_t {
    // SAFETY: as the caller promises; _exit(0) takes no memory.
    unsafe {
        if path.is_null() {
            vfork_then(libc::SYS_exit, [0; 3], 0)
        } else {
            vfork_then(
                libc::SYS_execve,
                [path as u64, argv as u64, envp as u64],
                127,
            )
        }
    }
}

/// vfork(2), then in the child nanosleep(`ts`) and _exit(0) (see `vfork_then`).
///
/// # Safety
/// `ts` must be valid for nanosleep.
unsafe fn vfork_sleep(ts: *const libc::timespec) -> libc::pid_t {
    // SAFETY: as the caller promises; nanosleep only reads `ts`.
    unsafe { vfork_then(libc::SYS_nanosleep, [ts as u64, 0, 0], 0) }
}

/// A process that is killed while one of its threads waits inside vfork: `main_vforks` picks
/// the thread (the main one, whose fork in flight the kernel keeps in the process's entry,
/// or another, kept by thread id), and `exec` how the other thread kills it (execve of
/// /bin/true, else exit_group). The syscall still returns in the killed thread: its window
/// closes there. Does not return.
fn killed_in_vfork(main_vforks: bool, exec: bool) -> ! {
    static SLEEP: libc::timespec = libc::timespec {
        tv_sec: (forkprof_tests::VFORK_KILLED_CHILD_SLEEP_NS / 1e9) as libc::time_t,
        tv_nsec: 0,
    };
    fn kill_the_process(exec: bool) -> ! {
        // The vforking thread is inside its wait by now.
        std::thread::sleep(std::time::Duration::from_millis(100));
        if exec {
            let p = cstring("/bin/true");
            let argv = [p.as_ptr(), std::ptr::null()];
            let envp: [*const libc::c_char; 1] = [std::ptr::null()];
            // SAFETY: valid NUL-terminated argv and envp.
            unsafe { libc::execve(p.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
            die("execve /bin/true failed");
        }
        // SAFETY: ends every thread of the process.
        unsafe { libc::syscall(libc::SYS_exit_group, 0) };
        unreachable!("exit_group returned")
    }
    fn vfork_until_killed() -> ! {
        // SAFETY: a static timespec.
        unsafe { vfork_sleep(&SLEEP) };
        // Back only if the other thread has not killed the process yet.
        loop {
            std::thread::park();
        }
    }
    if main_vforks {
        std::thread::spawn(move || kill_the_process(exec));
        vfork_until_killed()
    }
    std::thread::spawn(vfork_until_killed);
    kill_the_process(exec)
}

/// fork(2) as a bare syscall whose child exits at once without touching memory, timed on a
/// stack the child does not share (MADV_WIPEONFORK). This is the syscall's own latency, the
/// ground truth for forkprof's `fork`: libc's fork() adds its wrapper, and the parent's
/// first write after it (to its stack) takes a copy-on-write fault.
fn fork_raw(count: u32) -> Vec<(libc::pid_t, u64)> {
    let sp: usize;
    // SAFETY: reads the stack pointer.
    unsafe { std::arch::asm!("mov {}, rsp", out(reg) sp) };
    let top = (sp & !(PAGE - 1)) + PAGE;
    let len = 4 * PAGE;
    // SAFETY: a range of this thread's own stack, below and including the current frame.
    if unsafe { libc::madvise((top - len) as *mut libc::c_void, len, libc::MADV_WIPEONFORK) } != 0 {
        die(&format!(
            "madvise(MADV_WIPEONFORK) failed: {}",
            std::io::Error::last_os_error()
        ));
    }
    let mut times = vec![(0, 0u64); count as usize];
    for slot in times.iter_mut() {
        let t0 = Instant::now();
        let pid: i64;
        // SAFETY: the child runs only the exit syscall, touching no memory.
        unsafe {
            std::arch::asm!(
                "mov eax, 57",
                "syscall",
                "test rax, rax",
                "jnz 2f",
                "xor edi, edi",
                "mov eax, 60",
                "syscall",
                "2:",
                lateout("rax") pid,
                out("rcx") _,
                out("r11") _,
                out("rdi") _,
            );
        }
        *slot = (pid as libc::pid_t, t0.elapsed().as_nanos() as u64);
        if pid < 0 {
            die("fork failed");
        }
        wait_child(pid as libc::pid_t);
    }
    times
}

/// fork(2) as a bare syscall whose child's first instruction after it is a bare
/// clock_gettime(CLOCK_MONOTONIC) syscall, so that the child's own timing starts as close to
/// its return from the fork as user space can: only the fault-in of this code's page comes
/// before (the clock syscall's write to the stack faults after the clock is read). Returns the
/// pid, and in the child that clock (ns). glibc's fork() would run its child path first: some
/// 20 page faults here, before the child could read a clock.
fn fork_clocked() -> (libc::pid_t, u64) {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let pid: i64;
    // SAFETY: fork and clock_gettime as bare syscalls; the child writes only `ts`, its own
    // copy of this frame, and then runs as after libc's fork() in a one-thread process.
    unsafe {
        std::arch::asm!(
            "mov eax, 57",
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "mov eax, 228",
            "mov edi, 1",
            "mov rsi, rdx",
            "syscall",
            "xor eax, eax",
            "2:",
            in("rdx") &mut ts as *mut libc::timespec,
            lateout("rax") pid,
            out("rcx") _,
            out("r11") _,
            out("rdi") _,
            out("rsi") _,
        );
    }
    if pid < 0 {
        die("fork failed");
    }
    (pid as libc::pid_t, timespec_ns(&ts))
}

/// What the child of `posix_spawn_raw` execs.
struct SpawnArgs {
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
}

extern "C" fn spawn_child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the parent's `SpawnArgs`, alive while the parent waits in clone
    // (CLONE_VFORK); the child only execs or exits.
    unsafe {
        let a = &*(arg as *const SpawnArgs);
        libc::execve(a.path, a.argv, a.envp);
        libc::_exit(127)
    }
}

/// `count` × clone(CLONE_VM | CLONE_VFORK | SIGCHLD) + exec, on a stack allocated once: the
/// parent's time per clone call (ns), which spans the child's exec as vfork does.
fn posix_spawn_raw(
    count: u32,
    path: &std::ffi::CString,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
) -> Vec<(libc::pid_t, u64)> {
    let mut stack = vec![0u8; 64 * 1024];
    // SAFETY: one past the end of `stack`, 16-byte aligned below it.
    let top = unsafe { stack.as_mut_ptr().add(stack.len()) } as usize & !15;
    let mut args = SpawnArgs {
        path: path.as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
    };
    let mut times = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let t0 = Instant::now();
        // SAFETY: the child runs `spawn_child` on `stack`, which outlives it; CLONE_VFORK
        // keeps the parent suspended until the child has exec'd or exited.
        let pid = unsafe {
            libc::clone(
                spawn_child,
                top as *mut libc::c_void,
                libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                &mut args as *mut SpawnArgs as *mut libc::c_void,
            )
        };
        times.push((pid, t0.elapsed().as_nanos() as u64));
        if pid < 0 {
            die("clone failed");
        }
        wait_child(pid);
    }
    times
}

/// How long a `fork-spin` child spins before it exits (ns).
const SPIN_NS: u64 = 2_000_000;

/// CLOCK_MONOTONIC in ns, from the vDSO: no syscall.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime into a local.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    timespec_ns(&ts)
}

fn timespec_ns(ts: &libc::timespec) -> u64 {
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One u64 per child, shared with the children (MAP_SHARED), zeroed.
struct Shared {
    ptr: *mut u64,
    len: usize,
}

impl Shared {
    fn new(len: usize) -> Self {
        let bytes = (len.max(1) * 8).next_multiple_of(PAGE);
        // SAFETY: a fresh anonymous mapping.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            die("mmap failed");
        }
        Self {
            ptr: ptr.cast(),
            len,
        }
    }

    fn set(&self, i: usize, v: u64) {
        assert!(i < self.len);
        // SAFETY: in bounds of the mapping; each child writes only its own slot.
        unsafe { self.ptr.add(i).write_volatile(v) }
    }

    fn get(&self, i: usize) -> u64 {
        assert!(i < self.len);
        // SAFETY: in bounds; the child that wrote it has been waited for.
        unsafe { self.ptr.add(i).read_volatile() }
    }
}

/// What `spawn` measured: each child's pid (0 for a thread) and the parent's own time for its
/// spawn call (ns); for fork-spin, each child's own time from its first clock read to its last.
struct Spawned {
    calls: Vec<(libc::pid_t, u64)>,
    spun: Vec<u64>,
}

/// Spawns `count` children with `method`.
fn spawn(method: &str, count: u32, program: Option<&str>) -> Spawned {
    let spun = (method == "fork-spin").then(|| Shared::new(count as usize));
    let prog = program.map(cstring);
    let argv: Vec<*const libc::c_char> = match &prog {
        Some(p) => vec![p.as_ptr(), std::ptr::null()],
        None => vec![std::ptr::null()],
    };
    let envp: [*const libc::c_char; 1] = [std::ptr::null()];
    if method == "fork-raw" {
        return Spawned {
            calls: fork_raw(count),
            spun: Vec::new(),
        };
    }
    if method == "posix_spawn-raw" {
        let p = prog
            .as_ref()
            .unwrap_or_else(|| die("posix_spawn-raw needs a PROGRAM"));
        return Spawned {
            calls: posix_spawn_raw(count, p, &argv, &envp),
            spun: Vec::new(),
        };
    }
    let mut times = Vec::with_capacity(count as usize);
    for i in 0..count as usize {
        // fork-held: the child waits for a byte on this pipe, sent once the parent has read
        // its clock.
        let mut hold = [-1; 2];
        // SAFETY: pipe into a local array.
        if method == "fork-held" && unsafe { libc::pipe(hold.as_mut_ptr()) } != 0 {
            die("pipe failed");
        }
        let t0 = Instant::now();
        let pid = match method {
            // SAFETY: the child only calls async-signal-safe read/execve/_exit.
            "fork" | "fork-held" => unsafe { libc::fork() },
            "fork-spin" => {
                let (pid, t) = fork_clocked();
                if pid == 0 {
                    // The child's own work before it exits: reads of the vDSO clock.
                    // Its slot is written once first, so that its page fault is in the spin.
                    let spun = spun.as_ref().unwrap_or_else(|| die("no slots"));
                    spun.set(i, 0);
                    let mut now = t;
                    while now - t < SPIN_NS {
                        now = monotonic_ns();
                    }
                    spun.set(i, now - t);
                    // SAFETY: in the child: exit at once.
                    unsafe { libc::_exit(0) };
                }
                pid
            }
            // SAFETY: see `vfork_exec`.
            "vfork" => unsafe {
                vfork_exec(
                    prog.as_ref().map_or(std::ptr::null(), |p| p.as_ptr()),
                    argv.as_ptr(),
                    envp.as_ptr(),
                )
            },
            // A fork by clone(2) with another exit signal than SIGCHLD (ignored here), or
            // none: the parent is notified of the exit by that signal, or only woken.
            "clone-sigusr1" | "clone-nosignal" => {
                let signal = if method == "clone-sigusr1" {
                    // SAFETY: sets a disposition; no handler runs.
                    unsafe { libc::signal(libc::SIGUSR1, libc::SIG_IGN) };
                    libc::SIGUSR1
                } else {
                    0
                };
                // SAFETY: clone without CLONE_VM or a stack is fork with another exit
                // signal; the child only calls async-signal-safe execve/_exit below.
                let pid =
                    unsafe { libc::syscall(libc::SYS_clone, signal as libc::c_long, 0, 0, 0, 0) };
                pid as libc::pid_t
            }
            "posix_spawn" => {
                let p = prog
                    .as_ref()
                    .unwrap_or_else(|| die("posix_spawn needs a PROGRAM"));
                let mut pid = 0;
                // SAFETY: all pointers are valid NUL-terminated arrays.
                let rc = unsafe {
                    libc::posix_spawn(
                        &mut pid,
                        p.as_ptr(),
                        std::ptr::null(),
                        std::ptr::null(),
                        argv.as_ptr() as *const *mut libc::c_char,
                        envp.as_ptr() as *const *mut libc::c_char,
                    )
                };
                if rc != 0 {
                    die("posix_spawn failed");
                }
                pid
            }
            "thread" => {
                std::thread::spawn(|| {})
                    .join()
                    .unwrap_or_else(|_| die("thread panicked"));
                times.push((0, t0.elapsed().as_nanos() as u64));
                continue;
            }
            other => die(&format!("unknown method {other}")),
        };
        if pid == 0 {
            if method == "fork-held" {
                let mut b = 0u8;
                // SAFETY: in the child: a read into a local, async-signal-safe.
                unsafe { libc::read(hold[0], (&mut b as *mut u8).cast(), 1) };
            }
            // SAFETY: in the child: exec or exit at once.
            unsafe {
                if let Some(p) = &prog {
                    libc::execve(p.as_ptr(), argv.as_ptr(), envp.as_ptr());
                }
                libc::_exit(0);
            }
        }
        if pid < 0 {
            die("fork failed");
        }
        times.push((pid, t0.elapsed().as_nanos() as u64));
        if method == "fork-held" {
            // SAFETY: plain syscalls on the pipe's own fds.
            unsafe {
                libc::write(hold[1], [1u8].as_ptr().cast(), 1);
                libc::close(hold[0]);
                libc::close(hold[1]);
            }
        }
        wait_child(pid);
    }
    let spun = spun.map_or(Vec::new(), |spun| {
        (0..count as usize).map(|i| spun.get(i)).collect()
    });
    Spawned { calls: times, spun }
}

const PAGE: usize = 4096;

/// An anonymous private region of `pages` pages, without transparent huge pages, touched.
fn touched_region(pages: usize) -> &'static mut [u8] {
    // SAFETY: a fresh anonymous mapping, checked for failure, never unmapped.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            pages * PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            die("mmap failed");
        }
        libc::madvise(p, pages * PAGE, libc::MADV_NOHUGEPAGE);
        let region = std::slice::from_raw_parts_mut(p as *mut u8, pages * PAGE);
        for i in 0..pages {
            region[i * PAGE] = 1;
        }
        region
    }
}

/// Forks a child that blocks on a pipe; the parent writes one byte in each of `pages`
/// pages (each a copy-on-write fault), then releases the child and reaps it.
fn cow(pages: usize) {
    let region = touched_region(pages);
    let mut fds = [0; 2];
    // SAFETY: plain syscalls on owned fds.
    unsafe {
        if libc::pipe(fds.as_mut_ptr()) != 0 {
            die("pipe failed");
        }
        let pid = libc::fork();
        if pid == 0 {
            let mut b = 0u8;
            libc::close(fds[1]);
            libc::read(fds[0], (&mut b as *mut u8).cast(), 1);
            libc::_exit(0);
        }
        for i in 0..pages {
            std::ptr::write_volatile(&mut region[i * PAGE], 2);
        }
        libc::close(fds[1]);
        wait_child(pid);
    }
    println!("{{\"cow_pages\":{pages}}}");
}

fn main() {
    if let Some(mib) = std::env::var("FP_RSS_MIB")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        touched_region(mib * 256);
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| {
        args.get(i)
            .map(String::as_str)
            .unwrap_or_else(|| die("missing argument"))
    };
    match arg(0) {
        "spawn" => {
            let count: u32 = arg(2).parse().unwrap_or_else(|_| die("bad COUNT"));
            let Spawned { calls: times, spun } =
                spawn(arg(1), count, args.get(3).map(String::as_str));
            let total: u64 = times.iter().map(|&(_, ns)| ns).sum();
            let calls: Vec<String> = times
                .iter()
                .map(|(pid, ns)| format!("[{pid},{ns}]"))
                .collect();
            let spun = if spun.is_empty() {
                String::new()
            } else {
                let ns: Vec<String> = spun.iter().map(u64::to_string).collect();
                format!(",\"spun\":[{}]", ns.join(","))
            };
            println!(
                "{{\"method\":\"{}\",\"count\":{},\"mean_call_ns\":{},\"calls\":[{}]{spun}}}",
                arg(1),
                count,
                total / u64::from(count.max(1)),
                calls.join(",")
            );
        }
        "mix" => {
            let count: u32 = arg(1).parse().unwrap_or_else(|_| die("bad COUNT"));
            for method in ["fork", "vfork", "posix_spawn"] {
                spawn(method, count, Some(arg(2)));
            }
            println!("{{\"mix\":{count}}}");
        }
        "execvp" => {
            let name = cstring(arg(1));
            let argv = [name.as_ptr(), std::ptr::null()];
            // SAFETY: valid NUL-terminated argv.
            unsafe { libc::execvp(name.as_ptr(), argv.as_ptr()) };
            let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            println!("{{\"errno\":{errno}}}");
            std::process::exit(127);
        }
        "storm" => {
            let secs: f64 = arg(1).parse().unwrap_or_else(|_| die("bad SECONDS"));
            let threads: usize = arg(2).parse().unwrap_or_else(|_| die("bad THREADS"));
            let deadline = Instant::now() + std::time::Duration::from_secs_f64(secs);
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    std::thread::spawn(move || {
                        let mut n = 0u64;
                        while Instant::now() < deadline {
                            // SAFETY: the child exits at once.
                            let pid = unsafe { libc::fork() };
                            if pid == 0 {
                                // SAFETY: in the child.
                                unsafe { libc::_exit(0) };
                            }
                            if pid < 0 {
                                continue;
                            }
                            wait_child(pid);
                            n += 1;
                        }
                        n
                    })
                })
                .collect();
            let total: u64 = workers.into_iter().map(|w| w.join().unwrap_or(0)).sum();
            println!("{{\"processes\":{total},\"threads\":{threads}}}");
        }
        "reuse" => reuse(&["/bin/true"], &["/bin/false"], |_| {}),
        "move-in-reuse" => {
            let procs = format!("{}/cgroup.procs", arg(1));
            reuse(&["/bin/sleep", "1"], &["/bin/sleep", "2"], |pid| {
                if std::fs::write(&procs, pid.to_string()).is_err() {
                    die("cannot write cgroup.procs");
                }
            });
        }
        "fork-onto" => {
            let want: libc::pid_t = arg(1).parse().unwrap_or_else(|_| die("bad PID"));
            next_pid_is(want);
            let pid = match args.get(2) {
                Some(dir) => {
                    let procs = format!("{dir}/cgroup.procs");
                    fork_exec_after(&["/bin/true"], |pid| {
                        if std::fs::write(&procs, pid.to_string()).is_err() {
                            die("cannot write cgroup.procs");
                        }
                    })
                }
                None => {
                    // SAFETY: the child only exits.
                    let pid = unsafe { libc::fork() };
                    if pid == 0 {
                        // SAFETY: in the child.
                        unsafe { libc::_exit(0) };
                    }
                    if pid < 0 {
                        die("fork failed");
                    }
                    wait_child(pid);
                    pid
                }
            };
            println!("{{\"pid\":{pid}}}");
        }
        "cow" => cow(arg(1).parse().unwrap_or_else(|_| die("bad PAGES"))),
        "execv" => {
            let strings: Vec<CString> = args[2..].iter().map(|a| cstring(a)).collect();
            let mut argv: Vec<*const libc::c_char> = strings.iter().map(|a| a.as_ptr()).collect();
            argv.push(std::ptr::null());
            let path = cstring(arg(1));
            // SAFETY: valid NUL-terminated argv.
            unsafe { libc::execv(path.as_ptr(), argv.as_ptr()) };
            die("execv failed");
        }
        "exec-paths" => exec_paths(arg(1), arg(2)),
        "exit" => std::process::exit(arg(1).parse().unwrap_or_else(|_| die("bad CODE"))),
        "vfork-killed" => {
            for (main_vforks, exec) in [(false, false), (false, true), (true, false), (true, true)]
            {
                // SAFETY: the child runs one scenario and ends in exit or exec.
                let pid = unsafe { libc::fork() };
                if pid == 0 {
                    killed_in_vfork(main_vforks, exec);
                }
                wait_child(pid);
            }
            // The vfork children sleep on, reparented: let them exit.
            std::thread::sleep(std::time::Duration::from_nanos(
                forkprof_tests::VFORK_KILLED_CHILD_SLEEP_NS as u64 + 100_000_000,
            ));
        }
        "kill" => {
            let sig: i32 = arg(1).parse().unwrap_or_else(|_| die("bad SIGNAL"));
            // SAFETY: plain syscalls.
            unsafe { libc::kill(libc::getpid(), sig) };
            die("still alive after kill");
        }
        "exec-threads" => {
            let count: u32 = arg(1).parse().unwrap_or_else(|_| die("bad COUNT"));
            let program = cstring(arg(2));
            // Failing execs (ENOENT) of `path`, `n` of them or until told to stop; counted.
            fn fail(path: &'static str, n: u32, done: &std::sync::atomic::AtomicU32) {
                let p = cstring(path);
                let argv = [p.as_ptr(), std::ptr::null()];
                let envp: [*const libc::c_char; 1] = [std::ptr::null()];
                for _ in 0..n {
                    // SAFETY: valid NUL-terminated argv and envp; the exec fails.
                    unsafe { libc::execve(p.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
                    done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            }
            static BOTH: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            static RACE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let both: Vec<_> = (0..2)
                .map(|_| {
                    std::thread::spawn(move || fail("/nonexistent/fp-exec-both", count, &BOTH))
                })
                .collect();
            for t in both {
                t.join().unwrap_or_else(|_| die("thread panicked"));
            }
            println!(
                "{{\"failed\":{}}}",
                BOTH.load(std::sync::atomic::Ordering::SeqCst)
            );
            std::thread::spawn(|| fail("/nonexistent/fp-exec-race", u32::MAX, &RACE));
            while RACE.load(std::sync::atomic::Ordering::SeqCst) < 10 {
                std::hint::spin_loop();
            }
            let argv = [program.as_ptr(), std::ptr::null()];
            let envp: [*const libc::c_char; 1] = [std::ptr::null()];
            // SAFETY: valid NUL-terminated argv and envp.
            unsafe { libc::execve(program.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
            die("exec of PROGRAM failed");
        }
        "demo" => {
            spawn("fork", 20, Some("/bin/true"));
            spawn("vfork", 20, Some("/bin/true"));
            spawn("posix_spawn", 20, Some("/bin/true"));
            spawn("fork", 10, None);
            spawn("thread", 5, None);
            for _ in 0..5 {
                let _ = std::process::Command::new("sh")
                    .args(["-c", "exit 0"])
                    .status();
            }
            let _ = std::process::Command::new("forkprof-demo-no-such-program").status();
        }
        other => die(&format!("unknown workload {other}")),
    }
}
