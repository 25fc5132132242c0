//! Names of things in the persistent directory. No name depends on the rank
//! that *reads* it, only on the rank that wrote it, so any rank can load
//! what any other rank (alive or dead) saved.
//!
//! ```text
//! PERSISTENT/
//!   manifests/manifest-<version>.json     published versions (written by the head)
//!   ckpt-<k>/rank-<r>.data                regions of checkpoint k saved by rank r, concatenated
//!   ckpt-<k>/rank-<r>.index.json          rank r's records for k; written last (flush complete)
//!   ompcluster-<r>-<k>.dat                VeloC store: VeloC's link to ckpt-<k>/rank-<r>.data
//! ```
//!
//! The VeloC store writes its data files where the embedded store does (VeloC copies each
//! version to the file routed for it), without index files: its records reach the head in
//! the flush outcome.

use std::path::PathBuf;

use crate::record::{CkptId, Rank};

/// Sub-directory holding the manifests.
pub(crate) const MANIFEST_DIR: &str = "manifests";

/// Checkpoint name given to VeloC (files `ompcluster-<r>-<k>.dat`).
#[cfg_attr(not(feature = "veloc"), allow(dead_code))]
pub(crate) const VELOC_NAME: &str = "ompcluster";

pub(crate) fn ckpt_dir(ckpt: CkptId) -> PathBuf {
    PathBuf::from(format!("ckpt-{ckpt}"))
}

pub(crate) fn data_file(ckpt: CkptId, rank: Rank) -> PathBuf {
    ckpt_dir(ckpt).join(format!("rank-{rank}.data"))
}

pub(crate) fn index_file(ckpt: CkptId, rank: Rank) -> PathBuf {
    ckpt_dir(ckpt).join(format!("rank-{rank}.index.json"))
}

pub(crate) fn manifest_file(version: CkptId) -> PathBuf {
    PathBuf::from(MANIFEST_DIR).join(format!("manifest-{version}.json"))
}

/// `manifest-<k>.json` -> k.
pub(crate) fn parse_manifest_name(name: &str) -> Option<CkptId> {
    parse_u64(name.strip_prefix("manifest-")?.strip_suffix(".json")?)
}

/// `ckpt-<k>` -> k.
pub(crate) fn parse_ckpt_dir(name: &str) -> Option<CkptId> {
    parse_u64(name.strip_prefix("ckpt-")?)
}

/// `rank-<r>.index.json` -> `rank-<r>.data`.
pub(crate) fn data_name_of_index(name: &str) -> Option<String> {
    let r = name.strip_prefix("rank-")?.strip_suffix(".index.json")?;
    parse_u64(r)?;
    Some(format!("rank-{r}.data"))
}

/// VeloC's persistent file name for our checkpoint name: `ompcluster-<r>-<k>.dat`.
#[cfg_attr(not(feature = "veloc"), allow(dead_code))]
pub(crate) fn veloc_file(ckpt: CkptId, rank: Rank) -> PathBuf {
    PathBuf::from(format!("{VELOC_NAME}-{rank}-{ckpt}.dat"))
}

/// `ompcluster-<r>-<k>.dat` -> (r, k).
pub(crate) fn parse_veloc_file(name: &str) -> Option<(Rank, CkptId)> {
    let rest = name
        .strip_prefix(VELOC_NAME)?
        .strip_prefix('-')?
        .strip_suffix(".dat")?;
    let (r, k) = rest.split_once('-')?;
    Some((Rank::try_from(parse_u64(r)?).ok()?, parse_u64(k)?))
}

fn parse_u64(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(parse_manifest_name("manifest-42.json"), Some(42));
        assert_eq!(parse_manifest_name(".manifest-42.json.abc.tmp"), None);
        assert_eq!(parse_manifest_name("manifest-+4.json"), None);
        assert_eq!(parse_ckpt_dir("ckpt-7"), Some(7));
        assert_eq!(parse_ckpt_dir("ckpt-"), None);
        assert_eq!(data_file(7, 3), PathBuf::from("ckpt-7/rank-3.data"));
        assert_eq!(
            data_name_of_index("rank-3.index.json").as_deref(),
            Some("rank-3.data")
        );
        assert_eq!(data_name_of_index("rank-x.index.json"), None);
        assert_eq!(parse_veloc_file("ompcluster-3-12.dat"), Some((3, 12)));
        assert_eq!(veloc_file(12, 3), PathBuf::from("ompcluster-3-12.dat"));
        assert_eq!(parse_veloc_file("other-3-12.dat"), None);
    }
}
