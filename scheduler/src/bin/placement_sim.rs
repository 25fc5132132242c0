//! `ompcluster-placement-sim`: replay task logs recorded with `OMPCLUSTER_TASKS=FILE` on
//! simulated workers, placing with the plugin's own scheduler (`scheduler::simulate`), and
//! compare each makespan with the critical-path bound.
//!
//!   ompcluster-placement-sim [--workers 3,4,8,16,32,64] [--latency-us US] [--bandwidth-gbps G]
//!                            [--head-us-per-region US] [--head-ns-per-byte NS] [--max-in-flight N]
//!                            [--json] (LOG... | --busy FRACTION [--steps S])
//!
//! A LOG of `-` is read from standard input (`zcat log.jsonl.gz | ompcluster-placement-sim -`).
//! For each log, one row per worker count, then one row for the recorded run's own placement
//! under the same costs, on `--recorded-workers` workers (default: the highest rank in the
//! log; none if the head ran some of its tasks). Prints a markdown table, or with `--json` one
//! JSON object per row. The head (rank 0) costs nothing and caps nothing unless told
//! (`scheduler::Head`).
//!
//! With `--busy FRACTION` instead of logs: for each worker count P, the smallest uniform task
//! length that keeps P workers at least FRACTION busy over S x P independent tasks (Task Bench's
//! `trivial` shape) under the head's costs, by simulation (`scheduler::min_busy_task_s`), next
//! to the head model's closed form B P N c / (N - B P) (N tasks, c per region; moves and the
//! head's per-byte time left out of it).

use clap::Parser;
use scheduler::{min_busy_task_s, simulate, Costs, Head, Placement, RecordedGraph};
use serde_json::json;
use std::io::BufReader;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "ompcluster-placement-sim", version, about = "Replay task logs (OMPCLUSTER_TASKS) on simulated workers with the runtime's placement; makespan against the critical-path bound")]
struct Cli {
    /// Task logs (JSON lines); `-` for standard input.
    #[arg(required_unless_present = "busy")]
    logs: Vec<PathBuf>,
    /// Worker counts to simulate.
    #[arg(long, value_delimiter = ',', default_value = "3,4,8,16,32,64", value_parser = clap::value_parser!(u32).range(1..))]
    workers: Vec<u32>,
    /// Latency of one move, microseconds (default: one 1 KiB submit of the runtime,
    /// BENCHMARKS.md "Transfer bandwidth", 2026-11-25).
    #[arg(long, default_value_t = 2.21)]
    latency_us: f64,
    /// Bandwidth of a move, GB/s (default: the runtime's submit bandwidth, median over
    /// 256 KiB to 256 MiB, BENCHMARKS.md "Transfer bandwidth", 2026-11-25).
    #[arg(long, default_value_t = 5.42)]
    bandwidth_gbps: f64,
    /// Workers of the recorded runs (default: the highest rank each log names).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    recorded_workers: Option<u32>,
    /// The head's time to place, post and record one region, microseconds (one region at a
    /// time, in the order they became ready; 0: free, as before the head was modelled).
    #[arg(long, default_value_t = 0.0)]
    head_us_per_region: f64,
    /// The head's time per byte it sends itself (inputs on the head a worker lacks),
    /// nanoseconds.
    #[arg(long, default_value_t = 0.0)]
    head_ns_per_byte: f64,
    /// At most this many regions placed and not ended (default: no cap).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    max_in_flight: Option<u32>,
    /// Instead of logs: the smallest uniform task length keeping each worker count at least
    /// this busy (0 to 1) over independent tasks, under the head's costs.
    #[arg(long, conflicts_with = "logs")]
    busy: Option<f64>,
    /// With --busy: independent tasks per worker.
    #[arg(long, default_value_t = 100, requires = "busy", value_parser = clap::value_parser!(u32).range(1..))]
    steps: u32,
    /// One JSON object per row instead of a table.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !(cli.latency_us >= 0.0 && cli.bandwidth_gbps > 0.0) {
        eprintln!("ompcluster-placement-sim: --latency-us must be >= 0 and --bandwidth-gbps > 0");
        return ExitCode::from(2);
    }
    if !(cli.head_us_per_region >= 0.0 && cli.head_ns_per_byte >= 0.0) || cli.busy.is_some_and(|b| !(b > 0.0 && b <= 1.0)) {
        eprintln!("ompcluster-placement-sim: --head-us-per-region and --head-ns-per-byte must be >= 0, --busy in (0, 1]");
        return ExitCode::from(2);
    }
    let costs = Costs { latency_s: cli.latency_us * 1e-6, bytes_per_s: cli.bandwidth_gbps * 1e9 };
    let head = Head { s_per_region: cli.head_us_per_region * 1e-6, s_per_byte: cli.head_ns_per_byte * 1e-9, max_in_flight: cli.max_in_flight.map(|n| n as usize) };
    if let Some(busy) = cli.busy {
        busy_table(&cli, costs, head, busy);
        return ExitCode::SUCCESS;
    }
    if !cli.json {
        println!("| log | tasks | placement | workers | makespan, ms | bound, ms | ratio | list, moves free: ratio | head busy, ms | moves | MB moved | tasks per worker, min-max |");
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    }
    for path in &cli.logs {
        let read = if path.as_os_str() == "-" {
            RecordedGraph::read(std::io::stdin().lock())
        } else {
            std::fs::File::open(path).map_err(Into::into).and_then(|f| RecordedGraph::read(BufReader::new(f)))
        };
        let graph = match read {
            Ok(g) => g,
            Err(e) => {
                eprintln!("ompcluster-placement-sim: {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
        };
        let recorded = graph.recorded_workers().map(|r| Placement::Recorded(cli.recorded_workers.map_or(r, |n| (n as usize).max(r))));
        for placement in cli.workers.iter().map(|&p| Placement::Scheduler(p as usize)).chain(recorded) {
            let o = simulate(&graph, placement, costs, head);
            let list_s = graph.list_makespan_s(o.workers);
            let name = match placement {
                Placement::Scheduler(_) => "scheduler",
                Placement::Recorded(_) => "recorded",
            };
            let (min, max) = (o.tasks_per_worker.iter().min().copied().unwrap_or(0), o.tasks_per_worker.iter().max().copied().unwrap_or(0));
            if cli.json {
                let line = json!({
                    "log": path.display().to_string(),
                    "tasks": graph.len(),
                    "placement": name,
                    "workers": o.workers,
                    "makespan_s": o.makespan_s,
                    "bound_s": o.bound_s,
                    "ratio": o.ratio(),
                    "list_makespan_s": list_s,
                    "critical_path_s": graph.critical_path_s(),
                    "total_kernel_s": graph.total_kernel_s(),
                    "moves": o.moves,
                    "bytes_moved": o.bytes_moved,
                    "tasks_per_worker": o.tasks_per_worker,
                    "latency_s": costs.latency_s,
                    "bytes_per_s": costs.bytes_per_s,
                    "head_busy_s": o.head_busy_s,
                    "head_s_per_region": head.s_per_region,
                    "head_s_per_byte": head.s_per_byte,
                    "max_in_flight": head.max_in_flight,
                });
                println!("{line}");
            } else {
                println!(
                    "| {} | {} | {name} | {} | {:.3} | {:.3} | {:.2} | {:.2} | {:.3} | {} | {:.1} | {min}-{max} |",
                    path.display(),
                    graph.len(),
                    o.workers,
                    o.makespan_s * 1e3,
                    o.bound_s * 1e3,
                    o.ratio(),
                    list_s / o.bound_s,
                    o.head_busy_s * 1e3,
                    o.moves,
                    o.bytes_moved as f64 / 1e6
                );
            }
        }
    }
    ExitCode::SUCCESS
}

/// Print, per worker count, the smallest uniform length of `cli.steps` x P independent tasks
/// that keeps P workers at least `busy` busy: simulated, and the head model's closed form.
fn busy_table(cli: &Cli, costs: Costs, head: Head, busy: f64) {
    if !cli.json {
        println!("| workers | tasks | head, us per region | shortest task, simulated, us | closed form, us | busy at it |");
        println!("|---|---|---|---|---|---|");
    }
    for &p in &cli.workers {
        let (p, n) = (p as usize, cli.steps as usize * p as usize);
        let found = min_busy_task_s(p, n, costs, head, busy);
        let at = found.map(|l| {
            let g = RecordedGraph::independent(n, l);
            simulate(&g, Placement::Scheduler(p), costs, head).busy(&g)
        });
        let closed = busy * p as f64 * n as f64 * head.s_per_region / (n as f64 - busy * p as f64);
        if cli.json {
            println!("{}", json!({"workers": p, "tasks": n, "busy": busy, "head_s_per_region": head.s_per_region, "max_in_flight": head.max_in_flight, "task_s": found, "closed_form_s": closed, "busy_at_task_s": at}));
        } else {
            let us = |s: Option<f64>| s.map_or("none up to 1000 s".into(), |s| format!("{:.2}", s * 1e6));
            println!("| {p} | {n} | {} | {} | {:.2} | {} |", cli.head_us_per_region, us(found), closed * 1e6, at.map_or("-".into(), |b| format!("{b:.3}")));
        }
    }
}
