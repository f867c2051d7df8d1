//! `--precise-ld`: uprobes on ld.so's `_dl_debug_state` and libc's `__libc_start_main`,
//! attached to every interpreter (and the libc beside it) that traced processes use. A
//! container's glibc is another inode, so each exec'd binary's PT_INTERP is resolved inside
//! the process's own root (/proc/PID/root) and attached once per inode. The first process of
//! a new interpreter may run before its probes attach; its dynamic-linker phases are then
//! "not measured".
use std::collections::HashSet;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use aya::{
    Ebpf,
    programs::{UProbe, uprobe::UProbeScope},
};

use crate::decode::{Record, c_bytes};
use crate::elf::{Interp, interp_of};

const LD_PROGRAM: &str = "forkprof_ld_debug_state";
const LIBC_PROGRAM: &str = "forkprof_libc_start_main";

#[derive(Default)]
pub struct LdProbes {
    /// The interpreters probed, by (device, inode).
    inodes: HashSet<(u64, u64)>,
    /// The exec'd binaries whose interpreter was found, by the (device, inode) of the root
    /// they ran in and their own: each is read once, so that an exec costs the agent two
    /// stats, not a read of the whole binary. (The same inode bind-mounted into another root
    /// may use that root's ld.so.)
    binaries: HashSet<[u64; 4]>,
    /// Every object a probe is attached to.
    pub attached: Vec<PathBuf>,
    /// Objects that could not be probed, with why.
    pub failed: Vec<String>,
}

fn program<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut UProbe> {
    let p: &mut UProbe = ebpf
        .program_mut(name)
        .with_context(|| format!("program {name} missing"))?
        .try_into()?;
    Ok(p)
}

impl LdProbes {
    /// Loads the two programs and attaches them for the interpreter of /bin/sh.
    pub fn new(ebpf: &mut Ebpf) -> Result<Self> {
        program(ebpf, LD_PROGRAM)?.load()?;
        program(ebpf, LIBC_PROGRAM)?.load()?;
        let mut me = Self::default();
        match interp_of(Path::new("/bin/sh")) {
            Interp::Dynamic(interp) => me.attach_interpreter(ebpf, Path::new(&interp))?,
            _ => anyhow::bail!("/bin/sh has no ELF interpreter to find glibc's ld.so by"),
        }
        Ok(me)
    }

    /// Attaches to `interp` and to the `libc.so.6` in its directory, once per inode.
    pub fn attach_interpreter(&mut self, ebpf: &mut Ebpf, interp: &Path) -> Result<()> {
        let real = interp
            .canonicalize()
            .with_context(|| format!("resolve {}", interp.display()))?;
        let meta = std::fs::metadata(&real)?;
        if !self.inodes.insert((meta.dev(), meta.ino())) {
            return Ok(());
        }
        program(ebpf, LD_PROGRAM)?
            .attach("_dl_debug_state", &real, UProbeScope::AllProcesses)
            .with_context(|| format!("uprobe on {}:_dl_debug_state", real.display()))?;
        self.attached.push(real.clone());
        let libc = real.with_file_name("libc.so.6");
        program(ebpf, LIBC_PROGRAM)?
            .attach("__libc_start_main", &libc, UProbeScope::AllProcesses)
            .with_context(|| format!("uprobe on {}:__libc_start_main", libc.display()))?;
        self.attached.push(libc);
        Ok(())
    }

    /// Watches the session's records: a successful exec's binary may bring a new interpreter.
    pub fn watch(&mut self, ebpf: &mut Ebpf, record: &Record) {
        if let Record::Exec(r) = record
            && r.errno == 0
        {
            self.on_exec(ebpf, r.hdr.proc.pid, c_bytes(&r.path));
        }
    }

    /// Probes the interpreter of the binary `pid` has just exec'd, if it is new.
    pub fn on_exec(&mut self, ebpf: &mut Ebpf, pid: u32, path: &[u8]) {
        use std::os::unix::ffi::OsStrExt as _;
        if !path.starts_with(b"/") {
            return;
        }
        let rel = std::ffi::OsStr::from_bytes(&path[1..]);
        let root = PathBuf::from(format!("/proc/{pid}/root"));
        let root = if root.exists() {
            root
        } else {
            PathBuf::from("/")
        };
        let binary = root.join(rel);
        let (Ok(root_meta), Ok(meta)) = (std::fs::metadata(&root), std::fs::metadata(&binary))
        else {
            return;
        };
        let id = [root_meta.dev(), root_meta.ino(), meta.dev(), meta.ino()];
        if self.binaries.contains(&id) {
            return;
        }
        let interp = match interp_of(&binary) {
            // Not readable now (or not an ELF file): looked at again next time.
            Interp::Unknown => return,
            Interp::Static => {
                self.binaries.insert(id);
                return;
            }
            Interp::Dynamic(interp) => {
                self.binaries.insert(id);
                interp
            }
        };
        let interp = root.join(interp.trim_start_matches('/'));
        if let Err(e) = self.attach_interpreter(ebpf, &interp) {
            self.failed.push(format!("{e:#}"));
        }
    }

    pub fn describe(&self) -> String {
        let objects: Vec<String> = self
            .attached
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        let mut s = format!(
            "uprobe _dl_debug_state + __libc_start_main ({})",
            objects.join(", ")
        );
        if !self.failed.is_empty() {
            s.push_str(&format!("; not attached: {}", self.failed.join("; ")));
        }
        s
    }
}
