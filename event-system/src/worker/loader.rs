//! A small ELF loader: puts a device image at a base address the head chose in the symmetric
//! heap, so that code, globals and statics of the image have the same addresses on every
//! worker (a pointer to a global is valid wherever it travels, and the image's writable data
//! can move between workers like any device buffer).
//!
//! Steps, as `ld.so` does them for one object: map each `PT_LOAD` at `base + p_vaddr` (over
//! the heap's `PROT_NONE` reservation) and copy its file bytes (the bss tail stays zero);
//! load the `DT_NEEDED` libraries (`RTLD_GLOBAL`, usually already in the process); apply the
//! RELA relocations of `DT_RELA` and `DT_JMPREL` eagerly, resolving the image's own symbols
//! to their loaded addresses, the allocation functions to device memory's
//! (`device_alloc.rs`), the x86-64 device runtime's entry points that flang-19's device code
//! calls (`__kmpc_target_init`, `__kmpc_parallel_51`, ...) to this process's copy of it
//! (the `device-rtl` crate, linked into the plugin: nothing needs to be linked into the
//! image) and the others with `dlsym(RTLD_DEFAULT)`; set each segment's
//! protection, then RELRO read-only; run `DT_INIT` and `DT_INIT_ARRAY`.
//!
//! Refused, with a [`LoadError`] naming the reason: thread-local storage (`PT_TLS`, TLS
//! relocations), IFUNCs (`R_X86_64_IRELATIVE`, `STT_GNU_IFUNC` symbols), copy relocations,
//! any relocation type not listed in [`relocate`], and images whose writable data does not
//! start on a page. Not done: `DT_FINI*` (images stay loaded until the process exits). The
//! image's `.eh_frame` is registered with libgcc's unwinder (`__register_frame`), since the
//! unwinder cannot find it through `dl_iterate_phdr`; debuggers and `dladdr` do not see it.

use crate::elf::{ElfError, ElfImage, Reloc};
use crate::heap::{HeapError, SymmetricHeap, PAGE};
use object::elf;
use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_char, c_int, CStr, CString};
use thiserror::Error;

/// Why an image could not be loaded.
#[derive(Debug, Error)]
pub(crate) enum LoadError {
    /// The image is malformed or uses something unsupported.
    #[error(transparent)]
    Elf(#[from] ElfError),
    /// The image does not fit the range the head reserved.
    #[error("the image needs {need} bytes of address space but {have} were reserved for it")]
    TooBig { need: u64, have: u64 },
    /// Mapping pages failed.
    #[error("cannot map the image: {0}")]
    Map(#[from] HeapError),
    /// `mprotect` failed.
    #[error("mprotect of {addr:#x}+{len} failed: {err}")]
    Protect { addr: u64, len: u64, err: std::io::Error },
    /// A relocation type the loader does not handle.
    #[error("unsupported relocation type {kind} ({what}) at {offset:#x}")]
    Relocation { kind: u32, what: &'static str, offset: u64 },
    /// A relocation outside the image's segments, or naming a missing symbol entry.
    #[error("malformed relocation at {0:#x}")]
    BadRelocation(u64),
    /// A symbol defined as an IFUNC.
    #[error("symbol {0} is an IFUNC (STT_GNU_IFUNC): not supported")]
    Ifunc(String),
    /// A non-weak undefined symbol not found in the process.
    #[error("undefined symbol {0} (not in the image, its DT_NEEDED libraries or the process)")]
    Undefined(String),
    /// An entry point of LLVM's GPU device runtime that the x86-64 device runtime lacks.
    #[error("the image calls {0}, an entry point of LLVM's GPU device runtime that the x86-64 device runtime (device-rtl) does not provide")]
    DeviceRuntime(String),
    /// A `DT_NEEDED` library that cannot be loaded.
    #[error("cannot load {lib}, needed by the image: {msg}")]
    Needed { lib: String, msg: String },
    /// A kernel the head named is not a symbol of the image.
    #[error("kernel {0} is not in the image's dynamic symbol table")]
    NoKernel(String),
}

/// A loaded image.
#[derive(Debug)]
pub(crate) struct Loaded {
    /// Kernel entry addresses, in the order asked for.
    pub(crate) kernels: Vec<usize>,
    /// The image's writable data (address, size): a device buffer of the head.
    pub(crate) data: Option<(u64, u64)>,
    /// Words of the writable data that hold this process's address of a symbol outside the
    /// image (`.got.plt` slots, pointers to library data), with their values here. These
    /// differ between workers (each maps the libraries elsewhere), so they must be restored
    /// whenever the data arrives from another rank.
    pub(crate) local_words: Vec<(u64, u64)>,
    /// Objects of the writable data holding the OpenMP runtime's per-process state
    /// (address, size): see [`ElfImage::runtime_private`].
    pub(crate) private: Vec<(u64, u64)>,
    /// Can its code write to standard output? False only when every function and object it
    /// takes from outside is [`silent`]: its kernels then print nothing, and a worker
    /// need not collect output after them.
    pub(crate) may_print: bool,
}

/// Symbols an image may take from the process without being able to print on standard output:
/// what clang-16 links into every device image, the C library's memory, string and math
/// functions, and the OpenMP runtime's entry points, except those that can print (a `parallel`
/// prints thread affinity when `OMP_DISPLAY_AFFINITY` is set, and `omp_display_*` print).
/// Anything else counts as able to print.
fn silent(name: &str) -> bool {
    const EXACT: &[&str] = &[
        "_ITM_deregisterTMCloneTable", "_ITM_registerTMCloneTable", "__cxa_finalize", "__cxa_atexit", "__gmon_start__",
        "__dso_handle", "__tls_get_addr", "__stack_chk_fail", "__errno_location",
        "memcpy", "memmove", "memset", "memcmp", "memchr", "strlen", "strnlen", "strcmp", "strncmp", "strchr", "strrchr",
        "strcpy", "strncpy", "strstr", "abs", "labs", "llabs", "qsort", "bsearch", "rand", "rand_r", "srand",
    ];
    const MATH: &[&str] = &[
        "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh", "exp", "exp2", "expm1", "log", "log2",
        "log10", "log1p", "pow", "sqrt", "cbrt", "hypot", "fabs", "floor", "ceil", "round", "trunc", "fmod", "fmin", "fmax",
        "fma", "erf", "erfc", "tgamma", "lgamma", "sincos", "ldexp", "frexp", "modf", "copysign", "nearbyint", "rint",
        "lround", "llround", "lrint",
    ];
    // A parallel region (libomp's fork, or the device runtime's `__kmpc_parallel_51`, which
    // forks) may print its threads' affinity.
    let forks = name.starts_with("__kmpc_fork") || name.starts_with("__kmpc_parallel");
    let libomp = (name.starts_with("__kmpc_") && !forks) || (name.starts_with("omp_") && !name.starts_with("omp_display"));
    let math = MATH.iter().any(|m| name == *m || name.strip_suffix(['f', 'l']) == Some(m));
    libomp || math || EXACT.contains(&name) || name.starts_with("__") && name.ends_with("_finite")
}

fn floor(a: u64) -> u64 {
    a & !(PAGE - 1)
}

fn ceil(a: u64) -> u64 {
    floor(a + PAGE - 1)
}

/// Load `bytes` at `base`, inside `[base, base+extent)` of `heap`, and resolve `kernels`.
pub(crate) fn load(heap: &SymmetricHeap, bytes: &[u8], base: u64, extent: u64, kernels: &[String]) -> Result<Loaded, LoadError> {
    let img = ElfImage::parse(bytes)?;
    if img.extent() > extent || !heap.contains(base, extent) {
        return Err(LoadError::TooBig { need: img.extent(), have: extent });
    }
    let data = img.writable_data()?.map(|(s, e)| (base + s, e - s));
    let kernels = kernels
        .iter()
        .map(|k| img.symbol(k).map(|v| (base + v) as usize).ok_or_else(|| LoadError::NoKernel(k.clone())))
        .collect::<Result<Vec<_>, _>>()?;
    let relocs = img.relocations()?;
    // Refuse before touching memory.
    for r in &relocs {
        check_kind(r)?;
    }
    load_needed(&img)?;
    map(heap, &img, base)?;
    let external = relocate(&img, base, &relocs)?;
    let may_print = relocs
        .iter()
        .filter(|r| r.sym != 0)
        .filter_map(|r| img.symbols.get(r.sym as usize))
        .any(|s| !s.defined && super::device_alloc::interposed(&s.name).is_none() && !silent(&s.name));
    let in_data = |a: u64, len: u64| data.is_some_and(|(d, n)| a >= d && a + len <= d + n);
    let local_words = external.into_iter().filter(|&(a, _)| in_data(a, 8)).collect();
    let private = img.runtime_private().iter().map(|&(a, n)| (base + a, n)).filter(|&(a, n)| in_data(a, n)).collect();
    protect(&img, base)?;
    register_unwind_info(&img, base);
    // What its static constructors allocate is this process's own memory, as always.
    let _loading = super::device_alloc::Loading::enter();
    // SAFETY: the image is mapped, relocated and protected at `base`; its initialisers are
    // ordinary functions of the image expecting exactly this (as after dlopen).
    unsafe { run_initialisers(&img, base) };
    Ok(Loaded { kernels, data, local_words, private, may_print })
}

/// Map the pages of every segment (read-write for now) and copy the file bytes.
fn map(heap: &SymmetricHeap, img: &ElfImage<'_>, base: u64) -> Result<(), LoadError> {
    // Merge page ranges first: two segments may share a page, and backing a page twice would
    // zero what the first copy put there.
    let mut ranges: Vec<(u64, u64)> = img.segments.iter().map(|s| (floor(s.vaddr), ceil(s.vaddr + s.memsz))).collect();
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (lo, hi) in ranges {
        match merged.last_mut() {
            Some(last) if lo <= last.1 => last.1 = last.1.max(hi),
            _ => merged.push((lo, hi)),
        }
    }
    for (lo, hi) in merged.into_iter().filter(|(lo, hi)| hi > lo) {
        heap.back(base + lo, hi - lo)?;
    }
    for s in &img.segments {
        let src = img.bytes_at(s.vaddr, s.filesz)?;
        // SAFETY: `base + vaddr .. + filesz` lies in pages just backed read-write (inside the
        // caller's claim of the heap), and `src` is a separate Rust slice of that length.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), (base + s.vaddr) as *mut u8, src.len()) };
    }
    Ok(())
}

fn check_kind(r: &Reloc) -> Result<(), LoadError> {
    let what = match r.kind {
        elf::R_X86_64_NONE | elf::R_X86_64_RELATIVE | elf::R_X86_64_64 | elf::R_X86_64_GLOB_DAT | elf::R_X86_64_JUMP_SLOT => {
            return Ok(())
        }
        elf::R_X86_64_IRELATIVE => "IRELATIVE: IFUNC",
        elf::R_X86_64_DTPMOD64 | elf::R_X86_64_DTPOFF64 | elf::R_X86_64_TPOFF64 | elf::R_X86_64_TLSDESC => "thread-local storage",
        elf::R_X86_64_COPY => "COPY",
        _ => "unknown",
    };
    Err(LoadError::Relocation { kind: r.kind, what, offset: r.offset })
}

fn dlerror() -> String {
    // SAFETY: dlerror returns null or a valid C string owned by libdl.
    unsafe {
        let e = libc::dlerror();
        if e.is_null() {
            "unknown error".into()
        } else {
            CStr::from_ptr(e).to_string_lossy().into_owned()
        }
    }
}

/// The device runtime's shared library, which the compile wrapper links flang's device
/// images against (the device linker wants a definition of every symbol): its entry points
/// are resolved to the plugin's own copy, so it is not loaded (it need not exist on the
/// workers' nodes).
pub(crate) const DEVICE_RUNTIME_LIBRARY: &str = "libompcluster_devrtl.so";

/// `dlopen` every `DT_NEEDED` library globally, so that `dlsym(RTLD_DEFAULT)` finds its
/// symbols (they are usually loaded already; `libgcc_s` may not be).
fn load_needed(img: &ElfImage<'_>) -> Result<(), LoadError> {
    let runpath = img.runpath()?;
    for lib in img.needed()? {
        if lib.rsplit('/').next() == Some(DEVICE_RUNTIME_LIBRARY) {
            continue;
        }
        let candidates = std::iter::once(lib.clone()).chain(runpath.iter().map(|d| format!("{d}/{lib}")));
        let mut msg = String::new();
        let loaded = candidates.into_iter().any(|path| {
            let Ok(c) = CString::new(path) else { return false };
            // SAFETY: `c` is a valid C string; loading a system library runs its initialisers
            // as any dlopen does (the stock plugin's dlopen of the image loads the same ones).
            let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
            if h.is_null() && msg.is_empty() {
                msg = dlerror();
            }
            !h.is_null() // the handle is kept open for the life of the process
        });
        if !loaded {
            return Err(LoadError::Needed { lib, msg });
        }
    }
    Ok(())
}

/// Apply the relocations (all pages are still writable). Returns the places (address, value)
/// patched with the address of a symbol outside the image.
fn relocate(img: &ElfImage<'_>, base: u64, relocs: &[Reloc]) -> Result<Vec<(u64, u64)>, LoadError> {
    let mut outside = Vec::new();
    let mut external: HashMap<u32, u64> = HashMap::new();
    let mut symbol = |idx: u32| -> Result<u64, LoadError> {
        if idx == 0 {
            return Ok(0);
        }
        let s = img.symbols.get(idx as usize).ok_or(LoadError::BadRelocation(u64::from(idx)))?;
        if s.kind == elf::STT_GNU_IFUNC {
            return Err(LoadError::Ifunc(s.name.clone()));
        }
        if s.defined {
            return Ok(if s.absolute { s.value } else { base + s.value });
        }
        if let Some(&v) = external.get(&idx) {
            return Ok(v);
        }
        if let Some(v) = super::device_alloc::interposed(&s.name) {
            // Memory device code allocates is device memory (see `device_alloc.rs`).
            external.insert(idx, v);
            return Ok(v);
        }
        if let Some(v) = ompcluster_devrtl::resolve(&s.name) {
            // The device runtime flang-19's device code calls (see `device-rtl`).
            let v = v as u64;
            external.insert(idx, v);
            return Ok(v);
        }
        let c = CString::new(s.name.as_str()).map_err(|_| LoadError::Undefined(s.name.clone()))?;
        // SAFETY: RTLD_DEFAULT (null) searches the global scope; `c` is a valid C string.
        let mut p = unsafe { libc::dlsym(std::ptr::null_mut(), c.as_ptr()) } as u64;
        if p == 0 {
            // Entry points of newer libomps that libomp 16 lacks (clang-19's
            // `__kmpc_dispatch_deinit`).
            p = ompcluster_devrtl::fallback(&s.name).map_or(0, |v| v as u64);
        }
        if p == 0 && !s.weak {
            if ompcluster_devrtl::is_device_runtime_name(&s.name) {
                return Err(LoadError::DeviceRuntime(s.name.clone()));
            }
            return Err(LoadError::Undefined(s.name.clone()));
        }
        external.insert(idx, p);
        Ok(p)
    };
    for r in relocs {
        let inside = img.segments.iter().any(|s| r.offset >= s.vaddr && r.offset.checked_add(8).is_some_and(|e| e <= s.vaddr + s.memsz));
        if !inside {
            return Err(LoadError::BadRelocation(r.offset));
        }
        let value = match r.kind {
            elf::R_X86_64_NONE => continue,
            elf::R_X86_64_RELATIVE => base.wrapping_add(r.addend as u64),
            elf::R_X86_64_64 | elf::R_X86_64_GLOB_DAT | elf::R_X86_64_JUMP_SLOT => {
                let v = symbol(r.sym)?.wrapping_add(r.addend as u64);
                if img.symbols.get(r.sym as usize).is_some_and(|s| !s.defined) {
                    outside.push((base + r.offset, v));
                }
                v
            }
            _ => return check_kind(r).map(|_| Vec::new()),
        };
        // SAFETY: the 8 bytes lie inside a segment mapped read-write by `map` (checked above).
        unsafe { std::ptr::write_unaligned((base + r.offset) as *mut u64, value) };
    }
    Ok(outside)
}

/// Give each page the protection of the segments on it, then make RELRO read-only.
fn protect(img: &ElfImage<'_>, base: u64) -> Result<(), LoadError> {
    let mut pages: BTreeMap<u64, c_int> = BTreeMap::new();
    for s in &img.segments {
        let mut prot = 0;
        if s.flags & elf::PF_R != 0 {
            prot |= libc::PROT_READ;
        }
        if s.flags & elf::PF_W != 0 {
            prot |= libc::PROT_WRITE;
        }
        if s.flags & elf::PF_X != 0 {
            prot |= libc::PROT_EXEC;
        }
        let mut p = floor(s.vaddr);
        while p < s.vaddr + s.memsz {
            *pages.entry(p).or_insert(0) |= prot;
            p += PAGE;
        }
    }
    if let Some((start, end)) = img.relro {
        // As ld.so: whole pages from the one RELRO starts in up to the one it ends in.
        let mut p = floor(start);
        while p < floor(end) {
            if let Some(prot) = pages.get_mut(&p) {
                *prot = libc::PROT_READ;
            }
            p += PAGE;
        }
    }
    let mut runs: Vec<(u64, u64, c_int)> = Vec::new();
    for (&p, &prot) in &pages {
        match runs.last_mut() {
            Some((_, hi, pr)) if *hi == p && *pr == prot => *hi += PAGE,
            _ => runs.push((p, p + PAGE, prot)),
        }
    }
    for (lo, hi, prot) in runs {
        let (addr, len) = (base + lo, hi - lo);
        // SAFETY: these pages belong to the image, mapped by `map`; only their protection
        // changes, and nothing runs from them yet.
        if unsafe { libc::mprotect(addr as *mut libc::c_void, len as usize, prot) } != 0 {
            return Err(LoadError::Protect { addr, len, err: std::io::Error::last_os_error() });
        }
    }
    Ok(())
}

/// Tell the unwinder (libgcc's, which libstdc++ uses) where the image's `.eh_frame` is, so
/// that C++ exceptions thrown in device code can be caught: `dlopen`ed objects are found
/// through `dl_iterate_phdr`, which does not know this image. Without `__register_frame` in
/// the process, exceptions stay unsupported (as `terminate`), nothing else changes.
fn register_unwind_info(img: &ElfImage<'_>, base: u64) {
    let Some(eh) = img.eh_frame else { return };
    // SAFETY: RTLD_DEFAULT lookup of a C string literal.
    let f = unsafe { libc::dlsym(std::ptr::null_mut(), c"__register_frame".as_ptr()) };
    if f.is_null() {
        return;
    }
    // SAFETY: `__register_frame(void *)` of libgcc takes the start of a zero-terminated
    // `.eh_frame` (the linker's crtend.o terminates it) and keeps the pointer: the image is
    // never unloaded, so it stays valid.
    unsafe {
        let register: extern "C" fn(*const u8) = std::mem::transmute::<*mut libc::c_void, extern "C" fn(*const u8)>(f);
        register((base + eh) as *const u8);
    }
}

/// Run `DT_INIT` then `DT_INIT_ARRAY` (C++ static constructors of device code).
///
/// # Safety
/// The image must be fully loaded at `base`.
unsafe fn run_initialisers(img: &ElfImage<'_>, base: u64) {
    type Init = extern "C" fn(c_int, *const *const c_char, *const *const c_char);
    static NO_ARGS: [usize; 1] = [0];
    extern "C" {
        static environ: *const *const c_char;
    }
    let call = |addr: u64| {
        if addr == 0 || addr == u64::MAX {
            return;
        }
        // SAFETY: `addr` is a relocated initialiser of the loaded image, with the signature
        // glibc calls initialisers with (argc, argv, envp); argv is an empty, valid list.
        unsafe {
            let f: Init = std::mem::transmute::<usize, Init>(addr as usize);
            f(0, NO_ARGS.as_ptr() as *const *const c_char, environ);
        }
    };
    if let Some(init) = img.init() {
        call(base + init);
    }
    if let Some((at, size)) = img.init_array() {
        for i in 0..size / 8 {
            // SAFETY: DT_INIT_ARRAY lies in the loaded image (RELRO, readable), relocated.
            let f = unsafe { std::ptr::read_unaligned((base + at + 8 * i) as *const u64) };
            call(f);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn only_known_silent_imports_make_an_image_silent() {
        for name in ["sinf", "expl", "sqrt", "memcpy", "__kmpc_for_static_init_4", "omp_get_thread_num", "__cxa_finalize", "__exp_finite"] {
            assert!(silent(name), "{name}");
        }
        for name in ["printf", "puts", "putchar", "write", "fwrite", "_ZNSolsEi", "__kmpc_fork_call", "__kmpc_fork_teams", "__kmpc_parallel_51", "omp_display_affinity", "stdout", "sinx"] {
            assert!(!silent(name), "{name}");
        }
    }

    /// An image calling the x86-64 device runtime (as flang-19's do) gets this process's copy
    /// of it, and its `DT_NEEDED` on the runtime's shared library (what the compile wrapper
    /// links against) is not loaded: the library is gone by the time the image loads.
    #[test]
    fn device_runtime_entry_points_resolve_to_the_plugins_copy() {
        let dir = tempfile::tempdir().unwrap();
        let (stub_src, stub) = (dir.path().join("stub.c"), dir.path().join(DEVICE_RUNTIME_LIBRARY));
        std::fs::write(&stub_src, "int __kmpc_target_init(void *k, void *l) { return 7; }\n").unwrap();
        let (src, so) = (dir.path().join("k.c"), dir.path().join("k.so"));
        std::fs::write(
            &src,
            r#"
extern int __kmpc_target_init(void *, void *);
extern void __kmpc_parallel_51(void);
int kernel(void) { return __kmpc_target_init(0, 0); }
void *which(void) { return (void *)&__kmpc_parallel_51; }
"#,
        )
        .unwrap();
        let cc = |args: &[&std::ffi::OsStr]| Command::new("cc").args(args).output();
        let Ok(out) = cc(&["-shared".as_ref(), "-fPIC".as_ref(), "-o".as_ref(), stub.as_os_str(), stub_src.as_os_str()]) else {
            eprintln!("no C compiler: skipped");
            return;
        };
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let libdir = format!("-L{}", dir.path().display());
        let out = cc(&["-shared".as_ref(), "-fPIC".as_ref(), "-o".as_ref(), so.as_os_str(), src.as_os_str(), libdir.as_ref(), "-lompcluster_devrtl".as_ref()]).unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        std::fs::remove_file(&stub).unwrap();
        let bytes = std::fs::read(&so).unwrap();
        let img = ElfImage::parse(&bytes).unwrap();
        assert!(img.needed().unwrap().iter().any(|l| l == DEVICE_RUNTIME_LIBRARY));
        let heap = SymmetricHeap::reserve_agreed(1 << 26, |ok| ok).unwrap();
        let names = vec!["kernel".to_string(), "which".to_string()];
        let loaded = load(&heap, &bytes, heap.base() + (1 << 22), img.extent(), &names).unwrap();
        type F = extern "C" fn() -> u64;
        // SAFETY: both are functions of the loaded test object with this signature.
        let call = |i: usize| unsafe { std::mem::transmute::<usize, F>(loaded.kernels[i])() };
        assert_eq!(call(0) as i32, -1, "the device runtime's __kmpc_target_init, not the stub's");
        assert_eq!(call(1) as usize, ompcluster_devrtl::resolve("__kmpc_parallel_51").unwrap());
    }

    /// Compile a small shared object with the system C compiler and load it twice-removed
    /// from where `dlopen` would put it: relocations (RELATIVE, GLOB_DAT, JUMP_SLOT, 64),
    /// constructors, RELRO and the writable data range must all come out right.
    #[test]
    fn loads_a_shared_object_at_a_chosen_base() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("t.c");
        let so = dir.path().join("t.so");
        std::fs::write(
            &src,
            r#"
#include <string.h>
int counter = 5;
static int hidden;
const char *msg = "hello";              /* RELATIVE (or 64) in .data */
int *const where = &counter;            /* in .data.rel.ro: RELRO */
static int ctor_ran;
__attribute__((constructor)) static void init(void) { ctor_ran = 42; }
int bump(void) { return ++hidden + counter; }
int *counter_addr(void) { return &counter; }  /* GLOB_DAT */
unsigned long msg_len(void) { return strlen(msg); }  /* JUMP_SLOT to libc */
int ctor(void) { return ctor_ran; }
int *where_fn(void) { return where; }
"#,
        )
        .unwrap();
        let Ok(out) = Command::new("cc").args(["-shared", "-fPIC", "-O1", "-o"]).arg(&so).arg(&src).output() else {
            eprintln!("no C compiler: skipped");
            return;
        };
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let bytes = std::fs::read(&so).unwrap();
        let heap = SymmetricHeap::reserve_agreed(1 << 28, |ok| ok).unwrap();
        let base = heap.base() + (1 << 24);
        let names: Vec<String> = ["bump", "counter_addr", "msg_len", "ctor", "where_fn"].iter().map(|s| s.to_string()).collect();
        let img = ElfImage::parse(&bytes).unwrap();
        let loaded = load(&heap, &bytes, base, img.extent(), &names).unwrap();
        type F = extern "C" fn() -> u64;
        // SAFETY: the kernels are functions of the loaded test object with these signatures.
        let call = |i: usize| unsafe { std::mem::transmute::<usize, F>(loaded.kernels[i])() };
        let counter = base + img.symbol("counter").unwrap();
        assert_eq!(call(1), counter, "GLOB_DAT resolved to the loaded copy");
        assert_eq!(call(0) as u32, 6);
        assert_eq!(call(2), 5, "strlen through the PLT");
        assert_eq!(call(3) as u32, 42, "constructor ran");
        assert_eq!(call(4), counter, "pointer in RELRO relocated");
        let (d, n) = loaded.data.unwrap();
        assert!(counter >= d && counter + 4 <= d + n, "counter is in the writable data");
        // strlen's slot is in .got.plt unless linked with -z now (then it is in RELRO).
        let strlen = loaded.local_words.iter().map(|&(_, v)| v).collect::<Vec<_>>();
        assert!(strlen.iter().all(|&v| v != 0 && !heap.contains(v, 1)), "{strlen:x?}");
        // SAFETY: `counter` is an int of the loaded image's data.
        unsafe { *(counter as *mut i32) = 10 };
        assert_eq!(call(0) as u32, 12);
        // A second load elsewhere is independent.
        let base2 = base + (1 << 22);
        let again = load(&heap, &bytes, base2, img.extent(), &names).unwrap();
        // SAFETY: as above.
        let f = unsafe { std::mem::transmute::<usize, F>(again.kernels[1]) };
        assert_eq!(f(), base2 + img.symbol("counter").unwrap());
        // Not enough room is refused.
        assert!(matches!(load(&heap, &bytes, base, PAGE, &names), Err(LoadError::TooBig { .. })));
    }
}
