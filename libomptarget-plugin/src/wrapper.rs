//! The compile wrappers `ompcluster-cc`, `ompcluster-c++` (`ompcluster-cxx`) and
//! `ompcluster-fortran`, as MPI has `mpicc`: they run the compiler named by `OMPCLUSTER_CC`,
//! `OMPCLUSTER_CXX` or `OMPCLUSTER_FC` (defaults clang-16, clang++-16, flang-new-19) with every
//! argument given, adding what offloading to the cluster needs:
//!
//! * `-fopenmp -fopenmp-targets=x86_64-pc-linux-gnu` (unless given);
//! * when linking, LLVM 16's library directory as search and run path, so the program loads
//!   libomptarget 16 (into which the cluster plugs) and libomp 16 whichever LLVM compiled it;
//! * for clang-17 to clang-19, an include directory with LLVM 16's `omp.h` only (their own
//!   `omp.h` comes with their `libomp-N-dev`, which cannot be installed beside LLVM 16's);
//! * for flang and clang-17 to clang-19, the x86-64 device runtime
//!   (`libompcluster_devrtl.so`, beside the wrapper) on the device link
//!   (`-Wl,--device-linker=...`), which refuses the device image's calls to
//!   `__kmpc_target_init` and the like (flang) or `__kmpc_dispatch_deinit` (clang-19, after
//!   a `schedule(dynamic)` loop; libomp 16 lacks it) otherwise, and on the host link where the
//!   program's own code calls `__kmpc_dispatch_deinit` (`--as-needed`). The workers resolve
//!   those calls to the plugin's own copy and never load the library; LLVM 19's own runtime
//!   loads it.
//!
//! `--version` prints the wrapper's line and the compiler's own; `-show` (`--show`, `-showme`)
//! prints the command without running it. A compiler the cluster does not serve (clang-20 and
//! later, flang before 19, anything else) is refused before it runs.

use event_system::compilers::SERVED;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// The language a wrapper compiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    /// `ompcluster-cc`.
    C,
    /// `ompcluster-c++`.
    Cxx,
    /// `ompcluster-fortran`.
    Fortran,
}

impl Lang {
    /// The variable naming the compiler.
    pub fn var(self) -> &'static str {
        match self {
            Lang::C => "OMPCLUSTER_CC",
            Lang::Cxx => "OMPCLUSTER_CXX",
            Lang::Fortran => "OMPCLUSTER_FC",
        }
    }

    /// The compiler used when the variable is unset.
    pub fn default_compiler(self) -> &'static str {
        match self {
            Lang::C => "clang-16",
            Lang::Cxx => "clang++-16",
            Lang::Fortran => "flang-new-19",
        }
    }

    fn wrapper(self) -> &'static str {
        match self {
            Lang::C => "ompcluster-cc",
            Lang::Cxx => "ompcluster-c++",
            Lang::Fortran => "ompcluster-fortran",
        }
    }
}

/// A compiler family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// clang, clang++.
    Clang,
    /// flang-new, flang.
    Flang,
}

/// The family and major version in a compiler's `--version` output (`Debian clang version
/// 19.1.7 (3~deb12u1)`, `Debian flang-new version 19.1.7 (3~deb12u1)`).
pub fn identify(version_output: &str) -> Option<(Family, u32)> {
    let line = version_output.lines().next()?;
    let (family, rest) = if let Some(at) = line.find("clang version ") {
        (Family::Clang, &line[at + "clang version ".len()..])
    } else if let Some(at) = line.find("flang-new version ").map(|a| a + "flang-new version ".len()).or_else(|| line.find("flang version ").map(|a| a + "flang version ".len())) {
        (Family::Flang, &line[at..])
    } else {
        return None;
    };
    let major: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some((family, major.parse().ok()?))
}

/// Is `family`-`major` served for `lang`? The message refusing it otherwise.
pub fn check_served(lang: Lang, family: Family, major: u32) -> Result<(), String> {
    match (lang, family) {
        (Lang::C | Lang::Cxx, Family::Clang) if (16..=19).contains(&major) => Ok(()),
        (Lang::Fortran, Family::Flang) if major == 19 => Ok(()),
        (Lang::C | Lang::Cxx, Family::Clang) if major > 19 => Err(format!(
            "clang-{major} writes offload entries that libomptarget 16, into which the cluster plugs, cannot read (LLVM 20 changed them); the cluster serves {SERVED}"
        )),
        (Lang::Fortran, Family::Flang) if major < 19 => Err(format!(
            "flang-{major} cannot compile target regions with map clauses (flang-16 stops with \"not yet implemented\"); the cluster serves {SERVED}"
        )),
        (_, family) => Err(format!("{family:?}-{major} is not a compiler the cluster serves for this language: it serves {SERVED}")),
    }
}

/// Where the added paths point.
#[derive(Debug, Clone)]
pub struct Paths {
    /// LLVM 16's library directory (libomptarget 16, libomp 16).
    pub llvm16_lib: PathBuf,
    /// A directory holding LLVM 16's `omp.h` only.
    pub include: PathBuf,
    /// The directory of `libompcluster_devrtl.so` (the wrapper's own).
    pub devrtl: PathBuf,
}

/// Does the command link (no `-c`, `-S`, `-E`, ...)?
fn links(args: &[OsString]) -> bool {
    const NO_LINK: &[&str] = &["-c", "-S", "-E", "-M", "-MM", "-fsyntax-only", "--precompile", "--version"];
    !(args.iter().any(|a| NO_LINK.contains(&a.to_string_lossy().as_ref())) || (args.len() == 1 && args[0] == "-v"))
}

/// The compiler's arguments: the user's, with the cluster's around them.
pub fn arguments(lang: Lang, family: Family, major: u32, user: &[OsString], paths: &Paths) -> Vec<OsString> {
    let has = |p: &str| user.iter().any(|a| a.to_string_lossy() == p || a.to_string_lossy().starts_with(&format!("{p}=")));
    let mut out: Vec<OsString> = Vec::new();
    if !has("-fopenmp") {
        out.push("-fopenmp".into());
    }
    if !user.iter().any(|a| a.to_string_lossy().starts_with("-fopenmp-targets=")) {
        out.push("-fopenmp-targets=x86_64-pc-linux-gnu".into());
    }
    if family == Family::Clang && major != 16 {
        out.push("-isystem".into());
        out.push(paths.include.clone().into());
    }
    out.extend(user.iter().cloned());
    if links(user) {
        let lib = paths.llvm16_lib.display();
        out.push(format!("-L{lib}").into());
        out.push(format!("-Wl,-rpath,{lib}").into());
        if lang == Lang::Fortran || major != 16 {
            let d = paths.devrtl.display();
            // The device link takes the host link's -L and -rpath; the library's name goes
            // through --device-linker (no comma in it: -Wl would split it). The host link
            // takes it only if the program calls into it: clang-19's
            // `__kmpc_dispatch_deinit` after a `schedule(dynamic)` loop in host code.
            out.push(format!("-L{d}").into());
            out.push(format!("-Wl,-rpath,{d}").into());
            out.push("-Wl,--device-linker=x86_64-pc-linux-gnu=-lompcluster_devrtl".into());
            out.push("-Wl,--push-state,--as-needed,-lompcluster_devrtl,--pop-state".into());
        }
    }
    out
}

fn shell_quote(s: &OsStr) -> String {
    let s = s.to_string_lossy();
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_=+./,:@%".contains(c)) {
        s.into_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// LLVM 16's library directory: `OMPCLUSTER_LLVM16_LIB`, else Debian's.
fn llvm16_lib() -> PathBuf {
    std::env::var_os("OMPCLUSTER_LLVM16_LIB").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/usr/lib/llvm-16/lib"))
}

/// A directory with a link to LLVM 16's `omp.h` and nothing else: `ompcluster-include` beside
/// the wrapper (or in the temporary directory if that one is read-only), made on first use.
fn include_dir(exe_dir: &Path, llvm16_lib: &Path) -> Result<PathBuf, String> {
    let header = llvm16_lib.join("clang/16/include/omp.h");
    if !header.is_file() {
        return Err(format!("{} is missing: install libomp-16-dev (scripts/setup.sh does)", header.display()));
    }
    let make = |dir: PathBuf| -> std::io::Result<PathBuf> {
        let link = dir.join("omp.h");
        if std::fs::canonicalize(&link).ok() == std::fs::canonicalize(&header).ok() {
            return Ok(dir);
        }
        std::fs::create_dir_all(&dir)?;
        // Atomic: a uniquely named link renamed over the name (wrappers may run in parallel).
        let tmp = dir.join(format!(".omp.h.{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&header, &tmp)?;
        std::fs::rename(&tmp, &link)?;
        Ok(dir)
    };
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    make(exe_dir.join("ompcluster-include"))
        .or_else(|_| make(std::env::temp_dir().join(format!("ompcluster-include-{uid}"))))
        .map_err(|e| format!("cannot make a directory for omp.h: {e}"))
}

/// The wrapper's `main`.
pub fn main(lang: Lang) -> ExitCode {
    let name = std::env::args_os()
        .next()
        .and_then(|a| Path::new(&a).file_name().map(|f| f.to_string_lossy().into_owned()))
        .unwrap_or_else(|| lang.wrapper().into());
    let fail = |msg: String| {
        eprintln!("{name}: {msg}");
        ExitCode::from(2)
    };
    let user: Vec<OsString> = std::env::args_os().skip(1).collect();
    let show = user.iter().any(|a| a == "-show" || a == "--show" || a == "-showme");
    let user: Vec<OsString> = user.into_iter().filter(|a| a != "-show" && a != "--show" && a != "-showme").collect();
    let compiler = std::env::var_os(lang.var()).filter(|v| !v.is_empty()).unwrap_or_else(|| lang.default_compiler().into());
    let version = match Command::new(&compiler).arg("--version").output() {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        Ok(o) => return fail(format!("{} --version failed: {}", compiler.to_string_lossy(), String::from_utf8_lossy(&o.stderr).trim())),
        Err(e) => {
            return fail(format!(
                "cannot run {} ({e}): install it (scripts/setup.sh installs clang-16, clang-19 and flang-19) or name another compiler in {}",
                compiler.to_string_lossy(),
                lang.var()
            ))
        }
    };
    let Some((family, major)) = identify(&version) else {
        return fail(format!(
            "{} is not clang or flang ({}); the cluster serves {SERVED}",
            compiler.to_string_lossy(),
            version.lines().next().unwrap_or("").trim()
        ));
    };
    if let Err(e) = check_served(lang, family, major) {
        return fail(format!("{} ({}={}): {e}", compiler.to_string_lossy(), lang.var(), compiler.to_string_lossy()));
    }
    let exe_dir = std::env::current_exe().ok().and_then(|e| e.parent().map(Path::to_path_buf)).unwrap_or_else(|| PathBuf::from("."));
    let llvm16 = llvm16_lib();
    let include = if family == Family::Clang && major != 16 {
        match include_dir(&exe_dir, &llvm16) {
            Ok(d) => d,
            Err(e) => return fail(e),
        }
    } else {
        exe_dir.join("ompcluster-include")
    };
    if (lang == Lang::Fortran || major != 16) && links(&user) && !show && !exe_dir.join("libompcluster_devrtl.so").is_file() {
        return fail(format!("{} is missing: build the project (cargo build --release)", exe_dir.join("libompcluster_devrtl.so").display()));
    }
    if user.len() == 1 && user[0] == "--version" {
        println!(
            "{name} (OmpCluster-rs {}): {} for the cluster, with LLVM 16's libomptarget from {}",
            env!("CARGO_PKG_VERSION"),
            compiler.to_string_lossy(),
            llvm16.display()
        );
        print!("{version}");
        return ExitCode::SUCCESS;
    }
    let paths = Paths { llvm16_lib: llvm16, include, devrtl: exe_dir };
    let args = arguments(lang, family, major, &user, &paths);
    if show {
        let line: Vec<String> = std::iter::once(compiler.as_os_str()).chain(args.iter().map(OsString::as_os_str)).map(shell_quote).collect();
        println!("{}", line.join(" "));
        return ExitCode::SUCCESS;
    }
    use std::os::unix::process::CommandExt;
    let e = Command::new(&compiler).args(&args).exec();
    fail(format!("cannot run {}: {e}", compiler.to_string_lossy()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compilers_are_identified_by_their_version_line() {
        assert_eq!(identify("Debian clang version 19.1.7 (3~deb12u1)\nTarget: x"), Some((Family::Clang, 19)));
        assert_eq!(identify("Debian clang version 16.0.6 (15~deb12u1)"), Some((Family::Clang, 16)));
        assert_eq!(identify("Debian flang-new version 19.1.7 (3~deb12u1)"), Some((Family::Flang, 19)));
        assert_eq!(identify("flang version 20.1.0"), Some((Family::Flang, 20)));
        assert_eq!(identify("gcc (Debian 12.2.0-14) 12.2.0"), None);
        assert!(check_served(Lang::C, Family::Clang, 16).is_ok());
        assert!(check_served(Lang::Cxx, Family::Clang, 19).is_ok());
        assert!(check_served(Lang::Fortran, Family::Flang, 19).is_ok());
        assert!(check_served(Lang::C, Family::Clang, 22).unwrap_err().contains("clang-22"));
        assert!(check_served(Lang::Fortran, Family::Flang, 16).unwrap_err().contains("flang-16"));
        assert!(check_served(Lang::Fortran, Family::Clang, 19).is_err());
    }

    fn s(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn arguments_add_offloading_the_libomptarget_16_paths_and_for_flang_the_device_runtime() {
        let paths = Paths { llvm16_lib: "/l16".into(), include: "/inc".into(), devrtl: "/bin".into() };
        let c16 = arguments(Lang::C, Family::Clang, 16, &s(&["-O2", "a.c", "-o", "a"]), &paths);
        assert_eq!(c16, s(&["-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu", "-O2", "a.c", "-o", "a", "-L/l16", "-Wl,-rpath,/l16"]));
        let c19 = arguments(Lang::C, Family::Clang, 19, &s(&["-fopenmp", "-c", "a.c"]), &paths);
        assert_eq!(c19, s(&["-fopenmp-targets=x86_64-pc-linux-gnu", "-isystem", "/inc", "-fopenmp", "-c", "a.c"]));
        let c19 = arguments(Lang::C, Family::Clang, 19, &s(&["a.c"]), &paths);
        assert!(c19.ends_with(&s(&["-Wl,--device-linker=x86_64-pc-linux-gnu=-lompcluster_devrtl", "-Wl,--push-state,--as-needed,-lompcluster_devrtl,--pop-state"])));
        let f = arguments(Lang::Fortran, Family::Flang, 19, &s(&["x.f90"]), &paths);
        assert_eq!(
            f,
            s(&[
                "-fopenmp",
                "-fopenmp-targets=x86_64-pc-linux-gnu",
                "x.f90",
                "-L/l16",
                "-Wl,-rpath,/l16",
                "-L/bin",
                "-Wl,-rpath,/bin",
                "-Wl,--device-linker=x86_64-pc-linux-gnu=-lompcluster_devrtl",
                "-Wl,--push-state,--as-needed,-lompcluster_devrtl,--pop-state"
            ])
        );
        let own_targets = arguments(Lang::C, Family::Clang, 16, &s(&["-fopenmp-targets=x86_64", "-c", "a.c"]), &paths);
        assert_eq!(own_targets, s(&["-fopenmp", "-fopenmp-targets=x86_64", "-c", "a.c"]));
        assert_eq!(shell_quote(OsStr::new("a b")), "'a b'");
        assert_eq!(shell_quote(OsStr::new("-Wl,-rpath,/x")), "-Wl,-rpath,/x");
    }
}
