//! Resuming a job whose head died (`ompcluster-run --resume`), end to end. A job runs with
//! checkpoints on (every checkpoint also publishes the log of the offloading calls, under
//! `<dir>/resume/`); its head (rank 0) is killed from outside with SIGKILL once checkpoint 2 is
//! published, and the job must then end, non-zero, within [`DEATH_BOUND`], leaving no process
//! behind. The same program with the same arguments and checkpoint directory is then run again
//! with `--resume`: it runs from `main`, skips the target regions the log covers, switches to
//! running live at the first one it does not, and must print exactly what a failure-free run
//! prints (the examples print their time: that number is masked) and exit 0. The run report's
//! `"resume"` object (null in a run without `--resume`) says what was skipped and why it went
//! live. A log that is damaged or missing, or arguments that change what the program does, must
//! never make a resumed job skip what it should run. Every run of every test is checked.
//! The checkpoints go through the store `OMPCLUSTER_TEST_STORE` names (the embedded store by
//! default; `scripts/test-veloc.sh` runs these tests again with VeloC in sync and async mode).

use ompcluster_tests::{cholesky_example, compile, describe, env_refs, job_members, matmul_example, stderr, stdout, work_dir, Job};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// 1 head + 3 workers.
const NP: u32 = 4;
/// Checkpoint interval, seconds.
const INTERVAL: &str = "0.15";
/// The head is killed once a checkpoint numbered at least this is published.
const KILL_AT: u64 = 2;
/// A run that takes longer than this has hung.
const BOUND: Duration = Duration::from_secs(120);
/// A job whose head was killed must end within this (the workers' failure detector declares
/// the head dead after 3 s by default).
const DEATH_BOUND: Duration = Duration::from_secs(30);
/// Once the launcher has ended, the job's other processes get this long to be gone.
const LEFTOVER_GRACE: Duration = Duration::from_secs(5);
/// Longest wait for checkpoint [`KILL_AT`].
const CHECKPOINT_WAIT: Duration = Duration::from_secs(60);

// Arguments: each run takes a few seconds on 3 workers, and checkpoint 2 (at about 0.6-1 s of a
// 0.3 s interval) lands well before the end. Run alone under the stock x86_64 plugin on this
// 2-core machine: matmul 1536/128 computes in 0.5-0.8 s then checks on the host for about
// 1.2 s; cholesky 2048/128 computes in 0.6 s then checks for about 2.3 s (our device takes
// about twice the stock plugin's time: BENCHMARKS.md). A kill during the host's check is as
// good as one during the regions: the program has not printed yet. The two test programs sleep
// in their kernels, so that their length hardly depends on the machine's speed.

/// matmul N BS: 1,728 regions of 128 x 128 block products.
const MATMUL: &[&str] = &["1536", "128"];
/// The same with the VeloC store: 4,096 regions. VeloC writes each checkpoint twice (to
/// scratch, then to the persistent directory), so its first one, which holds both input
/// matrices, took 0.8 s to publish here against 0.13 s for the embedded store (and 0.1-0.2 s
/// for the next ones against 0.02-0.1 s), and a run of 1536/128 under load published only
/// checkpoint 1 before its regions were done.
const MATMUL_VELOC: &[&str] = &["2048", "128"];
/// cholesky N TS: 816 regions on 128 x 128 tiles.
const CHOLESKY: &[&str] = &["2048", "128"];
/// resume_stencil STEPS DELAY_US SEED: 8,000 regions of at least 1 ms on 4 blocks of 64 KiB.
const STENCIL: &[&str] = &["2000", "1000", "1"];
/// resume_residual MODE DELAY_US: 458 iterations of a region of at least 6 ms each.
const RESIDUAL_MAP: &[&str] = &["map", "6000"];
const RESIDUAL_UPDATE: &[&str] = &["update", "6000"];
/// std_streams REGIONS MS: regions that print with fprintf to stdout and stderr (the head's
/// streams are kernel arguments), 60 of 30 ms.
const STREAMS: &[&str] = &["60", "30"];

/// A program under test.
struct Case {
    name: &'static str,
    prog: PathBuf,
    args: &'static [&'static str],
    /// What the last line of a complete and right run contains.
    done: &'static str,
    /// What of stdout must be the same in every run: the examples print their time.
    mask: fn(&str) -> String,
}

fn exact(s: &str) -> String {
    s.to_owned()
}

/// The examples' timing (`... tasks=1728: 1.234 s, max error 0: ...`) replaced by `<t>`.
fn mask_times(s: &str) -> String {
    s.lines()
        .map(|line| {
            let words: Vec<&str> = line.split(' ').collect();
            let masked: Vec<&str> = words
                .iter()
                .enumerate()
                .map(|(i, w)| {
                    let unit_follows = words.get(i + 1).is_some_and(|n| *n == "s" || n.starts_with("s,"));
                    if unit_follows && w.parse::<f64>().is_ok() {
                        "<t>"
                    } else {
                        w
                    }
                })
                .collect();
            masked.join(" ") + "\n"
        })
        .collect()
}

fn matmul() -> Case {
    let args = if ompcluster_tests::test_store() == ompcluster_tests::TestStore::Embedded { MATMUL } else { MATMUL_VELOC };
    Case { name: "matmul", prog: matmul_example().to_path_buf(), args, done: "result correct", mask: mask_times }
}

fn cholesky() -> Case {
    Case { name: "cholesky", prog: cholesky_example().to_path_buf(), args: CHOLESKY, done: "result correct", mask: mask_times }
}

fn stencil() -> Case {
    Case { name: "resume_stencil", prog: compile("resume_stencil.c"), args: STENCIL, done: "resume_stencil: PASS", mask: exact }
}

fn streams() -> Case {
    Case { name: "std_streams", prog: compile("std_streams.c"), args: STREAMS, done: "std_streams: PASS", mask: exact }
}

fn residual(args: &'static [&'static str]) -> Case {
    Case { name: "resume_residual", prog: compile("resume_residual.c"), args, done: "resume_residual: PASS", mask: exact }
}

/// Checkpoints into `dir` every [`INTERVAL`] through the store under test, on.
fn checkpointing(dir: &Path) -> Vec<(String, String)> {
    let mut e = ompcluster_tests::ckpt_env(dir, INTERVAL);
    e.push(("OMPCLUSTER_CP_ENABLE".into(), "1".into()));
    e
}

/// A directory for one test's checkpoints (on disk, in the tests' work directory).
fn scratch_dir() -> tempfile::TempDir {
    tempfile::tempdir_in(work_dir()).expect("a temporary directory")
}

/// Live (not zombie) processes of the job marked `marker`.
fn live(marker: &str) -> Vec<i32> {
    job_members(marker)
        .into_iter()
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .map(|s| s.rfind(')').is_some_and(|i| !matches!(s.as_bytes().get(i + 2), Some(b'Z' | b'X'))))
                .unwrap_or(false)
        })
        .collect()
}

fn describe_pid(p: i32) -> String {
    let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
    let rank = ompcluster_tests::proc_env(p, "OMPI_COMM_WORLD_RANK").map(|r| format!(", rank {r}")).unwrap_or_default();
    format!("{p} ({}{rank})", comm.trim())
}

/// Wait for `job` at most `bound` (past it, the job has hung: the panic shows where its
/// processes were and what it printed), give its other processes [`LEFTOVER_GRACE`] to be gone,
/// assert that none is left, and return what it printed.
fn end_of(mut job: Job, bound: Duration, what: &str) -> Output {
    let marker = job.marker().to_owned();
    if job.wait_timeout(bound).is_none() {
        // Panics "timed out", with the processes' stacks and the output, unless it just ended.
        let o = job.wait(Duration::from_millis(1));
        panic!("{what}: still running after {bound:?}\n{}", describe(&o));
    }
    let ended = Instant::now();
    let mut left = live(&marker);
    while !left.is_empty() && ended.elapsed() < LEFTOVER_GRACE {
        std::thread::sleep(Duration::from_millis(50));
        left = live(&marker);
    }
    let named: Vec<String> = left.iter().map(|&p| describe_pid(p)).collect();
    // Kills whatever is left.
    let o = job.wait(Duration::from_secs(10));
    assert!(
        named.is_empty(),
        "{what}: processes of the job still running {LEFTOVER_GRACE:?} after the launcher ended: {named:?}\n{}",
        describe(&o)
    );
    o
}

/// The checkpoints published in `ck`: the k of every `manifests/manifest-<k>.json`, sorted.
fn manifests(ck: &Path) -> Vec<u64> {
    let mut v: Vec<u64> = std::fs::read_dir(ck.join("manifests"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.strip_prefix("manifest-")?.strip_suffix(".json")?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort_unstable();
    v
}

/// Regular files under `dir`, recursively (none if it does not exist).
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() => todo.push(p),
                Ok(t) if t.is_file() => out.push(p),
                _ => {}
            }
        }
    }
    out.sort();
    out
}

/// Run `case.prog args` (with `--resume` if `resume`) with a report; returns what it printed
/// and the report. No process of it may outlive it.
fn run_report(case: &Case, args: &[&str], envs: &[(String, String)], resume: bool, what: &str) -> (Output, Value) {
    let dir = scratch_dir();
    let path = dir.path().join("report.json");
    let path_s = path.display().to_string();
    let mut e = env_refs(envs);
    e.push(("OMPCLUSTER_REPORT", &path_s));
    let job = if resume {
        Job::spawn_with(NP, &["--resume".to_string()], &case.prog, args, &e)
    } else {
        Job::spawn(NP, &case.prog, args, &e)
    };
    let o = end_of(job, BOUND, what);
    let report = std::fs::read_to_string(&path)
        .map_err(|e| e.to_string())
        .and_then(|s| serde_json::from_str::<Value>(&s).map_err(|e| format!("{e}: {s}")))
        .unwrap_or_else(|e| panic!("{what}: no readable report ({e})\n{}", describe(&o)));
    (o, report)
}

/// A failure-free run of `case` with `args` and `envs`, not resumed: exit 0, a complete and
/// right output, `"resume": null` in its report. Returns its stdout and its report.
fn fresh(case: &Case, args: &[&str], envs: &[(String, String)], what: &str) -> (String, Value) {
    let what = format!("{} {args:?}, {what}", case.name);
    let (o, r) = run_report(case, args, envs, false, &what);
    assert!(o.status.success() && stdout(&o).contains(case.done), "{what}: expected exit 0 and {:?}\n{}", case.done, describe(&o));
    assert_eq!(r.get("resume"), Some(&Value::Null), "{what}: a run without --resume must report \"resume\": null: {r}\n{}", describe(&o));
    (stdout(&o), r)
}

/// Start `case` with `args` and checkpoints into `ck`; once checkpoint [`KILL_AT`] (or a later
/// one) is published, SIGKILL its head (rank 0) and check that the job ends within
/// [`DEATH_BOUND`], non-zero, before the program finished, leaving no process, and that the
/// checkpoints published a log under `ck/resume`. Returns the newest checkpoint published
/// before the kill.
fn kill_head(case: &Case, args: &[&str], ck: &Path) -> u64 {
    match kill_head_when(case, args, ck, Kill::AfterCheckpoint(KILL_AT)) {
        Ok(seen) => seen.expect("a checkpoint was published"),
        Err(ran) => panic!("{} {args:?}: the job ended {ran:?} after its start, before checkpoint {KILL_AT} was published: make the run longer", case.name),
    }
}

/// When [`kill_head_when`] kills the head.
#[derive(Debug, Clone, Copy)]
enum Kill {
    /// Once this checkpoint (or a later one) is published.
    AfterCheckpoint(u64),
    /// This long after the head's runtime started (it handles SIGTERM from then on).
    AfterStart(Duration),
}

/// [`kill_head`] at the moment `when` says; the newest checkpoint published before the kill,
/// if any. Err(how long the job ran) if it ended, right, before that moment came, or had
/// printed its result by then (a run faster than the one the moment was chosen from).
fn kill_head_when(case: &Case, args: &[&str], ck: &Path, when: Kill) -> Result<Option<u64>, Duration> {
    let what = format!("{} {args:?} with checkpoints, head killed {when:?}", case.name);
    let envs = checkpointing(ck);
    let mut job = Job::spawn(NP, &case.prog, args, &env_refs(&envs));
    let t0 = Instant::now();
    let head = |job: &mut Job| -> Option<i32> {
        let ranks = job.ranks(&case.prog);
        ranks.iter().find(|(rank, _)| *rank == 0).map(|&(_, pid)| pid)
    };
    // The job ended by itself before its head was killed: it must have ended right.
    let ended_early = |job: Job| -> Duration {
        let ran = t0.elapsed();
        let o = end_of(job, BOUND, &what);
        assert!(o.status.success() && stdout(&o).contains(case.done), "{what}: the job ended before its head was killed, and not right\n{}", describe(&o));
        ran
    };
    loop {
        let due = match when {
            Kill::AfterCheckpoint(k) => manifests(ck).last().is_some_and(|&m| m >= k),
            Kill::AfterStart(d) => head(&mut job).is_some_and(handles_sigterm) && {
                std::thread::sleep(d);
                true
            },
        };
        if due {
            break;
        }
        if job.wait_timeout(Duration::ZERO).is_some() {
            return Err(ended_early(job));
        }
        // (Dropping the job on the panic kills it.)
        assert!(t0.elapsed() < CHECKPOINT_WAIT, "{what}: not due after {CHECKPOINT_WAIT:?} (published: {:?})", manifests(ck));
        std::thread::sleep(Duration::from_millis(5));
    }
    let found = Instant::now();
    let head = loop {
        if let Some(pid) = head(&mut job) {
            break pid;
        }
        if job.wait_timeout(Duration::ZERO).is_some() {
            return Err(ended_early(job));
        }
        assert!(found.elapsed() < Duration::from_secs(10), "{what}: no process of rank 0 among the job's");
        std::thread::sleep(Duration::from_millis(10));
    };
    let seen = manifests(ck).last().copied();
    // SAFETY: kill has no memory-safety preconditions; the pid is rank 0 of this test's job.
    let sent = unsafe { libc::kill(head, libc::SIGKILL) };
    assert_eq!(sent, 0, "{what}: cannot SIGKILL the head (pid {head}): {}", std::io::Error::last_os_error());
    let killed_at = t0.elapsed();
    let o = end_of(job, DEATH_BOUND, &format!("{what} (the head, pid {head}, was killed {killed_at:?} after the start)"));
    eprintln!("{what}: head (pid {head}) killed {killed_at:?} after the start, checkpoint {seen:?} published; the job ended with {}", o.status);
    assert!(!o.status.success(), "{what}: the job succeeded although its head was killed\n{}", describe(&o));
    if stdout(&o).contains(case.done) {
        // Killed as it ended, its result printed: too late for a resume to show anything.
        return Err(killed_at);
    }
    if seen.is_some() {
        let log = files_under(&ck.join("resume"));
        assert!(!log.is_empty(), "{what}: checkpoints {:?} were published but no log under {}\n{}", manifests(ck), ck.join("resume").display(), describe(&o));
    }
    Ok(seen)
}

/// A `--resume` run of `case` with `args` against the checkpoint directory `ck`: exit 0, the
/// stdout of a fresh run (`expected`, masked as the case says), a `"resume"` object in the
/// report with the documented fields. Returns what it printed, that object and the report.
fn resume(case: &Case, args: &[&str], ck: &Path, expected: &str, what: &str) -> (Output, Value, Value) {
    let what = format!("{} {args:?}, --resume {what}", case.name);
    let (o, r) = run_report(case, args, &checkpointing(ck), true, &what);
    assert!(o.status.success(), "{what}: the resumed job failed\n{}", describe(&o));
    assert!(
        (case.mask)(&stdout(&o)) == (case.mask)(expected),
        "{what}: the resumed job printed something else than a fresh run\n--- a fresh run printed ---\n{expected}\n{}",
        describe(&o)
    );
    let res = r.get("resume").cloned().unwrap_or(Value::Null);
    assert!(res.is_object(), "{what}: the report of a resumed job has no \"resume\" object: {r}\n{}", describe(&o));
    let typed = (res["checkpoint"].is_u64() || res["checkpoint"].is_null())
        && res["regions_skipped"].is_u64()
        && (res["switched_live_at_region"].is_u64() || res["switched_live_at_region"].is_null())
        && res["reason"].is_string();
    assert!(
        typed && res.get("checkpoint").is_some() && res.get("switched_live_at_region").is_some(),
        "{what}: \"resume\" must have checkpoint (number or null), regions_skipped (number), switched_live_at_region (number or null) and reason (string): {res}\n{}",
        describe(&o)
    );
    eprintln!("{what}: resume {res}");
    (o, res, r)
}

/// The number in `ompcluster: resuming from checkpoint K (...)`, if stderr has that line.
fn resumed_from(err: &str) -> Option<u64> {
    let rest = err.lines().find_map(|l| l.split_once("ompcluster: resuming from checkpoint ").map(|(_, r)| r))?;
    rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

/// A resumed run really resumed: it said from which checkpoint (the one in the report, and at
/// least `seen`, the newest published before the head died), it skipped regions, and if it
/// switched to live it said so.
fn assert_resumed(what: &str, o: &Output, res: &Value, seen: Option<u64>) {
    let err = stderr(o);
    let said = resumed_from(&err).unwrap_or_else(|| panic!("{what}: no \"ompcluster: resuming from checkpoint K\" line on stderr: {res}\n{}", describe(o)));
    let k = res["checkpoint"].as_u64().unwrap_or_else(|| panic!("{what}: resumed, but the report names no checkpoint: {res}\n{}", describe(o)));
    assert_eq!(said, k, "{what}: stderr says checkpoint {said}, the report {k}\n{}", describe(o));
    if let Some(seen) = seen {
        assert!(k >= seen, "{what}: resumed from checkpoint {k}, older than checkpoint {seen}, published before the head died: {res}\n{}", describe(o));
    }
    let skipped = res["regions_skipped"].as_u64().unwrap_or(0);
    assert!(skipped > 0, "{what}: no region was skipped: {res}\n{}", describe(o));
    if res["switched_live_at_region"].is_u64() {
        assert!(
            err.contains("ompcluster: resume: live from region"),
            "{what}: the report says the job switched to live, stderr does not: {res}\n{}",
            describe(o)
        );
    }
}

/// A `--resume` run that had nothing it could trust ran from the start, and said why.
fn assert_from_start(what: &str, o: &Output, res: &Value) {
    let err = stderr(o);
    assert!(
        err.lines().any(|l| l.trim_start().starts_with("ompcluster: resume:") && l.contains("from the start")),
        "{what}: no line \"ompcluster: resume: <why>; ... from the start\" on stderr: {res}\n{}",
        describe(o)
    );
    assert!(resumed_from(&err).is_none(), "{what}: it says it resumed from a checkpoint: {res}\n{}", describe(o));
    assert!(res["checkpoint"].is_null(), "{what}: nothing could be resumed, yet the report names a checkpoint: {res}\n{}", describe(o));
    assert_eq!(res["regions_skipped"].as_u64(), Some(0), "{what}: regions were skipped: {res}\n{}", describe(o));
    assert!(res["reason"].as_str().is_some_and(|s| !s.trim().is_empty()), "{what}: the report does not say why: {res}\n{}", describe(o));
}

/// The failure-free run, a run whose head is killed after checkpoint 2, and its resumption:
/// the right output, regions skipped, fewer regions run than the failure-free run. Returns the
/// failure-free stdout.
fn kill_and_resume(case: &Case) -> String {
    let (expected, fresh_report) = fresh(case, case.args, &[], "failure-free, no checkpoints");
    let dir = scratch_dir();
    let ck = dir.path().join("ckpt");
    let seen = kill_head(case, case.args, &ck);
    let (o, res, r) = resume(case, case.args, &ck, &expected, "after the head was killed");
    let what = format!("{} {:?}, --resume after the head was killed", case.name, case.args);
    assert_resumed(&what, &o, &res, Some(seen));
    // Skipped regions are not run.
    let fresh_tasks = fresh_report["tasks_executed"].as_u64().expect("tasks_executed in the report");
    let tasks = r["tasks_executed"].as_u64().expect("tasks_executed in the report");
    assert!(
        tasks < fresh_tasks,
        "{what}: the resumed job ran {tasks} regions, a failure-free run {fresh_tasks}, although it skipped some: {res}\n{}",
        describe(&o)
    );
    expected
}

/// Copy of `ck` (`cp -a`), to put back with [`restore`]: each resumed job writes into `ck`.
fn snapshot(ck: &Path) -> PathBuf {
    let copy = ck.with_extension("snapshot");
    let o = Command::new("cp").arg("-a").arg(ck).arg(&copy).output().expect("run cp");
    assert!(o.status.success(), "cp -a {} {}: {}", ck.display(), copy.display(), describe(&o));
    copy
}

/// Put `ck` back as [`snapshot`] copied it, at the same path.
fn restore(copy: &Path, ck: &Path) {
    std::fs::remove_dir_all(ck).unwrap_or_else(|e| panic!("remove {}: {e}", ck.display()));
    let o = Command::new("cp").arg("-a").arg(copy).arg(ck).output().expect("run cp");
    assert!(o.status.success(), "cp -a {} {}: {}", copy.display(), ck.display(), describe(&o));
}

/// Change bytes in the middle of every file under `ck/resume`: near the middle, the first
/// ASCII digit within 64 bytes becomes another digit (a damaged number that still parses, the
/// kind of damage a format without checksums would not see), else the middle byte has a bit
/// flipped. Returns what was changed.
fn damage_log(ck: &Path) -> Vec<String> {
    let mut changed = Vec::new();
    for f in files_under(&ck.join("resume")) {
        let mut data = std::fs::read(&f).unwrap_or_else(|e| panic!("read {}: {e}", f.display()));
        if data.is_empty() {
            continue;
        }
        let mid = data.len() / 2;
        let end = (mid + 64).min(data.len());
        let at = (mid..end).find(|&i| data[i].is_ascii_digit());
        let (i, old) = match at {
            Some(i) => {
                let old = data[i];
                data[i] = b'0' + (old - b'0' + 1) % 10;
                (i, old)
            }
            None => {
                let old = data[mid];
                data[mid] ^= 0x01;
                (mid, old)
            }
        };
        std::fs::write(&f, &data).unwrap_or_else(|e| panic!("write {}: {e}", f.display()));
        changed.push(format!("{} byte {i} of {}: {old:#04x} -> {:#04x}", f.display(), data.len(), data[i]));
    }
    changed
}

/// The examples, their head killed after checkpoint 2, resumed: the failure-free output, regions
/// skipped.
#[test]
fn a_job_whose_head_is_killed_resumes_to_the_failure_free_output() {
    for case in [matmul(), cholesky()] {
        kill_and_resume(&case);
    }
}

/// Blocks that stay on the device from the first region to the end (their only copies are on
/// the workers, and the head that knew where they were died): the resumed job takes them from
/// the checkpoint.
#[test]
fn a_stencil_kept_on_the_device_resumes() {
    kill_and_resume(&stencil());
}

/// The host reads a residual back after every region and decides from it when to stop: the
/// regions a resumed job skips must give it the same residuals (or it stops elsewhere, and the
/// output differs). The residual comes back by the region's own `map(from:)` and by a
/// `target update from`; both print the same.
#[test]
fn a_residual_read_back_every_iteration_decides_when_to_stop() {
    let by_map = kill_and_resume(&residual(RESIDUAL_MAP));
    let by_update = kill_and_resume(&residual(RESIDUAL_UPDATE));
    assert_eq!(by_map, by_update, "resume_residual prints the same whichever way the residual comes back");
}

/// The head SIGKILLed at moments that differ from run to run, from right after its runtime
/// started (before any checkpoint) to late in the run: the resumed job prints the failure-free
/// output whatever the moment; it resumes from the newest checkpoint published before the
/// kill (or later) and runs fewer regions than a fresh run when the checkpoint held any, and
/// runs from the start, saying why, when there was none.
#[test]
fn the_head_killed_at_random_moments_resumes_right() {
    let case = stencil();
    let (expected, fresh_report) = fresh(&case, case.args, &[], "failure-free, no checkpoints");
    let fresh_tasks = fresh_report["tasks_executed"].as_u64().expect("tasks_executed in the report");
    // The program's run from its runtime's start to its end (about 3 s here): one moment in
    // each of [3%, 23%), [28%, 48%) and [53%, 73%) of it, placed at random. The shorter of a
    // run without and one with checkpoints (as the killed jobs run): on a loaded machine the
    // run without them once took longer than the checkpointed job, which ended before its
    // kill moment.
    let ck0 = scratch_dir();
    let (with_ckpt, ckpt_report) = fresh(&case, case.args, &checkpointing(&ck0.path().join("ckpt")), "failure-free, with checkpoints");
    assert_eq!(with_ckpt, expected, "{}: checkpoints changed the output", case.name);
    let wall = |r: &Value| r["wall_seconds"].as_f64().expect("wall_seconds in the report");
    // Runs here vary by a factor of two and more from one to the next (5 to 12 s with
    // checkpoints on 2026-12-04): a job that ends, right, before its moment came is checked
    // and the trial made again with the moment placed in the shorter run it saw.
    let mut run = wall(&fresh_report).min(wall(&ckpt_report));
    let seed = ompcluster_tests::test_seed("the_head_killed_at_random_moments_resumes_right");
    for i in 0..3u64 {
        let at = 0.03 + 0.25 * i as f64 + 0.2 * ((seed + i * 337) % 1000) as f64 / 1000.0;
        let mut tries = 0;
        let (after, dir, seen) = loop {
            let after = Duration::from_secs_f64(run * at);
            let dir = scratch_dir();
            match kill_head_when(&case, case.args, &dir.path().join("ckpt"), Kill::AfterStart(after)) {
                Ok(seen) => break (after, dir, seen),
                Err(ran) => {
                    tries += 1;
                    assert!(tries < 3, "{}: the job ended before its head was killed {tries} times (the last {ran:?} after its start, the moment {after:?} after its runtime started): make the run longer", case.name);
                    run = run.min(ran.as_secs_f64());
                }
            }
        };
        let ck = dir.path().join("ckpt");
        let what = format!("{} {:?}, head killed {after:?} after its runtime started (checkpoint {seen:?} published)", case.name, case.args);
        let (o, res, r) = resume(&case, case.args, &ck, &expected, &what);
        let tasks = r["tasks_executed"].as_u64().expect("tasks_executed in the report");
        let done = res["first_job_regions"].as_u64().unwrap_or(0);
        if res["checkpoint"].is_null() {
            assert!(seen.is_none(), "{what}: checkpoint {seen:?} was published, but the job did not resume from it: {res}\n{}", describe(&o));
            assert_from_start(&what, &o, &res);
        } else if done > 0 {
            assert_resumed(&what, &o, &res, seen);
            assert!(tasks < fresh_tasks, "{what}: the resumed job ran {tasks} regions, a fresh run {fresh_tasks}: {res}\n{}", describe(&o));
        } else {
            assert_eq!(res["regions_skipped"].as_u64(), Some(0), "{what}: the checkpoint held no region, yet regions were skipped: {res}\n{}", describe(&o));
        }
    }
}

/// A resumed job run with other arguments than the first: its output is that of a fresh run
/// with those arguments. Another seed changes the data the first mapping sends, so nothing the
/// log holds applies: no region is skipped. Fewer or more steps keep the first steps the same
/// (the log may serve them), and the output must still be right; the job says where it went
/// live.
#[test]
fn a_resume_with_another_argument_runs_live_and_is_right() {
    let case = stencil();
    // (what, arguments, nothing may be skipped)
    let variants: [(&str, &[&str], bool); 3] = [
        ("another seed", &["2000", "1000", "2"], true),
        ("fewer steps", &["100", "1000", "1"], false),
        ("more steps", &["2600", "1000", "1"], false),
    ];
    let expected: Vec<String> = variants.iter().map(|(what, args, _)| fresh(&case, args, &[], &format!("failure-free, {what}")).0).collect();
    let dir = scratch_dir();
    let ck = dir.path().join("ckpt");
    let seen = kill_head(&case, case.args, &ck);
    let copy = snapshot(&ck);
    for ((what, args, nothing_applies), expected) in variants.iter().zip(&expected) {
        restore(&copy, &ck);
        let label = format!("with {what} than the killed job's {:?} (killed after checkpoint {seen})", case.args);
        let (o, res, _) = resume(&case, args, &ck, expected, &label);
        let label = format!("{} {args:?}, --resume {label}", case.name);
        assert!(stderr(&o).contains("ompcluster: resume:"), "{label}: no \"ompcluster: resume:\" line on stderr: {res}\n{}", describe(&o));
        if *nothing_applies {
            assert_eq!(res["regions_skipped"].as_u64(), Some(0), "{label}: regions were skipped: {res}\n{}", describe(&o));
            assert!(
                matches!(res["switched_live_at_region"].as_u64(), None | Some(0)),
                "{label}: switched to live after region 0: {res}\n{}",
                describe(&o)
            );
        }
    }
}

/// A log that was damaged (bytes changed in the middle of every file of it) or deleted, and a
/// checkpoint directory with nothing in it (empty, or not there at all): the resumed job trusts
/// nothing, runs from the start, says why, and prints the right output.
#[test]
fn a_damaged_or_missing_log_is_never_trusted() {
    let case = stencil();
    let (expected, _) = fresh(&case, case.args, &[], "failure-free, no checkpoints");
    let dir = scratch_dir();
    let ck = dir.path().join("ckpt");
    let seen = kill_head(&case, case.args, &ck);
    let copy = snapshot(&ck);

    let damaged = damage_log(&ck);
    assert!(!damaged.is_empty(), "no file to damage under {}", ck.join("resume").display());
    let what = format!("a log damaged after checkpoint {seen} ({})", damaged.join("; "));
    let before = manifests(&ck).last().copied();
    let (o, res, _) = resume(&case, case.args, &ck, &expected, &what);
    assert_from_start(&what, &o, &res);
    // Its own checkpoints come after the first job's, and a resume uses them.
    let after = manifests(&ck).last().copied();
    assert!(after > before, "{what}: the job run from the start published no checkpoint after the first job's {before:?}: {:?}", manifests(&ck));
    let (o, res, _) = resume(&case, case.args, &ck, &expected, &format!("again, after the run from the start ({what})"));
    assert_resumed(&format!("{what}, then resumed again"), &o, &res, after);

    restore(&copy, &ck);
    std::fs::remove_dir_all(ck.join("resume")).expect("remove the log");
    let what = format!("the log of checkpoint {seen} deleted ({} removed)", ck.join("resume").display());
    let (o, res, _) = resume(&case, case.args, &ck, &expected, &what);
    assert_from_start(&what, &o, &res);

    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let what = "an empty checkpoint directory";
    let (o, res, _) = resume(&case, case.args, &empty, &expected, what);
    assert_from_start(what, &o, &res);

    let missing = dir.path().join("missing");
    let what = "a checkpoint directory that does not exist";
    let (o, res, _) = resume(&case, case.args, &missing, &expected, what);
    assert_from_start(what, &o, &res);
}

/// A job that ran to the end with checkpoints on, resumed: the same output, and every region
/// up to its last checkpoint skipped (at least half of them, for runs of a few seconds with a
/// checkpoint every 0.3 s). Also regions that name `stdout` and `stderr`: their arguments are
/// the head's streams, whose addresses differ from job to job, and they are skipped all the same.
#[test]
fn a_completed_job_resumed_skips_everything_it_can() {
    for case in [stencil(), residual(RESIDUAL_UPDATE), streams()] {
        let (expected, fresh_report) = fresh(&case, case.args, &[], "failure-free, no checkpoints");
        let dir = scratch_dir();
        let ck = dir.path().join("ckpt");
        let (out, _) = fresh(&case, case.args, &checkpointing(&ck), "with checkpoints, to the end");
        let what = format!("{} {:?}, with checkpoints, to the end", case.name, case.args);
        assert_eq!(out, expected, "{what}: checkpoints changed the output");
        assert!(!manifests(&ck).is_empty(), "{what}: no checkpoint published");
        assert!(!files_under(&ck.join("resume")).is_empty(), "{what}: checkpoints {:?} published, but no log", manifests(&ck));

        let last = manifests(&ck).last().copied();
        let (o, res, _) = resume(&case, case.args, &ck, &expected, "after a complete run");
        let what = format!("{} {:?}, --resume after a complete run", case.name, case.args);
        // From the newest checkpoint.
        assert_resumed(&what, &o, &res, last);
        let regions = fresh_report["tasks_executed"].as_u64().expect("tasks_executed in the report");
        let skipped = res["regions_skipped"].as_u64().unwrap_or(0);
        assert!(skipped * 2 >= regions, "{what}: skipped {skipped} of {regions} regions: {res}\n{}", describe(&o));
    }
}

/// Workers killed while a resumed job runs: while the workers read the checkpointed versions
/// it needs (`during=restore`), and after its first region run live. Each is recovered
/// from as usual, and the output is the failure-free one.
///
/// Killed while the workers read the checkpoint, before any region ran live, the worker
/// lost only versions the checkpoint holds, and recovery re-runs nothing. That holds when the
/// first job's regions up to its checkpoint ended in program order. The stencil's `nowait`
/// regions may not: the first job may have run region k+1 before region k when its
/// checkpoint was taken, so that the resumed job runs k live (the log does not hold it) with
/// the checkpoint holding a later version of a neighbour than k reads, which is rebuilt by
/// re-running logged regions (seen once in 12 resumed jobs with the VeloC store: 40 re-run).
/// Such a run is checked for the rest, and the case is made again (at most 4 first jobs)
/// until a run where the first live region comes after the whole log shows the property.
#[test]
fn a_worker_killed_while_resuming_is_recovered() {
    let case = stencil();
    let (expected, _) = fresh(&case, case.args, &[], "failure-free, no checkpoints");
    let mut first_jobs = 0;
    while !killed_while_resuming(&case, &expected, "while the workers read the checkpoint", "kill:rank=2:during=restore", 2) {
        first_jobs += 1;
        assert!(first_jobs < 4, "{} {:?}: in 4 first jobs, the checkpoint never followed regions that ended in program order", case.name, case.args);
    }
    killed_while_resuming(&case, &expected, "after it went live", "kill:rank=3:after_tasks=1", 3);
}

/// A first job of `case` whose head is killed after checkpoint 2, resumed with `inject`
/// killing worker `rank`: right, resumed, recovered. For a kill `during=restore`, also that
/// recovery re-ran nothing, if the first job's regions ended in program order (see
/// [`a_worker_killed_while_resuming_is_recovered`]); returns false if they did not.
fn killed_while_resuming(case: &Case, expected: &str, what: &str, inject: &str, rank: u64) -> bool {
    let dir = scratch_dir();
    let ck = dir.path().join("ckpt");
    kill_head(case, case.args, &ck);
    let mut envs = checkpointing(&ck);
    envs.push(("OMPCLUSTER_FT_INJECT".into(), inject.into()));
    let label = format!("{} {:?}, --resume, worker {rank} killed {what}", case.name, case.args);
    let (o, r) = run_report(case, case.args, &envs, true, &label);
    assert!(
        o.status.success() && (case.mask)(&stdout(&o)) == (case.mask)(expected),
        "{label}: the resumed job failed or printed something else than a fresh run\n--- a fresh run printed ---\n{expected}\n{}",
        describe(&o)
    );
    let res = r["resume"].clone();
    assert_resumed(&label, &o, &res, None);
    let failed: Vec<u64> = r["failures"].as_array().map(|f| f.iter().filter_map(|x| x["rank"].as_u64()).collect()).unwrap_or_default();
    assert_eq!(failed, vec![rank], "{label}: the report's failures: {r}\n{}", describe(&o));
    let recovered = r["recoveries"].as_array().is_some_and(|v| v.iter().any(|x| x["dead"].as_array().is_some_and(|d| d.iter().any(|y| y.as_u64() == Some(rank)))));
    assert!(recovered, "{label}: no recovery from the loss of rank {rank}: {r}\n{}", describe(&o));
    if !inject.contains("during=restore") {
        return true;
    }
    // Live before the end of the log: the first job ended its regions out of order.
    if res["switched_live_at_region"].as_u64().is_some_and(|k| res["first_job_regions"].as_u64().is_some_and(|n| k < n)) {
        eprintln!("{label}: the first job's regions ended out of order at its checkpoint ({res}): made again");
        return false;
    }
    // Killed before any region ran live: everything it lost is in the checkpoint, and
    // recovery loads it rather than re-running the logged regions before it.
    let rerun: u64 = r["recoveries"].as_array().map(|v| v.iter().filter_map(|x| x["tasks_reexecuted"].as_u64()).sum()).unwrap_or(0);
    assert_eq!(rerun, 0, "{label}: recovery re-ran regions the checkpoint held: {r}\n{}", describe(&o));
    assert_eq!(res["versions_rebuilt"].as_u64(), Some(0), "{label}: versions rebuilt by re-running: {res}\n{}", describe(&o));
    true
}

/// SIGTERM (what Slurm sends ahead of a time limit, and what `scancel` sends) to the launcher at
/// a moment that differs from run to run, with a checkpoint interval longer than the run: the
/// head takes a final checkpoint with its log and leaves, the job ends, and the resumed job
/// skips every region the first job had run by then. The first signal comes right after the
/// launcher started, before mpirun has started the ranks: the launcher keeps it until the head
/// can take it.
#[test]
fn a_job_stopped_by_sigterm_resumes_skipping_what_it_had_done() {
    let case = stencil();
    let (expected, _) = fresh(&case, case.args, &[], "failure-free, no checkpoints");
    let seed = ompcluster_tests::test_seed("a_job_stopped_by_sigterm_resumes_skipping_what_it_had_done");
    for i in 0..3u64 {
        // At once, then between 0.2 and 1.6 s after the head's runtime started: the program
        // runs about 3 s.
        let after = (i > 0).then(|| Duration::from_millis(200 + (seed + i * 700) % 1400));
        let dir = scratch_dir();
        let ck = dir.path().join("ckpt");
        let mut envs = ompcluster_tests::ckpt_env(&ck, "1000");
        envs.push(("OMPCLUSTER_CP_ENABLE".into(), "1".into()));
        let what = match after {
            Some(a) => format!("{} {:?}, SIGTERM to the launcher {a:?} after the head's runtime started", case.name, case.args),
            None => format!("{} {:?}, SIGTERM to the launcher as soon as it started mpirun", case.name, case.args),
        };
        let o = sigterm(&case, &envs, after, &what);
        assert!(!o.status.success() && !stdout(&o).contains(case.done), "{what}: the job was not stopped (too late?)\n{}", describe(&o));
        assert!(stderr(&o).contains("ompcluster-run: SIGTERM: passed to the program's head"), "{what}: the launcher did not pass SIGTERM to the head\n{}", describe(&o));
        assert!(stderr(&o).contains("ompcluster: SIGTERM: final checkpoint done"), "{what}: no final checkpoint\n{}", describe(&o));
        assert_eq!(manifests(&ck).len(), 1, "{what}: one checkpoint, the final one, expected: {:?}\n{}", manifests(&ck), describe(&o));
        let (o, res, _) = resume(&case, case.args, &ck, &expected, &format!("after SIGTERM ({what})"));
        let label = format!("{what}, resumed");
        let done = res["first_job_regions"].as_u64();
        assert!(done.is_some(), "{label}: the resumed job did not resume from the final checkpoint: {res}\n{}", describe(&o));
        assert_eq!(res["regions_skipped"].as_u64(), done, "{label}: not every region done before the signal was skipped: {res}\n{}", describe(&o));
        if after.is_some() {
            assert_resumed(&label, &o, &res, None);
            assert!(done > Some(0), "{label}: the first job had run no region at its final checkpoint: {res}\n{}", describe(&o));
        }
    }
}

/// Run `case` with `envs`, send SIGTERM to its launcher `after` the head's runtime started (it
/// handles SIGTERM from then on), or at once once the launcher started mpirun, and return what
/// the job printed (it must end within [`DEATH_BOUND`], leaving no process).
fn sigterm(case: &Case, envs: &[(String, String)], after: Option<Duration>, what: &str) -> Output {
    let job = Job::spawn(NP, &case.prog, case.args, &env_refs(envs));
    let waited = Instant::now();
    // The launcher started mpirun (it catches SIGTERM from then on).
    let is_mpirun = |p: &i32| std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| ["mpirun", "orterun", "prterun"].iter().any(|m| c.starts_with(m)));
    while !job_members(job.marker()).iter().any(is_mpirun) {
        assert!(waited.elapsed() < DEATH_BOUND, "{what}: the launcher never started mpirun");
        std::thread::sleep(Duration::from_millis(5));
    }
    if let Some(a) = after {
        while !job.ranks(&case.prog).first().is_some_and(|&(r, p)| r == 0 && handles_sigterm(p)) {
            assert!(waited.elapsed() < DEATH_BOUND, "{what}: the head's runtime never started (it handles no SIGTERM)");
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(a);
    }
    // SAFETY: kill has no memory-safety preconditions; the pid is this test's launcher.
    assert_eq!(unsafe { libc::kill(job.pid(), libc::SIGTERM) }, 0, "{what}: cannot send SIGTERM");
    end_of(job, DEATH_BOUND, what)
}

/// SIGTERM while periodic checkpoints are taken back to back (every 20 ms, 1000 regions of
/// 300 ms: a checkpoint's pause, waiting for the kernels in flight, holds the gate most of the
/// time): the final checkpoint waits for the one in progress, and both are published. Started
/// beside it, the final one's log cut replaced the other's, and both failed ("checkpoint 7
/// failed: the log has no cut for checkpoint 7", and 8), while SIGTERM said "final checkpoint
/// done": this test failed in each of 4 runs before the fix. The first job resumes from the
/// newest, and is right.
#[test]
fn sigterm_during_a_checkpoint_publishes_both() {
    let case = Case { name: "sleepy", prog: compile("sleepy.c"), args: &["1000", "300"], done: "sleepy: PASS", mask: exact };
    let (expected, _) = fresh(&case, case.args, &[], "failure-free, no checkpoints");
    let seed = ompcluster_tests::test_seed("sigterm_during_a_checkpoint_publishes_both");
    // Trials whose SIGTERM came during a checkpoint (the head says so).
    let mut during = 0;
    for i in 0..6u64 {
        // Between 0.5 and 3.5 s after the head's runtime started: its regions take about 5.5 s
        // (at most 64 in flight, 17 checkpoints whose pauses last a region each).
        let after = Duration::from_millis(500 + (seed + i * 500) % 3000);
        let dir = scratch_dir();
        let ck = dir.path().join("ckpt");
        let mut envs = ompcluster_tests::ckpt_env(&ck, "0.02");
        envs.push(("OMPCLUSTER_CP_ENABLE".into(), "1".into()));
        let what = format!("{} {:?}, checkpoints every 20 ms, SIGTERM to the launcher {after:?} after the head's runtime started", case.name, case.args);
        let o = sigterm(&case, &envs, Some(after), &what);
        let err = stderr(&o);
        assert!(!o.status.success() && !stdout(&o).contains(case.done), "{what}: the job was not stopped (too late?)\n{}", describe(&o));
        assert!(err.contains("ompcluster: SIGTERM: final checkpoint done"), "{what}: no final checkpoint\n{}", describe(&o));
        let failed: Vec<&str> = err.lines().filter(|l| l.starts_with("ompcluster: checkpoint ") && l.contains(" failed")).collect();
        assert!(failed.is_empty(), "{what}: checkpoints failed: {failed:?}\n{}", describe(&o));
        during += usize::from(err.contains("ompcluster: SIGTERM: a checkpoint in progress is published first"));
        if i > 0 {
            continue;
        }
        // Resumed once: versions the first job's log cannot place are rebuilt by running
        // regions again, which took up to 25 s here.
        let newest = manifests(&ck).last().copied();
        let (o, res, _) = resume(&case, case.args, &ck, &expected, &format!("after SIGTERM ({what})"));
        let label = format!("{what}, resumed");
        // From the newest checkpoint; its regions run in another order than the first job's
        // (1000 independent regions), so the resumed job goes live where the orders part.
        assert_resumed(&label, &o, &res, newest);
    }
    assert!(during > 0, "no SIGTERM of the 6 came during a checkpoint: this test tested nothing (make the checkpoints' pauses longer)");
    eprintln!("{during} of 6 SIGTERMs came during a checkpoint");
}

/// Whether process `pid` catches SIGTERM (the head does once its runtime started).
fn handles_sigterm(pid: i32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let mask = status.lines().find_map(|l| l.strip_prefix("SigCgt:")).and_then(|m| u64::from_str_radix(m.trim(), 16).ok());
    mask.is_some_and(|m| m & (1 << (libc::SIGTERM - 1)) != 0)
}

/// The program rebuilt differently (here `-O1` instead of `-O2`: other device code, the same
/// results): its images' keys differ from the first job's, so nothing is skipped, and the
/// output is a fresh run's.
#[test]
fn a_rebuilt_program_skips_nothing_and_is_right() {
    // A private copy of the test's build: it is replaced by another build below.
    let dir = scratch_dir();
    let shared = stencil();
    let case = Case { prog: dir.path().join("resume_stencil"), ..shared };
    std::fs::copy(&shared.prog, &case.prog).expect("copy the program");
    let (expected, _) = fresh(&case, case.args, &[], "failure-free, no checkpoints");
    let ck = dir.path().join("ckpt");
    kill_head(&case, case.args, &ck);
    // The same source, built again differently, at the path the first job ran from.
    let src = ompcluster_tests::programs_dir().join("resume_stencil.c");
    let flags: Vec<&str> = ompcluster_tests::OFFLOAD_FLAGS.iter().map(|f| if *f == "-O2" { "-O1" } else { f }).collect();
    let o = Command::new("clang-16").args(&flags).arg(&src).arg("-o").arg(&case.prog).output().expect("run clang-16");
    assert!(o.status.success(), "cannot rebuild {}: {}", src.display(), describe(&o));
    let what = "with the program rebuilt with -O1";
    let (o, res, _) = resume(&case, case.args, &ck, &expected, what);
    let label = format!("{} {:?}, --resume {what}", case.name, case.args);
    assert!(stderr(&o).contains("its executable differs"), "{label}: stderr does not say the program differs\n{}", describe(&o));
    assert_eq!(res["regions_skipped"].as_u64(), Some(0), "{label}: regions of another build were skipped: {res}\n{}", describe(&o));
}

/// Checkpoint data damaged after the first job died (bytes changed in the middle of every data
/// file): the resumed job does not adopt what it cannot read back (checksums), rebuilds those
/// versions by re-running logged regions, says so, and prints the right output.
#[test]
fn damaged_checkpoint_data_is_rebuilt_not_trusted() {
    let case = stencil();
    let (expected, _) = fresh(&case, case.args, &[], "failure-free, no checkpoints");
    let dir = scratch_dir();
    let ck = dir.path().join("ckpt");
    kill_head(&case, case.args, &ck);
    let data: Vec<PathBuf> = files_under(&ck).into_iter().filter(|p| p.extension().is_some_and(|e| e == "data")).collect();
    assert!(!data.is_empty(), "no checkpoint data file under {}", ck.display());
    for f in &data {
        let mut b = std::fs::read(f).unwrap();
        let mid = b.len() / 2;
        b[mid] ^= 0x5a;
        std::fs::write(f, &b).unwrap();
    }
    let what = format!("with every checkpoint data file damaged ({} files)", data.len());
    let (o, res, _) = resume(&case, case.args, &ck, &expected, &what);
    let label = format!("{} {:?}, --resume {what}", case.name, case.args);
    assert_resumed(&label, &o, &res, None);
    assert!(stderr(&o).contains("is unusable"), "{label}: stderr does not say a checkpoint copy is unusable\n{}", describe(&o));
    assert!(res["versions_rebuilt"].as_u64().unwrap_or(0) > 0, "{label}: nothing was rebuilt by re-running: {res}\n{}", describe(&o));
}
