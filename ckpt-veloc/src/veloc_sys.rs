//! Raw bindings to VeloC's C client API (`veloc.h`), generated at build
//! time by bindgen (see `build.rs`): `VELOC_Init_single`, `VELOC_Finalize`,
//! `VELOC_Checkpoint_begin`, `VELOC_Route_file`, `VELOC_Checkpoint_end`,
//! `VELOC_Checkpoint_wait`, `VELOC_Restart_test`, `VELOC_Mem_protect`, ...
//! Only [`crate::veloc`] uses them.

#![allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code,
    missing_docs,
    unreachable_pub,
    clippy::all
)]

include!(concat!(env!("OUT_DIR"), "/veloc_bindings.rs"));
