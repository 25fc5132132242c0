//! A warning before a host thread's stack runs out, one target region at a time.
//!
//! clang 16 places each target region's kernel-argument block (112-128 bytes) on the stack of
//! the function that contains the region, and releases it only when that function returns. A
//! loop of regions in one function therefore loses that much stack per region: with the
//! usual 8 MiB the program dies of SIGSEGV after 65,000-75,000 regions, under the stock plugin
//! as under ours (README, "Long loops of regions in one function"). A long iterative run is
//! what this runtime is for, so each thread's stack pointer is sampled at every launch. The
//! lowest one of each window of [`WINDOW`] launches is kept: when [`WINDOWS`] windows in a row
//! each end lower than the one before (regions at several depths of one loop leak as well,
//! and their window minima still go down), and the stack would run out within [`HORIZON`]
//! more regions at that rate, the runtime says so once for that thread, with about how many
//! regions are left and what to change. A thread that is warned, or whose stack would last
//! beyond the horizon, is not watched any more.
//!
//! The warned thread also gets an alternate signal stack: a handler for the SIGSEGV of a
//! stack overflow needs a stack to run on, and the head's (`crash_status.rs`) is what tells
//! the launcher that the program died of SIGSEGV, not of something unknown.

use std::cell::Cell;

/// Launches per window.
const WINDOW: u32 = 64;

/// Windows in a row that must each end lower than the one before.
const WINDOWS: u32 = 16;

/// A descent that would use the rest of the stack up only after this many more regions is
/// not worth a word (a raised limit: `ulimit -s unlimited`).
const HORIZON: usize = 10_000_000;

/// What the calls below this function (libomptarget, MPI, the plugin) may still need when the
/// stack runs out: the regions-left count is made this much smaller.
const MARGIN: usize = 64 << 10;

/// One thread's view of its stack across launches.
#[derive(Debug, Clone, Copy)]
struct Watch {
    /// Launches in the current window, and its lowest stack pointer.
    seen: u32,
    low: usize,
    /// The previous window's lowest stack pointer.
    prev: usize,
    /// Windows in a row that ended lower than the one before, and where the first of them
    /// started from.
    run: u32,
    top: usize,
    /// Warned, or found to have room beyond the horizon: not watched any more.
    done: bool,
}

const FRESH: Watch = Watch { seen: 0, low: usize::MAX, prev: usize::MAX, run: 0, top: 0, done: false };

/// What a window's end found: the stack went down by about `per_launch` bytes per launch,
/// steadily, down to `low`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Descent {
    per_launch: usize,
    low: usize,
}

impl Watch {
    /// Note a launch at stack address `sp`.
    fn see(&mut self, sp: usize) -> Option<Descent> {
        if self.done {
            return None;
        }
        self.low = self.low.min(sp);
        self.seen += 1;
        if self.seen < WINDOW {
            return None;
        }
        let low = self.low;
        // (The first window has no predecessor to be lower than.)
        if self.prev != usize::MAX && low < self.prev {
            if self.run == 0 {
                self.top = self.prev;
            }
            self.run += 1;
        } else {
            self.run = 0;
        }
        self.prev = low;
        self.seen = 0;
        self.low = usize::MAX;
        if self.run < WINDOWS {
            return None;
        }
        self.done = true;
        let launches = (WINDOWS * WINDOW) as usize;
        Some(Descent { per_launch: ((self.top - low) / launches).max(1), low })
    }
}

thread_local! {
    static WATCH: Cell<Watch> = const { Cell::new(FRESH) };
}

/// Call at every launch of a target region, from the thread that launches it.
#[inline(never)]
pub(crate) fn note_launch() {
    let marker = 0u8;
    let sp = std::hint::black_box(&marker) as *const u8 as usize;
    let Some(Descent { per_launch, low }) = WATCH.with(|w| {
        let mut s = w.get();
        let found = s.see(sp);
        w.set(s);
        found
    }) else {
        return;
    };
    let Some(bottom) = stack_low() else { return };
    let room = low.saturating_sub(bottom).saturating_sub(MARGIN);
    let left = room / per_launch;
    if left >= HORIZON {
        return;
    }
    give_alternate_signal_stack();
    eprintln!(
        "ompcluster: this thread's stack has gone down by about {per_launch} bytes with each of its last {} target regions, \
         and has about {} KiB left: at most about {left} more regions. clang 16 keeps each region's arguments on the stack \
         until the function containing the region returns, so a loop of regions inside one function uses the stack up, \
         and the program then dies of SIGSEGV, with any plugin. Move the loop's body with the region into a function of its own, \
         or raise the stack limit (`ulimit -s` for the main thread, OMP_STACKSIZE for OpenMP threads); \
         see the README, \"Long loops of regions in one function\".",
        WINDOWS * WINDOW,
        room >> 10
    );
}

/// Bytes of the alternate signal stack, above one guard page. The head's crash handler needs
/// little (it writes the status file, then hands the signal on).
const ALT_STACK: usize = 64 << 10;
const GUARD: usize = 4096;

/// Give this thread an alternate signal stack, unless it has one. Kept for the rest of the
/// process (a thread is warned once).
fn give_alternate_signal_stack() {
    // SAFETY: sigaltstack with a null new stack only reads the current one into a local.
    let mut old: libc::stack_t = unsafe { std::mem::zeroed() };
    if unsafe { libc::sigaltstack(std::ptr::null(), &mut old) } != 0 || old.ss_flags & libc::SS_DISABLE == 0 {
        return;
    }
    // SAFETY: a fresh private anonymous mapping, never unmapped: the kernel may switch to it
    // at any later signal of this thread. Its lowest page is made inaccessible, so that a
    // handler overflowing it faults instead of writing into a neighbouring mapping.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), GUARD + ALT_STACK, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
    if p == libc::MAP_FAILED || unsafe { libc::mprotect(p, GUARD, libc::PROT_NONE) } != 0 {
        return;
    }
    // SAFETY: the usable part of the mapping above, valid for the process's life.
    let st = libc::stack_t { ss_sp: unsafe { p.cast::<u8>().add(GUARD) }.cast(), ss_flags: 0, ss_size: ALT_STACK };
    // SAFETY: `st` describes memory that stays mapped and writable.
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

    /// Feed `sps` to a fresh watch; the launch (index) and finding of each report.
    fn run(sps: impl IntoIterator<Item = usize>) -> Vec<(usize, Descent)> {
        let mut w = FRESH;
        sps.into_iter().enumerate().filter_map(|(i, sp)| w.see(sp).map(|f| (i, f))).collect()
    }

    const TOP: usize = 1 << 30;

    #[test]
    fn a_steady_descent_is_reported_once() {
        let found = run((0..100_000).map(|i| TOP - 112 * i));
        // The first window sets the reference, then WINDOWS lower ones.
        let at = (WINDOWS as usize + 1) * WINDOW as usize - 1;
        assert_eq!(found, vec![(at, Descent { per_launch: 112, low: TOP - 112 * at })]);
    }

    #[test]
    fn regions_at_several_depths_of_one_leaking_loop_are_reported() {
        // Per iteration, one region in the looping function and one in a callee 208 bytes
        // deeper (and a third one, so that the pattern does not divide the window): each
        // launch's step alternates, the iteration's is 112 bytes.
        let found = run((0..30_000).flat_map(|i| {
            let base = TOP - 112 * i;
            [base, base - 208, base - 40]
        }));
        assert_eq!(found.len(), 1, "{found:?}");
        let Descent { per_launch, .. } = found[0].1;
        assert!((30..=45).contains(&per_launch), "112 bytes per 3 launches: {per_launch}");
    }

    #[test]
    fn the_same_depth_or_a_recursion_that_returns_is_not() {
        assert_eq!(run((0..100_000).map(|_| TOP)), vec![]);
        // A recursion 500 levels deep, a region at each level, then back up, again and again.
        assert_eq!(run((0..100_000).map(|i| TOP - 208 * (i % 500))), vec![]);
    }

    #[test]
    fn this_threads_stack_is_found() {
        let marker = 0u8;
        let sp = &marker as *const u8 as usize;
        let low = stack_low().expect("glibc reports the stack");
        assert!(low < sp && sp - low < 1 << 30, "{low:#x} {sp:#x}");
    }
}
