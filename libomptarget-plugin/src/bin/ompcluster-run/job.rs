//! The job once started: waiting for mpirun, the launcher's status file (how the program
//! ended, the ranks lost at start-up), a SIGTERM passed on to the program's head, and what
//! ranks that died left behind on this node.

use event_system::process::{self, Victim};
use std::path::Path;
use std::process::Command;

/// How long the job gets to end by itself after the program has ended when the head says
/// that dead ranks it could not kill (frozen, on other hosts) remain: the live ranks were
/// stopped already and only leave.
pub(crate) const UNREACHABLE_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// The status file: how the program ended (its first line: an exit status, `signal N`, or
/// `started`), and the dead ranks the head could not kill (a line `unreachable R...`; with a
/// line `startup`, the ranks lost or stuck as the job started, see the plugin's `startup.rs`).
pub(crate) fn read_status(f: &Path) -> Option<Status> {
    let text = std::fs::read_to_string(f).ok()?;
    let mut lines = text.lines();
    let how = lines.next()?.trim().to_string();
    let rest: Vec<&str> = lines.collect();
    let unreachable = rest.iter().find_map(|l| l.strip_prefix("unreachable ")).map(|r| r.split_whitespace().map(str::to_string).collect()).unwrap_or_default();
    Some(Status { how, unreachable, startup: rest.contains(&"startup") })
}

/// What the status file says.
pub(crate) struct Status {
    /// Its first line: an exit status, `signal N`, or `started`.
    pub(crate) how: String,
    unreachable: Vec<String>,
    /// The job did not start (rank 0 said why, in `startup-report` beside the status file).
    startup: bool,
}

/// If the job did not start, print rank 0's account (see the plugin's `startup.rs` and
/// `same_build.rs`), here: mpirun, stuck too, may never pass on what rank 0 prints.
pub(crate) fn print_startup_report(status_file: Option<&Path>, st: &Status) {
    if st.startup {
        if let Some(report) = status_file.and_then(|f| std::fs::read_to_string(f.with_file_name("startup-report")).ok()) {
            eprint!("{report}");
        }
    }
}

/// Wait for mpirun to end. Once the status file says how the program ended (an exit status,
/// or the signal it died of) and the job is still running `grace` later (or
/// [`UNREACHABLE_GRACE`] later, if dead ranks out of the head's reach remain), ask mpirun to
/// stop it (`stop`: SIGTERM, or SIGINT where mpirun runs with SIGTERM blocked; then SIGKILL 10 s
/// later).
pub(crate) fn wait_for_job(mut child: std::process::Child, status_file: Option<&Path>, grace: std::time::Duration, stop: libc::c_int) -> std::io::Result<std::process::ExitStatus> {
    use std::time::{Duration, Instant};
    let mut ended: Option<(Instant, Status)> = None;
    let mut termed_at: Option<Instant> = None;
    // When a SIGTERM reached the launcher and is not yet passed on (see [`pass_sigterm`]).
    let mut term_since: Option<Instant> = None;
    loop {
        if let Some(st) = child.try_wait()? {
            if ended.is_none() {
                // The job ended before this loop saw the status (the ranks left at once, as
                // when they run different builds): rank 0's account still goes out.
                if let Some(st) = status_file.and_then(read_status).filter(|st| st.startup) {
                    print_startup_report(status_file, &st);
                }
            }
            return Ok(st);
        }
        if TERM.swap(false, std::sync::atomic::Ordering::Relaxed) {
            term_since.get_or_insert_with(Instant::now);
        }
        if let Some(since) = term_since {
            if pass_sigterm(child.id(), since.elapsed()) {
                term_since = None;
            }
        }
        if ended.is_none() {
            // "started" until the head writes how the program ended.
            if let Some(st) = status_file.and_then(read_status).filter(|st| !st.how.is_empty() && st.how != "started") {
                print_startup_report(status_file, &st);
                ended = Some((Instant::now(), st));
            }
        }
        match (&ended, termed_at) {
            (Some((at, Status { how, unreachable, startup })), None) if at.elapsed() > if unreachable.is_empty() { grace } else { UNREACHABLE_GRACE } => {
                let how = match how.strip_prefix("signal ") {
                    Some(sig) => format!("died of signal {sig}"),
                    None => format!("exited with status {how}"),
                };
                if *startup {
                    eprintln!("ompcluster-run: the job did not start (why: above): stopping it");
                } else if unreachable.is_empty() {
                    eprintln!(
                        "ompcluster-run: the program {how}, but ranks of the job are still running {:.0} s later (a frozen worker?): stopping the job",
                        grace.as_secs_f64()
                    );
                } else {
                    eprintln!(
                        "ompcluster-run: the program {how}; rank(s) {} declared dead on another host may still be running there (frozen): stopping the job",
                        unreachable.join(", ")
                    );
                }
                // SAFETY: kill has no memory-safety preconditions; the pid is our child's.
                unsafe { libc::kill(child.id() as libc::pid_t, stop) };
                termed_at = Some(Instant::now());
            }
            (_, Some(t)) if t.elapsed() > Duration::from_secs(10) => {
                // mpirun's own kill timeout may be longer (a final checkpoint on SIGTERM):
                // its processes on this host go first, stopped ones included.
                for p in descendants(child.id()) {
                    // SAFETY: kill has no memory-safety preconditions; these are our job's.
                    unsafe { libc::kill(p as libc::pid_t, libc::SIGKILL) };
                }
                child.kill()?;
                return child.wait();
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A SIGTERM reached the launcher (see [`pass_sigterm`]).
pub(crate) static TERM: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_sigterm(_sig: libc::c_int) {
    TERM.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// With a final checkpoint on SIGTERM, mpirun runs with SIGTERM blocked: on SIGTERM it would
/// abort the job at once (it prints `Abort is in progress`), before the head's checkpoint.
/// mpirun unblocks signals in the ranks it starts, so that the ranks still get SIGTERM (from
/// Slurm, which signals every process of the step, or from this launcher, below).
pub(crate) fn block_sigterm_in(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: sigemptyset, sigaddset and sigprocmask are async-signal-safe and touch only
    // the local set.
    unsafe {
        cmd.pre_exec(|| {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGTERM);
            libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            Ok(())
        });
    }
}

/// Longest a SIGTERM waits in the launcher for the program's head to be ready for it (see
/// [`pass_sigterm`]): mpirun may not have started rank 0 yet, or rank 0 may not have started
/// its runtime yet (a large job starts slowly).
pub(crate) const HEAD_READY_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

/// A SIGTERM sent to the launcher goes to the program's head (rank 0), which takes a final
/// checkpoint and leaves; the launcher goes on waiting for the job and exits with its status.
/// Called from the waiting loop, `waited` after the SIGTERM came, until it returns true (the
/// signal was dealt with). Rank 0 is looked for among mpirun's descendants on this host, and
/// gets the signal once it handles SIGTERM (its runtime started: `SigCgt` in
/// `/proc/PID/status`), or after [`HEAD_READY_WAIT`] (then it most likely dies of it without a
/// final checkpoint). If rank 0 runs on another host (other ranks run here but not rank 0
/// for 5 s, or no rank at all within the wait), mpirun is told to abort the job (SIGINT).
pub(crate) fn pass_sigterm(mpirun: u32, waited: std::time::Duration) -> bool {
    let rank_of = |p: u32| -> Option<u32> { std::str::from_utf8(&proc_env(p, "OMPI_COMM_WORLD_RANK")?).ok()?.parse().ok() };
    let ranks: Vec<(u32, u32)> = descendants(mpirun).into_iter().filter_map(|p| Some((p, rank_of(p)?))).collect();
    // A wrapper (a shell, a tool) run by mpirun has rank 0's environment too: the program is
    // the one that handles SIGTERM, else the deepest (descendants come children first).
    let zeros: Vec<u32> = ranks.iter().filter(|&&(_, r)| r == 0).map(|&(p, _)| p).collect();
    match zeros.iter().copied().find(|&p| handles_sigterm(p)).or(zeros.last().copied()) {
        Some(pid) => {
            let ready = handles_sigterm(pid);
            if !ready && waited < HEAD_READY_WAIT {
                return false;
            }
            if ready {
                eprintln!("ompcluster-run: SIGTERM: passed to the program's head (pid {pid}) for a final checkpoint");
            } else {
                eprintln!(
                    "ompcluster-run: SIGTERM: passed to the program's head (pid {pid}), whose runtime has not started in {} s: no final checkpoint",
                    waited.as_secs()
                );
            }
            // SAFETY: kill has no memory-safety preconditions; the pid is rank 0 of our job.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
        }
        None => {
            // mpirun starts rank 0 first on its host: other ranks here and not rank 0 mean
            // it runs elsewhere (after a wait, for /proc to show a slow start).
            let elsewhere = !ranks.is_empty() && waited > std::time::Duration::from_secs(5);
            if !elsewhere && waited < HEAD_READY_WAIT {
                return false;
            }
            eprintln!("ompcluster-run: SIGTERM: the program's head does not run on this host; stopping the job (send SIGTERM to rank 0 for a final checkpoint)");
            // SAFETY: as above; the pid is our child's.
            unsafe { libc::kill(mpirun as libc::pid_t, libc::SIGINT) };
        }
    }
    true
}

/// The value of `var` in process `pid`'s environment (`/proc/PID/environ`), if readable.
fn proc_env(pid: u32, var: &str) -> Option<Vec<u8>> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|&b| b == 0).find_map(|kv| kv.strip_prefix(var.as_bytes())?.strip_prefix(b"=")).map(<[u8]>::to_vec)
}

/// Whether process `pid` catches SIGTERM (its `SigCgt` mask in `/proc/PID/status`).
pub(crate) fn handles_sigterm(pid: u32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { return false };
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (libc::SIGTERM - 1)) != 0)
}

/// The processes below `pid` (children first), from `/proc`.
pub(crate) fn descendants(pid: u32) -> Vec<u32> {
    let parent_of = |p: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
        stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
    };
    let all: Vec<u32> = std::fs::read_dir("/proc").into_iter().flatten().flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect();
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(all.iter().copied().filter(|&c| parent_of(c) == Some(p)));
        i += 1;
    }
    out.remove(0);
    out
}

/// Catch SIGTERM (see [`pass_sigterm`]).
pub(crate) fn catch_sigterm() {
    // SAFETY: a zeroed sigaction is valid; the handler only stores to an atomic.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigterm as *const () as usize;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut());
    }
}

/// Remove what the job's ranks on this node left because they ended without cleaning up
/// (killed, say, after the head stopped watching them as the program ended, or as the job
/// started, before our runtime began): libomp's registration of each process of this user
/// written since the job began (`since`) whose process is gone. A rank of this job (its
/// environment names `status_file`) still there once mpirun has ended is killed, and it and
/// processes not yet reaped get up to 3 s to be gone. Returns how many files were removed.
pub(crate) fn clean_after_ranks(status_file: &Path, since: std::time::SystemTime) -> usize {
    use std::time::{Duration, Instant};
    let until = Instant::now() + Duration::from_secs(3);
    let ours = |pid: u32| proc_env(pid, "OMPCLUSTER_EXIT_STATUS_FILE").as_deref() == Some(status_file.as_os_str().as_encoded_bytes());
    let mut removed = 0;
    loop {
        let mut waiting = false;
        for (pid, file) in process::registrations_since(since) {
            match process::state(pid) {
                None => removed += std::fs::remove_file(file).is_ok() as usize,
                Some('Z') | Some('X') => waiting = true,
                Some(_) if pid != std::process::id() && ours(pid) => {
                    let start = process::start_time(pid).unwrap_or(0);
                    process::kill(Victim { pid, start });
                    waiting = true;
                }
                // Another job's, or another program's.
                Some(_) => {}
            }
        }
        if !waiting || Instant::now() > until {
            return removed;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
