//! The mounts of the recording machine, as far as atime goes: the atime hint says what the
//! binaries' filesystem is mounted with, so that it suggests what would actually help. Read
//! from forkprof's own /proc/self/mountinfo when tracing starts (stored in a recording's
//! meta as `mounts`), so `report FILE` on another machine gives the same hint. A binary in
//! another mount namespace (a container) is matched against forkprof's mounts by its path.
use serde::{Deserialize, Serialize};

/// How a mount updates access times on reads (and execs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Atime {
    /// Every read updates atime.
    Strictatime,
    /// The first read after a change of the file updates atime, and then one a day (the
    /// default).
    Relatime,
    /// Never.
    Noatime,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mount {
    pub mount_point: String,
    pub atime: Atime,
    /// Timestamps are kept in memory and written with the inode's next write or once a day:
    /// an atime update no longer dirties the inode.
    pub lazytime: bool,
}

impl Mount {
    /// Whether atime updates of files on this mount dirty their inode (what forkprof's
    /// `atime` phase counts).
    pub fn dirties_inodes_on_read(&self) -> bool {
        self.atime != Atime::Noatime && !self.lazytime
    }

    /// The options that matter here, as `mount` spells them.
    pub fn atime_options(&self) -> String {
        let atime = match self.atime {
            Atime::Strictatime => "strictatime",
            Atime::Relatime => "relatime",
            Atime::Noatime => "noatime",
        };
        if self.lazytime {
            format!("{atime},lazytime")
        } else {
            atime.to_string()
        }
    }
}

/// Parses /proc/PID/mountinfo: "ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] -
/// FSTYPE SOURCE SUPER_OPTIONS". Per-mount options hold noatime/relatime (neither: strict);
/// lazytime is a superblock option. Lines it cannot read are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let mount_point = unescape(fields.get(4)?);
            let options: Vec<&str> = fields.get(5)?.split(',').collect();
            let dash = fields.iter().position(|f| *f == "-")?;
            let super_options = fields.get(dash + 3).copied().unwrap_or("");
            let atime = if options.contains(&"noatime") {
                Atime::Noatime
            } else if options.contains(&"relatime") {
                Atime::Relatime
            } else {
                Atime::Strictatime
            };
            let lazytime =
                options.contains(&"lazytime") || super_options.split(',').any(|o| o == "lazytime");
            Some(Mount {
                mount_point,
                atime,
                lazytime,
            })
        })
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo` (octal).
pub fn unescape(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && b.get(i + 1..i + 4)
                .is_some_and(|o| o.iter().all(|c| (b'0'..=b'7').contains(c)))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The mount that holds `path` (its index in `mounts`): the last one listed whose mount point is the longest prefix
/// of it, by whole components (later mounts hide earlier ones on the same point). `None`
/// for a path that is not absolute, or when no mount is known.
pub fn mount_of(mounts: &[Mount], path: &[u8]) -> Option<usize> {
    if !path.starts_with(b"/") {
        return None;
    }
    let under = |mp: &[u8]| {
        mp == b"/" || (path.starts_with(mp) && (path.len() == mp.len() || path[mp.len()] == b'/'))
    };
    let mut best: Option<usize> = None;
    for (i, m) in mounts.iter().enumerate() {
        let mp = m.mount_point.as_bytes();
        if under(mp) && best.is_none_or(|b| mp.len() >= mounts[b].mount_point.len()) {
            best = Some(i);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 1 252:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
23 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
30 22 7:0 / /mnt/strict rw,nosuid shared:40 - ext4 /dev/loop0 rw
31 22 7:1 / /mnt/no\\040atime rw,noatime - ext4 /dev/loop1 rw
32 22 7:2 / /opt rw,relatime - xfs /dev/loop2 rw,lazytime,attr2
33 30 7:3 / /mnt/strict/inner rw,relatime - ext4 /dev/loop3 rw
";

    #[test]
    fn reads_each_mounts_atime_options() {
        let m = parse_mountinfo(MOUNTINFO);
        let opts: Vec<(&str, String)> = m
            .iter()
            .map(|m| (m.mount_point.as_str(), m.atime_options()))
            .collect();
        assert_eq!(
            opts,
            [
                ("/", "relatime".to_string()),
                ("/proc", "relatime".into()),
                ("/mnt/strict", "strictatime".into()),
                ("/mnt/no atime", "noatime".into()),
                ("/opt", "relatime,lazytime".into()),
                ("/mnt/strict/inner", "relatime".into()),
            ]
        );
        assert!(m[0].dirties_inodes_on_read());
        assert!(!m[3].dirties_inodes_on_read() && !m[4].dirties_inodes_on_read());
    }

    #[test]
    fn a_path_belongs_to_the_longest_mount_point_by_whole_components() {
        let m = parse_mountinfo(MOUNTINFO);
        let at = |p: &[u8]| mount_of(&m, p).map(|i| m[i].mount_point.as_str());
        assert_eq!(at(b"/usr/bin/as"), Some("/"));
        assert_eq!(at(b"/mnt/strict/prog"), Some("/mnt/strict"));
        assert_eq!(at(b"/mnt/strictly/prog"), Some("/"));
        assert_eq!(at(b"/mnt/strict/inner/prog"), Some("/mnt/strict/inner"));
        assert_eq!(at(b"/mnt/no atime/x"), Some("/mnt/no atime"));
        assert_eq!(at(b"./relative"), None);
        assert_eq!(mount_of(&[], b"/bin/sh"), None);
    }
}
