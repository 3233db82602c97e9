//! Hostile files cost bounded time and memory because the extraction child's limits
//! bound them, not because the parsers happened to cope. One test in its own binary,
//! so `getrusage(RUSAGE_CHILDREN)` CPU times are this test's children's alone. Peak
//! memory is the child's own `VmHWM` (its rusage peak would include this process's,
//! which Linux carries across the child's exec); a child stopped by the memory limit
//! reports nothing, and its address space, hence its memory, was that limit at most.

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use nix::sys::{
    resource::{UsageWho, getrusage},
    stat::Mode,
};
use saint_media::{
    ChildLimits, DocumentCaps, Extracted, Extractor, ImageLimits, IsolatedError, fixtures,
};

const MIB: u64 = 1024 * 1024;

fn extractor(limits: ChildLimits) -> Extractor {
    Extractor::new(
        env!("CARGO_BIN_EXE_saint-media-extract"),
        Vec::<String>::new(),
    )
    .with_limits(limits)
}

/// CPU time of every child waited for so far.
fn children_cpu() -> Duration {
    let usage = getrusage(UsageWho::RUSAGE_CHILDREN).expect("getrusage");
    let seconds = |time: nix::sys::time::TimeVal| {
        Duration::from_secs(time.tv_sec() as u64) + Duration::from_micros(time.tv_usec() as u64)
    };
    seconds(usage.user_time()) + seconds(usage.system_time())
}

fn write(directory: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = directory.join(name);
    std::fs::write(&path, bytes).expect("write the file");
    path
}

fn timed<T>(run: impl FnOnce() -> T) -> (T, Duration) {
    let started = Instant::now();
    let value = run();
    (value, started.elapsed())
}

#[test]
fn hostile_files_cost_bounded_time_and_memory() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let directory = directory.path();
    let defaults = ChildLimits::default();

    // The memory limit binds: decoding a 12-megapixel photo needs a 36 MB pixel buffer
    // (4000 × 3000 × 3), which a 32 MiB address space cannot hold whatever else the
    // child maps. The first child of this process, so the peak below is its own.
    let photo = write(
        directory,
        "photo.jpg",
        &fixtures::photo_with_exif(4000, 3000, 1),
    );
    let small = ChildLimits {
        address_space_bytes: 32 * MIB,
        ..defaults.clone()
    };
    let (result, usage) = extractor(small).image_with_usage(&photo, &ImageLimits::default());
    let error = match result {
        Ok(prepared) => panic!(
            "a {} × {} photo was decoded in 32 MiB",
            prepared.original_width, prepared.original_height
        ),
        Err(error) => error,
    };
    assert!(
        matches!(error, IsolatedError::MemoryLimit { limit_mib: 32 }),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "refused: parsing the file needed more than the 32 MiB memory limit"
    );
    eprintln!("photo in 32 MiB: refused in {:?}", usage.wall);
    assert_eq!(usage.peak_memory_kib, None);
    // The same photo with the default limit succeeds, needing more than 32 MiB: the
    // refusal was the limit's.
    let (prepared, usage) =
        extractor(defaults.clone()).image_with_usage(&photo, &ImageLimits::default());
    prepared.expect("the photo fits the default limit");
    let peak = usage.peak_memory_kib.expect("the child's peak") * 1024;
    eprintln!(
        "photo in {} MiB: prepared in {:?}, peak {} KiB",
        defaults.address_space_bytes / MIB,
        usage.wall,
        peak / 1024
    );
    assert!(
        peak > 32 * MIB && peak <= defaults.address_space_bytes,
        "{peak}"
    );

    // The wall-clock limit binds: a FIFO in place of a file blocks the child's read
    // forever without using CPU time; the parent kills it.
    let fifo = directory.join("never-ends.pdf");
    nix::unistd::mkfifo(&fifo, Mode::S_IRUSR | Mode::S_IWUSR).expect("mkfifo");
    let short_wall = ChildLimits {
        wall_seconds: 2,
        ..defaults.clone()
    };
    let (result, elapsed) =
        timed(|| extractor(short_wall).document(&fifo, "never-ends.pdf", &DocumentCaps::default()));
    let error = result.unwrap_err();
    assert!(
        matches!(error, IsolatedError::TimedOut { seconds: 2 }),
        "{error:?}"
    );
    eprintln!("FIFO: killed after {elapsed:?}");
    // Killed at the deadline; the second of slack is for a loaded machine's scheduler.
    assert!(
        elapsed >= Duration::from_secs(2) && elapsed < Duration::from_secs(4),
        "{elapsed:?}"
    );

    // The CPU limit binds: every page of a 10,000-page PDF, each page's lookup costing
    // a walk of the page tree inside lopdf, takes over ten seconds of CPU; a 2-second
    // limit stops it at 2 (SIGXCPU), or 3 (SIGKILL at the hard limit).
    let manual = fixtures::pdf(10_000, |number| format!("page {number} of the manual"));
    let manual = write(directory, "manual.pdf", &manual);
    let every_page = DocumentCaps {
        max_pages: 10_000,
        max_chars: usize::MAX,
        ..DocumentCaps::default()
    };
    let two_seconds = ChildLimits {
        cpu_seconds: 2,
        ..defaults.clone()
    };
    let cpu_before = children_cpu();
    let (result, elapsed) =
        timed(|| extractor(two_seconds).document(&manual, "manual.pdf", &every_page));
    let used = children_cpu().checked_sub(cpu_before).unwrap();
    let error = result.unwrap_err();
    eprintln!("every page of 10,000: {error} after {used:?} CPU, {elapsed:?}");
    assert!(
        matches!(error, IsolatedError::CpuLimit { seconds: 2 }),
        "{error:?}"
    );
    assert!(
        // The kernel charges CPU time in ticks, so rusage may read a little under 2 s.
        used >= Duration::from_millis(1_800) && used < Duration::from_millis(3_500),
        "{used:?}"
    );

    // Hostile files under the default limits: each a clear refusal (or a capped
    // extraction) well within the wall-clock limit.
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("bomb.docx", fixtures::zip_bomb_docx(1 << 30, false)),
        ("liar.docx", fixtures::zip_bomb_docx(1 << 30, true)),
        (
            "nested.docx",
            fixtures::docx_with_body(&fixtures::deeply_nested_body(50_000)),
        ),
        (
            "stream-bomb.pdf",
            fixtures::pdf_with_inflating_stream(1 << 30),
        ),
        (
            "manual.pdf",
            fixtures::pdf(10_000, |number| format!("page {number}")),
        ),
        ("cut.pdf", {
            let mut pdf = fixtures::pdf(200, |number| format!("page {number}"));
            pdf.truncate(pdf.len() / 2);
            pdf
        }),
        ("cut.docx", {
            let mut docx = fixtures::docx(&["hello"; 200]);
            docx.truncate(docx.len() / 2);
            docx
        }),
    ];
    for (name, bytes) in cases {
        let path = write(directory, name, &bytes);
        let (result, usage): (Result<Extracted, IsolatedError>, _) =
            extractor(defaults.clone()).document_with_usage(&path, name, &DocumentCaps::default());
        let elapsed = usage.wall;
        let peak = usage.peak_memory_kib.expect("the child's peak") * 1024;
        let outcome = match &result {
            Ok(extracted) => extracted.note(),
            Err(error) => error.to_string(),
        };
        eprintln!(
            "{name} ({} bytes): {outcome} in {elapsed:?}, peak {} KiB",
            bytes.len(),
            peak / 1024
        );
        assert!(elapsed < Duration::from_secs(5), "{name} took {elapsed:?}");
        // Every refusal here is the parsers' own caps, far inside the child's limit.
        assert!(peak < 256 * MIB, "{name} peaked at {peak}");
        if let Err(error) = &result {
            assert!(
                matches!(error, IsolatedError::Refused(_)),
                "{name}: {error:?}"
            );
        }
    }
}
