//! What a binary's ELF headers say about its loader, so that "statically linked: the
//! dynamic-linker phases are 0" is told apart from "not measured".
use std::collections::HashMap;
use std::path::Path;

use object::{Object as _, read::elf::ProgramHeader as _};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Loader {
    /// No PT_INTERP: nothing runs before the program's own start-up code.
    Static,
    /// PT_INTERP names this interpreter.
    Dynamic(String),
    /// Not an ELF file we could read (script, relative path, deleted binary ...).
    Unknown,
}

pub fn loader_of(path: &Path) -> Loader {
    let Ok(data) = std::fs::read(path) else {
        return Loader::Unknown;
    };
    loader_of_bytes(&data)
}

pub fn loader_of_bytes(data: &[u8]) -> Loader {
    let Ok(file) = object::File::parse(data) else {
        return Loader::Unknown;
    };
    if file.segments().next().is_none() {
        return Loader::Unknown;
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
        _ => return Loader::Unknown,
    };
    match interp {
        Some(i) => Loader::Dynamic(String::from_utf8_lossy(i).into_owned()),
        None => Loader::Static,
    }
}

/// Caches `loader_of` per path for one report.
#[derive(Default)]
pub struct LoaderCache(std::cell::RefCell<HashMap<Vec<u8>, Loader>>);

impl LoaderCache {
    pub fn is_static(&self, path: &[u8]) -> bool {
        use std::os::unix::ffi::OsStrExt as _;
        if !path.starts_with(b"/") {
            return false;
        }
        self.0
            .borrow_mut()
            .entry(path.to_vec())
            .or_insert_with(|| loader_of(Path::new(std::ffi::OsStr::from_bytes(path))))
            == &Loader::Static
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_elf_is_unknown() {
        assert_eq!(loader_of_bytes(b"#!/bin/sh\n"), Loader::Unknown);
        assert_eq!(loader_of_bytes(b""), Loader::Unknown);
        assert_eq!(
            loader_of(Path::new("/nonexistent/forkprof")),
            Loader::Unknown
        );
    }

    #[test]
    fn system_binary_has_an_interpreter() {
        // /bin/sh is dynamically linked on every distribution forkprof supports.
        assert!(matches!(
            loader_of(Path::new("/bin/sh")),
            Loader::Dynamic(_)
        ));
    }
}
