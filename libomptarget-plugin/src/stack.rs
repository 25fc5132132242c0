//! A warning before a host thread's stack runs out, one target region at a time.
//!
//! clang 16 places each target region's kernel-argument block (112 bytes here) on the stack
//! of the function that contains the region, and releases it only when that function
//! returns. A loop of synchronous regions in one function therefore loses 112 bytes of stack
//! per region: with the usual 8 MiB the program dies of SIGSEGV after about 75,000 regions,
//! under the stock plugin as under ours (measured: README, "Long loops of regions in one
//! function"). A long iterative
//! run is what this runtime is for, so each thread's stack pointer is sampled at every launch:
//! when it has gone down by the same step for [`RUN`] launches in a row, the runtime says so
//! once, with how many regions are left and what to change. That thread also gets an
//! alternate signal stack then: a handler for the SIGSEGV of a stack overflow needs a stack to
//! run on, and the head's (`crash_status.rs`) is what tells the launcher the program died of
//! SIGSEGV, not of something unknown.

use std::cell::Cell;

/// Launches in a row that must each take the same step down before the warning.
const RUN: u32 = 1000;

/// A step larger than this is a call path, not the leak.
const MAX_STEP: usize = 64 << 10;

/// One thread's view of its stack across launches.
#[derive(Debug, Clone, Copy, Default)]
struct Watch {
    last: usize,
    step: usize,
    run: u32,
    warned: bool,
}

impl Watch {
    /// Note a launch at stack address `sp`; the step per launch, once it is time to warn.
    fn see(&mut self, sp: usize) -> Option<usize> {
        if self.warned {
            return None;
        }
        let step = self.last.saturating_sub(sp);
        if step > 0 && step <= MAX_STEP && step == self.step {
            self.run += 1;
        } else {
            self.step = step;
            self.run = 0;
        }
        self.last = sp;
        if self.run >= RUN {
            self.warned = true;
            return Some(self.step);
        }
        None
    }
}

thread_local! {
    static WATCH: Cell<Watch> = const { Cell::new(Watch { last: 0, step: 0, run: 0, warned: false }) };
}

/// Call at every launch of a target region, from the thread that launches it.
#[inline(never)]
pub(crate) fn note_launch() {
    let marker = 0u8;
    let sp = std::hint::black_box(&marker) as *const u8 as usize;
    let Some(step) = WATCH.with(|w| {
        let mut s = w.get();
        let warn = s.see(sp);
        w.set(s);
        warn
    }) else {
        return;
    };
    give_alternate_signal_stack();
    let left = match stack_low() {
        Some(low) if sp > low => format!(" It has {} KiB left: about {} more regions.", (sp - low) >> 10, (sp - low) / step),
        _ => String::new(),
    };
    eprintln!(
        "ompcluster: this thread's stack has grown by {step} bytes with each of its last {RUN} target regions: \
         clang 16 keeps each region's arguments on the stack until the function containing the region returns, \
         so a loop of regions inside one function uses the stack up and the program then dies of SIGSEGV, \
         with any plugin.{left} Move the loop's body with the region into a function of its own, \
         or raise the stack limit (`ulimit -s` for the main thread, OMP_STACKSIZE for OpenMP threads); \
         see the README, \"Long loops of regions in one function\"."
    );
}

/// Bytes of the alternate signal stack (the crash handlers need little; Open MPI's, which
/// they hand on to, prints a backtrace).
const ALT_STACK: usize = 256 << 10;

/// Give this thread an alternate signal stack, unless it has one. Kept for the rest of the
/// process (a thread is warned once).
fn give_alternate_signal_stack() {
    // SAFETY: sigaltstack with a null new stack only reads the current one into a local.
    let mut old: libc::stack_t = unsafe { std::mem::zeroed() };
    if unsafe { libc::sigaltstack(std::ptr::null(), &mut old) } != 0 || old.ss_flags & libc::SS_DISABLE == 0 {
        return;
    }
    // SAFETY: a fresh private anonymous mapping, never unmapped: the kernel may switch to it
    // at any later signal of this thread.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), ALT_STACK, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
    if p == libc::MAP_FAILED {
        return;
    }
    let st = libc::stack_t { ss_sp: p, ss_flags: 0, ss_size: ALT_STACK };
    // SAFETY: `st` describes the mapping above, which stays valid for the process's life.
    unsafe { libc::sigaltstack(&st, std::ptr::null_mut()) };
}

/// The lowest address this thread's stack may grow to.
fn stack_low() -> Option<usize> {
    // SAFETY: `attr` is initialised by pthread_getattr_np before it is read, and destroyed
    // once; the out-pointers are to locals.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut addr: *mut libc::c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let ok = libc::pthread_attr_getstack(&attr, &mut addr, &mut size) == 0;
        libc::pthread_attr_destroy(&mut attr);
        ok.then_some(addr as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steady_descent_is_reported_once() {
        let mut w = Watch::default();
        let mut sp = 1 << 30;
        let mut warned = Vec::new();
        for i in 0..3 * RUN as usize {
            if let Some(step) = w.see(sp) {
                warned.push((i, step));
            }
            sp -= 112;
        }
        // The first launch sets the reference, the second the step, then RUN more.
        assert_eq!(warned, vec![(RUN as usize + 1, 112)]);
    }

    #[test]
    fn the_same_depth_or_a_changing_one_is_not() {
        let mut w = Watch::default();
        for i in 0..10 * RUN as usize {
            // Launches from one loop that frees its stack: the same address each time.
            assert_eq!(w.see(1 << 30), None, "{i}");
        }
        let mut w = Watch::default();
        let mut sp = 1usize << 30;
        for i in 0..10 * RUN as usize {
            // A recursion that launches at every level, with frames of alternating sizes.
            sp -= if i % 2 == 0 { 112 } else { 208 };
            assert_eq!(w.see(sp), None, "{i}");
        }
    }

    #[test]
    fn this_threads_stack_is_found() {
        let marker = 0u8;
        let sp = &marker as *const u8 as usize;
        let low = stack_low().expect("glibc reports the stack");
        assert!(low < sp && sp - low < 1 << 30, "{low:#x} {sp:#x}");
    }
}
