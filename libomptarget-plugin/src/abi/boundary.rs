//! The one panic boundary of the exported functions ([`guard`]): a panic never unwinds into
//! C; it ends the job with one line naming the function (see `abi.rs`).

use crate::runtime::{self, Runtime};
use ft_handler::panic_message;
use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, AssertUnwindSafe};

thread_local! {
    /// How many [`guard`]s the calling thread is inside (more than one if a call nests).
    static INSIDE: Cell<u32> = const { Cell::new(0) };
    /// Where the panic being caught by the innermost [`guard`] was raised.
    static PANIC_AT: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Counts the calling thread inside a [`guard`] while it lives (also while unwinding).
struct Inside;

impl Inside {
    fn enter() -> Inside {
        INSIDE.with(|n| n.set(n.get() + 1));
        Inside
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        let _ = INSIDE.try_with(|n| n.set(n.get().saturating_sub(1)));
    }
}

/// Panics that a boundary reports ([`guard`] here, or the recovery handler's, which makes the
/// panic the reason the job ends) are not also printed by the default hook: the report is one
/// line, with the panic's location. With `RUST_BACKTRACE` set (and not `0`), the default
/// hook's message and backtrace come first. Every other panic (a thread with no boundary) is
/// printed as usual.
fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let in_guard = INSIDE.try_with(|n| n.get() > 0).unwrap_or(false);
            if in_guard {
                let _ = PANIC_AT.try_with(|p| *p.borrow_mut() = info.location().map(|l| l.to_string()));
            }
            let backtrace = std::env::var_os("RUST_BACKTRACE").is_some_and(|v| v != "0");
            if (in_guard || ft_handler::on_handler_thread()) && !backtrace {
                return;
            }
            default(info);
        }));
    });
}

/// The panic boundary of every exported function (`name`: the function without its
/// `__tgt_rtl_` prefix): runs `f`; a panic in it ends the whole job with one line naming the
/// function, the panic's message and where it was raised ([`runtime::internal_error`]).
pub(super) fn guard<R>(name: &'static str, f: impl FnOnce() -> R) -> R {
    install_panic_hook();
    let _inside = Inside::enter();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = panic_message(&*p);
            let at = PANIC_AT.with(|a| a.borrow_mut().take()).map(|l| format!(" (at {l})")).unwrap_or_default();
            runtime::internal_error(format_args!("internal error in __tgt_rtl_{name}: {msg}{at}"))
        }
    }
}

/// [`guard`], and with a trace recorded (`OMPCLUSTER_TRACE`), a span for the call on the
/// calling thread's track of the head, with the bytes it moves or allocates. (A queued
/// operation runs later behind plain [`guard`]: the call is traced once, when it is made.)
pub(super) fn guard_traced<R>(name: &'static str, bytes: Option<i64>, f: impl FnOnce() -> R) -> R {
    guard(name, || {
        let traced = match runtime::get() {
            Some(Runtime::Head(c)) => c.trace_now().map(|t| (c, t)),
            _ => None,
        };
        let r = f();
        if let Some((c, t)) = traced {
            c.trace(Some(t), timeline::Cat::Call, 0, name, || bytes.map(|b| vec![("bytes", serde_json::json!(b))]).unwrap_or_default());
        }
        r
    })
}
