//! Build script: the entry points call libomp (`__kmpc_fork_call`, `omp_get_thread_num`,
//! ...), so the library is linked against it, LLVM 16's (Debian installs only the versioned
//! `libomp.so.5` in the default search path; the link name `libomp.so` is in LLVM's own
//! directory). At run time the process's libomp answers: LLVM 16's under the cluster, LLVM
//! 19's when the stock LLVM 19 runtime runs a program with `LD_LIBRARY_PATH` at it (same
//! soname, same entry points).

fn main() {
    println!("cargo:rerun-if-env-changed=OMPCLUSTER_LIBOMP_DIR");
    let dir = std::env::var("OMPCLUSTER_LIBOMP_DIR").unwrap_or_else(|_| "/usr/lib/llvm-16/lib".into());
    println!("cargo:rustc-link-search=native={dir}");
    println!("cargo:rustc-link-lib=dylib=omp");
}
