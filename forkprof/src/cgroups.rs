//! Names for the cgroup v2 ids the kernel programs record (`bpf_get_current_cgroup_id`).
//! An id is the inode number of the cgroup's directory in the cgroup2 mount, so the names
//! come from walking that mount: once at start, and again when an id is not known yet (a
//! cgroup created since). A cgroup removed before forkprof saw it has no name; one removed
//! later keeps the path it was seen with.
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Walks of the hierarchy are at most this frequent (a storm of ids from one new cgroup
/// costs one walk).
const RESCAN_EVERY: Duration = Duration::from_millis(20);

#[derive(Debug, Default)]
pub struct CgroupNames {
    /// The cgroup2 mount point, if the machine has one.
    root: Option<PathBuf>,
    names: HashMap<u64, Vec<u8>>,
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
        let root = std::fs::read_to_string("/proc/self/mountinfo")
            .ok()
            .and_then(|m| cgroup2_mount(&m));
        let mut names = Self {
            root,
            ..Self::default()
        };
        names.rescan();
        names
    }

    fn rescan(&mut self) {
        if let Some(root) = &self.root {
            walk(root, &mut self.names);
        }
        self.scanned = Some(Instant::now());
    }

    /// The path of cgroup `id`; a miss walks the hierarchy again unless it was walked
    /// moments ago, in which case the id waits in `pending` (see `settle`).
    pub fn get(&mut self, id: u64) -> Option<&[u8]> {
        if id == 0 || self.root.is_none() {
            return None;
        }
        if !self.names.contains_key(&id) {
            let recent = self.scanned.is_some_and(|t| t.elapsed() < RESCAN_EVERY);
            if recent {
                if !self.pending.contains(&id) {
                    self.pending.push(id);
                }
                return None;
            }
            self.rescan();
        }
        self.names.get(&id).map(Vec::as_slice)
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
            .filter_map(|id| self.names.get(&id).map(|p| (id, p.clone())))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
