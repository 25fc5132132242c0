//! The cluster device: a libomptarget 16 plugin that turns an MPI job into one OpenMP device.
//!
//! Rank 0 runs the program; its target regions and data mappings become events for ranks
//! 1..N-1, which become workers from plugin initialisation and never reach `main`.
//!
//! Layers: [`abi`] holds the exported `__tgt_rtl_*` shims (the only `extern "C"` code), each a
//! thin call behind a panic boundary into [`cluster`] (the head's safe core), which uses the
//! `event-system`, `scheduler` and `task-graph` crates.

pub mod abi;
mod checkpoint;
pub mod cluster;
pub mod ctypes;
pub mod config;
mod crash_status;
mod data;
mod exit_status;
mod helpers;
mod kernels;
mod queues;
pub mod inject;
pub mod journal;
pub mod mpi_noise;
pub mod report;
mod runtime;
mod same_build;
pub mod sigterm;
mod stack;
pub mod startup;
pub mod wrapper;
