//! What a binary's ELF headers say about its loader, so that "statically linked: the
//! dynamic-linker phases are 0" is told apart from "not measured".
use std::collections::HashMap;
use std::path::Path;

use object::read::elf::ProgramHeader as _;

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
    let read = open_regular(path).and_then(|f| f.take(64).read_to_end(&mut head));
    read.is_ok()
        && matches!(
            object::FileKind::parse(&head[..]),
            Ok(object::FileKind::Elf32)
        )
}

/// The interpreter `path` names, from its ELF header, program headers and PT_INTERP
/// segment only, as the kernel reads them at exec: a few hundred bytes, whatever the size
/// of the file (cc1 is 33 MB, a test binary can be gigabytes).
pub fn interp_of(path: &Path) -> Interp {
    let Ok(file) = open_regular(path) else {
        return Interp::Unknown;
    };
    interp_in(&object::ReadCache::new(file))
}

/// Opens `path` for reading if it is a regular file, which every binary the kernel execs
/// is. A report looks up paths that a recording names, and a recording can name anything:
/// a FIFO or a terminal would block a plain open, and a device's open can act (a tape
/// rewinds, a watchdog arms). So the open does not wait (`O_NONBLOCK`), takes no
/// controlling terminal (`O_NOCTTY`), and anything but a regular file is closed unread.
fn open_regular(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok(file)
}

pub fn interp_of_bytes(data: &[u8]) -> Interp {
    interp_in(data)
}

/// The longest PT_INTERP the kernel accepts (`load_elf_binary`: `PATH_MAX`, with its NUL).
const INTERP_MAX: u64 = 4096;

fn interp_in<'data, R: object::ReadRef<'data>>(data: R) -> Interp {
    use object::elf::{FileHeader32, FileHeader64};
    match object::FileKind::parse(data) {
        Ok(object::FileKind::Elf64) => interp_with::<FileHeader64<object::Endianness>, R>(data),
        Ok(object::FileKind::Elf32) => interp_with::<FileHeader32<object::Endianness>, R>(data),
        _ => Interp::Unknown,
    }
}

fn interp_with<'data, Elf, R>(data: R) -> Interp
where
    Elf: object::read::elf::FileHeader<Endian = object::Endianness>,
    R: object::ReadRef<'data>,
{
    let Ok(header) = Elf::parse(data) else {
        return Interp::Unknown;
    };
    let Ok(endian) = header.endian() else {
        return Interp::Unknown;
    };
    let Ok(segments) = header.program_headers(endian, data) else {
        return Interp::Unknown;
    };
    // Nothing to load (an object file, a core without segments): no program.
    if segments.is_empty() {
        return Interp::Unknown;
    }
    let Some(interp) = segments
        .iter()
        .find(|ph| ph.p_type(endian) == object::elf::PT_INTERP)
    else {
        return Interp::Static;
    };
    if interp.p_filesz(endian).into() > INTERP_MAX {
        return Interp::Unknown;
    }
    match interp.interpreter(endian, data) {
        Ok(Some(name)) => Interp::Dynamic(String::from_utf8_lossy(name).into_owned()),
        _ => Interp::Unknown,
    }
}

/// Paths an `InterpCache` remembers at most. A `monitor` that runs for months on a host
/// whose binaries keep changing names (a CI runner's build outputs) would otherwise keep
/// every path it ever saw; reading a binary's headers again costs a few syscalls.
const CACHED_PATHS: usize = 4096;

/// Caches `interp_of` per path: for one report, or for a live session (bounded by
/// `CACHED_PATHS`, after which it starts afresh).
#[derive(Default)]
pub struct InterpCache(std::cell::RefCell<HashMap<Vec<u8>, Interp>>);

impl InterpCache {
    pub fn is_static(&self, path: &[u8]) -> bool {
        use std::os::unix::ffi::OsStrExt as _;
        if !path.starts_with(b"/") {
            return false;
        }
        let mut cache = self.0.borrow_mut();
        if cache.len() >= CACHED_PATHS && !cache.contains_key(path) {
            cache.clear();
        }
        cache
            .entry(path.to_vec())
            .or_insert_with(|| interp_of(Path::new(std::ffi::OsStr::from_bytes(path))))
            == &Interp::Static
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path that names a FIFO (which a plain open would wait on for a writer), a
    /// directory or a device is no binary: Unknown at once, and nothing is read from it.
    #[test]
    fn what_is_not_a_regular_file_is_unknown_without_blocking() {
        let dir = std::env::temp_dir().join(format!("forkprof-elf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // Run where a blocked open cannot hang the test run: the answer must come back.
        let (tx, rx) = std::sync::mpsc::channel();
        let probe = fifo.clone();
        std::thread::spawn(move || {
            let _ = tx.send((interp_of(&probe), is_32_bit(&probe)));
        });
        let answer = rx.recv_timeout(std::time::Duration::from_secs(10));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            answer,
            Ok((Interp::Unknown, false)),
            "a FIFO blocked the lookup"
        );
        assert_eq!(interp_of(Path::new("/dev/null")), Interp::Unknown);
        assert_eq!(interp_of(Path::new("/")), Interp::Unknown);
        assert!(!InterpCache::default().is_static(b"/dev/zero"));
    }

    #[test]
    fn non_elf_is_unknown() {
        assert_eq!(interp_of_bytes(b"#!/bin/sh\n"), Interp::Unknown);
        assert_eq!(interp_of_bytes(b""), Interp::Unknown);
        assert_eq!(
            interp_of(Path::new("/nonexistent/forkprof")),
            Interp::Unknown
        );
    }

    /// A minimal 64-bit little-endian executable: its header, `phdrs` program headers of
    /// (type, offset, size), and `tail` after them.
    fn elf64(phdrs: &[(u32, u64, u64)], tail: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(b"\x7fELF\x02\x01\x01");
        b.resize(16, 0);
        b.extend_from_slice(&2u16.to_le_bytes()); // ET_EXEC
        b.extend_from_slice(&62u16.to_le_bytes()); // EM_X86_64
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&0x40_1000u64.to_le_bytes()); // entry
        b.extend_from_slice(&64u64.to_le_bytes()); // phoff
        b.extend_from_slice(&0u64.to_le_bytes()); // shoff: no sections
        b.extend_from_slice(&0u32.to_le_bytes());
        for v in [64u16, 56, phdrs.len() as u16, 64, 0, 0] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        for &(kind, offset, size) in phdrs {
            b.extend_from_slice(&kind.to_le_bytes());
            b.extend_from_slice(&5u32.to_le_bytes());
            for v in [offset, 0x40_0000, 0x40_0000, size, size, 0x1000] {
                b.extend_from_slice(&v.to_le_bytes());
            }
        }
        b.extend_from_slice(tail);
        b
    }

    const PT_LOAD: u32 = 1;
    const PT_INTERP: u32 = 3;
    const LD: &[u8] = b"/lib64/ld-linux-x86-64.so.2\0";

    #[test]
    fn the_program_headers_say_static_dynamic_or_unknown() {
        let after_two = 64 + 2 * 56;
        assert_eq!(
            interp_of_bytes(&elf64(&[(PT_LOAD, 0, 0x200)], &[])),
            Interp::Static
        );
        let dynamic = elf64(
            &[(PT_INTERP, after_two, LD.len() as u64), (PT_LOAD, 0, 0x200)],
            LD,
        );
        assert_eq!(
            interp_of_bytes(&dynamic),
            Interp::Dynamic("/lib64/ld-linux-x86-64.so.2".into())
        );
        // Nothing to load: not a program.
        assert_eq!(interp_of_bytes(&elf64(&[], &[])), Interp::Unknown);
        // A PT_INTERP past the end of the file, longer than the kernel accepts, or without
        // its NUL: the kernel would refuse the exec, and nothing is claimed.
        let past_end = elf64(&[(PT_INTERP, 4096, 28), (PT_LOAD, 0, 0x200)], &[]);
        assert_eq!(interp_of_bytes(&past_end), Interp::Unknown);
        let too_long = elf64(&[(PT_INTERP, after_two, 5000), (PT_LOAD, 0, 0x200)], LD);
        assert_eq!(interp_of_bytes(&too_long), Interp::Unknown);
        let no_nul = elf64(&[(PT_INTERP, after_two, 4), (PT_LOAD, 0, 0x200)], b"/lib");
        assert_eq!(interp_of_bytes(&no_nul), Interp::Unknown);
        // Program headers cut short.
        assert_eq!(interp_of_bytes(&dynamic[..100]), Interp::Unknown);
    }

    /// The bytes this thread has read with read(2) and its kin (`rchar`).
    fn bytes_read() -> u64 {
        let io = std::fs::read_to_string("/proc/thread-self/io").unwrap();
        io.lines()
            .find_map(|l| l.strip_prefix("rchar: "))
            .unwrap()
            .parse()
            .unwrap()
    }

    #[test]
    fn a_binary_is_read_for_its_headers_not_whole() {
        let dir = std::env::temp_dir().join(format!("forkprof-elf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("big");
        let after_two = 64 + 2 * 56;
        let head = elf64(
            &[(PT_INTERP, after_two, LD.len() as u64), (PT_LOAD, 0, 0x200)],
            LD,
        );
        std::fs::write(&path, &head).unwrap();
        // 256 MiB, most of it a hole: read whole, it would be 256 MiB of reads.
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(256 << 20)
            .unwrap();
        let before = bytes_read();
        let interp = interp_of(&path);
        let read = bytes_read() - before;
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            interp,
            Interp::Dynamic("/lib64/ld-linux-x86-64.so.2".into())
        );
        assert!(read < 64 << 10, "read {read} bytes of a 256 MiB binary");
    }

    #[test]
    fn the_cache_stays_bounded_and_still_answers() {
        let cache = InterpCache::default();
        for i in 0..CACHED_PATHS + 10 {
            assert!(!cache.is_static(format!("/nonexistent/forkprof-{i}").as_bytes()));
        }
        assert!(cache.0.borrow().len() <= CACHED_PATHS);
        assert!(!cache.is_static(b"/bin/sh"));
        assert!(!cache.is_static(b"relative/path"));
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
