//! Build script: with the VeloC store compiled in (`ckpt-veloc/veloc`), the plugin library
//! gets VeloC's library directory as its run-time search path (DT_RPATH, so that the
//! libraries libveloc-client needs are found there too), so that it loads without
//! `LD_LIBRARY_PATH`.
//!
//! It also makes `ompcluster-c++`, a link to `ompcluster-cxx` in the profile directory
//! (`target/release`), where cargo puts the wrappers: cargo allows no `+` in a binary's name.

fn main() {
    link_cxx_wrapper();
    println!("cargo:rerun-if-env-changed=DEP_VELOC_CLIENT_LIBDIR");
    if let Some(dir) = std::env::var_os("DEP_VELOC_CLIENT_LIBDIR").filter(|d| !d.is_empty()) {
        println!("cargo:rustc-link-arg=-Wl,--disable-new-dtags,-rpath,{}", dir.to_string_lossy());
    }
}

/// `<profile dir>/ompcluster-c++ -> ompcluster-cxx` (relative, so it follows the directory).
/// The profile directory is three levels above `OUT_DIR` (`<profile>/build/<pkg>-<hash>/out`).
/// A failure only costs the alias: `ompcluster-cxx` is the same program.
fn link_cxx_wrapper() {
    let Some(out) = std::env::var_os("OUT_DIR") else { return };
    let Some(profile) = std::path::Path::new(&out).ancestors().nth(3) else { return };
    let link = profile.join("ompcluster-c++");
    if std::fs::read_link(&link).is_ok_and(|t| t == std::path::Path::new("ompcluster-cxx")) {
        return;
    }
    let _ = std::fs::remove_file(&link);
    if let Err(e) = std::os::unix::fs::symlink("ompcluster-cxx", &link) {
        println!("cargo:warning=cannot link {} to ompcluster-cxx: {e}", link.display());
    }
}
