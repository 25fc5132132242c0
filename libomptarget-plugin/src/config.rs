//! `OMPCLUSTER_*` settings of the plugin, read once at start-up. A bad value is an error that
//! names the variable; the job stops before `main` rather than run with a setting it ignored.

use scheduler::Policy;
use std::path::PathBuf;
use thiserror::Error;

/// A bad setting.
#[derive(Debug, Error)]
#[error("{var}={value:?}: {why}")]
pub struct ConfigError {
    var: &'static str,
    value: String,
    why: String,
}

/// Why `OMPCLUSTER_RESUME=1` (`ompcluster-run --resume`) is refused without checkpoints.
pub const RESUME_NEEDS_CHECKPOINTS: &str = "resuming (--resume, OMPCLUSTER_RESUME=1) needs checkpoints: set OMPCLUSTER_CP_ENABLE=1, and OMPCLUSTER_CP_PERSISTENT (or the working directory) as for the job that died";

/// Plugin settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Largest piece of a bulk transfer (`OMPCLUSTER_FRAGMENT_SIZE`, default 16M).
    pub fragment: usize,
    /// Size of the reserved device address range (`OMPCLUSTER_HEAP_SIZE`, default 256G).
    pub heap_size: u64,
    /// Placement policy (`OMPCLUSTER_SCHEDULER`: `locality` (default) or `roundrobin`).
    pub policy: Policy,
    /// Where to write the run report as JSON at exit (`OMPCLUSTER_REPORT`).
    pub report: Option<PathBuf>,
    /// Where to write the task graph as DOT at exit (`OMPCLUSTER_GRAPH`).
    pub graph: Option<PathBuf>,
    /// Where to write the full log of recorded tasks at exit, one JSON line per task in
    /// record order (`OMPCLUSTER_TASKS`; `task_graph::LogLine`).
    pub tasks: Option<PathBuf>,
    /// Where to write the run's timeline at exit, in the Chrome trace-event format
    /// (`OMPCLUSTER_TRACE`; the `timeline` crate).
    pub trace: Option<PathBuf>,
    /// Print one line per offloading event on stderr (`OMPCLUSTER_VERBOSE=1`).
    pub verbose: bool,
    /// Resume from the checkpoints and log an earlier job left (`OMPCLUSTER_RESUME=1`, set by
    /// `ompcluster-run --resume`; see `cluster/resume.rs`).
    pub resume: bool,
    /// Keep the log for resuming with checkpoints (`OMPCLUSTER_CP_LOG`, default 1; 0: a job
    /// resumed from this one's checkpoints runs from the start).
    pub cp_log: bool,
    /// With checkpoints, take a final one on SIGTERM (`OMPCLUSTER_CP_ON_SIGTERM`, default 1;
    /// see `sigterm.rs`).
    pub cp_on_sigterm: bool,
    /// How recovery re-runs lost tasks (`OMPCLUSTER_FT_REEXEC`: `parallel` (default) or
    /// `sequential`, one after another as the OCFTL thesis does, for comparison).
    pub ft_reexec: Reexec,
    /// Most bytes the head keeps only for recovery: its copies of versions that kernels
    /// have since overwritten on workers, and of buffers the program deleted while recorded
    /// tasks still read them (`OMPCLUSTER_FT_RETAIN`, default half the physical memory).
    pub ft_retain: u64,
    /// Faults to inject (`OMPCLUSTER_FT_INJECT`, grammar in `inject.rs`), checked for syntax.
    pub ft_inject: Option<String>,
    /// Buddy copies: how often the head looks for versions only one worker holds and copies
    /// them to itself (`OMPCLUSTER_FT_BUDDY_INTERVAL`, milliseconds, default 100; 0 turns
    /// buddy copies off). See `cluster/buddy.rs`.
    pub buddy_interval_ms: u64,
    /// Most bytes of device buffers the head backs with pages for buddy copies of buffers it
    /// had no copy of (`OMPCLUSTER_FT_BUDDY_MEMORY`, default a quarter of the physical memory).
    pub buddy_memory: u64,
    /// Most share of the time the buddy thread spends copying, in percent
    /// (`OMPCLUSTER_FT_BUDDY_SHARE`, 1-100, default 10): after a copy that took `t` it waits
    /// `t * (100 - share) / share` before the next.
    pub buddy_share_percent: u64,
    /// Spare workers (`OMPCLUSTER_FT_SPARES`, default 0): the last this many ranks run no
    /// region until a worker dies; then one takes its place.
    pub spares: u32,
    /// How long start-up may take before a rank gives up on the job (`OMPCLUSTER_START_TIMEOUT`,
    /// seconds, default 60): see `startup.rs`.
    pub start_timeout: std::time::Duration,
    /// How long a thread of ours that has work may go without moving before the watchdog ends
    /// the rank (`OMPCLUSTER_WATCHDOG`, seconds, default 60; 0: no watchdog). See the
    /// `watchdog` crate.
    pub watchdog: Option<std::time::Duration>,
    /// Workers each target region runs on at once (`OMPCLUSTER_FT_REPLICAS`, 1 to 3, default
    /// 1): see `cluster/replicas.rs`.
    pub replicas: u32,
    /// Replicas' results count only when they agree (`OMPCLUSTER_FT_VOTE=1`; needs
    /// `OMPCLUSTER_FT_REPLICAS` of 2 or 3).
    pub vote: bool,
    /// Votes a worker may lose before it is retired as a failed worker
    /// (`OMPCLUSTER_FT_VOTE_RETIRE`, default 3; 0: never).
    pub vote_retire: u32,
    /// Kernels whose replicas are not voted on (`OMPCLUSTER_FT_VOTE_SKIP`, comma-separated:
    /// a kernel's name, or its end after an underscore, such as `main_l49`): kernels whose
    /// results differ from run to run (see [`Config::votes_on`]).
    pub vote_skip: Vec<String>,
    /// Which regions get replicas, when `replicas` > 1 (`OMPCLUSTER_FT_REPLICATE`, `all` by
    /// default; `auto` with `OMPCLUSTER_FT_REPLICA_BUDGET`): see `cluster/replica_choice.rs`.
    pub replicate: Replicate,
    /// How workers find what a kernel wrote (`OMPCLUSTER_WRITE_DETECTION`: `auto`, the
    /// default, tracks written pages where the system allows it and hashes otherwise;
    /// `pages` requires page tracking; `hash` hashes every buffer a kernel can reach).
    pub write_detection: event_system::worker::written::Detection,
}

/// How recovery re-runs lost tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reexec {
    /// In dependence order, independent ones at the same time on different workers.
    Parallel,
    /// One after another.
    Sequential,
}

/// Half of the machine's physical memory (1 GiB if it cannot be read).
fn half_the_memory() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let (pages, size) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
    if pages > 0 && size > 0 {
        (pages as u64).saturating_mul(size as u64) / 2
    } else {
        1 << 30
    }
}

/// Parse a byte count with an optional K/M/G suffix (powers of 1024).
pub fn parse_bytes(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last()? {
        (i, 'k' | 'K') => (&s[..i], 1u64 << 10),
        (i, 'm' | 'M') => (&s[..i], 1 << 20),
        (i, 'g' | 'G') => (&s[..i], 1 << 30),
        _ => (s, 1),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mult)
}

fn var(name: &'static str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn bad(var: &'static str, value: &str, why: impl Into<String>) -> ConfigError {
    ConfigError { var, value: value.into(), why: why.into() }
}

fn flag(name: &'static str) -> Result<bool, ConfigError> {
    match var(name).as_deref().map(str::trim) {
        None | Some("0") | Some("false") | Some("off") | Some("no") => Ok(false),
        Some("1") | Some("true") | Some("on") | Some("yes") => Ok(true),
        Some(v) => Err(bad(name, v, "expected 0 or 1")),
    }
}

/// Which regions get replicas (`OMPCLUSTER_FT_REPLICATE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replicate {
    /// Every region (the default).
    All,
    /// The regions whose loss would cost most, with replicas' kernel time kept within a
    /// budget.
    Auto {
        /// Percent of the regions' own kernel time (`OMPCLUSTER_FT_REPLICA_BUDGET`, default 25).
        budget_percent: u32,
    },
}

impl Config {
    /// Whether the replicas of a region of kernel `name` are voted on: voting is on and the
    /// kernel is not in `OMPCLUSTER_FT_VOTE_SKIP` (its full name, or its end after an
    /// underscore: `main_l49` names `__omp_offloading_fd00_1234_main_l49`).
    pub fn votes_on(&self, name: &str) -> bool {
        self.vote && !self.vote_skip.iter().any(|s| name == s || name.strip_suffix(s.as_str()).is_some_and(|head| head.ends_with('_')))
    }

    /// The short name of kernel `name` for `OMPCLUSTER_FT_VOTE_SKIP`: its function and line
    /// (`main_l49`), after the offload prefix and the file's id.
    pub fn kernel_short_name(name: &str) -> &str {
        // __omp_offloading_<device>_<file>_<function>_l<line>
        name.strip_prefix("__omp_offloading_").and_then(|rest| rest.splitn(3, '_').nth(2)).unwrap_or(name)
    }

    /// Read the settings from the environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        let bytes = |name: &'static str, default: u64, min: u64| -> Result<u64, ConfigError> {
            match var(name) {
                None => Ok(default),
                Some(v) => match parse_bytes(&v) {
                    Some(n) if n >= min => Ok(n),
                    Some(_) => Err(bad(name, &v, format!("must be at least {min} bytes"))),
                    None => Err(bad(name, &v, "expected a byte count such as 4096, 64K, 16M or 2G")),
                },
            }
        };
        let fragment = bytes("OMPCLUSTER_FRAGMENT_SIZE", 16 << 20, 1024)?;
        if fragment > (1 << 30) {
            return Err(bad("OMPCLUSTER_FRAGMENT_SIZE", &fragment.to_string(), "must be at most 1G"));
        }
        let heap_size = bytes("OMPCLUSTER_HEAP_SIZE", 256 << 30, 1 << 20)?;
        let policy = match var("OMPCLUSTER_SCHEDULER") {
            None => Policy::Locality,
            Some(v) => v.parse().map_err(|e: scheduler::UnknownPolicy| bad("OMPCLUSTER_SCHEDULER", &v, e.to_string()))?,
        };
        let ft_inject = var("OMPCLUSTER_FT_INJECT");
        if let Some(v) = &ft_inject {
            crate::inject::parse(v, None).map_err(|e| bad("OMPCLUSTER_FT_INJECT", v, e))?;
        }
        let number = |name: &'static str, default: u64, range: std::ops::RangeInclusive<u64>, unit: &str| -> Result<u64, ConfigError> {
            match var(name) {
                None => Ok(default),
                Some(v) => match v.trim().parse::<u64>() {
                    Ok(n) if range.contains(&n) => Ok(n),
                    _ => Err(bad(name, &v, format!("expected {unit} from {} to {}", range.start(), range.end()))),
                },
            }
        };
        let buddy_interval_ms = number("OMPCLUSTER_FT_BUDDY_INTERVAL", 100, 0..=3_600_000, "a number of milliseconds")?;
        let buddy_memory = match var("OMPCLUSTER_FT_BUDDY_MEMORY") {
            None => half_the_memory() / 2,
            Some(v) => parse_bytes(&v).ok_or_else(|| bad("OMPCLUSTER_FT_BUDDY_MEMORY", &v, "expected a byte count such as 0, 512M or 8G"))?,
        };
        let buddy_share_percent = number("OMPCLUSTER_FT_BUDDY_SHARE", 10, 1..=100, "a percentage")?;
        let spares = number("OMPCLUSTER_FT_SPARES", 0, 0..=65_535, "a number of ranks")? as u32;
        let start_timeout = std::time::Duration::from_secs(number("OMPCLUSTER_START_TIMEOUT", 60, 1..=86_400, "a number of seconds")?);
        let watchdog = match number("OMPCLUSTER_WATCHDOG", 60, 0..=86_400, "a number of seconds (0: no watchdog)")? {
            0 => None,
            s => Some(std::time::Duration::from_secs(s)),
        };
        let replicas = number("OMPCLUSTER_FT_REPLICAS", 1, 1..=3, "a number of workers per region")? as u32;
        if replicas > 1 && var("OMPCLUSTER_FT_DISABLE").as_deref().map(str::trim) == Some("1") {
            return Err(bad("OMPCLUSTER_FT_REPLICAS", &replicas.to_string(), "replicas are a fault tolerance mechanism, and OMPCLUSTER_FT_DISABLE=1 turns fault tolerance off"));
        }
        let vote = flag("OMPCLUSTER_FT_VOTE")?;
        if vote && replicas < 2 {
            return Err(bad("OMPCLUSTER_FT_VOTE", "1", "voting compares the results of replicas: set OMPCLUSTER_FT_REPLICAS to 2 or 3"));
        }
        let vote_retire = number("OMPCLUSTER_FT_VOTE_RETIRE", 3, 0..=1_000_000, "a number of lost votes (0: never retire)")? as u32;
        let vote_skip: Vec<String> = match var("OMPCLUSTER_FT_VOTE_SKIP") {
            None => Vec::new(),
            Some(v) => {
                if !vote {
                    return Err(bad("OMPCLUSTER_FT_VOTE_SKIP", &v, "it names kernels not to vote on: it needs OMPCLUSTER_FT_VOTE=1"));
                }
                let names: Vec<String> = v.split(',').map(|n| n.trim().to_string()).collect();
                if names.iter().any(|n| n.is_empty() || !n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')) {
                    return Err(bad("OMPCLUSTER_FT_VOTE_SKIP", &v, "expected kernel names separated by commas (letters, digits, underscores), such as main_l49 as a vote's message names it"));
                }
                names
            }
        };
        let replicate = match var("OMPCLUSTER_FT_REPLICATE").as_deref().map(str::trim) {
            None | Some("all") => {
                if let Some(v) = var("OMPCLUSTER_FT_REPLICA_BUDGET") {
                    return Err(bad("OMPCLUSTER_FT_REPLICA_BUDGET", &v, "a budget applies to OMPCLUSTER_FT_REPLICATE=auto only (`all` replicates every region)"));
                }
                Replicate::All
            }
            Some("auto") => {
                if replicas < 2 {
                    return Err(bad("OMPCLUSTER_FT_REPLICATE", "auto", "it chooses which regions get replicas: set OMPCLUSTER_FT_REPLICAS to 2 or 3"));
                }
                Replicate::Auto { budget_percent: number("OMPCLUSTER_FT_REPLICA_BUDGET", 25, 1..=1000, "a percentage of the regions' kernel time")? as u32 }
            }
            Some(v) => return Err(bad("OMPCLUSTER_FT_REPLICATE", v, "expected `all` (every region, the default) or `auto` (the regions whose loss would cost most, within OMPCLUSTER_FT_REPLICA_BUDGET)")),
        };
        let write_detection = match var("OMPCLUSTER_WRITE_DETECTION") {
            None => event_system::worker::written::Detection::Auto,
            Some(v) => v.parse().map_err(|e: String| bad("OMPCLUSTER_WRITE_DETECTION", &v, e))?,
        };
        Ok(Config {
            write_detection,
            buddy_interval_ms,
            buddy_memory,
            buddy_share_percent,
            spares,
            start_timeout,
            watchdog,
            replicas,
            vote,
            vote_retire,
            vote_skip,
            replicate,
            ft_inject,
            fragment: fragment as usize,
            heap_size,
            policy,
            report: var("OMPCLUSTER_REPORT").map(PathBuf::from),
            graph: var("OMPCLUSTER_GRAPH").map(PathBuf::from),
            tasks: var("OMPCLUSTER_TASKS").map(PathBuf::from),
            trace: var("OMPCLUSTER_TRACE").map(PathBuf::from),
            verbose: flag("OMPCLUSTER_VERBOSE")?,
            resume: flag("OMPCLUSTER_RESUME")?,
            cp_log: var("OMPCLUSTER_CP_LOG").is_none() || flag("OMPCLUSTER_CP_LOG")?,
            cp_on_sigterm: var("OMPCLUSTER_CP_ON_SIGTERM").is_none() || flag("OMPCLUSTER_CP_ON_SIGTERM")?,
            ft_reexec: match var("OMPCLUSTER_FT_REEXEC").as_deref().map(str::trim) {
                None | Some("parallel") => Reexec::Parallel,
                Some("sequential") => Reexec::Sequential,
                Some(v) => return Err(bad("OMPCLUSTER_FT_REEXEC", v, "expected parallel or sequential")),
            },
            ft_retain: match var("OMPCLUSTER_FT_RETAIN") {
                None => half_the_memory(),
                Some(v) => parse_bytes(&v)
                    .ok_or_else(|| bad("OMPCLUSTER_FT_RETAIN", &v, "expected a byte count such as 0, 512M or 8G"))?,
            },
        })
    }
}

/// Every `OMPCLUSTER_*` variable the launcher or the ranks read (README, "Settings").
pub const SETTINGS: &[&str] = &[
    // The launcher.
    "OMPCLUSTER_MPIRUN",
    "OMPCLUSTER_PLUGIN",
    "OMPCLUSTER_MPI_NOISE",
    // The compile wrappers.
    "OMPCLUSTER_CC",
    "OMPCLUSTER_CXX",
    "OMPCLUSTER_FC",
    "OMPCLUSTER_LLVM16_LIB",
    // The plugin.
    "OMPCLUSTER_VERBOSE",
    "OMPCLUSTER_TRACE",
    "OMPCLUSTER_REPORT",
    "OMPCLUSTER_GRAPH",
    "OMPCLUSTER_TASKS",
    "OMPCLUSTER_SCHEDULER",
    "OMPCLUSTER_HEAP_SIZE",
    "OMPCLUSTER_FRAGMENT_SIZE",
    "OMPCLUSTER_WRITE_DETECTION",
    "OMPCLUSTER_RESUME",
    "OMPCLUSTER_START_TIMEOUT",
    "OMPCLUSTER_WATCHDOG",
    // Fault tolerance.
    "OMPCLUSTER_FT_DISABLE",
    "OMPCLUSTER_FT_INJECT",
    "OMPCLUSTER_FT_REEXEC",
    "OMPCLUSTER_FT_RETAIN",
    "OMPCLUSTER_FT_SPARES",
    "OMPCLUSTER_FT_BUDDY_INTERVAL",
    "OMPCLUSTER_FT_BUDDY_SHARE",
    "OMPCLUSTER_FT_BUDDY_MEMORY",
    "OMPCLUSTER_FT_REPLICAS",
    "OMPCLUSTER_FT_VOTE",
    "OMPCLUSTER_FT_VOTE_RETIRE",
    "OMPCLUSTER_FT_VOTE_SKIP",
    "OMPCLUSTER_FT_REPLICATE",
    "OMPCLUSTER_FT_REPLICA_BUDGET",
    // The failure detector.
    "OMPCLUSTER_HB_PERIOD",
    "OMPCLUSTER_HB_TIMEOUT",
    "OMPCLUSTER_HB_TIMESTEP",
    "OMPCLUSTER_HB_SHUFFLE",
    "OMPCLUSTER_HB_BCAST",
    // Checkpoints.
    "OMPCLUSTER_CP_ENABLE",
    "OMPCLUSTER_CP_INTERVAL",
    "OMPCLUSTER_CP_MTBF",
    "OMPCLUSTER_CP_DALY",
    "OMPCLUSTER_CP_WSPEED",
    "OMPCLUSTER_CP_KEEP",
    "OMPCLUSTER_CP_PERSISTENT",
    "OMPCLUSTER_CP_SCRATCH",
    "OMPCLUSTER_CP_USEVELOC",
    "OMPCLUSTER_CP_EXECCFG",
    "OMPCLUSTER_CP_LOG",
    "OMPCLUSTER_CP_ON_SIGTERM",
    // Set by the launcher for the ranks.
    "OMPCLUSTER_EXIT_STATUS_FILE",
];

/// The `OMPCLUSTER_*` variables of `names` that are no setting, each with the setting it
/// probably meant (the nearest by edit distance, if near enough), in the order given.
pub fn unknown_settings<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<(&'a str, Option<&'static str>)> {
    names
        .into_iter()
        .filter(|n| n.starts_with("OMPCLUSTER_") && !SETTINGS.contains(n))
        .map(|n| {
            let near = SETTINGS
                .iter()
                .map(|s| (strsim::damerau_levenshtein(n, s), *s))
                .min()
                .filter(|&(d, s)| d <= 3.max(s.len() / 6) && d < n.len() - "OMPCLUSTER_".len())
                .map(|(_, s)| s);
            (n, near)
        })
        .collect()
}

/// Check every `OMPCLUSTER_*` setting the ranks will read (plugin, failure detector,
/// checkpoints) with the same parsers, so that the launcher can refuse a bad value in one line
/// before starting any process.
pub fn validate_env() -> Result<(), String> {
    Config::from_env().map_err(|e| e.to_string())?;
    ft_detector::Config::from_env().map_err(|e| e.to_string())?;
    ckpt_veloc::StoreConfig::from_env(0).map_err(|e| e.to_string())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Byte counts and variable names as users write them, and anything else: never a panic
    // (issue 36).
    proptest::proptest! {
        #[test]
        fn fuzz_byte_counts_and_names(s in "[0-9]{0,22}[a-zA-Z]{0,3}|[ -~]{0,24}", name in "OMPCLUSTER_[A-Z_]{0,24}") {
            if let Some(n) = parse_bytes(&s) {
                proptest::prop_assert!(!s.trim().is_empty(), "{s:?} read as {n}");
            }
            let _ = unknown_settings([name.as_str()]);
        }
    }

    #[test]
    fn buddy_and_spare_settings_are_validated() {
        // Each case sets one variable in this process only (tests of this module run the
        // cases one after another in this one test).
        let with = |name: &str, value: &str| {
            std::env::set_var(name, value);
            let c = Config::from_env();
            std::env::remove_var(name);
            c
        };
        let c = Config::from_env().unwrap();
        assert_eq!((c.buddy_interval_ms, c.buddy_share_percent, c.spares), (100, 10, 0));
        assert_eq!(with("OMPCLUSTER_FT_BUDDY_INTERVAL", "0").unwrap().buddy_interval_ms, 0);
        assert_eq!(with("OMPCLUSTER_FT_BUDDY_MEMORY", "64M").unwrap().buddy_memory, 64 << 20);
        assert_eq!(with("OMPCLUSTER_FT_SPARES", "2").unwrap().spares, 2);
        for (name, value) in [
            ("OMPCLUSTER_FT_BUDDY_INTERVAL", "-5"),
            ("OMPCLUSTER_FT_BUDDY_INTERVAL", "1s"),
            ("OMPCLUSTER_FT_BUDDY_SHARE", "0"),
            ("OMPCLUSTER_FT_BUDDY_SHARE", "101"),
            ("OMPCLUSTER_FT_BUDDY_MEMORY", "lots"),
            ("OMPCLUSTER_FT_SPARES", "x"),
        ] {
            let e = with(name, value).unwrap_err().to_string();
            assert!(e.starts_with(name), "{e}");
        }
    }

    #[test]
    fn kernels_not_to_vote_on_are_named_by_their_end() {
        let mut c = Config::from_env().unwrap();
        let k = "__omp_offloading_fe00_510165_main_l49";
        assert_eq!(Config::kernel_short_name(k), "main_l49");
        assert_eq!(Config::kernel_short_name("odd"), "odd");
        assert!(!c.votes_on(k), "voting is off");
        c.vote = true;
        assert!(c.votes_on(k));
        for (skip, votes) in [("main_l49", false), (k, false), ("l49", false), ("ain_l49", true), ("main_l4", true), ("main_l50", true)] {
            c.vote_skip = vec![skip.to_string()];
            assert_eq!(c.votes_on(k), votes, "{skip}");
        }
    }

    #[test]
    fn a_misspelled_setting_is_named_with_the_one_it_probably_meant() {
        let env = ["OMPCLUSTER_CP_INTERVALL", "OMPCLUSTER_CP_INTERVAL", "PATH", "OMPCLUSTER_HB_PEROID", "OMPCLUSTER_VERBOS", "OMPCLUSTER_X", "OMPCLUSTER_FT_BUDY_MEMORY"];
        assert_eq!(
            unknown_settings(env),
            vec![
                ("OMPCLUSTER_CP_INTERVALL", Some("OMPCLUSTER_CP_INTERVAL")),
                ("OMPCLUSTER_HB_PEROID", Some("OMPCLUSTER_HB_PERIOD")),
                ("OMPCLUSTER_VERBOS", Some("OMPCLUSTER_VERBOSE")),
                ("OMPCLUSTER_X", None),
                ("OMPCLUSTER_FT_BUDY_MEMORY", Some("OMPCLUSTER_FT_BUDDY_MEMORY")),
            ]
        );
        // Every setting the sources read is listed.
        for dir in ["src", "../ckpt-veloc/src", "../ft-detector/src"] {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
            let mut stack = vec![dir];
            while let Some(d) = stack.pop() {
                for e in std::fs::read_dir(&d).unwrap().flatten() {
                    let p = e.path();
                    if p.is_dir() {
                        stack.push(p);
                    } else if p.extension().is_some_and(|x| x == "rs") {
                        let text = std::fs::read_to_string(&p).unwrap();
                        let text = text.split("#[cfg(test)]").next().unwrap_or_default();
                        for (i, _) in text.match_indices("\"OMPCLUSTER_") {
                            let name: String = text[i + 1..].chars().take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_').collect();
                            if name.len() > "OMPCLUSTER_".len() && !name.ends_with('_') {
                                assert!(SETTINGS.contains(&name.as_str()), "{name} (read in {}) is not in SETTINGS", p.display());
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn byte_counts() {
        assert_eq!(parse_bytes("4096"), Some(4096));
        assert_eq!(parse_bytes("64K"), Some(65536));
        assert_eq!(parse_bytes(" 2g "), Some(2 << 30));
        assert_eq!(parse_bytes("1.5M"), None);
        assert_eq!(parse_bytes("-1"), None);
        assert_eq!(parse_bytes(""), None);
        assert_eq!(parse_bytes("99999999999999G"), None);
    }
}
