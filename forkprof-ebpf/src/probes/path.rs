//! The executed binary's absolute path, where the path an exec was given is not one. The
//! kernel keeps only the path as passed (`linux_binprm.filename`), so `./t` run in two
//! directories would be one binary, and fexecve's `/dev/fd/3` would name no binary at all.
//! `bpf_d_path` is not allowed in a BTF tracepoint, so the names are walked here as d_path
//! walks them: from a dentry to its parent, from a mount's root to where it is mounted, up
//! to the task's root. The agent joins them (`decode::binary_path`).
//!
//! - A relative path is made absolute against the caller's current directory: its names,
//!   then the path as given (whose `.` and `..` the agent folds).
//! - A path that names an open file (`/dev/fd/N`, which fexecve and execveat with
//!   `AT_EMPTY_PATH` or a directory descriptor give; `/proc/…`, such as `/proc/self/exe`) is
//!   replaced by the executed file's own path, walked from `linux_binprm.file`. Not for a
//!   script: there that file is its interpreter, and the path as given stays.
//!
//! An absolute path costs a byte compare and an 8-byte compare here; only the other kinds
//! pay for a walk, three helper reads a name.
use aya_ebpf::helpers::generated;
use forkprof_common::{ExecAttemptRecord, PATH_LEN, path_walk};

use crate::maps::{BtfPtr, kernel_layout, kernel_u64};

/// The most steps a walk takes: one a name, or one a crossing from a mount to its
/// mountpoint. A deeper path's first names are left out (the record says it is incomplete).
const WALK_STEPS: usize = 30;
/// Room for the steps' name addresses, the 0 after them and the names' offset (the last
/// word): a power of two, at least `WALK_STEPS + 2`.
const STEPS_MAX: usize = 32;
const _: () = assert!(STEPS_MAX.is_power_of_two() && WALK_STEPS + 2 <= STEPS_MAX);
/// A step's name address where the step crossed a mount (no kernel address is 1).
const CROSSED: u64 = 1;

/// `/dev/fd/` as a little-endian u64.
const DEV_FD: u64 = u64::from_le_bytes(*b"/dev/fd/");
/// `/proc/` in the low six bytes of a little-endian u64.
const PROC: u64 = u64::from_le_bytes(*b"/proc/\0\0");
const PROC_MASK: u64 = 0xffff_ffff_ffff;

/// Walks the names that make `rec.path` absolute, where it is not, into `rec.path` after
/// the path as given, and says what it did in `rec.path_walk` (0: nothing). `given` is what
/// reading the path as given returned (its length with the NUL, or an error). `bprm` is the
/// exec's `linux_binprm` at sched_process_exec; a failed attempt has none (its path as
/// given is then only made absolute when relative).
#[inline(always)]
pub fn make_absolute(rec: &mut ExecAttemptRecord, given: i64, bprm: Option<BtfPtr>) {
    rec.path_walk = 0;
    if kernel_layout!(walk_paths) == 0 || given <= 1 || given >= PATH_LEN as i64 {
        return;
    }
    // The kind of path first, from the bytes already read: an absolute one (nearly every
    // exec) goes no further.
    let from_cwd = rec.path[0] != b'/';
    let file = if from_cwd {
        0
    } else if let Some(bprm) = bprm
        && names_a_file(&rec.path)
        && bprm.u64_at(kernel_layout!(bprm_interp)) == bprm.u64_at(kernel_layout!(bprm_filename))
    {
        bprm.u64_at(kernel_layout!(bprm_file))
    } else {
        return;
    };
    // The layout's fields the walk uses, each read once (`kernel_layout!`).
    let dentry_name = kernel_layout!(dentry_name) as u64;
    let dentry_parent = kernel_layout!(dentry_parent) as u64;
    let file_path = kernel_layout!(file_path) as u64;
    let fs_pwd = kernel_layout!(fs_pwd) as u64;
    let fs_root = kernel_layout!(fs_root) as u64;
    let mount_mnt = kernel_layout!(mount_mnt) as u64;
    let mount_mountpoint = kernel_layout!(mount_mountpoint) as u64;
    let mount_parent = kernel_layout!(mount_parent) as u64;
    let path_dentry = kernel_layout!(path_dentry) as u64;
    let path_mnt = kernel_layout!(path_mnt) as u64;
    let task_fs = kernel_layout!(task_fs) as u64;
    let vfsmount_root = kernel_layout!(vfsmount_root) as u64;
    let fs = kernel_u64(BtfPtr::current_task().raw() as u64 + task_fs);
    if fs == 0 {
        return;
    }
    let (start, flags) = if from_cwd {
        (fs + fs_pwd, path_walk::FROM_CWD)
    } else {
        (file + file_path, 0)
    };
    let mut mnt = kernel_u64(start + path_mnt);
    let mut dentry = kernel_u64(start + path_dentry);
    let root = fs + fs_root;
    let root_mnt = kernel_u64(root + path_mnt);
    let root_dentry = kernel_u64(root + path_dentry);
    let mut mount = mnt.wrapping_sub(mount_mnt);
    let mut mnt_root = kernel_u64(mnt + vfsmount_root);
    // First the walk, which keeps each step's name address (`CROSSED` for a mount) in the
    // record's argv (written only after the path), then the names' reads. Two loops, each
    // with one precise value for the verifier (the step; the read's offset) and branches
    // that meet again within a step: one loop doing both has too many paths for it.
    let steps_at = rec.argv.as_mut_ptr().cast::<u64>();
    let mut steps = 0usize;
    let mut complete = false;
    while steps < WALK_STEPS {
        if dentry == 0 || mnt == 0 {
            break;
        }
        if dentry == root_dentry && mnt == root_mnt {
            complete = true;
            break;
        }
        let mut name = CROSSED;
        let mut detached = false;
        if dentry == mnt_root {
            // The root of a mount: go on from its mountpoint, in its parent mount. The top
            // mount (of this namespace, or an internal one such as memfd's) is its own parent.
            let parent = kernel_u64(mount + mount_parent);
            if parent == mount || parent == 0 {
                complete = true;
                break;
            }
            dentry = kernel_u64(mount + mount_mountpoint);
            mount = parent;
            mnt = mount + mount_mnt;
            mnt_root = kernel_u64(mnt + vfsmount_root);
        } else {
            let parent = kernel_u64(dentry + dentry_parent);
            name = kernel_u64(dentry + dentry_name);
            // Its own parent, yet no mount's root: a dentry outside any tree, such as a
            // memfd's ("memfd:NAME", which d_path shows as "/memfd:NAME (deleted)"). Its name
            // is the last one.
            detached = parent == dentry;
            dentry = parent;
        }
        // SAFETY: `steps` < WALK_STEPS ≤ STEPS_MAX u64s, inside argv's ARGV_LEN bytes.
        unsafe { steps_at.add(steps & (STEPS_MAX - 1)).write_unaligned(name) };
        steps += 1;
        if detached {
            complete = true;
            break;
        }
    }
    // The reads end at a 0, not at `steps`: the verifier then follows them once, not once
    // for each count of steps.
    // SAFETY: as above.
    unsafe { steps_at.add(steps & (STEPS_MAX - 1)).write_unaligned(0) };
    // Where the next name goes, kept in the record (a word the names' reads never use) and
    // not in a variable: the verifier does not follow memory's values, so the loop reaches
    // each step in one state, not in one for each range of offsets the names so far give.
    let pos_at = steps_at.wrapping_add(STEPS_MAX - 1);
    // SAFETY: the last word of the steps' room, which the walk never reaches.
    unsafe { core::ptr::write_volatile(pos_at, given as u64) };
    for i in 0..WALK_STEPS {
        // SAFETY: as above.
        let name = unsafe { steps_at.add(i).read_unaligned() };
        if name == 0 {
            break;
        }
        if name == CROSSED {
            continue;
        }
        // A bound the verifier can follow: `at` < PATH_LEN, and the string takes at most
        // PATH_LEN - at bytes (the record goes on past `path`, so the worst case is inside it).
        // SAFETY: as above.
        let at = unsafe { core::ptr::read_volatile(pos_at) } as usize & (PATH_LEN - 1);
        // SAFETY: PATH_LEN - at bytes of the record from `path[at]`; the helper validates
        // `name`, always NUL-terminates, and returns the bytes written with the NUL.
        let n = unsafe {
            generated::bpf_probe_read_kernel_str(
                rec.path.as_mut_ptr().add(at).cast(),
                (PATH_LEN - at) as u32,
                name as *const _,
            )
        };
        if n <= 0 {
            complete = false;
            break;
        }
        let pos = at + n as usize;
        if pos >= PATH_LEN {
            // The record is full, and this name may have been cut.
            complete = false;
            break;
        }
        // SAFETY: as above.
        unsafe { core::ptr::write_volatile(pos_at, pos as u64) };
    }
    // SAFETY: as above.
    let end = unsafe { core::ptr::read_volatile(pos_at) } as u32 & path_walk::END;
    if end as i64 <= given && !complete {
        return;
    }
    rec.path_walk = end | flags | if complete { path_walk::COMPLETE } else { 0 };
}

/// Whether an absolute path names an already open file: `/dev/fd/…` or `/proc/…`.
#[inline(always)]
fn names_a_file(path: &[u8; PATH_LEN]) -> bool {
    let head = u64::from_le_bytes([
        path[0], path[1], path[2], path[3], path[4], path[5], path[6], path[7],
    ]);
    head == DEV_FD || head & PROC_MASK == PROC
}
