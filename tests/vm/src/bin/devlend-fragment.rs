//! `devlend-fragment FILE MIB`: writes FILE (on tmpfs) with MIB MiB,
//! page by page in a shuffled order, so that its pages are physically
//! scattered: tmpfs allocates a file's page when it is first written, and
//! the page allocator hands pages out roughly in physical order, so file
//! offset N lands wherever the N-th write did. A guest whose RAM is that
//! file, shared (`-object memory-backend-file,share=on,...`), has RAM in
//! which neighbouring guest pages are almost never neighbouring host
//! pages: the worst case for pinning and mapping, a run per page. The
//! benchmark runs it in a host (docs/performance.md, "Guest memory
//! backing").

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::process::ExitCode;

const PAGE: u64 = 4096;

/// A permutation of `0..n`: Fisher-Yates with a fixed xorshift seed, so
/// that runs are alike.
fn shuffled(n: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..n).collect();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
    v
}

fn write(path: &str, mib: u64) -> Result<(), String> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(path)
        .map_err(|e| format!("creating {path}: {e}"))?;
    file.set_len(mib << 20)
        .map_err(|e| format!("sizing {path}: {e}"))?;
    let mut page = [0u8; PAGE as usize];
    for n in shuffled((mib << 20) / PAGE) {
        // Not all zero, so that no page is left to a shared zero page.
        page[..8].copy_from_slice(&n.to_le_bytes());
        file.write_all_at(&page, n * PAGE)
            .map_err(|e| format!("writing {path}: {e}"))?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mib = args.get(1).and_then(|m| m.parse::<u64>().ok());
    let (Some(path), Some(mib)) = (args.first(), mib.filter(|&m| m > 0)) else {
        eprintln!("usage: devlend-fragment FILE MIB   (a file of MIB MiB, its pages written in shuffled order)");
        return ExitCode::from(2);
    };
    match write(path, mib) {
        Ok(()) => {
            println!("fragmented: {path}, {mib} MiB written page by page in shuffled order");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("devlend-fragment: {e}");
            ExitCode::FAILURE
        }
    }
}
