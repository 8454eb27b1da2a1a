//! The six suites of the two-host topology (fabric, lending, ntb,
//! isolation, fuzz_peer, fuzz_guest) on one cluster, in that order: what
//! `./test.sh` runs. Each suite's checks keep its reset, run before each
//! of them as in the suite's own binary, so they start from the state
//! they would there; one boot and one build instead of six. Each suite
//! still runs alone as its own binary (`cargo test -p devlend-vmtests
//! --test fabric`).

#[allow(dead_code)]
#[path = "fabric.rs"]
mod fabric_suite;
#[allow(dead_code)]
#[path = "fuzz_guest.rs"]
mod fuzz_guest_suite;
#[allow(dead_code)]
#[path = "fuzz_peer.rs"]
mod fuzz_peer_suite;
#[allow(dead_code)]
#[path = "isolation.rs"]
mod isolation_suite;
#[allow(dead_code)]
#[path = "lending.rs"]
mod lending_suite;
#[allow(dead_code)]
#[path = "ntb.rs"]
mod ntb_suite;

use devlend_vmtests::Suite;

fn main() {
    Suite::merged(
        "twohost",
        vec![
            fabric_suite::suite(),
            lending_suite::suite(),
            ntb_suite::suite(),
            isolation_suite::suite(),
            fuzz_peer_suite::suite(),
            fuzz_guest_suite::suite(),
        ],
    )
    .run(devlend_vmtests::twohost::boot)
}
