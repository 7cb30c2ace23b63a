//! The memory budget of a split or recombine: what runs at the same time is
//! admitted against it, so peak memory follows the budget, not the input.
//!
//! Three things cost memory, and each is bounded here:
//! - compression threads: a zstd context each, sized by the level
//!   ([`compressor_memory`]); [`MemoryPlan::new`] runs fewer threads than
//!   `--jobs` when their contexts would take more than half the budget, and
//!   never more than [`max_threads`] (each thread also costs a stack);
//! - code objects waiting for (or in) compression: bounded per archive set
//!   by [`MemoryPlan::in_flight`], the writers' queues;
//! - the binary being split: its host-only bytes, its largest code object
//!   and the decoder of a compressed bundle (a zstd window). Each binary
//!   takes a [`Permit`] for them from the [`Budget`] before it is read, so
//!   binaries split in parallel only while their sum fits.
//!
//! A single item larger than the whole budget still runs, alone: the
//! budget then bounds everything else around it.

use std::sync::{Arc, Condvar, Mutex, PoisonError};

use rocm_kpack_format::archive::CompressionScheme;

/// Upper bound of the default budget.
pub const MAX_DEFAULT_BUDGET: u64 = 1 << 30;
/// Smallest budget accepted: below this the fixed costs (one zstd context,
/// buffers) dominate and nothing meaningful can be promised.
pub const MIN_BUDGET: u64 = 32 << 20;

/// The default budget: half the memory available now (`MemAvailable` of
/// `/proc/meminfo`), at most [`MAX_DEFAULT_BUDGET`], at least
/// [`MIN_BUDGET`]. Where `/proc/meminfo` is unreadable: the maximum.
pub fn default_budget() -> u64 {
    let available = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("MemAvailable:"))
                .and_then(|v| v.trim().strip_suffix("kB"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .map(|kib| kib.saturating_mul(1024));
    available
        .map_or(MAX_DEFAULT_BUDGET, |a| a / 2)
        .clamp(MIN_BUDGET, MAX_DEFAULT_BUDGET)
}

/// Parses a size: bytes, or a number with a binary unit `K`, `M`, `G`,
/// `T` (optionally `KiB`, `MB`, ... ; all powers of 1024), e.g. `512M`,
/// `1.5G`, `2GiB`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let unit = unit.trim().to_ascii_lowercase();
    let shift = match unit.trim_end_matches("ib").trim_end_matches('b') {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => {
            return Err(format!(
                "{text:?}: unknown unit (use K, M, G or T, e.g. 512M)"
            ))
        }
    };
    let value: f64 = num
        .parse()
        .map_err(|_| format!("{text:?}: not a size (e.g. 512M, 2G, 1073741824)"))?;
    let bytes = value * (1u64 << shift) as f64;
    if !bytes.is_finite() || bytes < 1.0 || bytes >= u64::MAX as f64 {
        return Err(format!("{text:?}: out of range"));
    }
    Ok(bytes as u64)
}

/// Memory one compression thread's zstd context takes at `level`, for the
/// code objects of real libraries (a few MiB each): the window, hash and
/// chain tables of zstd's parameter table for that level and input size,
/// rounded up. `none` compresses nothing.
pub fn compressor_memory(scheme: CompressionScheme, level: i32) -> u64 {
    if scheme != CompressionScheme::ZstdPerKernel {
        return 1 << 20;
    }
    match level {
        ..=5 => 8 << 20,
        6..=12 => 24 << 20,
        13..=17 => 48 << 20,
        _ => 64 << 20,
    }
}

/// How a run spends its budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryPlan {
    /// The whole budget in bytes.
    pub budget: u64,
    /// Compression (worker) threads.
    pub threads: usize,
    /// Bytes of code objects queued for compression per archive set.
    pub in_flight: usize,
    /// Set aside for the compression threads' contexts.
    pub contexts: u64,
}

impl MemoryPlan {
    /// The plan for `budget` bytes (None: [`default_budget`]) and `jobs`
    /// threads (None: one per core; at most [`max_threads`], with a
    /// warning).
    pub fn new(
        budget: Option<u64>,
        jobs: Option<usize>,
        scheme: CompressionScheme,
        level: i32,
    ) -> MemoryPlan {
        let budget = budget.unwrap_or_else(default_budget);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let asked = jobs.unwrap_or(cores).max(1);
        let wanted = asked.min(max_threads(cores));
        if wanted < asked {
            tracing::warn!(
                "--jobs {asked}: running {wanted} threads, the most for {cores} core(s) (compression cannot use more)"
            );
        }
        let per_thread = compressor_memory(scheme, level);
        let affordable = usize::try_from(budget / 2 / per_thread)
            .unwrap_or(usize::MAX)
            .max(1);
        let threads = wanted.min(affordable);
        if threads < wanted {
            tracing::info!(
                wanted,
                threads,
                budget,
                "fewer compression threads than asked: their zstd contexts would exceed half the memory budget"
            );
        }
        // Enough queued work to keep every thread busy, an eighth of the budget at most.
        let in_flight = (budget / 8).clamp(4 << 20, 256 << 20);
        MemoryPlan {
            budget,
            threads,
            in_flight: usize::try_from(in_flight).unwrap_or(usize::MAX),
            contexts: (threads as u64).saturating_mul(per_thread),
        }
    }

    /// What is left for binaries once the compression threads' contexts
    /// are set aside.
    pub fn for_binaries(&self) -> u64 {
        self.budget - self.contexts.min(self.budget / 2)
    }
}

/// The most compression threads a run starts on a machine with `cores`
/// cores: compression is CPU-bound, so threads past the cores only cost
/// stacks (`--jobs 20000` would start 20000). Twice the cores, for threads
/// that wait on reads and writes, and at least 8, so that parallel paths
/// can be exercised on a small machine.
pub fn max_threads(cores: usize) -> usize {
    cores.saturating_mul(2).max(8)
}

/// The threads and memory of one run: the plan, the pool its compression
/// (and parallel loops) run on, and the budget binaries take permits from.
#[derive(Debug)]
pub struct Work {
    pub plan: MemoryPlan,
    pub pool: Arc<rayon::ThreadPool>,
    pub budget: Budget,
}

impl Work {
    /// Plans `memory` bytes (None: the default) and `jobs` threads (None:
    /// one per core) and starts the pool.
    pub fn new(
        memory: Option<u64>,
        jobs: Option<usize>,
        scheme: CompressionScheme,
        level: i32,
    ) -> Result<Work, String> {
        let plan = MemoryPlan::new(memory, jobs, scheme, level);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(plan.threads)
            .build()
            .map_err(|e| format!("cannot start {} worker threads: {e}", plan.threads))?;
        Ok(Work {
            plan,
            pool: Arc::new(pool),
            budget: Budget::new(plan.for_binaries()),
        })
    }

    /// Runs `f` on the pool: parallel loops inside it use the pool's
    /// threads. Never take a [`Permit`] inside.
    pub fn install<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        self.pool.install(f)
    }
}

/// Bytes shared by everything that runs at once (see the module docs).
#[derive(Debug)]
pub struct Budget {
    total: u64,
    used: Mutex<u64>,
    freed: Condvar,
}

impl Budget {
    /// A budget of `total` bytes.
    pub fn new(total: u64) -> Budget {
        Budget {
            total: total.max(1),
            used: Mutex::new(0),
            freed: Condvar::new(),
        }
    }

    /// The whole budget.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Waits until `bytes` (at most the whole budget) are free and takes
    /// them. Call it only from threads that hold no other permit, never
    /// from a rayon worker: the holders being waited for must be able to
    /// finish.
    pub fn acquire(&self, bytes: u64) -> Permit<'_> {
        let bytes = bytes.min(self.total);
        let mut used = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        while *used + bytes > self.total {
            used = self
                .freed
                .wait(used)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *used += bytes;
        Permit {
            budget: self,
            bytes,
        }
    }

    fn release(&self, bytes: u64) {
        let mut used = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        *used = used.saturating_sub(bytes);
        self.freed.notify_all();
    }
}

/// Bytes taken from a [`Budget`]; given back when dropped.
#[derive(Debug)]
pub struct Permit<'b> {
    budget: &'b Budget,
    bytes: u64,
}

impl Permit<'_> {
    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Holds exactly `bytes` (at most the whole budget) from now on:
    /// gives back the excess at once, or waits for the difference.
    pub fn resize(&mut self, bytes: u64) {
        let bytes = bytes.min(self.budget.total);
        if bytes <= self.bytes {
            self.budget.release(self.bytes - bytes);
            self.bytes = bytes;
        } else {
            // Give everything back first: waiting while holding could
            // deadlock two permits growing at once.
            self.budget.release(std::mem::take(&mut self.bytes));
            let grown = self.budget.acquire(bytes);
            self.bytes = grown.bytes;
            std::mem::forget(grown);
        }
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.budget.release(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("1.5g"), Ok(3 << 29));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size(" 64 MB "), Ok(64 << 20));
        for bad in ["", "M", "12X", "-1G", "0", "1e9999"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn plan_fits_threads_to_the_budget() {
        let zstd = CompressionScheme::ZstdPerKernel;
        let small = MemoryPlan::new(Some(256 << 20), Some(64), zstd, 19);
        assert_eq!(small.threads, 2, "{small:?}");
        assert!(small.for_binaries() >= 128 << 20);
        let one = MemoryPlan::new(Some(MIN_BUDGET), Some(8), zstd, 19);
        assert_eq!(one.threads, 1);
        let big = MemoryPlan::new(Some(64 << 30), Some(3), zstd, 19);
        assert_eq!(big.threads, 3);
        assert_eq!(big.in_flight, 256 << 20);
        let d = default_budget();
        assert!((MIN_BUDGET..=MAX_DEFAULT_BUDGET).contains(&d));
        // A budget that affords 20000 contexts still runs no more threads
        // than the cores can use.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let many = MemoryPlan::new(Some(64 << 30), Some(20_000), CompressionScheme::None, 0);
        assert_eq!(many.threads, max_threads(cores), "{many:?}");
        assert_eq!(max_threads(1), 8);
        assert_eq!(max_threads(64), 128);
    }

    #[test]
    fn permits_never_exceed_the_total() {
        let budget = Budget::new(100);
        let peak = AtomicU64::new(0);
        let live = AtomicU64::new(0);
        std::thread::scope(|s| {
            for i in 0..8u64 {
                let (budget, peak, live) = (&budget, &peak, &live);
                s.spawn(move || {
                    for round in 0..50u64 {
                        let mut p = budget.acquire(10 + (i * 7 + round) % 50);
                        let now = live.fetch_add(p.bytes(), Ordering::SeqCst) + p.bytes();
                        peak.fetch_max(now, Ordering::SeqCst);
                        live.fetch_sub(p.bytes(), Ordering::SeqCst);
                        p.resize(5);
                        let now = live.fetch_add(p.bytes(), Ordering::SeqCst) + p.bytes();
                        peak.fetch_max(now, Ordering::SeqCst);
                        live.fetch_sub(p.bytes(), Ordering::SeqCst);
                    }
                });
            }
        });
        assert!(peak.load(Ordering::SeqCst) <= 100);
        // Larger than the whole budget: clamped, runs alone.
        assert_eq!(budget.acquire(1000).bytes(), 100);
    }
}
