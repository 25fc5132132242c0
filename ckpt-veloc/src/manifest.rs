//! Global manifests (one per published version), the head's checkpoint map,
//! loading regions, and retention.
//!
//! A manifest of version `k` lists *every* region of the program state at
//! checkpoint `k`: regions saved in `k`, and, for regions unchanged since an
//! earlier checkpoint, the record of that earlier save (incremental
//! checkpoints). Loading only ever goes through a manifest's record, and
//! always checks the size and the xxh3 checksum.
//!
//! Retention ([`prune`]) keeps the newest `keep` manifests and deletes data
//! files of published-or-older checkpoints that no kept manifest refers to.
//! Checkpoints newer than the newest manifest are in flight and untouched.
//! Old manifests are deleted before data, so a crash in between leaves
//! unreferenced data, never a manifest pointing at deleted data.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fs::{self, File};
use std::io;
use std::num::NonZeroUsize;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::embedded::{FlushIndex, INDEX_FORMAT};
use crate::error::{LoadError, ManifestError};
use crate::fsutil;
use crate::layout;
use crate::record::{now_unix_ms, Checksum, CkptId, Rank, RegionId, RegionRecord};

/// Format tag written in every manifest (and, with the flush index's, what `docs/checkpoints.md`
/// calls the checkpoint formats). A manifest of another format, or with none, is refused
/// naming both ([`ManifestError::OtherFormat`]), before the rest of it is read: bump it
/// whenever a manifest's fields or their meaning change (a record's too). 1: JSON, as since
/// the first build.
pub const MANIFEST_FORMAT: &str = "ompcluster-ckpt-manifest/1";

/// The `format` of a JSON file, read before the rest: a file of another format need not
/// parse as this one. `Ok(())` if it is `expected`.
fn check_format(path: &Path, bytes: &[u8], expected: &'static str) -> Result<(), ManifestError> {
    #[derive(Deserialize)]
    struct Format {
        format: Option<String>,
    }
    let f: Format = serde_json::from_slice(bytes).map_err(|e| ManifestError::Damaged {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    match f.format {
        Some(f) if f == expected => Ok(()),
        found => Err(ManifestError::OtherFormat {
            path: path.to_path_buf(),
            found,
            expected,
        }),
    }
}

/// A published checkpoint version.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`MANIFEST_FORMAT`].
    pub format: String,
    /// The version (= the id of the checkpoint it completes).
    pub version: CkptId,
    /// Wall-clock publication time, ms since the Unix epoch.
    pub created_unix_ms: u64,
    /// Every region of the program state, sorted by region id.
    pub regions: Vec<RegionRecord>,
}

impl Manifest {
    /// Reads the manifest of `version` in the persistent directory `dir`.
    pub fn read(dir: &Path, version: CkptId) -> Result<Self, ManifestError> {
        let path = dir.join(layout::manifest_file(version));
        if !path.exists() {
            return Err(ManifestError::NoSuchVersion {
                version,
                dir: dir.to_path_buf(),
                path,
            });
        }
        Self::read_file(&path)
    }

    /// Reads and checks one manifest file.
    pub fn read_file(path: &Path) -> Result<Self, ManifestError> {
        let bytes = fs::read(path).map_err(|source| ManifestError::Io {
            op: "read",
            path: path.to_path_buf(),
            source,
        })?;
        let damaged = |reason: String| ManifestError::Damaged {
            path: path.to_path_buf(),
            reason,
        };
        check_format(path, &bytes, MANIFEST_FORMAT)?;
        let m: Manifest = serde_json::from_slice(&bytes).map_err(|e| damaged(e.to_string()))?;
        m.check().map_err(damaged)?;
        Ok(m)
    }

    /// Consistency checks shared by reading and publishing.
    fn check(&self) -> Result<(), String> {
        if self.format != MANIFEST_FORMAT {
            return Err(format!("unknown format {:?}", self.format));
        }
        let mut prev = None;
        for r in &self.regions {
            if prev.is_some_and(|p| p >= r.region) {
                return Err(format!(
                    "regions not sorted or region {} listed twice",
                    r.region
                ));
            }
            prev = Some(r.region);
            if r.ckpt > self.version {
                return Err(format!(
                    "region {} refers to checkpoint {} > version {}",
                    r.region, r.ckpt, self.version
                ));
            }
            if r.file.is_absolute()
                || r.file
                    .components()
                    .any(|c| !matches!(c, std::path::Component::Normal(_)))
            {
                return Err(format!(
                    "region {} has a file outside the directory: {}",
                    r.region,
                    r.file.display()
                ));
            }
        }
        Ok(())
    }

    /// The record of `region`, if it is part of this version.
    pub fn region(&self, region: RegionId) -> Option<&RegionRecord> {
        self.regions
            .binary_search_by_key(&region, |r| r.region)
            .ok()
            .map(|i| &self.regions[i])
    }

    /// Total bytes of the program state in this version.
    pub fn total_bytes(&self) -> u64 {
        self.regions.iter().map(|r| r.size).sum()
    }

    /// Ranks that saved at least one region of this version.
    pub fn ranks(&self) -> BTreeSet<Rank> {
        self.regions.iter().map(|r| r.rank).collect()
    }

    /// Loads and verifies `region` of this version from `dir`.
    pub fn load_region(&self, dir: &Path, region: RegionId) -> Result<Vec<u8>, LoadError> {
        let rec = self.region(region).ok_or(LoadError::NoSuchRegion {
            version: self.version,
            region,
        })?;
        load_record(dir, rec)
    }
}

/// Path of the manifest of `version` in `dir`.
pub fn manifest_path(dir: &Path, version: CkptId) -> PathBuf {
    dir.join(layout::manifest_file(version))
}

/// Published versions in `dir`, oldest first (none if nothing was published).
pub fn list_versions(dir: &Path) -> Result<Vec<CkptId>, ManifestError> {
    let mdir = dir.join(layout::MANIFEST_DIR);
    let rd = match fs::read_dir(&mdir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if dir.is_dir() {
                return Ok(Vec::new());
            }
            return Err(ManifestError::Io {
                op: "read directory",
                path: dir.to_path_buf(),
                source: e,
            });
        }
        Err(source) => {
            return Err(ManifestError::Io {
                op: "read directory",
                path: mdir,
                source,
            })
        }
    };
    let mut v = Vec::new();
    for e in rd {
        let e = e.map_err(|source| ManifestError::Io {
            op: "read directory",
            path: mdir.clone(),
            source,
        })?;
        if let Some(k) = e.file_name().to_str().and_then(layout::parse_manifest_name) {
            v.push(k);
        }
    }
    v.sort_unstable();
    Ok(v)
}

/// The newest published version in `dir`, if any.
pub fn latest_version(dir: &Path) -> Result<Option<CkptId>, ManifestError> {
    Ok(list_versions(dir)?.last().copied())
}

/// Loads and verifies `region` of published `version` from `dir`.
pub fn load_region(dir: &Path, version: CkptId, region: RegionId) -> Result<Vec<u8>, LoadError> {
    Manifest::read(dir, version)?.load_region(dir, region)
}

/// Loads and verifies the region described by `rec` from `dir`.
pub fn load_record(dir: &Path, rec: &RegionRecord) -> Result<Vec<u8>, LoadError> {
    // Check the file before allocating: a damaged size must not allocate.
    let (f, path) = open_region_file(dir, rec)?;
    let mut buf = vec![0u8; rec.size as usize];
    read_and_check(&f, path, rec, &mut buf)?;
    Ok(buf)
}

/// Loads and verifies the region described by `rec` into `buf`, whose
/// length must be the region's size. On error `buf` may hold partial data.
pub fn load_record_into(dir: &Path, rec: &RegionRecord, buf: &mut [u8]) -> Result<(), LoadError> {
    if buf.len() as u64 != rec.size {
        return Err(LoadError::SizeMismatch {
            region: rec.region,
            size: rec.size,
            buf_len: buf.len(),
        });
    }
    let (f, path) = open_region_file(dir, rec)?;
    read_and_check(&f, path, rec, buf)
}

/// Opens the data file of `rec` and checks that it holds the whole region.
fn open_region_file(dir: &Path, rec: &RegionRecord) -> Result<(File, PathBuf), LoadError> {
    let path = rec.path_in(dir);
    let io_err = |source: io::Error| LoadError::Io {
        region: rec.region,
        rank: rec.rank,
        ckpt: rec.ckpt,
        path: path.clone(),
        source,
    };
    let f = File::open(&path).map_err(io_err)?;
    let file_len = f.metadata().map_err(io_err)?.len();
    let end = rec.offset.saturating_add(rec.size);
    if end > file_len {
        return Err(LoadError::Truncated {
            region: rec.region,
            path,
            file_len,
            offset: rec.offset,
            end,
        });
    }
    Ok((f, path))
}

fn read_and_check(
    f: &File,
    path: PathBuf,
    rec: &RegionRecord,
    buf: &mut [u8],
) -> Result<(), LoadError> {
    if let Err(source) = f.read_exact_at(buf, rec.offset) {
        return Err(LoadError::Io {
            region: rec.region,
            rank: rec.rank,
            ckpt: rec.ckpt,
            path,
            source,
        });
    }
    let found = Checksum::of(buf);
    if found != rec.checksum {
        return Err(LoadError::Corrupt {
            region: rec.region,
            path,
            found,
            expected: rec.checksum,
        });
    }
    Ok(())
}

/// The records a rank wrote when its flush of `ckpt` completed (its
/// `rank-<r>.index.json`), or `None` if it never completed. Lets the head
/// collect records from the shared directory, e.g. of a rank that died after
/// flushing but before reporting.
pub fn flushed_records(
    dir: &Path,
    ckpt: CkptId,
    rank: Rank,
) -> Result<Option<Vec<RegionRecord>>, ManifestError> {
    let path = dir.join(layout::index_file(ckpt, rank));
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(ManifestError::Io {
                op: "read",
                path,
                source,
            })
        }
    };
    check_format(&path, &bytes, INDEX_FORMAT)?;
    let idx: FlushIndex = serde_json::from_slice(&bytes).map_err(|e| ManifestError::Damaged {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    if idx.ckpt != ckpt || idx.rank != rank {
        return Err(ManifestError::Damaged {
            path,
            reason: "index does not match its name".into(),
        });
    }
    Ok(Some(idx.records))
}

/// The head's view of the program state: for each region, the record of
/// its latest save. Feed it every rank's [`FlushOutcome`](crate::FlushOutcome)
/// records, then [`publish`](Self::publish) once all ranks' flushes of a
/// checkpoint are complete.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CheckpointMap {
    regions: BTreeMap<RegionId, RegionRecord>,
}

/// What [`CheckpointMap::publish`] did.
#[derive(Clone, Debug, PartialEq)]
pub struct Published {
    /// The manifest written.
    pub manifest: Manifest,
    /// Its path.
    pub path: PathBuf,
    /// What retention removed.
    pub pruned: PruneReport,
}

impl CheckpointMap {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// The map as of a published version (e.g. after restarting the head).
    pub fn from_manifest(m: &Manifest) -> Self {
        CheckpointMap {
            regions: m.regions.iter().map(|r| (r.region, r.clone())).collect(),
        }
    }

    /// Records new saves; a region's newer save replaces an older one.
    pub fn record(&mut self, records: impl IntoIterator<Item = RegionRecord>) {
        for r in records {
            match self.regions.get(&r.region) {
                Some(old) if old.ckpt > r.ckpt => {}
                _ => {
                    self.regions.insert(r.region, r);
                }
            }
        }
    }

    /// Removes a region that is no longer part of the program state (its
    /// buffer was freed); later manifests will not list it.
    pub fn forget(&mut self, region: RegionId) -> Option<RegionRecord> {
        self.regions.remove(&region)
    }

    /// The record of `region`.
    pub fn get(&self, region: RegionId) -> Option<&RegionRecord> {
        self.regions.get(&region)
    }

    /// Number of regions.
    pub fn len(&self) -> usize {
        self.regions.len()
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }

    /// All records, by region id.
    pub fn iter(&self) -> impl Iterator<Item = &RegionRecord> {
        self.regions.values()
    }

    /// Writes the manifest of `version` atomically and durably (temporary
    /// file, fsync, rename, fsync directory), then keeps only the newest
    /// `keep` versions. Call only when every rank's flush of `version` is
    /// complete.
    pub fn publish(
        &self,
        dir: &Path,
        version: CkptId,
        keep: NonZeroUsize,
    ) -> Result<Published, ManifestError> {
        if let Some(r) = self.regions.values().find(|r| r.ckpt > version) {
            return Err(ManifestError::FutureRecord {
                version,
                region: r.region,
                ckpt: r.ckpt,
            });
        }
        let manifest = Manifest {
            format: MANIFEST_FORMAT.to_string(),
            version,
            created_unix_ms: now_unix_ms(),
            regions: self.regions.values().cloned().collect(),
        };
        let mdir = dir.join(layout::MANIFEST_DIR);
        fsutil::create_private_dir_all(&mdir).map_err(|source| ManifestError::Io {
            op: "create directory",
            path: mdir.clone(),
            source,
        })?;
        let path = manifest_path(dir, version);
        manifest.check().map_err(|reason| ManifestError::Damaged {
            path: path.clone(),
            reason,
        })?;
        let json = serde_json::to_vec_pretty(&manifest).expect("manifest serialises");
        fsutil::atomic_write(&path, &json).map_err(|(path, source)| ManifestError::Io {
            op: "publish",
            path,
            source,
        })?;
        let pruned = prune(dir, keep)?;
        Ok(Published {
            manifest,
            path,
            pruned,
        })
    }
}

/// What [`prune`] removed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PruneReport {
    /// Versions whose manifests were deleted.
    pub removed_versions: Vec<CkptId>,
    /// Data, index and stale temporary files deleted.
    pub removed_files: Vec<PathBuf>,
}

/// Keeps the newest `keep` manifests in `dir` and deletes every file of a
/// checkpoint not newer than the newest manifest that no kept manifest
/// refers to. If a kept manifest cannot be read, nothing is deleted.
pub fn prune(dir: &Path, keep: NonZeroUsize) -> Result<PruneReport, ManifestError> {
    remove_versions(dir, keep.get())
}

/// Deletes every checkpoint in `dir`: its manifests and the data and index files they
/// name (only files of the layout the stores write; nothing else in `dir` is touched).
pub fn clear(dir: &Path) -> Result<PruneReport, ManifestError> {
    remove_versions(dir, 0)
}

fn remove_versions(dir: &Path, keep: usize) -> Result<PruneReport, ManifestError> {
    let versions = list_versions(dir)?;
    let Some(&newest) = versions.last() else {
        return Ok(PruneReport::default());
    };
    let split = versions.len().saturating_sub(keep);
    let (old, kept) = versions.split_at(split);

    // Read the kept manifests first: if one is damaged, delete nothing.
    let mut referenced: HashSet<PathBuf> = HashSet::new();
    for &v in kept {
        for r in Manifest::read(dir, v)?.regions {
            referenced.insert(r.file);
        }
    }
    let mut report = PruneReport::default();
    for &v in old {
        let p = manifest_path(dir, v);
        remove_file(&p)?;
        report.removed_versions.push(v);
    }
    if !old.is_empty() {
        let mdir = dir.join(layout::MANIFEST_DIR);
        fsutil::fsync_dir(&mdir).map_err(|source| ManifestError::Io {
            op: "fsync",
            path: mdir,
            source,
        })?;
    }

    let rd = fs::read_dir(dir).map_err(|source| ManifestError::Io {
        op: "read directory",
        path: dir.to_path_buf(),
        source,
    })?;
    for e in rd {
        let e = e.map_err(|source| ManifestError::Io {
            op: "read directory",
            path: dir.to_path_buf(),
            source,
        })?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(k) = layout::parse_ckpt_dir(name) {
            if k > newest || !e.path().is_dir() {
                continue;
            }
            prune_ckpt_dir(dir, name, &referenced, &mut report)?;
        } else if let Some((r, k)) = layout::parse_veloc_file(name) {
            // VeloC's link to the data file: goes with it.
            if k <= newest && !referenced.contains(&layout::data_file(k, r)) {
                remove_file(&e.path())?;
                report.removed_files.push(e.path());
            }
        }
    }
    Ok(report)
}

fn prune_ckpt_dir(
    dir: &Path,
    name: &str,
    referenced: &HashSet<PathBuf>,
    report: &mut PruneReport,
) -> Result<(), ManifestError> {
    let cdir = dir.join(name);
    let rd = fs::read_dir(&cdir).map_err(|source| ManifestError::Io {
        op: "read directory",
        path: cdir.clone(),
        source,
    })?;
    let mut left = 0usize;
    for e in rd {
        let e = e.map_err(|source| ManifestError::Io {
            op: "read directory",
            path: cdir.clone(),
            source,
        })?;
        let fname = e.file_name();
        let fname = fname.to_string_lossy();
        let data_name = layout::data_name_of_index(&fname).unwrap_or_else(|| fname.to_string());
        if referenced.contains(&Path::new(name).join(&data_name)) {
            left += 1;
            continue;
        }
        remove_file(&e.path())?;
        report.removed_files.push(e.path());
    }
    if left == 0 {
        // Another rank may be racing to create it; ignore failures.
        let _ = fs::remove_dir(&cdir);
    }
    Ok(())
}

fn remove_file(p: &Path) -> Result<(), ManifestError> {
    match fs::remove_file(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(ManifestError::Io {
            op: "remove",
            path: p.to_path_buf(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(region: RegionId, ckpt: CkptId, rank: Rank, bytes: &[u8], dir: &Path) -> RegionRecord {
        // One file per (ckpt, rank, region) for these unit tests.
        let file = PathBuf::from(format!("ckpt-{ckpt}/rank-{rank}.data"));
        let full = dir.join(&file);
        fs::create_dir_all(full.parent().unwrap()).unwrap();
        let mut existing = fs::read(&full).unwrap_or_default();
        let offset = existing.len() as u64;
        existing.extend_from_slice(bytes);
        fs::write(&full, &existing).unwrap();
        RegionRecord {
            region,
            ckpt,
            rank,
            size: bytes.len() as u64,
            checksum: Checksum::of(bytes),
            file,
            offset,
            saved_unix_ms: 1,
        }
    }

    #[test]
    fn publish_load_and_incremental_prune() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        let keep = NonZeroUsize::new(2).unwrap();
        let mut map = CheckpointMap::new();
        assert_eq!(latest_version(d).unwrap(), None);

        // v1: regions 1 (rank 1) and 2 (rank 2).
        map.record([rec(1, 1, 1, b"one-v1", d), rec(2, 1, 2, b"two-v1", d)]);
        map.publish(d, 1, keep).unwrap();
        // v2: only region 1 changed.
        map.record([rec(1, 2, 1, b"one-v2", d)]);
        map.publish(d, 2, keep).unwrap();
        // v3: only region 1 changed again; v1 is pruned, but ckpt-1/rank-2.data
        // is still referenced by v2 and v3 (region 2 never changed).
        map.record([rec(1, 3, 1, b"one-v3", d)]);
        let p = map.publish(d, 3, keep).unwrap();
        assert_eq!(p.pruned.removed_versions, vec![1]);
        assert!(d.join("ckpt-1/rank-2.data").exists());
        assert!(!d.join("ckpt-1/rank-1.data").exists());
        assert_eq!(list_versions(d).unwrap(), vec![2, 3]);
        assert_eq!(latest_version(d).unwrap(), Some(3));

        assert_eq!(load_region(d, 3, 2).unwrap(), b"two-v1");
        assert_eq!(load_region(d, 3, 1).unwrap(), b"one-v3");
        assert_eq!(load_region(d, 2, 1).unwrap(), b"one-v2");
        assert!(matches!(
            load_region(d, 1, 1),
            Err(LoadError::Manifest(ManifestError::NoSuchVersion { .. }))
        ));
        assert!(matches!(
            load_region(d, 3, 99),
            Err(LoadError::NoSuchRegion { .. })
        ));

        // A freed region disappears from later versions.
        map.forget(2);
        map.record([rec(1, 4, 1, b"one-v4", d)]);
        map.publish(d, 4, keep).unwrap();
        map.record([rec(1, 5, 1, b"one-v5", d)]);
        map.publish(d, 5, keep).unwrap();
        assert!(!d.join("ckpt-1").exists());
        assert_eq!(Manifest::read(d, 5).unwrap().regions.len(), 1);
    }

    #[test]
    fn in_flight_checkpoints_are_not_pruned() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        let keep = NonZeroUsize::new(1).unwrap();
        let mut map = CheckpointMap::new();
        map.record([rec(1, 1, 1, b"a", d)]);
        map.publish(d, 1, keep).unwrap();
        // Checkpoint 3 flushed by some rank but not yet published.
        let _pending = rec(1, 3, 2, b"b", d);
        map.record([rec(1, 2, 1, b"c", d)]);
        map.publish(d, 2, keep).unwrap();
        assert!(d.join("ckpt-3/rank-2.data").exists());
        assert!(!d.join("ckpt-1").exists());
    }

    #[test]
    fn future_records_are_refused() {
        let t = tempfile::tempdir().unwrap();
        let mut map = CheckpointMap::new();
        map.record([rec(1, 5, 1, b"a", t.path())]);
        let e = map
            .publish(t.path(), 4, NonZeroUsize::new(1).unwrap())
            .unwrap_err();
        assert!(matches!(
            e,
            ManifestError::FutureRecord {
                version: 4,
                region: 1,
                ckpt: 5
            }
        ));
    }

    #[test]
    fn older_records_do_not_replace_newer() {
        let t = tempfile::tempdir().unwrap();
        let mut map = CheckpointMap::new();
        map.record([rec(1, 5, 1, b"new", t.path())]);
        map.record([rec(1, 4, 2, b"old", t.path())]);
        assert_eq!(map.get(1).unwrap().ckpt, 5);
    }

    #[test]
    fn damaged_data_is_an_error_naming_the_file() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        let mut map = CheckpointMap::new();
        map.record([rec(1, 1, 1, &[5u8; 1000], d)]);
        map.publish(d, 1, NonZeroUsize::new(1).unwrap()).unwrap();
        let f = d.join("ckpt-1/rank-1.data");

        let mut b = fs::read(&f).unwrap();
        b[10] ^= 1;
        fs::write(&f, &b).unwrap();
        let e = load_region(d, 1, 1).unwrap_err();
        assert!(matches!(e, LoadError::Corrupt { .. }), "{e}");
        assert!(e.to_string().contains(&f.display().to_string()), "{e}");

        fs::write(&f, [5u8; 999]).unwrap();
        let e = load_region(d, 1, 1).unwrap_err();
        assert!(matches!(e, LoadError::Truncated { .. }), "{e}");
        assert!(e.to_string().contains(&f.display().to_string()), "{e}");

        fs::remove_file(&f).unwrap();
        let e = load_region(d, 1, 1).unwrap_err();
        assert!(matches!(e, LoadError::Io { .. }), "{e}");
        assert!(e.to_string().contains(&f.display().to_string()), "{e}");
    }

    /// A manifest and a flush index as the builds before format checks wrote them (format 1,
    /// the same as this build's) read back; one of another format, or with none, is refused
    /// naming the file and both formats, never misread.
    #[test]
    fn checkpoint_files_of_another_format_are_refused_naming_both() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        fs::create_dir_all(d.join("manifests")).unwrap();
        fs::create_dir_all(d.join("ckpt-2")).unwrap();
        fs::write(d.join("ckpt-2/rank-1.data"), b"abc").unwrap();
        let record = r#"{
      "region": 7,
      "ckpt": 2,
      "rank": 1,
      "size": 3,
      "checksum": "xxh3:78af5f94892f3950",
      "file": "ckpt-2/rank-1.data",
      "offset": 0,
      "saved_unix_ms": 1700000000000
    }"#;
        let manifest = format!(
            "{{\n  \"format\": \"ompcluster-ckpt-manifest/1\",\n  \"version\": 2,\n  \"created_unix_ms\": 1700000000001,\n  \"regions\": [\n    {record}\n  ]\n}}"
        );
        let index = format!(
            "{{\n  \"format\": \"ompcluster-ckpt-index/1\",\n  \"ckpt\": 2,\n  \"rank\": 1,\n  \"flushed_unix_ms\": 1700000000000,\n  \"records\": [\n    {record}\n  ]\n}}"
        );
        let mpath = manifest_path(d, 2);
        let ipath = d.join(layout::index_file(2, 1));
        fs::write(&mpath, &manifest).unwrap();
        fs::write(&ipath, &index).unwrap();
        let m = Manifest::read(d, 2).unwrap();
        assert_eq!((m.version, m.regions.len(), m.regions[0].region), (2, 1, 7));
        assert_eq!(m.load_region(d, 7).unwrap(), b"abc");
        assert_eq!(flushed_records(d, 2, 1).unwrap().unwrap(), m.regions);

        let later = manifest.replace("ompcluster-ckpt-manifest/1", "ompcluster-ckpt-manifest/2");
        fs::write(&mpath, later.replace("\"regions\"", "\"blocks\"")).unwrap();
        let e = Manifest::read(d, 2).unwrap_err();
        assert!(matches!(e, ManifestError::OtherFormat { .. }), "{e}");
        assert_eq!(
            e.to_string(),
            format!(
                "{} is in format ompcluster-ckpt-manifest/2, written by another build of the runtime; this build reads format ompcluster-ckpt-manifest/1",
                mpath.display()
            )
        );
        fs::write(&mpath, manifest.replace("\"format\": \"ompcluster-ckpt-manifest/1\",", "")).unwrap();
        let e = Manifest::read(d, 2).unwrap_err();
        assert_eq!(e.to_string(), format!("{} has no format field; this build reads format ompcluster-ckpt-manifest/1", mpath.display()));

        fs::write(&ipath, index.replace("ompcluster-ckpt-index/1", "ompcluster-ckpt-index/9")).unwrap();
        let e = flushed_records(d, 2, 1).unwrap_err();
        assert!(e.to_string().ends_with("is in format ompcluster-ckpt-index/9, written by another build of the runtime; this build reads format ompcluster-ckpt-index/1"), "{e}");
    }

    #[test]
    fn damaged_manifest_is_reported_and_blocks_pruning() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        let keep = NonZeroUsize::new(1).unwrap();
        let mut map = CheckpointMap::new();
        map.record([rec(1, 1, 1, b"a", d)]);
        map.publish(d, 1, keep).unwrap();
        let mpath = manifest_path(d, 1);
        fs::write(&mpath, b"{ not json").unwrap();
        let e = Manifest::read(d, 1).unwrap_err();
        assert!(e.to_string().contains(&mpath.display().to_string()), "{e}");
        assert!(prune(d, keep).is_err());
        assert!(d.join("ckpt-1/rank-1.data").exists());
    }

    #[test]
    fn a_damaged_size_fails_before_allocating() {
        let t = tempfile::tempdir().unwrap();
        let mut r = rec(1, 1, 1, b"abc", t.path());
        r.size = u64::MAX / 2;
        let e = load_record(t.path(), &r).unwrap_err();
        assert!(matches!(e, LoadError::Truncated { .. }), "{e}");
    }

    #[test]
    fn manifest_paths_cannot_escape() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        let mut map = CheckpointMap::new();
        let mut r = rec(1, 1, 1, b"a", d);
        r.file = PathBuf::from("../../etc/passwd");
        map.record([r]);
        let e = map
            .publish(d, 1, NonZeroUsize::new(1).unwrap())
            .unwrap_err();
        assert!(matches!(e, ManifestError::Damaged { .. }), "{e}");
        assert!(!manifest_path(d, 1).exists());
    }
}
