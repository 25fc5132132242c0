//! The run's timeline (`OMPCLUSTER_TRACE`) and its picture (`ompcluster-trace plot`), for real:
//! the matmul example under `ompcluster-run`, the trace read back in the Chrome trace-event
//! format and compared with the run report written by the same run, then drawn. The run with
//! checkpoints takes them through the store `OMPCLUSTER_TEST_STORE` names (see
//! tests/checkpoints.rs; `scripts/test-veloc.sh` runs it with VeloC).

use ompcluster_tests::{ckpt_env, describe, env_refs, launcher, matmul_example, run, stdout, work_dir, Report};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use timeline::{Cat, Summary, TraceFile};

/// Run the matmul example with a trace and a report; returns (trace, report, directory).
fn traced_run(np: u32, args: &[&str], envs: &[(&str, &str)]) -> (TraceFile, Report, tempfile::TempDir) {
    let dir = tempfile::tempdir_in(work_dir()).unwrap();
    let (trace, report) = (dir.path().join("run.json"), dir.path().join("report.json"));
    let (t, r) = (trace.display().to_string(), report.display().to_string());
    let mut all = envs.to_vec();
    all.push(("OMPCLUSTER_TRACE", &t));
    all.push(("OMPCLUSTER_REPORT", &r));
    let o = run(np, matmul_example(), args, &all);
    assert!(o.status.success() && stdout(&o).contains("result correct"), "{}", describe(&o));
    // Valid JSON first, whatever our reader thinks of it.
    let raw: Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).expect("the trace is JSON");
    assert!(raw["traceEvents"].is_array(), "the JSON object form of the format: {{\"traceEvents\": [...]}}");
    let file = TraceFile::read(&trace).unwrap_or_else(|e| panic!("{e}"));
    let report = Report::read(&report).unwrap_or_else(|e| panic!("{e}"));
    (file, report, dir)
}

/// The report's regions per worker, leaving out workers that ran none.
fn report_tasks(report: &Report) -> BTreeMap<String, u64> {
    report.counts.tasks_per_worker.iter().filter(|(_, n)| **n > 0).map(|(k, n)| (k.clone(), *n)).collect()
}

fn plot(trace: &TraceFile, dir: &Path) -> (String, String) {
    let json = dir.join("again.json");
    std::fs::write(&json, serde_json::to_string(trace).unwrap()).unwrap();
    let svg: PathBuf = dir.join("run.svg");
    let o = Command::new(launcher().with_file_name("ompcluster-trace")).arg("plot").arg(&json).arg("-o").arg(&svg).output().unwrap();
    assert!(o.status.success(), "{}", describe(&o));
    (std::fs::read_to_string(&svg).unwrap(), String::from_utf8_lossy(&o.stderr).into_owned())
}

#[test]
fn the_trace_shows_each_workers_tasks_as_the_report_counts_them() {
    // Round robin: every worker runs regions, and blocks move worker to worker.
    let (t, report, dir) = traced_run(4, &["512", "128"], &[("OMPCLUSTER_SCHEDULER", "roundrobin")]);
    let s = Summary::of(&t);
    assert_eq!(s.counts.tasks_per_worker, report_tasks(&report), "kernel spans per worker against the report");
    assert_eq!(s.counts.tasks_per_worker.len(), 3, "all three workers ran regions: {s:?}");
    assert_eq!(s.counts.bytes_submitted, report.counts.bytes_submitted);
    assert_eq!(s.counts.bytes_retrieved, report.counts.bytes_retrieved);
    assert_eq!(s.counts.bytes_exchanged, report.counts.bytes_exchanged);
    assert!(s.counts.bytes_exchanged > 0, "round robin moves blocks between workers");
    assert_eq!(s.calls.get("launch_kernel").copied(), Some(report.tasks_executed), "{s:?}");
    // (libomptarget calls the `_async` forms when the plugin exports `synchronize`, as ours does.)
    let calls = |name: &str| s.calls.get(name).copied().unwrap_or(0) + s.calls.get(&format!("{name}_async")).copied().unwrap_or(0);
    assert!(calls("data_submit") > 0 && calls("data_retrieve") > 0, "{s:?}");
    assert!(s.failed_ranks.is_empty() && s.recoveries == 0 && s.counts.tasks_reexecuted == 0);
    // Times: inside the run, on the report's clock.
    let wall_us = report.wall_seconds * 1e6;
    for e in t.trace_events.iter().filter(|e| e.ph == "X") {
        assert!(e.ts.unwrap() + e.dur.unwrap() <= wall_us + 1.0, "{e:?} ends after the run ({wall_us} us)");
    }
    // Kernels on workers only, each named and with its time in the kernel; transfers sized.
    for e in t.of(Cat::Kernel) {
        assert!((1..4).contains(&e.pid), "{e:?}");
        assert!(e.name.starts_with("__omp_offloading_"), "named after its kernel: {e:?}");
        assert!(e.args.as_ref().unwrap()["kernel_us"].as_f64().unwrap() <= e.dur.unwrap() + 1.0, "{e:?}");
    }
    for cat in [Cat::Submit, Cat::Retrieve, Cat::Exchange] {
        assert!(t.of(cat).all(|e| e.args.as_ref().unwrap()["bytes"].as_u64().unwrap() > 0), "{cat:?}");
    }
    for w in 1..4 {
        assert_eq!(t.name_of(w, None), Some(format!("worker {w}").as_str()));
    }
    // Spans sharing a track never overlap (what the format needs to show them).
    let mut by_track: BTreeMap<(i64, i64), Vec<(f64, f64)>> = BTreeMap::new();
    for e in t.trace_events.iter().filter(|e| e.ph == "X") {
        by_track.entry((e.pid, e.tid.unwrap())).or_default().push((e.ts.unwrap(), e.ts.unwrap() + e.dur.unwrap()));
    }
    for (track, mut spans) in by_track {
        spans.sort_by(|a, b| a.0.total_cmp(&b.0));
        assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0 + 1e-6), "overlap on {track:?}: {spans:?}");
    }
    let (svg, said) = plot(&t, dir.path());
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    for w in 1..4 {
        assert!(svg.contains(&format!("worker {w}: kernels")), "row of worker {w}");
    }
    assert!(said.contains("0 failures marked"), "{said}");
}

#[test]
fn the_trace_marks_failures_checkpoints_and_what_recovery_ran_again() {
    let ck = tempfile::tempdir_in(work_dir()).unwrap();
    let mut envs = ckpt_env(&ck.path().join("ckpt"), "0.02");
    envs.push(("OMPCLUSTER_FT_INJECT".into(), "kill:rank=1:after_tasks=40".into()));
    envs.push(("OMPCLUSTER_SCHEDULER".into(), "roundrobin".into()));
    let (t, report, dir) = traced_run(4, &["512", "64"], &env_refs(&envs));
    let s = Summary::of(&t);
    assert_eq!(s.failed_ranks, vec![1]);
    assert_eq!(s.recoveries as usize, report.recoveries.len());
    assert!(s.recoveries >= 1);
    assert_eq!(s.counts.tasks_reexecuted, report.counts.tasks_reexecuted);
    assert_eq!(s.checkpoints as usize, report.checkpoint_pauses_seconds.len());
    assert!(s.checkpoints >= 1, "checkpoints every 0.02 s: {report:?}");
    assert_eq!(s.counts.tasks_per_worker, report_tasks(&report));
    // The failure is where the report says the head learnt of it.
    let at = t.of(Cat::Failure).next().unwrap().ts.unwrap() / 1e6;
    let reported = report.failures.first().expect("a failure").at_seconds;
    assert!((at - reported).abs() < 0.01, "failure at {at} s in the trace, {reported} s in the report");
    // Re-runs are on survivors.
    assert!(t.of(Cat::Rerun).all(|e| e.pid == 2 || e.pid == 3));
    let (svg, said) = plot(&t, dir.path());
    assert!(svg.contains("rank 1 failed"));
    assert!(said.contains("1 failures marked"), "{said}");
}
