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

#[cfg(test)]
mod tests {
    use super::*;

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
