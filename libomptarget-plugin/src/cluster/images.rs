//! Device images ([`Images`]): every worker loads each image at the same address of the
//! symmetric heap.
use super::durability::Durability;
use super::failures::Failures;
use super::head_copies::HeadCopies;
use super::ledger::Ledger;
use super::link::Link;
use super::meter::Meter;
use super::movement::Movement;
use super::offload::Offload;
use super::offload::{ImageSource, ImageTables, Kernel};
use super::on_head::OnHead;
use super::requests::Requests;
use super::tolerance::Tolerance;
use super::{ClusterError, Result, Stopped};
use crate::config::Config;
use crate::data::HEAD;
use crate::inject::Injector;
use event_system::protocol::{Event, Region};
use parking_lot::Mutex;
use std::sync::Arc;

view! {
    /// Loading device images: in a request's frame, on every worker and (recovery on) kept on
    /// the head, where a worker's death is noticed as a failure: it borrows the whole cluster.
    pub(super) struct Images { link: Link, ledger: Ledger, offload: Offload, tolerance: Tolerance, durability: Durability, meter: Meter, cfg: Config, stopped: Stopped }
    also { tolerance.inject: Injector }
}

impl<'a> Images<'a> {
    /// Send a device image to every worker and build libomptarget's entry table.
    ///
    /// The image gets a range of the symmetric heap, and every worker loads it there, so its
    /// code and data have the same addresses everywhere: libomptarget gets the real device
    /// address of each global (`base + st_value`), and the image's writable data (`.data`,
    /// `.bss`, ..., everything past RELRO) becomes one device buffer, held by every worker
    /// after loading and moved like any buffer once a kernel changes it.
    ///
    /// `entries` are the image's offload entries (names valid for the program's lifetime).
    pub(super) fn load_binary(&self, image: &[u8], entries: &[crate::ctypes::OffloadEntry]) -> Result<*mut crate::ctypes::TargetTable> {
        let _gate = Requests::of(*self).enter()?;
        let mut images = self.offload.images.lock();
        let idx = images.len() as u32;
        if idx >= event_system::protocol::MAX_IMAGES {
            return Err(ClusterError::BadImage(format!("more than {} device images registered", event_system::protocol::MAX_IMAGES)));
        }
        let elf = event_system::elf::ElfImage::parse(image).map_err(|e| ClusterError::BadImage(e.to_string()))?;
        let data = elf.writable_data().map_err(|e| ClusterError::BadImage(e.to_string()))?;
        let extent = elf.extent();
        let tokens: Box<[u8]> = vec![0u8; entries.len().max(1)].into_boxed_slice();
        let mut table_entries: Box<[crate::ctypes::OffloadEntry]> = entries.to_vec().into_boxed_slice();
        let mut kernels = Vec::new();
        let mut globals = 0;
        let mut new_kernels = Vec::new();
        // Check every entry before reserving anything.
        for e in table_entries.iter() {
            let name = e.name_str().ok_or_else(|| ClusterError::BadImage("entry without a name".into()))?;
            if e.size != 0 && elf.symbol(&name).is_none() {
                return Err(ClusterError::BadImage(format!("global {name} is not in the image's dynamic symbol table")));
            }
        }
        let base = self.ledger.buffers.lock().reserve_image(extent)?;
        let image_key = crate::journal::key::of_image(image);
        for (i, e) in table_entries.iter_mut().enumerate() {
            let name = e.name_str().expect("checked above");
            if e.size == 0 {
                let token = tokens.as_ptr() as usize + i;
                new_kernels.push((token, Arc::new(Kernel { image: idx, index: kernels.len() as u32, name: name.as_str().into(), image_key, last_ns: u64::MAX.into(), writes: Mutex::new(None), learning: 0.into(), send_back: 0.into(), allocates: false.into(), arena_peak: 0.into(), told_unvotable: false.into() })));
                kernels.push(name);
                e.addr = token as *mut libc::c_void;
            } else {
                e.addr = (base + elf.symbol(&name).expect("checked above")) as *mut libc::c_void;
                globals += 1;
            }
        }
        let workers: Vec<i32> = self.link.workers().collect();
        let mut tags = Vec::new();
        for &w in &workers {
            let sent = self
                .link.post(w, Event::LoadBinary { image: idx, size: image.len() as u64, base, extent, kernels: kernels.clone() })
                .and_then(|tag| {
                    // SAFETY: `image` is the device image libomptarget keeps alive for the program.
                    unsafe { self.link.comm.send_bytes(w, tag, image.as_ptr(), image.len(), self.link.live.as_ref())? };
                    Ok(tag)
                });
            match sent {
                Ok(tag) => tags.push((w, tag)),
                Err(e) => self.unless_dead(e)?,
            }
        }
        let mut loaded = Vec::new();
        for (w, tag) in tags {
            match self.link.expect_ok(w, tag) {
                Ok(()) => loaded.push(w),
                Err(e) => self.unless_dead(e)?,
            }
        }
        let source = ImageSource {
            bytes: self.tolerance.recovery().then(|| image.into()),
            base,
            extent,
            kernels: kernels.clone(),
            data: data.map(|(start, _)| base + start),
        };
        if let Some(dev) = self.offload.local() {
            // The head runs the regions itself: it loads the image here too.
            if let Some((start, end)) = data {
                // Loading gives it its initial data (version 1) here.
                let mut bufs = self.ledger.buffers.lock();
                let b = bufs.add_image_data(base + start, end - start, idx);
                b.version = 1;
                b.key = crate::journal::key::image(image_key, b.addr, b.size);
            }
            OnHead::of(*self).load_here(dev, idx, &source)?;
        } else if loaded.is_empty() {
            return Err(ClusterError::NoWorker);
        } else if let Some((start, end)) = data {
            // Every worker now holds the loaded image's initial data (after its constructors,
            // which are deterministic: the same on every worker).
            let addr = base + start;
            let mut bufs = self.ledger.buffers.lock();
            let b = bufs.add_image_data(addr, end - start, idx);
            b.version = 1;
            b.key = crate::journal::key::image(image_key, b.addr, b.size);
            b.holders = loaded.iter().copied().collect();
            b.backed = b.holders.clone();
            if self.ledger.retains() {
                // The head keeps the initial data too: no task produced it, so recovery can
                // only take it from a copy.
                HeadCopies::of(*self).stage_on_head(&mut bufs, addr)?;
                drop(bufs);
                self.keep_initial_data(addr, end - start, &loaded)?;
            }
        }
        self.meter.log(format_args!(
            "LOAD_BINARY image {idx}: {} bytes at {base:#x}+{extent:#x}, {} kernels, {globals} globals, data {data:x?}",
            image.len(),
            kernels.len()
        ));
        self.offload.kernels.write().extend(new_kernels);
        let begin = table_entries.as_mut_ptr();
        // SAFETY: one past the end of the same boxed slice.
        let end = unsafe { begin.add(table_entries.len()) };
        let table = Box::new(crate::ctypes::TargetTable { entries_begin: begin, entries_end: end });
        images.push(ImageTables { _entries: table_entries, table, _tokens: tokens, source });
        let t = images.last_mut().expect("just pushed");
        Ok(&mut *t.table as *mut _)
    }

    /// Copy an image's initial data from one of the workers that loaded it into the head's
    /// copy, which then holds version 1 too.
    fn keep_initial_data(&self, addr: u64, size: u64, loaded: &[i32]) -> Result<()> {
        for &w in loaded {
            // SAFETY: the head backed this range (`stage_on_head`) and nothing else uses it:
            // the image is not visible to the program before this call returns.
            let got = unsafe { Movement::of(*self).retrieve_into(Region { addr, size }, w, addr as *mut u8) };
            match got {
                Ok(()) => {
                    self.ledger.buffers.lock().add_holder(addr, HEAD);
                    return Ok(());
                }
                Err(e) => self.unless_dead(e)?,
            }
        }
        Ok(())
    }

    /// `Ok` if `e` says a rank died while recovery is on (the rank is fenced and the handler
    /// told; the caller goes on without it), else `Err(e)`.
    pub(super) fn unless_dead(&self, e: ClusterError) -> Result<()> {
        match self.tolerance.recovery().then(|| Failures::of(*self).dead_peer(&e)).flatten() {
            Some(_) => Ok(()),
            None => Err(e),
        }
    }
}
