//! Device images as ELF files: what the head needs to place an image in the symmetric heap
//! (its extent, its writable data, the values of its symbols) and what a worker's loader needs
//! to load it there (segments, RELRO, dynamic table, relocations, dynamic symbols).
//!
//! Only what clang-16 to clang-19 and flang-19 produce for
//! `-fopenmp-targets=x86_64-pc-linux-gnu` is accepted: a little-endian x86-64 `ET_DYN` object
//! without TLS, whose dynamic relocations are RELA. Everything else is refused with an [`ElfError`] naming the reason.

use crate::heap::{page_round, PAGE};
use object::elf;
use object::read::elf::{Dyn as _, FileHeader as _, ProgramHeader as _, SectionHeader as _, Sym as _};
use object::LittleEndian as LE;
use thiserror::Error;

/// Why an image cannot be placed or loaded.
#[derive(Debug, Error)]
pub enum ElfError {
    /// The bytes are not a well-formed ELF image.
    #[error("malformed device image: {0}")]
    Malformed(String),
    /// A well-formed image uses something the loader does not support.
    #[error("unsupported device image: {0}")]
    Unsupported(String),
}

fn malformed(e: impl std::fmt::Display) -> ElfError {
    ElfError::Malformed(e.to_string())
}

/// One `PT_LOAD` segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Address relative to the image base.
    pub vaddr: u64,
    /// Size in memory (the tail past `filesz` is zero-filled).
    pub memsz: u64,
    /// Offset of its bytes in the file.
    pub offset: u64,
    /// Bytes taken from the file.
    pub filesz: u64,
    /// `PF_R | PF_W | PF_X`.
    pub flags: u32,
}

/// One entry of the dynamic symbol table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DynSymbol {
    /// Name.
    pub name: String,
    /// Value (relative to the base unless `absolute`).
    pub value: u64,
    /// Defined in this image (not `SHN_UNDEF`).
    pub defined: bool,
    /// `SHN_ABS`: the value is not relative to the base.
    pub absolute: bool,
    /// `STB_WEAK`.
    pub weak: bool,
    /// `STT_*`.
    pub kind: u8,
}

/// One dynamic relocation (RELA).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reloc {
    /// Place to patch, relative to the base.
    pub offset: u64,
    /// `R_X86_64_*`.
    pub kind: u32,
    /// Index in the dynamic symbol table (0: none).
    pub sym: u32,
    /// Addend.
    pub addend: i64,
}

/// A parsed device image.
#[derive(Debug)]
pub struct ElfImage<'a> {
    bytes: &'a [u8],
    /// The `PT_LOAD` segments, in file order.
    pub segments: Vec<Segment>,
    /// `PT_GNU_RELRO`: `[start, end)` relative to the base.
    pub relro: Option<(u64, u64)>,
    dynamic: Vec<(u64, u64)>,
    /// The dynamic symbol table, by index.
    pub symbols: Vec<DynSymbol>,
    /// Objects of the OpenMP runtime's own state (see [`ElfImage::runtime_private`]).
    private: Vec<(u64, u64)>,
    /// Address of `.eh_frame` (relative to the base), if the image has one.
    pub eh_frame: Option<u64>,
    /// The strings of the `.comment` section: the compilers and linkers that made it
    /// (`Debian clang version 19.1.7 (3~deb12u1)`, `GCC: (Debian 12.2.0-14+deb12u1)
    /// 12.2.0`; flang-19 writes none of its own). See [`crate::compilers`].
    pub comment: Vec<String>,
}

/// Objects that the OpenMP runtime (libomp) of each process fills with that process's own
/// pointers: the lock word of a `critical` construct or of a reduction
/// (`.gomp_critical_user_*`, which libomp sets to a lock it allocates on first use), and the
/// cache of a `threadprivate` variable (`*.cache.`). Their contents mean nothing in another
/// process.
fn is_runtime_private(name: &[u8]) -> bool {
    name.starts_with(b".gomp_critical_user_") || name.ends_with(b".cache.")
}

impl<'a> ElfImage<'a> {
    /// Parse and check an image.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, ElfError> {
        let header = elf::FileHeader64::<LE>::parse(bytes).map_err(malformed)?;
        let endian = header.endian().map_err(malformed)?;
        if header.e_machine(endian) != elf::EM_X86_64 {
            return Err(ElfError::Unsupported(format!("machine {} is not x86-64", header.e_machine(endian))));
        }
        if header.e_type(endian) != elf::ET_DYN {
            return Err(ElfError::Unsupported("not a shared object (ET_DYN)".into()));
        }
        let mut segments = Vec::new();
        let mut relro = None;
        let mut dynamic = Vec::new();
        for ph in header.program_headers(endian, bytes).map_err(malformed)? {
            let (vaddr, memsz) = (ph.p_vaddr(endian), ph.p_memsz(endian));
            match ph.p_type(endian) {
                elf::PT_LOAD => {
                    let (offset, filesz) = (ph.p_offset(endian), ph.p_filesz(endian));
                    let in_file = offset.checked_add(filesz).is_some_and(|e| e <= bytes.len() as u64);
                    if filesz > memsz || !in_file || vaddr.checked_add(memsz).is_none_or(|e| e > (4 << 30)) {
                        return Err(ElfError::Malformed(format!("PT_LOAD at {vaddr:#x} is out of bounds")));
                    }
                    segments.push(Segment { vaddr, memsz, offset, filesz, flags: ph.p_flags(endian) });
                }
                elf::PT_TLS => return Err(ElfError::Unsupported("thread-local storage (PT_TLS)".into())),
                elf::PT_GNU_RELRO => relro = Some((vaddr, vaddr.saturating_add(memsz))),
                elf::PT_DYNAMIC => {
                    let dyns = ph.dynamic(endian, bytes).map_err(malformed)?.unwrap_or(&[]);
                    for d in dyns {
                        let tag = d.d_tag(endian);
                        if tag == u64::from(elf::DT_NULL) {
                            break;
                        }
                        dynamic.push((tag, d.d_val(endian)));
                    }
                }
                _ => {}
            }
        }
        if segments.is_empty() {
            return Err(ElfError::Malformed("no PT_LOAD segment".into()));
        }
        let sections = header.sections(endian, bytes).map_err(malformed)?;
        let table = sections.symbols(endian, bytes, elf::SHT_DYNSYM).map_err(malformed)?;
        let strings = table.strings();
        let symbols = table
            .iter()
            .map(|s| {
                let name = s.name(endian, strings).map_err(malformed)?;
                let shndx = s.st_shndx(endian);
                Ok(DynSymbol {
                    name: String::from_utf8_lossy(name).into_owned(),
                    value: s.st_value(endian),
                    defined: shndx != elf::SHN_UNDEF,
                    absolute: shndx == elf::SHN_ABS,
                    weak: s.st_bind() == elf::STB_WEAK,
                    kind: s.st_type(),
                })
            })
            .collect::<Result<Vec<_>, ElfError>>()?;
        // The runtime's objects may be local symbols: look in the full table too, if present.
        let mut private = Vec::new();
        for kind in [elf::SHT_DYNSYM, elf::SHT_SYMTAB] {
            let table = sections.symbols(endian, bytes, kind).map_err(malformed)?;
            for s in table.iter() {
                let Ok(name) = s.name(endian, table.strings()) else { continue };
                let size = s.st_size(endian);
                if s.st_shndx(endian) != elf::SHN_UNDEF && size > 0 && is_runtime_private(name) {
                    private.push((s.st_value(endian), size));
                }
            }
        }
        private.sort_unstable();
        private.dedup();
        let eh_frame = sections
            .section_by_name(endian, b".eh_frame")
            .map(|(_, sh)| sh.sh_addr(endian))
            .filter(|&a| a != 0 && segments.iter().any(|s| a >= s.vaddr && a < s.vaddr + s.memsz));
        let comment = sections
            .section_by_name(endian, b".comment")
            .and_then(|(_, sh)| sh.data(endian, bytes).ok())
            .map(|d| d.split(|&b| b == 0).filter(|s| !s.is_empty()).map(|s| String::from_utf8_lossy(s).into_owned()).collect())
            .unwrap_or_default();
        Ok(ElfImage { bytes, segments, relro, dynamic, symbols, private, eh_frame, comment })
    }

    /// Bytes of address space the image needs from its base: the end of its highest segment,
    /// rounded up to a page.
    pub fn extent(&self) -> u64 {
        page_round(self.segments.iter().map(|s| s.vaddr + s.memsz).max().unwrap_or(0))
    }

    /// The writable data that stays writable after loading: from the end of RELRO (or the
    /// start of the first writable segment) to the end of the last writable segment
    /// (`.data`, `omp_offloading_entries`, `.bss`, ...). `None` if there is none. It must
    /// start on a page so that it can be handled like any device buffer.
    pub fn writable_data(&self) -> Result<Option<(u64, u64)>, ElfError> {
        let writable = || self.segments.iter().filter(|s| s.flags & elf::PF_W != 0);
        let (Some(first), Some(end)) = (writable().map(|s| s.vaddr).min(), writable().map(|s| s.vaddr + s.memsz).max()) else {
            return Ok(None);
        };
        let start = self.relro.map_or(first, |(_, e)| e.max(first));
        if end <= start {
            return Ok(None);
        }
        if start % PAGE != 0 {
            return Err(ElfError::Unsupported(format!(
                "its writable data starts at {start:#x}, not on a page boundary (linked with lld?)"
            )));
        }
        Ok(Some((start, end)))
    }

    /// The objects of the OpenMP runtime's per-process state in this image (address relative
    /// to the base, size): they must never be overwritten with another process's bytes.
    pub fn runtime_private(&self) -> &[(u64, u64)] {
        &self.private
    }

    /// Does the image define a kernel environment (`<kernel>_kernel_environment`), which
    /// OpenMPIRBuilder's device code generation (LLVM 18 and later: flang, clang for GPUs)
    /// emits for every kernel and passes to `__kmpc_target_init`?
    pub fn has_kernel_environments(&self) -> bool {
        self.symbols.iter().any(|s| s.defined && s.name.starts_with("__omp_offloading_") && s.name.ends_with("_kernel_environment"))
    }

    /// The value of the defined dynamic symbol `name` (relative to the base).
    pub fn symbol(&self, name: &str) -> Option<u64> {
        self.symbols.iter().find(|s| s.defined && !s.absolute && s.name == name).map(|s| s.value)
    }

    /// Values of the dynamic entries with tag `tag`, in order.
    pub fn dynamic(&self, tag: u32) -> impl Iterator<Item = u64> + '_ {
        self.dynamic.iter().filter(move |(t, _)| *t == u64::from(tag)).map(|&(_, v)| v)
    }

    fn dyn_one(&self, tag: u32) -> Option<u64> {
        self.dynamic(tag).next()
    }

    /// `len` bytes of the file at address `vaddr` (they must lie in one segment's file part).
    pub fn bytes_at(&self, vaddr: u64, len: u64) -> Result<&'a [u8], ElfError> {
        let s = self
            .segments
            .iter()
            .find(|s| vaddr >= s.vaddr && vaddr.checked_add(len).is_some_and(|e| e <= s.vaddr + s.filesz))
            .ok_or_else(|| ElfError::Malformed(format!("{len} bytes at {vaddr:#x} are not in the file")))?;
        let at = (s.offset + (vaddr - s.vaddr)) as usize;
        Ok(&self.bytes[at..at + len as usize])
    }

    fn string(&self, offset: u64) -> Result<String, ElfError> {
        let (Some(tab), Some(size)) = (self.dyn_one(elf::DT_STRTAB), self.dyn_one(elf::DT_STRSZ)) else {
            return Err(ElfError::Malformed("no dynamic string table".into()));
        };
        let tab = self.bytes_at(tab, size)?;
        let rest = tab.get(offset as usize..).ok_or_else(|| ElfError::Malformed("string offset out of range".into()))?;
        let len = rest.iter().position(|&b| b == 0).ok_or_else(|| ElfError::Malformed("unterminated string".into()))?;
        Ok(String::from_utf8_lossy(&rest[..len]).into_owned())
    }

    /// The `DT_NEEDED` libraries.
    pub fn needed(&self) -> Result<Vec<String>, ElfError> {
        self.dynamic(elf::DT_NEEDED).map(|o| self.string(o)).collect()
    }

    /// The `DT_RUNPATH` (or `DT_RPATH`) directories.
    pub fn runpath(&self) -> Result<Vec<String>, ElfError> {
        let mut dirs = Vec::new();
        for o in self.dynamic(elf::DT_RUNPATH).chain(self.dynamic(elf::DT_RPATH)) {
            dirs.extend(self.string(o)?.split(':').filter(|d| !d.is_empty()).map(str::to_owned));
        }
        Ok(dirs)
    }

    /// The dynamic relocations: `DT_RELA` (`.rela.dyn`) then `DT_JMPREL` (`.rela.plt`).
    pub fn relocations(&self) -> Result<Vec<Reloc>, ElfError> {
        if self.dyn_one(elf::DT_REL).is_some() {
            return Err(ElfError::Unsupported("REL relocations (DT_REL)".into()));
        }
        if self.dyn_one(elf::DT_PLTREL).is_some_and(|k| k != u64::from(elf::DT_RELA)) {
            return Err(ElfError::Unsupported("PLT relocations that are not RELA".into()));
        }
        let mut tables = Vec::new();
        if let Some(at) = self.dyn_one(elf::DT_RELA) {
            tables.push((at, self.dyn_one(elf::DT_RELASZ).unwrap_or(0)));
        }
        if let Some(at) = self.dyn_one(elf::DT_JMPREL) {
            tables.push((at, self.dyn_one(elf::DT_PLTRELSZ).unwrap_or(0)));
        }
        let mut out = Vec::new();
        for (at, size) in tables {
            for e in self.bytes_at(at, size)?.chunks_exact(24) {
                let word = |i: usize| u64::from_le_bytes(e[i..i + 8].try_into().expect("8 bytes"));
                let info = word(8);
                out.push(Reloc { offset: word(0), kind: info as u32, sym: (info >> 32) as u32, addend: word(16) as i64 });
            }
        }
        Ok(out)
    }

    /// `DT_INIT`, if any.
    pub fn init(&self) -> Option<u64> {
        self.dyn_one(elf::DT_INIT)
    }

    /// `DT_INIT_ARRAY` and its size in bytes, if any.
    pub fn init_array(&self) -> Option<(u64, u64)> {
        Some((self.dyn_one(elf::DT_INIT_ARRAY)?, self.dyn_one(elf::DT_INIT_ARRAYSZ).unwrap_or(0)))
    }
}
