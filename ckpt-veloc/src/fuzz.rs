//! Property tests of what this crate reads from the disk or the environment (issue 36):
//! manifests (any bytes, and real ones damaged), the VeloC configuration file, and the
//! `OMPCLUSTER_CP_*` values. Each input decodes to something its checks accept or is
//! refused with a named error; nothing panics.
//!
//! A longer run: `PROPTEST_CASES=100000 cargo test --release -p ckpt-veloc fuzz`.

use crate::config::vars;
use crate::manifest::{Manifest, MANIFEST_FORMAT};
use crate::record::{Checksum, RegionRecord};
use crate::veloc_cfg::check_veloc_config;
use crate::StoreConfig;
use proptest::prelude::*;
use std::path::PathBuf;

fn manifest_bytes() -> Vec<u8> {
    let region = |region, ckpt| RegionRecord {
        region,
        ckpt,
        rank: 1,
        size: 4096,
        checksum: Checksum::of(&[0u8; 4096]),
        file: PathBuf::from(format!("ckpt-{ckpt}/rank-1.dat")),
        offset: 8192 * region,
        saved_unix_ms: 1_700_000_000_000,
    };
    let m = Manifest { format: MANIFEST_FORMAT.into(), version: 3, created_unix_ms: 1_700_000_000_000, regions: vec![region(1, 2), region(2, 3)] };
    serde_json::to_vec_pretty(&m).unwrap()
}

fn read(bytes: &[u8]) -> Result<Manifest, String> {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("manifest-3.json");
    std::fs::write(&f, bytes).unwrap();
    Manifest::read_file(&f).map_err(|e| e.to_string())
}

#[test]
fn the_sample_manifest_reads_back() {
    assert_eq!(read(&manifest_bytes()).map(|m| m.regions.len()), Ok(2));
}

proptest! {
    #[test]
    fn a_damaged_manifest_is_refused_or_consistent(
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
        cut in any::<usize>(),
    ) {
        let mut b = manifest_bytes();
        for (at, x) in flips {
            let n = b.len();
            b[at % n] ^= x;
        }
        let keep = cut % (b.len() + 1);
        for bytes in [&b[..], &b[..keep]] {
            if let Ok(m) = read(bytes) {
                // What is accepted passed the checks: sorted regions, files inside the directory.
                prop_assert!(m.regions.windows(2).all(|w| w[0].region < w[1].region));
                prop_assert!(m.regions.iter().all(|r| r.file.is_relative() && r.ckpt <= m.version));
            }
        }
    }

    #[test]
    fn any_bytes_are_no_manifest_or_a_consistent_one(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = read(&bytes);
    }

    #[test]
    fn any_veloc_configuration_is_checked_never_a_panic(
        text in "([a-z_]{0,12}( )?=( )?[ -~]{0,24}\n|#[ -~]{0,10}\n|[ -~]{0,30}\n){0,8}",
        mode in proptest::option::of("[ -~]{0,8}"),
    ) {
        let _ = check_veloc_config(&text, |k| (k == "VELOC_MODE").then(|| mode.clone()).flatten());
    }

    #[test]
    fn any_checkpoint_setting_is_accepted_or_named(
        which in 0..8usize,
        value in "[ -~]{0,16}",
    ) {
        let names = [vars::ENABLE, vars::INTERVAL, vars::WSPEED, vars::MTBF, vars::DALY, vars::KEEP, vars::USEVELOC, vars::SCRATCH];
        let name = names[which];
        match StoreConfig::from_lookup(0, |n| (n == name).then(|| value.clone())) {
            Ok(_) => {}
            Err(e) => prop_assert!(e.to_string().contains(name), "{e} does not name {name}"),
        }
    }
}
