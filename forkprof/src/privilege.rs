//! Who forkprof acts for. Under sudo, the traced command runs as the invoking user (SUDO_UID,
//! SUDO_GID, that user's supplementary groups, HOME, USER, LOGNAME), and files forkprof
//! writes are opened with that user's filesystem identity (`as_user`): created 0600 and
//! owned by that user, and only where that user may write. Root's own identity never opens an
//! output path: `--report /etc/shadow` is refused as it would be without sudo, and a symlink
//! leads only where the user could go. Only the loading of the eBPF programs and the reading
//! of their maps need root.
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
    /// Also `None` when forkprof is not root: it then acts as itself, and cannot switch.
    pub fn from_env() -> Result<Option<Self>> {
        let Ok(uid) = std::env::var("SUDO_UID") else {
            return Ok(None);
        };
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Ok(None);
        }
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

/// Runs `f` on this thread with the invoking user's filesystem identity (fsuid, fsgid and
/// supplementary groups), so that every path it opens or creates is checked, and every file
/// it creates is owned, as if that user had done it; without a user, as forkprof itself.
/// Only this thread changes: the raw syscalls are per thread (glibc's wrappers of setgroups
/// would change every thread), and the eBPF side and the traced command are unaffected.
pub fn as_user<T>(user: Option<&InvokingUser>, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let _identity = match user {
        Some(u) => Some(FsIdentity::assume(u).context("cannot act as the invoking user")?),
        None => None,
    };
    f()
}

/// This thread's filesystem identity before `assume`, put back on drop.
struct FsIdentity {
    fsuid: u32,
    fsgid: u32,
    groups: Vec<libc::gid_t>,
}

impl FsIdentity {
    fn assume(user: &InvokingUser) -> io::Result<Self> {
        // SAFETY: getgroups with a NULL buffer and 0 only counts; then fills `groups`.
        let groups = unsafe {
            let n = libc::getgroups(0, std::ptr::null_mut());
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            let mut groups = vec![0 as libc::gid_t; n as usize];
            let n = libc::getgroups(n, groups.as_mut_ptr());
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            groups.truncate(n as usize);
            groups
        };
        set_groups(&user.groups)?;
        // setfsuid and setfsgid return the previous id and report no error: a second call
        // with an invalid id (-1) reads back the current one.
        let fsgid = set_fs_id(libc::SYS_setfsgid, user.gid);
        let fsuid = set_fs_id(libc::SYS_setfsuid, user.uid);
        let saved = Self {
            fsuid,
            fsgid,
            groups,
        };
        if set_fs_id(libc::SYS_setfsuid, u32::MAX) != user.uid
            || set_fs_id(libc::SYS_setfsgid, u32::MAX) != user.gid
        {
            return Err(io::Error::from(io::ErrorKind::PermissionDenied));
        }
        Ok(saved)
    }
}

impl Drop for FsIdentity {
    fn drop(&mut self) {
        // fsuid first: it gives back the filesystem capabilities that the others need.
        set_fs_id(libc::SYS_setfsuid, self.fsuid);
        set_fs_id(libc::SYS_setfsgid, self.fsgid);
        let _ = set_groups(&self.groups);
    }
}

/// setfsuid or setfsgid of this thread; the previous id.
fn set_fs_id(syscall: libc::c_long, id: u32) -> u32 {
    // SAFETY: a syscall with one integer argument.
    unsafe { libc::syscall(syscall, id) as u32 }
}

/// setgroups of this thread only (the raw syscall, not glibc's all-threads wrapper).
fn set_groups(groups: &[libc::gid_t]) -> io::Result<()> {
    // SAFETY: `groups` is valid for its length.
    if unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Creates (or truncates) an output file with mode 0600, as the invoking user when forkprof
/// runs under sudo (see `as_user`).
pub fn create_private_file(path: &Path, owner: Option<&InvokingUser>) -> Result<File> {
    as_user(owner, || open_private_file(path))
}

/// `create_private_file` with this thread's identity as it is (inside `as_user`).
pub fn open_private_file(path: &Path) -> Result<File> {
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    // A device or pipe (/dev/null, /dev/stdout) is written to as it is, never re-moded; so is
    // a file of somebody else's that this identity may write to.
    use std::os::unix::fs::MetadataExt as _;
    let ours = file.metadata().is_ok_and(|m| {
        // This thread's fsuid, read back by an invalid id.
        m.is_file() && m.uid() == set_fs_id(libc::SYS_setfsuid, u32::MAX)
    });
    if !ours {
        return Ok(file);
    }
    use std::os::unix::fs::PermissionsExt as _;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("cannot set the mode of {}", path.display()))?;
    Ok(file)
}

/// Whether the invoking user (or forkprof itself, without one) may create or write `path`:
/// the check behind an output option, made when the command line is parsed. Every look at
/// the path is the user's too, so that the answer says nothing of where only root may look.
pub fn may_write(path: &Path) -> Result<(), String> {
    let user = InvokingUser::from_env().map_err(|e| e.to_string())?;
    let check = |p: &Path| -> Result<bool> {
        use std::os::unix::ffi::OsStrExt as _;
        let c = CString::new(p.as_os_str().as_bytes())?;
        // SAFETY: a valid NUL-terminated path. AT_EACCESS checks with this thread's
        // filesystem identity, the invoking user's inside `as_user`.
        Ok(
            unsafe { libc::faccessat(libc::AT_FDCWD, c.as_ptr(), libc::W_OK, libc::AT_EACCESS) }
                == 0,
        )
    };
    // Under sudo, whose permission was wanted.
    let who = user.as_ref().map(|u| match &u.name {
        Some(name) => name.clone(),
        None => format!("uid {}", u.uid),
    });
    let by = who.as_ref().map(|w| format!(" by {w}")).unwrap_or_default();
    let hidden = who
        .as_ref()
        .map(|w| format!(" (or is closed to {w})"))
        .unwrap_or_default();
    as_user(user.as_ref(), || {
        if path.is_dir() {
            anyhow::bail!("is a directory");
        }
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        if !dir.is_dir() {
            anyhow::bail!("directory {} does not exist{hidden}", dir.display());
        }
        // An existing file (or device) is written where it is; a new one is created in `dir`.
        if path.exists() {
            if !check(path)? {
                anyhow::bail!("{} is not writable{by}", path.display());
            }
        } else if !check(dir)? {
            anyhow::bail!("directory {} is not writable{by}", dir.display());
        } else {
            // Permission bits are not the whole answer: a pseudo-filesystem (/proc, /sys)
            // says root may write a directory where no file can be made. So a new file is
            // made here, and removed, rather than after a long trace.
            match OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
            {
                Ok(_) => {
                    let _ = std::fs::remove_file(path);
                }
                // Made meanwhile by someone else: writing it is decided then.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => anyhow::bail!("cannot create a file in {}: {e}", dir.display()),
            }
        }
        Ok(())
    })
    .map_err(|e| format!("{e:#}"))
}
