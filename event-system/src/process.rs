//! Processes of the job, for fencing: a rank declared dead is killed (SIGKILL) by a live rank
//! on its host, so that a frozen process can never wake up and act, and mpirun sees it end.
//! A process is named by its pid *and* its start time, so a pid the kernel has reused since is
//! never hit.

use serde::{Deserialize, Serialize};

/// One process of the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Victim {
    /// Its pid.
    pub pid: u32,
    /// Its start time (field 22 of `/proc/PID/stat`, clock ticks since boot).
    pub start: u64,
}

/// The start time of process `pid`, if it exists.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces: fields follow the last ')'.
    // After it come field 3 (state) onwards; the start time is field 22.
    stat[stat.rfind(')')? + 2..].split_whitespace().nth(19)?.parse().ok()
}

/// Has `v` ended (exited, or killed and not yet reaped)? A process that is only stopped
/// (SIGSTOP) has not.
pub fn is_gone(v: Victim) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{}/stat", v.pid)) else { return true };
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else { return true };
    let mut fields = rest.split_whitespace();
    let state = fields.next().unwrap_or("X");
    let start: Option<u64> = fields.nth(18).and_then(|s| s.parse().ok());
    state == "Z" || state == "X" || start != Some(v.start)
}

/// The state letter of process `pid` (`R`, `S`, `T` for stopped, `Z` for a zombie...), if
/// it exists.
pub fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 2..].chars().next()
}

/// This process.
pub fn me() -> Victim {
    let pid = std::process::id();
    Victim { pid, start: start_time(pid).unwrap_or(0) }
}

/// Kill `v` with SIGKILL if it is still the same process (and not this one). Returns whether a
/// signal was sent.
pub fn kill(v: Victim) -> bool {
    if v.pid == std::process::id() || v.start == 0 || start_time(v.pid) != Some(v.start) {
        return false;
    }
    // SAFETY: kill has no memory-safety preconditions; the pid names the process checked above.
    unsafe { libc::kill(v.pid as libc::pid_t, libc::SIGKILL) == 0 }
}

/// Where libomp registers process `pid` of this user: `__KMP_REGISTERED_LIB_<pid>_<uid>` in
/// `/dev/shm` (POSIX shared memory), or under that name in `/tmp` where `/dev/shm` cannot be
/// used. libomp 16 writes it as it starts (`__kmp_register_library_startup`) and removes it
/// as it shuts down (`__kmp_unregister_library`, `openmp/runtime/src/kmp_runtime.cpp`); a
/// process that ends with `_exit` or is killed leaves it behind.
pub fn libomp_registration(pid: u32) -> [std::path::PathBuf; 2] {
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let name = format!("__KMP_REGISTERED_LIB_{pid}_{uid}");
    [std::path::Path::new("/dev/shm").join(&name), std::path::Path::new("/tmp").join(name)]
}

/// Remove libomp's registration of this process, which leaves with `_exit` (libomp's own
/// shutdown, which would remove it, does not run then). Returns how many files were removed.
pub fn remove_own_registration() -> usize {
    remove_registration(std::process::id())
}

fn remove_registration(pid: u32) -> usize {
    libomp_registration(pid).iter().filter(|p| std::fs::remove_file(p).is_ok()).count()
}

/// Remove what `v`, a process of the job that ended without cleaning up (killed), left on
/// this host: its libomp registration. Only once it is gone and no other process has its
/// pid (a new process there may have registered under the same name). Returns how many
/// files were removed.
pub fn clean_after(v: Victim) -> usize {
    // A zombie (killed, not yet reaped) still has its pid.
    if v.pid == std::process::id() || start_time(v.pid).is_some() {
        return 0;
    }
    remove_registration(v.pid)
}

/// The libomp registrations of this user's processes written at or after `since`, with the
/// pid each names: regular files only (the names are in shared directories).
pub fn registrations_since(since: std::time::SystemTime) -> Vec<(u32, std::path::PathBuf)> {
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let suffix = format!("_{uid}");
    let mut found = Vec::new();
    for dir in ["/dev/shm", "/tmp"] {
        let Ok(entries) = std::fs::read_dir(dir) else { continue };
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("__KMP_REGISTERED_LIB_")).and_then(|r| r.strip_suffix(suffix.as_str())).and_then(|p| p.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(meta) = e.path().symlink_metadata() else { continue };
            if meta.is_file() && std::os::unix::fs::MetadataExt::uid(&meta) == uid && meta.modified().is_ok_and(|m| m >= since) {
                found.push((pid, e.path()));
            }
        }
    }
    found
}

/// [`clean_after`] each of `victims`, waiting up to `bound` for those just killed to be
/// reaped. Returns how many files were removed.
pub fn clean_after_all(victims: &[Victim], bound: std::time::Duration) -> usize {
    let until = std::time::Instant::now() + bound;
    let there = |v: &Victim| v.pid != std::process::id() && start_time(v.pid) == Some(v.start);
    while victims.iter().any(there) && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    victims.iter().map(|&v| clean_after(v)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_killed_process_s_libomp_registration_is_removed_once_it_is_gone() {
        let _one = REGISTRATIONS.lock().unwrap_or_else(|e| e.into_inner());
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let v = Victim { pid: child.id(), start: start_time(child.id()).unwrap() };
        // Written as libomp would (in /tmp here: /dev/shm may be missing where tests run).
        let [_, file] = libomp_registration(v.pid);
        std::fs::write(&file, "0x1-cafe-libomp.so").unwrap();
        assert_eq!(clean_after(v), 0, "still running");
        assert!(kill(v));
        // A zombie until reaped: gone, but its pid is not free yet.
        while !is_gone(v) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(clean_after(v), 0, "a zombie keeps its pid");
        let reaper = std::thread::spawn(move || child.wait().unwrap());
        // (A file an earlier process with this pid left in /dev/shm goes too.)
        assert!(clean_after_all(&[v], std::time::Duration::from_secs(5)) >= 1);
        reaper.join().unwrap();
        assert!(!file.exists());
        assert_eq!(clean_after(v), 0, "nothing left");
    }

    /// Held by the tests that write registrations: a sweep would take the other's file.
    static REGISTRATIONS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn registrations_written_since_a_moment_are_found() {
        let _one = REGISTRATIONS.lock().unwrap_or_else(|e| e.into_inner());
        let since = std::time::SystemTime::now() - std::time::Duration::from_secs(1);
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let [_, file] = libomp_registration(child.id());
        std::fs::write(&file, "0x1-cafe-libomp.so").unwrap();
        assert!(registrations_since(since).contains(&(child.id(), file.clone())));
        // Not before the moment.
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(60);
        assert!(!registrations_since(later).iter().any(|(p, _)| *p == child.id()));
        child.kill().unwrap();
        child.wait().unwrap();
        std::fs::remove_file(file).unwrap();
    }

    #[test]
    fn kills_only_the_same_process() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let v = Victim { pid: child.id(), start: start_time(child.id()).unwrap() };
        // Another start time: a reused pid, left alone.
        assert!(!kill(Victim { start: v.start + 1, ..v }));
        assert!(!kill(me()));
        assert!(!is_gone(v));
        assert!(kill(v));
        let t0 = std::time::Instant::now();
        while !is_gone(v) {
            assert!(t0.elapsed().as_secs() < 5, "a killed child (a zombie until reaped) counts as gone");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let st = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(st.signal(), Some(libc::SIGKILL));
        assert!(!kill(v), "a dead process is not signalled again");
    }
}
