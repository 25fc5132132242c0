//! Reading and checking a VeloC configuration file (the file named by
//! `OMPCLUSTER_CP_EXECCFG`). Compiled in every build so that its checks are
//! unit-tested, and run by the launcher, even where VeloC is not installed.
//!
//! Keys are looked up as VeloC itself does (`config_t::get_optional` in
//! VeloC's `src/common/config.cpp`): an environment variable `VELOC_<KEY>`
//! (the key in upper case) wins over the file; in the file, VeloC only reads
//! `key = value` lines *before* any `[section]` header, names compared
//! without regard to case; `#` and `;` start comments. The VeloC store needs
//! `scratch`, `persistent` and `mode`, and refuses settings under which
//! VeloC would delete or skip persistent files that our manifests may still
//! refer to: `max_versions` other than 0 (VeloC's own retention; ours keeps
//! files referenced by kept manifests), `persistent_interval` other than 0
//! (skipped persistent flushes), `aggregated = true` (one file for all ranks,
//! at offsets we do not know), and `axl_type` or `daos_pool` (other storage
//! back-ends, which this store has not been tested with).

#![cfg_attr(not(feature = "veloc"), allow(dead_code))]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// How a VeloC client does its work, from `mode` (and `threaded`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum VelocMode {
    /// `mode = sync` (or `threaded = true`): each client runs VeloC's engine in a thread of
    /// its own process; `VELOC_Checkpoint_end` returns once the copy is done.
    InProcess,
    /// `mode = async`: one `veloc-backend` daemon per node and user serves every client
    /// through VeloC's IPC objects in `/dev/shm`.
    Backend,
}

/// A checked VeloC configuration.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct VelocSettings {
    pub(crate) scratch: PathBuf,
    pub(crate) persistent: PathBuf,
    pub(crate) mode: VelocMode,
    /// Whether `log_prefix` is set (else VeloC's clients log to standard output).
    pub(crate) log_prefix_set: bool,
}

/// Reads and checks the VeloC configuration file at `path`, with the
/// process's `VELOC_*` variables.
pub(crate) fn read_veloc_config(path: &Path) -> Result<VelocSettings, String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "cannot read the VeloC configuration {} (OMPCLUSTER_CP_EXECCFG): {e}",
            path.display()
        )
    })?;
    check_veloc_config(&text, |k| std::env::var(k).ok()).map_err(|e| {
        format!(
            "VeloC configuration {} (OMPCLUSTER_CP_EXECCFG): {e}",
            path.display()
        )
    })
}

/// The top-level `key = value` pairs of `text`, keys in lower case.
fn parse(text: &str) -> HashMap<String, String> {
    let mut keys = HashMap::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            break; // VeloC reads section "" only
        }
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        // inih splits at the first '=' or ':'.
        if let Some(i) = line.find(['=', ':']) {
            let (k, v) = (&line[..i], &line[i + 1..]);
            // inih strips inline comments that start with ';' after whitespace.
            let v = match v.find(" ;").or_else(|| v.find("\t;")) {
                Some(i) => &v[..i],
                None => v,
            };
            keys.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    keys
}

/// Checks the text of a VeloC configuration file; `env` looks up `VELOC_<KEY>` variables.
pub(crate) fn check_veloc_config(
    text: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<VelocSettings, String> {
    let file = parse(text);
    let get = |k: &str| -> Option<(String, &'static str)> {
        let var = format!("VELOC_{}", k.to_ascii_uppercase());
        if let Some(v) = env(&var).filter(|v| !v.is_empty()) {
            return Some((v, "from the environment"));
        }
        file.get(k).filter(|v| !v.is_empty()).map(|v| (v.clone(), ""))
    };
    let shown = |k: &str, v: &str, from: &str| {
        if from.is_empty() {
            format!("`{k} = {v}`")
        } else {
            format!("`{k} = {v}` ({from}, VELOC_{})", k.to_ascii_uppercase())
        }
    };
    let dir = |k: &str| -> Result<PathBuf, String> {
        let (v, from) = get(k).ok_or_else(|| format!("the `{k}` key is missing (keys under a [section] header are not read by VeloC)"))?;
        let p = PathBuf::from(&v);
        if !p.is_absolute() {
            return Err(format!("{} must be an absolute path", shown(k, &v, from)));
        }
        Ok(p)
    };
    let zero_or_absent = |k: &str, why: &str| -> Result<(), String> {
        match get(k) {
            None => Ok(()),
            Some((v, _)) if v.trim() == "0" => Ok(()),
            Some((v, from)) => Err(format!(
                "{} is not supported: {why}; remove it or set it to 0",
                shown(k, &v, from)
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
    for k in ["axl_type", "daos_pool"] {
        if let Some((v, from)) = get(k) {
            return Err(format!(
                "{} is not supported: the store writes through VeloC's POSIX back-end only",
                shown(k, &v, from)
            ));
        }
    }
    // VeloC ends the process on anything else ("mode of operation is invalid, must be
    // sync/async!", src/common/config.cpp), a missing key included.
    let mode = match get("mode") {
        Some((v, _)) if v == "sync" => VelocMode::InProcess,
        Some((v, _)) if v == "async" => VelocMode::Backend,
        Some((v, from)) => {
            return Err(format!(
                "{} is invalid: VeloC accepts `mode = sync` or `mode = async`",
                shown("mode", &v, from)
            ))
        }
        None => {
            return Err(
                "the `mode` key is missing (keys under a [section] header are not read by VeloC): VeloC needs `mode = sync` or `mode = async`".into(),
            )
        }
    };
    // VeloC's get_bool: true only for "true", any case.
    let flag = |k: &str| get(k).is_some_and(|(v, _)| v.eq_ignore_ascii_case("true"));
    if flag("aggregated") {
        return Err("`aggregated = true` is not supported: regions must stay in per-rank files".into());
    }
    // `threaded` makes an async client run VeloC's engine in its own process, as in sync mode.
    let mode = if flag("threaded") { VelocMode::InProcess } else { mode };
    Ok(VelocSettings {
        scratch: dir("scratch")?,
        persistent: dir("persistent")?,
        mode,
        log_prefix_set: get("log_prefix").is_some(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn accepts_a_plain_configuration() {
        let d = check_veloc_config(
            "# VeloC\nscratch = /tmp/s\npersistent=/shared/p\nmode = async\nmax_versions = 0\n",
            no_env,
        )
        .unwrap();
        assert_eq!(
            d,
            VelocSettings {
                scratch: "/tmp/s".into(),
                persistent: "/shared/p".into(),
                mode: VelocMode::Backend,
                log_prefix_set: false,
            }
        );
        let d = check_veloc_config("scratch = /s\npersistent = /p\nmode = sync ; inline\n", no_env).unwrap();
        assert_eq!(d.mode, VelocMode::InProcess);
        let d = check_veloc_config("scratch = /s\npersistent = /p\nmode = async\nthreaded = TRUE\n", no_env).unwrap();
        assert_eq!(d.mode, VelocMode::InProcess);
    }

    #[test]
    fn the_environment_wins_as_in_veloc() {
        let env = |k: &str| match k {
            "VELOC_MODE" => Some("sync".to_string()),
            "VELOC_PERSISTENT" => Some("/elsewhere".to_string()),
            _ => None,
        };
        let d = check_veloc_config("scratch = /s\npersistent = /p\nmode = async\n", env).unwrap();
        assert_eq!(d.mode, VelocMode::InProcess);
        assert_eq!(d.persistent, PathBuf::from("/elsewhere"));
        let env = |k: &str| (k == "VELOC_MAX_VERSIONS").then(|| "2".to_string());
        let e = check_veloc_config("scratch = /s\npersistent = /p\nmode = async\n", env).unwrap_err();
        assert!(e.contains("VELOC_MAX_VERSIONS"), "{e}");
    }

    #[test]
    fn refuses_what_would_break_manifests() {
        for (text, needle) in [
            ("persistent = /p\nmode = sync\n", "`scratch` key is missing"),
            ("scratch = /s\nmode = sync\n", "`persistent` key is missing"),
            ("[veloc]\nscratch = /s\npersistent = /p\nmode = sync\n", "[section]"),
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
            ("scratch = /s\npersistent = /p\nmode = sync\naxl_type = AXL_XFER_SYNC\n", "axl_type"),
        ] {
            let e = check_veloc_config(text, no_env).unwrap_err();
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
