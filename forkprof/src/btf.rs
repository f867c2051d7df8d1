//! Reads what the programs need from the running kernel's BTF (/sys/kernel/btf/vmlinux):
//! struct member offsets, and the prototype of each raw tracepoint.
//!
//! aya-ebpf emits no CO-RE relocations, so the few struct fields the programs read are located
//! here at start-up and passed in as a global. A raw tracepoint's arguments are its kernel's
//! `TP_PROTO`, which changes between versions; the `btf_trace_<name>` typedef gives it, so the
//! loader attaches the program variant written for this kernel's layout and never reads a
//! guessed slot. aya-obj's BTF parser keeps its type lookups private, so this is a minimal
//! reader of the BTF format (Documentation/bpf/btf.rst).
use std::collections::BTreeMap;
use std::fmt;

use anyhow::{Context as _, Result, bail};
use forkprof_common::KernelLayout;

const BTF_MAGIC: u16 = 0xeb9f;
const KIND_INT: u32 = 1;
const KIND_PTR: u32 = 2;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_TYPEDEF: u32 = 8;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_ENUM64: u32 = 19;
/// BTF_INT_BOOL in an INT's encoding bits.
const INT_BOOL: u32 = 4;

/// The kind of one tracepoint argument, as far as a program reading it cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Param {
    Ptr,
    Bool,
    /// An integer or enum of this many bytes.
    Int(u32),
    Other,
}

impl fmt::Display for Param {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ptr => f.write_str("ptr"),
            Self::Bool => f.write_str("bool"),
            Self::Int(n) => write!(f, "int{}", n * 8),
            Self::Other => f.write_str("?"),
        }
    }
}

/// A tracepoint prototype as text: `(ptr, bool)`.
pub fn show_params(params: &[Param]) -> String {
    let inner: Vec<String> = params.iter().map(Param::to_string).collect();
    format!("({})", inner.join(", "))
}

struct Btf<'a> {
    types: Vec<(u32, u32, u32, &'a [u8])>, // (name_off, info, size_or_type, trailing data)
    strings: &'a [u8],
}

fn u32_at(data: &[u8], off: usize) -> Result<u32> {
    let bytes = data.get(off..off + 4).context("BTF truncated")?;
    Ok(u32::from_le_bytes(bytes.try_into().expect("4 bytes")))
}

impl<'a> Btf<'a> {
    fn parse(data: &'a [u8]) -> Result<Self> {
        let magic = u16::from_le_bytes(data.get(0..2).context("BTF truncated")?.try_into()?);
        if magic != BTF_MAGIC {
            bail!("not BTF data (magic {magic:#x}), or not little-endian");
        }
        let hdr_len = u32_at(data, 4)? as usize;
        let type_off = u32_at(data, 8)? as usize;
        let type_len = u32_at(data, 12)? as usize;
        let str_off = u32_at(data, 16)? as usize;
        let str_len = u32_at(data, 20)? as usize;
        let type_sec = data
            .get(hdr_len + type_off..hdr_len + type_off + type_len)
            .context("BTF type section out of bounds")?;
        let strings = data
            .get(hdr_len + str_off..hdr_len + str_off + str_len)
            .context("BTF string section out of bounds")?;
        // Type id 0 is void; ids start at 1.
        let mut types = vec![(0, 0, 0, &type_sec[..0])];
        let mut off = 0;
        while off < type_sec.len() {
            let name_off = u32_at(type_sec, off)?;
            let info = u32_at(type_sec, off + 4)?;
            let size_or_type = u32_at(type_sec, off + 8)?;
            let vlen = (info & 0xffff) as usize;
            let kind = (info >> 24) & 0x1f;
            let extra = match kind {
                1 => 4,                    // INT
                3 => 12,                   // ARRAY
                4 | 5 => 12 * vlen,        // STRUCT, UNION
                6 => 8 * vlen,             // ENUM
                13 => 8 * vlen,            // FUNC_PROTO
                14 => 4,                   // VAR
                15 => 12 * vlen,           // DATASEC
                17 => 4,                   // DECL_TAG
                19 => 12 * vlen,           // ENUM64
                2 | 7..=12 | 16 | 18 => 0, // PTR, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT, FUNC, FLOAT, TYPE_TAG
                other => bail!("unknown BTF kind {other}"),
            };
            let trailing = type_sec
                .get(off + 12..off + 12 + extra)
                .context("BTF type truncated")?;
            types.push((name_off, info, size_or_type, trailing));
            off += 12 + extra;
        }
        Ok(Self { types, strings })
    }

    fn name(&self, off: u32) -> &str {
        let rest = self.strings.get(off as usize..).unwrap_or_default();
        let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        std::str::from_utf8(&rest[..end]).unwrap_or("")
    }

    fn kind(&self, id: usize) -> u32 {
        self.types
            .get(id)
            .map_or(0, |&(_, info, _, _)| (info >> 24) & 0x1f)
    }

    fn id_of(&self, kind: u32, name: &str) -> Option<usize> {
        self.types.iter().position(|&(name_off, info, _, _)| {
            (info >> 24) & 0x1f == kind && self.name(name_off) == name
        })
    }

    fn struct_id(&self, name: &str) -> Option<usize> {
        self.id_of(KIND_STRUCT, name)
    }

    fn param(&self, id: usize) -> Param {
        let id = self.resolve(id);
        let Some(&(_, info, size, trailing)) = self.types.get(id) else {
            return Param::Other;
        };
        match (info >> 24) & 0x1f {
            KIND_PTR => Param::Ptr,
            KIND_INT => {
                let encoding = trailing.get(0..4).map_or(0, |b| {
                    u32::from_le_bytes(b.try_into().expect("4 bytes")) >> 24
                });
                if encoding & INT_BOOL != 0 {
                    Param::Bool
                } else {
                    Param::Int(size)
                }
            }
            KIND_ENUM | KIND_ENUM64 => Param::Int(size),
            _ => Param::Other,
        }
    }

    /// The arguments of raw tracepoint `name` (its `btf_trace_<name>` typedef: a pointer to a
    /// function prototype whose first parameter, the context, is left out here).
    fn tracepoint_params(&self, name: &str) -> Option<Vec<Param>> {
        let typedef = self.id_of(KIND_TYPEDEF, &format!("btf_trace_{name}"))?;
        let ptr = self.types.get(typedef)?.2 as usize;
        if self.kind(ptr) != KIND_PTR {
            return None;
        }
        let proto = self.resolve(self.types.get(ptr)?.2 as usize);
        if self.kind(proto) != KIND_FUNC_PROTO {
            return None;
        }
        let trailing = self.types.get(proto)?.3;
        Some(
            trailing
                .chunks_exact(8)
                .skip(1)
                .map(|p| {
                    self.param(u32::from_le_bytes(p[4..8].try_into().expect("4 bytes")) as usize)
                })
                .collect(),
        )
    }

    /// Byte offset of `member` in the struct named `strukt`, or why there is none.
    fn offset(&self, strukt: &str, member: &str) -> Result<u32> {
        self.struct_id(strukt)
            .and_then(|id| self.member_offset(id, member))
            .with_context(|| format!("{strukt}.{member} not found in BTF"))
    }

    /// Byte offset of `member` in struct/union `id`, descending into anonymous members.
    fn member_offset(&self, id: usize, member: &str) -> Option<u32> {
        let &(_, info, _, trailing) = self.types.get(id)?;
        let kind = (info >> 24) & 0x1f;
        if kind != KIND_STRUCT && kind != KIND_UNION {
            return None;
        }
        let bitfield = info >> 31 == 1;
        for m in trailing.chunks_exact(12) {
            let name_off = u32::from_le_bytes(m[0..4].try_into().ok()?);
            let type_id = u32::from_le_bytes(m[4..8].try_into().ok()?) as usize;
            let raw_offset = u32::from_le_bytes(m[8..12].try_into().ok()?);
            let bits = if bitfield {
                raw_offset & 0x00ff_ffff
            } else {
                raw_offset
            };
            let name = self.name(name_off);
            if name == member {
                return Some(bits / 8);
            }
            if name.is_empty()
                && let Some(inner) = self.member_offset(self.resolve(type_id), member)
            {
                return Some(bits / 8 + inner);
            }
        }
        None
    }

    /// Follows typedef/const/volatile/restrict/type_tag to the underlying type.
    fn resolve(&self, mut id: usize) -> usize {
        for _ in 0..32 {
            match self.types.get(id) {
                Some(&(_, info, next, _)) if matches!((info >> 24) & 0x1f, 8..=11 | 18) => {
                    id = next as usize;
                }
                _ => break,
            }
        }
        id
    }
}

pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// What the loader learns from the kernel's BTF.
#[derive(Clone, Debug, Default)]
pub struct KernelInfo {
    pub layout: KernelLayout,
    /// Why `signal_struct.live` could not be located (needed only where sched_process_exit
    /// has no `group_dead` argument), if it could not.
    pub signal_live_missing: Option<String>,
    /// Why relative and file-descriptor exec paths cannot be made absolute (an offset of
    /// the dentry walk is not in this kernel's BTF), if they cannot: they are shown as given.
    pub walk_paths_missing: Option<String>,
    /// Prototypes of the raw tracepoints asked for; absent: not in this kernel's BTF.
    pub tracepoints: BTreeMap<&'static str, Vec<Param>>,
}

impl KernelInfo {
    pub fn params(&self, tracepoint: &str) -> Option<&[Param]> {
        self.tracepoints.get(tracepoint).map(Vec::as_slice)
    }
}

/// The offsets of the dentry walk that makes a relative or file-descriptor exec path
/// absolute (forkprof-ebpf's `path` module); `walk_paths` is set only when all were found.
fn walk_offsets(btf: &Btf<'_>, task: usize, layout: &mut KernelLayout) -> Result<()> {
    let member = |strukt: &str, name: &str| btf.offset(strukt, name);
    layout.task_fs = btf
        .member_offset(task, "fs")
        .context("task_struct.fs not found in BTF")?;
    layout.fs_root = member("fs_struct", "root")?;
    layout.fs_pwd = member("fs_struct", "pwd")?;
    layout.path_mnt = member("path", "mnt")?;
    layout.path_dentry = member("path", "dentry")?;
    layout.bprm_file = member("linux_binprm", "file")?;
    layout.bprm_interp = member("linux_binprm", "interp")?;
    layout.file_path = member("file", "f_path")?;
    layout.dentry_parent = member("dentry", "d_parent")?;
    layout.dentry_name = member("dentry", "d_name")? + member("qstr", "name")?;
    layout.vfsmount_root = member("vfsmount", "mnt_root")?;
    layout.mount_mnt = member("mount", "mnt")?;
    layout.mount_parent = member("mount", "mnt_parent")?;
    layout.mount_mountpoint = member("mount", "mnt_mountpoint")?;
    layout.walk_paths = 1;
    Ok(())
}

/// Reads the offsets the programs need and the prototypes of `tracepoints`.
pub fn inspect(data: &[u8], tracepoints: &[&'static str]) -> Result<KernelInfo> {
    let btf = Btf::parse(data)?;
    let task = btf
        .struct_id("task_struct")
        .context("struct task_struct not found in BTF")?;
    let field = |name: &str| {
        btf.member_offset(task, name)
            .with_context(|| format!("task_struct.{name} not found in BTF"))
    };
    let mut info = KernelInfo {
        layout: KernelLayout {
            task_pid: field("pid")?,
            task_tgid: field("tgid")?,
            task_exit_code: field("exit_code")?,
            task_exit_signal: field("exit_signal")?,
            task_comm: field("comm")?,
            task_start_time: field("start_time")?,
            task_group_leader: field("group_leader")?,
            task_mm: field("mm")?,
            ..Default::default()
        },
        ..Default::default()
    };
    let member = |strukt: &str, name: &str| btf.offset(strukt, name);
    info.layout.mm_arg_start = member("mm_struct", "arg_start")?;
    info.layout.mm_arg_end = member("mm_struct", "arg_end")?;
    info.layout.mm_map_count = member("mm_struct", "map_count")?;
    info.layout.bprm_filename = member("linux_binprm", "filename")?;
    info.layout.bprm_argc = member("linux_binprm", "argc")?;
    info.layout.task_thread_status = field("thread_info")? + member("thread_info", "status")?;
    let live = btf
        .struct_id("signal_struct")
        .and_then(|s| btf.member_offset(s, "live"));
    match (field("signal"), live) {
        (Ok(signal), Some(live)) => {
            info.layout.task_signal = signal;
            info.layout.signal_live = live;
        }
        (Err(e), _) => info.signal_live_missing = Some(format!("{e:#}")),
        (_, None) => {
            info.signal_live_missing = Some("signal_struct.live not found in BTF".into());
        }
    }
    if let Err(e) = walk_offsets(&btf, task, &mut info.layout) {
        info.walk_paths_missing = Some(format!("{e:#}"));
    }
    for &tp in tracepoints {
        if let Some(params) = btf.tracepoint_params(tp) {
            info.tracepoints.insert(tp, params);
        }
    }
    // sched_process_exit gained `group_dead` (and moved before exit_mm) in 6.16.
    let exit_has_group_dead = info
        .params("sched_process_exit")
        .is_some_and(|p| p.get(1) == Some(&Param::Bool));
    info.layout.exit_at_syscall = u32::from(!exit_has_group_dead);
    Ok(info)
}

pub fn read_kernel_btf() -> Result<Vec<u8>> {
    std::fs::read(VMLINUX_BTF).with_context(|| {
        format!("cannot read {VMLINUX_BTF}: this kernel needs CONFIG_DEBUG_INFO_BTF")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a BTF blob: `struct task_struct { int pid; int tgid; union { int exit_code; };
    /// struct signal_struct *signal; int comm; int start_time; int mm; struct thread_info
    /// thread_info; int exit_signal; struct task_struct *group_leader; }`, `struct thread_info { int flags; int status; }` (the real types
    /// differ; only the offsets matter here), `struct mm_struct { int x; int arg_start; int
    /// arg_end; int map_count; }`, `struct linux_binprm { int filename; int argc; }`, `struct signal_struct { int x; int live; }`, and
    /// `typedef void (*btf_trace_sched_process_exit)(void *, struct task_struct *, bool)`.
    fn sample(group_dead: bool) -> Vec<u8> {
        let strings =
            b"\0int\0task_struct\0pid\0tgid\0exit_code\0signal\0signal_struct\0live\0x\0bool\0btf_trace_sched_process_exit\0comm\0start_time\0mm\0mm_struct\0arg_start\0arg_end\0map_count\0linux_binprm\0filename\0argc\0thread_info\0flags\0status\0exit_signal\0group_leader\0";
        let s = |name: &str| {
            let hay = std::str::from_utf8(strings).unwrap();
            hay.find(&format!("\0{name}\0")).unwrap() as u32 + 1
        };
        let mut types = Vec::new();
        let mut push = |words: &[u32]| {
            for w in words {
                types.extend_from_slice(&w.to_le_bytes());
            }
        };
        // 1: int
        push(&[s("int"), 1 << 24, 4, (1 << 24) | 32]);
        // 2: anonymous union { int exit_code; }
        push(&[0, (5 << 24) | 1, 4, s("exit_code"), 1, 0]);
        // 3: struct task_struct
        push(&[s("task_struct"), (4 << 24) | 10, 64]);
        push(&[
            s("pid"),
            1,
            0,
            s("tgid"),
            1,
            32,
            0,
            2,
            96,
            s("signal"),
            5,
            128,
            s("comm"),
            1,
            192,
            s("start_time"),
            1,
            256,
            s("mm"),
            1,
            320,
            s("thread_info"),
            14,
            384,
            s("exit_signal"),
            1,
            448,
            s("group_leader"),
            6,
            480,
        ]);
        // 4: struct signal_struct { int x; int live; }
        push(&[s("signal_struct"), (4 << 24) | 2, 8]);
        push(&[s("x"), 1, 0, s("live"), 1, 32]);
        // 5: struct signal_struct *
        push(&[0, 2 << 24, 4]);
        // 6: struct task_struct *
        push(&[0, 2 << 24, 3]);
        // 7: bool
        push(&[s("bool"), 1 << 24, 1, (4 << 24) | 8]);
        // 8: void *
        push(&[0, 2 << 24, 0]);
        // 9: FUNC_PROTO (void *, struct task_struct *[, bool])
        if group_dead {
            push(&[0, (13 << 24) | 3, 0, 0, 8, 0, 6, 0, 7]);
        } else {
            push(&[0, (13 << 24) | 2, 0, 0, 8, 0, 6]);
        }
        // 10: pointer to it; 11: the typedef
        push(&[0, 2 << 24, 9]);
        push(&[s("btf_trace_sched_process_exit"), 8 << 24, 10]);
        // 12: struct mm_struct { int x; int arg_start; int arg_end; int map_count; }
        push(&[s("mm_struct"), (4 << 24) | 4, 16]);
        push(&[
            s("x"),
            1,
            0,
            s("arg_start"),
            1,
            32,
            s("arg_end"),
            1,
            64,
            s("map_count"),
            1,
            96,
        ]);
        // 13: struct linux_binprm { int filename; int argc; }
        push(&[s("linux_binprm"), (4 << 24) | 2, 8]);
        push(&[s("filename"), 1, 0, s("argc"), 1, 32]);
        // 14: struct thread_info { int flags; int status; }
        push(&[s("thread_info"), (4 << 24) | 2, 8]);
        push(&[s("flags"), 1, 0, s("status"), 1, 32]);
        let mut out = Vec::new();
        out.extend_from_slice(&BTF_MAGIC.to_le_bytes());
        out.extend_from_slice(&[1, 0]);
        for w in [
            24u32,
            0,
            types.len() as u32,
            types.len() as u32,
            strings.len() as u32,
        ] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.extend_from_slice(&types);
        out.extend_from_slice(strings);
        out
    }

    #[test]
    fn finds_direct_and_anonymous_members() {
        let info = inspect(&sample(true), &[]).unwrap();
        let l = info.layout;
        assert_eq!((l.task_pid, l.task_tgid, l.task_exit_code), (0, 4, 12));
        assert_eq!((l.task_signal, l.signal_live), (16, 4));
        assert_eq!((l.task_comm, l.task_start_time, l.task_mm), (24, 32, 40));
        assert_eq!((l.mm_arg_start, l.mm_arg_end, l.mm_map_count), (4, 8, 12));
        assert_eq!((l.bprm_filename, l.bprm_argc), (0, 4));
        assert_eq!(l.task_thread_status, 52);
        assert_eq!(l.task_exit_signal, 56);
        assert_eq!(l.task_group_leader, 60);
        assert!(info.signal_live_missing.is_none());
        // The sample has no fs_struct, dentry or mount: the path walk is off, and says why,
        // and the rest of the layout is still read.
        assert_eq!(l.walk_paths, 0);
        assert_eq!(
            info.walk_paths_missing.as_deref(),
            Some("task_struct.fs not found in BTF")
        );
    }

    #[test]
    fn reads_tracepoint_prototypes() {
        let new = inspect(&sample(true), &["sched_process_exit", "nosuch"]).unwrap();
        assert_eq!(
            new.params("sched_process_exit"),
            Some(&[Param::Ptr, Param::Bool][..])
        );
        assert_eq!(new.params("nosuch"), None);
        assert_eq!(new.layout.exit_at_syscall, 0);
        let old = inspect(&sample(false), &["sched_process_exit"]).unwrap();
        assert_eq!(old.params("sched_process_exit"), Some(&[Param::Ptr][..]));
        assert_eq!(old.layout.exit_at_syscall, 1);
        assert_eq!(show_params(&[Param::Ptr, Param::Int(8)]), "(ptr, int64)");
    }

    #[test]
    fn rejects_garbage_without_panicking() {
        assert!(inspect(b"nope", &[]).is_err());
        let mut truncated = sample(true);
        truncated.truncate(30);
        assert!(inspect(&truncated, &[]).is_err());
    }
}
