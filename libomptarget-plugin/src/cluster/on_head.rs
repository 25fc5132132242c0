//! When every worker has died, the head runs the target regions itself ([`OnHead`]): the
//! device images are x86-64 code, so the head loads them with the loader the workers use, at
//! the same addresses of the symmetric heap, and runs kernels on its own copies of the buffers
//! (which it already keeps at their device addresses; the EXECUTE client runs them there,
//! `execute.rs`). From then on the head is the only place regions run: every buffer's current
//! version is on the head, and data moves no more.
use super::durability::Durability;
use super::ledger::Ledger;
use super::meter::Meter;
use super::offload::ImageSource;
use super::offload::Offload;
use super::{ClusterError, Result};
use crate::data::HEAD;
use event_system::LocalDevice;

view! {
    /// Turning the head into the device: borrows the offload (the images, the head's own
    /// device), the ledger (an image's data buffer), the durability (a checkpoint saving the
    /// head's copy) and the meter (the clock, the log).
    pub(super) struct OnHead { ledger: Ledger, offload: Offload, durability: Durability, meter: Meter }
}

impl<'a> OnHead<'a> {
    /// Start running target regions on the head (once; later calls do nothing). Loads every
    /// image here; the head's copy of an image's data (if it keeps one) is saved first and
    /// written back after, so what the program's regions changed in it is kept.
    pub(super) fn continue_on_head(&self) -> Result<()> {
        if self.offload.local().is_some() {
            return Ok(());
        }
        let dev = LocalDevice::new(&self.offload.heap);
        let images = self.offload.images.lock();
        for (idx, img) in images.iter().enumerate() {
            self.load_here(&dev, idx as u32, &img.source)?;
        }
        drop(images);
        let at = self.meter.start.elapsed().as_secs_f64();
        // SAFETY: flushing all C streams is always allowed.
        unsafe { libc::fflush(std::ptr::null_mut()) };
        eprintln!("ompcluster: no worker is left; the head runs the remaining target regions itself (from {at:.3} s)");
        self.offload.set_local(dev, at);
        Ok(())
    }

    /// Load image `idx` into the head's device `dev`.
    pub(super) fn load_here(&self, dev: &LocalDevice, idx: u32, src: &ImageSource) -> Result<()> {
        let bytes = src.bytes.as_deref().ok_or_else(|| ClusterError::BadImage(format!("image {idx} was not kept for the head")))?;
        let saved = src.data.and_then(|addr| {
            let bufs = self.ledger.buffers.lock();
            let b = bufs.get(addr)?;
            (b.staged() && b.version_on(HEAD).is_some()).then(|| {
                self.durability.before_changing_staged(addr);
                // SAFETY: the head backed this copy; nothing changes it meanwhile (recovery
                // holds the gate, and the buffer lock is held).
                unsafe { std::slice::from_raw_parts(addr as *const u8, b.size as usize) }.to_vec()
            })
        });
        dev.load(&self.offload.heap, idx, bytes, src.base, src.extent, &src.kernels).map_err(ClusterError::BadImage)?;
        if let Some(addr) = src.data {
            let mut bufs = self.ledger.buffers.lock();
            let b = bufs.get_mut(addr).ok_or(ClusterError::UnknownAddress(addr))?;
            b.backed.insert(HEAD);
            let id = b.id;
            match saved {
                // SAFETY: the image's data, just loaded here; no kernel runs yet.
                Some(bytes) => unsafe { dev.write(addr, &bytes) },
                // Loading gave it its initial data: version 1.
                None => bufs.install(id, HEAD, 1),
            }
        }
        self.meter.log(format_args!("LOAD_BINARY image {idx} on the head"));
        Ok(())
    }
}
