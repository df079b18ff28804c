//! Settings of mimalloc, the allocator of the native binaries (the trainer and the benchmarks).
//!
//! A training step frees and allocates hundreds of multi-MB tensor buffers. By default mimalloc
//! returns freed pages to the OS after a delay (10 ms in v2, 1 s in v3), and every later buffer
//! that lands on them faults them back in, zeroed by the kernel: `clear_page` was 17% of a MiniLM
//! training step's profile. Kept mapped, the pages are reused as they are; the process keeps its
//! peak footprint, which a training or evaluation run reaches in its first step anyway.

use libmimalloc_sys::{mi_option_set, mi_option_t};

/// `mi_option_purge_delay`, its place in `mi_option_t` in mimalloc.h (v2 and v3), which
/// libmimalloc-sys does not name.
const PURGE_DELAY: mi_option_t = 15;

/// Makes mimalloc keep freed pages mapped for reuse (purge delay -1: never purge). Call it first
/// thing in `main`; it only matters in a binary whose global allocator is mimalloc.
pub fn keep_freed_pages() {
    // SAFETY: sets an integer option; mimalloc reads options atomically.
    unsafe { mi_option_set(PURGE_DELAY, -1) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `PURGE_DELAY` names the purge delay: before it is set it holds the environment's value or
    /// mimalloc's default for that option, and afterwards what was set.
    #[test]
    fn purge_delay_option_is_the_one_set() {
        let before = unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) };
        match std::env::var("MIMALLOC_PURGE_DELAY").ok().and_then(|v| v.parse::<i64>().ok()) {
            Some(from_env) => assert_eq!(before as i64, from_env),
            None => assert!(
                [10, 1000].contains(&before),
                "option {PURGE_DELAY} is {before}, not a purge delay"
            ),
        }
        keep_freed_pages();
        assert_eq!(unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) }, -1);
    }
}
