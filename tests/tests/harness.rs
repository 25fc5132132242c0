//! The harness itself: a hang is a failure ("timed out") and leaves no process behind, nor the
//! ranks' libomp registrations.

use ompcluster_tests::{compile, job_members, libomp_registration as registration, Job};
use std::time::{Duration, Instant};

fn live(pids: Vec<i32>) -> Vec<i32> {
    pids.into_iter()
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .map(|s| s.rfind(')').map(|i| !s[i + 2..].starts_with('Z')).unwrap_or(false))
                .unwrap_or(false)
        })
        .collect()
}

#[test]
fn a_hang_times_out_and_is_killed() {
    let prog = compile("hang.c");
    let job = Job::spawn(3, &prog, &[], &[]);
    let marker = job.marker().to_string();
    // The ranks, once libomp registered each (`/dev/shm`): the harness removes what they leave.
    let t0 = Instant::now();
    let ranks = loop {
        let r = job.ranks(&prog);
        if r.len() == 3 && r.iter().all(|&(_, p)| registration(p).exists()) {
            break r;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "the 3 ranks did not start: {r:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let t = Instant::now();
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.wait(Duration::from_secs(4))));
    let took = t.elapsed();
    let msg = match res {
        Ok(o) => panic!("the hanging job ended by itself: {o:?}"),
        Err(e) => e.downcast_ref::<String>().cloned().unwrap_or_default(),
    };
    assert!(msg.starts_with("timed out"), "{msg}");
    assert!(took < Duration::from_secs(15), "took {took:?}");
    // Every process of the job is gone (zombies aside).
    let deadline = Instant::now() + Duration::from_secs(5);
    while !live(job_members(&marker)).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(live(job_members(&marker)), Vec::<i32>::new(), "processes left behind");
    let left: Vec<_> = ranks.iter().map(|&(_, p)| registration(p)).filter(|f| f.exists()).collect();
    assert!(left.is_empty(), "registrations left behind: {left:?}");
}

/// A process of the job that outlives its launcher fails the test that ran it (and is killed).
#[test]
fn a_process_left_behind_fails_the_test() {
    let prog = compile("leaves_a_child.c");
    let job = Job::spawn(2, &prog, &[], &[]);
    let marker = job.marker().to_string();
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.wait(Duration::from_secs(60))));
    let msg = match res {
        Ok(o) => panic!("a job that left a process behind passed: {o:?}"),
        Err(e) => e.downcast_ref::<String>().cloned().unwrap_or_default(),
    };
    assert!(msg.contains("outlived its launcher") && msg.contains("(sleep"), "{msg}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !live(job_members(&marker)).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(live(job_members(&marker)), Vec::<i32>::new(), "the harness did not clean up");
}
