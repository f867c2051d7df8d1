//! Names for the cgroup v2 ids the kernel programs record (`bpf_get_current_cgroup_id`).
//! An id is the inode number of the cgroup's directory in the cgroup2 mount, so the names
//! come from walking that mount: once at start, and again when an id is not known yet (a
//! cgroup created since). A cgroup removed before forkprof saw it has no name; one removed
//! later keeps the path it was seen with.
use std::collections::HashMap;
use std::os::fd::{AsRawFd as _, RawFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a cgroup removed from the hierarchy is still named (`CgroupNames::removed`):
/// far longer than a record takes to reach the agent.
const REMOVED_KEPT: Duration = Duration::from_secs(10);

/// Walks of the hierarchy are at most this frequent (a storm of ids from one new cgroup
/// costs one walk).
const RESCAN_EVERY: Duration = Duration::from_millis(20);

#[derive(Debug, Default)]
pub struct CgroupNames {
    /// The cgroup2 mount point, if the machine has one.
    root: Option<PathBuf>,
    /// The hierarchy at the last walk.
    names: HashMap<u64, Vec<u8>>,
    /// Cgroups a walk found gone, with when: still named for `removed_kept`, for the
    /// records of their last processes that come after, then forgotten, so that a `monitor`
    /// on a host that keeps making cgroups (a CI runner's job each, a cron job's scope
    /// each) holds the hierarchy of now, not of all time.
    removed: HashMap<u64, (Vec<u8>, Instant)>,
    removed_kept: Duration,
    scanned: Option<Instant>,
    /// Ids asked for and not found yet.
    pending: Vec<u64>,
}

/// The cgroup2 mount point in a mountinfo text (`/sys/fs/cgroup` on a pure v2 machine,
/// `/sys/fs/cgroup/unified` on a hybrid one); None without one.
pub fn cgroup2_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let fstype = right.split_whitespace().next()?;
        if fstype != "cgroup2" {
            return None;
        }
        let mount_point = left.split_whitespace().nth(4)?;
        Some(PathBuf::from(crate::model::mounts::unescape(mount_point)))
    })
}

/// Every directory under `root`, by inode number, as its path below `root` ("/" for root).
fn walk(root: &Path, names: &mut HashMap<u64, Vec<u8>>) {
    let mut stack = vec![(root.to_path_buf(), b"/".to_vec())];
    while let Some((dir, name)) = stack.pop() {
        let Ok(meta) = std::fs::metadata(&dir) else {
            continue;
        };
        names.insert(meta.ino(), name.clone());
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                let mut child = name.clone();
                if child != b"/" {
                    child.push(b'/');
                }
                child.extend_from_slice(e.file_name().as_encoded_bytes());
                stack.push((e.path(), child));
            }
        }
    }
}

impl CgroupNames {
    /// The names of this machine's cgroup2 hierarchy as it is now.
    pub fn new() -> Self {
        match std::fs::read_to_string("/proc/self/mountinfo")
            .ok()
            .and_then(|m| cgroup2_mount(&m))
        {
            Some(root) => Self::under(root),
            None => Self::default(),
        }
    }

    /// The names of the hierarchy under `root` (a cgroup2 mount, or any directory in tests).
    fn under(root: PathBuf) -> Self {
        let mut names = Self {
            root: Some(root),
            removed_kept: REMOVED_KEPT,
            ..Self::default()
        };
        names.rescan();
        names
    }

    fn rescan(&mut self) {
        let now = Instant::now();
        if let Some(root) = &self.root {
            let before = std::mem::take(&mut self.names);
            walk(root, &mut self.names);
            let (names, kept) = (&self.names, self.removed_kept);
            self.removed
                .retain(|id, (_, at)| now.duration_since(*at) < kept && !names.contains_key(id));
            for (id, path) in before {
                if !self.names.contains_key(&id) {
                    self.removed.entry(id).or_insert((path, now));
                }
            }
        }
        self.scanned = Some(now);
    }

    /// The path of `id` at the last walk, or before it if it was removed lately.
    fn named(&self, id: u64) -> Option<&[u8]> {
        self.names
            .get(&id)
            .or_else(|| self.removed.get(&id).map(|(path, _)| path))
            .map(Vec::as_slice)
    }

    /// The path of cgroup `id`; a miss walks the hierarchy again unless it was walked
    /// moments ago, in which case the id waits in `pending` (see `settle`).
    pub fn get(&mut self, id: u64) -> Option<&[u8]> {
        if id == 0 || self.root.is_none() {
            return None;
        }
        if self.named(id).is_none() {
            let recent = self.scanned.is_some_and(|t| t.elapsed() < RESCAN_EVERY);
            if recent {
                if !self.pending.contains(&id) {
                    self.pending.push(id);
                }
                return None;
            }
            self.rescan();
        }
        self.named(id)
    }

    /// The pending ids that have a name now (one more walk if any are pending).
    pub fn settle(&mut self) -> Vec<(u64, Vec<u8>)> {
        if self.pending.is_empty() {
            return Vec::new();
        }
        self.rescan();
        let pending = std::mem::take(&mut self.pending);
        pending
            .into_iter()
            .filter_map(|id| self.named(id).map(|p| (id, p.to_vec())))
            .collect()
    }
}

/// How often a running command checks that its `--cgroup` still exists.
const SCOPE_CHECK_EVERY: Duration = Duration::from_millis(250);

/// The cgroup v2 subtree that `record/top/monitor --cgroup PATH` trace: the kernel programs
/// follow only its processes (the rule is in the eBPF crate's `maps::in_scope`).
#[derive(Debug)]
pub struct CgroupScope {
    /// As reports show it: below the cgroup2 mount, `/system.slice/nginx.service`.
    pub path: String,
    /// The directory, as given to the kernel (its fd goes into map `CGROUP_SCOPE`).
    dir: std::fs::File,
    full: PathBuf,
    /// The cgroup id: the directory's inode number.
    id: u64,
}

/// Why a `--cgroup PATH` cannot be traced (bad input: exit 2, before anything is loaded).
#[derive(Debug, PartialEq, Eq)]
pub struct BadScope(pub String);

impl std::fmt::Display for BadScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// `PATH` of `--cgroup PATH` below the cgroup2 mount `mount`: the path as reports show it
/// (`/system.slice/x`), or the absolute one under the mount (`/sys/fs/cgroup/system.slice/x`).
/// Returns the path below the mount, without `.` or `..`.
fn below_mount(mount: &Path, arg: &str) -> Result<PathBuf, BadScope> {
    let given = Path::new(arg);
    let rel = given.strip_prefix(mount).unwrap_or(given);
    let mut out = PathBuf::new();
    for c in rel.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(part) => out.push(part),
            Component::ParentDir | Component::Prefix(_) => {
                return Err(BadScope(format!(
                    "--cgroup {arg}: give the path without \"..\" (as reports show it, \
                     e.g. /system.slice/nginx.service)"
                )));
            }
        }
    }
    Ok(out)
}

impl CgroupScope {
    /// The scope of `--cgroup ARG`, if given. Refuses (with the message to print) a machine
    /// without a cgroup v2 hierarchy and a path that is not a cgroup there.
    pub fn from_arg(arg: Option<&str>) -> Result<Option<Self>, BadScope> {
        let Some(arg) = arg else {
            return Ok(None);
        };
        let mount = std::fs::read_to_string("/proc/self/mountinfo")
            .ok()
            .and_then(|m| cgroup2_mount(&m));
        Self::resolve(mount.as_deref(), arg).map(Some)
    }

    fn resolve(mount: Option<&Path>, arg: &str) -> Result<Self, BadScope> {
        let Some(mount) = mount else {
            return Err(BadScope(format!(
                "--cgroup {arg}: this machine has no cgroup v2 hierarchy mounted (cgroup v1 \
                 only), and forkprof scopes by cgroup v2; mount one (mount -t cgroup2 none \
                 /sys/fs/cgroup/unified) or trace without --cgroup"
            )));
        };
        let rel = below_mount(mount, arg)?;
        let full = mount.join(&rel);
        // A cgroup directory has `cgroup.procs`; a plain directory or file is not one.
        if !full.join("cgroup.procs").is_file() {
            return Err(BadScope(format!(
                "--cgroup {arg}: no such cgroup ({} is not a cgroup v2 directory; paths are \
                 as reports show them, below {}, e.g. /system.slice/nginx.service)",
                full.display(),
                mount.display()
            )));
        }
        let dir = std::fs::File::open(&full)
            .map_err(|e| BadScope(format!("--cgroup {arg}: opening {}: {e}", full.display())))?;
        let id = dir
            .metadata()
            .map_err(|e| BadScope(format!("--cgroup {arg}: {e}")))?
            .ino();
        let path = format!("/{}", rel.display());
        Ok(Self {
            path,
            dir,
            full,
            id,
        })
    }

    /// The open directory, for the kernel's `CGROUP_SCOPE` map.
    pub fn fd(&self) -> RawFd {
        self.dir.as_raw_fd()
    }

    /// Its directory in the cgroup2 mount.
    pub fn dir(&self) -> &Path {
        &self.full
    }

    /// The cgroup id (its directory's inode number), as records carry it.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Whether the cgroup was removed (or removed and made again: a new cgroup with a new
    /// id, which the kernel programs do not follow).
    pub fn is_gone(&self) -> bool {
        std::fs::metadata(&self.full).map_or(true, |m| m.ino() != self.id)
    }

    /// Completes once the cgroup is gone (checked every `SCOPE_CHECK_EVERY`).
    pub async fn removed(&self) {
        while !self.is_gone() {
            tokio::time::sleep(SCOPE_CHECK_EVERY).await;
        }
    }

    /// Watches `cgroup.events`, which the kernel marks modified when the cgroup gains its
    /// first process or loses its last one.
    pub fn watch_populated(&self) -> std::io::Result<PopulatedWatch> {
        PopulatedWatch::new(&self.full.join("cgroup.events"))
    }

    /// What a command says on stderr when the cgroup is gone, before `what_now`.
    pub fn gone_message(&self, what_now: &str) -> String {
        format!(
            "forkprof: cgroup {} was removed during the run, so nothing in it can spawn any \
             more (a cgroup made again at that path is a new cgroup, not followed); {what_now}",
            self.path
        )
    }
}

/// The processes in cgroup directory `dir` and the cgroups below it now (unreadable parts
/// are left out).
pub fn processes_below(dir: &Path) -> Vec<u32> {
    let mut pids: Vec<u32> = std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            pids.extend(processes_below(&entry.path()));
        }
    }
    pids
}

/// Whether `cgroup.events` text says `populated 1`.
fn populated(events: &str) -> bool {
    events
        .lines()
        .any(|l| l.split_whitespace().eq(["populated", "1"]))
}

/// An inotify watch on a cgroup's `cgroup.events`, readable in the runtime.
/// The root cgroup has no `cgroup.events`, and always has processes: its watch has no fd.
pub struct PopulatedWatch {
    fd: Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>>,
    events: PathBuf,
}

impl PopulatedWatch {
    fn new(events: &Path) -> std::io::Result<Self> {
        use std::os::fd::{FromRawFd as _, OwnedFd};
        if !events.exists() {
            return Ok(Self {
                fd: None,
                events: events.to_path_buf(),
            });
        }
        use std::os::unix::ffi::OsStrExt as _;
        // SAFETY: no pointer arguments.
        let raw = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a new fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let path = std::ffi::CString::new(events.as_os_str().as_bytes())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        // SAFETY: a valid fd and a NUL-terminated path.
        if unsafe { libc::inotify_add_watch(fd.as_raw_fd(), path.as_ptr(), libc::IN_MODIFY) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the AsyncFd owns the OwnedFd, which stays open, the same fd, until dropped.
        let fd = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
        }?;
        Ok(Self {
            fd: Some(fd),
            events: events.to_path_buf(),
        })
    }

    /// Whether the cgroup has a process now (the root always has).
    pub fn is_populated(&self) -> bool {
        self.fd.is_none() || std::fs::read_to_string(&self.events).is_ok_and(|e| populated(&e))
    }

    /// Completes once the cgroup has a process (at once if it has one now). The watch was
    /// set before the first read, so no change is missed between the two.
    pub async fn populated(&mut self) -> std::io::Result<()> {
        loop {
            if self.is_populated() {
                return Ok(());
            }
            self.changed().await?;
        }
    }

    /// Completes at the next change of `cgroup.events`.
    async fn changed(&mut self) -> std::io::Result<()> {
        let Some(fd) = &self.fd else {
            // The root: populated already, so never waited on.
            return std::future::pending().await;
        };
        loop {
            let mut ready = fd.readable().await?;
            let mut buf = [0u8; 1024];
            // SAFETY: reads into a buffer of the length given.
            let n = unsafe {
                libc::read(
                    ready.get_inner().as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                )
            };
            if n > 0 {
                return Ok(());
            }
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::WouldBlock {
                return Err(err);
            }
            ready.clear_ready();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory's inode number: its cgroup id on a cgroup2 mount.
    fn ino(path: &Path) -> u64 {
        std::fs::metadata(path).unwrap().ino()
    }

    #[test]
    fn a_removed_cgroup_is_named_a_while_then_forgotten() {
        let dir = std::env::temp_dir().join(format!("forkprof-names-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (root, gone) = (dir.join("root"), dir.join("gone"));
        std::fs::create_dir_all(root.join("job-1.scope")).unwrap();
        std::fs::create_dir_all(&gone).unwrap();
        // A cgroup's id is never reused; a test directory's inode can be, once freed: a
        // job's directory that ends is moved out of the hierarchy, not removed.
        let end = |job: u32| {
            let name = format!("job-{job}.scope");
            std::fs::rename(root.join(&name), gone.join(&name)).unwrap();
        };
        let mut names = CgroupNames::under(root.clone());
        let first = ino(&root.join("job-1.scope"));
        assert_eq!(names.get(first), Some(&b"/job-1.scope"[..]));
        // The job ends and the next one starts: a miss walks again, and the removed
        // cgroup is still named, for its last records, walk after walk while it is recent.
        end(1);
        for job in 2..5 {
            std::fs::create_dir(root.join(format!("job-{job}.scope"))).unwrap();
            let id = ino(&root.join(format!("job-{job}.scope")));
            names.scanned = None;
            assert_eq!(names.get(id), Some(format!("/job-{job}.scope").as_bytes()));
            assert_eq!(names.get(first), Some(&b"/job-1.scope"[..]));
        }
        // Once it is no longer recent it is forgotten: a thousand jobs leave no more names
        // than the hierarchy of now holds.
        names.removed_kept = Duration::ZERO;
        for job in 5..1005 {
            end(job - 1);
            std::fs::create_dir(root.join(format!("job-{job}.scope"))).unwrap();
            let id = ino(&root.join(format!("job-{job}.scope")));
            names.scanned = None;
            assert_eq!(names.get(id), Some(format!("/job-{job}.scope").as_bytes()));
        }
        assert!(names.names.len() + names.removed.len() <= 6, "{names:?}");
        names.scanned = None;
        assert_eq!(names.get(first), None);
        assert_eq!(names.get(ino(&root)), Some(&b"/"[..]));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn lists_the_processes_of_a_cgroup_and_those_below_it() {
        let dir = std::env::temp_dir().join(format!("forkprof-procs-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("a.service/sub")).unwrap();
        std::fs::write(dir.join("cgroup.procs"), "10\n11\n").unwrap();
        std::fs::write(dir.join("a.service/cgroup.procs"), "").unwrap();
        std::fs::write(dir.join("a.service/sub/cgroup.procs"), "12\n").unwrap();
        let mut pids = processes_below(&dir);
        pids.sort_unstable();
        assert_eq!(pids, [10, 11, 12]);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(processes_below(&dir).is_empty());
    }

    #[test]
    fn reads_populated_from_cgroup_events() {
        assert!(populated("populated 1\nfrozen 0\n"));
        assert!(!populated("populated 0\nfrozen 0\n"));
        assert!(!populated("frozen 1\n"));
        assert!(!populated(""));
    }

    #[test]
    fn finds_the_cgroup2_mount() {
        let hybrid = "\
25 30 0:22 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw
27 25 0:24 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu
";
        assert_eq!(
            cgroup2_mount(hybrid),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        let v2 = "30 1 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(cgroup2_mount(v2), Some(PathBuf::from("/sys/fs/cgroup")));
        assert_eq!(cgroup2_mount("1 0 0:1 / / rw - ext4 /dev/vda rw\n"), None);
        let spaced = "40 1 0:30 / /mnt/cg\\040two rw - cgroup2 none rw\n";
        assert_eq!(cgroup2_mount(spaced), Some(PathBuf::from("/mnt/cg two")));
    }

    #[test]
    fn a_scope_path_is_read_below_the_cgroup2_mount() {
        let mount = Path::new("/sys/fs/cgroup/unified");
        let rel = |arg| below_mount(mount, arg).map(|p| p.display().to_string());
        assert_eq!(
            rel("/system.slice/nginx.service").unwrap(),
            "system.slice/nginx.service"
        );
        assert_eq!(
            rel("/sys/fs/cgroup/unified/system.slice/x.service/").unwrap(),
            "system.slice/x.service"
        );
        assert_eq!(rel("user.slice").unwrap(), "user.slice");
        assert_eq!(rel("/").unwrap(), "");
        assert_eq!(rel("/sys/fs/cgroup/unified").unwrap(), "");
        // A v1 path on a hybrid machine is not under the v2 mount: it is read as a v2 path,
        // which does not exist (see below).
        assert_eq!(rel("/sys/fs/cgroup/cpu/x").unwrap(), "sys/fs/cgroup/cpu/x");
        assert!(rel("/a/../../etc").unwrap_err().0.contains(".."));
    }

    #[test]
    fn a_bad_scope_says_why() {
        let e = CgroupScope::resolve(None, "/system.slice").unwrap_err();
        assert!(e.0.contains("no cgroup v2 hierarchy"), "{e}");
        let dir = std::env::temp_dir().join(format!("forkprof-scope-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("plain")).unwrap();
        let e = CgroupScope::resolve(Some(&dir), "/nosuch.service").unwrap_err();
        assert!(e.0.contains("no such cgroup"), "{e}");
        // A directory without cgroup.procs is not a cgroup.
        assert!(CgroupScope::resolve(Some(&dir), "/plain").is_err());
        std::fs::create_dir_all(dir.join("unit.service")).unwrap();
        std::fs::write(dir.join("unit.service/cgroup.procs"), "").unwrap();
        let s = CgroupScope::resolve(Some(&dir), "/unit.service").unwrap();
        assert_eq!(s.path, "/unit.service");
        assert!(!s.is_gone());
        let abs = dir.join("unit.service");
        let s2 = CgroupScope::resolve(Some(&dir), abs.to_str().unwrap()).unwrap();
        assert_eq!((s2.path.as_str(), s2.id()), ("/unit.service", s.id()));
        std::fs::remove_dir_all(dir.join("unit.service")).unwrap();
        assert!(s.is_gone());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn walks_a_tree_by_inode() {
        let dir = std::env::temp_dir().join(format!("forkprof-cg-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("a.service/sub")).unwrap();
        std::fs::create_dir_all(dir.join("b")).unwrap();
        let mut names = HashMap::new();
        walk(&dir, &mut names);
        let ino = |p: &str| std::fs::metadata(dir.join(p)).unwrap().ino();
        assert_eq!(names[&ino(".")], b"/");
        assert_eq!(names[&ino("a.service/sub")], b"/a.service/sub");
        assert_eq!(names[&ino("b")], b"/b");
        let mut cg = CgroupNames {
            root: Some(dir.clone()),
            ..CgroupNames::default()
        };
        cg.rescan();
        std::fs::create_dir_all(dir.join("c")).unwrap();
        // Walked moments ago: the new id waits, and settles at the next walk.
        assert_eq!(cg.get(ino("c")), None);
        assert_eq!(cg.settle(), vec![(ino("c"), b"/c".to_vec())]);
        assert_eq!(cg.get(0), None);
        let _ = std::fs::remove_dir_all(dir);
    }
}
