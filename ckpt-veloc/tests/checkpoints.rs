//! Integration tests with real processes and real files: several ranks
//! (separate processes, each with its own store) write several incremental
//! versions into one persistent directory; the real `ompcluster-ckpt`
//! binary lists and verifies them; damage (bit flip, truncation, missing
//! file, damaged manifest) is caught by `verify` and by loading; unusable
//! directories fail when the store is opened.
//!
//! Rank processes are this test binary re-run with `CKPT_CHILD_SPEC` set
//! (the pattern rayon uses for its crash tests): the test
//! `child_process_entry` then plays one rank and exits.

use std::collections::BTreeMap;
use std::fs;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ckpt_veloc::{
    latest_version, list_versions, load_region, open, CheckpointMap, CheckpointStore,
    EmbeddedStore, LoadError, Manifest, RegionRecord, ScratchBase, StoreConfig,
};

const CLI: &str = env!("CARGO_BIN_EXE_ompcluster-ckpt");
const CHILD_ENV: &str = "CKPT_CHILD_SPEC";
const RECORDS_TAG: &str = "CKPT-RECORDS:";

/// Deterministic content of `region` as saved in checkpoint `ckpt`.
fn content(region: u64, ckpt: u64, size: usize) -> Vec<u8> {
    let mut x =
        region.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ ckpt.wrapping_mul(0xD1B5_4A32_D192_ED03) | 1;
    (0..size)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Runs when re-spawned as a rank: saves the regions in the spec, flushes,
/// prints the records. Does nothing in a normal test run.
#[test]
fn child_process_entry() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    // spec: "<rank>;<ckpt>;<region>:<size>,<region>:<size>,..."
    let mut parts = spec.split(';');
    let rank: u32 = parts.next().unwrap().parse().unwrap();
    let ckpt: u64 = parts.next().unwrap().parse().unwrap();
    let regions: Vec<(u64, usize)> = parts
        .next()
        .unwrap_or("")
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| {
            let (r, n) = s.split_once(':').unwrap();
            (r.parse().unwrap(), n.parse().unwrap())
        })
        .collect();
    // The directories and everything else come from OMPCLUSTER_CP_* variables.
    let config = StoreConfig::from_env(rank).unwrap_or_else(|e| panic!("config failed: {e}"));
    let store = open(&config).unwrap_or_else(|e| panic!("open failed: {e}"));
    for (region, size) in regions {
        store
            .save_region(ckpt, region, &content(region, ckpt, size))
            .unwrap();
    }
    let out = store.flush(ckpt).unwrap().wait().unwrap();
    println!(
        "{RECORDS_TAG}{}",
        serde_json::to_string(&out.records).unwrap()
    );
}

/// Starts one rank process that saves `regions` in `ckpt`.
fn spawn_rank(
    persistent: &Path,
    scratch: &Path,
    rank: u32,
    ckpt: u64,
    regions: &[(u64, usize)],
) -> std::process::Child {
    let list: Vec<String> = regions.iter().map(|(r, n)| format!("{r}:{n}")).collect();
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_process_entry",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, format!("{rank};{ckpt};{}", list.join(",")))
        .env("OMPCLUSTER_CP_ENABLE", "1")
        .env("OMPCLUSTER_CP_PERSISTENT", persistent)
        .env("OMPCLUSTER_CP_SCRATCH", scratch)
        .env("OMPCLUSTER_CP_KEEP", "2")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

fn records_of(out: Output) -> Vec<RegionRecord> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "rank process failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The test harness may print "test child_process_entry ... " before it.
    let line = stdout
        .lines()
        .find_map(|l| l.split_once(RECORDS_TAG).map(|(_, r)| r))
        .expect("records line");
    serde_json::from_str(line).unwrap()
}

/// One checkpoint: all ranks in parallel (separate processes), then the
/// head publishes once every flush is complete.
fn checkpoint(
    dir: &Path,
    scratch: &Path,
    map: &mut CheckpointMap,
    ckpt: u64,
    per_rank: &[(u32, &[(u64, usize)])],
) -> Vec<RegionRecord> {
    let children: Vec<_> = per_rank
        .iter()
        .map(|(rank, regs)| spawn_rank(dir, scratch, *rank, ckpt, regs))
        .collect();
    let mut all = Vec::new();
    for c in children {
        all.extend(records_of(c.wait_with_output().unwrap()));
    }
    map.record(all.clone());
    map.publish(dir, ckpt, NonZeroUsize::new(2).unwrap())
        .unwrap();
    all
}

fn cli(args: &[&str]) -> Output {
    Command::new(CLI).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn ranks_in_separate_processes_write_incremental_versions() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("persistent");
    let scratch = t.path().join("scratch");
    let mut map = CheckpointMap::new();
    // Expected content of each region at each version: region -> ckpt of its last save.
    let mut last: BTreeMap<u64, (u64, usize)> = BTreeMap::new();
    let mut expected: BTreeMap<u64, BTreeMap<u64, (u64, usize)>> = BTreeMap::new();

    // (checkpoint, [(rank, [(region, size)])])
    type Plan = Vec<(u64, Vec<(u32, Vec<(u64, usize)>)>)>;
    let plan: Plan = vec![
        // v1: every region, on three ranks.
        (
            1,
            vec![
                (0, vec![(1, 1000)]),
                (1, vec![(10, 70_000), (11, 5)]),
                (2, vec![(20, 300_000), (21, 0)]),
            ],
        ),
        // v2: only region 10 changed; ranks 0 and 2 flush nothing.
        (2, vec![(0, vec![]), (1, vec![(10, 70_000)]), (2, vec![])]),
        // v3: regions 10 and 21 changed.
        (
            3,
            vec![(0, vec![]), (1, vec![(10, 70_000)]), (2, vec![(21, 4096)])],
        ),
        // v4: region 11 moved to rank 2 and changed; region 10 changed.
        (
            4,
            vec![(0, vec![]), (1, vec![(10, 70_000)]), (2, vec![(11, 9)])],
        ),
    ];
    for (ckpt, ranks) in &plan {
        let per_rank: Vec<(u32, &[(u64, usize)])> =
            ranks.iter().map(|(r, v)| (*r, v.as_slice())).collect();
        let recs = checkpoint(&dir, &scratch, &mut map, *ckpt, &per_rank);
        for (_, regs) in ranks {
            for (region, size) in regs {
                last.insert(*region, (*ckpt, *size));
            }
        }
        assert_eq!(
            recs.len(),
            ranks.iter().map(|(_, v)| v.len()).sum::<usize>()
        );
        expected.insert(*ckpt, last.clone());
    }

    // Retention: the last two versions are kept.
    assert_eq!(list_versions(&dir).unwrap(), vec![3, 4]);
    assert_eq!(latest_version(&dir).unwrap(), Some(4));
    // v3 still needs region 11 from checkpoint 1 and region 20 from checkpoint 1 ...
    assert!(dir.join("ckpt-1/rank-1.data").exists());
    assert!(dir.join("ckpt-1/rank-2.data").exists());
    assert!(dir.join("ckpt-1/rank-0.data").exists());
    // ... while checkpoint 2's only file (region 10 of v2) is referenced by no kept version.
    assert!(!dir.join("ckpt-2/rank-1.data").exists());
    assert!(!dir.join("ckpt-2").exists());
    // Every file a kept manifest names exists.
    for v in [3, 4] {
        for r in Manifest::read(&dir, v).unwrap().regions {
            assert!(r.path_in(&dir).exists(), "{}", r.file.display());
        }
    }

    // Every region of every kept version loads, byte for byte, here: the
    // rank processes that saved them have all exited.
    for v in [3u64, 4] {
        let m = Manifest::read(&dir, v).unwrap();
        assert_eq!(
            m.regions.len(),
            5,
            "every region of the state is listed in v{v}"
        );
        for (region, (ckpt, size)) in &expected[&v] {
            let rec = m.region(*region).unwrap();
            assert_eq!(rec.ckpt, *ckpt, "region {region} in v{v}");
            assert_eq!(
                load_region(&dir, v, *region).unwrap(),
                content(*region, *ckpt, *size)
            );
        }
    }
    let m4 = Manifest::read(&dir, 4).unwrap();
    assert_eq!(m4.region(11).unwrap().rank, 2);
    assert_eq!(m4.region(20).unwrap().ckpt, 1);
    assert_eq!(m4.ranks().into_iter().collect::<Vec<_>>(), vec![0, 1, 2]);

    // The CLI agrees.
    let o = cli(&["verify", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("version 3: ok (5 regions"),
        "{}",
        text(&o)
    );
    assert!(
        text(&o).contains("version 4: ok (5 regions"),
        "{}",
        text(&o)
    );
    let o = cli(&["ls", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let s = text(&o);
    assert!(
        s.contains("version 4 ")
            && s.contains("ranks [0,1,2]")
            && s.contains("ckpt-1/rank-2.data@0"),
        "{s}"
    );
    assert!(!s.contains("version 2 "), "{s}");
}

/// Two versions written by two in-process stores (ranks 1 and 2), the
/// second incremental; returns (dir, paths of the data files by rank and ckpt).
fn small_dir(root: &Path) -> PathBuf {
    let dir = root.join("persistent");
    let mut map = CheckpointMap::new();
    let stores: Vec<EmbeddedStore> = (1..=2)
        .map(|rank| {
            let mut c = StoreConfig::new(rank, &dir);
            c.scratch = ScratchBase::Dir(root.join("scratch"));
            EmbeddedStore::open(&c).unwrap()
        })
        .collect();
    stores[0]
        .save_region(1, 100, &content(100, 1, 10_000))
        .unwrap();
    stores[0]
        .save_region(1, 101, &content(101, 1, 20_000))
        .unwrap();
    stores[1]
        .save_region(1, 200, &content(200, 1, 30_000))
        .unwrap();
    for s in &stores {
        map.record(s.flush(1).unwrap().wait().unwrap().records);
    }
    map.publish(&dir, 1, NonZeroUsize::new(3).unwrap()).unwrap();
    stores[1]
        .save_region(2, 200, &content(200, 2, 30_000))
        .unwrap();
    for s in &stores {
        map.record(s.flush(2).unwrap().wait().unwrap().records);
    }
    map.publish(&dir, 2, NonZeroUsize::new(3).unwrap()).unwrap();
    let o = cli(&["verify", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    dir
}

/// `verify` must fail naming `file`, and loading `region` of `version` must fail naming it too.
fn assert_damage_caught(dir: &Path, file: &Path, version: u64, region: u64) -> LoadError {
    let o = cli(&["verify", dir.to_str().unwrap()]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains(&format!("damaged: {}", file.display())),
        "{out}"
    );
    let e = load_region(dir, version, region).unwrap_err();
    assert!(e.to_string().contains(&file.display().to_string()), "{e}");
    e
}

#[test]
fn bit_flip_is_caught_by_verify_and_load() {
    let t = tempfile::tempdir().unwrap();
    let dir = small_dir(t.path());
    let f = dir.join("ckpt-1/rank-1.data");
    let mut b = fs::read(&f).unwrap();
    b[15_000] ^= 0x08; // inside region 101 (offset 10_000, 20_000 bytes)
    fs::write(&f, &b).unwrap();
    let e = assert_damage_caught(&dir, &f, 2, 101);
    assert!(matches!(e, LoadError::Corrupt { region: 101, .. }), "{e}");
    // Region 100 in the same file is intact and still loads; the damage is
    // reported for both versions that list region 101.
    assert_eq!(load_region(&dir, 2, 100).unwrap(), content(100, 1, 10_000));
    let out = text(&cli(&["verify", dir.to_str().unwrap()]));
    assert!(
        out.contains("version 1: DAMAGED (1 of 3 regions)")
            && out.contains("version 2: DAMAGED (1 of 3 regions)"),
        "{out}"
    );
}

#[test]
fn truncation_is_caught_by_verify_and_load() {
    let t = tempfile::tempdir().unwrap();
    let dir = small_dir(t.path());
    let f = dir.join("ckpt-2/rank-2.data");
    let b = fs::read(&f).unwrap();
    fs::write(&f, &b[..b.len() - 1]).unwrap();
    let e = assert_damage_caught(&dir, &f, 2, 200);
    assert!(matches!(e, LoadError::Truncated { region: 200, .. }), "{e}");
    // Version 1's copy of region 200 is still good.
    assert_eq!(load_region(&dir, 1, 200).unwrap(), content(200, 1, 30_000));
}

#[test]
fn missing_file_is_caught_by_verify_and_load() {
    let t = tempfile::tempdir().unwrap();
    let dir = small_dir(t.path());
    let f = dir.join("ckpt-1/rank-1.data");
    fs::remove_file(&f).unwrap();
    let e = assert_damage_caught(&dir, &f, 2, 100);
    assert!(
        matches!(
            e,
            LoadError::Io {
                region: 100,
                rank: 1,
                ckpt: 1,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn damaged_manifest_is_caught_by_verify_and_load() {
    let t = tempfile::tempdir().unwrap();
    let dir = small_dir(t.path());
    let m = dir.join("manifests/manifest-2.json");
    let s = fs::read_to_string(&m).unwrap();
    fs::write(&m, &s[..s.len() / 2]).unwrap();
    let o = cli(&["verify", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("damaged: {} (manifest)", m.display())),
        "{}",
        text(&o)
    );
    let e = load_region(&dir, 2, 100).unwrap_err();
    assert!(e.to_string().contains(&m.display().to_string()), "{e}");
}

#[test]
fn verify_of_a_directory_without_versions_fails() {
    let t = tempfile::tempdir().unwrap();
    let o = cli(&["verify", t.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("no published checkpoint versions"),
        "{}",
        text(&o)
    );
    let o = cli(&["verify", t.path().join("nope").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let o = cli(&["ls", t.path().to_str().unwrap()]);
    assert!(
        o.status.success() && text(&o).contains("no published checkpoint versions"),
        "{}",
        text(&o)
    );
}

#[test]
fn interval_prints_young_and_daly() {
    let o = cli(&[
        "interval",
        "--bytes",
        "1000000000",
        "--wspeed",
        "10",
        "--mtbf",
        "86400",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    // C = 100 s: Young sqrt(2*100*86400) = 4156.922; Daly = 4090.523.
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "young_seconds: 4156.922\ndaly_seconds: 4090.523\n"
    );
    // Defaults: 10 MB/s, one day.
    let o = cli(&["interval", "--bytes", "1000000000"]);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "young_seconds: 4156.922\ndaly_seconds: 4090.523\n"
    );
    // C >= 2 M: Daly gives M.
    let o = cli(&[
        "interval", "--bytes", "3000", "--wspeed", "0.000001", "--mtbf", "1000",
    ]);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "young_seconds: 2449.490\ndaly_seconds: 1000.000\n"
    );
    for bad in [["--bytes", "-5"], ["--wspeed", "0"]] {
        let mut args = vec!["interval", "--bytes", "10"];
        args.extend_from_slice(&bad);
        let o = cli(&args);
        assert!(!o.status.success(), "{args:?}: {}", text(&o));
    }
}

/// Opens a store in a fresh process from environment variables only, as the
/// runtime does at start-up, and returns its output.
fn open_in_child(envs: &[(&str, &Path)]) -> Output {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "--exact",
        "child_process_entry",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_ENV, "1;1;5:10")
    .env("OMPCLUSTER_CP_ENABLE", "1")
    .env_remove("OMPCLUSTER_CP_PERSISTENT")
    .env_remove("OMPCLUSTER_CP_SCRATCH");
    for (k, v) in envs {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// Tests run as root, for whom `chmod 000` does not stop writes. Two
/// methods that fail for root too: a path under a regular *file* (mkdir
/// fails with ENOTDIR), and `/proc`, an existing directory of a file
/// system in which nobody can create files.
#[test]
fn unusable_directories_fail_at_start_up() {
    let t = tempfile::tempdir().unwrap();
    let file = t.path().join("regular-file");
    fs::write(&file, b"x").unwrap();
    let good = t.path().join("good");

    let o = open_in_child(&[
        ("OMPCLUSTER_CP_PERSISTENT", &file.join("ckpt")),
        ("OMPCLUSTER_CP_SCRATCH", &good),
    ]);
    let s = text(&o);
    assert!(!o.status.success(), "{s}");
    assert!(
        s.contains("open failed: cannot create the checkpoint persistent directory"),
        "{s}"
    );
    assert!(
        s.contains(&file.join("ckpt").display().to_string())
            && s.contains("OMPCLUSTER_CP_PERSISTENT"),
        "{s}"
    );
    assert!(!s.contains(RECORDS_TAG), "{s}");

    let o = open_in_child(&[
        ("OMPCLUSTER_CP_PERSISTENT", &good),
        ("OMPCLUSTER_CP_SCRATCH", &file.join("s")),
    ]);
    let s = text(&o);
    assert!(!o.status.success(), "{s}");
    assert!(
        s.contains("checkpoint scratch directory") && s.contains("OMPCLUSTER_CP_SCRATCH"),
        "{s}"
    );

    let o = open_in_child(&[
        ("OMPCLUSTER_CP_PERSISTENT", Path::new("/proc")),
        ("OMPCLUSTER_CP_SCRATCH", &good),
    ]);
    let s = text(&o);
    assert!(!o.status.success(), "{s}");
    assert!(
        s.contains("the checkpoint persistent directory /proc is not writable"),
        "{s}"
    );

    // The same configuration with usable directories works.
    let o = open_in_child(&[
        ("OMPCLUSTER_CP_PERSISTENT", &good),
        ("OMPCLUSTER_CP_SCRATCH", &good),
    ]);
    assert!(
        o.status.success() && text(&o).contains(RECORDS_TAG),
        "{}",
        text(&o)
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        fs::metadata(&good).unwrap().permissions().mode() & 0o777,
        0o700
    );
    assert_eq!(
        fs::metadata(good.join("ckpt-1"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o700
    );
}

#[test]
fn invalid_environment_names_the_variable() {
    let o = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_process_entry",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1;1;")
        .env("OMPCLUSTER_CP_MTBF", "soon")
        .output()
        .unwrap();
    let s = text(&o);
    assert!(!o.status.success(), "{s}");
    assert!(
        s.contains("invalid value \"soon\" for OMPCLUSTER_CP_MTBF"),
        "{s}"
    );
}
