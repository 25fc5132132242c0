//! `ompcluster-placement-sim`: replay task logs recorded with `OMPCLUSTER_TASKS=FILE` on
//! simulated workers, placing with the plugin's own scheduler (`scheduler::simulate`), and
//! compare each makespan with the critical-path bound.
//!
//!   ompcluster-placement-sim [--workers 3,4,8,16,32,64] [--latency-us US] [--bandwidth-gbps G] [--json] LOG...
//!
//! A LOG of `-` is read from standard input (`zcat log.jsonl.gz | ompcluster-placement-sim -`).
//! For each log, one row per worker count, then one row for the recorded run's own placement
//! under the same costs, on `--recorded-workers` workers (default: the highest rank in the
//! log; none if the head ran some of its tasks). Prints a markdown table, or with `--json` one
//! JSON object per row.

use clap::Parser;
use scheduler::{simulate, Costs, Placement, RecordedGraph};
use serde_json::json;
use std::io::BufReader;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "ompcluster-placement-sim", version, about = "Replay task logs (OMPCLUSTER_TASKS) on simulated workers with the runtime's placement; makespan against the critical-path bound")]
struct Cli {
    /// Task logs (JSON lines); `-` for standard input.
    #[arg(required = true)]
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
    let costs = Costs { latency_s: cli.latency_us * 1e-6, bytes_per_s: cli.bandwidth_gbps * 1e9 };
    if !cli.json {
        println!("| log | tasks | placement | workers | makespan, ms | bound, ms | ratio | list, moves free: ratio | moves | MB moved | tasks per worker, min-max |");
        println!("|---|---|---|---|---|---|---|---|---|---|---|");
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
            let o = simulate(&graph, placement, costs);
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
                });
                println!("{line}");
            } else {
                println!(
                    "| {} | {} | {name} | {} | {:.3} | {:.3} | {:.2} | {:.2} | {} | {:.1} | {min}-{max} |",
                    path.display(),
                    graph.len(),
                    o.workers,
                    o.makespan_s * 1e3,
                    o.bound_s * 1e3,
                    o.ratio(),
                    list_s / o.bound_s,
                    o.moves,
                    o.bytes_moved as f64 / 1e6
                );
            }
        }
    }
    ExitCode::SUCCESS
}
