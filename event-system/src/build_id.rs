//! This build of the runtime, as every rank tells the others at start-up (with
//! [`crate::protocol::PROTOCOL_VERSION`]): ranks of different builds must not talk.
//!
//! The identifier is the GNU build-id note (`NT_GNU_BUILD_ID`) of the loaded object that holds
//! this code: the plugin's shared library (event-system is linked into it), or a test's
//! executable. The linker computes it over the whole output (Debian's gcc passes `--build-id`,
//! SHA-1 by default), so it changes with any change of the code that runs: ours, a dependency's,
//! the compiler, the build's options; and a rebuild of the same sources with the same toolchain
//! in the same directory gives the same one, which is then truly the same build. A hash over
//! our sources computed by a build script would miss dependency and toolchain changes, and
//! the crate's version changes too seldom to tell a stale build apart.
//!
//! The note is read from memory, from the program headers of the loaded object
//! (`dl_iterate_phdr`), not from the file: the file may have been rebuilt since it was loaded.
//! Linked without a build-id note (another linker's defaults), the identifier is an xxh3-128
//! of the loaded object's file instead, read once at start-up.

use std::sync::OnceLock;

/// Largest identifier carried (SHA-1 build ids are 20 bytes, some linkers write up to 32).
pub const MAX_LEN: usize = 32;

/// A build identifier: up to [`MAX_LEN`] bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct BuildId {
    bytes: [u8; MAX_LEN],
    len: u8,
}

impl BuildId {
    /// An identifier of these bytes (at most [`MAX_LEN`] are kept).
    pub fn new(bytes: &[u8]) -> BuildId {
        let len = bytes.len().min(MAX_LEN);
        let mut b = [0u8; MAX_LEN];
        b[..len].copy_from_slice(&bytes[..len]);
        BuildId { bytes: b, len: len as u8 }
    }

    /// The identifier's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    /// Lower-case hex, as `readelf -n` and `file` print a build id.
    pub fn hex(&self) -> String {
        self.as_bytes().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// This build's identifier (computed once).
    pub fn of_this_build() -> BuildId {
        static ID: OnceLock<BuildId> = OnceLock::new();
        *ID.get_or_init(|| {
            let anchor = BuildId::of_this_build as fn() -> BuildId as usize;
            match loaded_object(anchor) {
                Some((Some(note), _)) => BuildId::new(&note),
                Some((None, path)) => of_file(&path),
                None => of_file(std::path::Path::new("/proc/self/exe")),
            }
        })
    }
}

impl std::fmt::Debug for BuildId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BuildId({})", self.hex())
    }
}

impl std::fmt::Display for BuildId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.hex())
    }
}

/// The fallback identifier: xxh3-128 of a file's bytes (empty if it cannot be read, so that
/// two such ranks agree with each other and with nobody else).
fn of_file(path: &std::path::Path) -> BuildId {
    match std::fs::read(path) {
        Ok(bytes) => BuildId::new(&xxhash_rust::xxh3::xxh3_128(&bytes).to_le_bytes()),
        Err(_) => BuildId::new(&[]),
    }
}

const PT_LOAD: u32 = 1;
const PT_NOTE: u32 = 4;
const NT_GNU_BUILD_ID: u32 = 3;

/// The GNU build-id note of a note segment's bytes, if it has one.
pub(crate) fn build_id_in_notes(mut notes: &[u8]) -> Option<Vec<u8>> {
    let word = |b: &[u8], at: usize| -> Option<u32> { Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?)) };
    let align4 = |n: usize| n.checked_add(3).map(|n| n & !3);
    while notes.len() >= 12 {
        let (namesz, descsz, kind) = (word(notes, 0)? as usize, word(notes, 4)? as usize, word(notes, 8)?);
        let name_end = 12usize.checked_add(align4(namesz)?)?;
        let desc_end = name_end.checked_add(align4(descsz)?)?;
        let name = notes.get(12..12 + namesz)?;
        let desc = notes.get(name_end..name_end.checked_add(descsz)?)?;
        if kind == NT_GNU_BUILD_ID && name == b"GNU\0" {
            return Some(desc.to_vec());
        }
        notes = notes.get(desc_end..)?;
    }
    None
}

/// The loaded object holding address `addr`: its build-id note (None: it has none) and its
/// file.
fn loaded_object(addr: usize) -> Option<(Option<Vec<u8>>, std::path::PathBuf)> {
    struct Search {
        addr: usize,
        found: Option<(Option<Vec<u8>>, std::path::PathBuf)>,
    }
    unsafe extern "C" fn visit(info: *mut libc::dl_phdr_info, _size: libc::size_t, data: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `data` is the `Search` passed to dl_iterate_phdr below, alive for its call;
        // `info` is valid during this callback (glibc's contract), its program headers too.
        let (search, info) = unsafe { (&mut *data.cast::<Search>(), &*info) };
        if info.dlpi_phdr.is_null() {
            return 0;
        }
        // SAFETY: glibc gives `dlpi_phnum` headers at `dlpi_phdr`.
        let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
        let base = info.dlpi_addr as usize;
        let holds = phdrs.iter().any(|p| {
            let start = base.wrapping_add(p.p_vaddr as usize);
            p.p_type == PT_LOAD && search.addr >= start && search.addr - start < p.p_memsz as usize
        });
        if !holds {
            return 0;
        }
        let note = phdrs.iter().filter(|p| p.p_type == PT_NOTE).find_map(|p| {
            // SAFETY: a PT_NOTE segment of a loaded object lies inside one of its PT_LOAD
            // segments (the linker places it there), mapped readable for the object's life.
            let bytes = unsafe { std::slice::from_raw_parts(base.wrapping_add(p.p_vaddr as usize) as *const u8, p.p_filesz as usize) };
            build_id_in_notes(bytes)
        });
        // SAFETY: `dlpi_name` is null or a NUL-terminated string owned by the loader.
        let name = (!info.dlpi_name.is_null()).then(|| unsafe { std::ffi::CStr::from_ptr(info.dlpi_name) }.to_bytes().to_vec());
        // The main executable's name is empty.
        let path = match name.filter(|n| !n.is_empty()) {
            Some(n) => std::path::PathBuf::from(<std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(n)),
            None => std::path::PathBuf::from("/proc/self/exe"),
        };
        search.found = Some((note, path));
        1
    }
    let mut search = Search { addr, found: None };
    // SAFETY: the callback only reads what glibc passes it and writes `search`, which outlives
    // the call.
    unsafe { libc::dl_iterate_phdr(Some(visit), (&mut search as *mut Search).cast()) };
    search.found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The identifier is this test executable's build-id note, as `object` reads it from the
    /// file.
    #[test]
    fn the_build_id_is_the_note_of_the_loaded_object() {
        use object::{Object, ObjectSection};
        let id = BuildId::of_this_build();
        assert_eq!(id, BuildId::of_this_build());
        let exe = std::fs::read("/proc/self/exe").unwrap();
        let file = object::File::parse(&*exe).unwrap();
        let note = file.section_by_name(".note.gnu.build-id").expect("the test executable has a build-id note (Debian's gcc links with --build-id)");
        let data = note.data().unwrap();
        assert_eq!(id.as_bytes(), &build_id_in_notes(data).unwrap()[..]);
        assert_eq!(file.build_id().unwrap(), Some(id.as_bytes()));
        assert_eq!(id.hex().len(), 2 * id.as_bytes().len());
        assert!(id.as_bytes().len() >= 16, "{id:?}");
    }

    #[test]
    fn notes_are_parsed_within_their_bounds() {
        let note = |name: &[u8], kind: u32, desc: &[u8]| {
            let mut v = Vec::new();
            v.extend_from_slice(&(name.len() as u32).to_ne_bytes());
            v.extend_from_slice(&(desc.len() as u32).to_ne_bytes());
            v.extend_from_slice(&kind.to_ne_bytes());
            v.extend_from_slice(name);
            v.resize(v.len().next_multiple_of(4), 0);
            v.extend_from_slice(desc);
            v.resize(v.len().next_multiple_of(4), 0);
            v
        };
        let mut notes = note(b"GNU\0", 1, &[0; 16]); // an ABI tag first
        notes.extend(note(b"GNU\0", 3, &[0xab; 20]));
        assert_eq!(build_id_in_notes(&notes), Some(vec![0xab; 20]));
        assert_eq!(build_id_in_notes(&note(b"XYZ\0", 3, &[1; 20])), None);
        // Cut anywhere, or with sizes that point past the end: no identifier, no panic.
        for cut in 0..notes.len() {
            let _ = build_id_in_notes(&notes[..cut]);
        }
        let mut bad = note(b"GNU\0", 3, &[1; 8]);
        bad[4..8].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert_eq!(build_id_in_notes(&bad), None);
        assert_eq!(BuildId::new(&[7; 40]).as_bytes().len(), MAX_LEN);
    }
}
