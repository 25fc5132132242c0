//! # ft-detector: an OCFTL-style failure detector on plain MPI
//!
//! Every rank runs a heartbeat thread on a private duplicate of its communicator. Ranks sit
//! on a ring (shuffled so that consecutive ranks do not watch each other); each beats to its
//! *observer* and watches its *emitter*. An observer that hears nothing for the timeout
//! declares its emitter dead, adopts the next live emitter (sending it a new-observer
//! notice) and broadcasts the failure with a fault-tolerant broadcast (chord by default,
//! BMG and HBA for comparison). A rank declared dead that beats again is re-admitted by a
//! broadcast (FALSE_POSITIVE). Users query states, register callbacks, broadcast
//! CHECKPOINT / CHECKPOINT_DONE, wait on MPI requests without hanging on dead peers, and
//! shrink to a communicator of the survivors.
//!
//! ```no_run
//! use ft_detector::{Config, Detector, Notice};
//! let (universe, _) = mpi::initialize_with_threading(mpi::Threading::Multiple).unwrap();
//! let world = universe.world();
//! let det = Detector::start(&world, Config::from_env().unwrap()).unwrap();
//! det.on_notice(|n| if let Notice::Failure(r) = n { eprintln!("rank {r} died") });
//! // ... work, using ft_detector::wait_or_dead(&det, request, peer) for requests ...
//! det.stop().unwrap();
//! ```
//!
//! The algorithms live in a pure state machine (`core`), driven either by MPI (`detector`)
//! or by the discrete-event simulator ([`sim`]), so the simulator runs the same code.
//! Design notes on the concurrent parts: `src/README.md` and the `detector` module.

mod config;
mod core;
mod detector;
mod fault_aware;
pub mod sim;

pub use config::{Config, ConfigError};
pub use detector::{BroadcastError, Detector, DetectorStats, StartError, StopError};
pub use fault_aware::{
    abandon, barrier_or_dead, probe_or_dead, recv_or_dead, send_or_dead, test_or_dead,
    wait_collective_or_dead, wait_members_or_dead, wait_or_dead, default_backoff, Backoff, PeerDead, ShrinkError,
    TestOutcome,
};
#[doc(hidden)]
pub use fault_aware::{BEFORE_DYING, DIE_BEFORE_CREATE_GROUP};

/// A notice delivered to callbacks registered with [`Detector::on_notice`].
///
/// A rank that was declared dead while it was only stalled receives, once it runs again,
/// `Failure(itself)` followed by `FalsePositive(itself)`, like every other live rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Notice {
    /// The rank was declared dead.
    Failure(i32),
    /// The rank, declared dead before, was only stalled and is alive again (re-admitted).
    /// Fence it before trusting it again.
    FalsePositive(i32),
    /// A checkpoint begins (broadcast by a user).
    Checkpoint,
    /// A checkpoint is complete (broadcast by a user).
    CheckpointDone,
}

/// State of a process in this rank's view.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProcState {
    /// Alive (never declared dead, or re-admitted).
    Alive,
    /// Declared dead.
    Dead,
}

/// State of the communicator the detector watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CommState {
    /// No rank is dead: collectives on it work.
    Valid,
    /// Some rank is dead: use point-to-point with live peers, or shrink.
    Invalid,
}

/// Broadcast algorithm for failure and other notices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BcastAlgo {
    /// Chord-like: the rank at ring offset k forwards to k + 2^i within its range, once;
    /// ranges of relays that die are taken over by their parent.
    Chord,
    /// Flooding over the binomial graph (ring offsets +-2^i).
    Bmg,
    /// Flooding over the hypercube of ring offsets.
    Hba,
}

impl BcastAlgo {
    /// Parse `chord`, `bmg` or `hba` (case-insensitive).
    pub fn parse(s: &str) -> Option<BcastAlgo> {
        match s.trim().to_ascii_lowercase().as_str() {
            "chord" => Some(BcastAlgo::Chord),
            "bmg" => Some(BcastAlgo::Bmg),
            "hba" => Some(BcastAlgo::Hba),
            _ => None,
        }
    }
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            BcastAlgo::Chord => "chord",
            BcastAlgo::Bmg => "bmg",
            BcastAlgo::Hba => "hba",
        }
    }
}

/// The ring order (ranks by ring position) that every rank of an `n`-rank job computes,
/// with or without shuffle. Position `p` watches position `p-1` and beats to `p+1`.
pub fn ring_order(n: usize, shuffle: bool) -> Vec<i32> {
    let ring = core::Ring::new(n, shuffle);
    (0..n).map(|p| ring.rank_at(p) as i32).collect()
}

#[cfg(test)]
mod api_tests {
    #[test]
    fn detector_can_be_shared_between_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<crate::Detector>();
        send_sync::<crate::Config>();
        send_sync::<crate::PeerDead>();
    }

    #[test]
    fn ring_order_for_8_ranks() {
        assert_eq!(crate::ring_order(8, true), vec![0, 5, 2, 7, 4, 1, 6, 3]);
        assert_eq!(crate::ring_order(8, false), (0..8).collect::<Vec<i32>>());
    }
}
