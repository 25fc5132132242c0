//! Recovery, tested as a user meets it: real programs under `ompcluster-run -np 4`, workers
//! killed (SIGKILL) or frozen (SIGSTOP, never resumed) from outside by pid at moments chosen
//! by seeded random numbers, or by `OMPCLUSTER_FT_INJECT`; every run must print exactly what
//! the failure-free run printed and exit 0, within a bound after which it fails as a hang.

use ompcluster_tests::{compile, describe, stderr, stdout, Job, Report, Rng};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Heartbeat settings of these tests: a frozen worker is declared dead after 1 s.
const FT: &[(&str, &str)] = &[("OMPCLUSTER_HB_PERIOD", "100"), ("OMPCLUSTER_HB_TIMEOUT", "1000")];

/// Buddy copies off, for tests whose subject is re-running lost tasks by lineage.
const NO_BUDDY: (&str, &str) = ("OMPCLUSTER_FT_BUDDY_INTERVAL", "0");

/// A run that takes longer than this has hung.
const BOUND: Duration = Duration::from_secs(150);

/// The programs, with arguments that make each run for a few seconds on 3 workers (kernels
/// sleep, so the run's length does not depend on the machine's speed).
const PROGRAMS: &[(&str, &[&str])] = &[
    ("ft_matmul.c", &["512", "128", "400000"]),
    ("ft_stencil.c", &["8", "4096", "24", "90000"]),
    ("ft_devptr.c", &["8", "4096", "20", "25000"]),
    ("ft_cxx.cpp", &["8", "4096", "20", "120000"]),
    ("ft_print.c", &["120", "25000"]),
];

/// Objects made by device code (`tests/programs/device_new.cpp`), tested by
/// `device_objects_survive_kills_and_freezes_from_outside` and with the random kills. It was
/// kept out of the random kills while about one kill in 50 (rank 1 at 0.5-0.8 s) ended with
/// "version N of buffer #2 kept disappearing while recovery rebuilt it (8 plans)", first seen
/// in CI on 2026-11-23. The cause, found on 2026-11-25 with `bench/ft_campaign.py` and the
/// verbose log: its first 12 regions change one buffer at the same time on one worker, and a
/// region could be recorded before the one whose version it read (the versions were made under
/// the buffer lock, the record taken after it). Recovery re-runs in record order per buffer,
/// so the re-run reader waited for nothing and found its input missing, plan after plan.
/// Kernels are now recorded under that lock: 0 failures in 250 such kills, against 3 in 155
/// before. 40 rounds: since its `nowait` regions all run at once (issue 34), 16 rounds took
/// 1.5 s, less than the moments the tests hit at.
const DEVICE_NEW: (&str, &[&str]) = ("device_new.cpp", &["12", "40", "40000"]);

/// Readers and writers sharing a copy (`tests/programs/ft_shared_reader.c`), tested by
/// `a_rewrite_rerun_in_place_keeps_the_version_a_later_reader_needs`: 12 rounds, readers of
/// 50 ms.
const SHARED_READER: (&str, &[&str]) = ("ft_shared_reader.c", &["12", "50"]);

/// Temporary inputs mapped by each region (`tests/programs/ft_temp_inputs.c`), tested by
/// `inputs_deleted_long_before_are_there_for_recovery`: 6 outputs, 100 rounds of 50 ms regions
/// (each output a chain of 5 s): the latest hit (2.4 s) lands well before the end. With 60
/// rounds (3 s) it did not always, in CI, while the test's thread was starved (see
/// `ompcluster_tests::Job`): no recovery to report, and a freeze there hung the job (before
/// the launcher stopped such jobs).
const TEMP_INPUTS: (&str, &[&str]) = ("ft_temp_inputs.c", &["6", "512", "100", "50000"]);

/// `a_copy_sent_while_a_kernel_on_its_source_changes_it_is_no_version`: 8 rounds (28
/// regions), readers and writers of 50 ms, the writer 2 ms after its reader.
const MOVE_RACE: (&str, &[&str]) = ("ft_move_race.c", &["8", "50", "16384", "2"]);

/// `a_copy_whose_source_dies_on_the_way_keeps_its_older_version`: 4 chains of 50 in-place
/// updates (`tests/programs/depend_chain.c`).
const DEPEND_CHAIN: (&str, &[&str]) = ("depend_chain.c", &[]);

fn args_of(src: &str) -> &'static [&'static str] {
    PROGRAMS.iter().chain([&DEVICE_NEW, &SHARED_READER, &TEMP_INPUTS, &MOVE_RACE, &DEPEND_CHAIN]).find(|(s, _)| *s == src).map(|(_, a)| *a).expect("a known program")
}

/// The failure-free output of `src` (computed once per test binary run).
fn reference(src: &str, envs: &[(&str, &str)]) -> String {
    static CACHE: OnceLock<Mutex<HashMap<String, String>>> = OnceLock::new();
    let key = format!("{src} {envs:?}");
    if let Some(s) = CACHE.get_or_init(Default::default).lock().unwrap().get(&key) {
        return s.clone();
    }
    let prog = compile(src);
    let o = Job::spawn(4, &prog, args_of(src), &with_ft(envs)).wait(BOUND);
    assert!(o.status.success() && stdout(&o).contains("PASS"), "the failure-free run failed\n{}", describe(&o));
    let out = stdout(&o);
    CACHE.get().unwrap().lock().unwrap().insert(key, out.clone());
    out
}

fn with_ft<'a>(envs: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut v = FT.to_vec();
    v.extend_from_slice(envs);
    v
}

/// One external fault: `sig` to worker `rank`, `after` the ranks finished their start-up.
#[derive(Debug, Clone, Copy)]
struct Hit {
    rank: u32,
    sig: i32,
    after: Duration,
}

/// Start `src` on 4 ranks, deliver `hits` from outside, wait for the end within [`BOUND`].
fn run_hit(src: &str, envs: &[(&str, &str)], hits: &[Hit], report: Option<&Path>) -> (Output, Duration) {
    run_hit_exe(&compile(src), args_of(src), envs, hits, report)
}

/// [`run_hit`] for an executable and its arguments.
fn run_hit_exe(prog: &Path, args: &[&str], envs: &[(&str, &str)], hits: &[Hit], report: Option<&Path>) -> (Output, Duration) {
    let mut envs = with_ft(envs);
    let rep;
    if let Some(p) = report {
        rep = p.to_string_lossy().into_owned();
        envs.push(("OMPCLUSTER_REPORT", &rep));
    }
    let mut job = Job::spawn(4, prog, args, &envs);
    // Timed from the end of the runtime's start-up (if the job ended first, the hits below
    // find nothing to hit and the test fails).
    let ranks = job.started_ranks(prog, 4, Duration::from_secs(90));
    let started = Instant::now();
    let mut hits = hits.to_vec();
    hits.sort_by_key(|h| h.after);
    for h in &hits {
        if let Some(wait) = h.after.checked_sub(started.elapsed()) {
            std::thread::sleep(wait);
        }
        // A fault that did not happen proves nothing: the test fails.
        let pid = ranks.iter().find(|(r, _)| *r == h.rank).map(|&(_, p)| p);
        // SAFETY: kill has no memory-safety preconditions; the pid is a rank of our job.
        let delivered = pid.is_some_and(|p| unsafe { libc::kill(p, h.sig) } == 0);
        if !delivered {
            let o = job.wait(BOUND);
            panic!("{h:?}: not delivered (rank {} of {ranks:?}): the job ended first?\n{}", h.rank, describe(&o));
        }
    }
    let o = job.wait(BOUND);
    (o, started.elapsed())
}

/// The run printed what the failure-free run printed, exited 0, and recovered `recoveries`
/// times at least.
#[track_caller]
fn assert_same(src: &str, o: &Output, expected: &str, what: &str) {
    assert!(o.status.success(), "{src}, {what}: exit status\n{}", describe(o));
    assert_eq!(stdout(o), expected, "{src}, {what}: output differs from the failure-free run\n{}", describe(o));
}

fn recovered(o: &Output) -> bool {
    stderr(o).contains("ompcluster: recovered from the loss of")
}

fn tmp_report() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir_in(ompcluster_tests::work_dir()).unwrap();
    let p = d.path().join("report.json");
    (d, p)
}

fn read_report(p: &Path) -> Report {
    Report::read(p).unwrap_or_else(|e| panic!("{e}"))
}

/// SIGKILL a random worker at a random moment, several seeds, for every program.
#[test]
fn random_kills_give_the_failure_free_output() {
    for &(src, _) in PROGRAMS.iter().chain([&DEVICE_NEW]) {
        let expected = reference(src, &[]);
        for seed in [11u64, 12] {
            let mut rng = Rng(seed * 0x9E37_79B9 + src.len() as u64);
            let hit = Hit { rank: rng.between(1, 4) as u32, sig: libc::SIGKILL, after: Duration::from_millis(rng.between(300, 2500)) };
            let (o, _) = run_hit(src, &[], &[hit], None);
            assert_same(src, &o, &expected, &format!("seed {seed}: {hit:?}"));
            assert!(stderr(&o).contains(&format!("recovered from the loss of rank {}", hit.rank)), "{src}, seed {seed}: no recovery reported\n{}", describe(&o));
        }
    }
}

/// Objects made by device code (`new`, `malloc` in regions) live on the worker that made them
/// until a region elsewhere needs them: kills and a freeze from outside, at seeded random
/// moments, of workers holding the only copy; the regions that made them run again at the
/// same addresses and the output is the failure-free one.
#[test]
fn device_objects_survive_kills_and_freezes_from_outside() {
    let src = DEVICE_NEW.0;
    let expected = reference(src, &[]);
    let mut replayed = 0;
    for seed in [21u64, 22, 23] {
        let mut rng = Rng(seed * 0x9E37_79B9);
        let sig = if seed == 23 { libc::SIGSTOP } else { libc::SIGKILL };
        let hit = Hit { rank: rng.between(1, 4) as u32, sig, after: Duration::from_millis(rng.between(300, 1800)) };
        // Buddy copies off: the subject is re-running the regions that allocated.
        let (o, _) = run_hit(src, &[("OMPCLUSTER_VERBOSE", "1"), NO_BUDDY], &[hit], None);
        assert_same(src, &o, &expected, &format!("seed {seed}: {hit:?}"));
        assert!(recovered(&o), "seed {seed}: no recovery reported\n{}", describe(&o));
        // Regions that allocated device memory ran again (their objects were lost).
        replayed += stderr(&o).lines().filter(|l| l.contains("RERUN task") && !l.contains(", 0 device allocation")).count();
    }
    assert!(replayed > 0, "no region that allocated device memory had to run again in any run");
}

/// A frozen worker (SIGSTOP, never resumed) is declared dead by the detector, fenced (killed
/// by the head) and recovered from; no process of the job outlives it.
#[test]
fn frozen_worker_gives_the_failure_free_output() {
    for src in ["ft_matmul.c", "ft_stencil.c", "ft_print.c"] {
        let expected = reference(src, &[]);
        let (o, _) = run_hit(src, &[], &[Hit { rank: 2, sig: libc::SIGSTOP, after: Duration::from_millis(800) }], None);
        assert_same(src, &o, &expected, "rank 2 frozen");
        assert!(recovered(&o), "{src}: no recovery reported\n{}", describe(&o));
        assert!(stderr(&o).contains("declared dead by the failure detector"), "{}", describe(&o));
    }
}

/// The head frozen (SIGSTOP) past the detector's timeout, then resumed (SIGCONT), as a head
/// whose heartbeats are held up on a crowded host: its observer declares it dead, the head
/// learns of it and is re-admitted, and the workers, which hold the head dead only once the
/// detector has done so for a whole timeout, stay. The run prints the failure-free output with
/// every worker alive at the end and no recovery. (Before, every worker left at the first
/// word, "rank 0 is dead", and the head ran the rest alone: seen with `-np 17` on 2 cores.)
#[test]
fn a_head_late_past_the_timeout_keeps_its_workers() {
    let src = "ft_print.c";
    let expected = reference(src, &[]);
    let (_d, path) = tmp_report();
    let freeze = [Hit { rank: 0, sig: libc::SIGSTOP, after: Duration::from_millis(500) }, Hit { rank: 0, sig: libc::SIGCONT, after: Duration::from_millis(1900) }];
    let (o, _) = run_hit(src, &[], &freeze, Some(&path));
    assert_same(src, &o, &expected, "the head frozen for 1.4 s");
    let err = stderr(&o);
    assert!(!err.contains("rank 0 is dead") && !recovered(&o), "workers left\n{}", describe(&o));
    assert!(err.contains("declared the head (rank 0) dead"), "the head was not declared dead, so this run proves nothing\n{}", describe(&o));
    let r = read_report(&path);
    assert!(r.failures.is_empty() && r.workers_alive_at_end == 3, "{:?}, {} workers alive at the end", r.failures, r.workers_alive_at_end);
}

/// A region's inputs are deleted when it ends, but its output lives on: recovery re-runs it
/// from the head's kept copies of the inputs, at their addresses. Kills late in the run (the
/// lost outputs' lineage reaches back to the first rounds) and early; a worker frozen.
#[test]
fn inputs_deleted_long_before_are_there_for_recovery() {
    let src = TEMP_INPUTS.0;
    let expected = reference(src, &[]);
    for (rank, sig, ms) in [(2, libc::SIGKILL, 2400), (1, libc::SIGKILL, 700), (3, libc::SIGSTOP, 1500)] {
        let (o, _) = run_hit(src, &[], &[Hit { rank, sig, after: Duration::from_millis(ms) }], None);
        assert_same(src, &o, &expected, &format!("rank {rank} hit by signal {sig} at {ms} ms"));
        assert!(recovered(&o), "{src}: no recovery reported\n{}", describe(&o));
    }
}

/// Rank 1 is no special worker.
#[test]
fn killing_rank_1_gives_the_failure_free_output() {
    for src in ["ft_matmul.c", "ft_devptr.c", "ft_cxx.cpp"] {
        let expected = reference(src, &[]);
        let (o, _) = run_hit(src, &[], &[Hit { rank: 1, sig: libc::SIGKILL, after: Duration::from_millis(700) }], None);
        assert_same(src, &o, &expected, "rank 1 killed");
        assert!(recovered(&o), "{src}: no recovery reported\n{}", describe(&o));
    }
}

/// Two workers at once, and two of three one after another (the last one finishes the run).
#[test]
fn two_workers_at_once_or_one_after_another() {
    for src in ["ft_matmul.c", "ft_stencil.c", "ft_devptr.c"] {
        let expected = reference(src, &[]);
        let at = Duration::from_millis(900);
        let both = [Hit { rank: 1, sig: libc::SIGKILL, after: at }, Hit { rank: 3, sig: libc::SIGKILL, after: at }];
        let (_d, rep) = tmp_report();
        let (o, _) = run_hit(src, &[], &both, Some(&rep));
        assert_same(src, &o, &expected, "ranks 1 and 3 killed at once");
        let r = read_report(&rep);
        let mut dead: Vec<i32> = r.failures.iter().map(|f| f.rank).collect();
        dead.sort();
        assert_eq!(dead, vec![1, 3], "{src}: {r:?}");
        assert!(!r.recoveries.is_empty(), "{src}: no recovery: {r:?}");
        let (_d, rep) = tmp_report();
        let seq = [
            Hit { rank: 2, sig: libc::SIGKILL, after: Duration::from_millis(600) },
            Hit { rank: 3, sig: libc::SIGSTOP, after: Duration::from_millis(1800) },
        ];
        let (o, _) = run_hit(src, &[], &seq, Some(&rep));
        assert_same(src, &o, &expected, "rank 2 killed, then rank 3 frozen");
        let r = read_report(&rep);
        assert_eq!(r.workers_alive_at_end, 1, "{src}: {r:?}");
        assert_eq!(r.failures.len(), 2, "{src}: {r:?}");
    }
}

/// Checkpoints on: a kill while a checkpoint is taken abandons that checkpoint (earlier ones
/// stay valid) and recovery may load versions from the published ones.
#[test]
fn kill_during_a_checkpoint_with_checkpoints_on() {
    // A fresh checkpoint directory for every run: a directory reused by a later run is not
    // this test's subject.
    // (With the store OMPCLUSTER_TEST_STORE names: see tests/checkpoints.rs.)
    let fresh = || {
        let d = tempfile::tempdir_in(ompcluster_tests::work_dir()).unwrap();
        let e = ompcluster_tests::ckpt_env(&d.path().join("ckpt"), "0.3");
        (d, e)
    };
    for src in ["ft_matmul.c", "ft_stencil.c"] {
        let expected = reference(src, &[]);
        let (_d1, mut e1) = fresh();
        e1.push(("OMPCLUSTER_FT_INJECT".into(), "kill:rank=2:during=checkpoint".into()));
        let (_d, rep) = tmp_report();
        let (o, _) = run_hit(src, &ompcluster_tests::env_refs(&e1), &[], Some(&rep));
        assert_same(src, &o, &expected, "rank 2 killed during a checkpoint");
        assert!(recovered(&o), "{src}: no recovery reported\n{}", describe(&o));
        // And a plain external kill later in the run, with checkpoints taken before it.
        let (_d2, e2) = fresh();
        let (o, _) = run_hit(src, &ompcluster_tests::env_refs(&e2), &[Hit { rank: 3, sig: libc::SIGKILL, after: Duration::from_millis(1500) }], Some(&rep));
        assert_same(src, &o, &expected, "rank 3 killed with checkpoints on");
        let r = read_report(&rep);
        assert!(r.checkpoints >= 1, "{src}: no checkpoint completed\n{r:?}");
    }
}

/// Regions that shared one worker's copy of a buffer, a reader of the version before a
/// rewrite recorded after the writer (`tests/programs/ft_shared_reader.c`, 12 rounds): when the
/// worker dies, the re-run writer must not destroy the version the re-run reader needs. Before
/// recovery rescued such a copy, every such round lost cost one more plan (seen as 2-7 plans
/// here; with the fix disabled this test failed in 4 of 4 runs). The fatal "kept disappearing
/// ... (8 plans)" that CI saw with `device_new.cpp` has another cause, still open. Two of the
/// three workers are killed at once after all regions ran, each pair in one run, so the worker
/// holding the last versions dies in two of them (the rounds may move between workers); every
/// recovery must succeed with one plan.
#[test]
fn a_rewrite_rerun_in_place_keeps_the_version_a_later_reader_needs() {
    let src = SHARED_READER.0;
    let expected = reference(src, &[]);
    // 1 + 3 regions per round.
    let regions = 1 + 3 * 12;
    let mut rerun = 0;
    let mut seen = Vec::new();
    for (a, b) in [(1, 2), (1, 3), (2, 3)] {
        let (_d, rep) = tmp_report();
        let inject = format!("kill:rank={a}:after_tasks={regions};kill:rank={b}:after_tasks={regions}");
        // Buddy copies off: the subject is re-running the rounds.
        let (o, _) = run_hit(src, &[("OMPCLUSTER_FT_INJECT", &inject), NO_BUDDY], &[], Some(&rep));
        assert_same(src, &o, &expected, &format!("ranks {a} and {b} killed after every region ran"));
        let r = read_report(&rep);
        seen.push(format!("ranks {a}, {b}: tasks per worker {:?}, failures {:?}, recoveries {:?}", r.counts.tasks_per_worker, r.failures, r.recoveries));
        // (A worker that held nothing still needed may die unnoticed before the job ends.)
        for rec in &r.recoveries {
            assert_eq!(rec.outcome.plans, 1, "ranks {a}, {b}: recovery had to plan again: {rec:?}\n{}", describe(&o));
            rerun += rec.outcome.tasks_reexecuted;
        }
    }
    assert!(rerun > 0, "no run lost a region:\n{}", seen.join("\n"));
}

/// A copy taken from a worker's copy while a kernel placed there after the copy began changes
/// it holds that change, or part of it: it is no copy of the version it was asked for
/// (`ft_move_race.c`; `slow:moves=30` holds each copy back 30 ms, so that the writer placed
/// 2 ms after its reader starts before the reader's input is sent). When the writer's worker
/// dies, recovery must not run the writer again from that copy (it did: a wrong result in
/// every run).
#[test]
fn a_copy_sent_while_a_kernel_on_its_source_changes_it_is_no_version() {
    let src = MOVE_RACE.0;
    let expected = reference(src, &[]);
    let mut torn = 0;
    for k in [1, 2] {
        let (_d, rep) = tmp_report();
        let inject = format!("slow:moves=30;kill:rank={k}:after_tasks=28");
        let (o, _) = run_hit(src, &[("OMPCLUSTER_FT_INJECT", &inject), ("OMPCLUSTER_VERBOSE", "1"), NO_BUDDY], &[], Some(&rep));
        assert_same(src, &o, &expected, &format!("rank {k} killed after every region ran"));
        assert!(recovered(&o), "rank {k}: no recovery reported\n{}", describe(&o));
        let r = read_report(&rep);
        assert_eq!(r.failures.iter().map(|f| f.rank).collect::<Vec<_>>(), vec![k], "{r:?}");
        torn += stderr(&o).lines().filter(|l| l.contains("] TORN ")).count();
    }
    assert!(torn > 0, "no copy was taken from a copy that a kernel changed meanwhile: the race this tests did not happen");
}

/// A newer version moving from one worker into another's copy that holds an older version
/// recovery may need is received aside and written in once all arrived, so when its source
/// dies before that, the copy keeps the older version, and recovery finds it there (the move
/// used to drop it as it started: recovery could go further back, to the head's copy).
/// `kill:rank=R:during=move` kills R as it is asked to send such a copy; the round-robin
/// scheduler spreads each chain's in-place updates over the workers, so such moves come
/// early; buddy copies off, so the head holds none of those versions.
#[test]
fn a_copy_whose_source_dies_on_the_way_keeps_its_older_version() {
    let src = DEPEND_CHAIN.0;
    let expected = reference(src, &[]);
    for k in [1, 2, 3] {
        let (_d, rep) = tmp_report();
        let inject = format!("kill:rank={k}:during=move");
        let envs = [("OMPCLUSTER_FT_INJECT", inject.as_str()), ("OMPCLUSTER_SCHEDULER", "roundrobin"), ("OMPCLUSTER_VERBOSE", "1"), NO_BUDDY];
        let (o, _) = run_hit(src, &envs, &[], Some(&rep));
        assert_same(src, &o, &expected, &format!("rank {k} killed as it was to send a copy"));
        assert!(recovered(&o), "rank {k}: no recovery reported\n{}", describe(&o));
        let r = read_report(&rep);
        assert_eq!(r.failures.iter().map(|f| f.rank).collect::<Vec<_>>(), vec![k], "{r:?}");
        let err = stderr(&o);
        // "KEPT buffer B version V on R (0x...)": (B, V, R).
        let kept: Vec<(String, String, String)> = err
            .lines()
            .filter_map(|l| {
                let w: Vec<&str> = l.split("] KEPT buffer ").nth(1)?.split_whitespace().collect();
                Some((w.first()?.to_string(), w.get(2)?.to_string(), w.get(4)?.to_string()))
            })
            .collect();
        assert!(!kept.is_empty(), "rank {k}: no copy kept its older version\n{}", describe(&o));
        // Recovery's plan for such a buffer (its newest version was lost with R) found the
        // kept version there ("stale {.., R: V}"): a source to re-run from, if it needs it.
        let found = kept.iter().any(|(b, v, r)| {
            err.lines().any(|l| l.contains(&format!("RECOVERY plan: buffer {b} version ")) && (l.contains(&format!("{{{r}: {v}")) || l.contains(&format!(", {r}: {v}"))))
        });
        assert!(found, "rank {k}: recovery found none of the kept copies {kept:?}\n{}", describe(&o));
    }
}

/// A worker that dies while recovery runs: recovery starts again with both dead.
#[test]
fn kill_during_recovery() {
    for src in ["ft_matmul.c", "ft_cxx.cpp"] {
        let expected = reference(src, &[]);
        let (_d, rep) = tmp_report();
        let envs = [("OMPCLUSTER_FT_INJECT", "kill:rank=1:after_tasks=30;kill:rank=3:during=recovery")];
        let (o, _) = run_hit(src, &envs, &[], Some(&rep));
        assert_same(src, &o, &expected, "rank 1 killed, then rank 3 during its recovery");
        let r = read_report(&rep);
        let dead: Vec<i32> = r.failures.iter().map(|f| f.rank).collect();
        assert!(dead.contains(&1) && dead.contains(&3), "{src}: {r:?}");
        assert_eq!(r.workers_alive_at_end, 1, "{src}: {r:?}");
    }
}

/// Re-executed regions do not print again; the report and the DOT graph show what was re-run.
/// The locality scheduler keeps this program's chain of in-place updates on the first worker,
/// rank 1: killing it after 60 regions loses the current version, which only re-running the
/// chain (no checkpoints) gives back.
#[test]
fn report_and_graph_show_what_was_rerun() {
    let src = "ft_print.c";
    let expected = reference(src, &[]);
    let (_d, rep) = tmp_report();
    let dot = rep.with_file_name("graph.dot");
    let dot_s = dot.to_string_lossy().into_owned();
    // Buddy copies off: with them, the head holds a recent version of the chain (see
    // `a_late_failure_costs_only_the_work_since_the_last_buddy_copy`).
    let envs = [("OMPCLUSTER_GRAPH", dot_s.as_str()), ("OMPCLUSTER_FT_INJECT", "kill:rank=1:after_tasks=60"), NO_BUDDY];
    let (o, _) = run_hit(src, &envs, &[], Some(&rep));
    assert_same(src, &o, &expected, "rank 2 killed after 60 regions");
    let r = read_report(&rep);
    let rec = r.recoveries.first().unwrap_or_else(|| panic!("no recovery: {r:?}"));
    assert!(rec.paused_seconds > 0.0, "{r:?}");
    assert!(r.counts.tasks_reexecuted >= 50, "the lost chain must be re-run: {r:?}");
    assert!(r.failures.first().and_then(|f| f.detection_latency_seconds).is_some(), "{r:?}");
    let g = std::fs::read_to_string(&dot).unwrap();
    assert!(g.contains("fillcolor=orange"), "no re-executed task in the graph:\n{g}");
}

/// Sequential re-execution (the thesis's way) gives the same result.
#[test]
fn sequential_reexecution_gives_the_same_output() {
    let src = "ft_matmul.c";
    let expected = reference(src, &[]);
    // The mode shows in the report: the most re-runs at once (the same loss, in parallel,
    // runs more than one).
    let mut at_once = Vec::new();
    for mode in ["sequential", "parallel"] {
        let envs = [("OMPCLUSTER_FT_REEXEC", mode), ("OMPCLUSTER_FT_INJECT", "kill:rank=2:after_tasks=40"), NO_BUDDY];
        let (_d, rep) = tmp_report();
        let (o, _) = run_hit(src, &envs, &[], Some(&rep));
        assert_same(src, &o, &expected, &format!("{mode} re-execution"));
        assert!(recovered(&o), "{}", describe(&o));
        let r = read_report(&rep);
        assert_eq!(r.recoveries.len(), 1, "{mode}: {r:?}");
        let out = &r.recoveries[0].outcome;
        assert!(out.rerun_batches > 1, "{mode}: a single batch to re-run cannot tell the modes apart: {r:?}");
        at_once.push(out.most_batches_at_once);
    }
    assert_eq!(at_once[0], 1, "sequential: more than one re-run at once");
    assert!(at_once[1] > 1, "parallel: never more than one re-run at once ({at_once:?})");
}

/// Every worker gone: the head runs the remaining regions itself (it loads the images with
/// the workers' loader) and the program still finishes right, saying so once on stderr. The
/// workers die one after another (injected), or from outside: two killed and one frozen at
/// once; with checkpoints on for one program (the head then saves its own copies).
#[test]
fn losing_every_worker_the_head_finishes_the_run() {
    let one_by_one = "kill:rank=1:after_tasks=15;kill:rank=2:after_tasks=25;kill:rank=3:after_tasks=35";
    let ckpt = tempfile::tempdir_in(ompcluster_tests::work_dir()).unwrap();
    let ckpt_dir = ckpt.path().join("ckpt").to_string_lossy().into_owned();
    // (program, settings, kills and freezes from outside)
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, Vec<Hit>);
    let cases: Vec<Case> = vec![
        ("ft_matmul.c", vec![("OMPCLUSTER_FT_INJECT", one_by_one)], vec![]),
        ("ft_stencil.c", vec![("OMPCLUSTER_FT_INJECT", one_by_one), ("OMPCLUSTER_CP_INTERVAL", "0.3"), ("OMPCLUSTER_CP_PERSISTENT", &ckpt_dir)], vec![]),
        ("ft_cxx.cpp", vec![("OMPCLUSTER_FT_INJECT", one_by_one)], vec![]),
        ("ft_print.c", vec![("OMPCLUSTER_FT_INJECT", one_by_one)], vec![]),
        (
            "ft_devptr.c",
            vec![],
            vec![
                Hit { rank: 1, sig: libc::SIGKILL, after: Duration::from_millis(700) },
                Hit { rank: 2, sig: libc::SIGSTOP, after: Duration::from_millis(700) },
                Hit { rank: 3, sig: libc::SIGKILL, after: Duration::from_millis(700) },
            ],
        ),
    ];
    for (src, envs, hits) in cases {
        let expected = reference(src, &[]);
        let (_d, rep) = tmp_report();
        let (o, _) = run_hit(src, &envs, &hits, Some(&rep));
        assert_same(src, &o, &expected, "every worker lost");
        let said = stderr(&o).matches("the head runs the remaining target regions itself").count();
        assert_eq!(said, 1, "{src}: the switch to the head must be said once\n{}", describe(&o));
        let r = read_report(&rep);
        assert_eq!(r.workers_alive_at_end, 0, "{src}: {r:?}");
        assert!(r.continued_on_head_at_seconds.is_some(), "{src}: {r:?}");
        assert!(r.counts.tasks_per_worker.get("0").is_some_and(|&n| n > 0), "{src}: the head ran no region: {r:?}");
    }
}

/// Without a worker's death, nothing changes: the report says so.
#[test]
fn failure_free_report_has_no_failures() {
    let (_d, rep) = tmp_report();
    let prog = compile("ft_matmul.c");
    let mut envs = with_ft(&[]);
    let rep_s = rep.to_string_lossy().into_owned();
    envs.push(("OMPCLUSTER_REPORT", &rep_s));
    let o = Job::spawn(4, &prog, &["256", "128", "0"], &envs).wait(BOUND);
    assert!(o.status.success(), "{}", describe(&o));
    let r = read_report(&rep);
    assert_eq!(r.tasks_executed, 8);
    assert!(r.failures.is_empty(), "{r:?}");
    assert_eq!(r.workers_alive_at_end, 3);
}

/// The Cholesky example (not written for these tests; its kernels compute, they do not
/// sleep): a worker killed or frozen mid-run; the result line must be the failure-free one
/// (the timing field aside: the factorisation itself is bit-identical wherever a tile kernel
/// runs, the same machine code on the same inputs).
#[test]
fn cholesky_example_survives_kills_and_freezes() {
    let exe = ompcluster_tests::cholesky_example();
    let args = ["2048", "128"];
    let masked = |o: &Output| {
        let out = stdout(o);
        let line = out.lines().find(|l| l.starts_with("cholesky")).unwrap_or_default().to_string();
        // "cholesky N=.. TS=.. tasks=..: 1.234 s, max error ..": drop the time.
        match (line.find(": "), line.find(" s,")) {
            (Some(a), Some(b)) if a < b => format!("{}{}", &line[..a], &line[b + 2..]),
            _ => line,
        }
    };
    let free = Job::spawn(4, exe, &args, FT).wait(BOUND);
    assert!(free.status.success() && stdout(&free).contains("result correct"), "{}", describe(&free));
    let expected = masked(&free);
    let mut rng = Rng(77);
    for sig in [libc::SIGKILL, libc::SIGKILL, libc::SIGSTOP] {
        let hit = Hit { rank: rng.between(1, 4) as u32, sig, after: Duration::from_millis(rng.between(300, 1500)) };
        let (o, _) = run_hit_exe(exe, &args, &[], &[hit], None);
        assert!(o.status.success(), "{hit:?}\n{}", describe(&o));
        assert_eq!(masked(&o), expected, "{hit:?}\n{}", describe(&o));
    }
}

/// A survivor waiting on the dead rank (an exchange from it) does not wait for its own
/// heartbeat timeout: the head tells every worker at once (FAILED) when it learns of a failure.
/// With a 60 s timeout, recovery must start well before it (before this change, such a wait
/// held recovery for the whole timeout: 3 s with the default, seen in the timeline).
#[test]
fn survivors_stop_waiting_for_the_dead_when_the_head_learns_of_it() {
    let (_d, rep) = tmp_report();
    let rep_s = rep.to_string_lossy().into_owned();
    let envs = [
        ("OMPCLUSTER_HB_TIMEOUT", "60000"),
        ("OMPCLUSTER_SCHEDULER", "roundrobin"),
        ("OMPCLUSTER_FT_INJECT", "kill:rank=1:after_tasks=40"),
        ("OMPCLUSTER_REPORT", rep_s.as_str()),
    ];
    let o = ompcluster_tests::run(4, ompcluster_tests::matmul_example(), &["512", "64"], &envs);
    assert!(o.status.success() && stdout(&o).contains("result correct"), "{}", describe(&o));
    let r = read_report(&rep);
    let failed = r.failures.first().unwrap_or_else(|| panic!("no failure: {r:?}")).at_seconds;
    let recovered = r.recoveries.first().unwrap_or_else(|| panic!("no recovery: {r:?}")).at_seconds;
    assert!(recovered - failed < 20.0, "recovery started {:.1} s after the failure was known: {r:?}", recovered - failed);
}

/// A bug of ours does not hang the job (issue 23): the recovery handler panics when the
/// recovery of a killed worker starts (`panic:during=recovery`, test only). The job must end
/// by itself, soon, with a non-zero status, one message naming the recovery handler and the
/// panic, and no process of it left running.
#[test]
fn a_panic_in_the_recovery_handler_ends_the_job_with_a_message() {
    /// Far below the harness's bounds: the launcher alone stops what is left of a job 2 x 1 s
    /// (the heartbeat timeout here) + 5 s after the head ends.
    const LIMIT: Duration = Duration::from_secs(45);
    let src = "ft_matmul.c";
    let prog = compile(src);
    // (RUST_BACKTRACE=1 would add Rust's own report of the panic, with a backtrace.)
    let envs = with_ft(&[("OMPCLUSTER_FT_INJECT", "kill:rank=2:after_tasks=20;panic:during=recovery"), ("RUST_BACKTRACE", "0")]);
    let mut job = Job::spawn(4, &prog, args_of(src), &envs);
    let marker = job.marker().to_string();
    let ended = job.wait_timeout(LIMIT).is_some();
    let took = job.elapsed();
    // What the job left running, once it ended (before `wait` would kill leftovers itself).
    let left = if ended {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !running(&marker).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        running(&marker)
    } else {
        Vec::new()
    };
    // (Panics "timed out", with the output, if the job did not end within LIMIT.)
    let o = job.wait(Duration::ZERO);
    let err = stderr(&o);
    assert!(!o.status.success(), "the job must fail\n{}", describe(&o));
    assert_eq!(o.status.code(), Some(4), "exit status 4, as any unrecoverable failure\n{}", describe(&o));
    assert!(took < LIMIT, "took {took:?}");
    let line = "ompcluster: cannot recover: the recovery handler panicked: injected panic (OMPCLUSTER_FT_INJECT=panic:during=recovery); ending the job";
    assert_eq!(err.matches(line).count(), 1, "one message naming the handler and the panic\n{}", describe(&o));
    // One clear message: not also Rust's own panic report.
    assert!(!err.contains("panicked at"), "{}", describe(&o));
    assert!(!stdout(&o).contains("PASS"), "the program cannot have finished\n{}", describe(&o));
    assert_eq!(left, Vec::<i32>::new(), "processes of the job left running after it ended\n{}", describe(&o));
}

/// Live (not zombie) processes of the job marked `marker`.
fn running(marker: &str) -> Vec<i32> {
    ompcluster_tests::job_members(marker)
        .into_iter()
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .map(|s| s.rfind(')').is_some_and(|i| !s[i + 2..].starts_with('Z')))
                .unwrap_or(false)
        })
        .collect()
}

/// The in-place pattern of issue 23 (`tests/programs/ft_inplace.c`: 64 buffers of 512 bytes
/// kept on the device, one region per iteration updating one of them in place), a worker
/// killed at 90% of 200,000 regions. With buddy copies (the default) the head holds a recent
/// version of every buffer, so recovery re-runs only the regions since (at most a few
/// intervals' worth), the record stays a fraction of the run, and the output is the
/// failure-free one. With buddy copies off, the same kill re-runs each lost buffer's whole
/// chain, and the output is the same too.
#[test]
fn a_late_failure_costs_only_the_work_since_the_last_buddy_copy() {
    let prog = compile("ft_inplace.c");
    let args = ["200000"];
    let free = Job::spawn(4, &prog, &args, FT).wait(BOUND);
    assert!(free.status.success() && stdout(&free).contains("ft_inplace: PASS"), "{}", describe(&free));
    let expected = stdout(&free);
    let kill = ("OMPCLUSTER_FT_INJECT", "kill:rank=2:after_tasks=180000");
    let mut rerun = Vec::new();
    for buddy in [true, false] {
        let (_d, rep) = tmp_report();
        let mut envs = vec![kill];
        if !buddy {
            envs.push(NO_BUDDY);
        }
        let prog_args: Vec<&str> = args.to_vec();
        let (o, _) = run_hit_exe(&prog, &prog_args, &envs, &[], Some(&rep));
        assert_same("ft_inplace.c", &o, &expected, &format!("rank 2 killed at 90%, buddy copies {buddy}"));
        let r = read_report(&rep);
        let rec = r.recoveries.first().unwrap_or_else(|| panic!("no recovery: {r:?}"));
        let (lost, reexecuted) = (rec.outcome.versions_lost, rec.outcome.tasks_reexecuted);
        assert!(lost > 0, "rank 2 held no current version: {r:?}");
        let from_buddy = rec.outcome.from_buddy_copies;
        if buddy {
            assert!(from_buddy > 0, "no version came from a buddy copy: {r:?}");
            assert!(r.buddy_copies.copies > 0, "{r:?}");
            // What the head keeps stays a fraction of the run.
            assert!(r.tasks_recorded < 100_000, "the record kept most of the run: {r:?}");
        } else {
            assert_eq!(from_buddy, 0, "{r:?}");
            assert_eq!(r.buddy_copies.copies, 0, "{r:?}");
        }
        assert!(rec.rerun_rate_per_second > 0.0 || reexecuted == 0, "{r:?}");
        rerun.push(reexecuted);
    }
    // Without buddy copies each lost buffer is rebuilt from its first version: about 2,800
    // regions per buffer here.
    assert!(rerun[1] >= 10_000, "buddy copies off re-ran only {} regions", rerun[1]);
    assert!(rerun[0] * 4 < rerun[1], "buddy copies saved too little: {rerun:?}");
}

/// A spare worker (`OMPCLUSTER_FT_SPARES=1`: rank 3 of 4) runs no region until a worker dies,
/// then takes its place: the report says which rank it replaced and when, and it runs regions
/// from then on; the output is the failure-free one.
#[test]
fn a_spare_takes_the_place_of_a_dead_worker() {
    let src = "ft_matmul.c";
    let expected = reference(src, &[]);
    let spare = ("OMPCLUSTER_FT_SPARES", "1");
    let (_d, rep) = tmp_report();
    let (o, _) = run_hit(src, &[spare], &[], Some(&rep));
    assert_same(src, &o, &expected, "no failure, one spare");
    let r = read_report(&rep);
    let ran = |r: &Report, w: &str| r.counts.tasks_per_worker.get(w).copied();
    assert_eq!(ran(&r, "3"), Some(0), "the spare ran regions before any failure: {r:?}");
    assert!(ran(&r, "1").is_some_and(|n| n > 0) && ran(&r, "2").is_some_and(|n| n > 0), "{r:?}");
    let (_d, rep) = tmp_report();
    let (o, _) = run_hit(src, &[spare, ("OMPCLUSTER_FT_INJECT", "kill:rank=1:after_tasks=20")], &[], Some(&rep));
    assert_same(src, &o, &expected, "rank 1 killed, one spare");
    assert!(stderr(&o).contains("spare rank 3 takes the place of rank 1"), "{}", describe(&o));
    let r = read_report(&rep);
    let used = r.recoveries.first().and_then(|rec| rec.spares.first()).unwrap_or_else(|| panic!("no spare used: {r:?}"));
    assert_eq!((used.spare, used.replaced), (3, 1), "{r:?}");
    assert!(used.at_seconds > 0.0, "{r:?}");
    assert!(ran(&r, "3").is_some_and(|n| n > 0), "the spare ran no region after the failure: {r:?}");
}
