//! Checking every region of every kept version (`ompcluster-ckpt verify`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::error::{LoadError, ManifestError};
use crate::manifest::{list_versions, load_record, manifest_path, Manifest};
use crate::record::{Checksum, CkptId, RegionId};

/// One damaged region, or a damaged manifest (`region` is `None`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// Version whose manifest lists the region.
    pub version: CkptId,
    /// The region, or `None` for the manifest itself.
    pub region: Option<RegionId>,
    /// The damaged file.
    pub file: PathBuf,
    /// What is wrong (the full error message, which names the file).
    pub reason: String,
}

/// Result of checking one version.
#[derive(Clone, Debug, PartialEq)]
pub struct VersionCheck {
    /// The version.
    pub version: CkptId,
    /// Regions listed (0 if the manifest is unreadable).
    pub regions: usize,
    /// Bytes listed.
    pub bytes: u64,
    /// Everything wrong with it.
    pub damage: Vec<Damage>,
}

/// Result of [`verify_dir`].
#[derive(Clone, Debug, PartialEq, Default)]
pub struct VerifyReport {
    /// One entry per published version, oldest first.
    pub versions: Vec<VersionCheck>,
}

impl VerifyReport {
    /// True when there is at least one version and nothing is damaged.
    pub fn is_ok(&self) -> bool {
        !self.versions.is_empty() && self.versions.iter().all(|v| v.damage.is_empty())
    }

    /// All damage found.
    pub fn damage(&self) -> impl Iterator<Item = &Damage> {
        self.versions.iter().flat_map(|v| v.damage.iter())
    }
}

/// Reads every region of every published version in `dir` and checks its
/// size and checksum. Regions shared by several versions (incremental
/// checkpoints) are read once. Fails only if `dir` cannot be listed.
pub fn verify_dir(dir: &Path) -> Result<VerifyReport, ManifestError> {
    let mut cache: HashMap<(PathBuf, u64, u64, Checksum), Result<(), String>> = HashMap::new();
    let mut report = VerifyReport::default();
    for version in list_versions(dir)? {
        let mut check = VersionCheck {
            version,
            regions: 0,
            bytes: 0,
            damage: Vec::new(),
        };
        match Manifest::read(dir, version) {
            Err(e) => check.damage.push(Damage {
                version,
                region: None,
                file: manifest_path(dir, version),
                reason: e.to_string(),
            }),
            Ok(m) => {
                check.regions = m.regions.len();
                check.bytes = m.total_bytes();
                for rec in &m.regions {
                    let key = (rec.file.clone(), rec.offset, rec.size, rec.checksum);
                    let r = cache.entry(key).or_insert_with(|| {
                        load_record(dir, rec)
                            .map(drop)
                            .map_err(|e: LoadError| e.to_string())
                    });
                    if let Err(reason) = r {
                        check.damage.push(Damage {
                            version,
                            region: Some(rec.region),
                            file: rec.path_in(dir),
                            reason: reason.clone(),
                        });
                    }
                }
            }
        }
        report.versions.push(check);
    }
    Ok(report)
}
