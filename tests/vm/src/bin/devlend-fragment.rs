//! `devlend-fragment MIB`: leaves MIB MiB of this host's free memory in
//! single 4 KiB pages, so that memory allocated next (a guest's RAM, with
//! transparent huge pages off) is physically scattered. The benchmark runs
//! it in a host to measure pinning and mapping fragmented guest memory
//! (docs/performance.md, "Guest memory backing").
//!
//! It maps 2 x MIB MiB of anonymous memory without huge pages, touches
//! every page, then unmaps every other page: the pages it keeps stop
//! their free neighbours from merging into larger free blocks, and the
//! page allocator hands out single free pages before it splits larger
//! ones. The pages it keeps are locked (`mlockall`), so that with
//! `vm.compact_unevictable_allowed` 0 compaction does not move them and
//! merge the holes again (the benchmark sets that, and
//! `vm.compaction_proactiveness` 0, while it runs). It prints one line
//! when done and holds its pages until killed.

use std::io::Write;
use std::process::ExitCode;

const PAGE: usize = 4096;

fn fragment(mib: usize) -> Result<(), String> {
    let len = mib
        .checked_mul(2 << 20)
        .ok_or_else(|| format!("{mib} MiB is too much"))?;
    // SAFETY: a new private anonymous mapping; no existing memory is
    // touched, and the result is checked before use.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(format!(
            "mmap of {len} bytes: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: `base..base + len` is the mapping made above.
    if unsafe { libc::madvise(base, len, libc::MADV_NOHUGEPAGE) } != 0 {
        return Err(format!(
            "madvise(MADV_NOHUGEPAGE): {}",
            std::io::Error::last_os_error()
        ));
    }
    let bytes = base.cast::<u8>();
    for off in (0..len).step_by(PAGE) {
        // SAFETY: `off < len`, inside the writable mapping made above,
        // which nothing else references.
        unsafe { bytes.add(off).write_volatile(1) };
    }
    for off in (PAGE..len).step_by(2 * PAGE) {
        // SAFETY: one page inside the mapping, which nothing references
        // and nothing touches again.
        if unsafe { libc::munmap(bytes.add(off).cast(), PAGE) } != 0 {
            return Err(format!("munmap: {}", std::io::Error::last_os_error()));
        }
    }
    // SAFETY: locks what is mapped now; no memory is changed.
    if unsafe { libc::mlockall(libc::MCL_CURRENT) } != 0 {
        return Err(format!("mlockall: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

fn main() -> ExitCode {
    let mib = match std::env::args().nth(1).map(|a| a.parse::<usize>()) {
        Some(Ok(m)) if m > 0 => m,
        _ => {
            eprintln!("usage: devlend-fragment MIB   (holds every other page of 2 x MIB MiB until killed)");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = fragment(mib) {
        eprintln!("devlend-fragment: {e}");
        return ExitCode::FAILURE;
    }
    println!("fragmented: {mib} MiB held, {mib} MiB given back in single pages");
    let _ = std::io::stdout().flush();
    loop {
        std::thread::park();
    }
}
