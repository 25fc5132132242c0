//! What the launcher checks of the program and the plugin before any rank starts: the
//! libraries they need, what kind of program it is (built with offloading, by which
//! compiler), and the cases the cluster cannot serve.

use object::{Object, ObjectSection};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What `ldd` says of `plugin` with `LD_LIBRARY_PATH=ld`: the libraries the loader cannot
/// find, and the directory it finds VeloC's client library in (if the plugin links it).
/// `None` if `ldd` cannot tell.
pub(crate) fn plugin_libraries(plugin: &Path, ld: &OsString) -> Option<(Vec<String>, Option<PathBuf>)> {
    let out = Command::new("ldd").arg(plugin).env("LD_LIBRARY_PATH", ld).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let missing: Vec<String> =
        text.lines().filter(|l| l.contains("=> not found")).filter_map(|l| l.split_whitespace().next().map(str::to_string)).collect();
    let veloc = text.lines().find_map(|l| {
        let (name, rest) = l.trim().split_once(" => ")?;
        let path = rest.split_whitespace().next()?;
        (name == "libveloc-client.so" && path.starts_with('/')).then(|| Path::new(path).parent().map(Path::to_path_buf))?
    });
    Some((missing, veloc))
}

pub(crate) fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| is_executable(p))
}

pub(crate) fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata().map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
}

/// What kind of program this is.
pub(crate) enum ProgramKind {
    /// Carries device code in `.llvm.offloading`.
    Offloading,
    /// An OpenMP program without device code of its own (it may `dlopen` a library that
    /// has some).
    OpenMp,
    /// A plain MPI program such as `ompcluster-ftbench`: it handles rank failures itself, so
    /// mpirun must let survivors go on (`--enable-recovery`).
    PlainMpi,
}

pub(crate) fn program_kind(path: &Path) -> Result<ProgramKind, String> {
    let data = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let file = object::File::parse(&*data).map_err(|_| format!("{} is not an ELF executable", path.display()))?;
    if file.section_by_name(".llvm.offloading").is_some() {
        return Ok(ProgramKind::Offloading);
    }
    let imports = file.imports().unwrap_or_default();
    let imports_any = |prefixes: &[&[u8]]| imports.iter().any(|i| prefixes.iter().any(|p| i.name().starts_with(p)));
    if imports_any(&[b"MPI_", b"PMPI_"]) {
        return Ok(ProgramKind::PlainMpi);
    }
    // Linked with libomptarget or libomp (it may dlopen a library that has device code).
    let dynstr = file.section_by_name(".dynstr").and_then(|s| s.data().ok()).unwrap_or_default();
    let needs = |lib: &[u8]| dynstr.windows(lib.len()).any(|w| w == lib);
    if imports_any(&[b"__kmpc_", b"omp_", b"__tgt_"]) || needs(b"libomptarget.so") || needs(b"libomp.so") {
        return Ok(ProgramKind::OpenMp);
    }
    Err(format!(
        "{} was not compiled for offloading (it has no .llvm.offloading section): compile it with ompcluster-cc, ompcluster-c++ or ompcluster-fortran (beside this launcher), or clang-16 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu",
        path.display()
    ))
}

/// Refuse, before any rank starts, a program the cluster cannot serve: one built by clang-20
/// or later (offload entries libomptarget 16 cannot read), one that needs another LLVM's
/// libomptarget (LLVM 17 and later load no plugin from outside), or one whose libraries do
/// not load (the message names them).
pub(crate) fn check_program(path: &Path, ld: &OsString) -> Result<(), String> {
    let data = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let file = object::File::parse(&*data).map_err(|_| format!("{} is not an ELF executable", path.display()))?;
    let comment: Vec<String> = file
        .section_by_name(".comment")
        .and_then(|s| s.data().ok())
        .map(|d| d.split(|&b| b == 0).filter(|s| !s.is_empty()).map(|s| String::from_utf8_lossy(s).into_owned()).collect())
        .unwrap_or_default();
    let sections: Vec<(String, u64)> = file.sections().filter_map(|s| Some((s.name().ok()?.to_string(), s.size()))).collect();
    let sections: Vec<(&str, u64)> = sections.iter().map(|(n, z)| (n.as_str(), *z)).collect();
    let clangs = event_system::compilers::host_program_compiler(comment.iter().map(String::as_str), &sections)
        .map_err(|e| format!("{} cannot run on the cluster: {e}", path.display()))?;
    let compiled_by = match clangs.last() {
        Some(v) => format!("clang-{v}"),
        None => "its compiler".into(),
    };
    let needed = needed_libraries(&data);
    if let Some(other) = needed.iter().find(|l| l.starts_with("libomptarget.so.") && l.as_str() != "libomptarget.so.16") {
        let llvm = other.trim_start_matches("libomptarget.so.").split('.').next().unwrap_or("?").to_string();
        return Err(format!(
            "{} needs {other}, the offloading runtime of LLVM {llvm}, which loads no plugin from outside: it was linked by {compiled_by} against its own OpenMP runtime; build it with ompcluster-cc, ompcluster-c++ or ompcluster-fortran (OMPCLUSTER_CC=clang-{llvm} for instance), which link it against libomptarget 16, into which the cluster plugs",
            path.display()
        ));
    }
    let missing = missing_libraries(path, ld);
    if !missing.is_empty() {
        return Err(format!(
            "{} cannot start: {} not found (LD_LIBRARY_PATH={}); it was built by {compiled_by} against libraries this machine lacks or keeps elsewhere",
            path.display(),
            missing.join(", "),
            ld.to_string_lossy()
        ));
    }
    Ok(())
}

/// The `DT_NEEDED` names of an ELF file.
pub(crate) fn needed_libraries(data: &[u8]) -> Vec<String> {
    use object::read::elf::{Dyn as _, FileHeader as _, ProgramHeader as _};
    let Ok(header) = object::elf::FileHeader64::<object::LittleEndian>::parse(data) else { return Vec::new() };
    let Ok(endian) = header.endian() else { return Vec::new() };
    let Ok(sections) = header.sections(endian, data) else { return Vec::new() };
    let Ok(phdrs) = header.program_headers(endian, data) else { return Vec::new() };
    let Some(dynamic) = phdrs.iter().find_map(|ph| ph.dynamic(endian, data).ok().flatten()) else { return Vec::new() };
    let Some(strings) = sections.section_by_name(endian, b".dynstr").and_then(|(_, s)| {
        use object::read::elf::SectionHeader as _;
        s.data(endian, data).ok()
    }) else {
        return Vec::new();
    };
    dynamic
        .iter()
        .filter(|d| d.d_tag(endian) == u64::from(object::elf::DT_NEEDED))
        .filter_map(|d| {
            let at = d.d_val(endian) as usize;
            let rest = strings.get(at..)?;
            let end = rest.iter().position(|&b| b == 0)?;
            Some(String::from_utf8_lossy(&rest[..end]).into_owned())
        })
        .collect()
}

/// The libraries `ldd` cannot find for `path` with `LD_LIBRARY_PATH=ld` (none if `ldd`
/// cannot tell).
pub(crate) fn missing_libraries(path: &Path, ld: &OsString) -> Vec<String> {
    let Ok(out) = Command::new("ldd").arg(path).env("LD_LIBRARY_PATH", ld).output() else { return Vec::new() };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("=> not found"))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}
