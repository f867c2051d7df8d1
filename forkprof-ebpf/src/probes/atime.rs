//! atime updates caused by exec and by the dynamic linker's mappings: the filesystem's
//! dirty_inode callback, bracketed by writeback_dirty_inode_start / writeback_dirty_inode.
use forkprof_common::{ProcState, active, ld_state};

use crate::maps;

#[inline(always)]
fn in_window() -> Option<&'static mut ProcState> {
    if maps::active(active::EXECS) == 0 && maps::active(active::LD) == 0 {
        return None;
    }
    let (tgid, _) = maps::current_ids();
    let ps = maps::proc_of(tgid)?;
    // SAFETY: map value of a traced process.
    let ps = unsafe { &mut *ps };
    (ps.in_exec != 0 || ps.ld_state != ld_state::NONE).then_some(ps)
}

pub fn on_dirty_start() {
    if let Some(ps) = in_window() {
        ps.atime_start = maps::now();
    }
}

pub fn on_dirty_end() {
    if let Some(ps) = in_window()
        && ps.atime_start != 0
    {
        ps.atime_count += 1;
        ps.atime_ns += maps::now() - ps.atime_start;
        ps.atime_start = 0;
    }
}
