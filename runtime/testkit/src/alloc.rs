//! A global allocator that records the largest single allocation made by
//! the current thread, for tests that bound allocations by input size, and
//! the peak of live heap bytes of the whole process, for tests that bound
//! the memory of parallel work ([`live_peak_during`]; run such a test
//! alone in its binary, other tests' allocations count too).
//! Each test binary installs it with
//! `#[global_allocator] static ALLOC: PeakAlloc = PeakAlloc;`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Records the largest single allocation made by the current thread.
pub struct PeakAlloc;

thread_local! {
    pub static PEAK: Cell<usize> = const { Cell::new(0) };
}

/// Live heap bytes of the process, and their peak.
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK_LIVE: AtomicUsize = AtomicUsize::new(0);

fn grew(by: usize) {
    let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK_LIVE.fetch_max(now, Ordering::Relaxed);
}

/// Peak live heap bytes of the process above the level at the start, while
/// `f` runs.
pub fn live_peak_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.load(Ordering::SeqCst);
    PEAK_LIVE.store(base, Ordering::SeqCst);
    let out = f();
    let peak = PEAK_LIVE.load(Ordering::SeqCst).saturating_sub(base);
    (out, peak)
}

unsafe impl GlobalAlloc for PeakAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = PEAK.try_with(|p| p.set(p.get().max(layout.size())));
        grew(layout.size());
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = PEAK.try_with(|p| p.set(p.get().max(new_size)));
        if new_size >= layout.size() {
            grew(new_size - layout.size());
        } else {
            LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
        }
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
