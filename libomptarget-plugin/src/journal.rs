//! The durable log published with every checkpoint, so that a job that died can be run again
//! with `ompcluster-run --resume` and skip the device work its checkpoints hold.
//!
//! **Content keys.** Every buffer version the head knows has a 64-bit key that names its
//! contents by how they were made, never by when: zeros of a size, an image's initial data, the
//! previous key plus the bytes a submit wrote, or a region's key plus the buffer's address. A
//! region's key hashes its kernel (name and the image's bytes), its argument values and the
//! address and key of every buffer it could reach. Kernels are deterministic (what recovery
//! assumes already), so two regions with one key compute the same thing, whatever the order
//! in which host threads issued them. A version made any other way (a device copy, the merge of
//! concurrent writers, memory device code allocated) gets a random key, which no later run
//! reproduces: a resumed job runs live from there.
//!
//! **The log.** For each region that ran cleanly (alone on its copies, no merge, no device
//! allocation), its key, the buffers it changed (with the device pointers found in each) and
//! what it printed; for each retrieve of at most [`RETRIEVE_LOG_MAX`] bytes, the key of what
//! was read and the bytes. Entries are kept in memory until a checkpoint publishes them: at its
//! pause the log is cut (every request before the pause has completed, see `checkpoint.rs`);
//! once every saver's flush is durable, the entries before the cut are written to
//! `resume/segment-<k>.bin` and `resume/resume-<k>.json` names every segment of the job so far
//! (with its length and xxh3 checksum) and the key of every buffer version the checkpoint
//! holds, before manifest `k` is published. A manifest thus always has its log; a log whose
//! manifest was never published is ignored.
//!
//! **Resuming** (`cluster/resume.rs`): the log and the newest manifest are read and checked
//! ([`Loaded::read`]); anything missing or damaged makes the job run live from the start.

use rustc_hash::FxHashMap as HashMap;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use xxhash_rust::xxh3::xxh3_64;

/// The log's directory inside the checkpoint persistent directory.
pub(crate) const LOG_DIR: &str = "resume";
/// `format` of a resume file. 2: its segments are [`SEGMENT_FORMAT`] 2 (1: bincode segments).
/// A resume file of another format is refused, naming both (a resumed job then runs from
/// the start): bump it whenever the file or the segments it names change.
const RESUME_FORMAT: &str = "ompcluster-resume/2";
/// Every segment file starts with these bytes, then [`SEGMENT_FORMAT`] (u32, little-endian),
/// then the segment (postcard).
const SEGMENT_MAGIC: &[u8; 8] = b"ompc-log";
/// Version of the segment encoding: 1 was bincode 1, with no header (its first bytes were
/// this number, as a u32); 2 is [`SEGMENT_MAGIC`], the version, and postcard 1.
const SEGMENT_FORMAT: u32 = 2;
/// Retrieves of at most this many bytes log what the host received; larger ones are given back
/// from the checkpoint, or the job goes live to compute them.
pub(crate) const RETRIEVE_LOG_MAX: u64 = 64 << 10;

/// Content keys (see the module's documentation).
pub(crate) mod key {
    use super::*;

    const ZERO: u64 = 1;
    const IMAGE: u64 = 2;
    const SUBMIT: u64 = 3;
    const TASK: u64 = 4;
    const WRITTEN: u64 = 5;
    const RETRIEVED: u64 = 6;
    const FRESH: u64 = 7;

    /// xxh3 of the parts' little-endian bytes, streamed: no allocation (every new version
    /// takes a key, checkpoints on or off).
    fn mix(parts: impl IntoIterator<Item = u64>) -> u64 {
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        for p in parts {
            h.update(&p.to_le_bytes());
        }
        h.digest()
    }

    /// A new buffer: zeros.
    pub(crate) fn zero(size: u64) -> u64 {
        mix([ZERO, size])
    }

    /// An image's initial data at `addr` (`image`: the image's own key, [`of_image`]).
    pub(crate) fn image(image: u64, addr: u64, size: u64) -> u64 {
        mix([IMAGE, image, addr, size])
    }

    /// A device image's bytes.
    pub(crate) fn of_image(bytes: &[u8]) -> u64 {
        xxh3_64(bytes)
    }

    /// `prev` with `bytes` written at `offset`.
    pub(crate) fn submit(prev: u64, offset: u64, bytes: &[u8]) -> u64 {
        mix([SUBMIT, prev, offset, bytes.len() as u64, xxh3_64(bytes)])
    }

    /// A region: its kernel, arguments, and what it could reach, (address, key), in any order.
    pub(crate) fn task(image: u64, kernel: &str, args: &[u64], reached: &mut [(u64, u64)]) -> u64 {
        reached.sort_unstable();
        let head = [TASK, image, xxh3_64(kernel.as_bytes()), args.len() as u64];
        mix(head.into_iter().chain(args.iter().copied()).chain(reached.iter().flat_map(|&(a, k)| [a, k])))
    }

    /// What region `task` left in the buffer at `addr` it changed.
    pub(crate) fn written(task: u64, addr: u64) -> u64 {
        mix([WRITTEN, task, addr])
    }

    /// `len` bytes at `offset` of the version with key `version`.
    pub(crate) fn retrieved(version: u64, offset: u64, len: u64) -> u64 {
        mix([RETRIEVED, version, offset, len])
    }

    /// A version made in a way no later run reproduces: a key nothing else has.
    pub(crate) fn fresh() -> u64 {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        static SALT: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        let salt = *SALT.get_or_init(|| {
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u32(std::process::id());
            h.finish()
        });
        mix([FRESH, salt, NEXT.fetch_add(1, Ordering::Relaxed)])
    }
}

/// Device pointers found in a version a region wrote (None: too many to track).
pub(crate) type Pointers = Option<Vec<u64>>;

/// A region that ran cleanly.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct TaskEntry {
    /// Its key ([`key::task`]).
    pub(crate) key: u64,
    /// Its kernel (for messages).
    pub(crate) kernel: String,
    /// The buffers it changed: address and the pointers found in it.
    pub(crate) writes: Vec<(u64, Pointers)>,
    /// What it printed on standard output and standard error.
    #[serde(with = "serde_bytes")]
    pub(crate) output: Vec<u8>,
    #[serde(with = "serde_bytes")]
    pub(crate) errors: Vec<u8>,
    /// Seconds in the kernel.
    pub(crate) kernel_s: f64,
}

/// One entry of the log.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum Entry {
    Task(TaskEntry),
    /// A retrieve: [`key::retrieved`] and the bytes.
    Retrieve {
        key: u64,
        #[serde(with = "serde_bytes")]
        bytes: Vec<u8>,
    },
}

/// A segment's body, after its header ([`SEGMENT_MAGIC`], [`SEGMENT_FORMAT`]).
#[derive(Deserialize)]
struct Segment {
    #[allow(dead_code)] // kept for a reader of the file; the resume file names the checkpoint
    ckpt: u64,
    entries: Vec<Entry>,
}

/// [`Segment`] as written (the same encoding, without a copy of the entries).
#[derive(Serialize)]
struct SegmentOut<'a> {
    ckpt: u64,
    entries: &'a [Entry],
}

impl SegmentOut<'_> {
    /// The segment file's bytes: the header, then the segment.
    fn encode(&self) -> Result<Vec<u8>, String> {
        let mut out = Vec::with_capacity(4096);
        out.extend_from_slice(SEGMENT_MAGIC);
        out.extend_from_slice(&SEGMENT_FORMAT.to_le_bytes());
        postcard::to_extend(self, out).map_err(|e| format!("cannot encode the log: {e}"))
    }
}

impl Segment {
    /// Read a segment file's bytes (`path` for messages): one of another format, or with no
    /// header, is refused naming both formats, never misread.
    fn decode(path: &Path, b: &[u8]) -> Result<Segment, String> {
        let header = SEGMENT_MAGIC.len() + 4;
        if b.len() < header || b[..SEGMENT_MAGIC.len()] != SEGMENT_MAGIC[..] {
            // Format 1 (bincode) began with its format number.
            let what = match b.get(..4) {
                Some(v) if v == 1u32.to_le_bytes() => "it is in format 1 (bincode), written by a build before format headers".to_string(),
                _ => "it is no log segment of this runtime".to_string(),
            };
            return Err(format!("the log segment {} has no format header: {what}; this build reads format {SEGMENT_FORMAT}", path.display()));
        }
        let version = u32::from_le_bytes(b[SEGMENT_MAGIC.len()..header].try_into().expect("4 bytes"));
        if version != SEGMENT_FORMAT {
            return Err(format!(
                "the log segment {} is in format {version}, written by another build of the runtime; this build reads format {SEGMENT_FORMAT}",
                path.display()
            ));
        }
        match postcard::take_from_bytes::<Segment>(&b[header..]) {
            Ok((seg, [])) => Ok(seg),
            Ok((_, rest)) => Err(format!("the log segment {} is damaged: {} bytes after its end", path.display(), rest.len())),
            Err(e) => Err(format!("the log segment {} is damaged: {e}", path.display())),
        }
    }
}

/// A segment as a resume file names it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct SegmentRef {
    file: String,
    bytes: u64,
    checksum: String,
    entries: u64,
}

/// The key of a version a checkpoint holds.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Keyed {
    /// The buffer's id in the manifest.
    region: u64,
    addr: u64,
    size: u64,
    key: u64,
}

/// Why a resume file cannot be read.
#[derive(Debug)]
enum Unreadable {
    /// It has no `format` (no resume file of any build).
    NoFormat,
    /// It is of another format than [`RESUME_FORMAT`] (another build wrote it).
    Format(String),
    /// It does not parse, or its checksum differs.
    Damaged(String),
}

impl Unreadable {
    /// The reason, about `what` (the file, named).
    fn say(&self, what: &str) -> String {
        match self {
            Unreadable::NoFormat => format!("{what} has no format field; this build reads format {RESUME_FORMAT}"),
            Unreadable::Format(f) => format!("{what} is in format {f}, written by another build of the runtime; this build reads format {RESUME_FORMAT}"),
            Unreadable::Damaged(e) => format!("{what} is damaged: {e}"),
        }
    }
}

/// `resume/resume-<k>.json`.
#[derive(Debug, Serialize, Deserialize)]
struct ResumeFile {
    format: String,
    checkpoint: u64,
    /// The program's arguments (`argv`) and its executable's checksum, for messages.
    argv: Vec<String>,
    exe: String,
    /// Microseconds since the job started, at the checkpoint's pause. An integer: the
    /// checksum is checked over the file written again after reading it, and serde_json does
    /// not read every float back to the same bits (with a float here, 2 of about 8 runs of
    /// the resume tests met a log failing its own checksum).
    at_micros: u64,
    /// Regions run before the pause.
    regions: u64,
    segments: Vec<SegmentRef>,
    buffers: Vec<Keyed>,
    /// xxh3 of the file written with this field empty: a damaged file is never trusted.
    checksum: String,
}

impl ResumeFile {
    fn encode(mut self) -> Vec<u8> {
        self.checksum.clear();
        self.checksum = checksum(&serde_json::to_vec_pretty(&self).expect("a resume file serialises"));
        serde_json::to_vec_pretty(&self).expect("a resume file serialises")
    }

    fn decode(bytes: &[u8]) -> Result<ResumeFile, Unreadable> {
        // The format first: a file of another format need not parse as this one.
        #[derive(Deserialize)]
        struct Format {
            format: Option<String>,
        }
        let format = serde_json::from_slice::<Format>(bytes).map_err(|e| Unreadable::Damaged(e.to_string()))?;
        match format.format {
            None => return Err(Unreadable::NoFormat),
            Some(f) if f != RESUME_FORMAT => return Err(Unreadable::Format(f)),
            Some(_) => {}
        }
        let mut f: ResumeFile = serde_json::from_slice(bytes).map_err(|e| Unreadable::Damaged(e.to_string()))?;
        let said = std::mem::take(&mut f.checksum);
        if checksum(&serde_json::to_vec_pretty(&f).expect("a resume file serialises")) != said {
            return Err(Unreadable::Damaged("its checksum differs".into()));
        }
        f.checksum = said;
        Ok(f)
    }
}

fn checksum(bytes: &[u8]) -> String {
    format!("xxh3:{:016x}", xxh3_64(bytes))
}

/// This program: its arguments and its executable's checksum.
fn program() -> (Vec<String>, String) {
    let argv = std::env::args().collect();
    let exe = std::fs::read("/proc/self/exe").map(|b| checksum(&b)).unwrap_or_default();
    (argv, exe)
}

/// The cut of the checkpoint in progress.
struct Cut {
    ckpt: u64,
    entries: usize,
    at_seconds: f64,
    regions: u64,
    /// (buffer id, address, size, key) of what it saves.
    keys: Vec<(u64, u64, u64, u64)>,
}

#[derive(Default)]
struct Inner {
    /// Entries not yet in a published segment.
    entries: Vec<Entry>,
    cut: Option<Cut>,
    /// Segments written so far by this job.
    segments: Vec<SegmentRef>,
    /// Buffer id -> (address, size, key) of the version the published checkpoints hold.
    keys: HashMap<u64, (u64, u64, u64)>,
    /// Entries and bytes written so far (for the report).
    written_entries: u64,
    written_bytes: u64,
}

/// The head's log (on when checkpoints are).
pub(crate) struct Journal {
    dir: PathBuf,
    argv: Vec<String>,
    exe: String,
    inner: parking_lot::Mutex<Inner>,
}

pub use run_report::JournalStats;

impl Journal {
    /// The log in `persistent/resume`. A job that does not resume removes what an earlier job
    /// left there (`fresh`).
    pub(crate) fn new(persistent: &Path, fresh: bool) -> std::io::Result<Self> {
        let dir = persistent.join(LOG_DIR);
        if fresh && dir.is_dir() {
            for e in std::fs::read_dir(&dir)?.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with("segment-") || name.starts_with("resume-") || (name.starts_with('.') && name.ends_with(".tmp")) {
                    std::fs::remove_file(e.path())?;
                }
            }
        }
        ckpt_veloc::create_private_dir_all(&dir)?;
        let (argv, exe) = program();
        Ok(Journal { dir, argv, exe, inner: Default::default() })
    }

    /// Log an entry (a region or a retrieve that completed).
    pub(crate) fn push(&self, e: Entry) {
        self.inner.lock().entries.push(e);
    }

    /// The pause of checkpoint `ckpt`: what is logged so far goes with it; `keys` are the
    /// (id, address, size, key) of the versions it saves.
    pub(crate) fn cut(&self, ckpt: u64, at_seconds: f64, regions: u64, keys: Vec<(u64, u64, u64, u64)>) {
        let mut i = self.inner.lock();
        let entries = i.entries.len();
        i.cut = Some(Cut { ckpt, entries, at_seconds, regions, keys });
    }

    /// Checkpoint `ckpt` failed: what its cut took goes with the next one.
    pub(crate) fn abandon(&self, ckpt: u64) {
        let mut i = self.inner.lock();
        if i.cut.as_ref().is_some_and(|c| c.ckpt == ckpt) {
            i.cut = None;
        }
    }

    /// A buffer was freed: no later checkpoint holds it.
    pub(crate) fn forget(&self, id: u64) {
        self.inner.lock().keys.remove(&id);
    }

    /// Versions an earlier job's checkpoint holds that this job adopted (id -> addr, size, key).
    pub(crate) fn adopt(&self, id: u64, addr: u64, size: u64, key: u64) {
        self.inner.lock().keys.insert(id, (addr, size, key));
    }

    /// Write checkpoint `ckpt`'s log: its segment, then its resume file naming `regions` (the
    /// buffers its manifest lists), durably; call before publishing the manifest. Then keep
    /// the resume files of the newest `keep` checkpoints and the segments they name.
    pub(crate) fn write(&self, ckpt: u64, regions: impl Iterator<Item = u64>, keep: usize) -> Result<(), String> {
        // Encoded under the lock, written without it (regions go on logging meanwhile, after
        // the cut); the keys become the published ones only once the files are durable.
        let (cut, segment, mut segments, buffers) = {
            let mut i = self.inner.lock();
            let Some(cut) = i.cut.take().filter(|c| c.ckpt == ckpt) else {
                return Err(format!("the log has no cut for checkpoint {ckpt}"));
            };
            let segment = if cut.entries > 0 {
                Some(SegmentOut { ckpt, entries: &i.entries[..cut.entries] }.encode()?)
            } else {
                None
            };
            let saved: HashMap<u64, (u64, u64, u64)> = cut.keys.iter().map(|&(id, addr, size, key)| (id, (addr, size, key))).collect();
            let buffers: Vec<Keyed> = regions
                .filter_map(|id| saved.get(&id).or_else(|| i.keys.get(&id)).map(|&(addr, size, key)| Keyed { region: id, addr, size, key }))
                .collect();
            (cut, segment, i.segments.clone(), buffers)
        };
        let mut new_segment = None;
        if let Some(bytes) = segment {
            let file = format!("segment-{ckpt}.bin");
            atomic_write(&self.dir.join(&file), &bytes).map_err(|e| format!("cannot write the log {}: {e}", self.dir.join(&file).display()))?;
            let r = SegmentRef { file, bytes: bytes.len() as u64, checksum: checksum(&bytes), entries: cut.entries as u64 };
            segments.push(r.clone());
            new_segment = Some((r, bytes.len() as u64));
        }
        let file = ResumeFile {
            format: RESUME_FORMAT.into(),
            checkpoint: ckpt,
            argv: self.argv.clone(),
            exe: self.exe.clone(),
            at_micros: (cut.at_seconds * 1e6) as u64,
            regions: cut.regions,
            segments: segments.clone(),
            buffers,
            checksum: String::new(),
        };
        let json = file.encode();
        let path = self.dir.join(format!("resume-{ckpt}.json"));
        atomic_write(&path, &json).map_err(|e| format!("cannot write the log {}: {e}", path.display()))?;
        let mut i = self.inner.lock();
        for &(id, addr, size, key) in &cut.keys {
            i.keys.insert(id, (addr, size, key));
        }
        if let Some((r, bytes)) = new_segment {
            i.entries.drain(..cut.entries);
            i.segments.push(r);
            i.written_entries += cut.entries as u64;
            i.written_bytes += bytes;
        }
        drop(i);
        self.prune(keep);
        Ok(())
    }

    /// Keep the resume files of the newest `keep` checkpoints and the segments they name
    /// (failures to delete are harmless: a later prune tries again).
    fn prune(&self, keep: usize) {
        let Ok(rd) = std::fs::read_dir(&self.dir) else { return };
        let mut resumes: Vec<(u64, PathBuf)> = rd
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let k = name.strip_prefix("resume-")?.strip_suffix(".json")?.parse().ok()?;
                Some((k, e.path()))
            })
            .collect();
        resumes.sort_unstable();
        let split = resumes.len().saturating_sub(keep.max(1));
        let mut named = std::collections::HashSet::new();
        for (_, p) in &resumes[split..] {
            let Some(f) = std::fs::read(p).ok().and_then(|b| ResumeFile::decode(&b).ok()) else {
                return; // a kept file unreadable: delete nothing
            };
            named.extend(f.segments.into_iter().map(|s| s.file));
        }
        for (_, p) in &resumes[..split] {
            let _ = std::fs::remove_file(p);
        }
        if let Ok(rd) = std::fs::read_dir(&self.dir) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with("segment-") && !named.contains(&name) {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
    }

    /// Entries and bytes written so far.
    pub(crate) fn stats(&self) -> JournalStats {
        let i = self.inner.lock();
        JournalStats { entries: i.written_entries, bytes: i.written_bytes }
    }
}

/// Write `bytes` to `path` durably (`ckpt_veloc::atomic_write`: a randomly named temporary
/// file beside it, fsync, rename, fsync of the directory).
fn atomic_write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    ckpt_veloc::atomic_write(path, bytes).map_err(|(_, e)| e)
}

/// A checkpointed version the resumed job may adopt: its key and where the data is.
#[derive(Debug, Clone)]
pub(crate) struct Checkpointed {
    pub(crate) key: u64,
    pub(crate) record: ckpt_veloc::RegionRecord,
}

/// What a resumed job reads: the newest published checkpoint and its log.
pub(crate) struct Loaded {
    pub(crate) checkpoint: u64,
    /// Regions by key.
    pub(crate) tasks: HashMap<u64, TaskEntry>,
    /// Retrieved bytes by key.
    pub(crate) retrieves: HashMap<u64, Vec<u8>>,
    /// By device address: what the checkpoint holds there.
    pub(crate) by_addr: HashMap<u64, Checkpointed>,
    /// The first job's arguments differ from this one's / its executable does.
    pub(crate) other_argv: bool,
    pub(crate) other_exe: bool,
    /// Seconds into the first job, and its regions, at the checkpoint's pause.
    pub(crate) at_seconds: f64,
    pub(crate) regions: u64,
    /// Regions in a row the log did not hold, while fast-forwarding.
    pub(crate) live_in_a_row: u64,
}

impl Loaded {
    /// Read the newest manifest in `persistent` and its log, checking every checksum. The
    /// error says why nothing can be resumed.
    pub(crate) fn read(persistent: &Path) -> Result<Loaded, String> {
        let k = ckpt_veloc::latest_version(persistent)
            .map_err(|e| format!("cannot read the checkpoints in {}: {e}", persistent.display()))?
            .ok_or_else(|| format!("no published checkpoint in {}", persistent.display()))?;
        let manifest = ckpt_veloc::Manifest::read(persistent, k).map_err(|e| format!("checkpoint {k} is unusable: {e}"))?;
        let dir = persistent.join(LOG_DIR);
        let path = dir.join(format!("resume-{k}.json"));
        let bytes = std::fs::read(&path).map_err(|e| format!("the log of checkpoint {k} ({}) cannot be read: {e}", path.display()))?;
        let file = ResumeFile::decode(&bytes).map_err(|e| e.say(&format!("the log of checkpoint {k} ({})", path.display())))?;
        if file.checkpoint != k {
            return Err(format!("the log of checkpoint {k} ({}) is of checkpoint {}", path.display(), file.checkpoint));
        }
        let mut tasks = HashMap::default();
        let mut retrieves = HashMap::default();
        for s in &file.segments {
            if s.file.contains('/') || !s.file.starts_with("segment-") {
                return Err(format!("the log of checkpoint {k} names a bad segment {:?}", s.file));
            }
            let p = dir.join(&s.file);
            let b = std::fs::read(&p).map_err(|e| format!("the log segment {} cannot be read: {e}", p.display()))?;
            if b.len() as u64 != s.bytes || checksum(&b) != s.checksum {
                return Err(format!("the log segment {} is damaged (length or checksum differs)", p.display()));
            }
            let seg = Segment::decode(&p, &b)?;
            if seg.entries.len() as u64 != s.entries {
                return Err(format!("the log segment {} holds {} entries, not the {} its resume file says", p.display(), seg.entries.len(), s.entries));
            }
            for e in seg.entries {
                match e {
                    Entry::Task(t) => {
                        tasks.entry(t.key).or_insert(t);
                    }
                    Entry::Retrieve { key, bytes } => {
                        retrieves.entry(key).or_insert(bytes);
                    }
                }
            }
        }
        let mut by_addr = HashMap::default();
        for b in &file.buffers {
            if let Some(rec) = manifest.region(b.region).filter(|r| r.size == b.size) {
                by_addr.insert(b.addr, Checkpointed { key: b.key, record: rec.clone() });
            }
        }
        let (argv, exe) = program();
        Ok(Loaded {
            checkpoint: k,
            tasks,
            retrieves,
            by_addr,
            other_argv: argv != file.argv,
            other_exe: exe != file.exe,
            at_seconds: file.at_micros as f64 * 1e-6,
            regions: file.regions,
            live_in_a_row: 0,
        })
    }
}

#[cfg(test)]
mod tests;
