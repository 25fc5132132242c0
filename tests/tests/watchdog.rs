//! A runtime that checks itself (issue 35, part 5; the `watchdog` crate): a thread of ours
//! that stops while it has work ends its rank with a message naming it, instead of leaving the
//! job hung. Threads are stopped with the test-only injection `park:[rank=R:]thread=NAME:
//! after_ms=N` (`inject.rs`), as a thread stuck on a lock would be.

use ompcluster_tests::{compile, describe, stderr, stdout, Job};
use std::time::{Duration, Instant};

const BOUND_S: &str = "2";

/// The head's prober parked: the job ends within the bound and a little, non-zero, with one
/// message naming the thread and what it was doing, and the report says the same.
#[test]
fn a_parked_head_thread_ends_the_job_with_a_message() {
    let prog = compile("sleepy.c");
    let dir = tempfile::tempdir_in(ompcluster_tests::work_dir()).unwrap();
    let report = dir.path().join("report.json");
    let report_s = report.display().to_string();
    let job = Job::spawn(
        4,
        &prog,
        &["3000", "200"],
        &[("OMPCLUSTER_WATCHDOG", BOUND_S), ("OMPCLUSTER_FT_INJECT", "park:thread=ompc-ft-prober:after_ms=500"), ("OMPCLUSTER_REPORT", report_s.as_str())],
    );
    // From the start (spawn waits for the other tests' jobs).
    let t0 = Instant::now();
    let o = job.wait(Duration::from_secs(60));
    let took = t0.elapsed();
    let err = stderr(&o);
    assert!(!o.status.success(), "the job went on with a stopped thread\n{}", describe(&o));
    assert!(!stdout(&o).contains("sleepy: PASS"), "{}", describe(&o));
    let line = err.lines().find(|l| l.starts_with("ompcluster: the runtime made no progress for 2 s (OMPCLUSTER_WATCHDOG): ")).unwrap_or_else(|| panic!("no watchdog message\n{}", describe(&o)));
    assert!(line.contains("thread ompc-ft-prober running in \"looking at the workers on this host\", last moved"), "{line}");
    assert!(line.ends_with("; ending the job"), "{line}");
    // 3000 regions of 200 ms on 3 workers (16 at once each) take about 13 s: ended by the watchdog.
    assert!(took < Duration::from_secs(30), "took {took:?}\n{}", describe(&o));
    // The report, written as the job ended: the event, the stopped thread first, and the
    // regions run until then.
    let r = run_report::Report::read(&report).unwrap_or_else(|e| panic!("{e}\n{}", describe(&o)));
    assert_eq!(r.watchdog.len(), 1, "{:?}", r.watchdog);
    let ev = &r.watchdog[0];
    assert_eq!((ev.rank, ev.bound_seconds), (0, 2.0), "{ev:?}");
    let t = &ev.threads[0];
    assert_eq!((t.name.as_str(), t.state.as_str(), t.doing.as_str(), t.stopped), ("ompc-ft-prober", "running", "looking at the workers on this host", true), "{ev:?}");
    assert!(t.still_seconds >= 2.0, "{ev:?}");
    assert!(ev.threads[1..].iter().all(|t| !t.stopped) && ev.threads.iter().any(|t| t.name == "ft-heartbeat"), "{ev:?}");
    assert!(r.tasks_executed > 0 && r.tasks_executed < 3000, "{} regions ran", r.tasks_executed);
}

/// The head's region threads parked as they next move (a `nowait` region's operations run on
/// them): the regions in flight never end and libomp waits for them. The job ends within the
/// bound and a little, non-zero, naming a region thread. (Before region threads held beats,
/// nothing watched them: `park:` could not name them.)
#[test]
fn a_parked_region_thread_ends_the_job_with_a_message() {
    let prog = compile("sleepy.c");
    let job = Job::spawn(4, &prog, &["3000", "200"], &[("OMPCLUSTER_WATCHDOG", BOUND_S), ("OMPCLUSTER_FT_INJECT", "park:thread=ompc-region:after_ms=500")]);
    let t0 = Instant::now();
    let o = job.wait(Duration::from_secs(60));
    let took = t0.elapsed();
    let err = stderr(&o);
    assert!(!o.status.success() && !stdout(&o).contains("sleepy: PASS"), "the job went on with its region threads stopped\n{}", describe(&o));
    let line = err.lines().find(|l| l.starts_with("ompcluster: the runtime made no progress for 2 s (OMPCLUSTER_WATCHDOG): ")).unwrap_or_else(|| panic!("no watchdog message\n{}", describe(&o)));
    assert!(line.contains("thread ompc-region running in \""), "{line}");
    assert!(took < Duration::from_secs(30), "took {took:?}\n{}", describe(&o));
}

/// Worker 2's polling thread parked: nothing reads the head's events to it any more while
/// its heartbeat goes on. Its watchdog stops it, and the head recovers from its loss.
#[test]
fn a_parked_worker_poller_stops_the_worker_and_the_job_recovers() {
    let prog = compile("sleepy.c");
    let o = Job::spawn(
        4,
        &prog,
        &["1000", "200"],
        &[("OMPCLUSTER_WATCHDOG", BOUND_S), ("OMPCLUSTER_HB_PERIOD", "100"), ("OMPCLUSTER_HB_TIMEOUT", "1000"), ("OMPCLUSTER_FT_INJECT", "park:rank=2:thread=ompc-worker-poll:after_ms=800")],
    )
    .wait(Duration::from_secs(120));
    let err = stderr(&o);
    assert!(o.status.success() && stdout(&o).contains("sleepy: PASS"), "{}", describe(&o));
    assert!(err.contains("ompcluster worker 2: the runtime made no progress for 2 s (OMPCLUSTER_WATCHDOG): thread ompc-worker-poll running"), "{}", describe(&o));
    assert!(err.contains("recovered from the loss of rank 2"), "no recovery\n{}", describe(&o));
}

/// The recovery handler parked as it takes in a failure (worker 2 killed): nothing recovers,
/// and the regions that waited on worker 2 would wait for the recovery for ever. The job ends
/// within the bound and a little, non-zero, naming the handler and what it was doing. (Before
/// the handler held a beat, the injection found no such thread, recovery ran, and the job
/// passed.)
#[test]
fn a_parked_recovery_handler_ends_the_job_with_a_message() {
    let prog = compile("sleepy.c");
    let job = Job::spawn(
        4,
        &prog,
        &["3000", "200"],
        &[
            ("OMPCLUSTER_WATCHDOG", BOUND_S),
            ("OMPCLUSTER_HB_PERIOD", "100"),
            ("OMPCLUSTER_HB_TIMEOUT", "1000"),
            ("OMPCLUSTER_FT_INJECT", "park:thread=ompc-ft-handler:after_ms=300;kill:rank=2:after_ms=1500"),
        ],
    );
    let t0 = Instant::now();
    let o = job.wait(Duration::from_secs(60));
    let took = t0.elapsed();
    let err = stderr(&o);
    assert!(!o.status.success() && !stdout(&o).contains("sleepy: PASS"), "the job went on without its recovery handler\n{}", describe(&o));
    assert!(!err.contains("recovered from the loss of rank 2"), "{}", describe(&o));
    let line = err.lines().find(|l| l.starts_with("ompcluster: the runtime made no progress for 2 s (OMPCLUSTER_WATCHDOG): ")).unwrap_or_else(|| panic!("no watchdog message\n{}", describe(&o)));
    assert!(line.contains("thread ompc-ft-handler running in \"recovering from a failure\", last moved"), "{line}");
    assert!(took < Duration::from_secs(30), "took {took:?}\n{}", describe(&o));
}

/// A recovery whose waits last longer than the bound is no stall: the handler waits for the
/// regions in flight (kernels of 1.5 s under a bound of 1 s) to leave the gate, and for the
/// workers, as a waiting thread.
#[test]
fn a_recovery_that_waits_on_long_kernels_is_no_stall() {
    let prog = compile("sleepy.c");
    let o = Job::spawn(
        4,
        &prog,
        &["12", "1500"],
        &[("OMPCLUSTER_WATCHDOG", "1"), ("OMPCLUSTER_HB_PERIOD", "100"), ("OMPCLUSTER_HB_TIMEOUT", "1000"), ("OMPCLUSTER_FT_INJECT", "kill:rank=2:after_ms=2000")],
    )
    .wait(Duration::from_secs(120));
    let err = stderr(&o);
    assert!(o.status.success() && stdout(&o).contains("sleepy: PASS"), "{}", describe(&o));
    assert!(err.contains("recovered from the loss of rank 2"), "no recovery\n{}", describe(&o));
    assert!(!err.contains("made no progress"), "{}", describe(&o));
}

/// A worker killed in the stencil under a bound of 1 s: the recovery, the regions it waits
/// for and the head's buddy copies waiting for it at the gate are no stall. (The buddy thread
/// paused after each batch for nine times the batch's time, to keep copying within its share
/// of the time, and counted its wait for the gate as copying time: after a recovery it slept
/// as a running thread for nine times the recovery, and the watchdog ended the job, 5 of 5
/// such kills in a campaign.)
#[test]
fn a_recovery_under_a_tight_bound_is_no_stall() {
    let prog = compile("ft_stencil.c");
    let o = Job::spawn(
        4,
        &prog,
        &["8", "4096", "24", "90000"],
        &[("OMPCLUSTER_WATCHDOG", "1"), ("OMPCLUSTER_HB_PERIOD", "100"), ("OMPCLUSTER_HB_TIMEOUT", "1000"), ("OMPCLUSTER_FT_INJECT", "kill:rank=2:after_ms=800")],
    )
    .wait(Duration::from_secs(120));
    let err = stderr(&o);
    assert!(!err.contains("made no progress"), "{}", describe(&o));
    assert!(o.status.success() && stdout(&o).contains("ft_stencil: PASS"), "{}", describe(&o));
    assert!(err.contains("recovered from the loss of rank 2"), "no recovery\n{}", describe(&o));
}

/// Kernels that each run longer than the bound are no stall: the polling thread waits on
/// them, or hands them off and goes on polling.
#[test]
fn kernels_longer_than_the_bound_are_no_stall() {
    let prog = compile("sleepy.c");
    let o = Job::spawn(3, &prog, &["6", "1500"], &[("OMPCLUSTER_WATCHDOG", "1")]).wait(Duration::from_secs(120));
    assert!(o.status.success() && stdout(&o).contains("sleepy: PASS"), "{}", describe(&o));
    assert!(!stderr(&o).contains("made no progress"), "{}", describe(&o));
}

/// The head's checkpoint flusher parked as it starts writing a checkpoint, as one stuck on
/// the file system would be: the checkpoint never completes and the program's next updates
/// of the buffers it saves wait for it. The job ends within the bound and a little, non-zero,
/// with the message naming the thread, instead of hanging. (Before the flusher held a beat,
/// nothing watched it, and the injection found no such thread to park.)
#[test]
fn a_parked_checkpoint_flush_ends_the_job_with_a_message() {
    let prog = compile("ckpt_uniform.c");
    let dir = tempfile::tempdir_in(ompcluster_tests::work_dir()).unwrap();
    let (persistent, scratch) = (dir.path().join("persistent").display().to_string(), dir.path().join("scratch").display().to_string());
    let envs = [
        ("OMPCLUSTER_CP_INTERVAL", "0.05"),
        ("OMPCLUSTER_CP_PERSISTENT", persistent.as_str()),
        ("OMPCLUSTER_CP_SCRATCH", scratch.as_str()),
        ("OMPCLUSTER_WATCHDOG", BOUND_S),
        ("OMPCLUSTER_HB_PERIOD", "100"),
        ("OMPCLUSTER_HB_TIMEOUT", "1000"),
        ("OMPCLUSTER_FT_INJECT", "park:thread=ompc-ckpt-store:after_ms=300"),
    ];
    // 30,000 rounds of 1 MiB: about 5 s here, longer than the bound.
    let job = Job::spawn(4, &prog, &["30000", "1048576"], &envs);
    let t0 = Instant::now();
    let o = job.wait(Duration::from_secs(90));
    let took = t0.elapsed();
    assert!(!o.status.success() && !stdout(&o).contains("PASS"), "the job went on with a stopped flusher\n{}", describe(&o));
    let err = stderr(&o);
    let line = err.lines().find(|l| l.starts_with("ompcluster: the runtime made no progress for 2 s (OMPCLUSTER_WATCHDOG): ")).unwrap_or_else(|| panic!("no watchdog message\n{}", describe(&o)));
    assert!(line.contains("thread ompc-ckpt-store running in \"writing a checkpoint to the persistent directory\", last moved"), "{line}");
    assert!(took < Duration::from_secs(60), "took {took:?}\n{}", describe(&o));
}
