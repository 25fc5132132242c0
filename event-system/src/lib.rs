//! The MPI side of the cluster device.
//!
//! * [`protocol`]: the events the head sends to workers and the replies, with size-limited,
//!   validated decoding (messages from other ranks are never trusted blindly).
//! * [`comm`]: non-blocking point-to-point transport over a communicator: tags, control
//!   messages, fragmented data transfers, and waits that give up when the peer is dead.
//! * [`heap`]: the symmetric device heap, reserved at the same address on every rank.
//! * [`elf`]: device images as ELF files, placed at the same address on every rank.
//! * [`compilers`]: which compilers' programs are served, and the kernel-argument layout each
//!   generation's device code expects.
//! * [`build_id`]: this build's identifier, which ranks compare at start-up with
//!   [`protocol::PROTOCOL_VERSION`].
//! * [`worker`]: the event loop that ranks 1..N-1 run instead of `main`, and
//!   [`LocalDevice`], the same device code for a head that runs regions itself.

pub mod build_id;
pub mod comm;
pub mod compilers;
pub mod elf;
pub mod heap;
pub mod process;
pub mod protocol;
pub mod worker;

pub use poll_backoff::Backoff;
pub use comm::{Comm, CommError, Fenced, Liveness, NeverDead, TagAllocator};
pub use heap::{Arena, ExtentAllocator, HeapError, HeapRange, SymmetricHeap};
pub use protocol::{Event, ProtocolError, Region, Reply};
pub use worker::{flush_stderr, write_all, CheckpointSink, LocalDevice, Ran};

/// Rank of the head process (the one that runs the user's `main`).
pub const HEAD: i32 = 0;
