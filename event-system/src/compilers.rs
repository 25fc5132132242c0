//! Which compilers' programs the cluster serves, and what each generation's device code
//! expects (facts checked on Debian 12's clang-16, clang-19, flang-19 and clang-22 binaries:
//! `docs/compilers.md`).
//!
//! * **Kernel arguments.** libomptarget hands the plugin the program's own `KernelArgsTy`, whose
//!   `Version` is the compiler's `OMP_KERNEL_ARG_VERSION`: 2 from clang-16 and clang-17, 3
//!   from clang-18 to clang-22 and flang-19 (1 from LLVM 16's first users of
//!   `__tgt_target_kernel`). From version 3 on (LLVM's
//!   `OMP_KERNEL_ARG_MIN_VERSION_WITH_DYN_PTR`, PR #70401) every kernel takes a leading
//!   pointer, `dyn_ptr` (the kernel launch environment), before the mapped arguments: called
//!   the version-2 way, a kernel reads its first argument from `dyn_ptr`'s register and
//!   crashes at address 0. The launch's version is the authority ([`KernelAbi::of_version`]):
//!   it comes from the translation unit that emitted both the launch and the kernel, while one
//!   image may hold kernels of several translation units.
//! * **Per image** ([`Producer::of_image`]), for messages and cross-checks: clang writes
//!   `clang version N` into the image's `.comment`; flang-19 writes nothing there, but its
//!   device code (OpenMPIRBuilder's, LLVM 18 and later) defines a
//!   `<kernel>_kernel_environment` object per kernel, which clang's x86 device code never
//!   does.
//! * clang-20 and later write offload entries libomptarget 16 cannot read (56 bytes from
//!   LLVM 20, PR #124018; in `llvm_offload_entries` from LLVM 21, PR #125731): their programs
//!   are refused before they start ([`host_program_compiler`]).

use crate::elf::ElfImage;

/// The compilers whose programs the cluster runs, for messages.
pub const SERVED: &str = "clang-16 to clang-19 (C, C++) and flang-19 (Fortran)";

/// The newest clang whose programs libomptarget 16 can read.
pub const NEWEST_CLANG: u32 = 19;

/// How a kernel takes its arguments, by the launch's `KernelArgsTy` version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelAbi {
    /// Versions 1 and 2 (clang-16, clang-17): the mapped arguments only.
    Plain,
    /// Version 3 (clang-18 to clang-22, flang-19): a `dyn_ptr` first, then the mapped
    /// arguments.
    DynPtrFirst,
}

impl KernelAbi {
    /// The layout a launch of `KernelArgsTy` version `version` expects, or `None` for a
    /// version this runtime does not know (0, or 4 and later: LLVM 23 moved `dyn_ptr` last).
    pub fn of_version(version: u32) -> Option<KernelAbi> {
        match version {
            1 | 2 => Some(KernelAbi::Plain),
            3 => Some(KernelAbi::DynPtrFirst),
            _ => None,
        }
    }
}

/// Who compiled a device image, as far as its bytes tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Producer {
    /// The major versions of the clangs named in `.comment` (ascending, no repeats).
    pub clang: Vec<u32>,
    /// It defines kernel environments: OpenMPIRBuilder device code (flang-19).
    pub kernel_environments: bool,
}

/// The major version in a `.comment` string such as `Debian clang version 19.1.7
/// (3~deb12u1)` or `clang version 16.0.6`, if it names clang.
pub fn clang_major(comment: &str) -> Option<u32> {
    let at = comment.find("clang version ")?;
    let rest = &comment[at + "clang version ".len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

impl Producer {
    /// What `img`'s bytes say of its compiler.
    pub fn of_image(img: &ElfImage<'_>) -> Producer {
        Producer::from_parts(img.comment.iter().map(String::as_str), img.has_kernel_environments())
    }

    /// From `.comment` strings and whether kernel environments are defined.
    pub fn from_parts<'a>(comment: impl IntoIterator<Item = &'a str>, kernel_environments: bool) -> Producer {
        let mut clang: Vec<u32> = comment.into_iter().filter_map(clang_major).collect();
        clang.sort_unstable();
        clang.dedup();
        Producer { clang, kernel_environments }
    }

    /// Do this image's kernels take a leading `dyn_ptr`? `None` when the bytes do not tell
    /// (no clang named, no kernel environment) or the clangs named disagree.
    pub fn takes_dyn_ptr(&self) -> Option<bool> {
        if self.kernel_environments {
            return Some(true);
        }
        let (first, last) = (self.clang.first()?, self.clang.last()?);
        let dyn_ptr = |v: u32| v >= 18;
        (dyn_ptr(*first) == dyn_ptr(*last)).then_some(dyn_ptr(*last))
    }

    /// For messages: `clang-19`, `clang-16 and clang-19`, `flang-19 (OpenMPIRBuilder device
    /// code, LLVM 18 or later)`, `an unknown compiler`.
    pub fn describe(&self) -> String {
        let mut names: Vec<String> = self.clang.iter().map(|v| format!("clang-{v}")).collect();
        if self.kernel_environments {
            names.push("flang (OpenMPIRBuilder device code, LLVM 18 or later)".into());
        }
        match names.len() {
            0 => "an unknown compiler".into(),
            1 => names.remove(0),
            _ => {
                let last = names.pop().unwrap_or_default();
                format!("{} and {last}", names.join(", "))
            }
        }
    }
}

/// The message for a launch of a `KernelArgsTy` version this runtime does not know.
pub fn unknown_kernel_args(version: u32, kernel: &str, producer: &Producer) -> String {
    let era = match version {
        0 => "no compiler emits version 0".to_string(),
        4.. => "LLVM 23 and later emit version 4 and up, with dyn_ptr moved last".to_string(),
        _ => String::new(),
    };
    format!(
        "target region {kernel} (compiled by {}) was launched with kernel-argument version {version}{}: this runtime knows versions 1 to 3, which {SERVED} emit",
        producer.describe(),
        if era.is_empty() { String::new() } else { format!(" ({era})") }
    )
}

/// What a host program's bytes say of the compiler that built its offloading code: `Err`
/// with the reason when it is one this runtime cannot serve (clang-20 and later), `Ok` with
/// the clang majors named (possibly none, for flang) otherwise. `comment` is the program's
/// `.comment` strings; `sections` its section names and sizes.
pub fn host_program_compiler<'a>(comment: impl IntoIterator<Item = &'a str>, sections: &[(&str, u64)]) -> Result<Vec<u32>, String> {
    let mut clang: Vec<u32> = comment.into_iter().filter_map(clang_major).collect();
    clang.sort_unstable();
    clang.dedup();
    let newest = clang.last().copied();
    let too_new = |why: &str| {
        let who = match newest {
            Some(v) if v > NEWEST_CLANG => format!("clang-{v}"),
            _ => "a compiler of LLVM 20 or later".into(),
        };
        Err(format!(
            "it was compiled by {who} ({why}), which libomptarget 16 cannot read; the cluster serves programs compiled by {SERVED}: compile it with one of those (ompcluster-cc, ompcluster-c++, ompcluster-fortran; OMPCLUSTER_CC=clang-19 for instance)"
        ))
    };
    if sections.iter().any(|(n, _)| *n == "llvm_offload_entries") {
        return too_new("its offload entries are in llvm_offload_entries, LLVM 21's layout");
    }
    if let Some((_, size)) = sections.iter().find(|(n, _)| *n == "omp_offloading_entries") {
        if size % 32 != 0 && size % 56 == 0 {
            return too_new("its offload entries are 56 bytes, LLVM 20's layout");
        }
    }
    if newest.is_some_and(|v| v > NEWEST_CLANG) {
        return too_new("named in its .comment section");
    }
    Ok(clang)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_of_the_kernel_arguments() {
        assert_eq!(KernelAbi::of_version(2), Some(KernelAbi::Plain));
        assert_eq!(KernelAbi::of_version(1), Some(KernelAbi::Plain));
        assert_eq!(KernelAbi::of_version(3), Some(KernelAbi::DynPtrFirst));
        assert_eq!(KernelAbi::of_version(0), None);
        assert_eq!(KernelAbi::of_version(4), None);
    }

    #[test]
    fn producers_from_comment_and_symbols() {
        assert_eq!(clang_major("Debian clang version 19.1.7 (3~deb12u1)"), Some(19));
        assert_eq!(clang_major("clang version 16.0.6"), Some(16));
        assert_eq!(clang_major("GCC: (Debian 12.2.0-14+deb12u1) 12.2.0"), None);
        let c16 = Producer::from_parts(["GCC: (Debian 12.2.0-14+deb12u1) 12.2.0", "Debian clang version 16.0.6 (15~deb12u1)"], false);
        assert_eq!((c16.takes_dyn_ptr(), c16.describe()), (Some(false), "clang-16".into()));
        let c19 = Producer::from_parts(["Debian clang version 19.1.7 (3~deb12u1)"], false);
        assert_eq!(c19.takes_dyn_ptr(), Some(true));
        let flang = Producer::from_parts(["GCC: (Debian 12.2.0-14+deb12u1) 12.2.0"], true);
        assert_eq!(flang.takes_dyn_ptr(), Some(true));
        assert!(flang.describe().starts_with("flang"));
        let mixed = Producer::from_parts(["clang version 16.0.6", "clang version 19.1.7"], false);
        assert_eq!((mixed.takes_dyn_ptr(), mixed.describe()), (None, "clang-16 and clang-19".into()));
        assert_eq!(Producer::from_parts([], false).takes_dyn_ptr(), None);
        let msg = unknown_kernel_args(4, "__omp_offloading_x_main_l5", &c19);
        assert!(msg.contains("clang-19") && msg.contains("version 4") && msg.contains(SERVED), "{msg}");
    }

    #[test]
    fn host_programs_of_clang_20_and_later_are_refused() {
        let entries = |n: u64| vec![("omp_offloading_entries", n)];
        assert_eq!(host_program_compiler(["Debian clang version 16.0.6"], &entries(32)), Ok(vec![16]));
        assert_eq!(host_program_compiler(["GCC: (Debian 12.2.0-14+deb12u1) 12.2.0"], &entries(64)), Ok(vec![]));
        let e = host_program_compiler(["Debian clang version 22.1.8"], &[("llvm_offload_entries", 56)]).unwrap_err();
        assert!(e.contains("clang-22") && e.contains(SERVED), "{e}");
        assert!(host_program_compiler(["clang version 20.1.0"], &entries(56)).unwrap_err().contains("56 bytes"));
        assert!(host_program_compiler([], &entries(112)).unwrap_err().contains("LLVM 20 or later"));
        assert!(host_program_compiler(["clang version 21.0.0"], &entries(32)).is_err());
    }
}
