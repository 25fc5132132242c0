//! Integration tests with real processes: `ompcluster-ftbench` under `mpirun` (Open MPI,
//! ob1/vader, `--enable-recovery`), killing and stalling ranks, parsing the JSON it prints.
//!
//! The tests run one at a time (a global lock: each starts up to 8 ranks on a 2-core
//! machine). Each has a hard time limit after which the whole process group of mpirun is
//! killed and the test fails. If `mpirun` is missing the tests fail, they do not skip.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

static SERIAL: Mutex<()> = Mutex::new(());

const BENCH: &str = env!("CARGO_BIN_EXE_ompcluster-ftbench");

struct Run {
    json: Value,
    stdout: String,
    stderr: String,
    code: Option<i32>,
}

fn mpirun() -> String {
    let path = std::env::var("MPIRUN").unwrap_or_else(|_| "mpirun".into());
    let ok = Command::new(&path)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "mpirun ({path}) not found or not working: these tests need Open MPI"
    );
    path
}

/// Run `np` ranks of ftbench with `args` and environment `env`; kill everything after
/// `limit`.
fn run_env(np: usize, args: &[&str], env: &[(&str, &str)], limit: Duration) -> Run {
    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut cmd = Command::new(mpirun());
    cmd.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "--enable-recovery",
        "--mca",
        "pml",
        "ob1",
        "--mca",
        "btl",
        "self,vader",
    ]);
    for (k, v) in env {
        // set here and exported to the ranks with -x
        cmd.env(k, v).args(["-x", k]);
    }
    cmd.args(["-np", &np.to_string()])
        .arg(BENCH)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd.spawn().expect("spawn mpirun");
    let pgid = child.id() as i32;
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break Some(st);
        }
        if start.elapsed() > limit {
            // SAFETY: killing the process group we created for this mpirun.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = t_out.join().unwrap();
    let stderr = t_err.join().unwrap();
    let Some(status) = status else {
        panic!(
            "mpirun did not finish within {limit:?} (killed)\nstdout:\n{stdout}\nstderr:\n{stderr}"
        );
    };
    let last = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .unwrap_or("null");
    let json: Value = serde_json::from_str(last).unwrap_or(Value::Null);
    Run {
        json,
        stdout,
        stderr,
        code: status.code(),
    }
}

fn run(np: usize, args: &[&str], limit: Duration) -> Value {
    let r = run_env(np, args, &[], limit);
    assert!(
        r.json.is_object() && r.json.get("error").is_none(),
        "no result JSON (exit {:?})\nstdout:\n{}\nstderr:\n{}",
        r.code,
        r.stdout,
        r.stderr
    );
    assert_eq!(r.json["simulated"], false);
    assert_eq!(r.json["ranks"].as_u64().unwrap() as usize, np);
    r.json
}

const FAST: [&str; 4] = ["--period", "100", "--timeout", "1000"];

fn args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut v: Vec<&str> = FAST.to_vec();
    v.extend_from_slice(extra);
    v
}

fn survivors(j: &Value) -> Vec<i64> {
    j["survivors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect()
}

/// Every killed rank is known by every survivor within `bound_ms`; returns the worst time.
fn check_failures(j: &Value, killed: &[i64], bound_ms: f64) -> f64 {
    let surv = survivors(j);
    let np = j["ranks"].as_i64().unwrap();
    assert_eq!(
        surv.len() as i64,
        np - killed.len() as i64,
        "survivors {surv:?}: {j}"
    );
    for k in killed {
        assert!(
            !surv.contains(k),
            "killed rank {k} reported as survivor: {j}"
        );
    }
    let failures = j["failures"].as_array().unwrap();
    let mut ranks: Vec<i64> = failures
        .iter()
        .map(|f| f["rank"].as_i64().unwrap())
        .collect();
    ranks.sort();
    let mut want = killed.to_vec();
    want.sort();
    assert_eq!(ranks, want, "failures: {j}");
    let mut worst: f64 = 0.0;
    for f in failures {
        assert_eq!(
            f["missing"].as_array().unwrap().len(),
            0,
            "some survivor missed a failure: {f}"
        );
        assert_eq!(
            f["duplicates"].as_array().unwrap().len(),
            0,
            "a survivor got a notice twice: {f}"
        );
        let notified = f["notified_ms"].as_object().unwrap();
        assert_eq!(notified.len(), surv.len(), "{f}");
        for s in &surv {
            let t = notified[&s.to_string()].as_f64().unwrap();
            assert!(
                t > 0.0 && t <= bound_ms,
                "survivor {s} learnt of rank {} after {t} ms (bound {bound_ms}): {j}",
                f["rank"]
            );
        }
        let c = f["consistent_ms"].as_f64().unwrap();
        worst = worst.max(c);
    }
    // all survivors agree on the dead set, and it is the set of killed ranks
    for (r, d) in j["dead_sets"].as_object().unwrap() {
        let mut d: Vec<i64> = d
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_i64().unwrap())
            .collect();
        d.sort();
        assert_eq!(d, want, "rank {r} holds dead set {d:?}: {j}");
    }
    // fault-aware receive, probe and barrier towards the dead returned errors on every survivor
    let fa = j["fault_aware_ok"].as_object().unwrap();
    assert_eq!(fa.len(), surv.len());
    for (r, ok) in fa {
        assert_eq!(
            ok,
            &Value::Bool(true),
            "fault-aware operations failed on rank {r}: {j}"
        );
    }
    worst
}

fn no_false_positives(j: &Value) {
    assert_eq!(
        j["false_positives"].as_array().unwrap().len(),
        0,
        "unexpected false positives: {j}"
    );
}

#[test]
fn single_kill_every_survivor_knows_within_1500ms_and_checkpoint_notices_once() {
    let j = run(
        8,
        &args(&[
            "--kill",
            "5",
            "--after-ms",
            "1000",
            "--run-ms",
            "3000",
            "--checkpoint",
        ]),
        Duration::from_secs(60),
    );
    let worst = check_failures(&j, &[5], 1500.0);
    eprintln!("single kill: consistent after {worst} ms");
    no_false_positives(&j);
    assert!(j["broadcast_messages"].as_u64().unwrap() >= 6, "{j}");
    assert_eq!(
        j["fault_aware_live_ok"], true,
        "fault-aware test/wait with live peers failed: {j}"
    );
    for (rank, c) in j["checkpoint_notices"].as_object().unwrap() {
        assert_eq!(
            c,
            &serde_json::json!([1, 1]),
            "rank {rank} got checkpoint notices {c}"
        );
    }
}

#[test]
fn two_consecutive_kills_known_within_2s_with_shuffle() {
    let j = run(
        8,
        &args(&["--kill", "3,4", "--after-ms", "1000", "--run-ms", "3500"]),
        Duration::from_secs(60),
    );
    assert_eq!(j["shuffle"], true);
    let worst = check_failures(&j, &[3, 4], 2000.0);
    eprintln!("two consecutive kills: consistent after {worst} ms");
    no_false_positives(&j);
}

#[test]
fn two_spread_kills() {
    let j = run(
        8,
        &args(&["--kill", "1,6", "--after-ms", "1000", "--run-ms", "3500"]),
        Duration::from_secs(60),
    );
    check_failures(&j, &[1, 6], 2000.0);
    no_false_positives(&j);
}

#[test]
fn n_minus_2_consecutive_kills_then_shrink() {
    let j = run(
        8,
        &args(&[
            "--kill",
            "1,2,3,4,5,6",
            "--after-ms",
            "1000",
            "--run-ms",
            "5000",
            "--shrink",
        ]),
        Duration::from_secs(90),
    );
    check_failures(&j, &[1, 2, 3, 4, 5, 6], 4000.0);
    no_false_positives(&j);
    for s in j["shrink"].as_array().unwrap() {
        assert_eq!(
            s[1].as_i64(),
            Some(2),
            "shrunk communicator of the wrong size: {j}"
        );
    }
    assert_eq!(j["shrink"].as_array().unwrap().len(), 2);
}

#[test]
fn n_minus_2_spread_kills_including_rank_0() {
    let j = run(
        8,
        &args(&[
            "--kill",
            "0,1,3,4,6,7",
            "--after-ms",
            "1000",
            "--run-ms",
            "5000",
            "--shrink",
        ]),
        Duration::from_secs(90),
    );
    check_failures(&j, &[0, 1, 3, 4, 6, 7], 4000.0);
    no_false_positives(&j);
    for s in j["shrink"].as_array().unwrap() {
        assert_eq!(s[1].as_i64(), Some(2), "{j}");
    }
}

#[test]
fn shrink_completes_when_a_member_dies_during_it() {
    // Rank 4 kills itself inside the shrink, after the member list (with it) was decided,
    // just before MPI_Comm_create_group: the others' create_group cannot complete; they
    // must notice, start a new round without rank 4, and finish.
    let j = run(
        8,
        &args(&[
            "--kill",
            "1",
            "--after-ms",
            "500",
            "--run-ms",
            "2500",
            "--die-in-shrink",
            "4",
        ]),
        Duration::from_secs(90),
    );
    check_failures(&j, &[1, 4], 4000.0);
    no_false_positives(&j);
    let shrink = j["shrink"].as_array().unwrap();
    assert_eq!(shrink.len(), 6, "{j}");
    for s in shrink {
        assert_eq!(
            s[1].as_i64(),
            Some(6),
            "shrunk communicator of the wrong size: {j}"
        );
    }
}

#[test]
fn relay_killed_during_a_broadcast() {
    // Ring of 8 with shuffle: positions hold ranks [0,5,2,7,4,1,6,3]. Rank 2 dies; its
    // observer 7 broadcasts; in the chord tree from 7, rank 3 relays to 0 and 5. Rank 3
    // kills itself as soon as it gets the notice, before forwarding it.
    let j = run(
        8,
        &args(&[
            "--kill",
            "2",
            "--kill-on-notice",
            "3",
            "--after-ms",
            "1000",
            "--run-ms",
            "4500",
        ]),
        Duration::from_secs(60),
    );
    assert_eq!(
        j["ring"],
        serde_json::json!([0, 5, 2, 7, 4, 1, 6, 3]),
        "ring changed: update this test's premise"
    );
    check_failures(&j, &[2, 3], 3000.0);
    no_false_positives(&j);
    assert!(
        j["relay_repairs"].as_u64().unwrap() >= 1,
        "the dead relay's range was not repaired: {j}"
    );
}

#[test]
fn kill_with_bmg_and_hba() {
    for algo in ["bmg", "hba"] {
        let j = run(
            8,
            &args(&[
                "--kill",
                "2,3",
                "--after-ms",
                "1000",
                "--run-ms",
                "3500",
                "--bcast",
                algo,
            ]),
            Duration::from_secs(60),
        );
        assert_eq!(j["bcast"], algo);
        check_failures(&j, &[2, 3], 2000.0);
        no_false_positives(&j);
    }
}

#[test]
fn stalled_rank_is_declared_dead_then_readmitted() {
    let j = run(
        8,
        &args(&[
            "--stall",
            "2",
            "--after-ms",
            "1000",
            "--for-ms",
            "2000",
            "--run-ms",
            "5000",
        ]),
        Duration::from_secs(60),
    );
    assert_eq!(j["failures"].as_array().unwrap().len(), 0, "{j}");
    assert_eq!(survivors(&j).len(), 8);
    let fps = j["false_positives"].as_array().unwrap();
    assert_eq!(fps.len(), 1, "{j}");
    let fp = &fps[0];
    assert_eq!(fp["rank"], 2);
    assert_eq!(fp["stalled"], true);
    assert_eq!(fp["readmitted"], true, "{j}");
    let declared = fp["declared_dead_ms"].as_f64().unwrap();
    assert!(
        (900.0..2000.0).contains(&declared),
        "declared dead {declared} ms after SIGSTOP: {j}"
    );
    let readmitted = fp["readmitted_ms"].as_f64().unwrap();
    assert!(
        readmitted > 2000.0 && readmitted < 3500.0,
        "re-admitted {readmitted} ms after SIGSTOP: {j}"
    );
}

#[test]
fn idle_30s_under_cpu_load_has_no_false_positive() {
    // 4 ranks, each burning 8 ms of every 10 ms in its main thread, plus two spinning
    // threads here: about 5 busy threads on 2 cores for 30 s, period 100 ms, timeout 500 ms.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hogs: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            })
        })
        .collect();
    let j = run(
        4,
        &[
            "--period",
            "100",
            "--timeout",
            "500",
            "--timestep",
            "20",
            "--run-ms",
            "30000",
            "--busy",
            "8",
        ],
        Duration::from_secs(120),
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for h in hogs {
        h.join().unwrap();
    }
    assert_eq!(j["failures"].as_array().unwrap().len(), 0, "{j}");
    no_false_positives(&j);
    assert_eq!(survivors(&j).len(), 4);
}

#[test]
fn invalid_configuration_is_rejected_naming_the_variable() {
    // (mpirun --enable-recovery exits 0 even when a rank exits with an error code, so the
    // error is checked in the output: the last stdout line is {"error": ...}.)
    for (env, var) in [
        (
            vec![
                ("OMPCLUSTER_HB_PERIOD", "5000"),
                ("OMPCLUSTER_HB_TIMEOUT", "1000"),
            ],
            "OMPCLUSTER_HB_PERIOD",
        ),
        (
            vec![("OMPCLUSTER_HB_TIMEOUT", "soon")],
            "OMPCLUSTER_HB_TIMEOUT",
        ),
        (
            vec![("OMPCLUSTER_HB_TIMESTEP", "0")],
            "OMPCLUSTER_HB_TIMESTEP",
        ),
    ] {
        let r = run_env(1, &[], &env, Duration::from_secs(30));
        let err = r.json["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no error reported for {env:?}:\n{}", r.stdout));
        assert!(err.contains(var), "error does not name {var}: {err}");
        assert!(
            r.stderr.contains(var),
            "stderr does not name {var}:\n{}",
            r.stderr
        );
        assert!(r.json.get("ranks").is_none());
    }
}

#[test]
fn disabled_detector_runs_and_reports_nothing() {
    let r = run_env(
        2,
        &["--run-ms", "500"],
        &[("OMPCLUSTER_FT_DISABLE", "1")],
        Duration::from_secs(30),
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(
        r.json["failures"].as_array().map(|a| a.len()),
        Some(0),
        "{}",
        r.stdout
    );
    assert_eq!(r.json["broadcast_messages"], 0);
}
