//! Attach a devlend remote device to a rust-vmm VMM through VFIO.
//!
//! A borrower host exposes each remote device as an mdev
//! (`/sys/bus/mdev/devices/<uuid>`, see `docs/lending.md`). To a VMM it is a
//! VFIO PCI device like any other, so this crate is the usual VFIO glue, kept
//! small and checked:
//!
//! - [`KernelVfio`] opens the container, the IOMMU group and the device with
//!   vfio-ioctls; every syscall the rest of the crate needs goes through the
//!   [`VfioBackend`] trait, which [`mock::MockVfio`] implements in memory for
//!   unit tests (no `/dev/vfio` needed, failures injectable).
//! - [`RemoteDevice`] maps a vm-memory [`vm_memory::GuestMemoryMmap`] for DMA
//!   (IOVA = guest-physical address; it keeps the memory alive while mapped),
//!   gives every MSI-X vector an [`EventFd`](vmm_sys_util::eventfd::EventFd)
//!   handed to `VFIO_DEVICE_SET_IRQS` and optionally registered as a KVM irqfd
//!   ([`IrqfdRegistrar`], implemented for `kvm_ioctls::VmFd`), so interrupts
//!   never pass through a VMM thread, and undoes all of it on drop.
//! - [`NotifierSubscriber`] is an event-manager subscriber for the device's
//!   ERR and REQ notifications (the lender took the device back or went away;
//!   the host wants the device back), so the VMM can stop the guest or unplug
//!   the device cleanly.
//! - [`nvme`] is a minimal polled-by-interrupt NVMe driver on top, used by the
//!   `devlend-nvme-test` program to exercise a remote NVMe without a guest.

mod backend;
mod device;
mod error;
pub mod mock;
mod notify;
pub mod nvme;
pub mod pci;

pub use backend::{KernelVfio, RegionInfo, VfioBackend};
pub use device::{mdev_path, IrqfdRegistrar, RemoteDevice};
pub use error::{Error, Result};
pub use notify::{DeviceEvent, NotifierSubscriber};

pub use vfio_bindings::bindings::vfio::{
    VFIO_PCI_BAR0_REGION_INDEX, VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_ERR_IRQ_INDEX,
    VFIO_PCI_MSIX_IRQ_INDEX, VFIO_PCI_REQ_IRQ_INDEX,
};
