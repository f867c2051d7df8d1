//! What a binary's ELF headers say about its loader, so that "statically linked: the
//! dynamic-linker phases are 0" is told apart from "not measured".
use std::collections::HashMap;
use std::path::Path;

use object::{Object as _, read::elf::ProgramHeader as _};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Interp {
    /// No PT_INTERP: nothing runs before the program's own start-up code.
    Static,
    /// PT_INTERP names this interpreter.
    Dynamic(String),
    /// Not an ELF file we could read (script, relative path, deleted binary ...).
    Unknown,
}

/// Whether `path` is a 32-bit ELF file (a 32-bit process once exec'd); false for anything
/// else, or what cannot be read. Reads the header only.
pub fn is_32_bit(path: &Path) -> bool {
    use std::io::Read as _;
    let mut head = Vec::with_capacity(64);
    let read = std::fs::File::open(path).and_then(|f| f.take(64).read_to_end(&mut head));
    read.is_ok()
        && matches!(
            object::FileKind::parse(&head[..]),
            Ok(object::FileKind::Elf32)
        )
}

pub fn interp_of(path: &Path) -> Interp {
    let Ok(data) = std::fs::read(path) else {
        return Interp::Unknown;
    };
    interp_of_bytes(&data)
}

pub fn interp_of_bytes(data: &[u8]) -> Interp {
    let Ok(file) = object::File::parse(data) else {
        return Interp::Unknown;
    };
    if file.segments().next().is_none() {
        return Interp::Unknown;
    }
    let interp = match &file {
        object::File::Elf64(elf) => elf
            .elf_program_headers()
            .iter()
            .find_map(|ph| ph.interpreter(elf.endian(), elf.data()).ok().flatten()),
        object::File::Elf32(elf) => elf
            .elf_program_headers()
            .iter()
            .find_map(|ph| ph.interpreter(elf.endian(), elf.data()).ok().flatten()),
        _ => return Interp::Unknown,
    };
    match interp {
        Some(i) => Interp::Dynamic(String::from_utf8_lossy(i).into_owned()),
        None => Interp::Static,
    }
}

/// Caches `interp_of` per path for one report.
#[derive(Default)]
pub struct InterpCache(std::cell::RefCell<HashMap<Vec<u8>, Interp>>);

impl InterpCache {
    pub fn is_static(&self, path: &[u8]) -> bool {
        use std::os::unix::ffi::OsStrExt as _;
        if !path.starts_with(b"/") {
            return false;
        }
        self.0
            .borrow_mut()
            .entry(path.to_vec())
            .or_insert_with(|| interp_of(Path::new(std::ffi::OsStr::from_bytes(path))))
            == &Interp::Static
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_elf_is_unknown() {
        assert_eq!(interp_of_bytes(b"#!/bin/sh\n"), Interp::Unknown);
        assert_eq!(interp_of_bytes(b""), Interp::Unknown);
        assert_eq!(
            interp_of(Path::new("/nonexistent/forkprof")),
            Interp::Unknown
        );
    }

    #[test]
    fn system_binary_has_an_interpreter() {
        // /bin/sh is dynamically linked on every distribution forkprof supports.
        assert!(matches!(
            interp_of(Path::new("/bin/sh")),
            Interp::Dynamic(_)
        ));
    }
}
