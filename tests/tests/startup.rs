//! A worker lost while the job starts: killed (SIGKILL) or frozen (SIGSTOP) at moments spread
//! over start-up, with 4 and 17 ranks. The job never hangs: a hit after start-up is recovered
//! from; one during it ends the job within `OMPCLUSTER_START_TIMEOUT` (10 s here) plus the
//! launcher's grace, with rank 0's message naming the stage and the rank (the plugin's
//! `startup.rs`).

use ompcluster_tests::{compile, describe, stderr, stdout, Job};
use std::time::{Duration, Instant};

const START_TIMEOUT_S: u64 = 10;

/// Hit worker `victim` of an `np`-rank job `after` its process appeared, with `sig`.
/// Returns whether the hit fell in start-up (the job ended saying so).
fn hit(np: u32, victim: u32, after: Duration, sig: i32) -> bool {
    let prog = compile("sleepy.c");
    let timeout = START_TIMEOUT_S.to_string();
    let what = format!("-np {np}: signal {sig} to rank {victim} {after:?} after it appeared");
    let mut job = Job::spawn(np, &prog, &["2000", "50"], &[("OMPCLUSTER_START_TIMEOUT", &timeout), ("OMPCLUSTER_HB_PERIOD", "100"), ("OMPCLUSTER_HB_TIMEOUT", "1000")]);
    let t0 = Instant::now();
    let pid = loop {
        if let Some(&(_, p)) = job.ranks(&prog).iter().find(|&&(r, _)| r == victim) {
            break p;
        }
        if t0.elapsed() > Duration::from_secs(30) || job.wait_timeout(Duration::ZERO).is_some() {
            job.kill();
            panic!("{what}: rank {victim} did not show up");
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    std::thread::sleep(after);
    // SAFETY: kill has no memory-safety preconditions; the pid is a rank of our job.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0, "{what}: the signal was not delivered");
    let hit_at = Instant::now();
    // Start-up's bound, the launcher's grace and mpirun's stop, with room for a slow machine.
    let o = job.wait(Duration::from_secs(START_TIMEOUT_S + 50));
    let took = hit_at.elapsed();
    let err = stderr(&o);
    eprintln!("{what}: ended {took:?} later with {}", o.status);
    for l in err.lines().filter(|l| l.starts_with("ompcluster: rank ")) {
        eprintln!("  {l}");
    }
    if o.status.success() {
        // After start-up: recovered from, as any failure.
        assert!(stdout(&o).contains("sleepy: PASS"), "{what}\n{}", describe(&o));
        assert!(err.contains(&format!("recovered from the loss of rank {victim}")), "{what}: no recovery reported\n{}", describe(&o));
        return false;
    }
    assert!(
        err.contains(&format!("ompcluster: rank 0: the job did not start within {START_TIMEOUT_S} s")) && err.contains("this rank still waits in"),
        "{what}: the job failed without saying that it did not start\n{}",
        describe(&o)
    );
    // The rank is named: as lost (a progress file), or as one that never began.
    assert!(err.contains(&format!("ompcluster: rank {victim} ")), "{what}: rank {victim} is not named\n{}", describe(&o));
    assert!(err.contains("ompcluster-run: the job did not start"), "{what}\n{}", describe(&o));
    true
}

#[test]
fn a_worker_killed_or_frozen_while_the_job_starts_never_hangs_it() {
    let mut in_startup = 0;
    for (np, victim) in [(4, 2), (17, 5)] {
        // Start-up ends about 150 ms after a rank's process appears (on this machine).
        for (after_ms, sig) in [(0, libc::SIGKILL), (40, libc::SIGSTOP), (80, libc::SIGKILL), (120, libc::SIGKILL), (1000, libc::SIGKILL)] {
            in_startup += hit(np, victim, Duration::from_millis(after_ms), sig) as usize;
        }
    }
    assert!(in_startup > 0, "no hit fell in start-up: the test tested nothing");
}
