//! Build script: with the VeloC store compiled in (`ckpt-veloc/veloc`), the plugin library
//! gets VeloC's library directory as its run-time search path (DT_RPATH, so that the
//! libraries libveloc-client needs are found there too), so that it loads without
//! `LD_LIBRARY_PATH`. Otherwise it does nothing.

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_VELOC_CLIENT_LIBDIR");
    if let Some(dir) = std::env::var_os("DEP_VELOC_CLIENT_LIBDIR").filter(|d| !d.is_empty()) {
        println!("cargo:rustc-link-arg=-Wl,--disable-new-dtags,-rpath,{}", dir.to_string_lossy());
    }
}
