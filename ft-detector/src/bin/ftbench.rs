//! `ompcluster-ftbench`: reproduce the OCFTL experiments with real MPI processes (kill,
//! stall) or in the simulator (`--simulate`), and print one JSON line at the end.
//!
//! Real runs: `mpirun ... -np 8 ompcluster-ftbench --kill 2,3 --after-ms 1000 --run-ms 4000`.
//! The lowest rank that is neither killed nor stalled is the *controller*: it sends SIGKILL
//! (or SIGSTOP/SIGCONT) to the victims' pids, gathered at start (all ranks on one machine),
//! and records the time. Every survivor records when it got each notice (CLOCK_REALTIME,
//! shared by all processes of the machine). At the end the lowest live rank gathers the
//! records with fault-aware receives and prints the JSON as the last line of output.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Parser;
use ft_detector::sim::{self, Pattern, SimConfig};
use ft_detector::{BcastAlgo, Config, Detector, Notice};
use mpi::collective::{CommunicatorCollectives, Root};
use mpi::point_to_point::{Destination, Source};
use mpi::topology::Communicator;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Parser, Debug)]
#[command(
    name = "ompcluster-ftbench",
    about = "Failure-detector experiments (real MPI or simulated)"
)]
struct Args {
    /// Run the simulator instead of MPI.
    #[arg(long)]
    simulate: bool,
    /// Simulated ranks.
    #[arg(long, default_value_t = 480)]
    ranks: usize,
    /// Simulated simultaneous failures.
    #[arg(long, default_value_t = 16)]
    failures: usize,
    /// Simulated failure pattern: sequential or random.
    #[arg(long, default_value = "sequential")]
    pattern: String,
    /// Seed of the simulator.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Simulator: always print per-survivor notified_ms (default: only up to 2048 ranks).
    #[arg(long)]
    full: bool,
    /// Simulator: number of ranks frozen at the failure instant for `--for-ms`.
    #[arg(long, default_value_t = 0)]
    stalls: usize,
    /// Simulator: one-way latency in microseconds.
    #[arg(long, default_value_t = 5)]
    latency_us: u64,
    /// Broadcast algorithm: chord, bmg or hba (overrides OMPCLUSTER_HB_BCAST).
    #[arg(long)]
    bcast: Option<String>,
    /// Ring shuffle: on or off (overrides OMPCLUSTER_HB_SHUFFLE).
    #[arg(long)]
    shuffle: Option<String>,
    /// Timestep in ms (overrides OMPCLUSTER_HB_TIMESTEP; simulator default 10).
    #[arg(long)]
    timestep: Option<u64>,
    /// Heartbeat period in ms (overrides OMPCLUSTER_HB_PERIOD; simulator default 100).
    #[arg(long)]
    period: Option<u64>,
    /// Heartbeat timeout in ms (overrides OMPCLUSTER_HB_TIMEOUT; simulator default 1000).
    #[arg(long)]
    timeout: Option<u64>,
    /// Ranks to SIGKILL (comma separated), all at `--after-ms`.
    #[arg(long, value_delimiter = ',')]
    kill: Vec<i32>,
    /// Ranks that SIGKILL themselves on their first FAILURE notice, before forwarding it
    /// (a relay dying during a broadcast).
    #[arg(long, value_delimiter = ',')]
    kill_on_notice: Vec<i32>,
    /// Rank to freeze with SIGSTOP at `--after-ms`, resumed after `--for-ms`.
    #[arg(long)]
    stall: Option<i32>,
    /// When to kill or stall, ms after start.
    #[arg(long, default_value_t = 1000)]
    after_ms: u64,
    /// How long a stall lasts (ms).
    #[arg(long, default_value_t = 2000)]
    for_ms: u64,
    /// Length of the run (ms) before the results are gathered.
    #[arg(long, default_value_t = 5000)]
    run_ms: u64,
    /// Survivors shrink to a new communicator at the end and check it with an allreduce.
    #[arg(long)]
    shrink: bool,
    /// This rank SIGKILLs itself inside the shrink, after the member list is decided and
    /// before the communicator is created (implies --shrink).
    #[arg(long)]
    die_in_shrink: Option<i32>,
    /// The controller broadcasts CHECKPOINT at `--after-ms`/2 and CHECKPOINT_DONE 100 ms later.
    #[arg(long)]
    checkpoint: bool,
    /// Burn CPU in the main thread during the run (ms of busy work per 10 ms), to load the machine.
    #[arg(long, default_value_t = 0)]
    busy: u64,
}

fn realtime_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or(0.0)
}

fn exit_now(code: i32) -> ! {
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: _exit is async-signal-safe and skips MPI_Finalize, which hangs after failures.
    unsafe { libc::_exit(code) }
}

fn fail(msg: &str) -> ! {
    eprintln!("ompcluster-ftbench: {msg}");
    // also on stdout, so that scripts reading the last line see the error
    println!("{}", json!({ "error": msg }));
    exit_now(2)
}

fn main() {
    let args = Args::parse();
    if args.simulate {
        simulate(&args);
        return;
    }
    real(&args);
}

fn algo(args: &Args, default: BcastAlgo) -> BcastAlgo {
    match &args.bcast {
        None => default,
        Some(s) => BcastAlgo::parse(s)
            .unwrap_or_else(|| fail(&format!("--bcast {s:?}: expected chord, bmg or hba"))),
    }
}

fn onoff(s: &Option<String>, default: bool) -> bool {
    match s.as_deref() {
        None => default,
        Some("on" | "1" | "true") => true,
        Some("off" | "0" | "false") => false,
        Some(x) => fail(&format!("--shuffle {x:?}: expected on or off")),
    }
}

fn simulate(args: &Args) {
    let pattern = match args.pattern.as_str() {
        "sequential" => Pattern::Sequential,
        "random" => Pattern::Random,
        p => fail(&format!("--pattern {p:?}: expected sequential or random")),
    };
    let cfg = SimConfig {
        ranks: args.ranks,
        failures: args.failures,
        pattern,
        bcast: algo(args, BcastAlgo::Chord),
        shuffle: onoff(&args.shuffle, true),
        timestep_ms: args.timestep.unwrap_or(10) as f64,
        period_ms: args.period.unwrap_or(100) as f64,
        timeout_ms: args.timeout.unwrap_or(1000) as f64,
        latency_us: args.latency_us,
        seed: args.seed,
        full: args.full || args.ranks <= 2048,
        stalls: args.stalls,
        stall_ms: args.for_ms as f64,
        ..SimConfig::default()
    };
    if args.ranks < 2 {
        fail("--ranks must be at least 2");
    }
    let report = sim::run(&cfg);
    println!("{}", serde_json::to_string(&report).expect("serialise"));
}

#[derive(Serialize, Deserialize, Debug, Default, Clone)]
struct RankReport {
    rank: i32,
    /// (kind, subject, realtime ms) of every notice received before the end of the run.
    notices: Vec<(String, i32, f64)>,
    bcast_msgs: u64,
    relay_repairs: u64,
    view_msgs: u64,
    /// Controller only: victim -> realtime ms of the SIGKILL.
    kill_times: BTreeMap<i32, f64>,
    /// Controller only: (rank, stop ms, cont ms).
    stall: Option<(i32, f64, f64)>,
    dead_at_end: Vec<i32>,
    shrink_size: Option<i32>,
    shrink_ms: Option<f64>,
    /// Fault-aware operations towards dead ranks returned errors (None: not checked).
    fault_aware_ok: Option<bool>,
    /// Fault-aware test/wait with live peers completed normally.
    fault_aware_live_ok: bool,
}

const RESULT_TAG: i32 = 77;

fn real(args: &Args) {
    let (universe, level) = mpi::initialize_with_threading(mpi::Threading::Multiple)
        .unwrap_or_else(|| fail("MPI init failed"));
    if level != mpi::Threading::Multiple {
        fail("MPI does not provide MPI_THREAD_MULTIPLE");
    }
    let world = universe.world();
    let rank = world.rank();
    let size = world.size();
    let mut cfg = Config::from_env().unwrap_or_else(|e| fail(&e.to_string()));
    if let Some(t) = args.timestep {
        cfg.timestep = Duration::from_millis(t);
    }
    if let Some(t) = args.period {
        cfg.period = Duration::from_millis(t);
    }
    if let Some(t) = args.timeout {
        cfg.timeout = Duration::from_millis(t);
    }
    cfg.bcast = algo(args, cfg.bcast);
    cfg.shuffle = onoff(&args.shuffle, cfg.shuffle);
    if cfg.period > cfg.timeout || cfg.timestep > cfg.period {
        fail("need timestep <= period <= timeout");
    }
    for &r in args
        .kill
        .iter()
        .chain(&args.kill_on_notice)
        .chain(&args.stall)
    {
        if r < 0 || r >= size {
            fail(&format!("rank {r} out of range 0..{size}"));
        }
    }
    let special: BTreeSet<i32> = args
        .kill
        .iter()
        .chain(&args.kill_on_notice)
        .chain(&args.stall)
        .chain(&args.die_in_shrink)
        .copied()
        .collect();
    let controller = (0..size)
        .find(|r| !special.contains(r))
        .unwrap_or_else(|| fail("no rank left to control the run"));

    // pids of everyone, and a shared start time and job key
    let pid = std::process::id() as i32;
    let mut pids = vec![0i32; size as usize];
    world.all_gather_into(&pid, &mut pids[..]);
    let mut t0 = realtime_ms();
    world.process_at_rank(0).broadcast_into(&mut t0);
    let key_dir = format!("/tmp/ompcluster-ftbench-{}-{}", pids[0], t0 as u64);
    if rank == 0 {
        let _ = std::fs::create_dir_all(&key_dir);
    }
    let results = world.duplicate();

    let det =
        Arc::new(Detector::start(&world, cfg.clone()).unwrap_or_else(|e| fail(&e.to_string())));
    let notices: Arc<Mutex<Vec<(Notice, f64)>>> = Arc::new(Mutex::new(Vec::new()));
    {
        let notices = notices.clone();
        let suicide = args.kill_on_notice.contains(&rank);
        let dir = key_dir.clone();
        det.on_notice(move |n| {
            let t = realtime_ms();
            notices.lock().push((n, t));
            if suicide && matches!(n, Notice::Failure(_)) {
                let _ = std::fs::write(format!("{dir}/kill-{rank}"), format!("{t}"));
                // SAFETY: raising a signal on ourselves; SIGKILL ends the process at once.
                unsafe { libc::raise(libc::SIGKILL) };
            }
        });
    }
    // fault-aware operations with live peers must complete normally: a ring exchange with
    // wait_or_dead / test_or_dead on 'static buffers
    let live_ok = {
        let right = (rank + 1) % size;
        let left = (rank + size - 1) % size;
        let out: &'static i32 = Box::leak(Box::new(rank));
        let inp_ptr: *mut i32 = Box::into_raw(Box::new(-1));
        // SAFETY: a fresh, never freed allocation; this is the only reference made from it.
        let inp: &'static mut i32 = unsafe { &mut *inp_ptr };
        let rreq = world.process_at_rank(left).immediate_receive_into_with_tag(
            mpi::request::StaticScope,
            inp,
            5,
        );
        let sreq =
            world
                .process_at_rank(right)
                .immediate_send_with_tag(mpi::request::StaticScope, out, 5);
        let mut ok = true;
        let mut r = rreq;
        loop {
            match ft_detector::test_or_dead(&det, r, left) {
                ft_detector::TestOutcome::Complete(st) => {
                    ok &= st.source_rank() == left;
                    break;
                }
                ft_detector::TestOutcome::Pending(req) => {
                    r = req;
                    std::thread::sleep(Duration::from_micros(100));
                }
                ft_detector::TestOutcome::PeerDead(e) => {
                    ft_detector::abandon(e.request);
                    ok = false;
                    break;
                }
            }
        }
        match ft_detector::wait_or_dead(&det, sreq, right) {
            Ok(_) => {}
            Err(e) => {
                ft_detector::abandon(e.request);
                ok = false;
            }
        }
        // SAFETY: the allocation is never freed; read only after the receive completed (if
        // it was abandoned, `ok` is false and the value is not read).
        ok && unsafe { *inp_ptr } == left
    };
    world.barrier();
    let start = realtime_ms();
    let t_end = start + args.run_ms as f64;

    // watchdog: every run ends by itself
    {
        let grace = (3 * cfg.timeout.as_millis() as u64).max(20_000);
        let limit = Duration::from_millis(args.run_ms + grace);
        std::thread::spawn(move || {
            std::thread::sleep(limit);
            println!(
                "{}",
                json!({"error": "watchdog: the run did not finish in time", "rank": rank})
            );
            exit_now(3);
        });
    }

    let kill_times: Arc<Mutex<BTreeMap<i32, f64>>> = Arc::new(Mutex::new(BTreeMap::new()));
    let stall_rec: Arc<Mutex<Option<(i32, f64, f64)>>> = Arc::new(Mutex::new(None));
    if rank == controller {
        let kill = args.kill.clone();
        let stall = args.stall;
        let (after, dur) = (args.after_ms as f64, args.for_ms);
        let pids = pids.clone();
        let ckpt = args.checkpoint;
        let det2 = det.clone();
        let kt = kill_times.clone();
        let sr = stall_rec.clone();
        std::thread::spawn(move || {
            if ckpt {
                let wait = start + after / 2.0 - realtime_ms();
                if wait > 0.0 {
                    std::thread::sleep(Duration::from_secs_f64(wait / 1000.0));
                }
                det2.broadcast(Notice::Checkpoint)
                    .expect("broadcast checkpoint");
                std::thread::sleep(Duration::from_millis(100));
                det2.broadcast(Notice::CheckpointDone)
                    .expect("broadcast checkpoint done");
            }
            let wait = start + after - realtime_ms();
            if wait > 0.0 {
                std::thread::sleep(Duration::from_secs_f64(wait / 1000.0));
            }
            for &v in &kill {
                let t = realtime_ms();
                // SAFETY: sending a signal to a pid of our own job on this machine.
                unsafe { libc::kill(pids[v as usize], libc::SIGKILL) };
                kt.lock().insert(v, t);
            }
            if let Some(s) = stall {
                let t_stop = realtime_ms();
                // SAFETY: as above.
                unsafe { libc::kill(pids[s as usize], libc::SIGSTOP) };
                std::thread::sleep(Duration::from_millis(dur));
                let t_cont = realtime_ms();
                // SAFETY: as above.
                unsafe { libc::kill(pids[s as usize], libc::SIGCONT) };
                *sr.lock() = Some((s, t_stop, t_cont));
            }
        });
    }

    // the "application": sleep, or burn CPU in slices, until the end of the run
    while realtime_ms() < t_end {
        if args.busy > 0 {
            let until = std::time::Instant::now() + Duration::from_millis(args.busy.min(10));
            let mut x = 0u64;
            while std::time::Instant::now() < until {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
            std::thread::sleep(Duration::from_millis(10 - args.busy.min(10)));
        } else {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    // give a stalled rank's controller thread time to record the SIGCONT
    if rank == controller && args.stall.is_some() {
        while stall_rec.lock().is_none() && realtime_ms() < t_end + args.for_ms as f64 + 1000.0 {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    let mut report = RankReport {
        rank,
        fault_aware_live_ok: live_ok,
        ..Default::default()
    };
    if args.die_in_shrink == Some(rank) {
        let dir = key_dir.clone();
        *ft_detector::BEFORE_DYING.lock() = Some(Box::new(move || {
            let _ = std::fs::write(format!("{dir}/kill-{rank}"), format!("{}", realtime_ms()));
        }));
        ft_detector::DIE_BEFORE_CREATE_GROUP.store(true, std::sync::atomic::Ordering::SeqCst);
    }
    // Fault-aware MPI towards the dead: a receive, a probe and a barrier must return errors
    // instead of hanging.
    let dead_now: Vec<i32> = det.dead_ranks().into_iter().collect();
    if !dead_now.is_empty() {
        let mut ok = true;
        for &v in &dead_now {
            let buf: &'static mut [u8] = Box::leak(vec![0u8; 16].into_boxed_slice());
            let req = world.process_at_rank(v).immediate_receive_into_with_tag(
                mpi::request::StaticScope,
                buf,
                999,
            );
            match ft_detector::wait_or_dead(&det, req, v) {
                Ok(_) => ok = false,
                Err(e) => {
                    ok &= e.rank == v;
                    ft_detector::abandon(e.request);
                }
            }
            ok &= ft_detector::probe_or_dead(&det, &world, v, 999).is_err();
        }
        ok &= ft_detector::barrier_or_dead(&det, &world).is_err();
        report.fault_aware_ok = Some(ok);
    }
    if args.shrink || args.die_in_shrink.is_some() {
        let t = std::time::Instant::now();
        match det.shrink() {
            Ok(c) => {
                let mut n = 0i32;
                c.all_reduce_into(&1i32, &mut n, mpi::collective::SystemOperation::sum());
                report.shrink_size = Some(n);
                report.shrink_ms = Some(t.elapsed().as_secs_f64() * 1000.0);
            }
            Err(e) => eprintln!("rank {rank}: shrink failed: {e}"),
        }
    }

    // notices up to the end of the run (or up to now when a rank died in the shrink)
    let cutoff = if args.die_in_shrink.is_some() {
        realtime_ms()
    } else {
        t_end
    };
    report.notices = notices
        .lock()
        .iter()
        .filter(|(_, t)| *t <= cutoff)
        .map(|(n, t)| match n {
            Notice::Failure(r) => ("failure".into(), *r, *t),
            Notice::FalsePositive(r) => ("false_positive".into(), *r, *t),
            Notice::Checkpoint => ("checkpoint".into(), -1, *t),
            Notice::CheckpointDone => ("checkpoint_done".into(), -1, *t),
        })
        .collect();
    let st = det.stats();
    report.bcast_msgs = st.bcast_msgs;
    report.relay_repairs = st.relay_repairs;
    report.view_msgs = st.view_msgs;
    report.kill_times = kill_times.lock().clone();
    report.stall = *stall_rec.lock();
    report.dead_at_end = det.dead_ranks().into_iter().collect();

    // gather at the lowest live rank, fault-aware
    loop {
        let reporter = det
            .live_ranks()
            .into_iter()
            .chain([rank])
            .min()
            .unwrap_or(rank);
        if reporter == rank {
            let mut all = vec![report.clone()];
            for r in det.live_ranks() {
                if r == rank {
                    continue;
                }
                if let Ok((buf, _)) = ft_detector::recv_or_dead(&det, &results, r, RESULT_TAG) {
                    match serde_json::from_slice::<RankReport>(&buf) {
                        Ok(rep) => all.push(rep),
                        Err(e) => eprintln!("bad report from {r}: {e}"),
                    }
                }
            }
            let out = assemble(args, &cfg, size, &key_dir, &all, t_end);
            println!("{out}");
            let _ = det.stop();
            exit_now(0);
        } else {
            let buf = serde_json::to_vec(&report).expect("serialise");
            if ft_detector::send_or_dead(&det, &results, reporter, RESULT_TAG, buf).is_ok() {
                let _ = det.stop();
                exit_now(0);
            }
            // reporter died: try the next one
        }
    }
}

fn assemble(
    args: &Args,
    cfg: &Config,
    size: i32,
    key_dir: &str,
    all: &[RankReport],
    t_end: f64,
) -> String {
    let mut kill_times: BTreeMap<i32, f64> = BTreeMap::new();
    let mut stall = None;
    for r in all {
        kill_times.extend(r.kill_times.iter().map(|(k, v)| (*k, *v)));
        if r.stall.is_some() {
            stall = r.stall;
        }
    }
    for &v in args.kill_on_notice.iter().chain(&args.die_in_shrink) {
        if let Ok(s) = std::fs::read_to_string(format!("{key_dir}/kill-{v}")) {
            if let Ok(t) = s.trim().parse::<f64>() {
                kill_times.insert(v, t);
            }
        }
    }
    let _ = std::fs::remove_dir_all(key_dir);
    let survivors: Vec<i32> = all.iter().map(|r| r.rank).collect();
    let first_notice = |r: &RankReport, kind: &str, subject: i32| -> Option<f64> {
        r.notices
            .iter()
            .filter(|(k, s, _)| k == kind && *s == subject)
            .map(|(_, _, t)| *t)
            .reduce(f64::min)
    };
    let mut failures = Vec::new();
    for (&v, &tk) in &kill_times {
        let mut notified = serde_json::Map::new();
        let mut missing = Vec::new();
        let duplicates: Vec<i32> = all
            .iter()
            .filter(|r| {
                r.notices
                    .iter()
                    .filter(|(k, s, _)| k == "failure" && *s == v)
                    .count()
                    > 1
            })
            .map(|r| r.rank)
            .collect();
        let mut worst: f64 = 0.0;
        for r in all {
            match first_notice(r, "failure", v) {
                Some(t) => {
                    let d = ((t - tk) * 10.0).round() / 10.0;
                    worst = worst.max(d);
                    notified.insert(r.rank.to_string(), json!(d));
                }
                None => missing.push(r.rank),
            }
        }
        failures.push(json!({
            "rank": v,
            "notified_ms": notified,
            "consistent_ms": if missing.is_empty() { json!(worst) } else { json!(null) },
            "missing": missing,
            "duplicates": duplicates,
        }));
    }
    // ranks declared dead that were not killed
    let mut fp_ranks: BTreeSet<i32> = BTreeSet::new();
    for r in all {
        for (k, s, _) in &r.notices {
            if k == "failure" && !kill_times.contains_key(s) {
                fp_ranks.insert(*s);
            }
        }
    }
    let mut false_positives = Vec::new();
    for x in fp_ranks {
        let reported = survivors.contains(&x);
        let alive_everywhere = all.iter().all(|r| !r.dead_at_end.contains(&x));
        let all_got_fp = all
            .iter()
            .filter(|r| r.rank != x)
            .all(|r| first_notice(r, "false_positive", x).is_some());
        let base = stall.filter(|s| s.0 == x).map(|s| s.1);
        let declared = all
            .iter()
            .filter_map(|r| first_notice(r, "failure", x))
            .reduce(f64::min);
        let readmit = all
            .iter()
            .filter_map(|r| first_notice(r, "false_positive", x))
            .reduce(f64::max);
        false_positives.push(json!({
            "rank": x,
            "readmitted": reported && alive_everywhere && all_got_fp,
            "stalled": base.is_some(),
            "declared_dead_ms": match (declared, base) { (Some(d), Some(b)) => json!(((d - b) * 10.0).round() / 10.0), _ => json!(null) },
            "readmitted_ms": match (readmit, base) { (Some(d), Some(b)) => json!(((d - b) * 10.0).round() / 10.0), _ => json!(null) },
        }));
    }
    let bcast: u64 = all.iter().map(|r| r.bcast_msgs).sum();
    let repairs: u64 = all.iter().map(|r| r.relay_repairs).sum();
    let views: u64 = all.iter().map(|r| r.view_msgs).sum();
    let consistent_ms = failures
        .iter()
        .map(|f| f["consistent_ms"].as_f64().unwrap_or(f64::INFINITY))
        .fold(0.0, f64::max);
    let ring = ft_detector::ring_order(size as usize, cfg.shuffle);
    let checkpoints: serde_json::Map<String, serde_json::Value> = all
        .iter()
        .map(|r| {
            let c = r.notices.iter().filter(|n| n.0 == "checkpoint").count();
            let d = r
                .notices
                .iter()
                .filter(|n| n.0 == "checkpoint_done")
                .count();
            (r.rank.to_string(), json!([c, d]))
        })
        .collect();
    let shrink: Vec<serde_json::Value> = all
        .iter()
        .map(|r| json!([r.rank, r.shrink_size, r.shrink_ms]))
        .collect();
    let _ = t_end;
    json!({
        "ranks": size,
        "simulated": false,
        "bcast": cfg.bcast.name(),
        "shuffle": cfg.shuffle,
        "timestep_ms": cfg.timestep.as_millis() as u64,
        "period_ms": cfg.period.as_millis() as u64,
        "timeout_ms": cfg.timeout.as_millis() as u64,
        "ring": ring,
        "survivors": survivors,
        "failures": failures,
        "false_positives": false_positives,
        "broadcast_messages": bcast,
        "relay_repairs": repairs,
        "view_messages": views,
        "consistent_ms": if consistent_ms.is_finite() { json!(consistent_ms) } else { json!(null) },
        "checkpoint_notices": checkpoints,
        "fault_aware_live_ok": all.iter().all(|r| r.fault_aware_live_ok),
        "dead_sets": all.iter().map(|r| (r.rank.to_string(), json!(r.dead_at_end))).collect::<serde_json::Map<_, _>>(),
        "fault_aware_ok": all.iter().map(|r| (r.rank.to_string(), json!(r.fault_aware_ok))).collect::<serde_json::Map<_, _>>(),
        "shrink": if args.shrink || args.die_in_shrink.is_some() { json!(shrink) } else { json!(null) },
    })
    .to_string()
}
