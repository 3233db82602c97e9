//! The allocator setting the model's processes make (`allocator.rs`): freed large
//! blocks leave the process. Alone in its own test binary, so no other test's
//! allocations move the process's resident memory while it measures.

#![cfg(all(target_os = "linux", target_env = "gnu"))]

/// With the threshold fixed, a freed block of a few MiB leaves the process: the
/// resident anonymous memory after freeing is back near where it started, even after
/// a first large block was freed (the case glibc's adjustment keeps resident).
#[test]
fn freed_large_blocks_leave_the_process() {
    saint_memory::allocator::return_large_blocks_at_free();
    let resident = || {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        status
            .lines()
            .find_map(|line| line.strip_prefix("RssAnon:"))
            .and_then(|value| value.split_whitespace().next()?.parse::<u64>().ok())
            .expect("RssAnon in /proc/self/status")
    };
    // Run on a fresh thread, as the model's workers are: its arena is where glibc's
    // adjustment would keep the memory.
    std::thread::spawn(move || {
        let block = |megabytes: usize| {
            let mut buffer = vec![0u8; megabytes << 20];
            // Touch every page so the block is resident.
            for page in buffer.chunks_mut(4096) {
                page[0] = 1;
            }
            std::hint::black_box(&buffer);
        };
        block(8);
        let before = resident();
        for _ in 0..4 {
            block(6);
        }
        let after = resident();
        assert!(
            after < before + 1024,
            "freed blocks stayed resident: RssAnon {before} KiB before, {after} KiB after"
        );
    })
    .join()
    .unwrap();
}
