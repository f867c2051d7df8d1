//! How a process (or thread) was created, from the syscall and its clone flags.
use forkprof_common::{SpawnRecord, clone_flags, nr};
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// clone without CLONE_VM, or fork(2).
    Fork,
    /// The vfork(2) syscall.
    Vfork,
    /// clone/clone3 with CLONE_VM|CLONE_VFORK (glibc's posix_spawn).
    PosixSpawn,
    /// clone3 without CLONE_VM (a fork done through clone3).
    Clone3,
    /// clone with CLONE_VM but neither CLONE_VFORK nor CLONE_THREAD.
    Clone,
    /// CLONE_THREAD: a thread, never counted as a process.
    Thread,
    /// Not seen: the root of a `run`, or a process that existed before tracing began.
    Unknown,
}

/// What one fork-family syscall made, as the trace and the live view count it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spawned {
    /// The syscall failed.
    Failed,
    /// A thread, never counted as a process.
    Thread,
    /// A process, created this way.
    Process(Method),
    /// A process or thread that the kernel did not see created: the syscall was in flight
    /// when tracing began, so task_newtask was missed, and the record names the parent where
    /// the child would be. Neither a process of the trace nor a thread; counted apart.
    ChildUnseen,
}

impl Method {
    /// Every method, in the order the report lists them.
    pub const ALL: [Method; 7] = [
        Self::Fork,
        Self::Vfork,
        Self::PosixSpawn,
        Self::Clone3,
        Self::Clone,
        Self::Thread,
        Self::Unknown,
    ];
    /// The ways a syscall can create a process (what `top` and `monitor` count per method).
    pub const PROCESS_SPAWNS: [Method; 5] = [
        Self::Fork,
        Self::Vfork,
        Self::PosixSpawn,
        Self::Clone3,
        Self::Clone,
    ];

    /// What a spawn record made, from its syscall, clone flags and errno (0: success). The
    /// kernel names the new process in `hdr.proc`; a record that names the parent there
    /// without being a thread's never saw its child (`Spawned::ChildUnseen`).
    pub fn spawned(r: &SpawnRecord) -> Spawned {
        match Self::classify(r.syscall, r.clone_flags) {
            _ if r.errno != 0 => Spawned::Failed,
            Self::Thread => Spawned::Thread,
            _ if r.hdr.proc == r.parent => Spawned::ChildUnseen,
            method => Spawned::Process(method),
        }
    }

    pub fn classify(syscall: u32, flags: u64) -> Self {
        use clone_flags::*;
        if flags & CLONE_THREAD != 0 {
            return Self::Thread;
        }
        let vm_vfork = CLONE_VM | CLONE_VFORK;
        match i64::from(syscall) {
            nr::VFORK => Self::Vfork,
            nr::FORK => Self::Fork,
            nr::CLONE | nr::CLONE3 if flags & vm_vfork == vm_vfork => Self::PosixSpawn,
            nr::CLONE if flags & CLONE_VM == 0 => Self::Fork,
            nr::CLONE3 if flags & CLONE_VM == 0 => Self::Clone3,
            _ => Self::Clone,
        }
    }

    /// Its place in `ALL`.
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Fork => "fork",
            Self::Vfork => "vfork",
            Self::PosixSpawn => "posix_spawn",
            Self::Clone3 => "clone3",
            Self::Clone => "clone",
            Self::Thread => "thread",
            Self::Unknown => "unknown",
        }
    }

    /// Whether the child gets a copy of the parent's address space (page tables, COW).
    pub fn copies_address_space(self) -> bool {
        matches!(self, Self::Fork | Self::Clone3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use forkprof_common::clone_flags::*;

    const SIGCHLD: u64 = 17;

    #[test]
    fn index_is_the_place_in_all() {
        for (i, m) in Method::ALL.iter().enumerate() {
            assert_eq!(m.index(), i, "{m:?}");
        }
    }

    #[test]
    fn classifies_glibc_calls() {
        // glibc 2.36: fork() is clone(SIGCHLD|CLONE_CHILD_*), posix_spawn is clone3(VM|VFORK).
        assert_eq!(Method::classify(56, SIGCHLD | 0x0120_0000), Method::Fork);
        assert_eq!(Method::classify(57, SIGCHLD), Method::Fork);
        assert_eq!(
            Method::classify(58, CLONE_VM | CLONE_VFORK | SIGCHLD),
            Method::Vfork
        );
        assert_eq!(
            Method::classify(435, CLONE_VM | CLONE_VFORK),
            Method::PosixSpawn
        );
        assert_eq!(
            Method::classify(56, CLONE_VM | CLONE_VFORK | SIGCHLD),
            Method::PosixSpawn
        );
        assert_eq!(Method::classify(435, SIGCHLD), Method::Clone3);
        assert_eq!(
            Method::classify(435, CLONE_VM | CLONE_THREAD | 0x3d0f00),
            Method::Thread
        );
        assert_eq!(Method::classify(56, CLONE_VM | SIGCHLD), Method::Clone);
    }
}
