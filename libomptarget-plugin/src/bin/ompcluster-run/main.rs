//! `ompcluster-run -np N [options] [--] ./app args...`: start an OpenMP offloading program as an
//! MPI job whose rank 0 runs the program and ranks 1..N-1 are its cluster device.
//!
//! It checks what it can before starting (N, mpirun, the plugin, the program), puts the plugin
//! where libomptarget 16 looks for it (`libomptarget.rtl.ppc64.so` on `LD_LIBRARY_PATH`),
//! passes the `OMPCLUSTER_*`, `OMP_*`, `KMP_*`, `LIBOMP*` (`LIBOMPTARGET_*` included) and
//! `OMPTARGET_*` variables to every rank,
//! and exits with the program's exit code.

use clap::Parser;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

mod checks;
mod job;
use checks::*;
use job::*;

/// File name libomptarget 16 loads first (its ppc64 slot, empty on x86-64).
const PLUGIN_SLOT: &str = "libomptarget.rtl.ppc64.so";
/// libomptarget's setting for when a thread's queries of `nowait` regions turn into waits.
const QUERY_THRESHOLD: &str = "OMPTARGET_QUERY_COUNT_THRESHOLD";
/// File name cargo gives the plugin.
const PLUGIN_FILE: &str = "libompcluster_plugin.so";

#[derive(Parser, Debug)]
#[command(
    name = "ompcluster-run",
    version,
    about = "Run an OpenMP offloading program on an MPI job: rank 0 runs it, ranks 1..N-1 are its device",
    after_help = "Example: ompcluster-run -np 4 ./matmul 1024\nSettings are read from OMPCLUSTER_* environment variables (see the README)."
)]
struct Args {
    /// Number of processes: 1 head + N-1 workers (at least 2). `-np N` works too.
    #[arg(short = 'n', long = "np", value_name = "N")]
    np: u32,
    /// A hostfile for mpirun (multi-node runs).
    #[arg(long, value_name = "FILE")]
    hostfile: Option<PathBuf>,
    /// Extra argument for mpirun (repeatable).
    #[arg(long = "mpirun-arg", value_name = "ARG", allow_hyphen_values = true)]
    mpirun_args: Vec<String>,
    /// Print the mpirun command instead of running it.
    #[arg(long)]
    dry_run: bool,
    /// Resume a job that died: run the program again (same arguments, same checkpoint
    /// directory) and skip the target regions its checkpoints and log cover.
    #[arg(long)]
    resume: bool,

    /// The program and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "PROGRAM [ARGS]")]
    command: Vec<OsString>,
}

fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("ompcluster-run: {msg}");
    ExitCode::from(2)
}

/// A directory holding the plugin under the name libomptarget loads. Next to the plugin when
/// that directory is writable (so that every node of a shared file system sees it), else a
/// private temporary directory that lives as long as the returned guard.
fn plugin_dir(plugin: &Path) -> Result<(PathBuf, Option<tempfile::TempDir>), String> {
    let parent = plugin.parent().unwrap_or(Path::new("."));
    let beside = parent.join("ompcluster-plugin");
    let link = beside.join(PLUGIN_SLOT);
    let points_to_plugin = std::fs::canonicalize(&link).ok() == std::fs::canonicalize(plugin).ok();
    if points_to_plugin {
        return Ok((beside, None));
    }
    let make_beside = || -> std::io::Result<()> {
        std::fs::create_dir_all(&beside)?;
        // Atomic replace: a uniquely named link, renamed over the slot name.
        let tmp = tempfile::Builder::new().prefix(".slot-").tempfile_in(&beside)?.into_temp_path();
        let tmp_path = tmp.to_path_buf();
        tmp.close()?;
        std::os::unix::fs::symlink(std::fs::canonicalize(plugin)?, &tmp_path)?;
        std::fs::rename(&tmp_path, &link)
    };
    if make_beside().is_ok() {
        return Ok((beside, None));
    }
    let dir = tempfile::Builder::new()
        .prefix("ompcluster-run-")
        .tempdir()
        .map_err(|e| format!("cannot create a private directory for the plugin: {e}"))?;
    std::os::unix::fs::symlink(plugin, dir.path().join(PLUGIN_SLOT)).map_err(|e| format!("cannot link the plugin: {e}"))?;
    Ok((dir.path().to_path_buf(), Some(dir)))
}

fn main() -> ExitCode {
    // mpirun spells it `-np N`; clap wants `--np N`.
    let argv: Vec<OsString> = std::env::args_os()
        .enumerate()
        .map(|(i, a)| if i > 0 && a == "-np" { "--np".into() } else { a })
        .collect();
    let args = Args::parse_from(argv);
    let names: Vec<String> = std::env::vars_os().filter_map(|(k, _)| k.into_string().ok()).collect();
    for (name, near) in ompcluster_plugin::config::unknown_settings(names.iter().map(String::as_str)) {
        let hint = near.map(|s| format!(" (did you mean {s}?)")).unwrap_or_default();
        eprintln!("ompcluster-run: {name} is not a setting of ours, ignored{hint}");
    }
    if let Err(e) = ompcluster_plugin::config::validate_env() {
        return fail(format!("invalid setting: {e}"));
    }
    if args.np < 2 {
        return fail(format!("-np must be at least 2 (1 head + at least 1 worker), got {}", args.np));
    }
    let spares = ompcluster_plugin::config::Config::from_env().map(|c| c.spares).unwrap_or(0);
    if spares > 0 && spares + 2 > args.np {
        return fail(format!(
            "OMPCLUSTER_FT_SPARES={spares} leaves no worker to run regions with -np {} (1 head, {} worker(s)): at most {} spare(s)",
            args.np,
            args.np - 1,
            args.np.saturating_sub(2)
        ));
    }
    if let Some(spec) = std::env::var("OMPCLUSTER_FT_INJECT").ok().filter(|v| !v.trim().is_empty()) {
        if let Err(e) = ompcluster_plugin::inject::parse(&spec, Some(args.np as i32)) {
            return fail(format!("invalid setting OMPCLUSTER_FT_INJECT: {e}"));
        }
    }
    let mpirun = match std::env::var_os("OMPCLUSTER_MPIRUN").map(PathBuf::from).or_else(|| find_in_path("mpirun")) {
        Some(m) => m,
        None => return fail("mpirun not found: install Open MPI (apt-get install openmpi-bin) or set OMPCLUSTER_MPIRUN"),
    };
    let plugin = match std::env::var_os("OMPCLUSTER_PLUGIN").map(PathBuf::from) {
        Some(p) => p,
        None => match std::env::current_exe() {
            Ok(exe) => exe.with_file_name(PLUGIN_FILE),
            Err(e) => return fail(format!("cannot locate myself: {e}")),
        },
    };
    if !plugin.is_file() {
        return fail(format!(
            "the plugin library {} is not built: run `cargo build --release` (or set OMPCLUSTER_PLUGIN)",
            plugin.display()
        ));
    }
    let program = PathBuf::from(&args.command[0]);
    let program = if program.components().count() > 1 || program.exists() {
        program
    } else {
        match find_in_path(&program.to_string_lossy()) {
            Some(p) => p,
            None => return fail(format!("program {} not found", program.display())),
        }
    };
    if !program.exists() {
        return fail(format!("program {} not found", program.display()));
    }
    if !is_executable(&program) {
        return fail(format!("{} is not an executable file", program.display()));
    }
    let kind = match program_kind(&program) {
        Ok(k) => k,
        Err(e) => return fail(e),
    };
    let (dir, _guard) = match plugin_dir(&plugin) {
        Ok(d) => d,
        Err(e) => return fail(e),
    };
    let mut ld = OsString::from(dir.as_os_str());
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|v| !v.is_empty()) {
        ld.push(":");
        ld.push(old);
    }
    if matches!(kind, ProgramKind::Offloading | ProgramKind::OpenMp) {
        if let Err(e) = check_program(&program, &ld) {
            return fail(e);
        }
    }
    let (missing, veloc_lib) = plugin_libraries(&plugin, &ld).unwrap_or_default();
    if !missing.is_empty() {
        return fail(format!(
            "the plugin {} cannot be loaded: {} not found (LD_LIBRARY_PATH={}); libomptarget would then run every target region on each rank's own host",
            plugin.display(),
            missing.join(", "),
            ld.to_string_lossy()
        ));
    }
    // Checkpoint directories: one clear line now rather than one per rank later (not for a
    // dry run, which creates nothing).
    let cp = match ckpt_veloc::StoreConfig::from_env(0) {
        Ok(c) => c,
        Err(e) => return fail(format!("invalid setting: {e}")),
    };
    if args.resume && !cp.enabled {
        return fail(ompcluster_plugin::config::RESUME_NEEDS_CHECKPOINTS.to_string());
    }
    if cp.enabled && !args.dry_run {
        if let Err(e) = cp.check_dirs() {
            return fail(format!("cannot use the checkpoint directories: {e}"));
        }
    }
    let use_veloc = cp.enabled && matches!(cp.backend, ckpt_veloc::Backend::Veloc { .. });
    // What VeloC's processes need and the plugin's run-time path does not give them:
    // `veloc-backend` (started by the ranks in async mode, and run by VeloC's client
    // library with system()) finds its libraries through LD_LIBRARY_PATH only, and itself
    // through VELOC_BIN or the PATH. VeloC's clients log to standard output unless told
    // otherwise: into the VeloC scratch directory instead, so the program's output stays
    // its own.
    let mut veloc_env: Vec<(&str, OsString)> = Vec::new();
    if use_veloc {
        if let Some(lib) = &veloc_lib {
            ld.push(":");
            ld.push(lib);
            let bin = lib.parent().map(|p| p.join("bin")).filter(|b| b.join("veloc-backend").is_file());
            if std::env::var_os("VELOC_BIN").is_none() && find_in_path("veloc-backend").is_none() {
                if let Some(b) = bin {
                    veloc_env.push(("VELOC_BIN", b.into_os_string()));
                }
            }
        }
        if std::env::var_os("VELOC_LOG_PREFIX").is_none() {
            if let Some(d) = cp.veloc_log_dir() {
                veloc_env.push(("VELOC_LOG_PREFIX", d.into_os_string()));
            }
        }
    }

    let mut cmd = Command::new(&mpirun);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        cmd.arg("--allow-run-as-root");
    }
    // ob1 over shared memory/TCP is the path on which survivors outlive a dead rank (UCX
    // hangs; see shared/FINDINGS.md). Ranks may outnumber cores; don't pin them to one.
    cmd.args(["--oversubscribe", "--bind-to", "none", "--mca", "pml", "ob1", "--mca", "btl", "self,vader,tcp"]);
    // With fault tolerance on (the default), mpirun must let the job go on when a rank dies:
    // the runtime recovers. Without it, a dead rank ends the job as before.
    let ft = ft_detector::Config::from_env().ok();
    let ft_on = ft.as_ref().map(|c| c.enabled).unwrap_or(true);
    if ft_on || matches!(kind, ProgramKind::PlainMpi) {
        cmd.arg("--enable-recovery");
    }
    // The head writes "started" to a file in a private directory when the cluster device
    // starts, then its exit status: so this launcher knows the device started at all, and,
    // in its recovery mode, where mpirun exits 0 whatever rank 0 did (checked with Open MPI
    // 4.1.4: MPI_Abort, exit(3), SIGSEGV all give 0), how the program ended.
    let status_dir = if matches!(kind, ProgramKind::PlainMpi) {
        None
    } else {
        use std::os::unix::fs::PermissionsExt;
        // Mode 0700 (tempfile's default would be 0777 & umask): private to the user.
        match tempfile::Builder::new().prefix("ompcluster-run-").permissions(std::fs::Permissions::from_mode(0o700)).tempdir() {
            Ok(d) => Some(d),
            Err(e) => return fail(format!("cannot create a private directory for the exit status: {e}")),
        }
    };
    let status_file = status_dir.as_ref().map(|d| d.path().join("exit-status"));
    if let Some(f) = &status_file {
        cmd.env("OMPCLUSTER_EXIT_STATUS_FILE", f);
        cmd.arg("-x").arg("OMPCLUSTER_EXIT_STATUS_FILE");
    }
    if let Some(h) = &args.hostfile {
        cmd.arg("--hostfile").arg(h);
    }
    cmd.arg("-x").arg("LD_LIBRARY_PATH");
    for (k, v) in &veloc_env {
        cmd.env(k, v);
    }
    // libomptarget turns a thread's queries of `nowait` regions into blocking waits once it
    // has seen more than this many unfinished ones (default 5): with more regions in flight
    // than libomp's hidden helpers, each helper would then sit in one region's wait while the
    // others' ends went unnoticed (16 chains of 8 dependent 100 ms regions on 16 workers: 12.0
    // at once instead of 13.2). Our `query_async` is cheap, so it never switches
    // (docs/nowait-regions.md).
    if std::env::var_os(QUERY_THRESHOLD).is_none() {
        cmd.env(QUERY_THRESHOLD, "1000000000");
    }
    cmd.arg("-x").arg(QUERY_THRESHOLD);
    let prefixes = ["OMPCLUSTER_", "OMP_", "LIBOMP", "KMP_", "VELOC_", "OMPTARGET_"];
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if prefixes.iter().any(|p| k.starts_with(p)) && !veloc_env.iter().any(|(v, _)| *v == k) && k != QUERY_THRESHOLD {
            cmd.arg("-x").arg(&k);
        }
    }
    for (k, _) in &veloc_env {
        cmd.arg("-x").arg(k);
    }
    // A final checkpoint on SIGTERM (the plugin's `sigterm.rs`): mpirun must not SIGKILL the
    // ranks 1 s after it forwards SIGTERM (its default), before the head's checkpoint is done.
    let on_sigterm = cp.enabled && ompcluster_plugin::config::Config::from_env().map(|c| c.cp_on_sigterm).unwrap_or(true);
    if on_sigterm {
        let timeout = ompcluster_plugin::sigterm::GRACE.as_secs() + 10;
        cmd.args(["--mca", "odls_base_sigkill_timeout", &timeout.to_string()]);
        block_sigterm_in(&mut cmd);
    }
    if args.resume {
        cmd.env("OMPCLUSTER_RESUME", "1");
        cmd.arg("-x").arg("OMPCLUSTER_RESUME");
    }
    cmd.args(&args.mpirun_args);
    cmd.arg("-np").arg(args.np.to_string());
    cmd.arg(&program).args(&args.command[1..]);
    cmd.env("LD_LIBRARY_PATH", &ld);
    if args.dry_run {
        println!("LD_LIBRARY_PATH={} {:?}", ld.to_string_lossy(), cmd);
        return ExitCode::SUCCESS;
    }
    // The workers notice a crashed head within the detector's timeout and exit, and end with
    // a head that ends normally; one that is frozen (SIGSTOP) never does, and mpirun in its
    // recovery mode waits for it forever. So once the head has ended, however it ended, the
    // job gets that long again (and 5 s more) to end by itself, then mpirun is told to stop
    // it (which also ends stopped ranks).
    let grace = 2 * ft.as_ref().map_or(std::time::Duration::from_secs(5), |c| c.timeout) + std::time::Duration::from_secs(5);
    // mpirun's standard error (every rank's, and its own) passes through the filter of Open
    // MPI's messages about dead ranks (`mpi_noise`; OMPCLUSTER_MPI_NOISE=1 lets them through).
    let filter = match std::env::var("OMPCLUSTER_MPI_NOISE").as_deref() {
        Err(_) | Ok("") | Ok("0") => true,
        Ok("1") => false,
        Ok(v) => return fail(format!("OMPCLUSTER_MPI_NOISE={v}: expected 0 (filter Open MPI's messages about dead ranks, the default) or 1 (let them through)")),
    };
    if filter {
        cmd.stderr(std::process::Stdio::piped());
    }
    if on_sigterm {
        // Before mpirun starts: a SIGTERM that comes before its ranks do waits for the head.
        catch_sigterm();
    }
    // (A file's time may trail the clock by a kernel tick: a second of slack.)
    let began = std::time::SystemTime::now() - std::time::Duration::from_secs(1);
    let status = cmd.spawn().and_then(|mut child| {
        let noise = child.stderr.take().map(|err| {
            std::thread::spawn(move || {
                use std::os::fd::AsRawFd;
                ompcluster_plugin::mpi_noise::copy_filtered(err.as_raw_fd(), 2, std::time::Duration::from_millis(100))
            })
        });
        let st = wait_for_job(child, status_file.as_deref(), grace, if on_sigterm { libc::SIGINT } else { libc::SIGTERM });
        // What is still in the pipe; bounded: a process the job left behind may hold it open.
        if let Some(h) = noise {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
            while !h.is_finished() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
        st
    });
    if use_veloc {
        // A daemon the job started and could not stop (all ranks of this node killed).
        if let Some(pid) = ckpt_veloc::sweep_veloc_backend() {
            eprintln!("ompcluster-run: stopped the VeloC backend (pid {pid}) the job left running");
        }
    }
    if let Some(f) = &status_file {
        clean_after_ranks(f, began);
    }
    match status {
        Ok(status) => {
            use std::os::unix::process::ExitStatusExt;
            let mut code = status.code().or_else(|| status.signal().map(|s| 128 + s)).unwrap_or(1);
            if let Some(f) = &status_file {
                match read_status(f).map(|st| st.how) {
                    None => {
                        // Rank 0's progress file (the plugin's `startup.rs`) tells a start-up cut
                        // short (MPI_Init may itself end the job when a rank dies in it) from a
                        // plugin that never loaded.
                        let progress = std::fs::read_to_string(f.with_file_name("rank-0")).ok();
                        match progress.as_deref().and_then(ompcluster_plugin::startup::read_progress).and_then(|(_, s)| ompcluster_plugin::startup::unfinished_stage(s)) {
                            Some(stage) => eprintln!(
                                "ompcluster-run: the job did not start: rank 0 ended in {stage} (MPI's own message above, if any, says why; a rank probably died as the job started)"
                            ),
                            None => eprintln!(
                                "ompcluster-run: the cluster device never started on rank 0: the plugin {} did not load there (so libomptarget ran every target region on each rank's own host, each rank running the whole program), or rank 0 ended before the program started",
                                plugin.display()
                            ),
                        }
                        code = if code == 0 { 1 } else { code };
                    }
                    // The program died of this signal (see the plugin's `crash_status.rs`).
                    Some(s) if s.starts_with("signal ") => {
                        if let Ok(sig) = s["signal ".len()..].parse::<i32>() {
                            code = 128 + sig;
                        }
                    }
                    Some(s) => match s.parse::<i32>() {
                        Ok(c) if ft_on => code = c,
                        Ok(_) => {}
                        Err(_) if code == 0 => {
                            eprintln!("ompcluster-run: rank 0 (the program) ended without exiting normally (it crashed or was killed): see the messages above");
                            code = 1;
                        }
                        Err(_) => {}
                    },
                }
            }
            // mpirun reports a rank killed by signal N as exit code 128 + N. Die of the same
            // signal for the fatal ones, so that shells and test harnesses see a crash as a
            // crash, as they would running the program directly.
            let crash = [libc::SIGILL, libc::SIGABRT, libc::SIGBUS, libc::SIGFPE, libc::SIGSEGV, libc::SIGKILL];
            if let Some(&sig) = crash.iter().find(|&&s| code == 128 + s) {
                drop(_guard);
                drop(status_dir);
                // SAFETY: resetting a signal to its default action, disabling core files (this
                // process did not crash; the rank did) and raising the signal have no memory
                // effects on this single-threaded process.
                unsafe {
                    libc::signal(sig, libc::SIG_DFL);
                    let none = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
                    libc::setrlimit(libc::RLIMIT_CORE, &none);
                    libc::raise(sig);
                }
            }
            ExitCode::from(code.clamp(0, 255) as u8)
        }
        Err(e) => fail(format!("cannot start {}: {e}", mpirun.display())),
    }
}
