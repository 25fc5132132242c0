//! The one EXECUTE client, [`Executor`]. Every kernel run, a launch's (`launch.rs`) or a
//! recovery's re-run (`rerun.rs`), is described by one [`Execute`], sent by
//! [`Executor::post_execute`] and its reply received by [`Executor::await_executed`], which
//! validates it ([`check_reply`]) before anything in it is used. Posting and awaiting are
//! separate so that a caller can have several EXECUTEs in flight on one worker (a recovery's
//! chain) and await them in order. [`Executor::execute`] does both, and runs the kernel on the
//! head itself once no worker is left ([`Executor::run_here`]; `on_head.rs` loads the images
//! there).
//!
//! What a run on a worker printed is printed here, once, in program order, unless the run is
//! `quiet` (a re-run: its first run printed it); a run on the head prints on its own stdout.

use super::durability::Durability;
use super::link::Link;
use super::meter::Meter;
use super::offload::Offload;
use super::{ClusterError, Result};
use crate::inject::Injector;
use crate::data::{Place, HEAD};
use event_system::comm::PostedRecv;
use event_system::Liveness;
use event_system::protocol::{Event, FoundPointers, Patch, Region, Reply, StdStream, MAX_SEND_BACK};

/// A worker's report of a kernel run (see `Reply::Executed`; its output is printed already).
#[derive(Default)]
pub(super) struct Executed {
    /// Per region: did it change?
    pub(super) changed: Vec<bool>,
    /// Device pointers found in each changed region.
    pub(super) pointers: Vec<FoundPointers>,
    /// Seconds in the kernel.
    pub(super) seconds: f64,
    /// When the EXECUTE left and the reply came, on the trace's clock (if one is recorded).
    pub(super) traced: Option<(f64, f64)>,
    /// Changes to image data regions: (region index, runs).
    pub(super) patches: Vec<(u32, Patch)>,
    /// Blocks device code allocated.
    pub(super) allocated: Vec<event_system::protocol::Allocated>,
    /// Blocks allocated before that it freed.
    pub(super) freed: Vec<u64>,
    /// Regions whose new contents came back with the reply: (region index, bytes).
    pub(super) returned: Vec<(usize, Vec<u8>)>,
    /// What it printed (kept only for the log, `journal.rs`; by [`Executor::await_quiet`],
    /// all of it, for [`Executor::print`]).
    pub(super) output: Vec<u8>,
    pub(super) errors: Vec<u8>,
    /// With [`Execute::digest`]: per changed region, the digest of its bytes.
    pub(super) digests: Vec<u64>,
}

/// One kernel run to ask of a rank: kernel `kernel` of image `image` with argument values
/// `args`, over `regions` (present on that rank).
pub(super) struct Execute<'a> {
    pub(super) image: u32,
    pub(super) kernel: u32,
    pub(super) args: &'a [u64],
    pub(super) regions: Vec<Region>,
    /// Per region: count it as changed whatever the kernel does (mapped `from`, or a re-run
    /// of a task that wrote it).
    pub(super) assume_written: Vec<bool>,
    /// Per region: send its new contents back with the reply, if changed (at most
    /// `MAX_SEND_BACK` bytes each).
    pub(super) send_back: Vec<bool>,
    /// Device allocations to give again, in order (a re-run of a task that allocated).
    pub(super) replay: Vec<Region>,
    /// Run it on the worker's polling thread (a short kernel).
    pub(super) short: bool,
    /// Drop what it prints (a re-run: its first run printed it).
    pub(super) quiet: bool,
    /// Digest what it changed (replicas, `replicas.rs`).
    pub(super) digest: bool,
    /// The range of the head's arena its device allocations go to (replicas, shared by all
    /// of a region's: `Offload::grant`).
    pub(super) arena: Option<Region>,
}

/// An EXECUTE sent to a worker whose reply is still to come: what checking that reply needs.
pub(super) struct Posted {
    rank: i32,
    tag: i32,
    sizes: Vec<u64>,
    assume_written: Vec<bool>,
    send_back: Vec<bool>,
    quiet: bool,
    digest: bool,
    /// When it was sent, on the trace's clock.
    since: Option<f64>,
}

view! {
    /// The EXECUTE client: borrows the link (the EXECUTE and its reply), the meter (the trace),
    /// the durability (a region's output is kept for the log; the head's copies wait for a
    /// checkpoint saving them) and the offload (the head's own device, libomp's messages seen).
    pub(super) struct Executor { link: Link, offload: Offload, durability: Durability, meter: Meter, inject: Injector }
}

impl<'a> Executor<'a> {
    /// Run `run` on `w` (a worker, or the head once it runs regions itself) and wait for its
    /// report.
    pub(super) fn execute(&self, w: i32, run: Execute<'_>) -> Result<Executed> {
        match Place::of(w) {
            Place::Head => {
                let since = self.meter.trace_now();
                let mut ran = self.run_here(run.image, run.kernel, run.args, &run.regions, &run.assume_written, run.quiet)?;
                ran.traced = since.zip(self.meter.trace_now());
                Ok(ran)
            }
            Place::Worker(w) => {
                let posted = self.post_execute(w, run)?;
                self.await_executed(posted)
            }
        }
    }

    /// Send `run` to worker `w`; its reply is awaited by [`Executor::await_executed`].
    pub(super) fn post_execute(&self, w: i32, run: Execute<'_>) -> Result<Posted> {
        let n = run.regions.len();
        assert!(run.assume_written.len() == n && run.send_back.len() == n, "one flag per region");
        let since = self.meter.trace_now();
        let sizes = run.regions.iter().map(|r| r.size).collect();
        let posted = Posted { rank: w, tag: 0, sizes, assume_written: run.assume_written.clone(), send_back: run.send_back.clone(), quiet: run.quiet, digest: run.digest, since };
        // Test only (`flip:`): a bit of what this run writes is flipped on the worker.
        // Its bit depends on the rank: flips on two replicas of one region never agree.
        let flip = self.inject.flip_due(w, self.meter.stats.tasks(), self.meter.start.elapsed().as_millis() as u64).then(|| 4 + (w % 4) as u8);
        if let Some(bit) = flip {
            self.meter.stats.replicas.flips_injected.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.meter.log(format_args!("INJECT a flip of bit {bit} into the next region run on {w}"));
        }
        let event = Event::Execute {
            image: run.image,
            kernel: run.kernel,
            args: run.args.to_vec(),
            regions: run.regions,
            assume_written: run.assume_written,
            short: run.short,
            replay: run.replay,
            send_back: run.send_back,
            streams: StdStream::in_args(run.args),
            digest: run.digest,
            arena: run.arena,
            flip,
        };
        let tag = self.link.post(w, event)?;
        Ok(Posted { tag, ..posted })
    }

    /// Wait for the reply to `p`, check it, receive the bytes it sends back, and print what
    /// the run printed (unless it is quiet).
    pub(super) fn await_executed(&self, p: Posted) -> Result<Executed> {
        let (w, quiet) = (p.rank, p.quiet);
        let mut ran = self.await_quiet(p)?;
        if !quiet {
            self.print(w, &mut ran);
        }
        Ok(ran)
    }

    /// Print what the run `ran` on `w` printed (awaited by [`Executor::await_quiet`]), and
    /// keep it only if the log needs it.
    pub(super) fn print(&self, w: i32, ran: &mut Executed) {
        let errors = self.once_per_job(w, &ran.errors);
        if !ran.output.is_empty() || !errors.is_empty() {
            // What the region printed, after what the program printed before it.
            // SAFETY: flushing all C streams is always allowed.
            unsafe { libc::fflush(std::ptr::null_mut()) };
            event_system::write_all(1, &ran.output);
            event_system::write_all(2, &errors);
        }
        if self.durability.journal.is_some() {
            ran.errors = errors;
        } else {
            ran.output = Vec::new();
            ran.errors = Vec::new();
        }
    }

    /// As [`Executor::await_executed`], but what the run printed is returned in full, not
    /// printed (replicas: only the result taken is printed).
    pub(super) fn await_quiet(&self, p: Posted) -> Result<Executed> {
        let reply = self.link.comm.recv_msg::<Reply>(p.rank, p.tag, self.link.live.as_ref())?;
        self.reply_of(&p, reply)
    }

    /// Post the receive of the reply to `p`, to be tested by [`Executor::test_reply`] (several
    /// awaited at once: the replicas of a region, `replicas.rs`).
    pub(super) fn post_reply(&self, p: &Posted) -> Result<PostedRecv> {
        Ok(self.link.comm.post_recv(p.rank, p.tag)?)
    }

    /// Test once for the reply to `p` (its receive `recv`): `None` while it has not come and
    /// the worker lives; else the run, as [`Executor::await_quiet`] gives it. `recv` is spent
    /// once this returned `Some`.
    pub(super) fn test_reply(&self, p: &Posted, recv: &mut PostedRecv) -> Option<Result<Executed>> {
        let live = self.link.live.as_ref();
        match self.link.comm.test_recv(recv, live) {
            Ok(Some(m)) => Some(match event_system::protocol::decode::<Reply>(&m) {
                Ok(reply) => self.reply_of(p, reply),
                Err(source) => Err(event_system::comm::CommError::Protocol { rank: p.rank, source }.into()),
            }),
            Ok(None) if live.is_dead(p.rank) => Some(Err(ClusterError::PeerDead(p.rank))),
            Ok(None) => None,
            Err(e) => Some(Err(e.into())),
        }
    }

    /// The run a reply to `p` reports, checked, with the bytes it sends back received.
    fn reply_of(&self, p: &Posted, reply: Reply) -> Result<Executed> {
        let w = p.rank;
        let (changed, pointers, seconds, patches, output, errors, allocated, freed, returned, digests) = match reply {
            Reply::Executed { changed, pointers, seconds, patches, output, errors, allocated, freed, returned, digests } => {
                (changed, pointers, seconds, patches, output, errors, allocated, freed, returned, digests)
            }
            Reply::Error(msg) => return Err(ClusterError::Worker { rank: w, msg }),
            Reply::PeerDead(peer) => return Err(ClusterError::PeerDead(peer)),
            other => return Err(ClusterError::Worker { rank: w, msg: format!("bad reply to EXECUTE: {other:?}") }),
        };
        let reply = ReplyParts { changed: &changed, pointers: &pointers, seconds, patches: &patches, returned: &returned, digests: &digests, blocks: allocated.len() };
        if let Err(why) = check_reply(&reply, p) {
            return Err(ClusterError::Worker { rank: w, msg: format!("bad reply to EXECUTE: {why}") });
        }
        let (output, errors) = if p.quiet { (Vec::new(), Vec::new()) } else { (output, errors) };
        let mut back = Vec::with_capacity(returned.len());
        for i in returned {
            let i = i as usize;
            let mut bytes = vec![0u8; p.sizes[i] as usize];
            // SAFETY: `bytes` has `sizes[i]` writable bytes, leaked if the peer died (MPI may
            // still write them).
            let got = unsafe { self.link.comm.recv_bytes(w, p.tag, bytes.as_mut_ptr(), bytes.len(), self.link.live.as_ref()) };
            if let Err(e) = got {
                std::mem::forget(bytes);
                return Err(e.into());
            }
            back.push((i, bytes));
        }
        Ok(Executed { changed, pointers, seconds, patches, allocated, freed, traced: p.since.zip(self.meter.trace_now()), returned: back, output, errors, digests })
    }

    /// Run kernel `index` of `image` on the head over `regions` (staged here), as a worker
    /// runs an EXECUTE. With `quiet`, what it prints is dropped (a re-run during recovery:
    /// its first run printed it).
    pub(super) fn run_here(&self, image: u32, index: u32, args: &[u64], regions: &[Region], assume_written: &[bool], quiet: bool) -> Result<Executed> {
        let dev = self.offload.local().ok_or(ClusterError::NoWorker)?;
        for r in regions {
            self.durability.before_changing_staged(r.addr);
        }
        let _quiet = if quiet { Some(QuietStdout::new().map_err(|e| ClusterError::Worker { rank: HEAD, msg: format!("cannot silence stdout: {e}") })?) } else { None };
        // SAFETY: the caller made every region present on the head (staged at its device
        // address, or an image's data loaded here) and keeps the buffers while it runs;
        // libomptarget generated `args` for this kernel (or the record kept them).
        let ran = watchdog::waiting("a user kernel run on the head", || unsafe { dev.execute(image, index, args, regions, assume_written) })
            .map_err(|msg| ClusterError::Worker { rank: HEAD, msg })?;
        Ok(Executed {
            changed: ran.changed,
            pointers: ran.pointers,
            seconds: ran.seconds,
            patches: ran.patches,
            allocated: ran.allocated,
            freed: ran.freed,
            traced: None,
            returned: Vec::new(),
            output: Vec::new(),
            errors: Vec::new(),
            digests: Vec::new(),
        })
    }

    /// What worker `w`'s region printed on stderr, less libomp's messages that another
    /// worker printed already. libomp says some of its messages once per process (`OMP:
    /// Warning #96: Cannot form a team ...` whatever the numbers, with its `OMP: Hint` lines),
    /// and the program without the cluster device is one process: a message number another
    /// worker printed first is dropped, with the hints that follow it.
    fn once_per_job(&self, w: i32, errors: &[u8]) -> Vec<u8> {
        if errors.is_empty() {
            return Vec::new();
        }
        let mut said = self.offload.omp_said.lock();
        let mut keep_hints = true;
        errors
            .split_inclusive(|&b| b == b'\n')
            .filter(|line| match omp_message_id(line) {
                Some(id) => {
                    keep_hints = *said.entry(id.to_vec()).or_insert(w) == w;
                    keep_hints
                }
                None if line.starts_with(b"OMP: Hint") => keep_hints,
                None => {
                    keep_hints = true;
                    true
                }
            })
            .flatten()
            .copied()
            .collect()
    }
}

/// The process's standard output goes to /dev/null while this lives (C streams flushed on
/// both ends). Only recovery uses it, while it holds every offloading thread.
struct QuietStdout {
    saved: libc::c_int,
}

impl QuietStdout {
    fn new() -> std::io::Result<Self> {
        let null = std::fs::OpenOptions::new().write(true).open("/dev/null")?;
        // SAFETY: flushing C streams, then duplicating descriptors this process owns
        // (1, and `null` which stays open until the end of this function).
        unsafe {
            libc::fflush(std::ptr::null_mut());
            let saved = libc::dup(1);
            if saved < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), 1) < 0 {
                let e = std::io::Error::last_os_error();
                libc::close(saved);
                return Err(e);
            }
            Ok(QuietStdout { saved })
        }
    }
}

impl Drop for QuietStdout {
    fn drop(&mut self) {
        // SAFETY: flushing C streams, then putting back the descriptor saved in `new`, which
        // this value owns.
        unsafe {
            libc::fflush(std::ptr::null_mut());
            libc::dup2(self.saved, 1);
            libc::close(self.saved);
        }
    }
}

/// The parts of a worker's `Reply::Executed` that must agree with the EXECUTE it answers.
/// Its device allocations are checked by their users: a launch adopts those inside the
/// worker's arena, a re-run needs its first run's.
struct ReplyParts<'a> {
    changed: &'a [bool],
    pointers: &'a [FoundPointers],
    seconds: f64,
    patches: &'a [(u32, Patch)],
    returned: &'a [u32],
    digests: &'a [u64],
    /// Blocks it allocated.
    blocks: usize,
}

/// What is wrong with `r` as the reply to `p`, if anything: one flag per region, every region
/// counted as written changed, one pointer scan per changed region, patches and regions sent
/// back only of changed regions (in increasing order; sent back only if asked, and small enough).
fn check_reply(r: &ReplyParts<'_>, p: &Posted) -> std::result::Result<(), String> {
    let n = p.sizes.len();
    if r.changed.len() != n {
        return Err(format!("{} change flags for {n} regions", r.changed.len()));
    }
    if let Some(i) = (0..n).find(|&i| p.assume_written[i] && !r.changed[i]) {
        return Err(format!("region {i}, counted as written, reported unchanged"));
    }
    let changed = r.changed.iter().filter(|&&c| c).count();
    if r.pointers.len() != changed {
        return Err(format!("{} pointer scans for {changed} changed regions", r.pointers.len()));
    }
    let digests = if p.digest { changed + r.blocks } else { 0 };
    if r.digests.len() != digests {
        return Err(format!("{} digests for {digests} (changed regions and blocks allocated, if asked)", r.digests.len()));
    }
    if !(r.seconds.is_finite() && r.seconds >= 0.0) {
        return Err(format!("a kernel time of {} s", r.seconds));
    }
    // Indices of changed regions, in increasing order (no allocation: this runs per region).
    fn increasing_changed(idx: impl Iterator<Item = u32>, changed: &[bool]) -> bool {
        let mut last: Option<u32> = None;
        for i in idx {
            if last.is_some_and(|l| l >= i) || !changed.get(i as usize).copied().unwrap_or(false) {
                return false;
            }
            last = Some(i);
        }
        true
    }
    if !increasing_changed(r.patches.iter().map(|(i, _)| *i), r.changed) {
        return Err(format!("patches of regions {:?}, not changed ones in order", r.patches.iter().map(|(i, _)| *i).collect::<Vec<_>>()));
    }
    let asked = |&i: &u32| p.send_back.get(i as usize).copied().unwrap_or(false) && p.sizes[i as usize] <= MAX_SEND_BACK;
    if !increasing_changed(r.returned.iter().copied(), r.changed) || !r.returned.iter().all(asked) {
        return Err(format!("it sends back regions {:?} it was not asked for", r.returned));
    }
    Ok(())
}

/// `OMP: Warning #96` of `OMP: Warning #96: Cannot form a team ...` (libomp's messages:
/// Warning, Info, Error, Fatal error, each with its number).
fn omp_message_id(line: &[u8]) -> Option<&[u8]> {
    let rest = line.strip_prefix(b"OMP: ")?;
    let hash = rest.iter().position(|&b| b == b'#')?;
    let digits = rest[hash + 1..].iter().take_while(|b| b.is_ascii_digit()).count();
    (digits > 0 && rest[..hash].iter().all(|b| b.is_ascii_alphabetic() || *b == b' ')).then(|| &line[..5 + hash + 1 + digits])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn posted(n: usize) -> Posted {
        Posted { rank: 1, tag: 7, sizes: vec![64; n], assume_written: vec![false; n], send_back: vec![false; n], quiet: false, digest: false, since: None }
    }

    fn reply<'a>(changed: &'a [bool], pointers: &'a [FoundPointers], patches: &'a [(u32, Patch)], returned: &'a [u32]) -> ReplyParts<'a> {
        ReplyParts { changed, pointers, seconds: 0.5, patches, returned, digests: &[], blocks: 0 }
    }

    const NONE: FoundPointers = FoundPointers::Many;

    #[test]
    fn a_consistent_reply_passes() {
        let mut p = posted(3);
        p.send_back[2] = true;
        p.assume_written[0] = true;
        let patch: Patch = Vec::new();
        assert_eq!(check_reply(&reply(&[true, false, true], &[NONE, NONE], &[(0, patch.clone()), (2, patch)], &[2]), &p), Ok(()));
        assert_eq!(check_reply(&reply(&[false, false, false], &[], &[], &[]), &posted(3)), Ok(()));
    }

    #[test]
    fn flags_and_scans_must_match_the_regions() {
        let p = posted(2);
        assert!(check_reply(&reply(&[true], &[NONE], &[], &[]), &p).unwrap_err().contains("1 change flags for 2 regions"));
        assert!(check_reply(&reply(&[true, true], &[NONE], &[], &[]), &p).unwrap_err().contains("1 pointer scans for 2 changed"));
        assert!(check_reply(&reply(&[false, false], &[NONE], &[], &[]), &p).is_err());
        let mut w = posted(2);
        w.assume_written[1] = true;
        assert!(check_reply(&reply(&[true, false], &[NONE], &[], &[]), &w).unwrap_err().contains("counted as written"));
        let mut bad_time = reply(&[false, false], &[], &[], &[]);
        for s in [f64::NAN, -1.0, f64::INFINITY] {
            bad_time.seconds = s;
            assert!(check_reply(&bad_time, &p).is_err(), "{s}");
        }
    }

    #[test]
    fn one_digest_per_changed_region_when_asked() {
        let mut p = posted(3);
        let c = [true, false, true];
        let ptrs = [NONE, NONE];
        let with = |d: &'static [u64]| ReplyParts { digests: d, ..reply(&c, &ptrs, &[], &[]) };
        assert!(check_reply(&with(&[1, 2]), &p).is_err(), "not asked");
        p.digest = true;
        assert_eq!(check_reply(&with(&[1, 2]), &p), Ok(()));
        assert!(check_reply(&with(&[1]), &p).unwrap_err().contains("1 digests for 2"));
        assert!(check_reply(&with(&[1, 2, 3]), &p).is_err());
        // Then one per block allocated.
        let blocks = ReplyParts { blocks: 1, ..with(&[1, 2, 3]) };
        assert_eq!(check_reply(&blocks, &p), Ok(()));
        assert!(check_reply(&ReplyParts { blocks: 1, ..with(&[1, 2]) }, &p).is_err());
    }

    #[test]
    fn patches_only_of_changed_regions_in_order() {
        let p = posted(3);
        let c = [true, false, true];
        let ptrs = [NONE, NONE];
        assert!(check_reply(&reply(&c, &ptrs, &[(1, Vec::new())], &[]), &p).is_err(), "unchanged");
        assert!(check_reply(&reply(&c, &ptrs, &[(3, Vec::new())], &[]), &p).is_err(), "out of range");
        assert!(check_reply(&reply(&c, &ptrs, &[(2, Vec::new()), (0, Vec::new())], &[]), &p).is_err(), "out of order");
        assert!(check_reply(&reply(&c, &ptrs, &[(0, Vec::new()), (0, Vec::new())], &[]), &p).is_err(), "twice");
    }

    #[test]
    fn only_regions_asked_back_come_back() {
        let mut p = posted(3);
        p.send_back = vec![true, true, false];
        let c = [true, false, true];
        let ptrs = [NONE, NONE];
        assert_eq!(check_reply(&reply(&c, &ptrs, &[], &[0]), &p), Ok(()));
        assert!(check_reply(&reply(&c, &ptrs, &[], &[1]), &p).is_err(), "asked but unchanged");
        assert!(check_reply(&reply(&c, &ptrs, &[], &[2]), &p).is_err(), "changed but not asked");
        assert!(check_reply(&reply(&c, &ptrs, &[], &[5]), &p).is_err(), "out of range");
        assert!(check_reply(&reply(&c, &ptrs, &[], &[0, 0]), &p).is_err(), "twice");
        p.sizes[0] = MAX_SEND_BACK + 1;
        assert!(check_reply(&reply(&c, &ptrs, &[], &[0]), &p).is_err(), "too large to come back");
    }
}

#[cfg(test)]
mod omp_message_tests {
    use super::omp_message_id;

    #[test]
    fn libomps_message_numbers() {
        assert_eq!(omp_message_id(b"OMP: Warning #96: Cannot form a team with 256 threads, using 2 instead.\n"), Some(&b"OMP: Warning #96"[..]));
        assert_eq!(omp_message_id(b"OMP: Error #15: Initializing libomp.so\n"), Some(&b"OMP: Error #15"[..]));
        assert_eq!(omp_message_id(b"OMP: Hint Consider unsetting KMP_DEVICE_THREAD_LIMIT\n"), None);
        assert_eq!(omp_message_id(b"OMP: #\n"), None);
        assert_eq!(omp_message_id(b"my OMP: Warning #1\n"), None);
    }
}
