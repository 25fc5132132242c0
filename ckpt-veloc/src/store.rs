//! The store interface shared by the embedded store and the VeloC store.

use std::path::Path;

use crate::config::{Backend, StoreConfig};
use crate::error::{FlushError, OpenError, SaveError};
use crate::flush::FlushHandle;
use crate::record::{CkptId, Rank, RegionId};

/// Which implementation a store is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    /// [`EmbeddedStore`](crate::EmbeddedStore).
    Embedded,
    /// The VeloC store (cargo feature `veloc`).
    Veloc,
}

/// One rank's checkpoint store.
///
/// Life of a checkpoint `k` on one rank: during the pause, [`save_region`]
/// once per buffer (fast: scratch only); after the pause, [`flush`] starts
/// the background copy to the persistent directory and returns a handle
/// whose result lists the [`RegionRecord`](crate::RegionRecord)s to send to
/// the head. Checkpoint ids must increase: once `k` is flushed, saves for
/// any id `<= k` are refused.
///
/// Stores are `Send + Sync`; methods take `&self` and serialise internally.
///
/// [`save_region`]: CheckpointStore::save_region
/// [`flush`]: CheckpointStore::flush
pub trait CheckpointStore: Send + Sync + std::fmt::Debug {
    /// The implementation.
    fn kind(&self) -> StoreKind;

    /// This rank.
    fn rank(&self) -> Rank;

    /// The persistent directory in which flushed data and manifests live.
    fn persistent_dir(&self) -> &Path;

    /// Saves `bytes` as region `region` of checkpoint `ckpt`, in scratch.
    /// The checksum is computed here, from the caller's bytes.
    fn save_region(&self, ckpt: CkptId, region: RegionId, bytes: &[u8]) -> Result<(), SaveError>;

    /// Starts flushing checkpoint `ckpt` in the background. A rank that
    /// saved nothing in `ckpt` still flushes it (and gets no records), so
    /// that every rank can report completion.
    fn flush(&self, ckpt: CkptId) -> Result<FlushHandle, FlushError>;

    /// Drops what was saved for `ckpt` and not yet flushed (e.g. the
    /// checkpoint was abandoned because a rank failed during the pause).
    fn discard(&self, ckpt: CkptId);

    /// Blocks until every flush started so far has finished (successfully
    /// or not). Call at exit; dropping a store does the same.
    fn wait_all(&self);

    /// Waits like [`CheckpointStore::wait_all`], then removes this rank's
    /// scratch files (the VeloC store also finalises its VeloC client and
    /// leaves the node's VeloC session). For a process that ends without
    /// dropping its store (the head's store lives until `exit`, a worker
    /// ends with `_exit`); nothing may be saved after.
    fn close(&self) {
        self.wait_all();
    }
}

/// Opens the store chosen by `config` (the embedded store, or the VeloC
/// store with `OMPCLUSTER_CP_USEVELOC=1`). Fails at once if a directory
/// cannot be created or written.
pub fn open(config: &StoreConfig) -> Result<Box<dyn CheckpointStore>, OpenError> {
    if !config.enabled {
        return Err(OpenError::Disabled);
    }
    match &config.backend {
        Backend::Embedded => Ok(Box::new(crate::embedded::EmbeddedStore::open(config)?)),
        #[cfg(feature = "veloc")]
        Backend::Veloc { config_file } => Ok(Box::new(crate::veloc::VelocStore::open(
            config,
            config_file,
        )?)),
        #[cfg(not(feature = "veloc"))]
        Backend::Veloc { .. } => Err(OpenError::VelocNotBuilt),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_picks_the_backend() {
        let t = tempfile::tempdir().unwrap();
        let mut c = StoreConfig::new(0, t.path().join("p"));
        c.scratch = crate::ScratchBase::Dir(t.path().join("s"));
        let s = open(&c).unwrap();
        assert_eq!(s.kind(), StoreKind::Embedded);
        assert_eq!(s.persistent_dir(), t.path().join("p"));
        drop(s);

        c.enabled = false;
        assert!(matches!(open(&c), Err(OpenError::Disabled)));

        c.enabled = true;
        c.backend = Backend::Veloc {
            config_file: t.path().join("missing.cfg"),
        };
        let e = open(&c).unwrap_err();
        #[cfg(not(feature = "veloc"))]
        assert!(matches!(e, OpenError::VelocNotBuilt), "{e}");
        // With the feature, the unreadable configuration is reported before VeloC is touched.
        #[cfg(feature = "veloc")]
        assert!(e.to_string().contains("missing.cfg"), "{e}");
    }
}
