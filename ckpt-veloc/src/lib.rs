//! Checkpoint store for OmpCluster.
//!
//! One interface, [`CheckpointStore`], with two implementations:
//!
//! * [`EmbeddedStore`] (default, nothing to install): each rank saves its
//!   regions to a private scratch directory during the checkpoint pause,
//!   then flushes them in the background to a persistent (shared)
//!   directory, with xxh3 checksums and atomic, durable publication;
//! * the VeloC store (cargo feature `veloc`, `OMPCLUSTER_CP_USEVELOC=1`),
//!   which routes the same per-rank pack file through VeloC.
//!
//! On top of the per-rank stores, the head keeps a [`CheckpointMap`] and
//! publishes one [`Manifest`] per checkpoint version once every rank's
//! flush is complete. Manifests list every region of the program state,
//! including regions saved by earlier checkpoints (incremental
//! checkpoints); [`prune`] keeps the newest versions without deleting
//! anything a kept manifest refers to. Any rank can [`load_region`] of any
//! published version, whoever saved it, and every load checks the checksum.
//!
//! [`interval`] computes when to checkpoint (Young, Daly), and
//! [`StoreConfig::from_env`] reads the `OMPCLUSTER_CP_*` variables.
//!
//! ```
//! use ckpt_veloc::{open, CheckpointMap, StoreConfig};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let tmp = tempfile::tempdir()?;
//! // At start-up, on every rank: StoreConfig::from_env(rank)?; here explicit.
//! let config = StoreConfig::new(0, tmp.path().join("ckpt"));
//! let store = open(&config)?;                        // fails now if a directory is unusable
//! store.save_region(7, 42, &[1, 2, 3])?;             // during the pause: scratch only
//! let records = store.flush(7)?.wait()?.records;     // after the pause, in the background
//! let mut map = CheckpointMap::new();                // head: records of all ranks
//! map.record(records);
//! map.publish(store.persistent_dir(), 7, config.keep)?;
//! let bytes = ckpt_veloc::load_region(store.persistent_dir(), 7, 42)?;
//! assert_eq!(bytes, [1, 2, 3]);
//! # Ok(()) }
//! ```

mod config;
mod embedded;
mod error;
mod flush;
#[cfg(test)]
mod fuzz;
mod fsutil;
mod job;
pub mod interval;
mod layout;
mod manifest;
mod record;
mod store;
#[cfg(feature = "veloc")]
mod veloc;
mod veloc_cfg;
mod veloc_node;
#[cfg(feature = "veloc")]
mod veloc_sys;
mod verify;

pub use config::{
    vars, Backend, ScratchBase, StoreConfig, DEFAULT_KEEP, DEFAULT_MTBF_S, DEFAULT_PERSISTENT,
    DEFAULT_WSPEED_MB_S,
};
pub use embedded::EmbeddedStore;
pub use error::{ConfigError, FlushError, LoadError, ManifestError, OpenError, SaveError};
pub use flush::{FlushHandle, FlushOutcome, FlushStatus};
pub use interval::IntervalPolicy;
pub use fsutil::{atomic_write, create_private_dir_all};
pub use job::{claim_for_job, claim_for_resume, JobClaim};
pub use manifest::{
    flushed_records, latest_version, list_versions, load_record, load_record_into, load_region,
    manifest_path, prune, clear, CheckpointMap, Manifest, PruneReport, Published, MANIFEST_FORMAT,
};
pub use record::{format_unix_ms, Checksum, CkptId, Rank, RegionId, RegionRecord};
pub use store::{open, CheckpointStore, StoreKind};
#[cfg(feature = "veloc")]
pub use veloc::VelocStore;
pub use veloc_node::sweep as sweep_veloc_backend;
pub use verify::{verify_dir, Damage, VerifyReport, VersionCheck};
