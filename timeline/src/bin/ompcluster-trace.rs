//! `ompcluster-trace`: look at a trace written with `OMPCLUSTER_TRACE=run.json`.
//!
//!   ompcluster-trace plot run.json -o run.svg    an SVG Gantt chart of every rank's tracks
//!   ompcluster-trace summary run.json            what it holds, as JSON (the run report's terms)

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use timeline::{Summary, TraceFile};

#[derive(Parser)]
#[command(name = "ompcluster-trace", version, about = "Look at a trace written with OMPCLUSTER_TRACE=run.json (Chrome trace-event format; Perfetto and chrome://tracing open it too)")]
struct Cli {
    #[command(subcommand)]
    what: What,
}

#[derive(Subcommand)]
enum What {
    /// Draw the timeline as an SVG Gantt chart: one row per track, failures marked.
    Plot {
        /// The trace.
        trace: PathBuf,
        /// The picture to write.
        #[arg(short, long, default_value = "run.svg")]
        output: PathBuf,
        /// Width in pixels.
        #[arg(long, default_value_t = 1600, value_parser = clap::value_parser!(u32).range(400..=20000))]
        width: u32,
    },
    /// Print what the trace holds (tasks per worker, bytes moved, failures, ...) as JSON.
    Summary {
        /// The trace.
        trace: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let run = || -> Result<(), String> {
        match cli.what {
            What::Plot { trace, output, width } => {
                let t = TraceFile::read(&trace).map_err(|e| e.to_string())?;
                let title = format!("{} ({} ranks)", trace.display(), t.other_data.as_ref().and_then(|d| d.get("ranks")).and_then(|r| r.as_i64()).unwrap_or(0));
                let d = timeline::plot::plot(&t, &output, width, &title).map_err(|e| e.to_string())?;
                eprintln!("ompcluster-trace: wrote {} ({} rows, {} boxes, {} failures marked)", output.display(), d.rows, d.boxes, d.failures);
                Ok(())
            }
            What::Summary { trace } => {
                let t = TraceFile::read(&trace).map_err(|e| e.to_string())?;
                println!("{}", serde_json::to_string_pretty(&Summary::of(&t)).map_err(|e| e.to_string())?);
                Ok(())
            }
        }
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ompcluster-trace: {e}");
            ExitCode::FAILURE
        }
    }
}
