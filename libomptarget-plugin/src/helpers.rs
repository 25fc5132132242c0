//! libomp's hidden helper threads, as its settings make them: how many run tasks.
//!
//! libomp 16 runs `target nowait` tasks on its hidden helper threads (8 by default,
//! `LIBOMP_NUM_HIDDEN_HELPER_THREADS`, at most 16, of which the first, the helper team's main
//! thread, runs none; none with `LIBOMP_USE_HIDDEN_HELPER_TASK` false). The query of a pending
//! region naps so that they do not spin, but never all but two of them at once
//! (`queues.rs`): this module says how many there are.
//!
//! (An earlier version also *woke* sleeping helpers: libomp queues a task that a helper
//! releases on that helper's own deque and wakes no other, so a graph of dependent regions
//! ran one region at a time while each held its helper to its end. Since regions longer
//! than 1 ms no longer hold a helper (`queues.rs`), the waker changed nothing measurable:
//! BENCHMARKS.md, "Waking libomp's hidden helper threads"; it was removed.)

/// libomp's reading of a false boolean setting (`__kmp_str_match_false`): `0`, `false`, `no`
/// and their abbreviations (`f`, `n`), `off` (`of`), `.false.`, `.f.`, `disabled`, in any case.
fn libomp_false(value: &str) -> bool {
    // libomp's `__kmp_str_match`: `value` agrees with `word` as far as both go, and that is at
    // least `min` characters (or, with `min` 0, both are whole).
    let matches = |word: &str, min: usize| {
        let v = value.trim().as_bytes();
        let agree = word.bytes().zip(v).take_while(|(w, c)| w.eq_ignore_ascii_case(c)).count();
        let mismatch = agree < word.len().min(v.len());
        !mismatch && if min > 0 { agree >= min } else { agree == word.len() && agree == v.len() }
    };
    [("false", 1), ("off", 2), ("0", 1), (".false.", 2), (".f.", 2), ("no", 1), ("disabled", 0)].iter().any(|&(w, m)| matches(w, m))
}

/// How many of libomp's hidden helper threads run tasks (its helper team less its main
/// thread), from this process's libomp settings; `None` if it has no helpers.
pub(crate) fn task_helpers() -> Option<i32> {
    let var = |name| std::env::var(name).ok();
    helper_team(var("LIBOMP_USE_HIDDEN_HELPER_TASK").as_deref(), var("LIBOMP_NUM_HIDDEN_HELPER_THREADS").as_deref()).map(|team| team - 1)
}

/// How many threads libomp's hidden helper team has, main thread included, or `None` if it
/// has none: 8 by default; a count set by `LIBOMP_NUM_HIDDEN_HELPER_THREADS` (at most 16) is
/// of threads that run tasks, and libomp adds the main thread to it
/// (`__kmp_stg_parse_num_hidden_helper_threads`).
fn helper_team(use_helpers: Option<&str>, count: Option<&str>) -> Option<i32> {
    if use_helpers.is_some_and(libomp_false) {
        return None;
    }
    match count.map(|c| c.trim().parse::<i64>()) {
        None | Some(Err(_)) => Some(8),
        Some(Ok(n)) if n <= 0 => None,
        Some(Ok(n)) => Some(n.min(16) as i32 + 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_helper_team_follows_libomps_settings() {
        assert_eq!(helper_team(None, None), Some(8));
        assert_eq!(helper_team(None, Some("2")), Some(3));
        assert_eq!(helper_team(None, Some("32")), Some(17));
        assert_eq!(helper_team(None, Some("0")), None);
        assert_eq!(helper_team(None, Some("many")), Some(8));
        for off in ["0", "false", "F", "no", "n", "off", "OF", ".false.", ".f.", "disabled", " false "] {
            assert_eq!(helper_team(Some(off), None), None, "{off}");
        }
        for on in ["1", "true", "on", "yes", "o", "enabled", "disable"] {
            assert_eq!(helper_team(Some(on), None), Some(8), "{on}");
        }
    }
}
