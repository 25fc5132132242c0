//! Configuration from `OMPCLUSTER_HB_*` environment variables.

use std::time::Duration;

use thiserror::Error;

use crate::BcastAlgo;

/// Detector configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// False when `OMPCLUSTER_FT_DISABLE=1`: [`crate::Detector::start`] then starts nothing.
    pub enabled: bool,
    /// How often the detector thread wakes to handle messages (`OMPCLUSTER_HB_TIMESTEP`, ms).
    pub timestep: Duration,
    /// Heartbeat period (`OMPCLUSTER_HB_PERIOD`, ms).
    pub period: Duration,
    /// Silence after which the emitter is declared dead (`OMPCLUSTER_HB_TIMEOUT`, ms).
    pub timeout: Duration,
    /// Broadcast algorithm (`OMPCLUSTER_HB_BCAST=chord|bmg|hba`).
    pub bcast: BcastAlgo,
    /// Ring shuffle (`OMPCLUSTER_HB_SHUFFLE=0|1|on|off`, on by default).
    pub shuffle: bool,
}

impl Default for Config {
    /// Timestep 50 ms, period 250 ms, timeout 3000 ms, chord, shuffle. The thesis used a
    /// 1000 ms period and a 30 s timeout; every failure then stalls a program 30 s. 3 s is ten
    /// times the shortest timeout that gave no false positive under full load here
    /// (`bench/ft_detect.py`, BENCHMARKS.md), so a frozen worker costs about 3 s.
    fn default() -> Self {
        Config {
            enabled: true,
            timestep: Duration::from_millis(50),
            period: Duration::from_millis(250),
            timeout: Duration::from_millis(3_000),
            bcast: BcastAlgo::Chord,
            shuffle: true,
        }
    }
}

/// A configuration value was rejected. The message names the variable.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// Not a positive integer number of milliseconds.
    #[error("{var}={value:?}: expected a positive integer number of milliseconds")]
    NotANumber {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
    },
    /// Zero is not allowed.
    #[error("{var}=0: must be at least 1 ms")]
    Zero {
        /// The variable.
        var: &'static str,
    },
    /// Two values contradict each other.
    #[error("{var}={value} ms must not exceed {other}={other_value} ms")]
    Order {
        /// The variable that is too large.
        var: &'static str,
        /// Its value.
        value: u64,
        /// The variable it must not exceed.
        other: &'static str,
        /// That variable's value.
        other_value: u64,
    },
    /// Not one of the accepted words.
    #[error("{var}={value:?}: expected one of {expected}")]
    BadChoice {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// The accepted values.
        expected: &'static str,
    },
}

fn ms(
    var: &'static str,
    get: &dyn Fn(&str) -> Option<String>,
    default: Duration,
) -> Result<Duration, ConfigError> {
    match get(var) {
        None => Ok(default),
        Some(v) => {
            let t = v.trim();
            let x: u64 = t.parse().map_err(|_| ConfigError::NotANumber {
                var,
                value: v.clone(),
            })?;
            if x == 0 {
                return Err(ConfigError::Zero { var });
            }
            Ok(Duration::from_millis(x))
        }
    }
}

impl Config {
    /// Read the configuration from the process environment.
    pub fn from_env() -> Result<Config, ConfigError> {
        Config::from_lookup(|k| std::env::var(k).ok())
    }

    /// Read the configuration through `get` (a variable name to its value), for tests and
    /// for callers that keep settings elsewhere.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let d = Config::default();
        let enabled = match get("OMPCLUSTER_FT_DISABLE").as_deref().map(str::trim) {
            None | Some("") | Some("0") => true,
            Some("1") => false,
            Some(other) => {
                return Err(ConfigError::BadChoice {
                    var: "OMPCLUSTER_FT_DISABLE",
                    value: other.into(),
                    expected: "0 or 1",
                })
            }
        };
        let timestep = ms("OMPCLUSTER_HB_TIMESTEP", &get, d.timestep)?;
        let period = ms("OMPCLUSTER_HB_PERIOD", &get, d.period)?;
        let timeout = ms("OMPCLUSTER_HB_TIMEOUT", &get, d.timeout)?;
        if timestep > period {
            return Err(ConfigError::Order {
                var: "OMPCLUSTER_HB_TIMESTEP",
                value: timestep.as_millis() as u64,
                other: "OMPCLUSTER_HB_PERIOD",
                other_value: period.as_millis() as u64,
            });
        }
        if period > timeout {
            return Err(ConfigError::Order {
                var: "OMPCLUSTER_HB_PERIOD",
                value: period.as_millis() as u64,
                other: "OMPCLUSTER_HB_TIMEOUT",
                other_value: timeout.as_millis() as u64,
            });
        }
        let bcast = match get("OMPCLUSTER_HB_BCAST") {
            None => d.bcast,
            Some(v) => BcastAlgo::parse(&v).ok_or(ConfigError::BadChoice {
                var: "OMPCLUSTER_HB_BCAST",
                value: v,
                expected: "chord, bmg or hba",
            })?,
        };
        let shuffle = match get("OMPCLUSTER_HB_SHUFFLE") {
            None => d.shuffle,
            Some(v) => match v.trim().to_ascii_lowercase().as_str() {
                "1" | "on" | "true" | "yes" => true,
                "0" | "off" | "false" | "no" => false,
                _ => {
                    return Err(ConfigError::BadChoice {
                        var: "OMPCLUSTER_HB_SHUFFLE",
                        value: v,
                        expected: "on/off (1/0)",
                    })
                }
            },
        };
        Ok(Config {
            enabled,
            timestep,
            period,
            timeout,
            bcast,
            shuffle,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cfg(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn defaults_are_the_measured_ones() {
        let c = cfg(&[]).unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.timestep, Duration::from_millis(50));
        assert_eq!(c.period, Duration::from_millis(250));
        assert_eq!(c.timeout, Duration::from_millis(3000));
    }

    #[test]
    fn rejects_bad_values_naming_the_variable() {
        let e = cfg(&[
            ("OMPCLUSTER_HB_PERIOD", "2000"),
            ("OMPCLUSTER_HB_TIMEOUT", "1000"),
        ])
        .unwrap_err();
        assert!(e.to_string().contains("OMPCLUSTER_HB_PERIOD"), "{e}");
        let e = cfg(&[("OMPCLUSTER_HB_TIMEOUT", "0")]).unwrap_err();
        assert!(e.to_string().contains("OMPCLUSTER_HB_TIMEOUT"), "{e}");
        let e = cfg(&[("OMPCLUSTER_HB_TIMESTEP", "ten")]).unwrap_err();
        assert!(e.to_string().contains("OMPCLUSTER_HB_TIMESTEP"), "{e}");
        let e = cfg(&[("OMPCLUSTER_HB_PERIOD", "-5")]).unwrap_err();
        assert!(e.to_string().contains("OMPCLUSTER_HB_PERIOD"), "{e}");
        let e = cfg(&[("OMPCLUSTER_HB_BCAST", "gossip")]).unwrap_err();
        assert!(e.to_string().contains("OMPCLUSTER_HB_BCAST"), "{e}");
        let e = cfg(&[("OMPCLUSTER_HB_SHUFFLE", "maybe")]).unwrap_err();
        assert!(e.to_string().contains("OMPCLUSTER_HB_SHUFFLE"), "{e}");
    }

    #[test]
    fn parses_valid_values() {
        let c = cfg(&[
            ("OMPCLUSTER_HB_TIMESTEP", "10"),
            ("OMPCLUSTER_HB_PERIOD", "100"),
            ("OMPCLUSTER_HB_TIMEOUT", "1000"),
            ("OMPCLUSTER_HB_BCAST", "hba"),
            ("OMPCLUSTER_HB_SHUFFLE", "off"),
            ("OMPCLUSTER_FT_DISABLE", "1"),
        ])
        .unwrap();
        assert!(!c.enabled && !c.shuffle);
        assert_eq!(c.bcast, BcastAlgo::Hba);
        assert_eq!(c.period, Duration::from_millis(100));
    }
}
