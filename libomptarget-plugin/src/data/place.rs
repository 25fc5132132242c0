//! [`Place`]: the head or a worker, where the two take different paths.

use super::HEAD;

/// Where a copy lives or a region runs: the head's own memory (its staged copies, its own
/// device once no worker is left), or a worker's. Code that does different things on the two
/// matches on it; sets of ranks (holders, backed copies) keep plain ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// The head (rank 0).
    Head,
    /// A worker, by rank.
    Worker(i32),
}

impl Place {
    /// The place of rank `r`.
    pub(crate) fn of(r: i32) -> Place {
        if r == HEAD {
            Place::Head
        } else {
            Place::Worker(r)
        }
    }

    /// Is it a worker (not the head)?
    pub(crate) fn is_worker(self) -> bool {
        matches!(self, Place::Worker(_))
    }
}
