//! Keeps the model's scratch memory from staying resident after it ran.
//!
//! Every forward pass allocates activation and packing buffers of hundreds of KiB to a
//! few MiB and frees them when it returns. glibc's malloc serves blocks above its mmap
//! threshold (128 KiB) with their own mappings, returned to the kernel at `free` — but
//! by default it raises that threshold to the largest such block freed so far (up to
//! 32 MiB) and its trim threshold to twice that. After the first embedding, the model's
//! buffers therefore come from a thread's heap, and up to twice the largest of them
//! stays there as free but resident memory for the life of the process: about 10 MiB
//! per idle bot, measured with `memory_fleet` (`SAINT_FLEET_SMAPS`).
//!
//! Setting the threshold explicitly turns that adjustment off, so large blocks stay
//! mapped and go back to the kernel when freed, and an idle bot holds only what it
//! uses. Small allocations are unaffected.
//!
//! glibc also gives threads their own heaps ("arenas", up to eight per core), each
//! keeping the free memory of what its threads allocated. A bot's agent runs tokio
//! workers, the model's worker threads and searches on helper threads; with one heap
//! shared by all of them an idle bot holds about 1.7 MiB less (ten bots measured
//! with `memory_fleet`: 23.9 → 22.2 MiB PSS each). The agent, one per bot, opts in
//! with [`share_one_heap`]; services built for throughput across many cores (the
//! shared embedder) keep glibc's default.

/// glibc's own initial mmap threshold, kept fixed from now on.
const MMAP_THRESHOLD: i32 = 128 * 1024;

/// Makes the allocator return large freed blocks to the kernel. Call once, early in a
/// process that runs the model; a no-op outside glibc (musl and other allocators do
/// not grow their thresholds this way).
pub fn return_large_blocks_at_free() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    set_mmap_threshold();
}

/// Makes every thread allocate from the one main heap. Call once, before the process
/// starts threads (threads that already have a heap keep it); a no-op outside glibc.
pub fn share_one_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    set_one_arena();
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn set_one_arena() {
    // SAFETY: as in `set_mmap_threshold`: a tuning parameter, set under the
    // allocator's lock.
    let changed = unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) };
    if changed != 1 {
        tracing::warn!("malloc refused a single arena; threads keep their own heaps");
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn set_mmap_threshold() {
    // SAFETY: `mallopt` only changes the allocator's tuning parameters, under the
    // allocator's own lock; it has no memory-safety preconditions.
    let changed = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) };
    if changed != 1 {
        tracing::warn!(
            "malloc refused a fixed mmap threshold; the model's freed buffers may stay resident"
        );
    }
}
