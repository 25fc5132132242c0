//! Many workers on one machine: `nowait` regions issued from one host thread keep 16 and 32
//! workers busy at once (issue 34), also with a worker killed in the middle. The kernels sleep
//! (`tests/programs/wide.c`), so the machine's 2 cores decide nothing; what is checked is how
//! many regions were in flight at once (the run report's `most_regions_in_flight`), never a
//! time. Before issue 34 each region held one of libomp's hidden helper threads from start to
//! end, and at most 7 were in flight, on 16 workers or 32.

use ompcluster_tests::{assert_pass, compile, describe, run_with_report, stderr, stdout, work_dir, Job, Report};
use std::time::Duration;

/// `regions` independent 200 ms regions on `np - 1` workers: at least `most` in flight at once
/// and `busy` workers used.
fn independent_regions_fill_the_workers(np: u32, regions: u64, most: u64, busy: usize) {
    let (o, r) = run_with_report(np, &compile("wide.c"), &["independent", &regions.to_string(), "200"], &[]);
    assert_pass(&o);
    assert_eq!(r.tasks_executed, regions, "{r:?}");
    assert!(r.most_regions_in_flight >= most, "at most {} regions in flight\n{}", r.most_regions_in_flight, describe(&o));
    assert!(r.busy_workers() >= busy, "{} of {} workers ran regions: {:?}", r.busy_workers(), np - 1, r.counts.tasks_per_worker);
}

/// 64 independent regions on 16 workers: far more than libomp's 7 helpers in flight.
#[test]
fn independent_nowait_regions_fill_sixteen_workers() {
    independent_regions_fill_the_workers(17, 64, 32, 14);
}

/// 128 independent regions on 32 workers.
#[test]
fn independent_nowait_regions_fill_thirty_two_workers() {
    independent_regions_fill_the_workers(33, 128, 64, 28);
}

/// 16 chains of 8 dependent 100 ms regions on 16 workers: every chain has a region in flight.
#[test]
fn chains_of_dependent_regions_run_side_by_side() {
    let (o, r) = run_with_report(17, &compile("wide.c"), &["chains", "16", "8", "100"], &[]);
    assert_pass(&o);
    assert_eq!(r.tasks_executed, 128, "{r:?}");
    assert!(r.most_regions_in_flight >= 14, "at most {} regions in flight\n{}", r.most_regions_in_flight, describe(&o));
}

/// The chains again with worker 5 SIGKILLed in the middle: the regions it held or ran run
/// again on the others, the result is right, and the regions still ran side by side.
#[test]
fn a_worker_killed_among_sixteen_busy_ones_is_recovered() {
    let prog = compile("wide.c");
    let dir = tempfile::tempdir_in(work_dir()).unwrap();
    let report = dir.path().join("report.json");
    let report_s = report.to_string_lossy().into_owned();
    let envs = [("OMPCLUSTER_HB_PERIOD", "100"), ("OMPCLUSTER_HB_TIMEOUT", "1000"), ("OMPCLUSTER_REPORT", report_s.as_str())];
    let mut job = Job::spawn(17, &prog, &["chains", "16", "12", "150"], &envs);
    let ranks = job.started_ranks(&prog, 17, Duration::from_secs(90));
    // In the middle of the 1.8 s of regions (12 steps of 150 ms), after the start-up.
    std::thread::sleep(Duration::from_millis(1200));
    let (_, victim) = *ranks.iter().find(|(r, _)| *r == 5).expect("rank 5");
    // SAFETY: kill has no memory-safety preconditions; the pid is a rank of our job.
    unsafe { libc::kill(victim, libc::SIGKILL) };
    let o = job.wait(Duration::from_secs(150));
    assert_pass(&o);
    assert!(stdout(&o).contains("wide: 192 regions"), "{}", describe(&o));
    let r = Report::read(&report).unwrap_or_else(|e| panic!("{e}\n{}", describe(&o)));
    assert_eq!(r.failures.iter().map(|f| f.rank).collect::<Vec<_>>(), vec![5], "{}", describe(&o));
    assert!(stderr(&o).contains("ompcluster: recovered from the loss of"), "{}", describe(&o));
    assert!(r.most_regions_in_flight >= 14, "at most {} regions in flight\n{}", r.most_regions_in_flight, describe(&o));
}
