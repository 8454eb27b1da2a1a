//! A remote device (its mdev) as a VMM sees it: regions, DMA, interrupts.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use log::warn;
use vm_memory::bitmap::Bitmap;
use vm_memory::{GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion, MemoryRegionAddress};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use crate::backend::{KernelVfio, VfioBackend};
use crate::error::{Error, Result};
use crate::notify::NotifierSubscriber;
use crate::pci;
use crate::{
    VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_ERR_IRQ_INDEX, VFIO_PCI_MSIX_IRQ_INDEX,
    VFIO_PCI_REQ_IRQ_INDEX,
};

/// `/sys/bus/mdev/devices/<uuid>`.
pub fn mdev_path(uuid: &str) -> PathBuf {
    Path::new("/sys/bus/mdev/devices").join(uuid)
}

/// Registers eventfds as KVM irqfds. Implemented for `kvm_ioctls::VmFd`;
/// tests and other hypervisors bring their own.
///
/// Routing the GSI to the MSI address and data the guest programmed in its
/// (emulated) MSI-X table stays the VMM's job (`KVM_SET_GSI_ROUTING`).
pub trait IrqfdRegistrar: Send + Sync {
    /// `KVM_IRQFD`: signalling `fd` injects `gsi`.
    fn register_irqfd(&self, fd: &EventFd, gsi: u32) -> io::Result<()>;
    /// `KVM_IRQFD` with `KVM_IRQFD_FLAG_DEASSIGN`.
    fn unregister_irqfd(&self, fd: &EventFd, gsi: u32) -> io::Result<()>;
}

impl IrqfdRegistrar for kvm_ioctls::VmFd {
    fn register_irqfd(&self, fd: &EventFd, gsi: u32) -> io::Result<()> {
        kvm_ioctls::VmFd::register_irqfd(self, fd, gsi)
            .map_err(|e| io::Error::from_raw_os_error(e.errno()))
    }

    fn unregister_irqfd(&self, fd: &EventFd, gsi: u32) -> io::Result<()> {
        kvm_ioctls::VmFd::unregister_irqfd(self, fd, gsi)
            .map_err(|e| io::Error::from_raw_os_error(e.errno()))
    }
}

struct Irqfds {
    vm: Arc<dyn IrqfdRegistrar>,
    gsis: Vec<u32>,
}

/// A VFIO PCI device opened for a VM or a userspace driver.
///
/// Everything it sets up (DMA mappings, MSI-X eventfds and irqfds, ERR/REQ
/// notifiers) is undone when it is dropped, in reverse order.
pub struct RemoteDevice<B: VfioBackend = KernelVfio> {
    path: PathBuf,
    backend: Arc<B>,
    /// Guest memory kept alive while the device may DMA into it (clones of
    /// what was mapped, of whichever dirty-page bitmap the VMM uses).
    memory: Vec<Box<dyn std::any::Any + Send + Sync>>,
    mapped: Vec<(u64, u64)>,
    msix: Vec<EventFd>,
    irqfds: Option<Irqfds>,
    notifiers: Vec<u32>,
}

impl<B: VfioBackend> std::fmt::Debug for RemoteDevice<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteDevice")
            .field("path", &self.path)
            .field("mapped", &self.mapped)
            .field("msix_vectors", &self.msix.len())
            .finish()
    }
}

impl RemoteDevice<KernelVfio> {
    /// Opens the device at a sysfs path (an mdev, or a PCI function bound
    /// to vfio-pci).
    pub fn open(path: &Path) -> Result<Self> {
        Ok(Self::with_backend(path, KernelVfio::open(path)?))
    }

    /// Opens the mdev `/sys/bus/mdev/devices/<uuid>`.
    pub fn open_mdev(uuid: &str) -> Result<Self> {
        Self::open(&mdev_path(uuid))
    }
}

impl<B: VfioBackend> RemoteDevice<B> {
    /// Wraps an opened backend; `path` is used in error messages.
    pub fn with_backend(path: &Path, backend: B) -> Self {
        RemoteDevice {
            path: path.to_path_buf(),
            backend: Arc::new(backend),
            memory: Vec::new(),
            mapped: Vec::new(),
            msix: Vec::new(),
            irqfds: None,
            notifiers: Vec::new(),
        }
    }

    /// The sysfs path of the device.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The backend, for accesses this type does not wrap.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Reads `buf.len()` bytes at `offset` of a region.
    pub fn read(&self, region: u32, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.check_range(region, offset, buf.len())?;
        self.backend
            .read_region(region, offset, buf)
            .map_err(|source| Error::RegionRead {
                path: self.path.clone(),
                region,
                offset,
                len: buf.len(),
                source,
            })
    }

    /// Writes `buf` at `offset` of a region.
    pub fn write(&self, region: u32, offset: u64, buf: &[u8]) -> Result<()> {
        self.check_range(region, offset, buf.len())?;
        self.backend
            .write_region(region, offset, buf)
            .map_err(|source| Error::RegionWrite {
                path: self.path.clone(),
                region,
                offset,
                len: buf.len(),
                source,
            })
    }

    fn check_range(&self, region: u32, offset: u64, len: usize) -> Result<()> {
        let size = self.backend.region(region).size;
        match offset.checked_add(len as u64) {
            Some(end) if end <= size => Ok(()),
            _ => Err(Error::RegionRange {
                path: self.path.clone(),
                region,
                offset,
                len,
                size,
            }),
        }
    }

    /// Little-endian u16 from a region.
    pub fn read_u16(&self, region: u32, offset: u64) -> Result<u16> {
        let mut b = [0; 2];
        self.read(region, offset, &mut b)?;
        Ok(u16::from_le_bytes(b))
    }

    /// Little-endian u32 from a region.
    pub fn read_u32(&self, region: u32, offset: u64) -> Result<u32> {
        let mut b = [0; 4];
        self.read(region, offset, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// Little-endian u64 from a region, as one 8-byte access.
    pub fn read_u64(&self, region: u32, offset: u64) -> Result<u64> {
        let mut b = [0; 8];
        self.read(region, offset, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Little-endian u16 to a region.
    pub fn write_u16(&self, region: u32, offset: u64, v: u16) -> Result<()> {
        self.write(region, offset, &v.to_le_bytes())
    }

    /// Little-endian u32 to a region.
    pub fn write_u32(&self, region: u32, offset: u64, v: u32) -> Result<()> {
        self.write(region, offset, &v.to_le_bytes())
    }

    /// Little-endian u64 to a region, as two 4-byte accesses (low first), as
    /// NVMe and most devices accept.
    pub fn write_u64_split(&self, region: u32, offset: u64, v: u64) -> Result<()> {
        self.write_u32(region, offset, v as u32)?;
        self.write_u32(region, offset + 4, (v >> 32) as u32)
    }

    /// Vendor id, device id and class code from config space.
    pub fn ids(&self) -> Result<(u16, u16, u32)> {
        let cfg = VFIO_PCI_CONFIG_REGION_INDEX;
        Ok((
            self.read_u16(cfg, pci::VENDOR_ID)?,
            self.read_u16(cfg, pci::DEVICE_ID)?,
            pci::class_code(self.read_u32(cfg, pci::CLASS_REVISION)?),
        ))
    }

    /// Sets memory decode and Bus Master Enable (and INTx disable). On a
    /// devlend mdev, setting BME is what makes the lender map the DMA
    /// ranges, so map memory first.
    pub fn enable_bus_master(&self) -> Result<()> {
        let cfg = VFIO_PCI_CONFIG_REGION_INDEX;
        let cmd = self.read_u16(cfg, pci::COMMAND)?;
        self.write_u16(
            cfg,
            pci::COMMAND,
            cmd | pci::COMMAND_MEMORY | pci::COMMAND_MASTER | pci::COMMAND_INTX_DISABLE,
        )
    }

    /// Clears Bus Master Enable.
    pub fn disable_bus_master(&self) -> Result<()> {
        let cfg = VFIO_PCI_CONFIG_REGION_INDEX;
        let cmd = self.read_u16(cfg, pci::COMMAND)?;
        self.write_u16(cfg, pci::COMMAND, cmd & !pci::COMMAND_MASTER)
    }

    /// VFIO_DEVICE_RESET. On a devlend mdev the first reset is what borrows
    /// the device from its lender.
    pub fn reset(&self) -> io::Result<()> {
        self.backend.reset()
    }

    /// DMA-maps every region of `mem` at IOVA = guest-physical address. The
    /// device keeps a reference to the memory until it is unmapped, so the
    /// mappings never outlive it. If one region fails, those mapped by this
    /// call are unmapped again.
    ///
    /// Any dirty-page bitmap will do (cloud-hypervisor's
    /// `GuestMemoryMmap<AtomicBitmap>` as well as the default): the device's
    /// DMA writes are not tracked in it, as with any VFIO device.
    pub fn map_guest_memory<Bm>(&mut self, mem: &GuestMemoryMmap<Bm>) -> Result<()>
    where
        Bm: Bitmap + Send + Sync + 'static,
    {
        let first = self.mapped.len();
        for region in mem.iter() {
            let gpa = region.start_addr().0;
            let len = region.len();
            let host = region
                .get_host_address(MemoryRegionAddress(0))
                .map_err(|_| Error::GuestMemory {
                    path: self.path.clone(),
                    gpa,
                    len,
                })?;
            // SAFETY: `host` is the start of a mapping of `len` bytes owned by
            // an Arc'ed region of `mem`; a clone of `mem` is kept in
            // `self.memory` until every mapping made here is unmapped (in
            // `unmap_guest_memory` or on drop), so the memory stays mapped for
            // as long as the device may DMA into it. vm-memory only accesses
            // guest memory with volatile copies, which tolerate DMA.
            let res = unsafe { self.backend.dma_map(gpa, len, host) };
            if let Err(source) = res {
                let err = Error::DmaMap {
                    path: self.path.clone(),
                    iova: gpa,
                    size: len,
                    source,
                };
                for (iova, size) in self.mapped.drain(first..).rev() {
                    if let Err(e) = self.backend.dma_unmap(iova, size) {
                        warn!("{}: undoing DMA map of {iova:#x}: {e}", self.path.display());
                    }
                }
                return Err(err);
            }
            self.mapped.push((gpa, len));
        }
        if self.mapped.len() > first {
            self.memory.push(Box::new(mem.clone()));
        }
        Ok(())
    }

    /// IOVA ranges currently DMA-mapped.
    pub fn dma_mappings(&self) -> &[(u64, u64)] {
        &self.mapped
    }

    /// Unmaps everything [`RemoteDevice::map_guest_memory`] mapped and lets
    /// go of the memory. Stops at the first failure (the rest stays mapped,
    /// and the memory stays alive).
    pub fn unmap_guest_memory(&mut self) -> Result<()> {
        while let Some(&(iova, size)) = self.mapped.last() {
            self.backend
                .dma_unmap(iova, size)
                .map_err(|source| Error::DmaUnmap {
                    path: self.path.clone(),
                    iova,
                    size,
                    source,
                })?;
            self.mapped.pop();
        }
        self.memory.clear();
        Ok(())
    }

    /// MSI-X vectors the device offers.
    pub fn msix_count(&self) -> u32 {
        self.backend.irq_count(VFIO_PCI_MSIX_IRQ_INDEX)
    }

    /// Gives vectors `0..count` an eventfd each and hands them to
    /// `VFIO_DEVICE_SET_IRQS`; the device's interrupts then signal them. A
    /// userspace driver waits on them; a VMM registers them as irqfds with
    /// [`RemoteDevice::register_irqfds`].
    pub fn enable_msix(&mut self, count: u32) -> Result<&[EventFd]> {
        let available = self.msix_count();
        if count == 0 || count > available {
            return Err(Error::Vectors {
                path: self.path.clone(),
                index: VFIO_PCI_MSIX_IRQ_INDEX,
                available,
                wanted: count,
            });
        }
        self.disable_msix()?;
        let fds = (0..count)
            .map(|_| EventFd::new(EFD_NONBLOCK))
            .collect::<io::Result<Vec<_>>>()
            .map_err(|source| Error::EventFd {
                path: self.path.clone(),
                source,
            })?;
        let refs: Vec<&EventFd> = fds.iter().collect();
        self.backend
            .set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, &refs)
            .map_err(|source| Error::SetIrqs {
                path: self.path.clone(),
                index: VFIO_PCI_MSIX_IRQ_INDEX,
                count,
                source,
            })?;
        self.msix = fds;
        Ok(&self.msix)
    }

    /// The MSI-X eventfds, vector 0 first.
    pub fn msix_eventfds(&self) -> &[EventFd] {
        &self.msix
    }

    /// Registers the eventfd of vector `i` as a KVM irqfd for `gsis[i]`, so
    /// the device's interrupts go to the guest without passing through a
    /// VMM thread. `gsis` must have one entry per enabled vector. On failure
    /// the ones registered are unregistered again.
    pub fn register_irqfds(&mut self, vm: Arc<dyn IrqfdRegistrar>, gsis: &[u32]) -> Result<()> {
        if gsis.len() != self.msix.len() {
            return Err(Error::Vectors {
                path: self.path.clone(),
                index: VFIO_PCI_MSIX_IRQ_INDEX,
                available: self.msix.len() as u32,
                wanted: gsis.len() as u32,
            });
        }
        self.unregister_irqfds();
        for (vector, (fd, &gsi)) in self.msix.iter().zip(gsis).enumerate() {
            if let Err(source) = vm.register_irqfd(fd, gsi) {
                for (fd, &gsi) in self.msix.iter().zip(gsis).take(vector) {
                    if let Err(e) = vm.unregister_irqfd(fd, gsi) {
                        warn!("{}: undoing irqfd on GSI {gsi}: {e}", self.path.display());
                    }
                }
                return Err(Error::Irqfd {
                    path: self.path.clone(),
                    vector: vector as u32,
                    gsi,
                    source,
                });
            }
        }
        self.irqfds = Some(Irqfds {
            vm,
            gsis: gsis.to_vec(),
        });
        Ok(())
    }

    fn unregister_irqfds(&mut self) {
        if let Some(irqfds) = self.irqfds.take() {
            for (fd, &gsi) in self.msix.iter().zip(&irqfds.gsis) {
                if let Err(e) = irqfds.vm.unregister_irqfd(fd, gsi) {
                    warn!(
                        "{}: unregistering irqfd on GSI {gsi}: {e}",
                        self.path.display()
                    );
                }
            }
        }
    }

    /// Unregisters the irqfds, disables MSI-X on the device and closes the
    /// eventfds.
    pub fn disable_msix(&mut self) -> Result<()> {
        self.unregister_irqfds();
        if !self.msix.is_empty() {
            self.backend
                .disable_irqs(VFIO_PCI_MSIX_IRQ_INDEX)
                .map_err(|source| Error::SetIrqs {
                    path: self.path.clone(),
                    index: VFIO_PCI_MSIX_IRQ_INDEX,
                    count: 0,
                    source,
                })?;
            self.msix.clear();
        }
        Ok(())
    }

    /// Sets up the device's error (ERR) and request (REQ) notifications, each
    /// an eventfd, and returns an event-manager subscriber that calls
    /// `handler` when one fires. A devlend mdev signals ERR when its lender
    /// goes down or takes the device back (stop the guest: I/O fails from
    /// now on), and REQ when the host wants the device back (unplug it).
    /// Fails only if the device has neither.
    pub fn enable_notifiers<F>(&mut self, handler: F) -> Result<NotifierSubscriber>
    where
        F: FnMut(&Path, crate::DeviceEvent) + Send + 'static,
    {
        let mut err = None;
        let mut req = None;
        for (index, slot) in [
            (VFIO_PCI_ERR_IRQ_INDEX, &mut err),
            (VFIO_PCI_REQ_IRQ_INDEX, &mut req),
        ] {
            if self.backend.irq_count(index) == 0 {
                continue;
            }
            let fd = EventFd::new(EFD_NONBLOCK).map_err(|source| Error::EventFd {
                path: self.path.clone(),
                source,
            })?;
            self.backend
                .set_irqs(index, &[&fd])
                .map_err(|source| Error::SetIrqs {
                    path: self.path.clone(),
                    index,
                    count: 1,
                    source,
                })?;
            self.notifiers.push(index);
            *slot = Some(fd);
        }
        if err.is_none() && req.is_none() {
            return Err(Error::NoNotifier {
                path: self.path.clone(),
                what: "error or request",
                index: VFIO_PCI_ERR_IRQ_INDEX,
            });
        }
        Ok(NotifierSubscriber::new(
            self.path.clone(),
            err,
            req,
            Box::new(handler),
        ))
    }
}

impl<B: VfioBackend> Drop for RemoteDevice<B> {
    fn drop(&mut self) {
        if let Err(e) = self.disable_msix() {
            warn!("{e}");
        }
        for index in std::mem::take(&mut self.notifiers) {
            if let Err(e) = self.backend.disable_irqs(index) {
                warn!("{}: disabling irq index {index}: {e}", self.path.display());
            }
        }
        if let Err(e) = self.unmap_guest_memory() {
            // The memory stays alive (and leaks) rather than being freed
            // under a live DMA mapping.
            warn!("{e}");
            std::mem::forget(std::mem::take(&mut self.memory));
        }
    }
}
