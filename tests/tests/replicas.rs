//! Replicas of regions (`OMPCLUSTER_FT_REPLICAS=k`) and voting over their results
//! (`OMPCLUSTER_FT_VOTE=1`), tested as a user meets them: real programs under
//! `ompcluster-run`, workers killed from outside, bits flipped in what a worker's kernel wrote
//! (`OMPCLUSTER_FT_INJECT=flip:rank=R:...`, as a faulty core would), and the run report.

use ompcluster_tests::{compile, describe, run_with_report, stderr, stdout, test_seed, Job, Report, Rng};
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

/// A frozen or killed worker is declared dead within 1 s.
const FT: [(&str, &str); 2] = [("OMPCLUSTER_HB_PERIOD", "100"), ("OMPCLUSTER_HB_TIMEOUT", "1000")];

/// A run that takes longer than this has hung.
const BOUND: Duration = Duration::from_secs(150);

/// 4x4 blocks of 64x64, each product sleeping 20 ms: 64 regions in chains of 4 per C block.
const MATMUL: &[&str] = &["256", "64", "20000"];

fn envs<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    FT.iter().copied().chain(extra.iter().copied()).collect()
}

fn passes(o: &Output) -> bool {
    o.status.success() && stdout(o).lines().any(|l| l.contains("PASS"))
}

/// With k = 2 and 3, the matmul prints what it prints with k = 1, and the replicas' copies
/// hold the versions they made. All 64 products are in flight at once and share their A and
/// B blocks and the image's data: replicas share the copies they only read with the other
/// regions on their worker (before they did, only 2 or 3 of 64 found a worker no other
/// region used), and wait for those still on their way there (before they did, the first
/// wave, moving its inputs, found none: 32 to 53 of 64 in 12 runs; now 64 of 64 in 6).
#[test]
fn replicated_regions_give_the_result_of_unreplicated_ones() {
    let prog = compile("ft_matmul.c");
    let (o, one) = run_with_report(4, &prog, MATMUL, &envs(&[]));
    assert!(passes(&o), "{}", describe(&o));
    assert_eq!(one.replicas.regions_replicated, 0);
    let reference = stdout(&o);
    for k in ["2", "3"] {
        let (o, r) = run_with_report(4, &prog, MATMUL, &envs(&[("OMPCLUSTER_FT_REPLICAS", k)]));
        assert!(passes(&o), "k={k}\n{}", describe(&o));
        assert_eq!(stdout(&o), reference, "k={k}");
        let extra: u64 = k.parse::<u64>().unwrap() - 1;
        assert!(r.replicas.regions_replicated >= 56 && r.replicas.replica_runs >= 56 * extra && r.replicas.copies_kept >= 56, "k={k}: {:?}", r.replicas);
        assert!(r.replicas.shared_runs >= 1, "k={k}: no replica shared a copy: {:?}", r.replicas);
        assert!(r.replicas.disagreements.is_empty(), "k={k}: {:?}", r.replicas);
    }
}

/// A report's replica counts, for messages.
fn counts(r: &Report) -> String {
    format!("{:?}; recoveries: {}", r.replicas, r.recoveries.len())
}

/// Bits flipped in what a worker wrote: without voting the program prints a wrong result
/// (the control: the flip reaches the output); with k = 3 and voting, every flip is outvoted,
/// the worker is named, and the program prints the right result.
#[test]
fn a_flipped_bit_is_outvoted() {
    let prog = compile("ft_matmul.c");
    let flips = "flip:rank=2:after_tasks=5;flip:rank=2:after_tasks=20";
    let (o, _) = run_with_report(4, &prog, MATMUL, &envs(&[("OMPCLUSTER_FT_INJECT", flips)]));
    assert!(!passes(&o), "the flips did not reach the output of an unvoted run\n{}", describe(&o));
    let (o, r) = run_with_report(4, &prog, MATMUL, &envs(&[("OMPCLUSTER_FT_REPLICAS", "3"), ("OMPCLUSTER_FT_VOTE", "1"), ("OMPCLUSTER_FT_INJECT", flips)]));
    assert!(passes(&o), "{}\n{}", counts(&r), describe(&o));
    assert_eq!(r.replicas.flips_injected, 2, "{}", counts(&r));
    assert_eq!(r.replicas.corrections, 2, "{}\n{}", counts(&r), describe(&o));
    assert_eq!(r.replicas.lost_by_rank.get("2"), Some(&2), "{}", counts(&r));
    assert!(stderr(&o).contains("ompcluster: worker 2 lost a vote on a region of kernel"), "{}", describe(&o));
}


/// `ft_print.c`: a chain of 120 regions of 25 ms updating one buffer in place, each printing
/// what it saw (3 s).
const CHAIN: &[&str] = &["120", "25000"];

/// Buddy copies off: what a lost worker held is re-run by lineage unless a replica holds it.
const NO_BUDDY: (&str, &str) = ("OMPCLUSTER_FT_BUDDY_INTERVAL", "0");

/// Run `prog` on 3 workers with `envs`, SIGKILL `rank` from outside `after` the end of the
/// start-up, and return the output and the report (the kill must land: the test fails if
/// the job ended first).
fn run_killed(prog: &Path, args: &[&str], envs: &[(&str, &str)], rank: u32, after: Duration) -> (Output, Report) {
    let dir = tempfile::tempdir_in(ompcluster_tests::work_dir()).unwrap();
    let path = dir.path().join("report.json");
    let p = path.to_string_lossy().into_owned();
    let mut all = envs.to_vec();
    all.push(("OMPCLUSTER_REPORT", &p));
    let mut job = Job::spawn(4, prog, args, &all);
    let ranks = job.started_ranks(prog, 4, Duration::from_secs(90));
    let t0 = Instant::now();
    std::thread::sleep(after);
    let pid = ranks.iter().find(|(r, _)| *r == rank).map(|&(_, p)| p);
    // SAFETY: kill has no memory-safety preconditions; the pid is a rank of our job.
    let delivered = pid.is_some_and(|p| unsafe { libc::kill(p, libc::SIGKILL) } == 0);
    let o = job.wait(BOUND);
    assert!(delivered, "rank {rank} was not killed (the job ended first?) after {:?}\n{}", t0.elapsed(), describe(&o));
    let r = Report::read(&path).unwrap_or_else(|e| panic!("{e}\n{}", describe(&o)));
    (o, r)
}

/// The worker holding a chain of in-place updates killed, buddy copies off: with k = 1 the
/// chain is re-run by lineage (the control: the kill costs re-runs); with k = 2 a replica's
/// copy holds every version of the chain: the run recovers with no region run again, and
/// prints exactly the failure-free output (each region's line once). Then a random worker
/// is SIGKILLed from outside at a random moment, three times, each run checked the same way.
#[test]
fn a_worker_killed_costs_no_rerun_of_replicated_regions() {
    let prog = compile("ft_print.c");
    let (o, _) = run_with_report(4, &prog, CHAIN, &envs(&[NO_BUDDY]));
    assert!(passes(&o), "{}", describe(&o));
    let reference = stdout(&o);
    let kill = ("OMPCLUSTER_FT_INJECT", "kill:rank=1:after_tasks=60");
    let (o, r) = run_with_report(4, &prog, CHAIN, &envs(&[NO_BUDDY, kill]));
    assert!(passes(&o) && stdout(&o) == reference, "k=1\n{}", describe(&o));
    assert!(r.counts.tasks_reexecuted >= 50, "k=1: the kill cost no re-run, so the k=2 runs below prove nothing: {}\n{}", counts(&r), describe(&o));
    let (o, r) = run_with_report(4, &prog, CHAIN, &envs(&[NO_BUDDY, kill, ("OMPCLUSTER_FT_REPLICAS", "2")]));
    let what = "k=2, rank 1 killed after 60 regions";
    assert!(passes(&o) && stdout(&o) == reference, "{what}\n{}", describe(&o));
    assert_eq!(r.failures.iter().map(|f| f.rank).collect::<Vec<_>>(), vec![1], "{what}: {}", counts(&r));
    assert_eq!(r.counts.tasks_reexecuted, 0, "{what}: a replicated region was run again: {}\n{}", counts(&r), describe(&o));
    assert!(r.replicas.regions_replicated >= 100, "{what}: {}", counts(&r));
    let mut rng = Rng(test_seed("a_worker_killed_costs_no_rerun_of_replicated_regions"));
    for round in 0..3 {
        let rank = rng.between(1, 4) as u32;
        let after = Duration::from_millis(rng.between(300, 2500));
        let (o, r) = run_killed(&prog, CHAIN, &envs(&[NO_BUDDY, ("OMPCLUSTER_FT_REPLICAS", "2")]), rank, after);
        let what = format!("round {round}: k=2, rank {rank} killed after {after:?}");
        assert!(passes(&o) && stdout(&o) == reference, "{what}\n{}", describe(&o));
        assert_eq!(r.failures.iter().map(|f| f.rank).collect::<Vec<_>>(), vec![rank as i32], "{what}: {}", counts(&r));
        assert_eq!(r.recoveries.len(), 1, "{what}: {}", counts(&r));
        assert_eq!(r.counts.tasks_reexecuted, 0, "{what}: a replicated region was run again: {}\n{}", counts(&r), describe(&o));
    }
}

/// All of a matmul's products in flight at once (`ft_matmul.c`, 64 regions over 3 workers),
/// k = 2, buddy copies off: (nearly) every region gets a replica, the first wave too (its
/// inputs still on their way to the workers), and a worker SIGKILLed at a random moment
/// costs no re-run at all, three times. (Before the first wave waited for its copies, 43 to
/// 55 of 64 regions got replicas in 6 such kills; those kills re-ran nothing either: a region
/// without a replica is at risk only until the next product of its block, which had one,
/// replaces its version.)
#[test]
fn a_worker_killed_during_the_matmul_costs_no_rerun() {
    let prog = compile("ft_matmul.c");
    let args = ["512", "128", "400000"];
    let k2 = [NO_BUDDY, ("OMPCLUSTER_FT_REPLICAS", "2")];
    let mut rng = Rng(test_seed("a_worker_killed_during_the_matmul_costs_no_rerun"));
    for round in 0..3 {
        let rank = rng.between(1, 4) as u32;
        // Its regions run from about 0.4 s to 2.3 s after start-up.
        let after = Duration::from_millis(rng.between(300, 1800));
        let (o, r) = run_killed(&prog, &args, &envs(&k2), rank, after);
        let what = format!("round {round}: k=2, rank {rank} killed after {after:?}");
        assert!(passes(&o), "{what}\n{}", describe(&o));
        assert_eq!(r.failures.iter().map(|f| f.rank).collect::<Vec<_>>(), vec![rank as i32], "{what}: {}", counts(&r));
        assert!(r.replicas.regions_replicated >= 60, "{what}: {}", counts(&r));
        assert_eq!((r.counts.tasks_reexecuted, r.replicas.reexecuted), (0, 0), "{what}: regions were run again: {}\n{}", counts(&r), describe(&o));
    }
}

/// The Cholesky example with k = 2 (buddy copies on, the default), a worker killed while its
/// tiles' in-place updates run: the result is right, and tails settled after a later update
/// had replaced the version they made kept their copies as stale copies of it
/// (`replicas.kept_stale`), sources for re-running what came after. Forgotten instead (the
/// build before), a later version held by one worker only, lost with it, re-ran the
/// replicated updates behind it back to the head's copy: 14, 10, 7 and 3 replicated re-runs
/// in kills of the failure campaign of 2026-12-04; 0 to 2 in 6 kills after.
#[test]
fn a_worker_killed_during_the_cholesky_finds_what_tails_made_before() {
    let exe = ompcluster_tests::cholesky_example();
    let args = ["2048", "128"];
    let k2 = envs(&[("OMPCLUSTER_FT_REPLICAS", "2")]);
    let mut rng = Rng(test_seed("a_worker_killed_during_the_cholesky_finds_what_tails_made_before"));
    for round in 0..3 {
        let rank = rng.between(1, 4) as u32;
        // Its regions run from about 0.2 s to 1.9 s after start-up.
        let after = Duration::from_millis(rng.between(600, 1300));
        let (o, r) = run_killed(exe, &args, &k2, rank, after);
        let what = format!("round {round}: k=2, rank {rank} killed after {after:?}");
        assert!(o.status.success() && stdout(&o).contains("result correct"), "{what}\n{}", describe(&o));
        assert_eq!(r.failures.iter().map(|f| f.rank).collect::<Vec<_>>(), vec![rank as i32], "{what}: {}", counts(&r));
        assert!(r.replicas.kept_stale > 0, "{what}: no tail's copy was kept as a stale copy: {}", counts(&r));
        eprintln!("{what}: {} re-runs, {} of replicated regions, {} stale copies kept", r.counts.tasks_reexecuted, r.replicas.reexecuted, r.replicas.kept_stale);
    }
}

/// `ft_print.c` with the given settings, and its failure-free output (k = 1, no faults).
fn chain(envs_: &[(&str, &str)]) -> (Output, Report, String) {
    let prog = compile("ft_print.c");
    let (o, _) = run_with_report(4, &prog, CHAIN, &envs(&[]));
    assert!(passes(&o), "{}", describe(&o));
    let (out, r) = run_with_report(4, &prog, CHAIN, &envs(envs_));
    (out, r, stdout(&o))
}

/// k = 2 with voting: a flip makes the two replicas disagree with no majority. The region is
/// undone and run again on three workers (a holder of the version it started from was kept out
/// of the pair for that), whose majority names the worker that flipped; the output is the
/// failure-free one, each region's line printed once.
#[test]
fn two_replicas_that_disagree_run_again_and_the_majority_names_the_loser() {
    let flips = "flip:rank=2:after_tasks=10;flip:rank=3:after_tasks=60";
    let (o, r, reference) = chain(&[("OMPCLUSTER_FT_REPLICAS", "2"), ("OMPCLUSTER_FT_VOTE", "1"), ("OMPCLUSTER_FT_INJECT", flips)]);
    assert!(passes(&o) && stdout(&o) == reference, "{}\n{}", counts(&r), describe(&o));
    assert_eq!(r.replicas.tiebreaks, 2, "{}\n{}", counts(&r), describe(&o));
    assert_eq!(r.replicas.corrections, 2, "{}", counts(&r));
    let lost: Vec<(&str, u64)> = r.replicas.lost_by_rank.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(lost, vec![("2", 1), ("3", 1)], "{}", counts(&r));
    // A region that finds no second worker free while nothing else runs goes unvoted: one of
    // 120 was seen (the report counts it).
    assert!(r.replicas.unvoted <= 1, "{}", counts(&r));
    assert!(stderr(&o).contains("no majority agrees: running it again"), "{}", describe(&o));
}

/// A worker that keeps writing wrong results is retired after `OMPCLUSTER_FT_VOTE_RETIRE`
/// lost votes, as a failed worker: the job recovers without it and prints the right result.
#[test]
fn a_worker_that_loses_votes_is_retired() {
    let flips = "flip:rank=2:after_tasks=10;flip:rank=2:after_tasks=20";
    let (o, r, reference) = chain(&[("OMPCLUSTER_FT_REPLICAS", "3"), ("OMPCLUSTER_FT_VOTE", "1"), ("OMPCLUSTER_FT_VOTE_RETIRE", "2"), ("OMPCLUSTER_FT_INJECT", flips)]);
    assert!(passes(&o) && stdout(&o) == reference, "{}\n{}", counts(&r), describe(&o));
    assert_eq!(r.replicas.retired, vec![2], "{}", counts(&r));
    assert_eq!(r.failures.iter().map(|f| f.rank).collect::<Vec<_>>(), vec![2], "{}", counts(&r));
    assert!(stderr(&o).contains("ompcluster: worker 2 lost 2 votes (OMPCLUSTER_FT_VOTE_RETIRE=2): retiring it as a failed worker"), "{}", describe(&o));
    assert!(r.workers_alive_at_end == 2, "{}", counts(&r));
}

/// Three replicas that all wrote something else: nothing decides, so the program ends
/// non-zero with a message, and what it printed is a prefix of the right output (never a
/// wrong line).
#[test]
fn replicas_that_all_disagree_end_the_program_without_a_wrong_answer() {
    let flips = "flip:rank=1:after_tasks=10;flip:rank=2:after_tasks=10;flip:rank=3:after_tasks=10";
    let prog = compile("ft_print.c");
    let (o, _) = run_with_report(4, &prog, CHAIN, &envs(&[]));
    let reference = stdout(&o);
    let t0 = Instant::now();
    let o = Job::spawn(4, &prog, CHAIN, &envs(&[("OMPCLUSTER_FT_REPLICAS", "3"), ("OMPCLUSTER_FT_VOTE", "1"), ("OMPCLUSTER_FT_INJECT", flips)])).wait(BOUND);
    assert!(!o.status.success(), "{}", describe(&o));
    assert!(t0.elapsed() < Duration::from_secs(60), "took {:?}\n{}", t0.elapsed(), describe(&o));
    let err = stderr(&o);
    assert!(err.contains("wrote different results and no majority agrees") && err.contains("ending the program rather than trusting any of them"), "{}", describe(&o));
    let out = stdout(&o);
    assert!(reference.starts_with(&out) && out.lines().count() >= 10, "printed something the failure-free run did not\n{}", describe(&o));
}

/// Regions that write one buffer at the same time, some without having written it before
/// (`concurrent_writers.rs`'s programs), with replicas and with voting: the right result,
/// no disagreement, and no hang. Replicas share the copies they only read with other
/// regions; a region that writes such a copy though it was not expected to runs again
/// instead of being recorded (a replica sharing the copy may be undone), and with voting a
/// replica that saw such a write has its ballot voided rather than losing a vote. (Sharing
/// without that, `late_writers 40 1 2 1`, k = 2, aborted in 1 run of 3: "no live copy of
/// its current version".) Before replicas' inputs
/// were started together, `late_writers 40 1 2 1` with k = 2 hung in 1 run of 2 (a replica
/// counted as running while the next one waited for a merge that waited for it).
#[test]
fn concurrent_writers_with_replicas_and_votes() {
    let cases: [(&str, &[&str]); 4] =
        [("late_writers.c", &["40", "1", "2", "1"]), ("late_writers.c", &["12", "100", "3", "1"]), ("shared_writers.c", &["64", "16", "3", "1"]), ("repro_disjoint_writes.c", &[])];
    let (mut shared, mut shared_reruns) = (0, 0);
    for (src, args) in cases {
        let prog = compile(src);
        for extra in [&[("OMPCLUSTER_FT_REPLICAS", "2")][..], &[("OMPCLUSTER_FT_REPLICAS", "2"), ("OMPCLUSTER_FT_VOTE", "1")], &[("OMPCLUSTER_FT_REPLICAS", "3"), ("OMPCLUSTER_FT_VOTE", "1")]] {
            for round in 0..2 {
                let what = format!("{src} {args:?} {extra:?} round {round}");
                let (o, r) = run_with_report(4, &prog, args, &envs(extra));
                assert!(passes(&o), "{what}: {}\n{}", counts(&r), describe(&o));
                assert!(r.replicas.disagreements.is_empty(), "{what}: {}", counts(&r));
                assert!(r.replicas.regions_replicated > 0, "{what}: {}", counts(&r));
                shared += r.replicas.shared_runs;
                shared_reruns += r.replicas.shared_reruns;
            }
        }
    }
    // Replicas shared copies with regions that then wrote them (`late_writers.c`), which
    // were run again rather than recorded.
    assert!(shared >= 1 && shared_reruns >= 1, "shared runs {shared}, runs again for writing a shared copy {shared_reruns}");
}

/// `OMPCLUSTER_FT_REPLICATE=auto` on a chain of in-place updates with buddy copies off: the
/// unsaved work behind the chain's buffer grows with each region until one is replicated
/// (its replica's copy saves the version), so `auto` replicates a share of the regions near
/// its budget, spends at most about that budget in replicas' kernel time, and a worker killed
/// after 60 regions costs a few re-runs (at most 15), not the 50 or more of k = 1 (checked in
/// `a_worker_killed_costs_no_rerun_of_replicated_regions`).
#[test]
fn auto_replicates_within_its_budget_where_unsaved_work_builds_up() {
    let auto = [NO_BUDDY, ("OMPCLUSTER_FT_REPLICAS", "2"), ("OMPCLUSTER_FT_REPLICATE", "auto"), ("OMPCLUSTER_FT_REPLICA_BUDGET", "30")];
    let (o, r, reference) = chain(&auto);
    let rep = &r.replicas;
    assert!(passes(&o) && stdout(&o) == reference, "{}", describe(&o));
    assert_eq!((rep.mode.as_str(), rep.budget_percent), ("auto", 30), "{}", counts(&r));
    // 120 regions, the kernel's first one unweighed: about 30% chosen, every chosen one
    // replicated (a chain leaves workers free).
    assert!((20..=50).contains(&rep.regions_replicated) && rep.passed_over >= 60, "{}", counts(&r));
    assert!(rep.replica_kernel_seconds <= 0.45 * rep.kernel_seconds, "replicas took more than the budget: {}", counts(&r));
    let kill = ("OMPCLUSTER_FT_INJECT", "kill:rank=1:after_tasks=60");
    let mut with_kill = auto.to_vec();
    with_kill.push(kill);
    let (o, r, _) = chain(&with_kill);
    assert!(passes(&o) && stdout(&o) == reference, "{}", describe(&o));
    assert_eq!(r.failures.iter().map(|f| f.rank).collect::<Vec<_>>(), vec![1], "{}", counts(&r));
    // Between replicated regions about 3 run unsaved; the next replica's input move lands on
    // the worker holding the last replica's copy, so a kill during that move reaches back
    // one replica more (9 re-runs seen, of 60 regions run).
    assert!(r.counts.tasks_reexecuted <= 15, "auto left more than a few regions' work unsaved: {}\n{}", counts(&r), describe(&o));
}

/// `auto` on the Cholesky example (kernels that compute, many regions in flight): its result,
/// some regions replicated and most passed over, replicas' kernel time within about the
/// budget, and the report naming the kernels chosen. Settings that make no sense are refused
/// at start.
#[test]
fn auto_on_cholesky_keeps_the_result_and_the_budget() {
    let exe = ompcluster_tests::cholesky_example();
    let args = ["1024", "128"];
    let result = |o: &Output| stdout(o).lines().any(|l| l.contains("result correct"));
    let auto = envs(&[("OMPCLUSTER_FT_REPLICAS", "2"), ("OMPCLUSTER_FT_REPLICATE", "auto"), ("OMPCLUSTER_FT_REPLICA_BUDGET", "20")]);
    let (o, r) = run_with_report(4, exe, &args, &auto);
    assert!(o.status.success() && result(&o), "{}", describe(&o));
    let rep = &r.replicas;
    assert!(rep.regions_replicated >= 1 && rep.passed_over > rep.regions_replicated, "{}", counts(&r));
    assert!(rep.replica_kernel_seconds <= 0.35 * rep.kernel_seconds, "replicas took more than the budget: {}", counts(&r));
    assert_eq!(rep.replicated_by_kernel.values().sum::<u64>(), rep.regions_replicated, "{}", counts(&r));
    for (vars, why) in [
        (vec![("OMPCLUSTER_FT_REPLICATE", "auto")], "set OMPCLUSTER_FT_REPLICAS to 2 or 3"),
        (vec![("OMPCLUSTER_FT_REPLICAS", "2"), ("OMPCLUSTER_FT_REPLICA_BUDGET", "10")], "applies to OMPCLUSTER_FT_REPLICATE=auto only"),
        (vec![("OMPCLUSTER_FT_REPLICAS", "2"), ("OMPCLUSTER_FT_REPLICATE", "some")], "expected `all`"),
    ] {
        let o = Job::spawn(3, exe, &args, &vars).wait(BOUND);
        assert!(!o.status.success() && stderr(&o).contains(why), "{vars:?}\n{}", describe(&o));
    }
}

/// A bit flipped into a region the kernel only reads (`ft_stencil.c`'s regions write their
/// block in place; the flip lands in the first region that is not image data) makes that
/// replica write a buffer its kernel was not expected to write: with voting its ballot is
/// compared all the same, so the flip is outvoted and its worker named, never taken unvoted.
/// If the flipped copy was shared with another region's kernel while the replica ran
/// (replicas share copies they only read), the change may be that region's write: the
/// ballot is voided (its copies are forgotten; the other replicas decide), and the worker is
/// named once every kernel that used the copy ended with nothing that may be a region's write
/// landed in it (`Buffer::suspects`; a voided run whose own region runs again counts as one,
/// so such a flip may name no one). Flips after 9, 17, 25, 33 regions and more, up to 8
/// runs, until a voided flip named its worker: every run right, only worker 3 named. Before
/// suspects, no voided flip named anyone (2 of 12 flips named in 2026-12-02's runs).
#[test]
fn a_flip_into_a_region_the_kernel_only_reads_is_outvoted_too() {
    let prog = compile("ft_stencil.c");
    let args = ["8", "4096", "8", "20000"];
    let (o, _) = run_with_report(4, &prog, &args, &envs(&[]));
    assert!(passes(&o), "{}", describe(&o));
    let reference = stdout(&o);
    let mut named_after_void = 0;
    for (run, after) in [9, 17, 25, 33, 13, 21, 29, 37].into_iter().enumerate() {
        if run >= 4 && named_after_void > 0 {
            break;
        }
        let flip = format!("flip:rank=3:after_tasks={after}");
        let vote = [("OMPCLUSTER_FT_REPLICAS", "3"), ("OMPCLUSTER_FT_VOTE", "1"), ("OMPCLUSTER_FT_INJECT", flip.as_str())];
        let (o, r) = run_with_report(4, &prog, &args, &envs(&vote));
        assert!(passes(&o) && stdout(&o) == reference, "{flip}: {}", describe(&o));
        assert_eq!(r.replicas.flips_injected, 1, "{flip}: {}", counts(&r));
        // Only worker 3 loses votes (a region that read the flipped copy there loses one too).
        let lost: Vec<String> = r.replicas.lost_by_rank.keys().cloned().collect();
        assert!(lost.is_empty() || lost == ["3"], "{flip}: {}", counts(&r));
        if r.replicas.ballots_voided == 0 {
            assert_eq!(r.replicas.unvoted, 0, "{flip}: a result was taken unvoted: {}", counts(&r));
            assert_eq!(lost, ["3"], "{flip}: {}", counts(&r));
            assert!(stderr(&o).contains("ompcluster: worker 3 lost a vote"), "{flip}: {}", describe(&o));
        } else {
            // At most one region per voided ballot is left with one answer.
            assert!(r.replicas.unvoted <= r.replicas.ballots_voided, "{flip}: {}", counts(&r));
            if stderr(&o).contains("which the region only reads and no region wrote while it ran") {
                assert_eq!(lost, ["3"], "{flip}: {}", counts(&r));
                named_after_void += 1;
            }
        }
    }
    assert!(named_after_void > 0, "no voided flip named its worker in 8 runs");
}

/// A kernel whose results differ from run to run (it reads the processor's clock): with
/// voting its replicas never agree, and the program ends with a message naming the kernel and
/// the setting that runs it unvoted; with that setting (copied from the message) the program
/// runs, its regions replicated and counted as not voted on.
#[test]
fn a_kernel_that_cannot_be_voted_on_is_named_and_can_be_skipped() {
    let prog = compile("clock_kernel.c");
    let vote = [("OMPCLUSTER_FT_REPLICAS", "3"), ("OMPCLUSTER_FT_VOTE", "1")];
    let o = Job::spawn(4, &prog, &["8"], &envs(&vote)).wait(BOUND);
    let err = stderr(&o);
    assert!(!o.status.success() && err.contains("no majority agrees"), "{}", describe(&o));
    let skip = err
        .split("OMPCLUSTER_FT_VOTE_SKIP=")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or_else(|| panic!("the message names no kernel to skip\n{}", describe(&o)));
    assert!(skip.ends_with(&format!("_l{}", 18)), "{skip}: the kernel at line 18 of clock_kernel.c");
    let mut with_skip = vote.to_vec();
    with_skip.push(("OMPCLUSTER_FT_VOTE_SKIP", skip));
    let (o, r) = run_with_report(4, &prog, &["8"], &envs(&with_skip));
    assert!(passes(&o), "{}", describe(&o));
    assert!(r.replicas.vote_skipped >= 1 && r.replicas.votes == 0 && r.replicas.disagreements.is_empty(), "{}", counts(&r));
    assert_eq!(r.replicas.vote_skipped, r.replicas.regions_replicated, "{}", counts(&r));
}

/// `device_new.cpp` (8 objects, 2 rounds): regions whose device code makes objects with
/// `new`, `malloc`, `calloc`, `realloc`, later used and freed by other regions.
const OBJECTS: &[&str] = &["8", "2"];

/// Replicas of a region whose device code allocates memory allocate in one range of the
/// head's arena, so the same calls give them the same pointers and their results can be
/// voted on: bits flipped into what such regions write are outvoted (k = 3 by majority,
/// k = 2 by a run again on three), never taken unvoted, and the program prints the right
/// result. The control (no voting) shows that the flips reach the output. Before, such
/// regions ran on one worker, unvoted, and the flips reached the output with voting on too.
#[test]
fn flips_into_regions_whose_device_code_allocates_are_outvoted() {
    let prog = compile("device_new.cpp");
    let flips = "flip:rank=2:after_tasks=12;flip:rank=3:after_tasks=25";
    let o = Job::spawn(4, &prog, OBJECTS, &envs(&[("OMPCLUSTER_FT_INJECT", flips)])).wait(BOUND);
    assert!(!passes(&o), "control: the flips did not reach the output of an unvoted run\n{}", describe(&o));
    for k in ["3", "2"] {
        let (o, r) = run_with_report(4, &prog, OBJECTS, &envs(&[("OMPCLUSTER_FT_REPLICAS", k), ("OMPCLUSTER_FT_VOTE", "1"), ("OMPCLUSTER_FT_INJECT", flips)]));
        let what = format!("k={k}: {}", counts(&r));
        assert!(passes(&o), "{what}\n{}", describe(&o));
        assert_eq!(r.replicas.unvoted, 0, "{what}");
        assert!(r.replicas.regions_replicated >= 41 && r.replicas.votes == r.replicas.regions_replicated, "{what}");
        assert_eq!(r.replicas.corrections, 2, "{what}");
        assert_eq!((r.replicas.lost_by_rank.get("2"), r.replicas.lost_by_rank.get("3")), (Some(&1), Some(&1)), "{what}");
        assert!(!stderr(&o).contains("allocated device memory outside"), "{what}\n{}", describe(&o));
    }
}

/// A worker killed among regions whose device code allocates (k = 2, voting: every region
/// has a replica): no region is run again, since each object a region made is held by its
/// replica too. The control (k = 1) shows that the kill costs re-runs.
#[test]
fn a_worker_killed_costs_no_rerun_of_regions_whose_device_code_allocates() {
    let prog = compile("device_new.cpp");
    let args = ["8", "4", "20000"];
    let kill = ("OMPCLUSTER_FT_INJECT", "kill:rank=1:after_tasks=30");
    let (o, r) = run_with_report(4, &prog, &args, &envs(&[NO_BUDDY, kill]));
    assert!(passes(&o), "k=1\n{}", describe(&o));
    assert!(r.counts.tasks_reexecuted >= 1, "k=1: the kill cost no re-run, so the run below proves nothing: {}\n{}", counts(&r), describe(&o));
    let (o, r) = run_with_report(4, &prog, &args, &envs(&[NO_BUDDY, kill, ("OMPCLUSTER_FT_REPLICAS", "2"), ("OMPCLUSTER_FT_VOTE", "1")]));
    let what = format!("k=2, voting, rank 1 killed after 30 regions: {}", counts(&r));
    assert!(passes(&o), "{what}\n{}", describe(&o));
    assert_eq!(r.failures.iter().map(|f| f.rank).collect::<Vec<_>>(), vec![1], "{what}");
    assert_eq!(r.counts.tasks_reexecuted, 0, "{what}\n{}", describe(&o));
    assert!(r.replicas.copies_kept > 0, "{what}");
}

/// `slow_replica.c`: 12 independent regions of 50 ms; the first replica run on rank 2
/// sleeps 4 s more there (a slow worker).
const SLOW: &[&str] = &["12", "50", "2", "4000"];

/// Without voting a region goes on with its first result: the program sees every region
/// done while rank 2's slow replica still runs (before, a launch waited for every replica and
/// the program only went on once it had ended). The replica is settled when it ends (here, as
/// the job ends: the end waits for it): it wrote what the result taken wrote, so its copy
/// became a holder. Then the same with rank 2 SIGKILLed while its replica runs, after its
/// region went on: the replica is
/// dropped, the job recovers from the loss of rank 2 with no region run again (every result
/// taken is held by a live worker), and the result is right.
#[test]
fn a_slow_replica_is_left_running_and_settled_when_it_ends() {
    let prog = compile("slow_replica.c");
    let dir = tempfile::tempdir_in(ompcluster_tests::work_dir()).unwrap();
    let mark = dir.path().join("mark").to_string_lossy().into_owned();
    let env = envs(&[("OMPCLUSTER_FT_REPLICAS", "2"), ("SLOW_MARK", &mark)]);
    let (o, r) = run_with_report(4, &prog, SLOW, &env);
    let what = counts(&r);
    assert!(passes(&o), "{what}\n{}", describe(&o));
    assert!(stdout(&o).contains("slow replica: still running when the program went on"), "{what}\n{}", describe(&o));
    assert!(Path::new(&format!("{mark}.done")).exists(), "the slow replica never ended\n{}", describe(&o));
    assert!(r.replicas.tails >= 1 && r.replicas.tails_kept >= 1, "{what}");
    assert!(r.failures.is_empty(), "{what}");

    // Rank 2 killed while its replica sleeps.
    std::fs::remove_file(&mark).unwrap();
    std::fs::remove_file(format!("{mark}.done")).unwrap();
    let path = dir.path().join("report.json");
    let p = path.to_string_lossy().into_owned();
    let mut all = env.clone();
    all.push(("OMPCLUSTER_REPORT", &p));
    let mut job = Job::spawn(4, &prog, SLOW, &all);
    let ranks = job.started_ranks(&prog, 4, Duration::from_secs(90));
    let t0 = Instant::now();
    while !Path::new(&mark).exists() && t0.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let started = Path::new(&mark).exists();
    // Long after the other replica's 50 ms: the region went on, rank 2's replica is a tail.
    std::thread::sleep(Duration::from_millis(400));
    let pid = ranks.iter().find(|(r, _)| *r == 2).map(|&(_, p)| p);
    // SAFETY: kill has no memory-safety preconditions; the pid is a rank of our job.
    let delivered = started && pid.is_some_and(|p| unsafe { libc::kill(p, libc::SIGKILL) } == 0);
    let o = job.wait(BOUND);
    assert!(delivered, "rank 2 was not killed while its replica ran (started: {started})\n{}", describe(&o));
    let r = Report::read(&path).unwrap_or_else(|e| panic!("{e}\n{}", describe(&o)));
    let what = format!("rank 2 killed while its replica ran: {}", counts(&r));
    assert!(passes(&o), "{what}\n{}", describe(&o));
    assert_eq!(r.failures.iter().map(|f| f.rank).collect::<Vec<_>>(), vec![2], "{what}");
    assert_eq!(r.recoveries.len(), 1, "{what}");
    // (Other regions' second replies may come after their first: tails too, kept.)
    assert!(r.replicas.tails > r.replicas.tails_kept, "{what}: the killed replica was kept, or was no tail");
    assert_eq!(r.counts.tasks_reexecuted, 0, "{what}: every region's result is held by a live worker");
    assert!(!Path::new(&format!("{mark}.done")).exists(), "{what}: the killed replica ended");
}

/// With voting on three replicas, two that agree decide the region: it goes on while rank 2's
/// slow third replica still runs, and that replica, settled when it ends, agrees and holds the
/// versions too. Then the slow replica's result is also corrupted (a bit flipped on rank 2):
/// the region was decided without it, the program's result is right, and when it ends it
/// loses its vote, named on stderr and in the report.
#[test]
fn with_voting_two_of_three_decide_and_the_third_is_left_running() {
    let prog = compile("slow_replica.c");
    let dir = tempfile::tempdir_in(ompcluster_tests::work_dir()).unwrap();
    let mark = dir.path().join("mark").to_string_lossy().into_owned();
    let voting = [("OMPCLUSTER_FT_REPLICAS", "3"), ("OMPCLUSTER_FT_VOTE", "1"), ("SLOW_MARK", &mark)];
    for flip in [false, true] {
        let _ = std::fs::remove_file(&mark);
        let _ = std::fs::remove_file(format!("{mark}.done"));
        let mut extra = voting.to_vec();
        if flip {
            extra.push(("OMPCLUSTER_FT_INJECT", "flip:rank=2:after_tasks=0"));
        }
        let (o, r) = run_with_report(4, &prog, SLOW, &envs(&extra));
        let what = format!("flip on rank 2: {flip}: {}", counts(&r));
        assert!(passes(&o), "{what}\n{}", describe(&o));
        assert!(stdout(&o).contains("slow replica: still running when the program went on"), "{what}\n{}", describe(&o));
        assert!(r.replicas.tails >= 1 && r.replicas.votes >= 1, "{what}");
        if flip {
            assert_eq!(r.replicas.lost_by_rank.get("2"), Some(&1), "{what}");
            assert!(stderr(&o).contains("ompcluster: worker 2 lost a vote on a region of kernel"), "{what}\n{}", describe(&o));
        } else {
            assert!(r.replicas.disagreements.is_empty() && r.replicas.tails_kept >= 1, "{what}");
        }
    }
}

/// Replicas of a parallel reduction over doubles agree (`fp_reduction.c`: each region sums
/// shares of 1e16, 1, -1e16 and 3 with `parallel for reduction(+:s)`). libomp adds the
/// shares of a team of at most four threads in the order the threads finish, so replicas of
/// these regions differed from run to run: voting named healthy workers as losers, retired
/// them, and ended the program ("no majority agrees"). With replicas every worker now has
/// libomp sum along its tree, in a fixed order. Then workers whose default team sizes differ
/// (an MPMD launch: two workers with `OMP_NUM_THREADS=3`, two with 1, as nodes with more and
/// fewer cores) run teams of the smallest, so that a reduction over the default team, or over
/// a `teams` construct's default league, sums alike on all of them; the head says so.
#[test]
fn replicas_of_a_parallel_reduction_agree() {
    let prog = compile("fp_reduction.c");
    for k in ["3", "2"] {
        let vote = [("OMPCLUSTER_FT_REPLICAS", k), ("OMPCLUSTER_FT_VOTE", "1")];
        let (o, r) = run_with_report(4, &prog, &["16"], &envs(&vote));
        assert!(passes(&o) && stdout(&o).contains("16 regions, 1 distinct sums"), "k={k}\n{}", describe(&o));
        assert!(r.replicas.votes == 16 && r.replicas.disagreements.is_empty() && r.replicas.retired.is_empty(), "k={k}: {}", counts(&r));
        assert_eq!(r.replicas.vote_skipped, 0, "k={k}: {}", counts(&r));
    }
    // Ranks 0 to 2 with 3 threads by default (the head and two workers), ranks 3 and 4 with 1.
    let dir = tempfile::tempdir_in(ompcluster_tests::work_dir()).expect("a temporary directory");
    let report = dir.path().join("report.json");
    let report_s = report.to_string_lossy().into_owned();
    let prog_s = prog.to_string_lossy().into_owned();
    let first = ["-x", "OMP_NUM_THREADS=3", "-np", "3", &prog_s, "8", "0", ":", "-x", "OMP_NUM_THREADS=1"];
    let options: Vec<String> = first.iter().map(|a| format!("--mpirun-arg={a}")).collect();
    let vote = [("OMPCLUSTER_FT_REPLICAS", "3"), ("OMPCLUSTER_FT_VOTE", "1"), ("OMPCLUSTER_REPORT", report_s.as_str())];
    let o = Job::spawn_with(2, &options, &prog, &["8", "0"], &envs(&vote)).wait(BOUND);
    let out = stdout(&o);
    assert!(passes(&o) && out.contains(" 8 regions, 1 distinct sums") && out.contains("8 teams regions, 1 distinct sums"), "{}", describe(&o));
    assert!(stderr(&o).contains("default team sizes differ (1 to 3 threads)"), "{}", describe(&o));
    let r = Report::read(&report).unwrap_or_else(|e| panic!("{e}\n{}", describe(&o)));
    assert_eq!(r.workers, 4, "{}", describe(&o));
    assert!(r.replicas.votes == 16 && r.replicas.disagreements.is_empty(), "{}", counts(&r));
}
