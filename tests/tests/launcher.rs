//! The launcher: exit codes, refusals with a one-line message, and a worker killed mid-run.

use ompcluster_tests::{compile, compile_plain, describe, launcher, run, stderr, stdout, Job, DEFAULT_TIMEOUT, NPS};
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

#[test]
fn exit_code_is_forwarded() {
    let prog = compile("exit3.c");
    for np in NPS {
        let o = run(np, &prog, &[], &[]);
        assert_eq!(o.status.code(), Some(3), "-np {np}: the program exits with 3\n{}", describe(&o));
        assert!(stdout(&o).contains("x=2"), "the region did not run\n{}", describe(&o));
    }
}

/// A refusal: non-zero, nothing on stdout, one line on stderr that starts with
/// `ompcluster-run:` and contains `phrase`, and no hang. (Its checks run `ldd` on the program
/// and the plugin: a clean-clone run with another test's job on both cores took 12.3 s to
/// refuse a plugin, against a bound of 10 s then. Nothing of the program ran: its stdout is
/// empty.)
fn assert_refused(o: &Output, took: Duration, phrase: &str) {
    assert!(!o.status.success(), "expected a failure\n{}", describe(o));
    assert!(took < Duration::from_secs(60), "took {took:?} to refuse\n{}", describe(o));
    let err = stderr(o);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected a one-line message\n{}", describe(o));
    assert!(lines[0].starts_with("ompcluster-run:"), "{}", describe(o));
    assert!(
        lines[0].to_lowercase().contains(&phrase.to_lowercase()),
        "the message should say {phrase:?}\n{}",
        describe(o)
    );
    assert!(stdout(o).is_empty(), "{}", describe(o));
}

fn timed(np: u32, prog: &Path) -> (Output, Duration) {
    timed_env(np, prog, &[])
}

/// Run and time the job itself: the clock starts once the job holds the global run lock
/// (`Job::spawn` waits for it), so time spent queued behind other tests does not count.
fn timed_env(np: u32, prog: &Path, envs: &[(&str, &str)]) -> (Output, Duration) {
    let job = Job::spawn(np, prog, &[], envs);
    let t = Instant::now();
    let o = job.wait(DEFAULT_TIMEOUT);
    (o, t.elapsed())
}

/// A bad `OMPCLUSTER_*` value stops the job before `main` (the program would exit with 3)
/// with a message naming the variable.
#[test]
fn refuses_bad_settings() {
    let prog = compile("exit3.c");
    for (var, value) in [
        ("OMPCLUSTER_FRAGMENT_SIZE", "1000"),
        ("OMPCLUSTER_FRAGMENT_SIZE", "lots"),
        ("OMPCLUSTER_SCHEDULER", "bogus"),
        ("OMPCLUSTER_VERBOSE", "maybe"),
        ("OMPCLUSTER_FT_BUDDY_INTERVAL", "1s"),
        ("OMPCLUSTER_FT_BUDDY_INTERVAL", "-1"),
        ("OMPCLUSTER_FT_BUDDY_MEMORY", "lots"),
        ("OMPCLUSTER_FT_BUDDY_SHARE", "0"),
        ("OMPCLUSTER_FT_BUDDY_SHARE", "150"),
        ("OMPCLUSTER_FT_SPARES", "two"),
    ] {
        let (o, took) = timed_env(3, &prog, &[(var, value)]);
        assert_ne!(o.status.code(), Some(3), "{var}={value}: main ran\n{}", describe(&o));
        assert!(!stdout(&o).contains("x=2"), "{var}={value}: main ran\n{}", describe(&o));
        assert_refused(&o, took, var);
    }
    // The smallest fragment size is accepted.
    let o = run(2, &prog, &[], &[("OMPCLUSTER_FRAGMENT_SIZE", "1024")]);
    assert_eq!(o.status.code(), Some(3), "{}", describe(&o));
}

/// Spares must leave at least one worker to run regions.
#[test]
fn refuses_spares_that_leave_no_worker() {
    let prog = compile("exit3.c");
    for (np, spares) in [(2, "1"), (4, "3"), (4, "9")] {
        let (o, took) = timed_env(np, &prog, &[("OMPCLUSTER_FT_SPARES", spares)]);
        assert_refused(&o, took, "OMPCLUSTER_FT_SPARES");
    }
    let o = run(4, &prog, &[], &[("OMPCLUSTER_FT_SPARES", "2")]);
    assert_eq!(o.status.code(), Some(3), "{}", describe(&o));
}

#[test]
fn refuses_np_1() {
    let prog = compile("exit3.c");
    let (o, took) = timed(1, &prog);
    assert_refused(&o, took, "at least 2");
}

#[test]
fn refuses_program_not_compiled_for_offloading() {
    let prog = compile_plain("plain.c");
    let (o, took) = timed(2, &prog);
    assert_refused(&o, took, "not compiled for offloading");
    assert!(stderr(&o).contains("-fopenmp-targets="), "should say how to compile it\n{}", describe(&o));
}

#[test]
fn refuses_missing_program_name() {
    let (o, took) = timed(2, Path::new("no-such-ompcluster-program"));
    assert_refused(&o, took, "not found");
}

#[test]
fn refuses_missing_program_path() {
    let dir = tempfile::tempdir().unwrap();
    let (o, took) = timed(2, &dir.path().join("missing"));
    assert!(!o.status.success(), "{}", describe(&o));
    let err = stderr(&o).to_lowercase();
    assert!(
        err.contains("not found") || err.contains("no such file") || err.contains("does not exist"),
        "a missing file should be reported as missing\n{}",
        describe(&o)
    );
    assert_refused(&o, took, "");
}

/// Start a run of slow tasks on 4 ranks with fault tolerance off, and return it once every
/// rank runs and the tasks got going, with each rank's pid.
fn start_slow_job(prog: &std::path::Path) -> (Job, Vec<(u32, i32)>) {
    // About 125 s of work (20,000 regions of 50 ms, 8 at a time): the failure lands mid-run
    // even when finding the ranks is slow on a loaded machine.
    let mut job = Job::spawn(4, prog, &["20000", "50"], &[("OMPCLUSTER_FT_DISABLE", "1")]);
    let t0 = Instant::now();
    let ranks = loop {
        let r = job.ranks(prog);
        if r.len() == 4 {
            break r;
        }
        if t0.elapsed() > Duration::from_secs(30) || job.wait_timeout(Duration::ZERO).is_some() {
            job.kill();
            panic!("the 4 ranks did not show up (found {r:?})");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    std::thread::sleep(Duration::from_millis(2000));
    assert!(job.wait_timeout(Duration::ZERO).is_none(), "the job ended before the failure");
    (job, ranks)
}

/// With fault tolerance off (`OMPCLUSTER_FT_DISABLE=1`), a worker killed in the middle of a
/// run ends the job within 30 s, with a non-zero exit code and a message naming that rank, as
/// before recovery existed. (With it on, the default, `recovery.rs` tests that the job goes on.)
#[test]
fn killed_worker_ends_the_job_when_fault_tolerance_is_off() {
    let prog = compile("sleepy.c");
    let _ = launcher();
    let (job, ranks) = start_slow_job(&prog);
    let (victim_rank, victim) = ranks[2];
    assert_ne!(victim_rank, 0);
    // SAFETY: kill has no memory-safety preconditions; the pid is a rank of our job.
    unsafe { libc::kill(victim, libc::SIGKILL) };
    let hit_at = Instant::now();
    let o = job.wait(Duration::from_secs(30));
    let took = hit_at.elapsed();
    eprintln!("SIGKILL to rank {victim_rank} (pid {victim}); the job ended {took:?} later with {}", o.status);
    assert!(!o.status.success(), "the job succeeded although rank {victim_rank} failed\n{}", describe(&o));
    let all = format!("{}{}", stdout(&o), stderr(&o));
    assert!(
        all.contains(&format!("rank {victim_rank}")),
        "no message names rank {victim_rank} (after {took:?})\n{}",
        describe(&o)
    );
    assert!(!stdout(&o).contains("PASS"), "{}", describe(&o));
}

/// An invalid fault-injection spec is refused before any process starts, naming the variable.
#[test]
fn refuses_bad_fault_injection() {
    let prog = compile("exit3.c");
    for spec in ["kill:rank=3:after_ms=10", "kill:rank=1:whenever", "boom:rank=1:after_ms=1"] {
        let (o, took) = timed_env(3, &prog, &[("OMPCLUSTER_FT_INJECT", spec)]);
        assert_refused(&o, took, "OMPCLUSTER_FT_INJECT");
    }
}

/// A region that crashes in device code (the 4th): the job ends with a non-zero code and one
/// message naming the worker and the fault, the head got no further than region 2, and the
/// region is not run again on the other workers (a program fault, not a node failure): only
/// the worker it crashed on stops. Bad pointer, trap instruction, abort(), and a fault on one
/// of libomp's threads inside the region's `parallel for` (issue 10, item 4).
#[test]
fn crashing_region_ends_the_job() {
    let cases = [
        ("crash.c", vec!["3"], "SIGABRT"),
        ("device_fault.c", vec!["0", "3"], "SIGSEGV, an invalid memory access at 0x8"),
        ("device_fault.c", vec!["1", "3"], "SIGILL"),
        ("device_fault.c", vec!["2", "3"], "SIGABRT"),
        ("device_fault.c", vec!["3", "3"], "SIGSEGV, an invalid memory access at 0x8"),
    ];
    for (src, args, what) in cases {
        let prog = compile(src);
        for np in [2, 4] {
            let o = ompcluster_tests::run_timeout(np, &prog, &args, &[], Duration::from_secs(60));
            assert!(!o.status.success(), "{}", describe(&o));
            let out = stdout(&o);
            assert!(out.contains("region 2 done") && !out.contains("region 3 done"), "{}", describe(&o));
            assert!(!out.contains("PASS"), "{}", describe(&o));
            let err = stderr(&o);
            let named = (1..np).any(|r| err.contains(&format!("worker {r}: the target region crashed in device code on this worker ({what}")));
            assert!(named, "no message names the worker and the fault ({what})\n{}", describe(&o));
            let stopped = err.matches("stopping after a crash in device code").count();
            assert!(stopped <= 1, "the region ran again on other workers\n{}", describe(&o));
        }
    }
}

/// The program itself (rank 0) dies of a signal: the launcher dies of the same signal (as the
/// program run alone would: LLVM's `not --crash` tests check that), with fault tolerance on,
/// where mpirun exits 0 whatever rank 0 did, and off.
#[test]
fn a_crash_of_the_program_is_the_launchers_crash() {
    use std::os::unix::process::ExitStatusExt;
    let prog = compile("head_crash.c");
    for (mode, sig) in [("0", libc::SIGABRT), ("1", libc::SIGABRT), ("2", libc::SIGSEGV)] {
        for disable in ["0", "1"] {
            let o = ompcluster_tests::run_timeout(3, &prog, &[mode], &[("OMPCLUSTER_FT_DISABLE", disable)], Duration::from_secs(60));
            assert!(stdout(&o).contains("region done, x = 2") && !stdout(&o).contains("not reached"), "{}", describe(&o));
            assert_eq!(o.status.signal(), Some(sig), "mode {mode}, OMPCLUSTER_FT_DISABLE={disable}\n{}", describe(&o));
        }
    }
}

/// The program crashes while a worker is frozen (SIGSTOP), before its failure detector
/// declares that worker dead (1 s): the other workers notice the dead head and exit, the
/// frozen one never would, and mpirun in its recovery mode would wait for it forever (it did,
/// before the launcher watched for this). The launcher stops the job once the head has been
/// dead for twice the detector's timeout and 5 s more, and still dies of the program's signal.
#[test]
fn a_crash_of_the_program_while_a_worker_is_frozen_ends_the_job() {
    use std::os::unix::process::ExitStatusExt;
    let prog = compile("head_crash.c");
    let dir = tempfile::tempdir_in(ompcluster_tests::work_dir()).unwrap();
    let ready = dir.path().join("region-done");
    let mut job = Job::spawn(4, &prog, &["3", ready.to_str().unwrap()], &[("OMPCLUSTER_HB_PERIOD", "100"), ("OMPCLUSTER_HB_TIMEOUT", "1000")]);
    let t0 = Instant::now();
    // Once a region ran, every rank is past its start-up.
    while !ready.exists() {
        assert!(t0.elapsed() < Duration::from_secs(30) && job.wait_timeout(Duration::ZERO).is_none(), "no region ran");
        std::thread::sleep(Duration::from_millis(20));
    }
    let frozen = job.ranks(&prog).iter().find(|(r, _)| *r == 2).map(|&(_, pid)| pid).expect("rank 2 runs");
    // SAFETY: kill has no memory-safety preconditions; the pid is a rank of our job.
    unsafe { libc::kill(frozen, libc::SIGSTOP) };
    let o = job.wait(Duration::from_secs(60));
    assert_eq!(o.status.signal(), Some(libc::SIGABRT), "{}", describe(&o));
    assert!(stderr(&o).contains("stopping the job"), "{}", describe(&o));
}

/// A worker frozen (SIGSTOP) once it has answered the head's EXIT: nothing waits for it any
/// more, so nothing declares it dead, and mpirun in its recovery mode would wait for it
/// forever (a freeze from outside landing there hung a CI run). The launcher stops the job
/// once the program has ended and the job still runs twice the detector's timeout and 5 s
/// later, and exits with the program's status.
#[test]
fn a_worker_frozen_as_the_job_ends_does_not_keep_it_running() {
    let prog = compile("exit3.c");
    let envs = [("OMPCLUSTER_HB_PERIOD", "100"), ("OMPCLUSTER_HB_TIMEOUT", "1000"), ("OMPCLUSTER_FT_INJECT", "stop:rank=2:during=exit")];
    let o = Job::spawn(4, &prog, &[], &envs).wait(Duration::from_secs(60));
    assert_eq!(o.status.code(), Some(3), "{}", describe(&o));
    assert!(stdout(&o).contains("x=2"), "{}", describe(&o));
    assert!(stderr(&o).contains("the program exited with status 3, but ranks of the job are still running"), "{}", describe(&o));
}

/// Build `lib<name>.so` from C `code` in a fresh directory (linked with `extra` flags).
fn shared_lib(dir: &Path, name: &str, code: &str, extra: &[&str]) -> std::path::PathBuf {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, code).unwrap();
    let out = dir.join(format!("lib{name}.so"));
    let o = std::process::Command::new("gcc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&out)
        .arg(&src)
        .args(extra)
        .output()
        .expect("gcc");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out
}

/// A plugin library that cannot load (a library it needs is missing) is refused before any
/// rank starts: otherwise libomptarget would run every region on each rank's own host and
/// each rank would run the whole program.
#[test]
fn a_plugin_that_cannot_load_is_refused_before_the_program_runs() {
    let dir = tempfile::tempdir_in(ompcluster_tests::work_dir()).unwrap();
    let dep = shared_lib(dir.path(), "gone", "int gone(void) { return 1; }", &[]);
    let lib_dir = format!("-L{}", dir.path().display());
    let broken = shared_lib(dir.path(), "needsgone", "int gone(void); int f(void) { return gone(); }", &[&lib_dir, "-lgone"]);
    std::fs::remove_file(dep).unwrap();
    let prog = compile("plain.c");
    let t0 = Instant::now();
    let o = run(2, &prog, &[], &[("OMPCLUSTER_PLUGIN", broken.to_str().unwrap())]);
    assert_refused(&o, t0.elapsed(), "libgone.so not found");
}

/// A plugin that loads but is not one (libomptarget skips it): every rank ran the program on
/// its own host. The launcher says so and fails, whatever the program printed.
#[test]
fn a_run_where_the_cluster_device_never_started_fails() {
    let dir = tempfile::tempdir_in(ompcluster_tests::work_dir()).unwrap();
    let not_plugin = shared_lib(dir.path(), "notaplugin", "int nothing_here(void) { return 0; }", &[]);
    let prog = compile("plain.c");
    for ft in ["0", "1"] {
        let o = run(2, &prog, &[], &[("OMPCLUSTER_PLUGIN", not_plugin.to_str().unwrap()), ("OMPCLUSTER_FT_DISABLE", ft)]);
        assert!(!o.status.success(), "FT_DISABLE={ft}: a run without the cluster device must fail\n{}", describe(&o));
        assert!(stderr(&o).contains("the cluster device never started on rank 0"), "{}", describe(&o));
    }
}

/// A VeloC configuration VeloC itself would reject (it ends every rank that reads it) is
/// refused by the launcher in one line, naming the file and the variable.
#[test]
fn refuses_a_veloc_configuration_without_a_mode() {
    let dir = tempfile::tempdir_in(ompcluster_tests::work_dir()).unwrap();
    let cfg = dir.path().join("veloc.cfg");
    std::fs::write(&cfg, format!("scratch = {0}/s\npersistent = {0}/p\n", dir.path().display())).unwrap();
    let prog = compile("exit3.c");
    let envs = [("OMPCLUSTER_CP_USEVELOC", "1"), ("OMPCLUSTER_CP_EXECCFG", cfg.to_str().unwrap())];
    let (o, took) = timed_env(2, &prog, &envs);
    assert_refused(&o, took, "`mode` key is missing");
    assert!(stderr(&o).contains("OMPCLUSTER_CP_EXECCFG") && stderr(&o).contains(cfg.to_str().unwrap()), "{}", describe(&o));
}

/// Open MPI's messages about a rank that died (which the runtime handles) do not reach the
/// user; with `OMPCLUSTER_MPI_NOISE=1` they do, which shows that the failure produced them.
#[test]
fn open_mpis_messages_about_a_dead_rank_are_kept_from_the_user() {
    let prog = compile("many_tasks.c");
    let kill = ("OMPCLUSTER_FT_INJECT", "kill:rank=1:after_tasks=700");
    let noisy = run(4, &prog, &["2000"], &[kill, ("OMPCLUSTER_MPI_NOISE", "1")]);
    ompcluster_tests::assert_pass(&noisy);
    assert!(stderr(&noisy).contains("recovered from the loss of rank 1"), "{}", describe(&noisy));
    assert!(stderr(&noisy).contains("PMIX ERROR: BAD-PARAM"), "Open MPI printed nothing about the dead rank: the case this test is for did not happen\n{}", describe(&noisy));
    let quiet = run(4, &prog, &["2000"], &[kill]);
    ompcluster_tests::assert_pass(&quiet);
    let err = stderr(&quiet);
    assert!(err.contains("worker rank 1 failed") && err.contains("recovered from the loss of rank 1"), "the runtime's own lines must stay\n{}", describe(&quiet));
    for noise in ["PMIX ERROR", "errno = 3", "failed to TCP connect"] {
        assert!(!err.contains(noise), "{noise:?} reached the user\n{}", describe(&quiet));
    }
    let bad = run(2, &prog, &["10"], &[("OMPCLUSTER_MPI_NOISE", "loud")]);
    assert_eq!(bad.status.code(), Some(2), "{}", describe(&bad));
    assert!(stderr(&bad).contains("OMPCLUSTER_MPI_NOISE=loud"), "{}", describe(&bad));
}

/// A misspelled `OMPCLUSTER_*` variable is named on stderr with the setting it probably
/// meant; the job runs (it is only a warning: the launcher cannot know every name a site uses).
#[test]
fn a_misspelled_setting_is_named_with_the_setting_it_probably_meant() {
    let prog = compile("exit3.c");
    let o = run(2, &prog, &[], &[("OMPCLUSTER_CP_INTERVALL", "0.5"), ("OMPCLUSTER_NO_SUCH_THING", "1")]);
    assert_eq!(o.status.code(), Some(3), "{}", describe(&o));
    let err = stderr(&o);
    assert!(
        err.contains("ompcluster-run: OMPCLUSTER_CP_INTERVALL is not a setting of ours, ignored (did you mean OMPCLUSTER_CP_INTERVAL?)"),
        "{}",
        describe(&o)
    );
    assert!(err.contains("ompcluster-run: OMPCLUSTER_NO_SUCH_THING is not a setting of ours, ignored\n"), "{}", describe(&o));
    // A known setting is no warning.
    let o = run(2, &prog, &[], &[("OMPCLUSTER_CP_INTERVAL", "0")]);
    assert!(!stderr(&o).contains("not a setting"), "{}", describe(&o));
}

/// libomp's registration of each rank (`/dev/shm/__KMP_REGISTERED_LIB_<pid>_<uid>`, which
/// libomp removes as it shuts down; our workers leave with `_exit`) and the launcher's private
/// directory do not outlive a job: one that ends normally, nor one whose worker was killed
/// and recovered from (the head removes what the dead rank left once it is reaped), nor one
/// whose worker was killed as the job ended, once it had answered the head's EXIT, when no
/// rank watches it any more (the launcher removes what it left).
#[test]
fn a_job_leaves_nothing_behind() {
    let prog = compile("sleepy.c");
    let registration = ompcluster_tests::libomp_registration;
    // (None, None): no failure; (Some(2), None): rank 2 SIGKILLed from outside in the middle;
    // (None, Some(inject)): rank 2 killed by injection as the job ends.
    for (kill, at_exit) in [(None, None), (Some(2u32), None), (None, Some("kill:rank=2:during=exit"))] {
        let mut envs = vec![("OMPCLUSTER_HB_PERIOD", "100"), ("OMPCLUSTER_HB_TIMEOUT", "1000")];
        envs.extend(at_exit.map(|i| ("OMPCLUSTER_FT_INJECT", i)));
        let kill = kill.or(at_exit.map(|_| 2));
        let mut job = Job::spawn(4, &prog, &["4000", "50"], &envs);
        let t0 = Instant::now();
        let ranks = loop {
            let r = job.ranks(&prog);
            if r.len() == 4 && r.iter().all(|&(_, pid)| registration(pid).exists()) {
                break r;
            }
            if t0.elapsed() > Duration::from_secs(30) || job.wait_timeout(Duration::ZERO).is_some() {
                job.kill();
                panic!("the 4 ranks and their libomp registrations did not show up (found {r:?})");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // The launcher's private directory (it holds the status file the ranks are told of).
        let status = ompcluster_tests::proc_env(ranks[0].1, "OMPCLUSTER_EXIT_STATUS_FILE").expect("the status file of the job");
        let launcher_dir = Path::new(&status).parent().expect("in a directory").to_path_buf();
        assert!(launcher_dir.is_dir(), "{launcher_dir:?}");
        if let (Some(k), None) = (kill, at_exit) {
            // Past start-up (its rank processes and libomp start before MPI does).
            std::thread::sleep(Duration::from_secs(2));
            assert!(job.wait_timeout(Duration::ZERO).is_none(), "the job ended before the failure");
            let pid = ranks.iter().find(|&&(r, _)| r == k).expect("the rank").1;
            // SAFETY: kill has no memory-safety preconditions; the pid is a rank of our job.
            assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0, "SIGKILL to rank {k}");
        }
        let o = job.wait(DEFAULT_TIMEOUT);
        assert!(o.status.success() && stdout(&o).contains("PASS"), "kill {kill:?} {at_exit:?}\n{}", describe(&o));
        if kill.is_some() && at_exit.is_none() {
            assert!(stderr(&o).contains("recovered from the loss of rank 2"), "no recovery\n{}", describe(&o));
        }
        if at_exit.is_some() {
            // The fault happened: rank 2 is gone, killed.
            let pid = ranks.iter().find(|&&(r, _)| r == 2).expect("rank 2").1;
            assert!(!Path::new(&format!("/proc/{pid}")).exists(), "rank 2 (pid {pid}) still there\n{}", describe(&o));
        }
        let left: Vec<_> = ranks.iter().map(|&(_, pid)| registration(pid)).filter(|p| p.exists()).collect();
        assert!(left.is_empty(), "kill {kill:?} {at_exit:?}: left behind {left:?}\n{}", describe(&o));
        assert!(!launcher_dir.exists(), "kill {kill:?} {at_exit:?}: left behind {launcher_dir:?}");
    }
}

/// A program made by gcc that looks like an offloading program to the launcher (it has a
/// `.llvm.offloading` section), with `extra` C code and gcc flags.
fn fake_offloading_program(dir: &Path, name: &str, extra_code: &str, flags: &[&str]) -> std::path::PathBuf {
    let src = dir.join(format!("{name}.c"));
    let code = format!(
        "__attribute__((section(\".llvm.offloading\"), used)) static const char image[8] = \"x\";\n{extra_code}\nint main(void) {{ return 0; }}\n"
    );
    std::fs::write(&src, code).unwrap();
    let out = dir.join(name);
    let o = std::process::Command::new("gcc").arg("-o").arg(&out).arg(&src).args(flags).output().expect("gcc");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out
}

/// A program of clang-20 or later (offload entries libomptarget 16 cannot read: LLVM 21's
/// `llvm_offload_entries` section here, as clang-22 writes it) is refused before any rank
/// starts, naming its compiler and the ones the cluster serves.
#[test]
fn refuses_a_program_of_clang_22_naming_it_and_the_compilers_served() {
    let dir = tempfile::tempdir_in(ompcluster_tests::work_dir()).unwrap();
    let entries = "__attribute__((section(\"llvm_offload_entries\"), used)) static const char entries[56] = {0};\n\
                   __asm__(\".ident \\\"Debian clang version 22.1.8 (1~deb12u1)\\\"\");";
    let prog = fake_offloading_program(dir.path(), "from_clang22", entries, &[]);
    let (o, took) = timed(2, &prog);
    assert_refused(&o, took, "compiled by clang-22");
    assert!(stderr(&o).contains("clang-16 to clang-19 (C, C++) and flang-19 (Fortran)"), "{}", describe(&o));
}

/// A program linked against another LLVM's libomptarget (clang-19 without the wrapper needs
/// `libomptarget.so.19.1`, which loads no plugin from outside) is named as such, even where
/// that library exists, before any rank starts.
#[test]
fn refuses_a_program_that_needs_another_libomptarget() {
    let dir = tempfile::tempdir_in(ompcluster_tests::work_dir()).unwrap();
    shared_lib(dir.path(), "omptarget19", "int __tgt_register_lib(void *d) { return 0; }", &["-Wl,-soname,libomptarget.so.19.1"]);
    std::fs::rename(dir.path().join("libomptarget19.so"), dir.path().join("libomptarget.so.19.1")).unwrap();
    let lib = dir.path().join("libomptarget.so.19.1");
    let rpath = format!("-Wl,-rpath,{}", dir.path().display());
    let prog = fake_offloading_program(
        dir.path(),
        "from_clang19",
        "__asm__(\".ident \\\"Debian clang version 19.1.7 (3~deb12u1)\\\"\"); int __tgt_register_lib(void *);\nvoid *keep = (void *)&__tgt_register_lib;",
        &[lib.to_str().unwrap(), &rpath],
    );
    let (o, took) = timed(2, &prog);
    assert_refused(&o, took, "needs libomptarget.so.19.1, the offloading runtime of LLVM 19");
    assert!(stderr(&o).contains("ompcluster-cc"), "{}", describe(&o));
}

/// A program whose libraries do not load is named with the missing library, not as a plugin
/// that did not load.
#[test]
fn a_program_whose_libraries_do_not_load_is_named_with_them() {
    let dir = tempfile::tempdir_in(ompcluster_tests::work_dir()).unwrap();
    let gone = shared_lib(dir.path(), "gone", "int gone(void) { return 1; }", &[]);
    let lib_dir = format!("-L{}", dir.path().display());
    let prog = fake_offloading_program(dir.path(), "needs_gone", "int gone(void); int (*keep)(void) = gone;", &[&lib_dir, "-lgone"]);
    std::fs::remove_file(gone).unwrap();
    let (o, took) = timed(2, &prog);
    assert_refused(&o, took, "cannot start: libgone.so not found");
}
