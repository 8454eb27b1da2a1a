//! The VFIO syscalls, behind a small trait.
//!
//! [`VfioBackend`] is everything the rest of the crate asks of VFIO: region
//! geometry and I/O, interrupt counts and eventfds, DMA map and unmap, reset.
//! [`KernelVfio`] does it with vfio-ioctls on a container, group and device;
//! `mock::MockVfio` (feature `mock`) does it in memory, so unit tests need no
//! `/dev/vfio`, and can inject failures.

use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use vfio_ioctls::{VfioContainer, VfioDevice, VfioDeviceFd, VfioOps};
use vmm_sys_util::eventfd::EventFd;

use crate::error::{Error, Result};

/// `_IO(VFIO_TYPE, VFIO_BASE + 11)` from `<linux/vfio.h>`.
const VFIO_DEVICE_RESET: u64 = (b';' as u64) << 8 | (100 + 11);

/// Geometry of one VFIO region.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegionInfo {
    /// Bytes; 0 when the region does not exist.
    pub size: u64,
    /// `VFIO_REGION_INFO_FLAG_*`.
    pub flags: u32,
}

/// The VFIO operations the crate needs. Offsets are relative to the region.
pub trait VfioBackend: Send + Sync {
    /// The region's geometry (size 0 if the device has no such region).
    fn region(&self, index: u32) -> RegionInfo;
    /// Vectors of an irq index (0 if none).
    fn irq_count(&self, index: u32) -> u32;
    /// Reads `buf.len()` bytes at `offset` of region `index`.
    fn read_region(&self, index: u32, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Writes `buf` at `offset` of region `index`.
    fn write_region(&self, index: u32, offset: u64, buf: &[u8]) -> io::Result<()>;
    /// Hands one eventfd per vector, from vector 0, to `VFIO_DEVICE_SET_IRQS`.
    fn set_irqs(&self, index: u32, fds: &[&EventFd]) -> io::Result<()>;
    /// Disables every vector of an irq index.
    fn disable_irqs(&self, index: u32) -> io::Result<()>;
    /// Maps `size` bytes at `host_addr` for device DMA at `iova`.
    ///
    /// # Safety
    /// The memory must stay mapped until [`VfioBackend::dma_unmap`] of the same
    /// range, and must only be accessed in ways that tolerate concurrent DMA
    /// (volatile or atomic accesses, as vm-memory does); see
    /// `vfio_ioctls::VfioOps::vfio_dma_map`.
    unsafe fn dma_map(&self, iova: u64, size: u64, host_addr: *mut u8) -> io::Result<()>;
    /// Unmaps a range mapped by [`VfioBackend::dma_map`].
    fn dma_unmap(&self, iova: u64, size: u64) -> io::Result<()>;
    /// VFIO_DEVICE_RESET.
    fn reset(&self) -> io::Result<()>;
}

/// A device opened through the kernel: container, group and device fd.
pub struct KernelVfio {
    path: PathBuf,
    // Dropped in this order: the device (vfio-ioctls looks its group up
    // through `shadow` after closing it), then the shadow directory, then
    // the container.
    device: VfioDevice,
    _shadow: Shadow,
    container: Arc<VfioContainer>,
}

/// A private directory `<tmp>/devlend-vfio-<pid>-<n>/<device name>/` whose
/// only entry is an `iommu_group` link to the device's group.
///
/// vfio-ioctls finds a device's group from `<sysfs path>/iommu_group`, also
/// when the device is dropped, after its fd is closed, and panics if it
/// cannot. Closing an mdev's fd is what lets a pending `remove` of the mdev
/// finish, which deletes that sysfs directory: vfio-ioctls then panics in
/// drop. Opening the device through this copy of the one link it needs
/// avoids the race; the name (the mdev's UUID or the PCI address) is the
/// same, so VFIO_GROUP_GET_DEVICE_FD sees no difference.
struct Shadow {
    root: PathBuf,
    device: PathBuf,
}

impl Shadow {
    fn new(path: &Path) -> io::Result<Self> {
        use std::os::unix::fs::DirBuilderExt;
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);

        let group = std::fs::canonicalize(path.join("iommu_group"))?;
        let name = path
            .file_name()
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        let root = std::env::temp_dir().join(format!(
            "devlend-vfio-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::DirBuilder::new().mode(0o700).create(&root)?;
        let shadow = Shadow {
            device: root.join(name),
            root,
        };
        std::fs::create_dir(&shadow.device)?;
        std::os::unix::fs::symlink(group, shadow.device.join("iommu_group"))?;
        Ok(shadow)
    }
}

impl Drop for Shadow {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

impl std::fmt::Debug for KernelVfio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelVfio")
            .field("path", &self.path)
            .finish()
    }
}

impl KernelVfio {
    /// Opens the device at `path` (`/sys/bus/mdev/devices/<uuid>` or
    /// `/sys/bus/pci/devices/<bdf>`) in a new type-1 container.
    pub fn open(path: &Path) -> Result<Self> {
        Self::open_with_kvm(path, None)
    }

    /// Like [`KernelVfio::open`], also telling KVM's VFIO device about the
    /// group (a VMM passes the handle of the `KVM_DEV_TYPE_VFIO` device it
    /// created, so KVM knows about non-coherent DMA and the group).
    pub fn open_with_kvm(path: &Path, kvm_vfio: Option<Arc<VfioDeviceFd>>) -> Result<Self> {
        let shadow = Shadow::new(path).map_err(|source| Error::IommuGroup {
            path: path.to_path_buf(),
            source,
        })?;
        let container =
            Arc::new(VfioContainer::new(kvm_vfio).map_err(|source| Error::Container { source })?);
        let ops: Arc<dyn VfioOps> = container.clone();
        let device =
            VfioDevice::new(&shadow.device, ops, false).map_err(|source| Error::OpenDevice {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(KernelVfio {
            path: path.to_path_buf(),
            device,
            _shadow: shadow,
            container,
        })
    }

    /// The sysfs path the device was opened by.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// pread at `offset` of region `index` with no bounds check of our
    /// own, so that tests can see the kernel refuse an access outside the
    /// region. One syscall; returns the bytes read.
    pub fn read_unchecked(&self, index: u32, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let pos = self.device.get_region_offset(index) + offset;
        // SAFETY: the fd is the device fd `self.device` owns; `buf` is valid
        // for writes of `buf.len()` bytes.
        let n = unsafe {
            libc::pread(
                self.device.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                pos as libc::off_t,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    fn check(&self, index: u32, offset: u64, len: usize) -> io::Result<u64> {
        let size = self.device.get_region_size(index);
        let end = offset.checked_add(len as u64);
        if end.is_none_or(|end| end > size) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("access {offset:#x}+{len} outside region {index} of {size:#x} bytes"),
            ));
        }
        Ok(self.device.get_region_offset(index) + offset)
    }
}

fn vfio_err(e: vfio_ioctls::VfioError) -> io::Error {
    io::Error::other(e.to_string())
}

impl VfioBackend for KernelVfio {
    fn region(&self, index: u32) -> RegionInfo {
        RegionInfo {
            size: self.device.get_region_size(index),
            flags: self.device.get_region_flags(index),
        }
    }

    fn irq_count(&self, index: u32) -> u32 {
        self.device.get_irq_info(index).map_or(0, |irq| irq.count)
    }

    // vfio-ioctls' region_read/region_write only log failures; a remote
    // device's BAR access can fail (the lender went away), so do the I/O
    // here and report it.
    fn read_region(&self, index: u32, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let pos = self.check(index, offset, buf.len())?;
        let fd = self.device.as_raw_fd();
        positional_io(buf.len(), pos, io::ErrorKind::UnexpectedEof, |done, at| {
            let rest = &mut buf[done..];
            // SAFETY: the fd is the device fd `self.device` owns for as long
            // as `self` lives; `rest` is valid for writes of `rest.len()` bytes.
            unsafe { libc::pread(fd, rest.as_mut_ptr().cast(), rest.len(), at as libc::off_t) }
        })
    }

    fn write_region(&self, index: u32, offset: u64, buf: &[u8]) -> io::Result<()> {
        let pos = self.check(index, offset, buf.len())?;
        let fd = self.device.as_raw_fd();
        positional_io(buf.len(), pos, io::ErrorKind::WriteZero, |done, at| {
            let rest = &buf[done..];
            // SAFETY: as in read_region; `rest` is valid for reads of
            // `rest.len()` bytes.
            unsafe { libc::pwrite(fd, rest.as_ptr().cast(), rest.len(), at as libc::off_t) }
        })
    }

    fn set_irqs(&self, index: u32, fds: &[&EventFd]) -> io::Result<()> {
        self.device
            .enable_irq(index, fds.to_vec())
            .map_err(vfio_err)
    }

    fn disable_irqs(&self, index: u32) -> io::Result<()> {
        self.device.disable_irq(index).map_err(vfio_err)
    }

    unsafe fn dma_map(&self, iova: u64, size: u64, host_addr: *mut u8) -> io::Result<()> {
        let size =
            usize::try_from(size).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: the caller upholds vfio_dma_map's contract (see the trait).
        unsafe { self.container.vfio_dma_map(iova, size, host_addr) }.map_err(vfio_err)
    }

    fn dma_unmap(&self, iova: u64, size: u64) -> io::Result<()> {
        let size =
            usize::try_from(size).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        self.container.vfio_dma_unmap(iova, size).map_err(vfio_err)
    }

    // vfio-ioctls' reset() hides both "not resettable" and failures.
    fn reset(&self) -> io::Result<()> {
        // SAFETY: VFIO_DEVICE_RESET takes no argument; the fd is the device
        // fd `self.device` owns.
        let ret = unsafe { libc::ioctl(self.device.as_raw_fd(), VFIO_DEVICE_RESET as _) };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// A shared backend is a backend (tests keep a handle to a mock this way).
impl<T: VfioBackend + ?Sized> VfioBackend for Arc<T> {
    fn region(&self, index: u32) -> RegionInfo {
        (**self).region(index)
    }
    fn irq_count(&self, index: u32) -> u32 {
        (**self).irq_count(index)
    }
    fn read_region(&self, index: u32, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        (**self).read_region(index, offset, buf)
    }
    fn write_region(&self, index: u32, offset: u64, buf: &[u8]) -> io::Result<()> {
        (**self).write_region(index, offset, buf)
    }
    fn set_irqs(&self, index: u32, fds: &[&EventFd]) -> io::Result<()> {
        (**self).set_irqs(index, fds)
    }
    fn disable_irqs(&self, index: u32) -> io::Result<()> {
        (**self).disable_irqs(index)
    }
    unsafe fn dma_map(&self, iova: u64, size: u64, host_addr: *mut u8) -> io::Result<()> {
        // SAFETY: the caller upholds the contract, which is the same.
        unsafe { (**self).dma_map(iova, size, host_addr) }
    }
    fn dma_unmap(&self, iova: u64, size: u64) -> io::Result<()> {
        (**self).dma_unmap(iova, size)
    }
    fn reset(&self) -> io::Result<()> {
        (**self).reset()
    }
}

/// Moves `len` bytes at device offset `pos` with `op(done, offset)` (a
/// pread or pwrite of what is left), retrying short transfers and EINTR;
/// a transfer of 0 bytes is `at_zero`.
fn positional_io(
    len: usize,
    mut pos: u64,
    at_zero: io::ErrorKind,
    mut op: impl FnMut(usize, u64) -> isize,
) -> io::Result<()> {
    let mut done = 0;
    while done < len {
        match op(done, pos) {
            n if n < 0 => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            0 => return Err(at_zero.into()),
            n => {
                done += n as usize;
                pos += n as u64;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shadow_keeps_the_group_link_after_the_device_goes() {
        let t = tempfile::tempdir().unwrap();
        let groups = t.path().join("kernel/iommu_groups/17");
        std::fs::create_dir_all(&groups).unwrap();
        let dev = t
            .path()
            .join("devices/83b8f4f2-509f-382f-3c1e-e6bfe0fa1001");
        std::fs::create_dir_all(&dev).unwrap();
        std::os::unix::fs::symlink("../../kernel/iommu_groups/17", dev.join("iommu_group"))
            .unwrap();
        let s = Shadow::new(&dev).unwrap();
        assert_eq!(s.device.file_name(), dev.file_name(), "same device name");
        std::fs::remove_dir_all(&dev).unwrap();
        let link = std::fs::read_link(s.device.join("iommu_group")).unwrap();
        assert_eq!(link.file_name().unwrap(), "17");
        let root = s.root.clone();
        drop(s);
        assert!(!root.exists(), "removed on drop");
        assert!(Shadow::new(&dev).is_err(), "a device that is gone");
    }
}
