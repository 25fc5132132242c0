//! Reading and checking a VeloC configuration file (the file named by
//! `OMPCLUSTER_CP_EXECCFG`). Compiled in every build so that its checks are
//! unit-tested even where VeloC is not installed.
//!
//! VeloC's file is INI-like: `key = value` lines, `#` or `;` comments,
//! optional `[section]` headers. The VeloC store needs `scratch` and
//! `persistent`, and refuses settings under which VeloC itself would delete
//! or skip persistent files that our manifests may still refer to:
//! `max_versions` other than 0 (VeloC's own retention; ours keeps files
//! referenced by kept manifests), `persistent_interval` other than 0
//! (skipped persistent flushes), and `aggregated = true` (one file for all
//! ranks, at offsets we do not know).

#![cfg_attr(not(feature = "veloc"), allow(dead_code))]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The directories of a checked VeloC configuration.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct VelocDirs {
    pub(crate) scratch: PathBuf,
    pub(crate) persistent: PathBuf,
}

/// Reads and checks the VeloC configuration file at `path`.
pub(crate) fn read_veloc_config(path: &Path) -> Result<VelocDirs, String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "cannot read the VeloC configuration {} (OMPCLUSTER_CP_EXECCFG): {e}",
            path.display()
        )
    })?;
    check_veloc_config(&text).map_err(|e| {
        format!(
            "VeloC configuration {} (OMPCLUSTER_CP_EXECCFG): {e}",
            path.display()
        )
    })
}

fn parse(text: &str) -> HashMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| {
            !l.is_empty() && !l.starts_with('#') && !l.starts_with(';') && !l.starts_with('[')
        })
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect()
}

/// Checks the text of a VeloC configuration file.
pub(crate) fn check_veloc_config(text: &str) -> Result<VelocDirs, String> {
    let keys = parse(text);
    let dir = |k: &str| -> Result<PathBuf, String> {
        let v = keys
            .get(k)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| format!("the `{k}` key is missing"))?;
        let p = PathBuf::from(v);
        if !p.is_absolute() {
            return Err(format!("`{k} = {v}` must be an absolute path"));
        }
        Ok(p)
    };
    let zero_or_absent = |k: &str, why: &str| -> Result<(), String> {
        match keys.get(k).map(|v| v.trim()) {
            None | Some("0") | Some("") => Ok(()),
            Some(v) => Err(format!(
                "`{k} = {v}` is not supported: {why}; remove it or set it to 0"
            )),
        }
    };
    zero_or_absent(
        "max_versions",
        "VeloC would delete old versions that incremental manifests still refer to",
    )?;
    zero_or_absent(
        "persistent_interval",
        "VeloC would skip persistent copies that manifests refer to",
    )?;
    // VeloC ends the process on anything else ("mode of operation is invalid, must be
    // sync/async!", src/common/config.cpp), a missing key included.
    match keys.get("mode").map(String::as_str) {
        Some("sync" | "async") => {}
        Some(v) => return Err(format!("`mode = {v}` is invalid: VeloC accepts `mode = sync` or `mode = async`")),
        None => return Err("the `mode` key is missing: VeloC needs `mode = sync` or `mode = async`".into()),
    }
    if let Some(v) = keys.get("aggregated") {
        if matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on") {
            return Err(format!(
                "`aggregated = {v}` is not supported: regions must stay in per-rank files"
            ));
        }
    }
    Ok(VelocDirs {
        scratch: dir("scratch")?,
        persistent: dir("persistent")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_a_plain_configuration() {
        let d = check_veloc_config(
            "# VeloC\nscratch = /tmp/s\npersistent=/shared/p\nmode = async\nmax_versions = 0\n",
        )
        .unwrap();
        assert_eq!(
            d,
            VelocDirs {
                scratch: "/tmp/s".into(),
                persistent: "/shared/p".into()
            }
        );
    }

    #[test]
    fn refuses_what_would_break_manifests() {
        for (text, needle) in [
            ("persistent = /p\nmode = sync\n", "`scratch` key is missing"),
            ("scratch = /s\nmode = sync\n", "`persistent` key is missing"),
            ("scratch = s\npersistent = /p\nmode = sync\n", "absolute"),
            ("scratch = /s\npersistent = /p\n", "`mode` key is missing"),
            ("scratch = /s\npersistent = /p\nmode = Async\n", "`mode = Async` is invalid"),
            (
                "scratch = /s\npersistent = /p\nmode = sync\nmax_versions = 3\n",
                "max_versions = 3",
            ),
            (
                "scratch = /s\npersistent = /p\nmode = sync\npersistent_interval = 60\n",
                "persistent_interval = 60",
            ),
            (
                "scratch = /s\npersistent = /p\nmode = sync\naggregated = true\n",
                "aggregated = true",
            ),
        ] {
            let e = check_veloc_config(text).unwrap_err();
            assert!(e.contains(needle), "{text:?}: {e}");
        }
    }

    #[test]
    fn unreadable_file_names_the_variable() {
        let e = read_veloc_config(Path::new("/nonexistent/veloc.cfg")).unwrap_err();
        assert!(
            e.contains("/nonexistent/veloc.cfg") && e.contains("OMPCLUSTER_CP_EXECCFG"),
            "{e}"
        );
    }
}
