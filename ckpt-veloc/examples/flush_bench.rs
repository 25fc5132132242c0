//! Flush throughput of the embedded store against a plain sequential write
//! of the same bytes to the same directory, in the same run.
//!
//! ```text
//! cargo run --release -p ckpt-veloc --example flush_bench -- [--mib 512] [--regions 16] [--reps 3] [--dir DIR] [--scratch DIR]
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

/// Plain sequential write of all regions to one new file, then fsync.
fn plain_write(p: &std::path::Path, data: &[Vec<u8>]) -> Duration {
    let t = Instant::now();
    let mut f = File::create(p).expect("create");
    for d in data {
        f.write_all(d).expect("write");
    }
    f.sync_all().expect("fsync");
    let e = t.elapsed();
    drop(f);
    std::fs::remove_file(p).expect("remove");
    e
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
    let work = tempfile::Builder::new()
        .prefix("flush-bench-")
        .tempdir_in(&base)
        .expect("work dir");
    // Scratch base: same disk by default; `--scratch /dev/shm` for a tmpfs scratch.
    let scratch_base: PathBuf = arg(&args, "--scratch", work.path().join("scratch"));

    let total = mib << 20;
    let region_size = total / regions;
    // Non-trivial content, so no layer can take shortcuts on zero pages.
    let data: Vec<Vec<u8>> = (0..regions)
        .map(|r| {
            (0..region_size)
                .map(|i| (i as u64).wrapping_mul(2654435761).wrapping_add(r as u64) as u8)
                .collect()
        })
        .collect();
    let bytes = (region_size * regions) as f64;

    let mut cfg = StoreConfig::new(1, work.path().join("persistent"));
    cfg.scratch = ckpt_veloc::ScratchBase::Dir(scratch_base.clone());
    let store = EmbeddedStore::open(&cfg).expect("open store");

    let (mut plain, mut flush, mut save) = (Vec::new(), Vec::new(), Vec::new());
    for rep in 0..reps {
        // Alternate which side goes first, so that neither always runs
        // right after the other has filled the disk's caches.
        let flush_first = rep % 2 == 1;
        if !flush_first {
            plain.push(plain_write(
                &work.path().join(format!("plain-{rep}.bin")),
                &data,
            ));
        }
        // Checkpoint: save (the pause), then flush (background) until durable.
        let ckpt = rep as u64 + 1;
        let t = Instant::now();
        for (i, d) in data.iter().enumerate() {
            store.save_region(ckpt, i as u64, d).expect("save");
        }
        save.push(t.elapsed());
        let t = Instant::now();
        let out = store
            .flush(ckpt)
            .expect("flush")
            .wait()
            .expect("flush result");
        flush.push(t.elapsed());
        assert_eq!(out.bytes as f64, bytes);
        std::fs::remove_dir_all(work.path().join(format!("persistent/ckpt-{ckpt}")))
            .expect("cleanup");
        if flush_first {
            plain.push(plain_write(
                &work.path().join(format!("plain-{rep}.bin")),
                &data,
            ));
        }
    }
    let mbps = |d: Duration| bytes / 1e6 / d.as_secs_f64();
    for (i, (p, f)) in plain.iter().zip(&flush).enumerate() {
        let first = if i % 2 == 1 { "flush" } else { "plain" };
        println!(
            "rep {i} ({first} first): plain {:.1} MB/s, flush {:.1} MB/s",
            mbps(*p),
            mbps(*f)
        );
    }
    let (p, f, s) = (median(plain.clone()), median(flush.clone()), median(save));
    println!(
        "bytes: {} ({} regions of {} bytes), reps: {reps}, dir: {}, scratch: {}",
        bytes,
        regions,
        region_size,
        base.display(),
        scratch_base.display()
    );
    println!("plain_write_MBps: {:.1}", mbps(p));
    println!("flush_MBps: {:.1}", mbps(f));
    println!("ratio_flush_over_plain: {:.3}", mbps(f) / mbps(p));
    // Each repetition's pair ran back to back, so its ratio is less exposed
    // to load that changes during the run.
    let mut pair: Vec<f64> = plain
        .iter()
        .zip(&flush)
        .map(|(p, f)| p.as_secs_f64() / f.as_secs_f64())
        .collect();
    pair.sort_by(|a, b| a.total_cmp(b));
    println!("median_pair_ratio: {:.3}", pair[pair.len() / 2]);
    println!("save_pause_MBps: {:.1}", mbps(s));
}
