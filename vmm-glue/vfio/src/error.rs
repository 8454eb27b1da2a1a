//! Errors of the VFIO layer. Every variant names the device (its sysfs path,
//! which for an mdev ends in its UUID) and what was being done.

use std::io;
use std::path::PathBuf;

/// Something the VFIO layer could not do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `/dev/vfio/vfio` could not be opened or set up.
    #[error("cannot open the VFIO container /dev/vfio/vfio: {source} (is the vfio module loaded? are you root?)")]
    Container {
        /// What vfio-ioctls reported.
        source: vfio_ioctls::VfioError,
    },
    /// The device (or its IOMMU group) could not be opened.
    #[error("cannot open VFIO device {path}: {source} (for an mdev, `devlend mdev list` and `devlend remote` show whether its remote device is still there and free; a PCI function must be bound to vfio-pci; `dmesg` says more)")]
    OpenDevice {
        /// sysfs path of the device.
        path: PathBuf,
        /// What vfio-ioctls reported.
        source: vfio_ioctls::VfioError,
    },
    /// The device's IOMMU group could not be found (or remembered).
    #[error("cannot find the IOMMU group of {path}: {source} (is the device still there? `ls -l {path}/iommu_group`)")]
    IommuGroup {
        /// sysfs path of the device.
        path: PathBuf,
        /// The system error.
        source: io::Error,
    },
    /// A region index the device does not have, or an access outside it.
    #[error("{path}: region {region}: access at {offset:#x}+{len} is outside the region ({size:#x} bytes)")]
    RegionRange {
        /// sysfs path of the device.
        path: PathBuf,
        /// VFIO region index.
        region: u32,
        /// Offset in the region.
        offset: u64,
        /// Bytes accessed.
        len: usize,
        /// Region size (0: no such region).
        size: u64,
    },
    /// pread on the device fd failed.
    #[error("{path}: reading region {region} at {offset:#x} ({len} bytes): {source}")]
    RegionRead {
        /// sysfs path of the device.
        path: PathBuf,
        /// VFIO region index.
        region: u32,
        /// Offset in the region.
        offset: u64,
        /// Bytes wanted.
        len: usize,
        /// The system error.
        source: io::Error,
    },
    /// pwrite on the device fd failed.
    #[error("{path}: writing region {region} at {offset:#x} ({len} bytes): {source}")]
    RegionWrite {
        /// sysfs path of the device.
        path: PathBuf,
        /// VFIO region index.
        region: u32,
        /// Offset in the region.
        offset: u64,
        /// Bytes written.
        len: usize,
        /// The system error.
        source: io::Error,
    },
    /// VFIO_IOMMU_MAP_DMA failed.
    #[error("{path}: DMA map of IOVA {iova:#x}, {size:#x} bytes: {source}")]
    DmaMap {
        /// sysfs path of the device.
        path: PathBuf,
        /// IO virtual address (guest-physical for a VM).
        iova: u64,
        /// Bytes.
        size: u64,
        /// The system error.
        source: io::Error,
    },
    /// VFIO_IOMMU_UNMAP_DMA failed.
    #[error("{path}: DMA unmap of IOVA {iova:#x}, {size:#x} bytes: {source}")]
    DmaUnmap {
        /// sysfs path of the device.
        path: PathBuf,
        /// IO virtual address.
        iova: u64,
        /// Bytes.
        size: u64,
        /// The system error.
        source: io::Error,
    },
    /// A guest memory region could not be DMA-mapped as a whole.
    #[error("{path}: guest memory region at {gpa:#x} ({len:#x} bytes) has no host mapping")]
    GuestMemory {
        /// sysfs path of the device.
        path: PathBuf,
        /// Guest-physical start of the region.
        gpa: u64,
        /// Region length.
        len: u64,
    },
    /// More interrupt vectors were asked for than the device has.
    #[error("{path}: irq index {index} has {available} vectors, {wanted} wanted")]
    Vectors {
        /// sysfs path of the device.
        path: PathBuf,
        /// VFIO irq index.
        index: u32,
        /// Vectors the device reports.
        available: u32,
        /// Vectors asked for.
        wanted: u32,
    },
    /// An eventfd could not be created.
    #[error("{path}: cannot create an eventfd: {source}")]
    EventFd {
        /// sysfs path of the device.
        path: PathBuf,
        /// The system error.
        source: io::Error,
    },
    /// VFIO_DEVICE_SET_IRQS failed.
    #[error("{path}: VFIO_DEVICE_SET_IRQS on irq index {index} with {count} eventfds: {source}")]
    SetIrqs {
        /// sysfs path of the device.
        path: PathBuf,
        /// VFIO irq index.
        index: u32,
        /// Eventfds handed over (0: disabling).
        count: u32,
        /// The system error.
        source: io::Error,
    },
    /// KVM refused an irqfd.
    #[error("{path}: KVM irqfd for MSI-X vector {vector} on GSI {gsi}: {source}")]
    Irqfd {
        /// sysfs path of the device.
        path: PathBuf,
        /// MSI-X vector.
        vector: u32,
        /// The guest GSI it was routed to.
        gsi: u32,
        /// The system error.
        source: io::Error,
    },
    /// The device cannot deliver an ERR or REQ notification.
    #[error("{path}: the device has no {what} notification (irq index {index} has no vector)")]
    NoNotifier {
        /// sysfs path of the device.
        path: PathBuf,
        /// "error" or "request".
        what: &'static str,
        /// VFIO irq index.
        index: u32,
    },
}

/// Result of the VFIO layer.
pub type Result<T> = std::result::Result<T, Error>;
