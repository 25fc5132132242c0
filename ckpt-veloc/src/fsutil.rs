//! File-system helpers: private directories, write probes, durable atomic
//! publication (write a randomly named temporary file in the target
//! directory, fsync it, rename it, fsync the directory).

use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// Creates `dir` and its missing parents with mode 0700. An existing
/// directory is left as it is.
pub(crate) fn create_private_dir_all(dir: &Path) -> io::Result<()> {
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
pub(crate) fn atomic_write(dest: &Path, bytes: &[u8]) -> Result<(), (PathBuf, io::Error)> {
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
    fn directory_under_a_regular_file_fails_even_as_root() {
        let t = tempfile::tempdir().unwrap();
        let file = t.path().join("plain");
        fs::write(&file, b"x").unwrap();
        assert!(create_private_dir_all(&file.join("sub")).is_err());
        assert!(probe_writable(&file).is_err());
    }
}
