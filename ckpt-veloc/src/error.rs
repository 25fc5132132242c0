//! Error types, one per operation (configuration, opening a store, saving,
//! flushing, publishing a manifest, reading manifests, loading a region).
//!
//! Every error that concerns a file or directory names it, so that a message
//! such as "checksum mismatch in /shared/ckpt/ckpt-7/rank-3.data" is enough
//! to find the damage.

use std::io;
use std::path::PathBuf;

use crate::record::{Checksum, CkptId, Rank, RegionId};

/// An invalid `OMPCLUSTER_CP_*` environment variable.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The variable is set but its value cannot be used.
    #[error("invalid value {value:?} for {var}: {reason}")]
    Invalid {
        /// Name of the environment variable, e.g. `OMPCLUSTER_CP_MTBF`.
        var: &'static str,
        /// The value found.
        value: String,
        /// What is expected instead.
        reason: &'static str,
    },
    /// The VeloC configuration file cannot be used (the message names file and variable).
    #[error("{0}")]
    VelocConfig(String),
    /// A variable needed by another one is missing.
    #[error("{var} is required when {because}")]
    Missing {
        /// Name of the missing environment variable.
        var: &'static str,
        /// Why it is required.
        because: &'static str,
    },
}

/// Failure to open a store at start-up.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// A directory could not be created.
    #[error("cannot create the checkpoint {role} directory {path} (set {var} to a writable directory): {source}")]
    CreateDir {
        /// `scratch` or `persistent`.
        role: &'static str,
        /// The variable that chooses this directory.
        var: &'static str,
        /// The directory.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// A directory exists but a file cannot be written in it.
    #[error("the checkpoint {role} directory {path} is not writable (set {var} to a writable directory): {source}")]
    NotWritable {
        /// `scratch` or `persistent`.
        role: &'static str,
        /// The variable that chooses this directory.
        var: &'static str,
        /// The directory.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// Another running job uses the persistent directory.
    #[error("the checkpoint directory {path} is in use by another running job (set {var} to a directory of this job's own)")]
    InUse {
        /// The directory.
        path: PathBuf,
        /// The variable that chooses it.
        var: &'static str,
    },
    /// What an earlier job left in the persistent directory could not be removed.
    #[error("cannot remove the checkpoints an earlier job left in {path}: {source}")]
    Clear {
        /// The directory.
        path: PathBuf,
        /// The cause.
        source: ManifestError,
    },
    /// Checkpointing is disabled in the configuration.
    #[error("checkpointing is disabled (set OMPCLUSTER_CP_ENABLE=1 or an interval variable)")]
    Disabled,
    /// The VeloC store was asked for but this build does not include it.
    #[error("OMPCLUSTER_CP_USEVELOC=1 but ckpt-veloc was built without the `veloc` cargo feature")]
    VelocNotBuilt,
    /// VeloC could not be initialised or its configuration is unusable.
    #[error("VeloC store: {0}")]
    Veloc(String),
}

/// Failure to save one region during the checkpoint pause.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    /// The checkpoint id was already flushed (or is older than one that was).
    #[error("checkpoint {ckpt} is closed: ids must increase and a flushed checkpoint takes no more regions")]
    Closed {
        /// The checkpoint id.
        ckpt: CkptId,
    },
    /// The same region was saved twice in one checkpoint.
    #[error("region {region} was already saved in checkpoint {ckpt}")]
    Duplicate {
        /// The checkpoint id.
        ckpt: CkptId,
        /// The region id.
        region: RegionId,
    },
    /// Writing the scratch file failed.
    #[error("cannot write checkpoint scratch file {path}: {source}")]
    Io {
        /// The scratch file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The VeloC library reported a failure.
    #[error("VeloC: {0}")]
    Veloc(String),
}

/// Failure of a background flush (or of starting one).
#[derive(Debug, thiserror::Error)]
pub enum FlushError {
    /// The checkpoint id was already flushed.
    #[error("checkpoint {ckpt} was already flushed")]
    AlreadyFlushed {
        /// The checkpoint id.
        ckpt: CkptId,
    },
    /// An I/O operation on a file failed.
    #[error("flush of checkpoint {ckpt}: {op} {path}: {source}")]
    Io {
        /// The checkpoint id.
        ckpt: CkptId,
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The flusher thread is gone (it panicked or the store was dropped).
    #[error("flush of checkpoint {ckpt}: the background flusher stopped")]
    FlusherGone {
        /// The checkpoint id.
        ckpt: CkptId,
    },
    /// The VeloC library reported a failure.
    #[error("flush of checkpoint {ckpt}: VeloC: {message}")]
    Veloc {
        /// The checkpoint id.
        ckpt: CkptId,
        /// What failed.
        message: String,
    },
}

/// Failure to read or write a manifest (also used by listing and pruning).
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// An I/O operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// A manifest file does not parse.
    #[error("manifest {path} is damaged: {reason}")]
    Damaged {
        /// The manifest file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A manifest or flush index of another format (written by another build of the runtime),
    /// or with none: refused, never misread.
    #[error("{} {}; this build reads format {expected}", path.display(), match found {
        Some(f) => format!("is in format {f}, written by another build of the runtime"),
        None => "has no format field".to_string(),
    })]
    OtherFormat {
        /// The file.
        path: PathBuf,
        /// Its format, if it names one.
        found: Option<String>,
        /// The format this build reads ([`crate::MANIFEST_FORMAT`] or the index's).
        expected: &'static str,
    },
    /// The requested version has no manifest.
    #[error("checkpoint version {version} is not published in {dir} (no file {path})")]
    NoSuchVersion {
        /// The version.
        version: CkptId,
        /// The persistent directory.
        dir: PathBuf,
        /// The manifest path that was looked for.
        path: PathBuf,
    },
    /// A record refers to a checkpoint newer than the version being published.
    #[error("cannot publish version {version}: region {region} refers to checkpoint {ckpt}, which is newer")]
    FutureRecord {
        /// The version being published.
        version: CkptId,
        /// The region id.
        region: RegionId,
        /// The checkpoint id of its record.
        ckpt: CkptId,
    },
}

/// Failure to load a region from a published version.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The manifest could not be read.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The region is not part of that version.
    #[error("region {region} is not in checkpoint version {version}")]
    NoSuchRegion {
        /// The version.
        version: CkptId,
        /// The region id.
        region: RegionId,
    },
    /// The data file is missing or unreadable.
    #[error("cannot read region {region} (saved by rank {rank} in checkpoint {ckpt}) from {path}: {source}")]
    Io {
        /// The region id.
        region: RegionId,
        /// The saving rank.
        rank: Rank,
        /// The checkpoint that saved it.
        ckpt: CkptId,
        /// The data file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The data file is shorter than the manifest says.
    #[error("region {region} in {path} is truncated: the file has {file_len} bytes, the region needs bytes {offset}..{end}")]
    Truncated {
        /// The region id.
        region: RegionId,
        /// The data file.
        path: PathBuf,
        /// Length of the file.
        file_len: u64,
        /// Where the region starts.
        offset: u64,
        /// Where the region ends.
        end: u64,
    },
    /// The bytes do not match the recorded checksum.
    #[error("region {region} in {path} is corrupt: checksum {found}, expected {expected}")]
    Corrupt {
        /// The region id.
        region: RegionId,
        /// The data file.
        path: PathBuf,
        /// Checksum found.
        found: Checksum,
        /// Checksum in the manifest.
        expected: Checksum,
    },
    /// The caller's buffer has the wrong size.
    #[error("region {region} has {size} bytes but the destination buffer has {buf_len}")]
    SizeMismatch {
        /// The region id.
        region: RegionId,
        /// Size of the region.
        size: u64,
        /// Size of the buffer given.
        buf_len: usize,
    },
}
