//! Attach a devlend remote device to a rust-vmm VMM through VFIO.
//!
//! A borrower host exposes each remote device as an mdev
//! (`/sys/bus/mdev/devices/<uuid>`, see `docs/lending.md`). To a VMM it is a
//! VFIO PCI device like any other, so this crate is the usual VFIO glue, kept
//! small and checked:
//!
//! - [`KernelVfio`] opens the container, the IOMMU group and the device with
//!   vfio-ioctls; every syscall the rest of the crate needs goes through the
//!   [`VfioBackend`] trait, which `mock::MockVfio` (feature `mock`, a test
//!   double) implements in memory for tests (no `/dev/vfio` needed,
//!   failures injectable).
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
//!
//! The userspace NVMe test driver built on it (`devlend-nvme-test`) is a
//! crate of its own (`vmm-glue/testbed/nvme-test`), not part of this API.
//!
//! # Attaching an mdev to a VM
//!
//! ```no_run
//! use std::sync::Arc;
//! use devlend_vfio::{IrqfdRegistrar, KernelVfio, RemoteDevice, mdev_path};
//! use vfio_ioctls::VfioDeviceFd;
//! use vm_memory::{GuestAddress, GuestMemoryMmap};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mem: GuestMemoryMmap = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 512 << 20)])?;
//! let vm = Arc::new(kvm_ioctls::Kvm::new()?.create_vm()?);
//! // ... memslots, irqchip, vCPUs ...
//! let mut cd = kvm_bindings::kvm_create_device {
//!     type_: kvm_bindings::kvm_device_type_KVM_DEV_TYPE_VFIO,
//!     fd: 0,
//!     flags: 0,
//! };
//! let kvm_vfio = Arc::new(VfioDeviceFd::new_from_kvm(vm.create_device(&mut cd)?));
//! let path = mdev_path("83b8f4f2-509f-382f-3c1e-e6bfe0fa1001");
//! let mut dev = RemoteDevice::with_backend(&path, KernelVfio::open_with_kvm(&path, Some(kvm_vfio))?);
//! dev.map_guest_memory(&mem)?; // IOVA = guest-physical, undone on drop
//! let n = dev.msix_count();
//! dev.enable_msix(n)?; // one EventFd per vector, handed to VFIO_DEVICE_SET_IRQS
//! let gsis: Vec<u32> = (0..n).map(|i| 24 + i).collect(); // routed by the VMM (KVM_SET_GSI_ROUTING)
//! dev.register_irqfds(vm.clone() as Arc<dyn IrqfdRegistrar>, &gsis)?;
//! let notifier = dev.enable_notifiers(|path, event| {
//!     // DeviceEvent::Error: stop the guest; DeviceEvent::Request: unplug the device
//!     eprintln!("{}: {event:?}", path.display());
//! })?;
//! // event_manager.add_subscriber(Box::new(notifier));
//! # drop(notifier);
//! # Ok(())
//! # }
//! ```
//!
//! `examples/kvm_attach.rs` does all of it, GSI routing included.

mod backend;
mod device;
mod error;
#[cfg(any(test, feature = "mock"))]
pub mod mock;
mod notify;
pub mod pci;

pub use backend::{KernelVfio, RegionInfo, VfioBackend};
pub use device::{mdev_path, IrqfdRegistrar, RemoteDevice};
pub use error::{Error, Result};
pub use notify::{DeviceEvent, NotifierSubscriber};

pub use vfio_bindings::bindings::vfio::{
    VFIO_PCI_BAR0_REGION_INDEX, VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_ERR_IRQ_INDEX,
    VFIO_PCI_MSIX_IRQ_INDEX, VFIO_PCI_REQ_IRQ_INDEX,
};
