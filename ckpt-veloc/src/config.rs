//! Store configuration from the `OMPCLUSTER_CP_*` environment variables.
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `OMPCLUSTER_CP_ENABLE` | `1`/`0` (also `true`/`false`, `yes`/`no`, `on`/`off`) | off, unless an interval variable is set |
//! | `OMPCLUSTER_CP_INTERVAL` | fixed interval in seconds (> 0) | Young's formula |
//! | `OMPCLUSTER_CP_WSPEED` | write speed in MB/s (10^6 bytes/s, > 0) | 10 |
//! | `OMPCLUSTER_CP_MTBF` | mean time between failures in seconds (> 0) | 86400 |
//! | `OMPCLUSTER_CP_DALY` | `1`: Daly's refinement instead of Young | 0 |
//! | `OMPCLUSTER_CP_SCRATCH` | base of the per-rank scratch directory | `$XDG_RUNTIME_DIR`, else `/dev/shm`, else `$TMPDIR`, else `/tmp` |
//! | `OMPCLUSTER_CP_PERSISTENT` | persistent (shared) directory | `./ompcluster-ckpt` |
//! | `OMPCLUSTER_CP_KEEP` | published versions kept (>= 1) | 2 |
//! | `OMPCLUSTER_CP_USEVELOC` | `1`: use the VeloC store | 0 |
//! | `OMPCLUSTER_CP_EXECCFG` | VeloC configuration file (required with `USEVELOC=1`) | none |
//!
//! Checkpointing is enabled when `OMPCLUSTER_CP_ENABLE` is true, or when it
//! is unset and one of `OMPCLUSTER_CP_INTERVAL`, `_WSPEED`, `_MTBF`, `_DALY`
//! is set; `OMPCLUSTER_CP_ENABLE=0` always disables it. A variable set to
//! the empty string counts as unset. Relative paths are made absolute
//! against the working directory when the configuration is read.

use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::ConfigError;
use crate::interval::IntervalPolicy;
use crate::record::Rank;

/// Default `OMPCLUSTER_CP_WSPEED`, MB/s.
pub const DEFAULT_WSPEED_MB_S: f64 = 10.0;
/// Default `OMPCLUSTER_CP_MTBF`, s (one day).
pub const DEFAULT_MTBF_S: f64 = 86_400.0;
/// Default `OMPCLUSTER_CP_KEEP`.
pub const DEFAULT_KEEP: usize = 2;
/// Default persistent directory, relative to the working directory.
pub const DEFAULT_PERSISTENT: &str = "ompcluster-ckpt";

/// Names of the environment variables.
pub mod vars {
    /// Enables checkpointing.
    pub const ENABLE: &str = "OMPCLUSTER_CP_ENABLE";
    /// Fixed interval, s.
    pub const INTERVAL: &str = "OMPCLUSTER_CP_INTERVAL";
    /// Write speed, MB/s.
    pub const WSPEED: &str = "OMPCLUSTER_CP_WSPEED";
    /// Mean time between failures, s.
    pub const MTBF: &str = "OMPCLUSTER_CP_MTBF";
    /// Daly's refinement.
    pub const DALY: &str = "OMPCLUSTER_CP_DALY";
    /// Scratch directory base.
    pub const SCRATCH: &str = "OMPCLUSTER_CP_SCRATCH";
    /// Persistent directory.
    pub const PERSISTENT: &str = "OMPCLUSTER_CP_PERSISTENT";
    /// Versions kept.
    pub const KEEP: &str = "OMPCLUSTER_CP_KEEP";
    /// Use VeloC.
    pub const USEVELOC: &str = "OMPCLUSTER_CP_USEVELOC";
    /// VeloC configuration file.
    pub const EXECCFG: &str = "OMPCLUSTER_CP_EXECCFG";
    /// How messages name what chooses the VeloC store's persistent directory.
    pub const VELOC_PERSISTENT: &str = "`persistent` in the VeloC configuration OMPCLUSTER_CP_EXECCFG names";
    /// How messages name what chooses the VeloC store's scratch directory.
    pub const VELOC_SCRATCH: &str = "`scratch` in the VeloC configuration OMPCLUSTER_CP_EXECCFG names";
}

/// Which store implementation to open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The embedded file store (default).
    Embedded,
    /// The VeloC store, with its configuration file (`OMPCLUSTER_CP_EXECCFG`).
    Veloc {
        /// VeloC configuration file.
        config_file: PathBuf,
    },
}

/// Where the per-rank scratch directory is made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScratchBase {
    /// `$XDG_RUNTIME_DIR` if set, else `/dev/shm` if writable, else the system temporary
    /// directory.
    Default,
    /// `OMPCLUSTER_CP_SCRATCH`.
    Dir(PathBuf),
}

impl ScratchBase {
    /// How messages name what chose this base.
    pub(crate) fn var(&self) -> &'static str {
        match self {
            ScratchBase::Dir(_) => vars::SCRATCH,
            ScratchBase::Default => "OMPCLUSTER_CP_SCRATCH (default: $XDG_RUNTIME_DIR, /dev/shm or $TMPDIR)",
        }
    }

    /// The directory in which the store creates its own uniquely named,
    /// private (0700) scratch directory.
    pub fn resolve(&self) -> PathBuf {
        match self {
            ScratchBase::Dir(p) => p.clone(),
            ScratchBase::Default => match std::env::var_os("XDG_RUNTIME_DIR") {
                Some(d) if !d.is_empty() && Path::new(&d).is_dir() => PathBuf::from(d),
                // Memory-backed node-local storage: the pause then costs a memory copy, and
                // the flush is the only write to disk. The store makes its own uniquely named
                // 0700 directory inside it.
                _ if is_writable_dir(Path::new("/dev/shm")) => PathBuf::from("/dev/shm"),
                _ => std::env::temp_dir(),
            },
        }
    }
}

fn is_writable_dir(p: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else { return false };
    // SAFETY: access() only reads the NUL-terminated path.
    p.is_dir() && unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } == 0
}

/// Everything a rank needs to open its checkpoint store.
#[derive(Clone, Debug, PartialEq)]
pub struct StoreConfig {
    /// This process's rank (head = 0).
    pub rank: Rank,
    /// Whether checkpointing is on at all.
    pub enabled: bool,
    /// How the interval is chosen.
    pub interval: IntervalPolicy,
    /// Base of the scratch directory.
    pub scratch: ScratchBase,
    /// Persistent directory (absolute).
    pub persistent: PathBuf,
    /// Published versions kept.
    pub keep: NonZeroUsize,
    /// Store implementation.
    pub backend: Backend,
    /// Identifies the job among the jobs of this user: the same on every rank of one job
    /// (the runtime hands rank 0's to all), different for another job. The VeloC store uses
    /// it to tell the ranks of its own job from another job's on a node.
    pub job: u64,
}

/// A job token unlikely to be any other job's: std's randomly keyed hasher over the
/// process id and the time.
fn new_job_token() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    h.finish()
}

impl StoreConfig {
    /// A configuration with checkpointing enabled, the embedded store, the
    /// default interval policy and the given persistent directory.
    pub fn new(rank: Rank, persistent: impl Into<PathBuf>) -> Self {
        StoreConfig {
            rank,
            enabled: true,
            interval: IntervalPolicy::Young {
                wspeed_mb_s: DEFAULT_WSPEED_MB_S,
                mtbf_s: DEFAULT_MTBF_S,
            },
            scratch: ScratchBase::Default,
            persistent: absolute(persistent.into()),
            keep: NonZeroUsize::new(DEFAULT_KEEP).expect("DEFAULT_KEEP > 0"),
            backend: Backend::Embedded,
            job: new_job_token(),
        }
    }

    /// Reads the configuration from the process environment.
    pub fn from_env(rank: Rank) -> Result<Self, ConfigError> {
        Self::from_lookup(rank, |name| std::env::var(name).ok())
    }

    /// Reads the configuration through `lookup` (the environment in
    /// [`from_env`](Self::from_env); a map in tests).
    pub fn from_lookup(
        rank: Rank,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let get = |name: &'static str| {
            lookup(name)
                .filter(|v| !v.trim().is_empty())
                .map(|v| (name, v))
        };

        let enable = get(vars::ENABLE)
            .map(|(n, v)| parse_bool(n, &v))
            .transpose()?;
        let interval = get(vars::INTERVAL)
            .map(|(n, v)| parse_positive(n, &v))
            .transpose()?;
        let wspeed = get(vars::WSPEED)
            .map(|(n, v)| parse_positive(n, &v))
            .transpose()?;
        let mtbf = get(vars::MTBF)
            .map(|(n, v)| parse_positive(n, &v))
            .transpose()?;
        let daly = get(vars::DALY)
            .map(|(n, v)| parse_bool(n, &v))
            .transpose()?;
        let keep = get(vars::KEEP)
            .map(|(n, v)| parse_keep(n, &v))
            .transpose()?;
        let use_veloc = get(vars::USEVELOC)
            .map(|(n, v)| parse_bool(n, &v))
            .transpose()?;
        let execcfg = get(vars::EXECCFG).map(|(_, v)| absolute(PathBuf::from(v)));
        let scratch = get(vars::SCRATCH).map(|(_, v)| absolute(PathBuf::from(v)));
        let persistent = get(vars::PERSISTENT).map(|(_, v)| absolute(PathBuf::from(v)));

        let any_interval_var =
            interval.is_some() || wspeed.is_some() || mtbf.is_some() || daly.is_some();
        let enabled = enable.unwrap_or(any_interval_var);

        let wspeed_mb_s = wspeed.unwrap_or(DEFAULT_WSPEED_MB_S);
        let mtbf_s = mtbf.unwrap_or(DEFAULT_MTBF_S);
        let interval = match (interval, daly.unwrap_or(false)) {
            (Some(s), _) => IntervalPolicy::Fixed(Duration::from_secs_f64(s)),
            (None, true) => IntervalPolicy::Daly {
                wspeed_mb_s,
                mtbf_s,
            },
            (None, false) => IntervalPolicy::Young {
                wspeed_mb_s,
                mtbf_s,
            },
        };
        let backend = if use_veloc.unwrap_or(false) {
            let config_file = execcfg.ok_or(ConfigError::Missing {
                var: vars::EXECCFG,
                because: "OMPCLUSTER_CP_USEVELOC=1 (it names the VeloC configuration file)",
            })?;
            // Checked here, where every other setting is: the launcher refuses a file VeloC
            // would reject (it ends each rank that reads it) before any rank starts.
            crate::veloc_cfg::read_veloc_config(&config_file).map_err(ConfigError::VelocConfig)?;
            Backend::Veloc { config_file }
        } else {
            Backend::Embedded
        };
        Ok(StoreConfig {
            rank,
            enabled,
            interval,
            scratch: scratch.map_or(ScratchBase::Default, ScratchBase::Dir),
            persistent: persistent.unwrap_or_else(|| absolute(PathBuf::from(DEFAULT_PERSISTENT))),
            keep: keep.unwrap_or(NonZeroUsize::new(DEFAULT_KEEP).expect("DEFAULT_KEEP > 0")),
            backend,
            job: new_job_token(),
        })
    }

    /// Creates (0700) the directories this configuration names and checks that files can
    /// be written in them: the persistent directory and the scratch base, or with VeloC the
    /// `scratch` and `persistent` of its configuration. For the launcher, which so refuses
    /// an unusable directory in one line before any rank starts (each rank checks again
    /// when it opens its store: scratch directories are node-local).
    pub fn check_dirs(&self) -> Result<(), crate::error::OpenError> {
        use crate::error::OpenError;
        let dirs: Vec<(&'static str, &'static str, PathBuf)> = match &self.backend {
            Backend::Embedded => vec![
                ("persistent", vars::PERSISTENT, self.persistent.clone()),
                ("scratch", self.scratch.var(), self.scratch.resolve()),
            ],
            Backend::Veloc { config_file } => {
                let s = crate::veloc_cfg::read_veloc_config(config_file).map_err(OpenError::Veloc)?;
                vec![("persistent", vars::VELOC_PERSISTENT, s.persistent), ("scratch", vars::VELOC_SCRATCH, s.scratch)]
            }
        };
        dirs.iter().try_for_each(|(role, var, path)| crate::fsutil::usable_dir(role, var, path))
    }

    /// With the VeloC store and no `log_prefix` configured: a directory for VeloC's client
    /// logs (its `scratch`), which otherwise go to the program's standard output.
    pub fn veloc_log_dir(&self) -> Option<PathBuf> {
        match &self.backend {
            Backend::Veloc { config_file } => crate::veloc_cfg::read_veloc_config(config_file)
                .ok()
                .filter(|s| !s.log_prefix_set)
                .map(|s| s.scratch),
            Backend::Embedded => None,
        }
    }

    /// Interval before the next checkpoint given the bytes it would save,
    /// or `None` when checkpointing is disabled.
    pub fn interval_for(&self, bytes: u64) -> Option<Duration> {
        self.enabled.then(|| self.interval.interval(bytes))
    }
}

fn absolute(p: PathBuf) -> PathBuf {
    if p.is_absolute() {
        p
    } else {
        match std::env::current_dir() {
            Ok(cwd) => cwd.join(p),
            Err(_) => p,
        }
    }
}

fn parse_bool(var: &'static str, v: &str) -> Result<bool, ConfigError> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(ConfigError::Invalid {
            var,
            value: v.to_string(),
            reason: "expected 1 or 0 (or true/false, yes/no, on/off)",
        }),
    }
}

fn parse_positive(var: &'static str, v: &str) -> Result<f64, ConfigError> {
    match v.trim().parse::<f64>() {
        // Bounded so that Duration::from_secs_f64 cannot panic.
        Ok(x) if x.is_finite() && x > 0.0 && x < 1e15 => Ok(x),
        _ => Err(ConfigError::Invalid {
            var,
            value: v.to_string(),
            reason: "expected a positive number",
        }),
    }
}

fn parse_keep(var: &'static str, v: &str) -> Result<NonZeroUsize, ConfigError> {
    v.trim()
        .parse::<usize>()
        .ok()
        .and_then(NonZeroUsize::new)
        .ok_or(ConfigError::Invalid {
            var,
            value: v.to_string(),
            reason: "expected an integer >= 1",
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cfg(pairs: &[(&str, &str)]) -> Result<StoreConfig, ConfigError> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        StoreConfig::from_lookup(3, |k| m.get(k).cloned())
    }

    #[test]
    fn off_by_default() {
        let c = cfg(&[]).unwrap();
        assert!(!c.enabled);
        assert_eq!(c.interval_for(1 << 30), None);
        assert_eq!(c.backend, Backend::Embedded);
        assert_eq!(c.keep.get(), DEFAULT_KEEP);
        assert!(c.persistent.is_absolute());
        assert!(c.persistent.ends_with(DEFAULT_PERSISTENT));
        assert_eq!(c.scratch, ScratchBase::Default);
        assert_eq!(c.rank, 3);
    }

    #[test]
    fn enabled_by_flag_or_interval_variables() {
        assert!(cfg(&[("OMPCLUSTER_CP_ENABLE", "1")]).unwrap().enabled);
        assert!(cfg(&[("OMPCLUSTER_CP_INTERVAL", "30")]).unwrap().enabled);
        assert!(cfg(&[("OMPCLUSTER_CP_WSPEED", "100")]).unwrap().enabled);
        assert!(cfg(&[("OMPCLUSTER_CP_MTBF", "3600")]).unwrap().enabled);
        assert!(cfg(&[("OMPCLUSTER_CP_DALY", "1")]).unwrap().enabled);
        assert!(
            !cfg(&[
                ("OMPCLUSTER_CP_ENABLE", "0"),
                ("OMPCLUSTER_CP_INTERVAL", "30")
            ])
            .unwrap()
            .enabled
        );
        assert!(!cfg(&[("OMPCLUSTER_CP_INTERVAL", "")]).unwrap().enabled);
    }

    #[test]
    fn interval_policies() {
        let c = cfg(&[
            ("OMPCLUSTER_CP_INTERVAL", "2.5"),
            ("OMPCLUSTER_CP_DALY", "1"),
        ])
        .unwrap();
        assert_eq!(
            c.interval,
            IntervalPolicy::Fixed(Duration::from_millis(2500))
        );
        let c = cfg(&[
            ("OMPCLUSTER_CP_DALY", "yes"),
            ("OMPCLUSTER_CP_WSPEED", "20"),
        ])
        .unwrap();
        assert_eq!(
            c.interval,
            IntervalPolicy::Daly {
                wspeed_mb_s: 20.0,
                mtbf_s: DEFAULT_MTBF_S
            }
        );
        let c = cfg(&[
            ("OMPCLUSTER_CP_ENABLE", "true"),
            ("OMPCLUSTER_CP_MTBF", "3600"),
        ])
        .unwrap();
        assert_eq!(
            c.interval,
            IntervalPolicy::Young {
                wspeed_mb_s: DEFAULT_WSPEED_MB_S,
                mtbf_s: 3600.0
            }
        );
        // 10 MB at 10 MB/s = 1 s; sqrt(2 * 1 * 3600) = 84.85 s.
        let d = c.interval_for(10_000_000).unwrap();
        assert!((d.as_secs_f64() - 84.852_813_742).abs() < 1e-6, "{d:?}");
    }

    #[test]
    fn invalid_values_name_the_variable() {
        for (var, val) in [
            ("OMPCLUSTER_CP_ENABLE", "2"),
            ("OMPCLUSTER_CP_INTERVAL", "-1"),
            ("OMPCLUSTER_CP_INTERVAL", "abc"),
            ("OMPCLUSTER_CP_WSPEED", "0"),
            ("OMPCLUSTER_CP_MTBF", "inf"),
            ("OMPCLUSTER_CP_MTBF", "NaN"),
            ("OMPCLUSTER_CP_DALY", "maybe"),
            ("OMPCLUSTER_CP_KEEP", "0"),
            ("OMPCLUSTER_CP_KEEP", "1.5"),
            ("OMPCLUSTER_CP_USEVELOC", "sure"),
        ] {
            let e = cfg(&[(var, val)]).unwrap_err();
            let msg = e.to_string();
            assert!(msg.contains(var), "{msg}");
            assert!(msg.contains(val), "{msg}");
        }
    }

    #[test]
    fn veloc_needs_execcfg() {
        let e = cfg(&[("OMPCLUSTER_CP_USEVELOC", "1")]).unwrap_err();
        assert!(e.to_string().contains("OMPCLUSTER_CP_EXECCFG"), "{e}");
        let t = tempfile::tempdir().unwrap();
        let file = t.path().join("veloc.cfg");
        let file_s = file.to_str().unwrap();
        // Read and checked with the other settings: a file VeloC would reject is refused.
        let e = cfg(&[("OMPCLUSTER_CP_USEVELOC", "1"), ("OMPCLUSTER_CP_EXECCFG", file_s)]).unwrap_err();
        assert!(e.to_string().contains("cannot read") && e.to_string().contains(file_s), "{e}");
        std::fs::write(&file, "scratch = /tmp/s\npersistent = /tmp/p\n").unwrap();
        let e = cfg(&[("OMPCLUSTER_CP_USEVELOC", "1"), ("OMPCLUSTER_CP_EXECCFG", file_s)]).unwrap_err();
        assert!(e.to_string().contains("`mode` key is missing"), "{e}");
        std::fs::write(&file, "scratch = /tmp/s\npersistent = /tmp/p\nmode = async\n").unwrap();
        let c = cfg(&[("OMPCLUSTER_CP_USEVELOC", "1"), ("OMPCLUSTER_CP_EXECCFG", file_s)]).unwrap();
        assert_eq!(c.backend, Backend::Veloc { config_file: file.clone() });
    }

    #[test]
    fn directories() {
        let c = cfg(&[
            ("OMPCLUSTER_CP_SCRATCH", "/local/s"),
            ("OMPCLUSTER_CP_PERSISTENT", "rel/p"),
            ("OMPCLUSTER_CP_KEEP", "5"),
        ])
        .unwrap();
        assert_eq!(c.scratch, ScratchBase::Dir(PathBuf::from("/local/s")));
        assert!(c.persistent.is_absolute() && c.persistent.ends_with("rel/p"));
        assert_eq!(c.keep.get(), 5);
    }
}
