//! Build script. Without the `veloc` feature it does nothing. With it, it
//! finds VeloC's `veloc.h` (and the `mpi.h` that it includes), generates
//! Rust bindings with bindgen into `$OUT_DIR/veloc_bindings.rs`, and links
//! `libveloc-client`, with VeloC's library directory as the run-time search path (also
//! handed to dependent crates as `DEP_VELOC_CLIENT_LIBDIR`).
//!
//! Where it looks, in order:
//! * `veloc.h`: `$VELOC_INCLUDE_DIR`, `$VELOC_ROOT/include`, `/usr/local/include`,
//!   `/opt/veloc/include`, `/usr/include`;
//! * `libveloc-client.so`: `$VELOC_LIB_DIR`, `$VELOC_ROOT/lib`, `$VELOC_ROOT/lib64`,
//!   and `lib`/`lib64` beside the include directory found;
//! * `mpi.h`: `$MPI_INCLUDE_DIR` (`:`-separated), `mpicc --showme:incdirs`
//!   (Open MPI), `mpicc -show` (MPICH), then the Debian/Ubuntu locations.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "veloc")]
    veloc::generate();
}

#[cfg(feature = "veloc")]
mod veloc {
    use std::env;
    use std::path::PathBuf;
    use std::process::Command;

    fn env_path(name: &str) -> Option<PathBuf> {
        println!("cargo:rerun-if-env-changed={name}");
        env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    }

    fn mpi_include_dirs() -> Vec<PathBuf> {
        println!("cargo:rerun-if-env-changed=MPI_INCLUDE_DIR");
        if let Some(v) = env::var_os("MPI_INCLUDE_DIR").filter(|v| !v.is_empty()) {
            return env::split_paths(&v).collect();
        }
        let mut dirs = Vec::new();
        if let Ok(o) = Command::new("mpicc").arg("--showme:incdirs").output() {
            if o.status.success() {
                dirs.extend(
                    String::from_utf8_lossy(&o.stdout)
                        .split_whitespace()
                        .map(PathBuf::from),
                );
            }
        }
        if dirs.is_empty() {
            if let Ok(o) = Command::new("mpicc").arg("-show").output() {
                if o.status.success() {
                    dirs.extend(
                        String::from_utf8_lossy(&o.stdout)
                            .split_whitespace()
                            .filter_map(|a| a.strip_prefix("-I"))
                            .map(PathBuf::from),
                    );
                }
            }
        }
        for d in [
            "/usr/lib/x86_64-linux-gnu/openmpi/include",
            "/usr/lib/aarch64-linux-gnu/openmpi/include",
            "/usr/include/x86_64-linux-gnu/mpich",
            "/usr/include/aarch64-linux-gnu/mpich",
            "/usr/include/openmpi",
            "/usr/include/mpich",
            "/usr/include",
        ] {
            dirs.push(PathBuf::from(d));
        }
        dirs
    }

    pub(super) fn generate() {
        let root = env_path("VELOC_ROOT");
        let mut candidates: Vec<PathBuf> = Vec::new();
        candidates.extend(env_path("VELOC_INCLUDE_DIR"));
        if let Some(r) = &root {
            candidates.push(r.join("include"));
        }
        candidates.extend(
            ["/usr/local/include", "/opt/veloc/include", "/usr/include"].map(PathBuf::from),
        );
        let Some(include) = candidates
            .iter()
            .find(|d| d.join("veloc.h").is_file())
            .cloned()
        else {
            let tried: Vec<String> = candidates.iter().map(|d| d.display().to_string()).collect();
            panic!(
                "\n\nckpt-veloc: the `veloc` feature needs VeloC installed, but veloc.h was not found in: {}.\n\
                 Set VELOC_ROOT to VeloC's install prefix (the one holding include/veloc.h and lib/libveloc-client.so),\n\
                 or VELOC_INCLUDE_DIR and VELOC_LIB_DIR; or build without `--features veloc` to use the embedded store.\n\n",
                tried.join(", ")
            );
        };
        let header = include.join("veloc.h");
        println!("cargo:rerun-if-changed={}", header.display());
        let text = std::fs::read_to_string(&header).unwrap_or_default();
        if !text.contains("VELOC_Init_single") || !text.contains("VELOC_Checkpoint_wait") {
            panic!(
                "\n\nckpt-veloc: {} lacks VELOC_Init_single or VELOC_Checkpoint_wait: the VeloC store needs VeloC 1.5 or newer.\n\n",
                header.display()
            );
        }

        let mut lib_dirs: Vec<PathBuf> = Vec::new();
        lib_dirs.extend(env_path("VELOC_LIB_DIR"));
        if let Some(r) = &root {
            lib_dirs.push(r.join("lib"));
            lib_dirs.push(r.join("lib64"));
        }
        if let Some(prefix) = include.parent() {
            lib_dirs.push(prefix.join("lib"));
            lib_dirs.push(prefix.join("lib64"));
        }
        match lib_dirs.iter().find(|d| d.join("libveloc-client.so").exists()) {
            Some(d) => {
                println!("cargo:rustc-link-search=native={}", d.display());
                // This crate's own tests and examples find VeloC there; DT_RPATH (not
                // RUNPATH) so that libveloc-client's own libraries (libveloc-modules, AXL,
                // ER, ...), which carry no search path, are found there too.
                println!("cargo:rustc-link-arg=-Wl,--disable-new-dtags,-rpath,{}", d.display());
                // For the crates linking this one (`links` metadata): the plugin puts the
                // same path in the shared library it builds.
                println!("cargo:libdir={}", d.display());
            }
            None => println!(
                "cargo:warning=libveloc-client.so not found beside {} (set VELOC_LIB_DIR); linking will fail unless the linker finds it",
                include.display()
            ),
        }
        println!("cargo:rustc-link-lib=dylib=veloc-client");

        let mpi_dirs = mpi_include_dirs();
        let Some(mpi) = mpi_dirs.iter().find(|d| d.join("mpi.h").is_file()) else {
            panic!(
                "\n\nckpt-veloc: veloc.h includes <mpi.h>, which was not found (tried mpicc and the usual locations).\n\
                 Install MPI development headers or set MPI_INCLUDE_DIR.\n\n"
            );
        };

        let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR")).join("veloc_bindings.rs");
        bindgen::Builder::default()
            .header(header.to_string_lossy())
            .clang_arg(format!("-I{}", include.display()))
            .clang_arg(format!("-I{}", mpi.display()))
            .allowlist_function("VELOC_.*")
            .allowlist_var("VELOC_.*")
            .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
            .generate()
            .unwrap_or_else(|e| panic!("ckpt-veloc: bindgen failed on {}: {e}", header.display()))
            .write_to_file(&out)
            .unwrap_or_else(|e| panic!("ckpt-veloc: cannot write {}: {e}", out.display()));
    }
}
