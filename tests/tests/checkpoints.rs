//! Checkpoints in the running plugin (issue 4), end to end: the matmul example run with
//! frequent checkpoints, the checkpoint directory verified and its contents checked block by
//! block against what the program computes, a worker killed right after a checkpoint and its
//! regions loaded by another process, a corrupted file caught, a bad directory refused at
//! start-up. They run against the store `OMPCLUSTER_TEST_STORE` names (the embedded store by
//! default; `scripts/test-veloc.sh` runs them again with VeloC in sync and in async mode).

use ckpt_veloc::{list_versions, load_region, Manifest};
use ompcluster_tests::{ckpt_scratch, describe, env_refs as envs, launcher, stderr, stdout, Job, Report};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn matmul() -> &'static Path {
    ompcluster_tests::matmul_example()
}

fn ckpt_cli() -> PathBuf {
    launcher().with_file_name("ompcluster-ckpt")
}

/// Every block the matmul example can hold at any moment: its A and B blocks, and each C block
/// after 0..=nb of its k-steps (the depend chain applies them in order of k). The matrices hold
/// small integers, so every sum is exact whatever the order.
fn expected_blocks(n: usize, bs: usize) -> BTreeSet<Vec<u64>> {
    let nb = n / bs;
    let a = |r: usize, c: usize| ((r * 7 + c * 3) % 11) as f64 - 5.0;
    let b = |r: usize, c: usize| ((r * 5 + c * 2) % 13) as f64 - 6.0;
    let bits = |v: Vec<f64>| v.into_iter().map(f64::to_bits).collect::<Vec<u64>>();
    let mut set = BTreeSet::new();
    for bi in 0..nb {
        for bj in 0..nb {
            let blk = |f: &dyn Fn(usize, usize) -> f64| {
                (0..bs * bs).map(|o| f(bi * bs + o / bs, bj * bs + o % bs)).collect::<Vec<f64>>()
            };
            set.insert(bits(blk(&a)));
            set.insert(bits(blk(&b)));
            let mut c = vec![0.0f64; bs * bs];
            set.insert(bits(c.clone()));
            for k in 0..nb {
                for i in 0..bs {
                    for kk in 0..bs {
                        let aik = a(bi * bs + i, k * bs + kk);
                        for j in 0..bs {
                            c[i * bs + j] += aik * b(k * bs + kk, bj * bs + j);
                        }
                    }
                }
                set.insert(bits(c.clone()));
            }
        }
    }
    set
}

fn as_words(bytes: &[u8]) -> Vec<u64> {
    bytes.chunks_exact(8).map(|w| u64::from_ne_bytes(w.try_into().unwrap())).collect()
}

/// The store's settings, keeping every version (the tests look at all of them).
fn ckpt_env(dir: &Path, interval: &str) -> Vec<(String, String)> {
    let mut e = ompcluster_tests::ckpt_env(dir, interval);
    e.push(("OMPCLUSTER_CP_KEEP".into(), "1000".into()));
    e
}

#[test]
fn matmul_checkpoints_verify_and_hold_what_the_program_computed() {
    // 1,728 tasks: 0.8-3 s of work here, so an interval of 0.03 s leaves room for many
    // checkpoints even on a faster machine; the assertion asks for 3. (With 512 tasks a
    // clean-clone CI run took 0.27 s, of which the first checkpoint's background save took
    // 0.09 s, and made 2.)
    const N: usize = 1152;
    const BS: usize = 96;
    let expected = expected_blocks(N, BS);
    let zero_c = vec![0u64; BS * BS];
    let nb = N / BS;
    // (checkpoints, buffers saved, copies saved, copies of C mid-computation) of each run.
    let mut taken = Vec::new();
    loop {
        let dir = tempfile::tempdir().unwrap();
        let ck = dir.path().join("ckpt");
        let report = dir.path().join("report.json");
        let scratch = ckpt_scratch(&ck);
        let mut e = ckpt_env(&ck, "0.03");
        e.push(("OMPCLUSTER_REPORT".into(), report.display().to_string()));
        let (n, bs) = (N.to_string(), BS.to_string());
        let out = Job::spawn(4, matmul(), &[&n, &bs], &envs(&e)).wait(Duration::from_secs(180));
        assert!(out.status.success() && stdout(&out).contains("result correct"), "{}", describe(&out));
        // The program's output is its own (VeloC's clients log into their scratch directory).
        assert!(!stdout(&out).contains("[BENCHMARK") && !stdout(&out).contains("[INFO"), "{}", describe(&out));
        // Every rank removed its scratch data, the head included (VeloC's scratch keeps its logs).
        let left: Vec<_> = std::fs::read_dir(&scratch)
            .unwrap()
            .map(|d| d.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !n.ends_with(".log"))
            .collect();
        assert!(left.is_empty(), "scratch data left behind: {left:?}");
        let r = Report::read(&report).unwrap();
        assert!(r.checkpoint_errors.is_empty(), "{r:?}");
        let checkpoints = r.checkpoints;
        assert!(r.checkpoint_bytes > 0);
        assert!(r.checkpoint_pauses_seconds.len() as u64 >= checkpoints);
        assert_eq!(r.tasks_executed as usize, nb * nb * nb);

        let v = Command::new(ckpt_cli()).arg("verify").arg(&ck).output().unwrap();
        assert!(v.status.success(), "verify failed: {}", describe(&v));

        // Every region of every kept version is a block the program really had at some
        // point. Incremental versions list regions saved by older ones: each saved copy is
        // loaded (through a manifest that lists it) once.
        let mut copies = BTreeSet::new();
        let mut buffers = BTreeSet::new();
        let mut partial_c = 0;
        for version in list_versions(&ck).unwrap() {
            let m = Manifest::read(&ck, version).unwrap();
            for rec in &m.regions {
                buffers.insert(rec.region);
                if !copies.insert((rec.ckpt, rec.region)) {
                    continue;
                }
                let bytes = load_region(&ck, version, rec.region).unwrap();
                let words = as_words(&bytes);
                assert!(expected.contains(&words), "version {version}, region {} (saved by rank {}) is no block the program ever had", rec.region, rec.rank);
                if words != zero_c {
                    partial_c += 1;
                }
            }
        }
        taken.push((checkpoints, buffers.len(), copies.len(), partial_c));
        // What the run must also show: several checkpoints, every one of the 3 * nb * nb
        // buffers (A, B and C, all changed from their pristine state at least once) saved, a
        // buffer saved by two checkpoints, and C blocks in the middle of the computation.
        // Where the checkpoints fall depends on the machine: VeloC's flushes sometimes take
        // 0.2-2.5 s where the others take milliseconds (seen in both modes;
        // docs/checkpoints.md), leaving room for only 2 checkpoints; a clean-clone CI run of
        // 2026-11-25 (VeloC async) saved every buffer once in its 3, and after that day's
        // faster launches one made only its first checkpoint, before any buffer changed, whose
        // flush took 0.42 s (2 runs in 10 here). Up to 5 runs are made, each checked in full
        // as above.
        if checkpoints >= 3 && buffers.len() >= 3 * nb * nb && copies.len() > buffers.len() && partial_c > 0 {
            break;
        }
        assert!(
            taken.len() < 5,
            "no run took 3 checkpoints, saved all {} buffers, saved a buffer twice and held C mid-computation: (checkpoints, buffers, copies, C mid-computation) per run {taken:?}; last report: {r:?}",
            3 * nb * nb
        );
    }
}

/// Buffers change all at once, many times, on the head (host updates of a staged buffer) and
/// on a worker (a region), while checkpoints are taken every few milliseconds: every saved
/// copy must hold one value throughout. Saves run after offloading resumed, so this is the
/// test that each buffer is still saved as it was at its checkpoint.
///
/// Under VeloC's async engine, which at this rate of checkpoints sometimes loses a request
/// (docs/checkpoints.md: the flush watchdog then wedges that rank's store after 30 s, seen in
/// one clean-clone CI run of three), such a run is checked like any other (right output,
/// every saved copy uniform) and then run again, at most 3 runs; any other checkpoint error
/// fails the test at once, and so does a stall in every run.
#[test]
fn checkpoints_never_save_a_buffer_half_changed() {
    let prog = ompcluster_tests::compile("ckpt_uniform.c");
    let mut stalled = Vec::new();
    loop {
        let dir = tempfile::tempdir().unwrap();
        let ck = dir.path().join("ckpt");
        let report = dir.path().join("report.json");
        let mut e = ckpt_env(&ck, "0.005");
        e.push(("OMPCLUSTER_REPORT".into(), report.display().to_string()));
        // 3000 rounds: about half a second, many checkpoints (each waits for the previous flush).
        let out = Job::spawn(3, &prog, &["3000", "1048576"], &envs(&e)).wait(Duration::from_secs(180));
        assert!(out.status.success() && stdout(&out).contains("PASS"), "{}", describe(&out));
        let json = Report::read(&report).unwrap();
        let errors = &json.checkpoint_errors;
        let veloc_stall = |e: &String| e.contains("VeloC's engine made no progress on checkpoint");
        assert!(errors.iter().all(veloc_stall), "{json:?}");
        let (copies, savers) = uniform_copies(&ck);
        if errors.is_empty() {
            // Both kinds of saver were exercised, many times.
            assert_eq!(savers.len(), 2, "saved by the head and by workers: {savers:?}");
            assert!(copies >= 10, "only {copies} saved copies: {json:?}");
            return;
        }
        stalled.push(json.checkpoint_errors.clone());
        assert!(stalled.len() < 3, "VeloC's engine stalled in every run: {stalled:?}");
    }
}

/// Every 1 MiB copy saved in the checkpoints under `ck` holds one value throughout (panics
/// otherwise); returns how many there are, and which savers made them (head or not).
fn uniform_copies(ck: &Path) -> (usize, BTreeSet<bool>) {
    let mut copies = BTreeSet::new();
    let mut savers = BTreeSet::new();
    for version in list_versions(ck).unwrap() {
        let m = Manifest::read(ck, version).unwrap();
        for rec in &m.regions {
            if rec.size != 1 << 20 || !copies.insert((rec.ckpt, rec.region)) {
                continue; // the image's data, or a copy already checked
            }
            let bytes = load_region(ck, version, rec.region).unwrap();
            assert!(
                bytes.iter().all(|&b| b == bytes[0]),
                "checkpoint {}, region {} (saved by rank {}) mixes values {} and {}",
                rec.ckpt,
                rec.region,
                rec.rank,
                bytes[0],
                bytes.iter().find(|&&b| b != bytes[0]).unwrap()
            );
            savers.insert(rec.rank == 0);
        }
    }
    (copies.len(), savers)
}

/// A checkpoint that falls due while nothing changed is not taken: it would publish the same
/// state again, and before the program maps anything an empty one. The program first runs
/// regions that change no device data for 0.5 s, then rewrites a buffer on a worker for
/// 0.3 s, then frees it; checkpoints fall due every 0.02 s, so at most 0.3 / 0.02 + 2 = 17
/// are taken (each one's pause is in the report), and before this rule about 25 more were
/// taken in the idle phase with the embedded store. (A VeloC flush that stalls makes fewer of
/// both, so under VeloC the count says less.)
#[test]
fn checkpoints_with_nothing_to_save_are_not_taken() {
    let prog = ompcluster_tests::compile("ckpt_idle.c");
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ckpt");
    let report = dir.path().join("report.json");
    let mut e = ckpt_env(&ck, "0.02");
    e.push(("OMPCLUSTER_REPORT".into(), report.display().to_string()));
    let out = Job::spawn(3, &prog, &["500", "300"], &envs(&e)).wait(Duration::from_secs(120));
    assert!(out.status.success() && stdout(&out).contains("ckpt_idle: PASS"), "{}", describe(&out));
    let json = Report::read(&report).unwrap();
    assert!(json.checkpoint_errors.is_empty(), "{json:?}");
    let taken = json.checkpoint_pauses_seconds.len();
    // The busy phase changes the buffer at every region: it is checkpointed.
    assert!(taken >= 1, "no checkpoint of the busy phase: {json:?}");
    assert!(taken <= 17, "{taken} checkpoints taken: some in the idle phase\n{json:?}");
    assert_eq!(json.checkpoints, list_versions(&ck).unwrap().len() as u64, "{json:?}");
}

/// A checkpoint's pause waits for the regions in flight, so it lasts one region at most, even
/// when checkpoints fall due far more often than regions end (200 regions of 2 s, up to 64 in
/// flight on 3 workers, an interval of 0.1 s). Each request that found one due used to queue
/// for the gate's write side itself: the pauses grew by a region's length each time (2.5 s,
/// 5 s, ... 27.5 s with regions of 2.5 s) and one region ran per checkpoint (109 s instead of
/// 14 s with an interval of 2 s). The bound is three regions' length: a semantic limit with a
/// wide margin, not a speed measurement.
#[test]
fn a_checkpoint_pause_lasts_one_region_at_most() {
    let prog = ompcluster_tests::compile("sleepy.c");
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ckpt");
    let report = dir.path().join("report.json");
    let mut e = ckpt_env(&ck, "0.1");
    e.push(("OMPCLUSTER_REPORT".into(), report.display().to_string()));
    let out = Job::spawn(4, &prog, &["200", "2000"], &envs(&e)).wait(Duration::from_secs(150));
    assert!(out.status.success() && stdout(&out).contains("sleepy: PASS"), "{}", describe(&out));
    let json = Report::read(&report).unwrap();
    assert!(json.checkpoint_errors.is_empty(), "{json:?}");
    let pauses = &json.checkpoint_pauses_seconds;
    assert!(!pauses.is_empty(), "no checkpoint taken: {json:?}");
    assert!(pauses.iter().all(|&p| p < 6.0), "a pause over three regions' length: {pauses:?}");
}

/// A run long enough for checkpoints with worker-saved regions to be published before it ends
/// (512 tasks), with the rank that saved them killed right then; whether the first such
/// version is published before the run ends depends on the store's flush: VeloC copies the
/// first (full) checkpoint several times slower than the embedded store on this
/// oversubscribed machine (its copy threads run at nice 10: 0.6-2.3 s against 0.15 s measured
/// in sync mode), and sync mode then ended 1 run in 4 or so before publishing one. So up to 4
/// runs are made, each of which must be right, until one publishes such a version in time.
#[test]
fn regions_of_a_killed_worker_load_in_another_process() {
    let n = 2048;
    let mut attempts = 0;
    let (dir, ck, version, victim, mut job) = loop {
        attempts += 1;
        assert!(attempts <= 4, "no run published a version with worker-saved regions before it ended");
        let dir = tempfile::tempdir().unwrap();
        let ck = dir.path().join("ckpt");
        let e = ckpt_env(&ck, "0.2");
        let mut job = Job::spawn(4, matmul(), &[&n.to_string(), "256"], &envs(&e));
        // Wait for a published version that holds regions saved by a worker.
        let deadline = Instant::now() + Duration::from_secs(120);
        let found = loop {
            assert!(Instant::now() < deadline, "no checkpoint with worker-saved regions was published");
            if let Ok(vs) = list_versions(&ck) {
                if let Some(found) = vs.iter().rev().find_map(|&v| {
                    let m = Manifest::read(&ck, v).ok()?;
                    m.regions.iter().map(|r| r.rank).find(|&r| r > 0).map(|r| (v, r))
                }) {
                    break Some(found);
                }
            }
            if job.wait_timeout(Duration::ZERO).is_some() {
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        match found {
            Some((version, victim)) if job.wait_timeout(Duration::ZERO).is_none() => break (dir, ck, version, victim, job),
            _ => {
                let out = job.wait(Duration::from_secs(60));
                assert!(out.status.success() && stdout(&out).contains("result correct"), "{}", describe(&out));
            }
        }
    };
    let _keep = dir;
    let pid = job
        .ranks(matmul())
        .into_iter()
        .find(|&(rank, _)| rank == victim)
        .map(|(_, pid)| pid)
        .expect("the victim rank's process");
    // SAFETY: sending a signal to a process of this test's own job.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    // The job recovers from it (fault tolerance is on) and still ends.
    let status = job.wait_timeout(Duration::from_secs(60)).expect("the job must end after a worker is killed");
    assert!(status.success(), "the job did not recover from the loss of rank {victim}");

    // This test process is not the rank that saved them: load every region the dead rank saved.
    let m = Manifest::read(&ck, version).unwrap();
    let expected = expected_blocks(n, 256);
    let mine: Vec<_> = m.regions.iter().filter(|r| r.rank == victim).collect();
    assert!(!mine.is_empty());
    for rec in mine {
        let bytes = load_region(&ck, version, rec.region).unwrap();
        assert!(expected.contains(&as_words(&bytes)), "region {} of the dead rank {victim} holds wrong data", rec.region);
    }
    // Published versions are complete and intact even though the job died mid-run.
    let v = Command::new(ckpt_cli()).arg("verify").arg(&ck).output().unwrap();
    assert!(v.status.success(), "{}", describe(&v));
}

#[test]
fn a_corrupted_checkpoint_file_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ckpt");
    let e = ckpt_env(&ck, "0.03");
    // 512 tasks: several checkpoints fall inside the run, not only at its ends. A VeloC flush
    // that stalls (docs/checkpoints.md) can outlast the run: the one version then published
    // lists none of the buffers the program freed meanwhile (2 runs in 20 under VeloC async
    // here). Up to 4 runs are made, each fresh, until one publishes regions.
    let mut version = None;
    for _ in 0..4 {
        let _ = std::fs::remove_dir_all(&ck);
        let out = Job::spawn(3, matmul(), &["1024", "128"], &envs(&e)).wait(Duration::from_secs(120));
        assert!(out.status.success(), "{}", describe(&out));
        version = list_versions(&ck).unwrap().into_iter().rev().find(|&v| !Manifest::read(&ck, v).unwrap().regions.is_empty());
        if version.is_some() {
            break;
        }
    }
    let version = version.expect("a version holding regions in one of 4 runs");
    let m = Manifest::read(&ck, version).unwrap();
    let rec = m.regions[m.regions.len() / 2].clone();
    let file = ck.join(&rec.file);
    let mut data = std::fs::read(&file).unwrap();
    data[rec.offset as usize + 100] ^= 0x40;
    std::fs::write(&file, &data).unwrap();

    let v = Command::new(ckpt_cli()).arg("verify").arg(&ck).output().unwrap();
    assert!(!v.status.success(), "verify accepted a corrupted file: {}", describe(&v));
    let text = format!("{}{}", stdout(&v), stderr(&v));
    assert!(text.contains(&rec.file.display().to_string()), "verify does not name {}: {text}", rec.file.display());
    let err = load_region(&ck, version, rec.region).expect_err("loading corrupted data must fail");
    assert!(err.to_string().contains(&rec.file.display().to_string()), "{err}");
}

#[test]
fn an_unusable_checkpoint_directory_stops_the_job_before_main() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"not a directory").unwrap();
    // A path below a regular file cannot be created, even by root.
    let bad = file.join("ckpt");
    let e = ckpt_env(&bad, "1");
    let t0 = Instant::now();
    let out = Job::spawn(3, matmul(), &["256", "64"], &envs(&e)).wait(Duration::from_secs(60));
    assert!(!out.status.success(), "{}", describe(&out));
    assert!(t0.elapsed() < Duration::from_secs(30));
    let err = stderr(&out);
    assert!(err.contains("checkpoint") && err.contains(&bad.display().to_string()[..20]), "unclear message: {err}");
    // One line, from the launcher, before any rank started.
    assert!(err.starts_with("ompcluster-run: cannot use the checkpoint directories"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(!stdout(&out).contains("matmul N="), "main ran: {}", describe(&out));
}

/// One job per checkpoint directory: a job started while another holds it stops before `main`
/// saying so (the lock is what a running job's head holds); a job started after an earlier
/// one ended removes what that one left (its manifests would outnumber the new job's and
/// make retention delete the new job's files), and its own checkpoints verify.
#[test]
fn a_checkpoint_directory_serves_one_job_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ckpt");
    let e = ckpt_env(&ck, "0.05");
    let first = Job::spawn(3, matmul(), &["512", "64"], &envs(&e)).wait(Duration::from_secs(120));
    assert!(first.status.success(), "{}", describe(&first));
    let left = ckpt_veloc::list_versions(&ck).unwrap();
    assert!(!left.is_empty(), "the first job published no checkpoint");

    // Another job holds the directory.
    let lock = std::fs::OpenOptions::new().read(true).write(true).open(ck.join(".ompcluster-job.lock")).unwrap();
    // SAFETY: flock on a descriptor this test owns.
    assert_eq!(unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX | libc::LOCK_NB) }, 0);
    let refused = Job::spawn(3, matmul(), &["256", "64"], &envs(&e)).wait(Duration::from_secs(60));
    assert_eq!(refused.status.code(), Some(2), "{}", describe(&refused));
    assert!(stderr(&refused).contains("in use by another running job"), "{}", describe(&refused));
    assert!(!stdout(&refused).contains("matmul N="), "main ran: {}", describe(&refused));
    assert_eq!(ckpt_veloc::list_versions(&ck).unwrap(), left, "a refused job must not touch the directory");
    drop(lock);

    // A later job: the earlier checkpoints go, its own stay and verify.
    let e2 = ckpt_env(&ck, "1000");
    let second = Job::spawn(3, matmul(), &["256", "64"], &envs(&e2)).wait(Duration::from_secs(120));
    assert!(second.status.success(), "{}", describe(&second));
    assert!(stderr(&second).contains(&format!("removed {} checkpoint(s) an earlier job left", left.len())), "{}", describe(&second));
    assert!(ckpt_veloc::list_versions(&ck).unwrap().is_empty(), "no checkpoint of the earlier job may remain");
}

/// Workers killed mid-run, with checkpoints on and nothing retained on the head
/// (`OMPCLUSTER_FT_RETAIN=0`): recovery loads what the dead workers held from the published
/// checkpoints (of the store under test) and the output is the failure-free one. Whether a
/// given lost buffer comes from a checkpoint, a live copy or re-runs from an older version
/// depends on timing, so up to 8 runs are made, each of which must be right, until one
/// recovers buffers from checkpoints. Two of the three workers die at once: with one, since
/// copies keep their older versions through moves (7694bba) and fewer moves are taken for
/// torn (df94723), the survivors held what recovery needed in 4 runs of 4 in a clean-clone run
/// (1 run in 8 before); with two, 2 runs in 3 loaded some from checkpoints.
#[test]
fn a_killed_worker_is_recovered_from_checkpoints() {
    let prog = ompcluster_tests::compile("ft_stencil.c");
    let args = ["8", "4096", "24", "90000"];
    let mut loaded = Vec::new();
    for _ in 0..8 {
        let dir = tempfile::tempdir().unwrap();
        let ck = dir.path().join("ckpt");
        let report = dir.path().join("report.json");
        let mut e = ckpt_env(&ck, "0.3");
        e.push(("OMPCLUSTER_REPORT".into(), report.display().to_string()));
        e.push(("OMPCLUSTER_FT_RETAIN".into(), "0".into()));
        e.push(("OMPCLUSTER_FT_INJECT".into(), "kill:rank=2:after_tasks=120;kill:rank=3:after_tasks=120".into()));
        let out = Job::spawn(4, &prog, &args, &envs(&e)).wait(Duration::from_secs(180));
        assert!(out.status.success() && stdout(&out).contains("ft_stencil: PASS"), "{}", describe(&out));
        let json = Report::read(&report).unwrap();
        assert!(!json.recoveries.is_empty(), "{json:?}");
        let dead: Vec<i32> = json.recoveries.iter().flat_map(|r| r.dead.iter().copied()).collect();
        assert!(dead.contains(&2) && dead.contains(&3), "{json:?}");
        let n: u64 = json.recoveries.iter().map(|r| r.outcome.from_checkpoints).sum();
        loaded.push(n);
        if n > 0 {
            return;
        }
    }
    panic!("no recovery loaded a buffer from a checkpoint in {} runs: {loaded:?}", loaded.len());
}
