//! Moving buffers between ranks ([`Movement`]): where a buffer's current version is, and
//! making it present where a kernel needs it.
//!
//! Threads: offloading threads, the handler (a re-run's inputs), the buddy thread (its
//! copies); each takes the ledger's `buffers` lock only for decisions, never across a
//! transfer.

use super::faults::Faults;
use super::ledger::Ledger;
use super::link::{self, Link};
use super::meter::Meter;
use super::offload::Offload;
use super::{ClusterError, Result};
use crate::data::{Buffer, CopyState, Moved, Place, HEAD};
use crate::inject::{Injector, Trigger};
use event_system::protocol::{Envelope, Event, MAX_INLINE_DATA, Region, Reply};
use serde_json::json;
use std::collections::BTreeSet;
use std::time::Instant;
use timeline::Cat;

view! {
    /// Moving data: borrows the link (the transfers), the ledger (where versions are, the
    /// `incoming` marks), the offload (the head's pages, the regions in flight per rank, the
    /// scheduler's transfer times), the meter (counters, trace, log) and the fault injector of
    /// `Tolerance` (a test's delays).
    pub(super) struct Movement { link: Link, ledger: Ledger, offload: Offload, meter: Meter, inject: Injector }
}

impl<'a> Movement<'a> {
    /// Where to take a buffer's current version from: the head's staged copy if it holds
    /// one, else the least busy live worker holding it.
    pub(super) fn current_holder(&self, b: &Buffer) -> Option<i32> {
        if b.on_head() {
            Some(HEAD)
        } else {
            self.least_busy(&b.holders)
        }
    }

    /// Give worker `w` pages for the buffer if it has none. Called with the buffer lock held,
    /// so the ALLOC reaches `w` before anything another thread sends it for this buffer.
    pub(super) fn back_on(&self, b: &mut Buffer, w: i32) -> Result<()> {
        if b.backed.contains(&w) {
            return Ok(());
        }
        match Place::of(w) {
            Place::Head => self.offload.heap.back(b.addr, b.span)?,
            Place::Worker(w) => _ = self.link.post(w, Event::Alloc(Region { addr: b.addr, size: b.span }))?,
        }
        b.backed.insert(w);
        Ok(())
    }

    pub(super) fn least_busy(&self, ranks: &BTreeSet<i32>) -> Option<i32> {
        ranks
            .iter()
            .copied()
            .filter(|&r| self.link.is_live_worker(r))
            .min_by_key(|&r| self.offload.in_flight(r))
    }

    /// Make the current version of the buffer at `addr` present on worker `w`. Returns the
    /// bytes moved.
    pub(super) fn ensure_present(&self, addr: u64, w: i32) -> Result<u64> {
        let mut pending = Vec::new();
        let started = self.start_move(addr, w, &mut pending);
        let finished = self.finish_moves(&mut pending);
        started?;
        finished
    }

    /// Start making the current version of the buffer at `addr` present on worker `w`. From
    /// the head's copy, the SUBMIT and its bytes are sent and the answer is left to
    /// [`Movement::finish_moves`], so the inputs a region takes from the head cost one round
    /// trip together instead of one each (the worker handles SUBMITs in order, before any
    /// later event); from a worker's copy, it is moved now. `pending` holds the caller's
    /// unfinished moves, which mark their buffers as incoming on `w`: they are finished before
    /// this waits for another thread's move, which may itself be waiting for them.
    pub(super) fn start_move(&self, addr: u64, w: i32, pending: &mut Vec<Move>) -> Result<()> {
        let mut bufs = self.ledger.buffers.lock();
        let (src, version, size, before, staged) = loop {
            let b = bufs.get_mut(addr).ok_or(ClusterError::UnknownAddress(addr))?;
            if b.held_by(w) {
                self.back_on(b, w)?;
                return Ok(());
            }
            if b.incoming.contains(&w) || b.holding.contains_key(&w) {
                if pending.is_empty() {
                    self.ledger.moved.wait(&mut bufs);
                } else {
                    drop(bufs);
                    self.finish_moves(pending)?;
                    bufs = self.ledger.buffers.lock();
                }
                continue;
            }
            let src = self.current_holder(b).ok_or(ClusterError::Lost(addr))?;
            self.back_on(b, w)?;
            // An older version `w` holds stays a source for recovery if the source dies
            // half-way: received aside, written in once all arrived.
            let staged = Place::of(src).is_worker() && b.stale.contains_key(&w);
            b.begin_move_into(w, staged);
            break (src, b.version, b.size, b.copy_state(src), staged);
        };
        drop(bufs);
        let region = Region { addr, size };
        let t0 = Instant::now();
        let state = if let (Place::Head, Place::Worker(w)) = (Place::of(src), Place::of(w)) {
            let trace = self.meter.trace_now();
            // SAFETY: as for `copy_between` from the head: its staged copy is backed and does
            // not change while the bytes are sent (the send is complete when this returns).
            match unsafe { self.post_submit(region, addr as *const u8, w, || ()) } {
                Ok((tag, ())) => MoveState::Answer { tag, trace, t0 },
                Err(e) => MoveState::Done(Err(e), t0.elapsed()),
            }
        } else {
            if let Some(d) = self.inject.move_delay().filter(|_| Place::of(src).is_worker()) {
                // Test only (`slow:moves=MS`): as if this thread were preempted here.
                std::thread::sleep(d);
            }
            MoveState::Done(self.copy_between(region, src, w, staged), t0.elapsed())
        };
        pending.push(Move { addr, w, src, version, size, before, state });
        Ok(())
    }

    /// [`Movement::start_move`] for each of `addrs`, under one lock for all those `w` holds
    /// already (a region whose inputs are where it runs: the common case), and the full path
    /// only for the others. Each lock taken costs much more than its work when many threads
    /// launch regions on few cores: a thread holding it is preempted, and the others queue.
    pub(super) fn start_moves(&self, addrs: impl Iterator<Item = u64>, w: i32, pending: &mut Vec<Move>) -> Result<()> {
        let mut elsewhere = Vec::new();
        {
            let mut bufs = self.ledger.buffers.lock();
            for addr in addrs {
                match bufs.get_mut(addr) {
                    Some(b) if b.held_by(w) => self.back_on(b, w)?,
                    _ => elsewhere.push(addr),
                }
            }
        }
        elsewhere.into_iter().try_for_each(|addr| self.start_move(addr, w, pending))
    }

    /// Finish the moves `pending` started (all of them, whatever fails): wait for the answers
    /// still due and record each worker that now holds the version. Returns the bytes moved,
    /// or the first failure.
    pub(super) fn finish_moves(&self, pending: &mut Vec<Move>) -> Result<u64> {
        let mut result = Ok(0);
        for m in pending.drain(..) {
            match (self.finish_move(m), &mut result) {
                (Ok(n), Ok(total)) => *total += n,
                (Err(e), Ok(_)) => result = Err(e),
                _ => {}
            }
        }
        result
    }

    fn finish_move(&self, m: Move) -> Result<u64> {
        let Move { addr, w, src, version, size, before, state } = m;
        let (moved, took) = match state {
            MoveState::Done(r, took) => (r, took),
            MoveState::Answer { tag, trace, t0 } => (self.finish_submit(Region { addr, size }, w, tag, trace), t0.elapsed()),
        };
        self.offload.sched.transfer_finished(size, took.as_secs_f64());
        let mut bufs = self.ledger.buffers.lock();
        let outcome = bufs.move_done(addr, w, src, version, before, moved.is_ok());
        self.ledger.moved.notify_all();
        drop(bufs);
        moved?;
        self.meter.log(format_args!("MOVE {addr:#x} {size} bytes {src} -> {w}"));
        if outcome == Moved::Touched {
            self.meter.log(format_args!("TORN {addr:#x} on {w}: copied from {src} while a kernel there changed it, so no version"));
        }
        Ok(size)
    }

    /// Copy `region` from rank `src`'s copy (the head's staged copy if `src` is the head)
    /// into worker `dst`'s, which is backed. `staged` (from a worker): `dst` receives the
    /// bytes aside and writes them in once all arrived (`Event::ExchangeRecv::staged`), so if
    /// `src` dies half-way, `dst`'s copy is as it was and keeps any older version it held.
    pub(super) fn copy_between(&self, region: Region, src: i32, dst: i32, staged: bool) -> Result<()> {
        let (src, dst) = match (Place::of(src), Place::of(dst)) {
            (_, Place::Head) => {
                let bytes = self.fetch(region, src)?;
                // SAFETY: the head backed its copy (the caller's contract); no request uses it
                // while its current version is on the way.
                unsafe { self.offload.write_on_head(region.addr, &bytes) };
                return Ok(());
            }
            // SAFETY: the head's staged copy of this buffer is backed; pages are only
            // discarded (never unmapped) while the buffer lives, and nothing changes them
            // during a send (a request that would waits for the gate or for
            // `before_changing_staged`).
            (Place::Head, Place::Worker(dst)) => return unsafe { self.submit_from(region, region.addr as *const u8, dst) },
            (Place::Worker(src), Place::Worker(dst)) => (src, dst),
        };
        if staged {
            // Test only (`kill:rank=R:during=move`): R dies before it sends a byte.
            Faults::of(*self).inject_due(|t| *t == Trigger::DuringMove(src));
        }
        let t = self.meter.trace_now();
        let tag = self.link.next_tag();
        let send = |rank: i32, event: Event| self.link.comm.send_event(rank, &Envelope { tag, event }, self.link.live.as_ref());
        let posted = send(src, Event::ExchangeSend { region, peer: dst }).and_then(|()| send(dst, Event::ExchangeRecv { region, peer: src, staged })).map_err(ClusterError::from);
        let dst_asked = posted.is_ok();
        let sent = posted.and_then(|()| self.link.expect_ok(src, tag));
        // Staged, `dst`'s answer says whether it wrote its copy: awaited after a source that
        // died too, if `dst` was asked (it answers `PeerDead` once its detector knows; bounded
        // by it). A source that answered an error sent zeros instead of its copy (the worker's
        // `ExchangeSend`): `dst` took them and answers.
        let src_died = matches!(&sent, Err(ClusterError::Comm(event_system::comm::CommError::PeerDead(r)) | ClusterError::PeerDead(r)) if *r == src);
        let src_refused = matches!(&sent, Err(ClusterError::Worker { rank, .. }) if *rank == src);
        let received = match &sent {
            Ok(()) => Some(self.link.expect_ok(dst, tag)),
            Err(_) if dst_asked && (src_refused || staged && src_died) => Some(self.link.expect_ok(dst, tag)),
            Err(_) => None,
        };
        // `dst` was never asked, or answered that it wrote nothing (its source died, or it
        // could not take them).
        let untouched = staged && (!dst_asked || matches!(&received, Some(Err(ClusterError::PeerDead(_) | ClusterError::Worker { .. }))));
        let exchanged = sent.and_then(|()| received.unwrap_or(Ok(())));
        if untouched {
            if self.meter.verbose() {
                let kept = self.ledger.buffers.lock().get(region.addr).and_then(|b| Some((b.id, *b.stale.get(&dst)?)));
                if let Some((id, v)) = kept {
                    self.meter.log(format_args!("KEPT buffer {id} version {v} on {dst} ({:#x}): its source {src} failed before every byte of a newer one arrived", region.addr));
                }
            }
        } else if exchanged.is_err() {
            // `dst` may have received part of it (its source died half-way): its copy holds
            // no known version any more, whatever it held before.
            self.ledger.buffers.lock().drop_copy(region.addr, dst);
        }
        exchanged?;
        self.meter.stats.add_exchanged(region.size);
        self.meter.trace(t, Cat::Exchange, dst, "exchange", || vec![("bytes", json!(region.size)), ("from", json!(src)), ("addr", json!(region.addr))]);
        Ok(())
    }

    /// Send `region.size` bytes at `bytes` into worker `dst`'s (backed) copy of `region`.
    ///
    /// # Safety
    /// `bytes..bytes+region.size` must be readable and unchanged until this returns, and stay
    /// valid for the rest of the process if it fails with a dead peer (see `Comm::send_bytes`).
    pub(super) unsafe fn submit_from(&self, region: Region, bytes: *const u8, dst: i32) -> Result<()> {
        let Place::Worker(dst) = Place::of(dst) else {
            // SAFETY: forwarded contract (readable bytes; the head's copy is backed).
            unsafe { self.offload.write_on_head(region.addr, std::slice::from_raw_parts(bytes, region.size as usize)) };
            return Ok(());
        };
        let t = self.meter.trace_now();
        // SAFETY: forwarded contract.
        let (tag, ()) = unsafe { self.post_submit(region, bytes, dst, || ())? };
        self.finish_submit(region, dst, tag, t)
    }

    /// Send worker `dst` a SUBMIT of `region` with its bytes (inside the event if they are
    /// few, else raw behind it), running `during` meanwhile (work that only reads the same
    /// bytes costs no extra time); returns the tag its answer will come on (see
    /// [`Movement::finish_submit`]) and what `during` returned.
    ///
    /// # Safety
    /// As for [`Movement::submit_from`] (the bytes are sent when this returns); `during` must
    /// not write them.
    pub(super) unsafe fn post_submit<R>(&self, region: Region, bytes: *const u8, dst: i32, during: impl FnOnce() -> R) -> Result<(i32, R)> {
        if region.size <= MAX_INLINE_DATA {
            // SAFETY: forwarded contract (readable bytes).
            let inline = unsafe { std::slice::from_raw_parts(bytes, region.size as usize) }.to_vec();
            let tag = self.link.post(dst, Event::Submit { region, bytes: inline })?;
            return Ok((tag, during()));
        }
        let tag = self.link.post(dst, Event::Submit { region, bytes: Vec::new() })?;
        // SAFETY: forwarded contract.
        let r = unsafe { self.link.comm.send_bytes_during(dst, tag, bytes, region.size as usize, self.link.live.as_ref(), during)? };
        Ok((tag, r))
    }

    /// Wait for the answer to a SUBMIT [`Movement::post_submit`] sent (`since`: the start of
    /// its trace span).
    fn finish_submit(&self, region: Region, dst: i32, tag: i32, since: Option<f64>) -> Result<()> {
        self.link.expect_ok(dst, tag)?;
        self.meter.stats.add_submitted(region.size);
        self.meter.trace(since, Cat::Submit, dst, "submit", || vec![("bytes", json!(region.size)), ("addr", json!(region.addr))]);
        Ok(())
    }

    /// Copy rank `from`'s copy of `region` (the head's own if HEAD) into a new vector.
    pub(super) fn fetch(&self, region: Region, from: i32) -> Result<Vec<u8>> {
        let Place::Worker(from) = Place::of(from) else {
            // SAFETY: the head's copy is backed (the caller's contract) and nothing changes
            // it meanwhile.
            return Ok(unsafe { std::slice::from_raw_parts(region.addr as *const u8, region.size as usize) }.to_vec());
        };
        let t = self.meter.trace_now();
        let mut bytes = vec![0u8; region.size as usize];
        // SAFETY: `bytes` has `region.size` writable bytes, leaked if the peer died (MPI may
        // still write them).
        let res = unsafe { self.retrieve_into(region, from, bytes.as_mut_ptr()) };
        if let Err(e) = res {
            std::mem::forget(bytes);
            return Err(e);
        }
        self.note_retrieved(region, from, t);
        Ok(bytes)
    }

    /// Copy worker `from`'s copies of `regions` into new vectors, all requests sent before
    /// the first answer is awaited (one round trip for all: the worker answers RETRIEVEs in
    /// the order they come). For background work: the waits for the answers sleep rather
    /// than spin.
    pub(super) fn fetch_many(&self, regions: &[Region], from: i32) -> Result<Vec<Vec<u8>>> {
        let t = self.meter.trace_now();
        let mut tags = Vec::with_capacity(regions.len());
        for r in regions {
            tags.push(self.link.post(from, Event::Retrieve(*r))?);
        }
        let mut out = Vec::with_capacity(regions.len());
        for (r, tag) in regions.iter().zip(tags) {
            let mut bytes = vec![0u8; r.size as usize];
            // SAFETY: `bytes` has `r.size` writable bytes, leaked if the peer died (MPI may
            // still write them).
            let res = unsafe { self.answer_into(*r, from, tag, bytes.as_mut_ptr(), true) };
            if let Err(e) = res {
                std::mem::forget(bytes);
                return Err(e);
            }
            self.note_retrieved(*r, from, t);
            out.push(bytes);
        }
        Ok(out)
    }

    /// Count a retrieve of `region` from `from` that started at `since` (a trace time).
    pub(super) fn note_retrieved(&self, region: Region, from: i32, since: Option<f64>) {
        self.meter.stats.add_retrieved(region.size);
        self.meter.trace(since, Cat::Retrieve, from, "retrieve", || vec![("bytes", json!(region.size)), ("addr", json!(region.addr))]);
    }

    /// Copy worker `from`'s copy of `region` into `dst`: the bytes come inside the answer if
    /// they are few, else raw behind it.
    ///
    /// # Safety
    /// `dst..dst+region.size` must be writable and not otherwise used until this returns; if
    /// it fails with a dead peer, MPI may still write there later (keep it valid: leak a
    /// private buffer).
    pub(super) unsafe fn retrieve_into(&self, region: Region, from: i32, dst: *mut u8) -> Result<()> {
        let tag = self.link.post(from, Event::Retrieve(region))?;
        // SAFETY: forwarded contract.
        unsafe { self.answer_into(region, from, tag, dst, false) }
    }

    /// Receive the answer to the RETRIEVE of `region` sent to `from` on `tag` into `dst`
    /// (`patient`: background work, whose wait for the answer sleeps rather than spins).
    ///
    /// # Safety
    /// As for [`Movement::retrieve_into`].
    unsafe fn answer_into(&self, region: Region, from: i32, tag: i32, dst: *mut u8, patient: bool) -> Result<()> {
        let size = region.size as usize;
        let live = self.link.live.as_ref();
        let reply = if patient { self.link.comm.recv_msg_patient::<Reply>(from, tag, live) } else { self.link.comm.recv_msg::<Reply>(from, tag, live) };
        match reply? {
            // SAFETY: the caller guarantees `size` writable bytes at `dst`.
            Reply::Data(bytes) if bytes.len() == size && region.size <= MAX_INLINE_DATA => unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst, size)
            },
            Reply::Ok if region.size > MAX_INLINE_DATA => {
                // SAFETY: forwarded contract.
                unsafe { self.link.comm.recv_bytes(from, tag, dst, size, self.link.live.as_ref())? }
            }
            other => return Err(link::unexpected(from, other)),
        }
        Ok(())
    }
}

/// A move [`Movement::start_move`] started and [`Movement::finish_moves`] has yet to finish.
pub(super) struct Move {
    addr: u64,
    w: i32,
    src: i32,
    /// The version it moves.
    version: u64,
    size: u64,
    /// The source copy's state when it started.
    before: CopyState,
    state: MoveState,
}

/// Where a move stands.
enum MoveState {
    /// A SUBMIT from the head whose answer is due on `tag` (`trace`: its span's start).
    Answer { tag: i32, trace: Option<f64>, t0: Instant },
    /// Done (and how long it took).
    Done(Result<()>, std::time::Duration),
}
