//! What makes replicas of one region write the same bytes when its kernel sums in parallel.
//!
//! A `parallel for reduction(+:x)` over doubles gives a result that depends on the order its
//! threads' shares are combined. libomp (LLVM 16, `__kmp_determine_reduction_method`) adds each
//! thread's share to `x` atomically, in the order the threads finish, for teams of at most
//! four threads on x86_64, and combines them along its barrier's fixed tree for larger teams.
//! So replicas of such a region on workers with equal teams still differ from run to run, and
//! workers with different teams (nodes with different core counts) always may. With replicas,
//! each worker:
//! * asks libomp for its tree method for every team ([`sum_in_fixed_order`], libomp's
//!   `kmp_set_defaults("KMP_DETERMINISTIC_REDUCTION=true")`, the setting of the same name), so
//!   that equal teams combine equal shares in one order whatever the timing; and
//! * where the workers' default team sizes differ, runs its kernels with the smallest
//!   ([`pin_team_size`]: libomp's default, `OMP_NUM_THREADS` through `kmp_set_defaults`, which
//!   also caps the threads of each team of a `teams` construct; and `omp_set_num_threads` once
//!   on each thread that calls kernels, before its first, [`enter_kernel`]), so that a static
//!   schedule gives each thread the same share everywhere.
//!
//! A user's own choice wins: `KMP_FORCE_REDUCTION` or `KMP_DETERMINISTIC_REDUCTION` in the
//! environment leaves the method alone, and a `num_threads` clause or `OMP_NUM_THREADS` the
//! team size (equal `OMP_NUM_THREADS` everywhere means equal defaults: nothing to pin).
//! libomp's functions are looked up in the process (`dlsym`): a program without libomp runs no
//! OpenMP reduction, and nothing is done.

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicI32, Ordering};

/// The variables by which a user chooses libomp's reduction method.
pub const USER_CHOICE: [&str; 2] = ["KMP_FORCE_REDUCTION", "KMP_DETERMINISTIC_REDUCTION"];

/// Look `name` up among the symbols this process has loaded.
fn symbol(name: &CStr) -> Option<*mut c_void> {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name has no other precondition.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

/// The user's choice of reduction method, if any (the first of [`USER_CHOICE`] set).
pub fn user_choice() -> Option<(String, String)> {
    USER_CHOICE.iter().find_map(|v| std::env::var(v).ok().map(|val| ((*v).to_string(), val)))
}

/// Make libomp combine the shares of every reduction in a fixed order (see the module's docs),
/// unless the user chose a method.
pub fn sum_in_fixed_order() {
    if user_choice().is_none() {
        set_defaults(c"KMP_DETERMINISTIC_REDUCTION=true");
    }
}

/// Give libomp `setting` as if the environment said it (`kmp_set_defaults`; nothing without
/// libomp).
fn set_defaults(setting: &CStr) {
    let Some(f) = symbol(c"kmp_set_defaults") else { return };
    // SAFETY: libomp's `void kmp_set_defaults(char const *)` (declared in its omp.h); the
    // symbol was found under that name.
    let set: unsafe extern "C" fn(*const c_char) = unsafe { std::mem::transmute(f) };
    // SAFETY: a NUL-terminated string, read during the call only (libomp parses it as it
    // would its environment, initialising itself first if it has not yet).
    unsafe { set(setting.as_ptr()) };
}

/// The team size a `parallel` without `num_threads` gets on this process's threads (libomp's
/// `omp_get_max_threads` on this thread, which has not changed it), or 0 without libomp.
pub fn default_team_size() -> u32 {
    let Some(f) = symbol(c"omp_get_max_threads") else { return 0 };
    // SAFETY: OpenMP's `int omp_get_max_threads(void)`, found under that name.
    let get: unsafe extern "C" fn() -> c_int = unsafe { std::mem::transmute(f) };
    // SAFETY: no preconditions (libomp initialises itself if it has not yet).
    u32::try_from(unsafe { get() }).unwrap_or(0)
}

/// The team size kernels run with, once pinned (0: their threads' default).
static PINNED: AtomicI32 = AtomicI32::new(0);

thread_local! {
    /// The size this thread's team was set to (0: not set).
    static SET_HERE: Cell<i32> = const { Cell::new(0) };
}

/// From now on, kernels run on this process with teams of `n` threads where they do not say
/// otherwise (0: their default). libomp's default (`OMP_NUM_THREADS=n` through
/// `kmp_set_defaults`) is what threads registered from now on start with and what caps the
/// threads of a `teams` construct's teams; threads libomp already knows keep their own
/// setting, so [`enter_kernel`] also sets it on each thread that calls kernels.
pub fn pin_team_size(n: u32) {
    let n = i32::try_from(n).unwrap_or(i32::MAX);
    if n > 0 {
        let setting = std::ffi::CString::new(format!("OMP_NUM_THREADS={n}")).expect("no NUL in a number");
        set_defaults(&setting);
    }
    PINNED.store(n, Ordering::Release);
}

/// Called on a thread about to run a kernel: give its libomp root the pinned team size, once.
pub(crate) fn enter_kernel() {
    let n = PINNED.load(Ordering::Acquire);
    if n == 0 || SET_HERE.get() == n {
        return;
    }
    if let Some(f) = symbol(c"omp_set_num_threads") {
        // SAFETY: OpenMP's `void omp_set_num_threads(int)`, found under that name.
        let set: unsafe extern "C" fn(c_int) = unsafe { std::mem::transmute(f) };
        // SAFETY: n > 0; the call sets this thread's nthreads-var (registering the thread with
        // libomp if it was not).
        unsafe { set(n) };
    }
    SET_HERE.set(n);
}

/// The size teams are pinned to with replicas, given every worker's default (`sizes`: 0 for a
/// worker without libomp): the smallest where they differ, none (0) where they agree.
pub fn agreed_team_size(sizes: &[u32]) -> u32 {
    let known = sizes.iter().copied().filter(|&s| s > 0);
    match (known.clone().min(), known.max()) {
        (Some(lo), Some(hi)) if lo != hi => lo,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn teams_are_pinned_only_where_workers_differ() {
        assert_eq!(agreed_team_size(&[8, 8, 8]), 0);
        assert_eq!(agreed_team_size(&[8, 2, 16]), 2);
        assert_eq!(agreed_team_size(&[0, 4, 4]), 0);
        assert_eq!(agreed_team_size(&[0, 4, 6]), 4);
        assert_eq!(agreed_team_size(&[]), 0);
    }
}
