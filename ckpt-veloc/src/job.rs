//! One job per persistent directory. Checkpoint ids start at 1 in every job and retention
//! keeps the newest manifests, so two jobs sharing a directory would prune each other's files
//! (at the same time), and a job reusing an earlier job's directory would keep the earlier
//! job's newer-numbered manifests and delete its own. The head of a job therefore claims the
//! directory: an exclusive `flock` on a lock file inside it, held until the process ends,
//! refused while another job holds it; then it removes the checkpoints an earlier job left
//! (a job never restarts from another job's checkpoints).

use crate::error::OpenError;
use crate::manifest::{self, PruneReport};
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Name of the lock file in the persistent directory.
const LOCK_FILE: &str = ".ompcluster-job.lock";

/// The claim on a persistent directory: released when dropped (or when the process ends).
#[derive(Debug)]
pub struct JobClaim {
    _lock: File,
    /// What an earlier job left there and was removed.
    pub cleared: PruneReport,
}

/// Claim `dir` (which exists) for this job, `var` being the variable that chose it; see the
/// module's documentation.
pub fn claim_for_job(dir: &Path, var: &'static str) -> Result<JobClaim, OpenError> {
    let lock = lock_dir(dir, var)?;
    let cleared = manifest::clear(dir).map_err(|source| OpenError::Clear { path: dir.to_path_buf(), source })?;
    Ok(JobClaim { _lock: lock, cleared })
}

/// Claim `dir` like [`claim_for_job`], keeping what an earlier job left: the job resumes
/// from it (`ompcluster-run --resume`).
pub fn claim_for_resume(dir: &Path, var: &'static str) -> Result<JobClaim, OpenError> {
    Ok(JobClaim { _lock: lock_dir(dir, var)?, cleared: PruneReport::default() })
}

fn lock_dir(dir: &Path, var: &'static str) -> Result<File, OpenError> {
    let path = dir.join(LOCK_FILE);
    let lock = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(|source| OpenError::NotWritable { role: "persistent", var, path: dir.to_path_buf(), source })?;
    // SAFETY: flock on a descriptor this function owns; no memory is involved.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::EWOULDBLOCK) => OpenError::InUse { path: dir.to_path_buf(), var },
            _ => OpenError::NotWritable { role: "persistent", var, path: dir.to_path_buf(), source: e },
        });
    }
    Ok(lock)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StoreConfig;

    #[test]
    fn a_second_job_is_refused_and_a_later_one_starts_clean() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("persistent");
        let mut c = StoreConfig::new(0, dir.clone());
        c.scratch = crate::ScratchBase::Dir(t.path().join("scratch"));
        // An earlier job published checkpoint 1, with a file of the user's beside it.
        {
            let store = crate::open(&c).unwrap();
            store.save_region(1, 7, &[1u8; 100]).unwrap();
            let recs = store.flush(1).unwrap().wait().unwrap().records;
            let mut map = crate::CheckpointMap::new();
            map.record(recs);
            map.publish(&dir, 1, std::num::NonZeroUsize::new(2).unwrap()).unwrap();
        }
        std::fs::write(dir.join("notes.txt"), "mine").unwrap();
        assert_eq!(crate::list_versions(&dir).unwrap(), vec![1]);
        let claim = claim_for_job(&dir, "OMPCLUSTER_CP_PERSISTENT").unwrap();
        assert_eq!(claim.cleared.removed_versions, vec![1]);
        assert!(crate::list_versions(&dir).unwrap().is_empty());
        assert_eq!(std::fs::read_to_string(dir.join("notes.txt")).unwrap(), "mine", "only checkpoint files go");
        // While it runs, another job is refused (flock is per open file description).
        let e = claim_for_job(&dir, "OMPCLUSTER_CP_PERSISTENT").unwrap_err();
        assert!(e.to_string().contains("in use by another running job"), "{e}");
        drop(claim);
        claim_for_job(&dir, "OMPCLUSTER_CP_PERSISTENT").unwrap();
    }
}
