//! Kernel launches: placement, data movement, EXECUTE, and the record of what the kernel wrote.
use super::*;

impl Cluster {
    /// Run the kernel `entry` (a token from `load_binary`) with argument values `args`;
    /// `begins[i]` is the device begin of argument i's mapped section, `hosts[i]` its host
    /// pointer (0 for by-value arguments): see [`Buffers::by_translation`] for why both.
    /// `mapped_from[i]` says argument i was mapped `from` (its buffer is surely written).
    pub(crate) fn launch(&self, entry: usize, args: &[u64], begins: &[u64], hosts: &[u64], mapped_from: &[bool]) -> Result<()> {
        self.resilient(|| self.launch_once(entry, args, begins, hosts, mapped_from))
    }

    fn launch_once(&self, entry: usize, args: &[u64], begins: &[u64], hosts: &[u64], mapped_from: &[bool]) -> Result<()> {
        let _gate = self.enter()?;
        let t0 = self.start.elapsed().as_secs_f64();
        let kernel = self.kernels.read().get(&entry).cloned().ok_or(ClusterError::UnknownKernel(entry))?;
        // What can it reach, where is it, and where must it run? Placement and the marking of
        // the buffers it writes happen under one lock, so two concurrent writers of a buffer
        // always see each other.
        let (w, reach, assume_written) = {
            let mut bufs = self.buffers.lock();
            loop {
                let translated: Vec<(u64, u64)> =
                    begins.iter().zip(hosts).filter(|(_, &h)| h != 0).map(|(&d, &h)| (d, h)).collect();
                let arg_buffers = |i: usize| -> Vec<u64> {
                    let mut v: Vec<u64> = bufs.near(begins[i]).collect();
                    if hosts[i] != 0 {
                        v.extend_from_slice(bufs.by_translation(begins[i], hosts[i]));
                    }
                    v
                };
                let written: BTreeSet<u64> =
                    (0..begins.len()).filter(|&i| mapped_from[i]).flat_map(arg_buffers).collect();
                let reach: Vec<(u64, u64, u64, u64)> = bufs
                    .reachable(&args.iter().chain(begins).copied().collect::<Vec<u64>>(), &translated, kernel.image)
                    .into_iter()
                    .map(|a| {
                        let b = bufs.get(a).expect("reachable buffers exist");
                        (b.addr, b.size, b.id, b.version)
                    })
                    .collect();
                let pins: BTreeSet<i32> =
                    reach.iter().filter_map(|(a, ..)| bufs.get(*a).and_then(|b| b.writing).map(|(w, _)| w)).collect();
                if pins.len() > 1 {
                    // It reaches buffers being written on two workers: wait for one to finish.
                    self.moved.wait(&mut bufs);
                    continue;
                }
                let candidates: Vec<Candidate> = self
                    .targets()
                    .filter(|w| pins.is_empty() || pins.contains(w))
                    .map(|w| Candidate {
                        rank: w,
                        missing_bytes: reach
                            .iter()
                            .filter(|(a, ..)| !bufs.get(*a).is_some_and(|b| b.held_by(w)))
                            .map(|(_, s, ..)| *s)
                            .sum(),
                        in_flight: self.in_flight[w as usize].load(Ordering::Relaxed),
                    })
                    .collect();
                let w = self.sched.choose(&candidates).ok_or(ClusterError::NoWorker)?;
                for a in &written {
                    if let Some(b) = bufs.get_mut(*a) {
                        b.writing = Some((w, b.writing.map_or(0, |(_, n)| n) + 1));
                    }
                }
                let assume_written: Vec<bool> = reach.iter().map(|(a, ..)| written.contains(a)).collect();
                break (w, reach, assume_written);
            }
        };
        self.in_flight[w as usize].fetch_add(1, Ordering::Relaxed);
        let result = self.run_on(w, &kernel, args, &reach, assume_written.clone());
        self.in_flight[w as usize].fetch_sub(1, Ordering::Relaxed);
        let release_writes = |bufs: &mut Buffers| {
            for ((a, ..), aw) in reach.iter().zip(&assume_written) {
                if let Some(b) = bufs.get_mut(*a).filter(|_| *aw) {
                    b.writing = match b.writing {
                        Some((x, n)) if n > 1 => Some((x, n - 1)),
                        _ => None,
                    };
                }
            }
        };
        if result.is_err() {
            release_writes(&mut self.buffers.lock());
            self.moved.notify_all();
        }
        let (changed, pointers, kernel_s, patches) = result?;
        let mut patches: HashMap<usize, Vec<(u64, Vec<u8>)>> = patches.into_iter().map(|(i, p)| (i as usize, p)).collect();
        // Image data this kernel changed while another worker changed it too: its changes,
        // to apply on top of the other's (below, once the lock is released).
        let mut merges: Vec<(u64, Patch)> = Vec::new();
        // Record the new versions.
        let mut reads = Vec::with_capacity(reach.len());
        let mut writes = Vec::new();
        let mut conflict = None;
        {
            let mut bufs = self.buffers.lock();
            release_writes(&mut bufs);
            let mut found = pointers.into_iter();
            for (i, ((addr, _, id, version), c)) in reach.iter().zip(changed).enumerate() {
                reads.push(Access { buffer: *id, version: *version });
                if !c {
                    continue;
                }
                let f = found.next().unwrap_or(FoundPointers::Many);
                if let Some(b) = bufs.get_mut(*addr) {
                    if b.version != *version && !b.holders.contains(&w) && b.global_of.is_some() {
                        if let Some(p) = patches.remove(&i) {
                            // The globals and statics of one image are one buffer: regions
                            // writing different ones at the same time on different workers
                            // change different bytes. Patch this kernel's bytes into the
                            // copies holding the other change (as a partial submit would).
                            b.points_to.add(match f {
                                FoundPointers::Many => PointsTo::All,
                                FoundPointers::Some(v) => PointsTo::Some(v.into_iter().collect()),
                            });
                            merges.push((b.addr, p));
                            continue;
                        }
                    }
                    if b.version != *version && !b.holders.contains(&w) {
                        // Another worker changed it meanwhile, in its own copy: two copies with
                        // different changes cannot be merged. Say so rather than lose either.
                        conflict = Some((b.addr, b.size, b.holders.clone(), b.global_of));
                    }
                    b.points_to = match f {
                        FoundPointers::Many => PointsTo::All,
                        FoundPointers::Some(v) => PointsTo::Some(v.into_iter().collect()),
                    };
                    let (addr, id, span, staged) = (b.addr, b.id, b.span, b.backed.contains(&HEAD));
                    let v = bufs.new_version(addr, [w].into()).expect("live buffer");
                    if staged && bufs.get(addr).is_some_and(|b| b.version_on(HEAD).is_none()) {
                        // The head keeps no version of it (over the retention budget): give
                        // the staged copy's memory back (it stays mapped).
                        self.before_changing_staged(addr);
                        let _ = self.heap.discard(addr, span);
                    }
                    writes.push(Access { buffer: id, version: v });
                }
            }
        }
        self.moved.notify_all();
        for (addr, runs) in merges {
            for (off, bytes) in runs {
                // SAFETY: `bytes` is a readable local vector; the gate is held (`_gate`).
                unsafe { self.submit_inner(addr + off, bytes.as_ptr(), bytes.len() as u64)? };
            }
            if let Some(b) = self.buffers.lock().get(addr) {
                writes.push(Access { buffer: b.id, version: b.version });
            }
            self.log(format_args!("MERGE image data {addr:#x}: changes of {} on {w} applied to the current copies", kernel.name));
        }
        if let Some((addr, size, others, image)) = conflict {
            // An image's globals and statics are one buffer: regions writing different ones
            // also conflict when they run at the same time on different workers.
            let (what, advice) = match image {
                Some(i) => (
                    format!("the device globals and statics of device image {i} (.data and .bss)"),
                    "regions writing device globals or statics, even different ones, must not overlap in time: order them with depend or taskwait",
                ),
                None => (
                    "the device buffer".to_string(),
                    "map it with map(from:) or map(tofrom:) in the regions that write it (they then share one worker) or order them with depend",
                ),
            };
            return Err(ClusterError::Conflict { what, advice, addr, size, worker: w, others: others.into_iter().collect() });
        }
        self.sched.task_finished(kernel_s);
        kernel.last_ns.store((kernel_s * 1e9) as u64, Ordering::Relaxed);
        self.stats.add_task(w);
        let t1 = self.start.elapsed().as_secs_f64();
        let done = self.graph.lock().record(TaskRecord {
            id: 0,
            kernel: kernel.name.clone(),
            image: kernel.image,
            index: kernel.index,
            args: args.to_vec(),
            worker: w,
            reads,
            writes,
            start_s: t0,
            end_s: t1,
            kernel_s,
            op: task_graph::Op::Kernel,
        });
        self.maybe_prune();
        self.inject_due(|t| matches!(t, crate::inject::Trigger::AfterTasks(n) if *n <= done + 1));
        self.log(format_args!("EXECUTE {} on {w}: {:.3} ms in kernel, {:.3} ms total", kernel.name, kernel_s * 1e3, (t1 - t0) * 1e3));
        Ok(())
    }

    pub(super) fn run_on(
        &self,
        w: i32,
        kernel: &Kernel,
        args: &[u64],
        reach: &[(u64, u64, u64, u64)],
        assume_written: Vec<bool>,
    ) -> Result<Executed> {
        for (addr, ..) in reach {
            self.ensure_present(*addr, w)?;
        }
        let regions: Vec<Region> = reach.iter().map(|&(addr, size, ..)| Region { addr, size }).collect();
        if w == HEAD {
            return self.run_here(kernel.image, kernel.index, args, &regions, &assume_written, false);
        }
        let n = regions.len();
        let short = kernel.last_ns.load(Ordering::Relaxed) < SHORT_KERNEL_NS;
        let tag = self.post(
            w,
            Event::Execute { image: kernel.image, kernel: kernel.index, args: args.to_vec(), regions, assume_written, short },
        )?;
        match self.comm.recv_msg::<Reply>(w, tag, self.live.as_ref())? {
            Reply::Executed { changed, pointers, seconds, patches, output } if changed.len() == n => {
                if !output.is_empty() {
                    // What the region printed, after what the program printed before it.
                    // SAFETY: flushing all C streams is always allowed.
                    unsafe { libc::fflush(std::ptr::null_mut()) };
                    event_system::write_all(1, &output);
                }
                Ok((changed, pointers, seconds, patches))
            }
            Reply::Error(msg) => Err(ClusterError::Worker { rank: w, msg }),
            Reply::PeerDead(peer) => Err(ClusterError::PeerDead(peer)),
            other => Err(ClusterError::Worker { rank: w, msg: format!("bad reply to EXECUTE: {other:?}") }),
        }
    }
}
