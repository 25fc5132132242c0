//! Flush throughput of the embedded store against a plain sequential write
//! of the same bytes to the same directory, in the same run.
//!
//! ```text
//! cargo run --release -p ckpt-veloc --example flush_bench -- [--mib 512] [--regions 16] [--reps 3] [--dir DIR]
//! ```
//!
//! Both sides end with the data durable (the plain write ends with
//! `fsync`; the flush fsyncs the data file, renames it, fsyncs the
//! directory and writes its index the same way). The flush also re-reads
//! the scratch copy and re-checks every region's xxh3. Reports the median
//! over `--reps` alternating runs, and the save (pause) throughput.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ckpt_veloc::{CheckpointStore, EmbeddedStore, StoreConfig};

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().unwrap_or_else(|_| panic!("bad value for {name}")))
        .unwrap_or(default)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mib: usize = arg(&args, "--mib", 512);
    let regions: usize = arg(&args, "--regions", 16).max(1);
    let reps: usize = arg(&args, "--reps", 3).max(1);
    let base: PathBuf = arg(&args, "--dir", std::env::current_dir().expect("cwd"));
    let work = tempfile::Builder::new().prefix("flush-bench-").tempdir_in(&base).expect("work dir");

    let total = mib << 20;
    let region_size = total / regions;
    // Non-trivial content, so no layer can take shortcuts on zero pages.
    let data: Vec<Vec<u8>> = (0..regions)
        .map(|r| (0..region_size).map(|i| (i as u64).wrapping_mul(2654435761).wrapping_add(r as u64) as u8).collect())
        .collect();
    let bytes = (region_size * regions) as f64;

    let mut cfg = StoreConfig::new(1, work.path().join("persistent"));
    cfg.scratch = ckpt_veloc::ScratchBase::Dir(work.path().join("scratch"));
    let store = EmbeddedStore::open(&cfg).expect("open store");

    let (mut plain, mut flush, mut save) = (Vec::new(), Vec::new(), Vec::new());
    for rep in 0..reps {
        // Plain sequential write + fsync.
        let p = work.path().join(format!("plain-{rep}.bin"));
        let t = Instant::now();
        let mut f = File::create(&p).expect("create");
        for d in &data {
            f.write_all(d).expect("write");
        }
        f.sync_all().expect("fsync");
        plain.push(t.elapsed());
        drop(f);
        std::fs::remove_file(&p).expect("remove");

        // Checkpoint: save (the pause), then flush (background) until durable.
        let ckpt = rep as u64 + 1;
        let t = Instant::now();
        for (i, d) in data.iter().enumerate() {
            store.save_region(ckpt, i as u64, d).expect("save");
        }
        save.push(t.elapsed());
        let t = Instant::now();
        let out = store.flush(ckpt).expect("flush").wait().expect("flush result");
        flush.push(t.elapsed());
        assert_eq!(out.bytes as f64, bytes);
        std::fs::remove_dir_all(work.path().join(format!("persistent/ckpt-{ckpt}"))).expect("cleanup");
    }
    let mbps = |d: Duration| bytes / 1e6 / d.as_secs_f64();
    let (p, f, s) = (median(plain), median(flush), median(save));
    println!("bytes: {} ({} regions of {} bytes), reps: {reps}, dir: {}", bytes, regions, region_size, base.display());
    println!("plain_write_MBps: {:.1}", mbps(p));
    println!("flush_MBps: {:.1}", mbps(f));
    println!("ratio_flush_over_plain: {:.3}", mbps(f) / mbps(p));
    println!("save_pause_MBps: {:.1}", mbps(s));
}
