//! The agent's allocator setting (`allocator::share_one_heap`): threads started after
//! it allocate from the main heap instead of creating heaps of their own. Alone in its
//! own test binary, as the setting is process-wide.

#![cfg(all(target_os = "linux", target_env = "gnu"))]

use std::sync::{Arc, Barrier};

/// glibc reserves each thread heap ("arena") as an aligned 64 MiB mapping, mostly
/// inaccessible: counts this process's anonymous inaccessible mappings of at least
/// 32 MiB (thread stacks' guard pages are a few KiB).
fn heap_reservations() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .expect("/proc/self/maps")
        .lines()
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let Some((start, end)) = fields[0].split_once('-') else {
                return false;
            };
            let size =
                u64::from_str_radix(end, 16).unwrap() - u64::from_str_radix(start, 16).unwrap();
            fields[1] == "---p" && fields.len() == 5 && size >= 32 << 20
        })
        .count()
}

/// Four threads allocating at the same time (so none can take over another's idle
/// heap) add no heap of their own. Without the setting glibc gives each its own, up
/// to eight per core.
#[test]
fn threads_started_after_the_setting_share_the_main_heap() {
    saint_memory::allocator::share_one_heap();
    let before = heap_reservations();
    let threads = 4;
    let barrier = Arc::new(Barrier::new(threads));
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                let blocks: Vec<Vec<u8>> = (0..1000).map(|size| vec![1; 16 + size % 512]).collect();
                // Hold them until every thread has allocated.
                barrier.wait();
                std::hint::black_box(blocks.len())
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    let after = heap_reservations();
    assert_eq!(
        after, before,
        "threads created heaps of their own: {before} reservations before, {after} after"
    );
}
