//! When every worker has died, the head runs the target regions itself: the device images are
//! x86-64 code, so the head loads them with the loader the workers use, at the same addresses
//! of the symmetric heap, and runs kernels on its own copies of the buffers (which it already
//! keeps at their device addresses). From then on the head is the only place regions run:
//! every buffer's current version is on the head, and data moves no more.
use super::{Cluster, ClusterError, Executed, ImageSource, Result};
use crate::data::HEAD;
use event_system::LocalDevice;
use event_system::protocol::Region;

impl Cluster {
    /// Start running target regions on the head (once; later calls do nothing). Loads every
    /// image here; the head's copy of an image's data (if it keeps one) is saved first and
    /// written back after, so what the program's regions changed in it is kept.
    pub(super) fn continue_on_head(&self) -> Result<()> {
        if self.offload.local.get().is_some() {
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
        let _ = self.offload.local.set((dev, at));
        Ok(())
    }

    /// Load image `idx` into the head's device `dev`.
    pub(super) fn load_here(&self, dev: &LocalDevice, idx: u32, src: &ImageSource) -> Result<()> {
        let bytes = src.bytes.as_deref().ok_or_else(|| ClusterError::BadImage(format!("image {idx} was not kept for the head")))?;
        let saved = src.data.and_then(|addr| {
            let bufs = self.ledger.buffers.lock();
            let b = bufs.get(addr)?;
            (b.backed.contains(&HEAD) && b.version_on(HEAD).is_some()).then(|| {
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
        let ran = unsafe { dev.execute(image, index, args, regions, assume_written) }.map_err(|msg| ClusterError::Worker { rank: HEAD, msg })?;
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
        })
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
