//! Who forkprof acts for. Under sudo, the traced command runs as the invoking user (SUDO_UID,
//! SUDO_GID, that user's supplementary groups, HOME, USER, LOGNAME), and files forkprof
//! writes are created 0600 and owned by that user. Only the loading of the eBPF programs and
//! the reading of their maps need root.
use std::ffi::{CStr, CString};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use anyhow::{Context as _, Result};

#[derive(Clone, Debug)]
pub struct InvokingUser {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<libc::gid_t>,
    pub name: Option<String>,
    pub home: Option<String>,
}

impl InvokingUser {
    /// The user who ran `sudo forkprof`, or `None` when forkprof was not started via sudo by
    /// another user (then the command runs as forkprof itself does).
    pub fn from_env() -> Result<Option<Self>> {
        let Ok(uid) = std::env::var("SUDO_UID") else {
            return Ok(None);
        };
        let uid: u32 = uid.parse().context("SUDO_UID is not a number")?;
        // SAFETY: getuid has no preconditions.
        if uid == unsafe { libc::getuid() } {
            return Ok(None);
        }
        let (name, home, pw_gid) = passwd_entry(uid);
        let gid = match std::env::var("SUDO_GID") {
            Ok(g) => g.parse().context("SUDO_GID is not a number")?,
            Err(_) => pw_gid.unwrap_or(uid),
        };
        let groups = match &name {
            Some(n) => group_list(n, gid),
            None => vec![gid],
        };
        Ok(Some(Self {
            uid,
            gid,
            groups,
            name,
            home,
        }))
    }

    /// Switches the calling process to this user. Called in the child between fork and exec,
    /// so it only uses async-signal-safe syscalls.
    pub fn become_user(&self) -> io::Result<()> {
        // SAFETY: plain syscalls on owned data; errors are checked.
        unsafe {
            if libc::setgroups(self.groups.len(), self.groups.as_ptr()) != 0
                || libc::setresgid(self.gid, self.gid, self.gid) != 0
                || libc::setresuid(self.uid, self.uid, self.uid) != 0
            {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// (name, home, primary gid) of a uid, from the passwd database.
fn passwd_entry(uid: u32) -> (Option<String>, Option<String>, Option<u32>) {
    let mut buf = vec![0 as libc::c_char; 16384];
    // SAFETY: zeroed passwd is a valid out-parameter.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: buffers are owned and sized; getpwuid_r writes only within them.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut result) };
    if rc != 0 || result.is_null() {
        return (None, None, None);
    }
    // SAFETY: on success the fields point into `buf` as NUL-terminated strings.
    let text = |p: *const libc::c_char| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
    (
        Some(text(pw.pw_name)),
        Some(text(pw.pw_dir)),
        Some(pw.pw_gid),
    )
}

fn group_list(name: &str, gid: u32) -> Vec<libc::gid_t> {
    let Ok(cname) = CString::new(name) else {
        return vec![gid];
    };
    let mut n: libc::c_int = 64;
    loop {
        let mut groups = vec![0 as libc::gid_t; n as usize];
        // SAFETY: `groups` has room for `n` entries; getgrouplist updates `n`.
        let rc = unsafe { libc::getgrouplist(cname.as_ptr(), gid, groups.as_mut_ptr(), &mut n) };
        if rc >= 0 {
            groups.truncate(n as usize);
            return groups;
        }
        if n > 65536 {
            return vec![gid];
        }
        n *= 2;
    }
}

/// Creates (or truncates) an output file with mode 0600, owned by the invoking user when
/// forkprof runs under sudo.
pub fn create_private_file(path: &Path, owner: Option<&InvokingUser>) -> Result<File> {
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    // A device or pipe (/dev/null, /dev/stdout) is written to as it is, never re-moded.
    let regular = file.metadata().map(|m| m.is_file()).unwrap_or(false);
    if !regular {
        return Ok(file);
    }
    use std::os::unix::fs::PermissionsExt as _;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("cannot set the mode of {}", path.display()))?;
    if let Some(user) = owner {
        std::os::unix::fs::fchown(&file, Some(user.uid), Some(user.gid))
            .with_context(|| format!("cannot give {} to uid {}", path.display(), user.uid))?;
    }
    Ok(file)
}
