//! `ft-idle-cost`: how much the failure detector slows a communication-heavy MPI loop.
//!
//! Runs the same loop (neighbour exchange of 4 KiB + an 8-double allreduce per iteration)
//! alternately with the detector off and on, in the same MPI job, several rounds (the order
//! alternates each round to cancel drift), and prints one JSON line on rank 0 with the
//! times and the ratio of the medians (on / off).
//!
//! `mpirun ... -np 4 ft-idle-cost --iters 20000 --rounds 5 --period 100`

use std::time::{Duration, Instant};

use clap::Parser;
use ft_detector::{Config, Detector};
use mpi::collective::{CommunicatorCollectives, SystemOperation};
use mpi::point_to_point as p2p;
use mpi::topology::Communicator;
use serde_json::json;

#[derive(Parser, Debug)]
#[command(name = "ft-idle-cost")]
struct Args {
    /// Iterations of the loop per phase.
    #[arg(long, default_value_t = 20000)]
    iters: u64,
    /// Rounds (each has one phase off and one on).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Detector timestep (ms).
    #[arg(long, default_value_t = 50)]
    timestep: u64,
    /// Heartbeat period (ms).
    #[arg(long, default_value_t = 100)]
    period: u64,
    /// Heartbeat timeout (ms).
    #[arg(long, default_value_t = 1000)]
    timeout: u64,
}

/// CPU time (ns) used so far by this process's heartbeat thread, from
/// /proc/self/task/*/schedstat (first field: time on CPU).
fn heartbeat_cpu_ns() -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    for e in dir.flatten() {
        let p = e.path();
        if std::fs::read_to_string(p.join("comm")).is_ok_and(|c| c.trim() == "ft-heartbeat") {
            if let Ok(s) = std::fs::read_to_string(p.join("schedstat")) {
                return s
                    .split_whitespace()
                    .next()
                    .and_then(|x| x.parse().ok())
                    .unwrap_or(0);
            }
        }
    }
    0
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() {
    let args = Args::parse();
    let (universe, level) =
        mpi::initialize_with_threading(mpi::Threading::Multiple).expect("MPI init");
    assert_eq!(
        level,
        mpi::Threading::Multiple,
        "MPI_THREAD_MULTIPLE needed"
    );
    let world = universe.world();
    let rank = world.rank();
    let size = world.size();
    let right = (rank + 1) % size;
    let left = (rank + size - 1) % size;
    let cfg = Config {
        enabled: true,
        timestep: Duration::from_millis(args.timestep),
        period: Duration::from_millis(args.period),
        timeout: Duration::from_millis(args.timeout),
        ..Config::default()
    };
    let send = vec![rank as u8; 4096];
    let mut recv = vec![0u8; 4096];
    let mut work = |iters: u64| -> f64 {
        world.barrier();
        let t = Instant::now();
        let mut acc = [0f64; 8];
        for i in 0..iters {
            p2p::send_receive_into(
                &send[..],
                &world.process_at_rank(right),
                &mut recv[..],
                &world.process_at_rank(left),
            );
            let x = [i as f64; 8];
            world.all_reduce_into(&x[..], &mut acc[..], SystemOperation::sum());
        }
        world.barrier();
        let mine = t.elapsed().as_secs_f64();
        let mut max = 0.0f64;
        world.all_reduce_into(&mine, &mut max, SystemOperation::max());
        max
    };
    // warm-up
    work(args.iters / 10);
    let mut off = Vec::new();
    let mut on = Vec::new();
    let mut hb_cpu_s = 0.0f64;
    for round in 0..args.rounds {
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for detector in order {
            if detector {
                let det = Detector::start(&world, cfg.clone()).expect("start detector");
                // let the ring settle (first beats) before timing
                std::thread::sleep(Duration::from_millis(2 * args.period));
                let c0 = heartbeat_cpu_ns();
                let t = work(args.iters);
                let c1 = heartbeat_cpu_ns();
                let mut cpu = 0u64;
                world.all_reduce_into(&(c1 - c0), &mut cpu, SystemOperation::sum());
                hb_cpu_s += cpu as f64 / 1e9;
                det.stop().expect("stop");
                assert!(
                    det.dead_ranks().is_empty(),
                    "false positive during the benchmark"
                );
                on.push(t);
            } else {
                // same structure as the "on" phase: the communicator dups and the settle pause
                let dups: Vec<_> = (0..8).map(|_| world.duplicate()).collect();
                std::thread::sleep(Duration::from_millis(2 * args.period));
                off.push(t_off(&mut work, args.iters));
                drop(dups);
            }
        }
    }
    if rank == 0 {
        let (mut a, mut b) = (off.clone(), on.clone());
        let (m_off, m_on) = (median(&mut a), median(&mut b));
        let mut paired: Vec<f64> = on.iter().zip(&off).map(|(x, y)| x / y).collect();
        let m_paired = median(&mut paired);
        let on_total: f64 = on.iter().sum();
        println!(
            "{}",
            json!({
                "ranks": size,
                "iters": args.iters,
                "timestep_ms": args.timestep,
                "period_ms": args.period,
                "timeout_ms": args.timeout,
                "off_s": off,
                "on_s": on,
                "median_off_s": m_off,
                "median_on_s": m_on,
                "ratio": m_on / m_off,
                "slowdown_pct": (m_on / m_off - 1.0) * 100.0,
                "paired_ratios": paired,
                "median_paired_ratio": m_paired,
                "heartbeat_cpu_s": hb_cpu_s,
                "heartbeat_cpu_pct_of_ranks": hb_cpu_s / (on_total * size as f64) * 100.0,
            })
        );
    }
}

fn t_off(work: &mut impl FnMut(u64) -> f64, iters: u64) -> f64 {
    work(iters)
}
