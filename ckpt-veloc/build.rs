//! Build script: only does work with the `veloc` feature (see src/veloc_sys.rs).
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
}
