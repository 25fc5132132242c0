//! Identifiers and the record of one saved region.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Global checkpoint id, chosen by the head; ids increase over a run.
/// A published checkpoint is also called a *version*.
pub type CkptId = u64;
/// Id of one region (a device buffer) of the program state.
pub type RegionId = u64;
/// MPI rank (head = 0).
pub type Rank = u32;

/// An xxh3 64-bit checksum, written as 16 hex digits in manifests.
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Checksum(pub u64);

impl Checksum {
    /// Checksum of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Checksum(xxhash_rust::xxh3::xxh3_64(bytes))
    }
}

impl fmt::Display for Checksum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl fmt::Debug for Checksum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Checksum({:016x})", self.0)
    }
}

impl Serialize for Checksum {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("xxh3:{:016x}", self.0))
    }
}

impl<'de> Deserialize<'de> for Checksum {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        let hex = s.strip_prefix("xxh3:").ok_or_else(|| {
            serde::de::Error::custom(format!("checksum {s:?} lacks the xxh3: prefix"))
        })?;
        if hex.len() != 16 {
            return Err(serde::de::Error::custom(format!(
                "checksum {s:?} is not 16 hex digits"
            )));
        }
        u64::from_str_radix(hex, 16)
            .map(Checksum)
            .map_err(|e| serde::de::Error::custom(format!("checksum {s:?}: {e}")))
    }
}

/// Where one region of one checkpoint lives in the persistent directory.
///
/// This is what a rank's flush returns for each region it saved, what the
/// head keeps in its [`CheckpointMap`](crate::CheckpointMap) and what a
/// manifest lists. `file` is relative to the persistent directory and does
/// not depend on who reads it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionRecord {
    /// Region id.
    pub region: RegionId,
    /// Checkpoint in which this region was saved (may be older than the
    /// version of a manifest that lists it: incremental checkpoints).
    pub ckpt: CkptId,
    /// Rank that saved it.
    pub rank: Rank,
    /// Size in bytes.
    pub size: u64,
    /// xxh3-64 of the bytes.
    pub checksum: Checksum,
    /// Data file, relative to the persistent directory.
    pub file: PathBuf,
    /// Byte offset of the region inside `file`.
    pub offset: u64,
    /// Wall-clock time at which the region was saved (ms since the Unix epoch).
    pub saved_unix_ms: u64,
}

impl RegionRecord {
    /// Absolute path of the data file, given the persistent directory.
    pub fn path_in(&self, persistent_dir: &Path) -> PathBuf {
        persistent_dir.join(&self.file)
    }
}

/// Milliseconds since the Unix epoch, now.
pub(crate) fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Formats a Unix time in ms as `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC).
pub fn format_unix_ms(ms: u64) -> String {
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil-from-days (Howard Hinnant's algorithm), proleptic Gregorian.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60,
        ms % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_round_trips_through_json() {
        let c = Checksum::of(b"hello");
        let s = serde_json::to_string(&c).unwrap();
        assert!(s.starts_with("\"xxh3:"), "{s}");
        let back: Checksum = serde_json::from_str(&s).unwrap();
        assert_eq!(back, c);
        assert!(serde_json::from_str::<Checksum>("\"md5:0011\"").is_err());
        assert!(serde_json::from_str::<Checksum>("\"xxh3:zz\"").is_err());
    }

    #[test]
    fn formats_known_dates() {
        assert_eq!(format_unix_ms(0), "1970-01-01T00:00:00.000Z");
        // 2000-02-29T12:34:56.789Z
        assert_eq!(format_unix_ms(951_827_696_789), "2000-02-29T12:34:56.789Z");
        assert_eq!(
            format_unix_ms(1_700_000_000_000),
            "2023-11-14T22:13:20.000Z"
        );
    }
}
