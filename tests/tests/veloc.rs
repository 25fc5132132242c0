//! The VeloC store's own behaviour, with a real VeloC (`--features veloc`, run by
//! `scripts/test-veloc.sh`): the async daemon belongs to the job that started it and ends
//! with it, also when every rank is killed; a second job of the user on the node is refused
//! while one uses VeloC; a daemon the job did not start is refused rather than used. The
//! checkpoint tests themselves (tests/checkpoints.rs) run against VeloC in both modes.
#![cfg(feature = "veloc")]

use ckpt_veloc::list_versions;
use ompcluster_tests::{describe, env_refs, stderr, stdout, veloc_config, Job};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn matmul() -> PathBuf {
    ompcluster_tests::matmul_example().to_path_buf()
}

/// Settings for the VeloC store in `mode`, checkpointing into `<dir>/p` every 0.1 s.
fn veloc_env(dir: &Path, mode: &str) -> Vec<(String, String)> {
    let cfg = veloc_config(&dir.join("s"), &dir.join("p"), mode);
    vec![
        ("OMPCLUSTER_CP_USEVELOC".into(), "1".into()),
        ("OMPCLUSTER_CP_EXECCFG".into(), cfg.display().to_string()),
        ("OMPCLUSTER_CP_INTERVAL".into(), "0.1".into()),
    ]
}

/// Running `veloc-backend` processes of this user (zombies excluded).
fn daemons() -> Vec<u32> {
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let uid_ok = status.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some(&me.to_string()));
            stat.contains("(veloc-backend)") && !stat.contains(") Z ") && uid_ok
        })
        .collect()
}

/// Waits (bounded) until `job` has published a checkpoint into `dir`.
fn wait_for_a_version(job: &mut Job, dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while list_versions(dir).map(|v| v.is_empty()).unwrap_or(true) {
        assert!(Instant::now() < deadline, "no checkpoint was published");
        assert!(job.wait_timeout(Duration::ZERO).is_none(), "the job ended before publishing a checkpoint");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_async_daemon_is_the_jobs_own_and_ends_with_it() {
    assert!(daemons().is_empty(), "a veloc-backend already runs: {:?}", daemons());
    let a = tempfile::tempdir().unwrap();
    let mut job = Job::spawn(4, &matmul(), &["2048", "256"], &env_refs(&veloc_env(a.path(), "async")));
    wait_for_a_version(&mut job, &a.path().join("p"));
    let running = daemons();
    assert_eq!(running.len(), 1, "one daemon for the job's node: {running:?}");

    // Another job of the user on this node, with its own configuration: refused before main.
    let b = tempfile::tempdir().unwrap();
    let other = Job::spawn_beside(3, &matmul(), &["256", "64"], &env_refs(&veloc_env(b.path(), "async")))
        .wait(Duration::from_secs(120));
    assert_eq!(other.status.code(), Some(2), "{}", describe(&other));
    assert!(stderr(&other).contains("another job of this user uses VeloC on this node"), "{}", describe(&other));
    assert!(!stdout(&other).contains("matmul N="), "main ran: {}", describe(&other));
    assert_eq!(daemons(), running, "the refused job touched the daemon");

    let out = job.wait(Duration::from_secs(180));
    assert!(out.status.success() && stdout(&out).contains("result correct"), "{}", describe(&out));
    // The job stopped its daemon itself (the launcher says so when it has to).
    assert!(!stderr(&out).contains("stopped the VeloC backend"), "{}", describe(&out));
    assert!(daemons().is_empty(), "the daemon outlived the job: {:?}", daemons());
    let v = Command::new(ompcluster_tests::launcher().with_file_name("ompcluster-ckpt")).arg("verify").arg(a.path().join("p")).output().unwrap();
    assert!(v.status.success(), "{}", describe(&v));
}

#[test]
fn a_job_whose_ranks_all_die_leaves_no_daemon() {
    let a = tempfile::tempdir().unwrap();
    let e = veloc_env(a.path(), "async");
    let prog = matmul();
    let mut job = Job::spawn(4, &prog, &["2048", "256"], &env_refs(&e));
    wait_for_a_version(&mut job, &a.path().join("p"));
    assert_eq!(daemons().len(), 1);
    for (_, pid) in job.ranks(&prog) {
        // SAFETY: signalling a process of this test's own job.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let out = job.wait(Duration::from_secs(60));
    assert!(!out.status.success(), "{}", describe(&out));
    assert!(stderr(&out).contains("stopped the VeloC backend"), "{}", describe(&out));
    assert!(daemons().is_empty(), "the daemon outlived the job: {:?}", daemons());
    // The node is free for the next job.
    let b = tempfile::tempdir().unwrap();
    let next = Job::spawn(3, &prog, &["512", "64"], &env_refs(&veloc_env(b.path(), "async"))).wait(Duration::from_secs(120));
    assert!(next.status.success() && stdout(&next).contains("result correct"), "{}", describe(&next));
}

#[test]
fn a_daemon_not_started_by_a_job_is_refused() {
    let a = tempfile::tempdir().unwrap();
    let cfg = veloc_config(&a.path().join("s"), &a.path().join("p"), "async");
    let root = PathBuf::from(std::env::var_os("VELOC_ROOT").expect("VELOC_ROOT names the VeloC build (scripts/test-veloc.sh sets it)"));
    let st = Command::new(root.join("bin/veloc-backend"))
        .arg(&cfg)
        .arg("--disable-ec")
        .env("LD_LIBRARY_PATH", root.join("lib"))
        .output()
        .unwrap();
    assert!(st.status.success(), "{}", describe(&st));
    let foreign = daemons();
    assert_eq!(foreign.len(), 1);
    let out = Job::spawn(3, &matmul(), &["256", "64"], &env_refs(&veloc_env(a.path(), "async"))).wait(Duration::from_secs(120));
    for pid in &foreign {
        // SAFETY: stopping the daemon this test started.
        unsafe { libc::kill(*pid as i32, libc::SIGTERM) };
    }
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(stderr(&out).contains(&format!("a VeloC backend not started by ompcluster runs on this node (pid {}", foreign[0])), "{}", describe(&out));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !daemons().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(daemons().is_empty());
}

#[test]
fn a_job_killed_with_its_daemon_leaves_nothing_that_stops_the_next() {
    // SIGKILL to every process of the job, the daemon included (a `kill -9` of the whole
    // session, or a test harness ending a hung job): the daemon cannot remove VeloC's IPC
    // objects, and a new daemon waited on the stale mutex until the next job gave up
    // ("reported success but no daemon is named").
    let a = tempfile::tempdir().unwrap();
    let prog = matmul();
    let mut job = Job::spawn(4, &prog, &["2048", "256"], &env_refs(&veloc_env(a.path(), "async")));
    wait_for_a_version(&mut job, &a.path().join("p"));
    let running = daemons();
    assert_eq!(running.len(), 1);
    for pid in running {
        // SAFETY: killing the daemon of this test's own job.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    job.kill();
    let _ = job.wait(Duration::from_secs(60));
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    let left: Vec<String> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("sem.veloc-ipc-mutex-") && n.ends_with(&format!("-{me}")))
        .collect();
    assert!(!left.is_empty(), "the killed daemon left no IPC objects: the case this test is for did not happen");
    let b = tempfile::tempdir().unwrap();
    let next = Job::spawn(3, &prog, &["512", "64"], &env_refs(&veloc_env(b.path(), "async"))).wait(Duration::from_secs(120));
    assert!(next.status.success() && stdout(&next).contains("result correct"), "{}", describe(&next));
    assert!(daemons().is_empty(), "the daemon outlived the job: {:?}", daemons());
}

#[test]
fn a_stopped_daemon_fails_the_checkpoints_and_the_job_still_ends_right() {
    // VeloC's waits have no timeout, and its async engine has been seen to lose a request
    // (the client waited forever while the daemon idled). A daemon stopped with SIGSTOP looks
    // the same to the clients: the flush's watchdog must fail the checkpoint, and the job
    // must go on and end.
    let a = tempfile::tempdir().unwrap();
    let prog = matmul();
    let mut job = Job::spawn(4, &prog, &["2048", "256"], &env_refs(&veloc_env(a.path(), "async")));
    wait_for_a_version(&mut job, &a.path().join("p"));
    let running = daemons();
    assert_eq!(running.len(), 1, "one daemon for the job's node: {running:?}");
    // SAFETY: signalling the daemon of this test's own job.
    unsafe { libc::kill(running[0] as i32, libc::SIGSTOP) };
    let out = job.wait(Duration::from_secs(240));
    assert!(out.status.success() && stdout(&out).contains("result correct"), "{}", describe(&out));
    assert!(stderr(&out).contains("VeloC's engine made no progress on checkpoint"), "the stall was not noticed: {}", describe(&out));
    // Every rank ended by itself, and the job stopped its daemon itself.
    assert!(!stderr(&out).contains("still running"), "{}", describe(&out));
    assert!(!stderr(&out).contains("stopped the VeloC backend"), "{}", describe(&out));
    assert!(daemons().is_empty(), "the stopped daemon outlived the job: {:?}", daemons());
    // What was published before the stall is intact.
    let v = Command::new(ompcluster_tests::launcher().with_file_name("ompcluster-ckpt")).arg("verify").arg(a.path().join("p")).output().unwrap();
    assert!(v.status.success(), "{}", describe(&v));
}
