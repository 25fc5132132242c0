//! `ompcluster-ckpt`: inspect and check OmpCluster checkpoint directories,
//! and compute checkpoint intervals.
//!
//! * `ls DIR`: published versions, their regions, sizes, saving ranks, times;
//! * `verify DIR`: checksums of every region of every kept version; exit
//!   status 1 on damage (each damaged file is named), 2 on usage errors;
//! * `interval --bytes B [--wspeed MBps] [--mtbf S]`: prints
//!   `young_seconds: X` and `daly_seconds: Y`, one per line.

use std::path::PathBuf;
use std::process::ExitCode;

use ckpt_veloc::interval::{checkpoint_cost_seconds, daly_seconds, young_seconds};
use ckpt_veloc::{
    format_unix_ms, list_versions, verify_dir, Manifest, DEFAULT_MTBF_S, DEFAULT_WSPEED_MB_S,
};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "ompcluster-ckpt",
    version,
    about = "Inspect and check OmpCluster checkpoints"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// List published versions and their regions.
    Ls {
        /// Persistent checkpoint directory (OMPCLUSTER_CP_PERSISTENT).
        dir: PathBuf,
    },
    /// Check every region of every kept version; non-zero exit on damage.
    Verify {
        /// Persistent checkpoint directory (OMPCLUSTER_CP_PERSISTENT).
        dir: PathBuf,
    },
    /// Young's and Daly's checkpoint intervals.
    Interval {
        /// Bytes saved by one checkpoint.
        #[arg(long)]
        bytes: u64,
        /// Write speed in MB/s (10^6 bytes per second).
        #[arg(long, default_value_t = DEFAULT_WSPEED_MB_S, value_parser = positive)]
        wspeed: f64,
        /// Mean time between failures in seconds.
        #[arg(long, default_value_t = DEFAULT_MTBF_S, value_parser = positive)]
        mtbf: f64,
    },
}

fn positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!("{s:?} is not a positive number")),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Ls { dir } => ls(&dir),
        Cmd::Verify { dir } => verify(&dir),
        Cmd::Interval {
            bytes,
            wspeed,
            mtbf,
        } => {
            let c = checkpoint_cost_seconds(bytes, wspeed);
            println!("young_seconds: {:.3}", young_seconds(c, mtbf));
            println!("daly_seconds: {:.3}", daly_seconds(c, mtbf));
            ExitCode::SUCCESS
        }
    }
}

fn ls(dir: &std::path::Path) -> ExitCode {
    let versions = match list_versions(dir) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("ompcluster-ckpt: {e}");
            return ExitCode::from(2);
        }
    };
    if versions.is_empty() {
        println!("no published checkpoint versions in {}", dir.display());
        return ExitCode::SUCCESS;
    }
    let mut status = ExitCode::SUCCESS;
    for v in versions {
        match Manifest::read(dir, v) {
            Err(e) => {
                println!("version {v}: unreadable: {e}");
                status = ExitCode::from(1);
            }
            Ok(m) => {
                let ranks: Vec<String> = m.ranks().iter().map(|r| r.to_string()).collect();
                println!(
                    "version {}  published {}  regions {}  bytes {}  ranks [{}]",
                    m.version,
                    format_unix_ms(m.created_unix_ms),
                    m.regions.len(),
                    m.total_bytes(),
                    ranks.join(",")
                );
                println!(
                    "  {:>20} {:>14} {:>8} {:>6}  {:<24}  file",
                    "region", "size", "ckpt", "rank", "saved"
                );
                for r in &m.regions {
                    println!(
                        "  {:>20} {:>14} {:>8} {:>6}  {:<24}  {}@{}",
                        r.region,
                        r.size,
                        r.ckpt,
                        r.rank,
                        format_unix_ms(r.saved_unix_ms),
                        r.file.display(),
                        r.offset
                    );
                }
            }
        }
    }
    status
}

fn verify(dir: &std::path::Path) -> ExitCode {
    let report = match verify_dir(dir) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("ompcluster-ckpt: {e}");
            return ExitCode::from(2);
        }
    };
    if report.versions.is_empty() {
        eprintln!(
            "ompcluster-ckpt: no published checkpoint versions in {}",
            dir.display()
        );
        return ExitCode::from(1);
    }
    for v in &report.versions {
        if v.damage.is_empty() {
            println!(
                "version {}: ok ({} regions, {} bytes)",
                v.version, v.regions, v.bytes
            );
        } else {
            println!(
                "version {}: DAMAGED ({} of {} regions)",
                v.version,
                v.damage.len(),
                v.regions
            );
        }
        for d in &v.damage {
            match d.region {
                Some(r) => println!("  damaged: {} (region {r}): {}", d.file.display(), d.reason),
                None => println!("  damaged: {} (manifest): {}", d.file.display(), d.reason),
            }
        }
    }
    if report.is_ok() {
        println!("all {} versions ok", report.versions.len());
        ExitCode::SUCCESS
    } else {
        let n = report.damage().count();
        eprintln!("ompcluster-ckpt: {n} damaged entries in {}", dir.display());
        ExitCode::from(1)
    }
}
