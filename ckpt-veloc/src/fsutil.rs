//! File-system helpers: private directories, write probes, durable atomic
//! publication (write a randomly named temporary file in the target
//! directory, fsync it, rename it, fsync the directory).

use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// Creates `dir` and its missing parents with mode 0700. An existing
/// directory is left as it is.
pub fn create_private_dir_all(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Checks that a file can be created and written in `dir` (with a random
/// name, removed again).
pub(crate) fn probe_writable(dir: &Path) -> io::Result<()> {
    let mut f = tempfile::Builder::new()
        .prefix(".ompcluster-probe.")
        .tempfile_in(dir)?;
    f.write_all(b"probe")?;
    f.as_file().sync_all()?;
    f.close()
}

/// Creates `path` (0700, with its missing parents) and checks that a file can be written in
/// it: the start-up check of every directory a store uses, failing with the `role`
/// (`scratch`, `persistent`) and what chose the directory (`var`).
pub(crate) fn usable_dir(role: &'static str, var: &'static str, path: &Path) -> Result<(), crate::error::OpenError> {
    use crate::error::OpenError;
    create_private_dir_all(path).map_err(|source| OpenError::CreateDir { role, var, path: path.to_path_buf(), source })?;
    probe_writable(path).map_err(|source| OpenError::NotWritable { role, var, path: path.to_path_buf(), source })
}

/// Name of the lock file that marks a scratch directory as in use.
const SCRATCH_LOCK: &str = ".owner.lock";

/// Marks the scratch directory `dir` as in use by this process for as long as the returned
/// file is open: an exclusive `flock` on `dir/.owner.lock`, taken on a temporary name and
/// then renamed into place, so that the lock file never exists unlocked while its owner
/// lives.
pub(crate) fn claim_scratch(dir: &Path) -> io::Result<File> {
    use std::os::fd::AsRawFd;
    let tmp = tempfile::Builder::new().prefix(".owner.").tempfile_in(dir)?;
    // SAFETY: flock on a descriptor `tmp` owns; no memory is involved.
    if unsafe { libc::flock(tmp.as_file().as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(io::Error::last_os_error());
    }
    tmp.persist(dir.join(SCRATCH_LOCK)).map_err(|e| e.error)
}

/// Removes the directories `base/<prefix>*` of this user whose owner died: their lock file
/// exists and can be locked. A directory without a lock file (being created, or made before
/// lock files existed) is left alone. Returns the directories removed.
pub(crate) fn sweep_dead_scratch(base: &Path, prefix: &str) -> Vec<PathBuf> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let mut removed = Vec::new();
    let Ok(entries) = fs::read_dir(base) else { return removed };
    for e in entries.flatten() {
        if !e.file_name().to_string_lossy().starts_with(prefix) {
            continue;
        }
        let dir = e.path();
        if !fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir() && m.uid() == me) {
            continue;
        }
        let Ok(lock) = File::open(dir.join(SCRATCH_LOCK)) else { continue };
        // SAFETY: as in `claim_scratch`.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 && fs::remove_dir_all(&dir).is_ok() {
            removed.push(dir);
        }
    }
    removed
}

/// fsyncs a directory so that renames in it are durable.
pub(crate) fn fsync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// A temporary file in the directory of `dest`, to be published under
/// `dest` by [`publish`].
pub(crate) fn temp_beside(dest: &Path) -> io::Result<tempfile::NamedTempFile> {
    let dir = dest.parent().unwrap_or(Path::new("."));
    let name = dest.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .tempfile_in(dir)
}

/// fsyncs `tmp`, renames it to `dest` and fsyncs the directory.
pub(crate) fn publish(tmp: tempfile::NamedTempFile, dest: &Path) -> io::Result<()> {
    tmp.as_file().sync_all()?;
    tmp.persist(dest).map_err(|e| e.error)?;
    fsync_dir(dest.parent().unwrap_or(Path::new(".")))
}

/// Atomically and durably replaces `dest` with `bytes`. Errors carry the
/// path that failed.
pub fn atomic_write(dest: &Path, bytes: &[u8]) -> Result<(), (PathBuf, io::Error)> {
    let mut tmp = temp_beside(dest).map_err(|e| (dest.to_path_buf(), e))?;
    let tmp_path = tmp.path().to_path_buf();
    tmp.write_all(bytes).map_err(|e| (tmp_path, e))?;
    publish(tmp, dest).map_err(|e| (dest.to_path_buf(), e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn private_dirs_and_atomic_write() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("a/b");
        create_private_dir_all(&d).unwrap();
        assert_eq!(
            fs::metadata(&d).unwrap().permissions().mode() & 0o777,
            0o700
        );
        assert_eq!(
            fs::metadata(t.path().join("a"))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o700
        );
        probe_writable(&d).unwrap();
        let f = d.join("x.json");
        atomic_write(&f, b"one").unwrap();
        atomic_write(&f, b"two").unwrap();
        assert_eq!(fs::read(&f).unwrap(), b"two");
        // No temporary files are left behind.
        assert_eq!(fs::read_dir(&d).unwrap().count(), 1);
    }

    #[test]
    fn scratch_of_a_dead_owner_is_swept_a_live_one_kept() {
        let t = tempfile::tempdir().unwrap();
        let live = t.path().join("scr-live");
        let dead = t.path().join("scr-dead");
        let unclaimed = t.path().join("scr-new");
        for d in [&live, &dead, &unclaimed] {
            create_private_dir_all(d).unwrap();
        }
        let _held = claim_scratch(&live).unwrap();
        drop(claim_scratch(&dead).unwrap()); // its owner is gone
        assert_eq!(sweep_dead_scratch(t.path(), "scr-"), vec![dead.clone()]);
        assert!(live.is_dir() && unclaimed.is_dir() && !dead.exists());
    }

    #[test]
    fn directory_under_a_regular_file_fails_even_as_root() {
        let t = tempfile::tempdir().unwrap();
        let file = t.path().join("plain");
        fs::write(&file, b"x").unwrap();
        assert!(create_private_dir_all(&file.join("sub")).is_err());
        assert!(probe_writable(&file).is_err());
    }
}
