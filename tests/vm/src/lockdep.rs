//! Lockdep's reports in a host's kernel log (debug kernel only), and the
//! one lock cycle that is Linux's own: the fault checks fail on every other
//! report.
//!
//! `vfio_iommu_type1` calls a device's `dma_unmap` with its
//! `device_list_lock` held and expects the driver to call
//! `vfio_unpin_pages()` in it, which takes `iommu->lock`; opening a device
//! (`vfio_iommu_type1_register_device`) takes the two the other way round.
//! Every mdev driver that pins pages closes that cycle (i915's kvmgt also
//! pins under a lock of its own that its `dma_unmap` takes, as devlend's
//! borrower does with its `dma_lock`). docs/testing.md, "The
//! debug kernel", says why devlend cannot break it and why its own lock adds
//! no deadlock the cycle does not already have.

use std::collections::BTreeSet;

/// The header line of a lockdep cycle report.
const CYCLE: &str = "WARNING: possible circular locking dependency detected";
/// Where lockdep's report ends and the backtrace starts.
const BACKTRACE: &str = "stack backtrace:";

/// The lock classes of `vfio_iommu_type1`'s own cycle; both must be in it.
const VFIO_TYPE1: [&str; 2] = ["&iommu->device_list_lock", "&iommu->lock"];
/// The borrower's lock that its `dma_unmap` takes and that is held while it
/// pins; it may be in the cycle too.
const BORROWER_DMA: &str = "&v->dma_lock";

/// Lock classes a report names: each `(&name){` in its lines.
fn lock_classes<'a>(report: &[&'a str]) -> BTreeSet<&'a str> {
    let mut names = BTreeSet::new();
    for line in report {
        let mut rest = *line;
        while let Some(open) = rest.find("(&") {
            let tail = &rest[open + 1..];
            match tail.find("){") {
                Some(close) => {
                    names.insert(&tail[..close]);
                    rest = &tail[close..];
                }
                None => break,
            }
        }
    }
    names
}

/// Whether the lockdep cycle report starting at `lines[at]` is
/// `vfio_iommu_type1`'s own (see the module's comment): it names both of its
/// locks and nothing else but the borrower's `dma_lock`.
pub fn is_vfio_type1_cycle(lines: &[&str], at: usize) -> bool {
    if !lines.get(at).is_some_and(|l| l.contains(CYCLE)) {
        return false;
    }
    let end = lines[at + 1..]
        .iter()
        .position(|l| l.contains(BACKTRACE) || l.contains(CYCLE))
        .map_or(lines.len(), |n| at + 1 + n);
    let names = lock_classes(&lines[at + 1..end]);
    VFIO_TYPE1.iter().all(|n| names.contains(n))
        && names
            .iter()
            .all(|n| VFIO_TYPE1.contains(n) || *n == BORROWER_DMA)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The report the debug kernel wrote in kill_borrower_under_kvm_guest
    /// (2026-11-23), trimmed to its lock lines.
    const SEEN: &str = "\
[  242.633787] WARNING: possible circular locking dependency detected
[  242.636026] qemu-system-x86/271 is trying to acquire lock:
[  242.636467] ff110000058fc798 (&v->dma_lock){+.+.}-{3:3}, at: dl_dma_unmap_range+0x42/0x2e0 [devlend_borrower]
               but task is already holding lock:
[  242.642182] ff1100000314d930 (&iommu->device_list_lock){+.+.}-{3:3}, at: vfio_iommu_type1_ioctl+0x2107/0x3da0 [vfio_iommu_type1]
               -> #2 (&iommu->device_list_lock){+.+.}-{3:3}:
               -> #1 (&iommu->lock){+.+.}-{3:3}:
               -> #0 (&v->dma_lock){+.+.}-{3:3}:
        lock(&iommu->lock);
[  242.660000] stack backtrace:
[  242.660001] (&b->lock){+.+.} in a later line is not part of the report";

    #[test]
    fn the_vfio_type1_cycle_is_recognised() {
        let lines: Vec<&str> = SEEN.lines().collect();
        assert!(is_vfio_type1_cycle(&lines, 0));
        assert!(!is_vfio_type1_cycle(&lines, 1));
    }

    #[test]
    fn a_cycle_with_another_lock_is_not() {
        let text = SEEN.replace("#1 (&iommu->lock)", "#1 (&fab->lock)");
        let lines: Vec<&str> = text.lines().collect();
        assert!(!is_vfio_type1_cycle(&lines, 0));
        let text = SEEN.replace("(&v->dma_lock){+.+.}-{3:3}:", "(&v->lock){+.+.}-{3:3}:");
        let lines: Vec<&str> = text.lines().collect();
        assert!(!is_vfio_type1_cycle(&lines, 0));
    }

    #[test]
    fn a_cycle_of_only_one_vfio_lock_is_not() {
        let text = SEEN.replace("&iommu->device_list_lock", "&v->lock");
        let lines: Vec<&str> = text.lines().collect();
        assert!(!is_vfio_type1_cycle(&lines, 0));
    }

    #[test]
    fn lock_classes_reads_every_name_on_a_line() {
        let names = lock_classes(&["x (&a->b){+.+.} y (&c){....}", "lock(&d);"]);
        assert_eq!(names.into_iter().collect::<Vec<_>>(), ["&a->b", "&c"]);
    }
}
