//! Reads struct member offsets from the running kernel's BTF (/sys/kernel/btf/vmlinux).
//!
//! aya-ebpf emits no CO-RE relocations, so the few `task_struct` fields the programs read
//! (pid, tgid, exit_code) are located here at start-up and passed in as a global. aya-obj's
//! BTF parser keeps its type lookups private, so this is a minimal reader of the BTF format
//! (Documentation/bpf/btf.rst): the header, the string section, and struct members.
use anyhow::{Context as _, Result, bail};
use forkprof_common::TaskOffsets;

const BTF_MAGIC: u16 = 0xeb9f;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;

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

    fn struct_id(&self, name: &str) -> Option<usize> {
        self.types.iter().position(|&(name_off, info, _, _)| {
            (info >> 24) & 0x1f == KIND_STRUCT && self.name(name_off) == name
        })
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

/// Offsets of the `task_struct` fields the kernel programs read.
pub fn task_offsets(data: &[u8]) -> Result<TaskOffsets> {
    let btf = Btf::parse(data)?;
    let task = btf
        .struct_id("task_struct")
        .context("struct task_struct not found in BTF")?;
    let field = |name: &str| {
        btf.member_offset(task, name)
            .with_context(|| format!("task_struct.{name} not found in BTF"))
    };
    Ok(TaskOffsets {
        pid: field("pid")?,
        tgid: field("tgid")?,
        exit_code: field("exit_code")?,
        _pad: 0,
    })
}

pub fn kernel_task_offsets() -> Result<TaskOffsets> {
    let data = std::fs::read(VMLINUX_BTF).with_context(|| {
        format!("cannot read {VMLINUX_BTF}: this kernel needs CONFIG_DEBUG_INFO_BTF")
    })?;
    task_offsets(&data)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a BTF blob: `struct task_struct { int pid; int tgid; union { int exit_code; }; }`.
    fn sample() -> Vec<u8> {
        let strings = b"\0int\0task_struct\0pid\0tgid\0exit_code\0";
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
        push(&[s("int"), 1 << 24, 4, 32]);
        // 2: anonymous union { int exit_code; }
        push(&[0, (5 << 24) | 1, 4, s("exit_code"), 1, 0]);
        // 3: struct task_struct
        push(&[s("task_struct"), (4 << 24) | 3, 16]);
        push(&[s("pid"), 1, 0, s("tgid"), 1, 32, 0, 2, 96]);
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
        let off = task_offsets(&sample()).unwrap();
        assert_eq!((off.pid, off.tgid, off.exit_code), (0, 4, 12));
    }

    #[test]
    fn rejects_garbage_without_panicking() {
        assert!(task_offsets(b"nope").is_err());
        let mut truncated = sample();
        truncated.truncate(30);
        assert!(task_offsets(&truncated).is_err());
    }
}
