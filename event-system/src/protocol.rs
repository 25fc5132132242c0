//! Wire protocol: events (head -> worker) and replies (worker -> head).
//!
//! Every event travels on the control tag as one `Envelope`; the envelope names a per-request
//! tag on which the reply and any bulk data of that request travel. Bulk data (image bytes,
//! buffer contents) is never serialised: it is sent raw, in fragments, on the request tag.
//!
//! Decoding is bounded ([`MAX_CONTROL_BYTES`]) and [`Event::validate`] checks every address
//! and size against the symmetric heap before a worker touches memory.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Largest region whose contents a worker sends back with an EXECUTE's reply (`send_back`).
pub const MAX_SEND_BACK: u64 = 64 << 10;

/// Largest buffer whose bytes travel inside its SUBMIT event, or inside the answer to its
/// RETRIEVE: one message instead of two (larger ones follow raw on the request tag). Well
/// under one message of the transport (`comm::INLINE_BYTES`), and under Open MPI's eager
/// limit over shared memory (4 KiB).
pub const MAX_INLINE_DATA: u64 = 3 << 10;

/// Largest control message accepted (kernel argument lists and image descriptions).
pub const MAX_CONTROL_BYTES: u64 = 16 << 20;

/// Largest number of kernel arguments or regions accepted in one EXECUTE.
pub const MAX_LIST: usize = 1 << 16;

/// Device images a job may register (libomptarget registers one per binary or library with
/// offloaded code).
pub const MAX_IMAGES: u32 = 4096;

/// One of the C standard streams. clang passes `stdout`, `stderr` or `stdin` named in a target
/// region to its kernel as an argument, by value: the head's `FILE *`, which means nothing in a
/// worker's memory. The head names such arguments and the worker passes its own stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StdStream {
    /// `stdin`.
    Stdin,
    /// `stdout`.
    Stdout,
    /// `stderr`.
    Stderr,
}

impl StdStream {
    const ALL: [StdStream; 3] = [StdStream::Stdin, StdStream::Stdout, StdStream::Stderr];

    /// This process's stream (its `FILE *`, as a kernel argument).
    pub fn here(self) -> u64 {
        extern "C" {
            static stdin: *mut libc::FILE;
            static stdout: *mut libc::FILE;
            static stderr: *mut libc::FILE;
        }
        // SAFETY: glibc's standard stream variables are initialised before any code of ours
        // runs; reading a pointer-sized variable is always sound (a program may reassign it,
        // and then the value read is the stream it uses now).
        unsafe {
            match self {
                StdStream::Stdin => stdin as u64,
                StdStream::Stdout => stdout as u64,
                StdStream::Stderr => stderr as u64,
            }
        }
    }

    /// The arguments among `args` that are this process's standard streams.
    pub fn in_args(args: &[u64]) -> Vec<(u32, StdStream)> {
        let here = Self::ALL.map(|s| (s.here(), s));
        args.iter()
            .enumerate()
            .filter_map(|(i, a)| here.iter().find(|(v, _)| *v == *a && *v != 0).map(|&(_, s)| (i as u32, s)))
            .collect()
    }

    /// `args` with each standard stream replaced by a value that is the same in every process
    /// (a stream's address changes from run to run): what a region's content key hashes.
    pub fn stable_args(args: &[u64]) -> std::borrow::Cow<'_, [u64]> {
        let streams = Self::in_args(args);
        if streams.is_empty() {
            return std::borrow::Cow::Borrowed(args);
        }
        let mut a = args.to_vec();
        for (i, s) in streams {
            a[i as usize] = u64::MAX - s as u64;
        }
        std::borrow::Cow::Owned(a)
    }
}

/// A contiguous range of device (symmetric heap) addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Region {
    /// First byte.
    pub addr: u64,
    /// Length in bytes.
    pub size: u64,
}

impl Region {
    /// One past the last byte, or `None` on overflow.
    pub fn end(&self) -> Option<u64> {
        self.addr.checked_add(self.size)
    }

    /// Does it hold all of `[addr, addr+len)`?
    pub fn holds(&self, addr: u64, len: u64) -> bool {
        addr >= self.addr && addr.checked_add(len).is_some_and(|e| Some(e) <= self.end())
    }
}

/// An event sent by the head to a worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    /// Load a device image at `base` (the same address on every worker): its `size` bytes
    /// follow on the request tag.
    LoadBinary {
        /// Image number chosen by the head (dense, from 0).
        image: u32,
        /// Image size in bytes.
        size: u64,
        /// Where the image goes: a page-aligned range of the symmetric heap that the head
        /// reserved for it (`extent` bytes; no buffer of the head's lies in it).
        base: u64,
        /// Bytes reserved at `base`.
        extent: u64,
        /// Kernel symbols, in the order EXECUTE refers to them.
        kernels: Vec<String>,
    },
    /// Back a buffer's pages (zero-filled). No reply.
    Alloc(Region),
    /// A block device code allocated in this worker's arena was freed everywhere (its pages
    /// were released by a DELETE before, where held): its range may be given out again.
    /// No reply.
    Reclaim(Region),
    /// Release a buffer's pages. No reply.
    Delete(Region),
    /// Write bytes from the head into a region: `bytes` are its contents if it has at most
    /// [`MAX_INLINE_DATA`] bytes (and empty otherwise: they follow raw on the request tag).
    Submit {
        /// Where.
        region: Region,
        /// The bytes, for a small region.
        #[serde(with = "serde_bytes")]
        bytes: Vec<u8>,
    },
    /// Send a region's bytes to the head: inside a `Data` answer if it has at most
    /// [`MAX_INLINE_DATA`] bytes, else raw on the request tag after an `Ok`.
    Retrieve(Region),
    /// Send a region's bytes to another worker (which gets a matching `ExchangeRecv`).
    ExchangeSend {
        /// What to send.
        region: Region,
        /// Receiving worker.
        peer: i32,
    },
    /// Receive a region's bytes from another worker.
    ExchangeRecv {
        /// Where to receive.
        region: Region,
        /// Sending worker.
        peer: i32,
        /// Receive them aside and write them into the copy only once all arrived: a copy
        /// that holds an older version recovery may need keeps it if the sender dies
        /// half-way (then the reply is `PeerDead` and the copy is as it was).
        staged: bool,
    },
    /// Copy bytes between two device regions held by this worker.
    Copy {
        /// Source address.
        src: u64,
        /// Destination address.
        dst: u64,
        /// Bytes.
        size: u64,
    },
    /// Run a kernel. `regions` are the buffers it can reach: the worker hashes them before and
    /// after the call and reports which changed (regions marked in `assume_written` are not
    /// hashed and count as changed), and the device pointers found in changed regions.
    Execute {
        /// Image number.
        image: u32,
        /// Kernel index in the image's kernel list.
        kernel: u32,
        /// Argument values (device addresses or by-value literals), pointer-sized.
        args: Vec<u64>,
        /// Buffers the kernel can reach.
        regions: Vec<Region>,
        /// Per region: mapped `from`, so surely written (no hashing needed).
        assume_written: Vec<bool>,
        /// The kernel is known to be short: run it on the polling thread (no hand-off).
        short: bool,
        /// A re-execution: the blocks its first run allocated (start, span), which its
        /// allocations of the same size take again, in order (see `worker/device_alloc.rs`).
        replay: Vec<Region>,
        /// Per region: if the kernel changes it (and it has at most [`MAX_SEND_BACK`] bytes),
        /// send its new contents right behind the reply (the head expects to retrieve them
        /// next: one round trip instead of two).
        send_back: Vec<bool>,
        /// Arguments that are the head's C standard streams ([`StdStream::in_args`]): the
        /// worker passes its own instead.
        streams: Vec<(u32, StdStream)>,
        /// Digest every changed region after the kernel (`Reply::Executed::digests`): the
        /// head compares the results of replicas of one region (`cluster/replicas.rs`).
        digest: bool,
        /// A replica: allocations of device code (those `replay` does not give) go first-fit
        /// into this range of the head's arena, the same for every replica of the region, so
        /// that they get the same addresses (see `worker/device_alloc.rs`).
        arena: Option<Region>,
        /// Test only (`OMPCLUSTER_FT_INJECT`, `flip:`): flip bit `flip` (0-7) of one byte of
        /// the first region mapped `from` (else the first region that is not image data) as
        /// soon as the kernel returns, as a faulty core would have written it.
        flip: Option<u8>,
    },
    /// Save these regions as part of checkpoint `ckpt` (to scratch: fast) and reply `Ok` (or
    /// `Error`); after an `Ok`, flush them to persistent storage and reply again, on the same
    /// tag, `Flushed` once durable (or `Error`).
    Checkpoint {
        /// Checkpoint id.
        ckpt: u64,
        /// (region id, device range) pairs.
        regions: Vec<(u64, Region)>,
    },
    /// Read a region's bytes from a published checkpoint into device memory, checked against
    /// the checkpoint's checksum; reply `Ok`, or `Error` if the copy is unusable. Saves the
    /// head reading it and sending it on (recovery, resuming).
    Restore {
        /// Where the bytes go (held by this worker).
        region: Region,
        /// Where they are: the checkpoint store's record of them, serialised (opaque here;
        /// validated by the [`crate::worker::CheckpointSink`]).
        #[serde(with = "serde_bytes")]
        record: Vec<u8>,
    },
    /// Reply once every earlier event of this worker has been handled.
    Sync,
    /// Fault injection (`OMPCLUSTER_FT_INJECT`): raise this signal (SIGKILL or SIGSTOP) on
    /// yourself, now, or once EXIT is answered. No reply.
    Inject {
        /// The signal.
        signal: i32,
        /// Raise it after answering EXIT, not now.
        at_exit: bool,
    },
    /// These ranks were declared dead: never wait for them, nor accept their data, again, and
    /// kill the processes in `kill` (dead ranks on this worker's host). Sent by the head before
    /// recovery touches this worker's memory; reply `Ok`.
    Fence {
        /// The dead ranks.
        ranks: Vec<i32>,
        /// Their processes on this worker's host.
        kill: Vec<crate::process::Victim>,
    },
    /// These ranks failed, as the head just learnt: stop waiting for them now (a transfer
    /// with one of them ends with its death), so that the requests recovery waits for end at
    /// once instead of at this worker's own heartbeat timeout. No reply; recovery's FENCE
    /// follows.
    Failed {
        /// The dead ranks.
        ranks: Vec<i32>,
    },
    /// Finish: reply, then leave the event loop.
    Exit,
}

/// Header of every control message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    /// Tag of the reply and of the bulk data of this request.
    pub tag: i32,
    /// The event.
    pub event: Event,
}

/// Pointers into the symmetric heap found in a region a kernel wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FoundPointers {
    /// These device addresses (deduplicated).
    Some(Vec<u64>),
    /// Too many to list: treat the region as able to reach every buffer.
    Many,
}

/// Changed byte runs of one region: (offset, new bytes).
pub type Patch = Vec<(u64, Vec<u8>)>;

/// The runs of bytes that differ between `old` and `new`, inside `pieces` (offset ranges):
/// (offset, new bytes). Runs closer than 16 bytes are joined.
pub fn diff(old: &[u8], new: &[u8], pieces: &[(usize, usize)]) -> Patch {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &(s, e) in pieces {
        let mut i = s;
        while i < e {
            if old[i] == new[i] {
                i += 1;
                continue;
            }
            let start = i;
            while i < e && old[i] != new[i] {
                i += 1;
            }
            match runs.last_mut() {
                Some(last) if start - last.1 < 16 && last.1 >= s => last.1 = i,
                _ => runs.push((start, i)),
            }
        }
    }
    runs.into_iter().map(|(s, e)| (s as u64, new[s..e].to_vec())).collect()
}

/// A block of device memory that device code allocated (`malloc`, `new` in a target region).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocated {
    /// Start (page-aligned) and bytes that hold data: the header and the bytes asked for.
    pub region: Region,
    /// Whole pages reserved for it.
    pub span: u64,
    /// Device pointers found in it when the kernel ended.
    pub pointers: FoundPointers,
}

/// A worker's reply to one event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Reply {
    /// Done.
    Ok,
    /// The bytes of a small region (answer to a RETRIEVE).
    Data(#[serde(with = "serde_bytes")] Vec<u8>),
    /// A kernel ran.
    Executed {
        /// For each region of the EXECUTE, in order: did its contents change?
        changed: Vec<bool>,
        /// For each changed region (in order of `changed`): device pointers found in it.
        pointers: Vec<FoundPointers>,
        /// Time spent in the kernel, seconds.
        seconds: f64,
        /// For changed regions that are a device image's writable data (and not too large):
        /// what the kernel changed, as (region index, [(offset, new bytes)]). Lets the head
        /// merge the changes of regions that wrote different globals at the same time on
        /// different workers.
        patches: Vec<(u32, Patch)>,
        /// What the worker printed on its standard output since the last reply that carried
        /// output: the head prints it before the region returns, so it appears in program
        /// order.
        #[serde(with = "serde_bytes")]
        output: Vec<u8>,
        /// The same for its standard error (printed by the head on its own).
        #[serde(with = "serde_bytes")]
        errors: Vec<u8>,
        /// Blocks device code allocated during the kernel (in this worker's arena, or given
        /// again from `replay`), held by this worker, in order of allocation.
        allocated: Vec<Allocated>,
        /// Blocks allocated before the kernel (by any rank) that it freed: their start.
        freed: Vec<u64>,
        /// Regions the EXECUTE asked back (`send_back`) that the kernel changed, in increasing
        /// order: their bytes follow this reply, raw, on the request tag, in this order.
        returned: Vec<u32>,
        /// With `Event::Execute::digest`: for each changed region (in order of `changed`), an
        /// xxh3-64 of its bytes (of an image's data, the program's pieces only), then one for
        /// each block of `allocated`, in order; else empty.
        digests: Vec<u64>,
    },
    /// A checkpoint flush is durable: the store's records of it, serialised by the store.
    Flushed(#[serde(with = "serde_bytes")] Vec<u8>),
    /// The event failed; the text says why.
    Error(String),
    /// The event could not complete because this rank, a peer of it (the other side of an
    /// exchange), was declared dead.
    PeerDead(i32),
}

/// Decoding or validation failure of a message from another rank.
#[derive(Debug, Error)]
pub enum ProtocolError {
    /// The bytes are not a valid message.
    #[error("malformed message: {0}")]
    Malformed(String),
    /// A field is out of range.
    #[error("invalid message: {0}")]
    Invalid(String),
}

/// Version of the wire protocol: the encoding of [`Envelope`], [`Reply`] and everything they
/// carry. Every rank sends it, with its build's identifier, in the first exchange of the job
/// (the plugin's `same_build.rs`), and a job whose ranks differ stops there. Bump it whenever
/// a message's encoding changes (a field, a variant, their order or type, or the encoder);
/// README, "Wire protocol", keeps the history:
///
/// * 1: bincode 1 (fixed-size integers), before ranks exchanged versions.
/// * 2: postcard 1 (its documented wire format: variable-length integers, a length before
///   every sequence); the first exchange of versions and build identifiers.
pub const PROTOCOL_VERSION: u32 = 3;

/// A [`postcard`] output that appends to a vector (the transport's reused send buffer, whose
/// first byte is already the frame's).
struct Append<'a>(&'a mut Vec<u8>);

impl postcard::ser_flavors::Flavor for Append<'_> {
    type Output = ();

    #[inline(always)]
    fn try_push(&mut self, data: u8) -> postcard::Result<()> {
        self.0.push(data);
        Ok(())
    }

    #[inline(always)]
    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        self.0.extend_from_slice(data);
        Ok(())
    }

    fn finalize(self) -> postcard::Result<()> {
        Ok(())
    }
}

/// Serialise a message at the end of `out` (postcard); one longer than [`MAX_CONTROL_BYTES`]
/// is refused (nothing is appended).
pub fn encode_into<T: Serialize>(msg: &T, out: &mut Vec<u8>) -> Result<(), ProtocolError> {
    let start = out.len();
    if let Err(e) = postcard::serialize_with_flavor(msg, Append(out)) {
        out.truncate(start);
        return Err(ProtocolError::Malformed(format!("cannot encode: {e}")));
    }
    let len = (out.len() - start) as u64;
    if len > MAX_CONTROL_BYTES {
        out.truncate(start);
        return Err(ProtocolError::Malformed(format!("a message of {len} bytes, over the limit of {MAX_CONTROL_BYTES}")));
    }
    Ok(())
}

/// Deserialise a message (postcard), bounded by [`MAX_CONTROL_BYTES`]; trailing bytes are an
/// error.
///
/// Bounded: no field is read past the input; a length prefix preallocates nothing when it
/// claims more elements than bytes remain (postcard's size hint), and at most 1 MiB otherwise
/// (serde's cautious hint); and every element of every message takes at least one byte, so a
/// length never drives a loop longer than the input.
pub fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, ProtocolError> {
    if bytes.len() as u64 > MAX_CONTROL_BYTES {
        return Err(ProtocolError::Malformed(format!("a message of {} bytes, over the limit of {MAX_CONTROL_BYTES}", bytes.len())));
    }
    match postcard::take_from_bytes(bytes) {
        Ok((msg, [])) => Ok(msg),
        Ok((_, rest)) => Err(ProtocolError::Malformed(format!("{} trailing bytes after the message", rest.len()))),
        Err(e) => Err(ProtocolError::Malformed(e.to_string())),
    }
}

impl Event {
    /// Check sizes and list lengths, and that every region lies inside `[heap_lo, heap_hi)`.
    pub fn validate(&self, heap_lo: u64, heap_hi: u64) -> Result<(), ProtocolError> {
        let in_heap = |r: &Region| -> Result<(), ProtocolError> {
            match r.end() {
                Some(end) if r.addr >= heap_lo && end <= heap_hi => Ok(()),
                _ => Err(ProtocolError::Invalid(format!(
                    "region {:#x}+{} outside the device heap",
                    r.addr, r.size
                ))),
            }
        };
        match self {
            Event::LoadBinary { image, size, base, extent, kernels } => {
                if *image >= MAX_IMAGES {
                    // (A worker keeps images in a vector indexed by number.)
                    return Err(ProtocolError::Invalid(format!("image number {image} (at most {})", MAX_IMAGES - 1)));
                }
                if *size == 0 || *size > (4 << 30) {
                    return Err(ProtocolError::Invalid(format!("image size {size}")));
                }
                if kernels.len() > MAX_LIST {
                    return Err(ProtocolError::Invalid("too many entries".into()));
                }
                if *extent == 0 || base % crate::heap::PAGE != 0 || extent % crate::heap::PAGE != 0 {
                    return Err(ProtocolError::Invalid(format!("image range {base:#x}+{extent} is not whole pages")));
                }
                in_heap(&Region { addr: *base, size: *extent })
            }
            Event::Submit { region, bytes } => {
                let inline = region.size <= MAX_INLINE_DATA;
                if (inline && bytes.len() as u64 != region.size) || (!inline && !bytes.is_empty()) {
                    return Err(ProtocolError::Invalid(format!("submit of {} bytes carries {}", region.size, bytes.len())));
                }
                in_heap(region)
            }
            Event::Alloc(r)
            | Event::Reclaim(r)
            | Event::Delete(r)
            | Event::Retrieve(r)
            | Event::ExchangeSend { region: r, .. }
            | Event::ExchangeRecv { region: r, .. } => in_heap(r),
            Event::Copy { src, dst, size } => {
                in_heap(&Region { addr: *src, size: *size })?;
                in_heap(&Region { addr: *dst, size: *size })
            }
            Event::Execute { args, regions, assume_written, replay, send_back, streams, arena, .. } => {
                if args.len() > MAX_LIST || regions.len() > MAX_LIST || replay.len() > MAX_LIST {
                    return Err(ProtocolError::Invalid("too many kernel arguments".into()));
                }
                if streams.len() > args.len() || streams.iter().any(|&(i, _)| i as usize >= args.len()) {
                    return Err(ProtocolError::Invalid("a standard stream names no argument".into()));
                }
                if assume_written.len() != regions.len() || send_back.len() != regions.len() {
                    return Err(ProtocolError::Invalid("assume_written or send_back does not match regions".into()));
                }
                regions.iter().chain(replay).try_for_each(in_heap)?;
                if replay.iter().any(|r| r.addr % crate::heap::PAGE != 0 || r.size % crate::heap::PAGE != 0 || r.size == 0) {
                    return Err(ProtocolError::Invalid("replayed blocks must be whole pages".into()));
                }
                if let Some(r) = arena {
                    in_heap(r)?;
                    if r.addr % crate::heap::PAGE != 0 || r.size % crate::heap::PAGE != 0 || r.size == 0 {
                        return Err(ProtocolError::Invalid("a shared allocation range must be whole pages".into()));
                    }
                }
                Ok(())
            }
            Event::Restore { region, record } => {
                if record.len() > MAX_INLINE_DATA as usize {
                    return Err(ProtocolError::Invalid("checkpoint record too large".into()));
                }
                in_heap(region)
            }
            Event::Checkpoint { regions, .. } => {
                if regions.len() > MAX_LIST {
                    return Err(ProtocolError::Invalid("too many checkpoint regions".into()));
                }
                regions.iter().try_for_each(|(_, r)| in_heap(r))
            }
            Event::Failed { ranks } => {
                if ranks.len() > MAX_LIST {
                    return Err(ProtocolError::Invalid("too many failed ranks".into()));
                }
                Ok(())
            }
            Event::Fence { ranks, kill } => {
                if ranks.len() > MAX_LIST || kill.len() > MAX_LIST {
                    return Err(ProtocolError::Invalid("too many fenced ranks".into()));
                }
                Ok(())
            }
            Event::Inject { signal, .. } => {
                if *signal != libc::SIGKILL && *signal != libc::SIGSTOP {
                    return Err(ProtocolError::Invalid(format!("signal {signal} cannot be injected")));
                }
                Ok(())
            }
            Event::Sync | Event::Exit => Ok(()),
        }
    }
}

/// Most pointers reported per region before reporting [`FoundPointers::Many`].
pub const MAX_POINTERS: usize = 4096;

/// Find the 8-byte words of a region whose values lie in `[lo, hi)` (device addresses), at
/// most [`MAX_POINTERS`] of them.
///
/// # Safety
/// `ptr..ptr+len` must be readable.
pub unsafe fn scan_pointers(ptr: *const u8, len: usize, lo: u64, hi: u64) -> FoundPointers {
    // SAFETY: the caller guarantees readability.
    let bytes = unsafe { std::slice::from_raw_parts(ptr, len) };
    // Most data holds no device pointer: a branch-free pass (vectorised, about memory speed)
    // answers that before the slower pass that collects them.
    if count_in_range(bytes, lo, hi.saturating_sub(lo)) == 0 {
        return FoundPointers::Some(Vec::new());
    }
    let mut found = std::collections::BTreeSet::new();
    for w in bytes.chunks_exact(8) {
        let v = u64::from_ne_bytes(w.try_into().expect("chunk of 8"));
        if v >= lo && v < hi {
            found.insert(v);
            if found.len() > MAX_POINTERS {
                return FoundPointers::Many;
            }
        }
    }
    FoundPointers::Some(found.into_iter().collect())
}

/// How many of the 8-byte words of `bytes` (from its start) lie in `[lo, lo + span)`.
fn count_in_range(bytes: &[u8], lo: u64, span: u64) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2 (checked just above).
        return unsafe { count_in_range_avx2(bytes, lo, span) };
    }
    count_in_range_generic(bytes, lo, span)
}

/// [`count_in_range`] compiled for AVX2: 64-bit compares need it (or SSE4.2) to vectorise,
/// and the baseline x86-64 target has neither; this is 3-4x faster on 1 MiB.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn count_in_range_avx2(bytes: &[u8], lo: u64, span: u64) -> u64 {
    count_in_range_generic(bytes, lo, span)
}

#[inline(always)]
fn count_in_range_generic(bytes: &[u8], lo: u64, span: u64) -> u64 {
    bytes
        .chunks_exact(8)
        .map(|w| u64::from(u64::from_ne_bytes(w.try_into().expect("chunk of 8")).wrapping_sub(lo) < span))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, ProtocolError> {
        let mut bytes = Vec::new();
        encode_into(msg, &mut bytes)?;
        Ok(bytes)
    }

    #[test]
    fn diff_finds_changed_runs_inside_pieces() {
        let old = [0u8; 64];
        let mut new = old;
        new[3] = 1;
        new[5] = 1;
        new[40] = 2;
        new[50] = 9; // outside the pieces: not reported
        let d = diff(&old, &new, &[(0, 48)]);
        assert_eq!(d, vec![(3, vec![1, 0, 1]), (40, vec![2])]);
        assert!(diff(&old, &old, &[(0, 64)]).is_empty());
    }


    #[test]
    fn round_trip_and_limits() {
        let ev = Envelope {
            tag: 77,
            event: Event::Execute {
                image: 1,
                kernel: 2,
                args: vec![1, 2, 3],
                regions: vec![Region { addr: 4096, size: 8 }],
                assume_written: vec![false],
                short: true,
                replay: vec![Region { addr: 8192, size: 4096 }],
                send_back: vec![true],
                streams: vec![(2, StdStream::Stderr)],
                digest: false,
                arena: Some(Region { addr: 16384, size: 8192 }),
                flip: Some(5),
            },
        };
        let bytes = encode(&ev).unwrap();
        let back: Envelope = decode(&bytes).unwrap();
        assert_eq!(back, ev);
        let sub = Envelope { tag: 5, event: Event::Submit { region: Region { addr: 4096, size: 1024 }, bytes: vec![3; 1024] } };
        assert_eq!(decode::<Envelope>(&encode(&sub).unwrap()).unwrap(), sub);
        let data = Reply::Data((0..=255).collect());
        assert_eq!(decode::<Reply>(&encode(&data).unwrap()).unwrap(), data);
        // Truncated and padded messages are rejected.
        assert!(decode::<Envelope>(&bytes[..bytes.len() - 1]).is_err());
        let mut padded = bytes.clone();
        padded.push(0);
        assert!(decode::<Envelope>(&padded).is_err());
        // A length prefix claiming a huge vector is rejected without allocating it: tag 1
        // (zigzag 2), variant Execute (9), image 0, kernel 0, then the arguments' length, the
        // largest 10-byte varint.
        let mut evil = vec![2, 9, 0, 0];
        evil.extend_from_slice(&[0xff; 9]);
        evil.push(0x01);
        assert!(matches!(decode::<Envelope>(&evil), Err(ProtocolError::Malformed(_))));
        // The same with a length that fits, and no elements behind it.
        let mut short = vec![2, 9, 0, 0, 0xe8, 0x07];
        assert!(decode::<Envelope>(&short).is_err());
        short.extend_from_slice(&[0; 8]);
        assert!(decode::<Envelope>(&short).is_err());
        // An input over the control limit is refused before it is read.
        let huge = vec![0u8; MAX_CONTROL_BYTES as usize + 1];
        let e = decode::<Reply>(&huge).unwrap_err().to_string();
        assert!(e.contains("over the limit"), "{e}");
        // And a message over the limit is not encoded (nothing is appended).
        let mut out = vec![1u8];
        assert!(encode_into(&Reply::Data(vec![0; MAX_CONTROL_BYTES as usize]), &mut out).is_err());
        assert_eq!(out, [1]);
    }

    /// The wire format is postcard's documented one: these bytes are what a rank of this
    /// protocol version sends (a change here is a change of the wire: bump
    /// [`PROTOCOL_VERSION`]).
    #[test]
    fn the_wire_format_is_pinned() {
        let ev = Envelope { tag: -3, event: Event::Retrieve(Region { addr: 0x1000, size: 300 }) };
        assert_eq!(encode(&ev).unwrap(), [5, 5, 0x80, 0x20, 0xac, 0x02]);
        let ok = Reply::Executed {
            changed: vec![true],
            pointers: vec![FoundPointers::Many],
            seconds: 1.0,
            patches: vec![],
            output: b"hi".to_vec(),
            errors: vec![],
            allocated: vec![],
            freed: vec![],
            returned: vec![0],
            digests: vec![0x0102],
        };
        assert_eq!(encode(&ok).unwrap(), [2, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 0, 2, b'h', b'i', 0, 0, 0, 1, 0, 1, 0x82, 0x02]);
        assert_eq!(PROTOCOL_VERSION, 3, "the pinned bytes above are protocol 3's");
    }

    #[test]
    fn validation_checks_the_heap_bounds() {
        let submit = |addr, size, bytes: usize| Event::Submit { region: Region { addr, size }, bytes: vec![7; bytes] };
        assert!(submit(0x1000, 0x1000, 0).validate(0x1000, 0x3000).is_ok());
        assert!(submit(0x2800, 0x1000, 0).validate(0x1000, 0x3000).is_err());
        // Small regions carry their bytes, all of them; large ones none.
        assert!(submit(0x1000, 16, 16).validate(0x1000, 0x3000).is_ok());
        assert!(submit(0x1000, 16, 15).validate(0x1000, 0x3000).is_err());
        assert!(submit(0x1000, 16, 0).validate(0x1000, 0x3000).is_err());
        assert!(submit(0x1000, 0x1000, 8).validate(0x1000, 0x3000).is_err());
        let overflow = Event::Retrieve(Region { addr: u64::MAX - 1, size: 16 });
        assert!(overflow.validate(0, u64::MAX).is_err());
        let copy = Event::Copy { src: 0x1000, dst: 0x5000, size: 8 };
        assert!(copy.validate(0x1000, 0x3000).is_err());
        let load = |base, extent| Event::LoadBinary { image: 0, size: 1, base, extent, kernels: vec![] };
        assert!(load(0x1000, 0x2000).validate(0x1000, 0x3000).is_ok());
        assert!(load(0x1000, 0x3000).validate(0x1000, 0x3000).is_err());
        assert!(load(0x1800, 0x1000).validate(0x1000, 0x3000).is_err());
        assert!(load(0x1000, 0).validate(0x1000, 0x3000).is_err());
        // An image number a worker would size a vector to.
        let far = Event::LoadBinary { image: u32::MAX, size: 1, base: 0x1000, extent: 0x1000, kernels: vec![] };
        assert!(far.validate(0x1000, 0x3000).is_err());
        let exec = |streams: Vec<(u32, StdStream)>| Event::Execute {
            image: 0,
            kernel: 0,
            args: vec![1, 2],
            regions: vec![],
            assume_written: vec![],
            short: false,
            replay: vec![],
            send_back: vec![],
            streams,
            digest: false,
            arena: None,
            flip: None,
        };
        assert!(exec(vec![(1, StdStream::Stderr)]).validate(0x1000, 0x3000).is_ok());
        let shared = |addr, size| match exec(vec![]) {
            Event::Execute { image, kernel, args, regions, assume_written, short, replay, send_back, streams, digest, flip, .. } => {
                Event::Execute { image, kernel, args, regions, assume_written, short, replay, send_back, streams, digest, arena: Some(Region { addr, size }), flip }
            }
            _ => unreachable!(),
        };
        assert!(shared(0x1000, 0x1000).validate(0x1000, 0x3000).is_ok());
        assert!(shared(0x1000, 0x3000).validate(0x1000, 0x3000).is_err(), "outside the heap");
        assert!(shared(0x1000, 0x800).validate(0x1000, 0x3000).is_err(), "not whole pages");
        assert!(shared(0x1000, 0).validate(0x1000, 0x3000).is_err(), "empty");
        assert!(exec(vec![(2, StdStream::Stdout)]).validate(0x1000, 0x3000).is_err());
        assert!(exec(vec![(0, StdStream::Stdout); 3]).validate(0x1000, 0x3000).is_err());
    }

    /// The head's streams among a kernel's arguments are found, and stand for the same value
    /// in every process in a content key; other values are left alone.
    #[test]
    fn standard_streams_among_arguments() {
        let (out, err) = (StdStream::Stdout.here(), StdStream::Stderr.here());
        let args = [7, out, 0, err];
        assert_eq!(StdStream::in_args(&args), vec![(1, StdStream::Stdout), (3, StdStream::Stderr)]);
        let stable = StdStream::stable_args(&args);
        assert_eq!(stable[0], 7);
        assert_eq!(stable[2], 0);
        assert!(stable[1] != out && stable[3] != err && stable[1] != stable[3]);
        assert!(matches!(StdStream::stable_args(&[1, 2]), std::borrow::Cow::Borrowed(_)));
    }

    #[test]
    fn scan_finds_device_words_only() {
        let (lo, hi) = (0x1000_0000_0000u64, 0x1100_0000_0000u64);
        // 3 words in range (first, last-below-hi, in the middle), edges just outside, and a
        // tail of 5 bytes that is not a whole word; scanned from an odd address too.
        let words = [lo, lo - 1, 7, hi - 1, hi, lo + 4096, u64::MAX];
        let mut bytes = vec![0u8; 1];
        for w in words {
            bytes.extend_from_slice(&w.to_ne_bytes());
        }
        bytes.extend_from_slice(&[0x10; 5]);
        // SAFETY: the pointer and length come from a live slice.
        let scan = |b: &[u8]| unsafe { scan_pointers(b.as_ptr(), b.len(), lo, hi) };
        match scan(&bytes[1..]) {
            FoundPointers::Some(v) => assert_eq!(v, vec![lo, lo + 4096, hi - 1]),
            FoundPointers::Many => panic!("three pointers are not many"),
        }
        assert_eq!(count_in_range(&bytes[1..], lo, hi - lo), 3);
        assert_eq!(count_in_range(&bytes[1..], lo, hi - lo), count_in_range_generic(&bytes[1..], lo, hi - lo));
        // Large, mostly plain data (the vectorised path), with one pointer near the end.
        let mut big: Vec<u8> = (0..1 << 20).map(|i| (i * 31 % 251) as u8).collect();
        let at = big.len() - 16;
        big[at..at + 8].copy_from_slice(&(lo + 8).to_ne_bytes());
        assert_eq!(count_in_range(&big, lo, hi - lo), count_in_range_generic(&big, lo, hi - lo));
        assert!(matches!(scan(&big), FoundPointers::Some(v) if v == vec![lo + 8]));
        // More distinct pointers than tracked: Many.
        let many: Vec<u8> = (0..MAX_POINTERS as u64 + 2).flat_map(|i| (lo + i * 8).to_ne_bytes()).collect();
        assert!(matches!(scan(&many), FoundPointers::Many));
    }
}
