//! An in-memory [`VfioBackend`] for tests: regions are byte vectors, calls
//! are recorded, and failures can be injected.

use std::collections::HashMap;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};

use vmm_sys_util::eventfd::EventFd;

use crate::backend::{RegionInfo, VfioBackend};

/// A recorded `set_irqs`/`disable_irqs` call: irq index and the raw fds
/// (empty when disabling).
pub type IrqCall = (u32, Vec<i32>);

/// Called after every region write with the region index, offset and
/// bytes, so a test can make the mock behave like a device.
pub type WriteHook = Arc<dyn Fn(&MockVfio, u32, u64, &[u8]) + Send + Sync>;

/// In-memory VFIO device.
#[derive(Default)]
pub struct MockVfio {
    /// Clones of the eventfds handed to set_irqs, per irq index.
    eventfds: Mutex<HashMap<u32, Vec<EventFd>>>,
    hook: Mutex<Option<WriteHook>>,
    regions: Mutex<HashMap<u32, (u32, Vec<u8>)>>,
    irqs: HashMap<u32, u32>,
    /// DMA mappings in place: (iova, size, host address).
    pub dma: Mutex<Vec<(u64, u64, usize)>>,
    /// Every set_irqs/disable_irqs call, in order.
    pub irq_calls: Mutex<Vec<IrqCall>>,
    /// Fail the n-th dma_map from now (0 = the next one).
    pub fail_dma_map_at: Mutex<Option<usize>>,
    /// Fail set_irqs on this irq index.
    pub fail_set_irqs: Mutex<Option<u32>>,
    /// Resets done.
    pub resets: Mutex<u32>,
}

impl std::fmt::Debug for MockVfio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockVfio")
            .field("irqs", &self.irqs)
            .field("dma", &self.dma)
            .finish()
    }
}

impl MockVfio {
    /// Sets the hook run after each region write.
    pub fn on_write(self, hook: WriteHook) -> Self {
        *self.hook.lock().unwrap() = Some(hook);
        self
    }

    /// Signals vector `vector` of irq index `index`, as the device's
    /// interrupt would; false if no eventfd is set for it.
    pub fn signal(&self, index: u32, vector: usize) -> bool {
        let fds = self.eventfds.lock().unwrap();
        fds.get(&index)
            .and_then(|v| v.get(vector))
            .is_some_and(|fd| fd.write(1).is_ok())
    }

    /// Finds the host address of `len` bytes at `iova`, if one mapping holds
    /// them all.
    fn translate(&self, iova: u64, len: usize) -> Option<*mut u8> {
        let dma = self.dma.lock().unwrap();
        dma.iter().find_map(|&(start, size, host)| {
            let off = iova.checked_sub(start)?;
            (off.checked_add(len as u64)? <= size).then(|| (host as u64 + off) as *mut u8)
        })
    }

    /// Device DMA from memory: copies `buf.len()` bytes at `iova` out of a
    /// DMA-mapped range. False (nothing read) if the range is not mapped,
    /// as an IOMMU would block it.
    pub fn dma_read(&self, iova: u64, buf: &mut [u8]) -> bool {
        let Some(src) = self.translate(iova, buf.len()) else {
            return false;
        };
        // SAFETY: `src..src + buf.len()` lies inside one range handed to
        // `dma_map`, whose caller promised it stays mapped and tolerates
        // device access until `dma_unmap`; it is still in `self.dma`, so
        // not unmapped. `buf` is a distinct, valid Rust buffer.
        unsafe { std::ptr::copy_nonoverlapping(src, buf.as_mut_ptr(), buf.len()) };
        true
    }

    /// Device DMA to memory; false (nothing written) if not mapped.
    pub fn dma_write(&self, iova: u64, data: &[u8]) -> bool {
        let Some(dst) = self.translate(iova, data.len()) else {
            return false;
        };
        // SAFETY: as in `dma_read`: the destination lies inside a live DMA
        // mapping, which its owner only accesses in ways that tolerate
        // device writes.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
        true
    }

    /// A device with no regions and no interrupts.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a region of `size` zero bytes with `VFIO_REGION_INFO_FLAG_*`.
    pub fn with_region(self, index: u32, size: usize, flags: u32) -> Self {
        self.regions
            .lock()
            .unwrap()
            .insert(index, (flags, vec![0; size]));
        self
    }

    /// Gives an irq index `count` vectors.
    pub fn with_irqs(mut self, index: u32, count: u32) -> Self {
        self.irqs.insert(index, count);
        self
    }

    /// A copy of a region's bytes.
    pub fn region_bytes(&self, index: u32) -> Vec<u8> {
        self.regions.lock().unwrap()[&index].1.clone()
    }
}

fn range(len: usize, offset: u64, n: usize) -> io::Result<std::ops::Range<usize>> {
    let start = usize::try_from(offset).map_err(|_| io::ErrorKind::InvalidInput)?;
    match start.checked_add(n) {
        Some(end) if end <= len => Ok(start..end),
        _ => Err(io::ErrorKind::InvalidInput.into()),
    }
}

impl VfioBackend for MockVfio {
    fn region(&self, index: u32) -> RegionInfo {
        self.regions
            .lock()
            .unwrap()
            .get(&index)
            .map_or(RegionInfo::default(), |(flags, b)| RegionInfo {
                size: b.len() as u64,
                flags: *flags,
            })
    }

    fn irq_count(&self, index: u32) -> u32 {
        self.irqs.get(&index).copied().unwrap_or(0)
    }

    fn read_region(&self, index: u32, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let regions = self.regions.lock().unwrap();
        let (_, bytes) = regions.get(&index).ok_or(io::ErrorKind::NotFound)?;
        buf.copy_from_slice(&bytes[range(bytes.len(), offset, buf.len())?]);
        Ok(())
    }

    fn write_region(&self, index: u32, offset: u64, buf: &[u8]) -> io::Result<()> {
        {
            let mut regions = self.regions.lock().unwrap();
            let (_, bytes) = regions.get_mut(&index).ok_or(io::ErrorKind::NotFound)?;
            let r = range(bytes.len(), offset, buf.len())?;
            bytes[r].copy_from_slice(buf);
        }
        let hook = self.hook.lock().unwrap().clone();
        if let Some(hook) = hook {
            hook(self, index, offset, buf);
        }
        Ok(())
    }

    fn set_irqs(&self, index: u32, fds: &[&EventFd]) -> io::Result<()> {
        if *self.fail_set_irqs.lock().unwrap() == Some(index) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        if fds.len() as u32 > self.irq_count(index) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        self.irq_calls
            .lock()
            .unwrap()
            .push((index, fds.iter().map(|f| f.as_raw_fd()).collect()));
        let clones = fds
            .iter()
            .map(|f| f.try_clone())
            .collect::<io::Result<Vec<_>>>()?;
        self.eventfds.lock().unwrap().insert(index, clones);
        Ok(())
    }

    fn disable_irqs(&self, index: u32) -> io::Result<()> {
        self.irq_calls.lock().unwrap().push((index, Vec::new()));
        self.eventfds.lock().unwrap().remove(&index);
        Ok(())
    }

    unsafe fn dma_map(&self, iova: u64, size: u64, host_addr: *mut u8) -> io::Result<()> {
        let mut fail = self.fail_dma_map_at.lock().unwrap();
        match *fail {
            Some(0) => {
                *fail = None;
                return Err(io::Error::from_raw_os_error(libc::ENOMEM));
            }
            Some(n) => *fail = Some(n - 1),
            None => {}
        }
        let mut dma = self.dma.lock().unwrap();
        if dma.iter().any(|&(i, s, _)| iova < i + s && i < iova + size) {
            return Err(io::Error::from_raw_os_error(libc::EEXIST));
        }
        dma.push((iova, size, host_addr as usize));
        Ok(())
    }

    fn dma_unmap(&self, iova: u64, size: u64) -> io::Result<()> {
        let mut dma = self.dma.lock().unwrap();
        let pos = dma
            .iter()
            .position(|&(i, s, _)| i == iova && s == size)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
        dma.remove(pos);
        Ok(())
    }

    fn reset(&self) -> io::Result<()> {
        *self.resets.lock().unwrap() += 1;
        Ok(())
    }
}
