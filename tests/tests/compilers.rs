//! Programs of every compiler the cluster serves, built with the project's compile wrappers
//! (`ompcluster-cc`, `ompcluster-cxx`, `ompcluster-fortran`): the examples built by clang-19
//! give clang-16's results; Fortran programs built by flang-19 (saxpy, a blocked matrix
//! product, Jacobi iterations with a reduction) are right on 1 to 3 workers, spread over the
//! workers where the work allows, and survive a worker killed and one frozen.

use ompcluster_tests::{compile, compile_by, describe, example_by, launcher, run, run_with_report, stderr, stdout, test_seed, Rng, Toolchain, NPS};
use std::process::{Command, Output};

/// The examples' output line without its time (`matmul N=.. BS=.. tasks=..: 1.234 s, max
/// error 0: result correct`).
fn masked(o: &Output, prefix: &str) -> String {
    let out = stdout(o);
    let line = out.lines().find(|l| l.starts_with(prefix)).unwrap_or_default().to_string();
    match (line.find(": "), line.find(" s,")) {
        (Some(a), Some(b)) if a < b => format!("{}{}", &line[..a], &line[b + 2..]),
        _ => line,
    }
}

/// The examples compiled by clang-19 (KernelArgs version 3: every kernel takes a leading
/// `dyn_ptr`) print what clang-16's print, on 1 to 3 workers. Before the launch put a null
/// `dyn_ptr` first, their first region crashed a worker at address 0.
#[test]
fn examples_built_with_clang_19_give_the_results_of_clang_16() {
    for (name, args) in [("matmul", ["256", "64"]), ("cholesky", ["512", "64"])] {
        let old = example_by(name, Toolchain::Clang16);
        let new = example_by(name, Toolchain::Clang19);
        let want = run(3, &old, &args, &[]);
        assert!(want.status.success() && stdout(&want).contains("result correct"), "clang-16 {name}\n{}", describe(&want));
        for np in NPS {
            let got = run(np, &new, &args, &[]);
            assert!(got.status.success(), "clang-19 {name} -np {np}\n{}", describe(&got));
            assert_eq!(masked(&got, name), masked(&want, name), "clang-19 {name} -np {np}\n{}", describe(&got));
        }
    }
}

/// C and C++ test programs built by clang-19: structs with pointer members, globals,
/// `declare target` functions, teams, C++ with exceptions, and a `schedule(dynamic)` loop
/// (clang-19 then calls `__kmpc_dispatch_deinit`, which libomp 16 lacks: the wrapper and the
/// device runtime supply it).
#[test]
fn c_and_cxx_programs_built_with_clang_19_pass() {
    let mut failed = Vec::new();
    let programs: [(&str, &[&str]); 6] =
        [("structs.c", &[]), ("globals.c", &[]), ("teams.c", &[]), ("concurrent.c", &[]), ("cxx.cpp", &[]), ("device_new.cpp", &["8", "2"])];
    for (src, args) in programs {
        let prog = compile_by(src, Toolchain::Clang19);
        let o = run(3, &prog, args, &[]);
        if !(o.status.success() && stdout(&o).lines().any(|l| l.contains("PASS"))) {
            failed.push(format!("=== {src} (clang-19)\n{}", describe(&o)));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// The Fortran programs and the arguments of their runs here.
const FORTRAN: &[(&str, &[&str])] = &[("fsaxpy.f90", &["8"]), ("fmatmul.f90", &["4"]), ("fjacobi.f90", &["96", "60", "10"])];

/// Right on 1, 2 and 3 workers.
#[test]
fn fortran_programs_are_right_on_1_to_3_workers() {
    let mut failed = Vec::new();
    for (src, args) in FORTRAN {
        let prog = compile_by(src, Toolchain::Flang19);
        for np in NPS {
            let o = run(np, &prog, args, &[]);
            if !(o.status.success() && stdout(&o).lines().any(|l| l.contains("PASS"))) {
                failed.push(format!("=== {src} -np {np}\n{}", describe(&o)));
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// The device runtime as flang-19's device code uses it (`programs/fworkshare.f90`): a
/// parallel region on a team of `num_threads(3)` threads, serialized under a false `if`, a
/// loop split as the static schedule says, the implicit barrier after a worksharing loop
/// (which flang-19 does not emit on the device: without it the second loop read unwritten
/// elements in 3 runs of 3), a reduction.
#[test]
fn the_device_runtime_runs_flang_regions_as_the_specification_says() {
    let prog = compile_by("fworkshare.f90", Toolchain::Flang19);
    for np in [2, 3] {
        let o = run(np, &prog, &[], &[]);
        assert!(o.status.success() && stdout(&o).contains("fworkshare: PASS"), "-np {np}\n{}", describe(&o));
    }
}

/// Independent regions (saxpy's blocks, the matrix product's block products, from tasks) run
/// on more than one worker; with 3 workers, saxpy's 8 blocks use all three.
#[test]
fn fortran_regions_spread_over_the_workers() {
    for (src, args, at_least) in [("fsaxpy.f90", ["16"], 3), ("fmatmul.f90", ["4"], 2)] {
        let prog = compile_by(src, Toolchain::Flang19);
        let (o, r) = run_with_report(4, &prog, &args, &[("OMP_NUM_THREADS", "4")]);
        assert!(o.status.success() && stdout(&o).contains("PASS"), "{src}\n{}", describe(&o));
        let used = r.busy_workers();
        assert!(used >= at_least, "{src}: regions per worker {:?}, expected {at_least} workers or more", r.counts.tasks_per_worker);
    }
}

/// A worker killed after a random number of regions, then one frozen (never resumed), each
/// time one that runs regions in the failure-free run (a random one of them: Jacobi's chain
/// of regions on one buffer runs on one worker): each run prints what the failure-free run
/// printed and exits 0, and its report shows the failure.
#[test]
fn fortran_programs_survive_a_worker_killed_and_one_frozen() {
    let mut rng = Rng(test_seed("fortran_programs_survive_a_worker_killed_and_one_frozen"));
    let ft = [("OMPCLUSTER_HB_PERIOD", "100"), ("OMPCLUSTER_HB_TIMEOUT", "1000"), ("OMP_NUM_THREADS", "4")];
    // Regions each program runs (fsaxpy: one per block; fmatmul: nb^3; fjacobi: 2 per step and
    // one per residual), to pick moments inside the run.
    let regions = [("fsaxpy.f90", 8), ("fmatmul.f90", 64), ("fjacobi.f90", 126)];
    for (src, args) in FORTRAN {
        let prog = compile_by(src, Toolchain::Flang19);
        let (free, report) = run_with_report(4, &prog, args, &ft);
        assert!(free.status.success() && stdout(&free).contains("PASS"), "{src}\n{}", describe(&free));
        let busy: Vec<u64> = report.counts.tasks_per_worker.iter().filter(|(_, &n)| n > 0).filter_map(|(w, _)| w.parse().ok()).collect();
        assert!(!busy.is_empty(), "{src}: no worker ran regions: {report:?}");
        let total = regions.iter().find(|(s, _)| s == src).map(|&(_, n)| n).unwrap_or(8);
        for action in ["kill", "stop"] {
            let rank = busy[(rng.next() % busy.len() as u64) as usize];
            let after = 1 + rng.next() % (total * 2 / 3);
            let inject = format!("{action}:rank={rank}:after_tasks={after}");
            let mut envs = ft.to_vec();
            envs.push(("OMPCLUSTER_FT_INJECT", &inject));
            let (o, r) = run_with_report(4, &prog, args, &envs);
            assert!(o.status.success(), "{src} {inject}\n{}", describe(&o));
            assert_eq!(stdout(&o), stdout(&free), "{src} {inject}\n{}", describe(&o));
            assert!(!r.failures.is_empty(), "{src} {inject}: no failure in the report: {r:?}");
        }
    }
}

/// The wrappers print what they run (`-show`) and the compiler they wrap (`--version`), and
/// refuse a compiler the cluster does not serve before running it (a stand-in that says it
/// is clang-22).
#[test]
fn wrappers_show_their_command_and_refuse_clang_22() {
    let dir = launcher().parent().unwrap().to_path_buf();
    let o = Command::new(dir.join("ompcluster-fortran")).args(["-show", "-O2", "x.f90", "-o", "x"]).output().unwrap();
    let line = stdout(&o);
    assert!(o.status.success(), "{}", describe(&o));
    for part in ["flang-new-19 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu -O2 x.f90 -o x", "-L/usr/lib/llvm-16/lib", "--device-linker=x86_64-pc-linux-gnu=-lompcluster_devrtl"] {
        assert!(line.contains(part), "{part:?} not in {line}");
    }
    let o = Command::new(dir.join("ompcluster-c++")).arg("--version").output().unwrap();
    assert!(o.status.success() && stdout(&o).contains("ompcluster-c++") && stdout(&o).contains("clang version 16"), "{}", describe(&o));
    let fake = tempfile::tempdir_in(ompcluster_tests::work_dir()).unwrap();
    let clang22 = fake.path().join("clang-22");
    std::fs::write(&clang22, "#!/bin/sh\necho 'Debian clang version 22.1.8 (1~deb12u1)'\ntouch \"$(dirname \"$0\")/ran\"\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&clang22, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = Command::new(dir.join("ompcluster-cc")).env("OMPCLUSTER_CC", &clang22).args(["a.c", "-o", "a"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", describe(&o));
    let err = stderr(&o);
    assert!(err.contains("clang-22") && err.contains("clang-16 to clang-19 (C, C++) and flang-19 (Fortran)"), "{err}");
    // It ran only for --version: never to compile.
    let ran_once = std::fs::read_dir(fake.path()).unwrap().flatten().filter(|e| e.file_name() == "ran").count();
    assert_eq!(ran_once, 1);
}

/// A launch with a KernelArgs version this runtime does not know (here 7, made by hand) stops
/// the program with one line naming the version, the region and the compiler of its image.
#[test]
fn an_unknown_kernel_argument_version_is_refused_naming_the_compiler() {
    let prog = compile("kernel_args_version.c");
    let o = run(2, &prog, &[], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", describe(&o));
    let err = stderr(&o);
    assert!(err.contains("kernel-argument version 7") && err.contains("compiled by clang-16") && err.contains("__omp_offloading_"), "{}", describe(&o));
    assert!(!stdout(&o).contains("after"), "the program went on after the refused launch\n{}", describe(&o));
}
