//! RemoteDevice against the in-memory backend: DMA mapping and its undo,
//! MSI-X eventfds and irqfds, ERR/REQ notifications through event-manager.

use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};

use devlend_vfio::mock::MockVfio;
use devlend_vfio::{
    DeviceEvent, Error, IrqfdRegistrar, RemoteDevice, VFIO_PCI_BAR0_REGION_INDEX,
    VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_ERR_IRQ_INDEX, VFIO_PCI_MSIX_IRQ_INDEX,
    VFIO_PCI_REQ_IRQ_INDEX,
};
use event_manager::{EventManager, MutEventSubscriber, SubscriberOps};
use vm_memory::{GuestAddress, GuestMemoryMmap};
use vmm_sys_util::eventfd::EventFd;

const PATH: &str = "/sys/bus/mdev/devices/83b8f4f2-509f-382f-3c1e-e6bfe0fa1001";

fn mock() -> MockVfio {
    MockVfio::new()
        .with_region(VFIO_PCI_CONFIG_REGION_INDEX, 256, 3)
        .with_region(VFIO_PCI_BAR0_REGION_INDEX, 0x4000, 3)
        .with_irqs(VFIO_PCI_MSIX_IRQ_INDEX, 4)
        .with_irqs(VFIO_PCI_ERR_IRQ_INDEX, 1)
        .with_irqs(VFIO_PCI_REQ_IRQ_INDEX, 1)
}

fn memory() -> GuestMemoryMmap {
    GuestMemoryMmap::from_ranges(&[
        (GuestAddress(0), 0x10_0000),
        (GuestAddress(0x1_0000_0000), 0x20_0000),
    ])
    .unwrap()
}

#[test]
fn guest_memory_is_mapped_at_guest_physical_addresses_and_unmapped_on_drop() {
    let backend = Arc::new(mock());
    let mut dev = RemoteDevice::with_backend(Path::new(PATH), backend.clone());
    dev.map_guest_memory(&memory()).unwrap();
    let dma = backend.dma.lock().unwrap().clone();
    assert_eq!(dma.len(), 2);
    assert_eq!((dma[0].0, dma[0].1), (0, 0x10_0000));
    assert_eq!((dma[1].0, dma[1].1), (0x1_0000_0000, 0x20_0000));
    assert_eq!(
        dev.dma_mappings(),
        &[(0, 0x10_0000), (0x1_0000_0000, 0x20_0000)]
    );
    dev.unmap_guest_memory().unwrap();
    assert!(backend.dma.lock().unwrap().is_empty());
    dev.map_guest_memory(&memory()).unwrap();
    dev.enable_msix(2).unwrap();
    dev.enable_notifiers(|_, _| {}).unwrap();
    assert_eq!(backend.dma.lock().unwrap().len(), 2);
    drop(dev);
    assert!(backend.dma.lock().unwrap().is_empty(), "drop unmaps");
    let calls = backend.irq_calls.lock().unwrap().clone();
    let disabled: Vec<u32> = calls
        .iter()
        .filter(|c| c.1.is_empty())
        .map(|c| c.0)
        .collect();
    assert_eq!(
        disabled,
        vec![
            VFIO_PCI_MSIX_IRQ_INDEX,
            VFIO_PCI_ERR_IRQ_INDEX,
            VFIO_PCI_REQ_IRQ_INDEX
        ],
        "drop disables every irq index it enabled"
    );
}

/// cloud-hypervisor tracks dirty pages with `GuestMemoryMmap<AtomicBitmap>`:
/// that memory maps the same, at the host addresses of its regions, and
/// stays alive while mapped.
#[test]
fn memory_with_a_dirty_bitmap_maps_too() {
    use vm_memory::bitmap::AtomicBitmap;
    use vm_memory::{GuestMemoryBackend, GuestMemoryRegion, MemoryRegionAddress};

    let backend = Arc::new(mock());
    let mut dev = RemoteDevice::with_backend(Path::new(PATH), backend.clone());
    let mem: GuestMemoryMmap<AtomicBitmap> = GuestMemoryMmap::from_ranges(&[
        (GuestAddress(0), 0x10_0000),
        (GuestAddress(0x1_0000_0000), 0x20_0000),
    ])
    .unwrap();
    let hosts: Vec<usize> = mem
        .iter()
        .map(|r| r.get_host_address(MemoryRegionAddress(0)).unwrap() as usize)
        .collect();
    dev.map_guest_memory(&mem).unwrap();
    drop(mem);
    let dma = backend.dma.lock().unwrap().clone();
    assert_eq!(
        dma.iter().map(|d| (d.0, d.1, d.2)).collect::<Vec<_>>(),
        vec![
            (0, 0x10_0000, hosts[0]),
            (0x1_0000_0000, 0x20_0000, hosts[1])
        ]
    );
    dev.unmap_guest_memory().unwrap();
    assert!(backend.dma.lock().unwrap().is_empty());
}

#[test]
fn a_failed_dma_map_undoes_the_regions_mapped_before_it() {
    let mut dev = RemoteDevice::with_backend(Path::new(PATH), mock());
    *dev.backend().fail_dma_map_at.lock().unwrap() = Some(1);
    let err = dev.map_guest_memory(&memory()).unwrap_err();
    match &err {
        Error::DmaMap { iova, size, .. } => assert_eq!((*iova, *size), (0x1_0000_0000, 0x20_0000)),
        e => panic!("{e}"),
    }
    assert!(err.to_string().contains(PATH), "{err}");
    assert!(dev.backend().dma.lock().unwrap().is_empty());
    assert!(dev.dma_mappings().is_empty());
}

#[test]
fn region_accesses_are_bounds_checked_with_context() {
    let dev = RemoteDevice::with_backend(Path::new(PATH), mock());
    dev.write_u32(VFIO_PCI_BAR0_REGION_INDEX, 0x14, 0x0046_0001)
        .unwrap();
    assert_eq!(
        dev.read_u32(VFIO_PCI_BAR0_REGION_INDEX, 0x14).unwrap(),
        0x0046_0001
    );
    dev.write_u64_split(VFIO_PCI_BAR0_REGION_INDEX, 0x28, 0x1_2345_6000)
        .unwrap();
    assert_eq!(
        dev.read_u64(VFIO_PCI_BAR0_REGION_INDEX, 0x28).unwrap(),
        0x1_2345_6000
    );
    let err = dev
        .read_u32(VFIO_PCI_BAR0_REGION_INDEX, 0x3ffe)
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::RegionRange {
                region: 0,
                offset: 0x3ffe,
                ..
            }
        ),
        "{err}"
    );
    assert!(dev.read_u32(5, 0).is_err(), "no BAR5 region");
}

#[test]
fn bus_master_enable_keeps_other_command_bits() {
    let dev = RemoteDevice::with_backend(Path::new(PATH), mock());
    dev.write_u16(VFIO_PCI_CONFIG_REGION_INDEX, 4, 0x0100)
        .unwrap();
    dev.enable_bus_master().unwrap();
    assert_eq!(
        dev.read_u16(VFIO_PCI_CONFIG_REGION_INDEX, 4).unwrap(),
        0x0506
    );
    dev.disable_bus_master().unwrap();
    assert_eq!(
        dev.read_u16(VFIO_PCI_CONFIG_REGION_INDEX, 4).unwrap(),
        0x0502
    );
}

#[derive(Default)]
struct FakeVm {
    registered: Mutex<Vec<(i32, u32)>>,
    fail_gsi: Option<u32>,
}

impl IrqfdRegistrar for FakeVm {
    fn register_irqfd(&self, fd: &EventFd, gsi: u32) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        if self.fail_gsi == Some(gsi) {
            return Err(io::Error::from_raw_os_error(libc::EEXIST));
        }
        self.registered.lock().unwrap().push((fd.as_raw_fd(), gsi));
        Ok(())
    }

    fn unregister_irqfd(&self, fd: &EventFd, gsi: u32) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        let mut r = self.registered.lock().unwrap();
        let pos = r.iter().position(|&e| e == (fd.as_raw_fd(), gsi)).unwrap();
        r.remove(pos);
        Ok(())
    }
}

#[test]
fn each_msix_vector_gets_an_eventfd_given_to_set_irqs_and_kvm() {
    use std::os::fd::AsRawFd;
    let vm = Arc::new(FakeVm::default());
    let mut dev = RemoteDevice::with_backend(Path::new(PATH), mock());
    let fds: Vec<i32> = dev
        .enable_msix(3)
        .unwrap()
        .iter()
        .map(|f| f.as_raw_fd())
        .collect();
    assert_eq!(
        dev.backend().irq_calls.lock().unwrap().last().unwrap(),
        &(VFIO_PCI_MSIX_IRQ_INDEX, fds.clone())
    );
    dev.register_irqfds(vm.clone(), &[40, 41, 42]).unwrap();
    assert_eq!(
        *vm.registered.lock().unwrap(),
        vec![(fds[0], 40), (fds[1], 41), (fds[2], 42)]
    );
    // The device signals vector 1: the eventfd KVM watches is the one VFIO got.
    dev.msix_eventfds()[1].write(1).unwrap();
    assert_eq!(dev.msix_eventfds()[1].read().unwrap(), 1);
    dev.disable_msix().unwrap();
    assert!(vm.registered.lock().unwrap().is_empty());
    assert_eq!(
        dev.backend().irq_calls.lock().unwrap().last().unwrap(),
        &(VFIO_PCI_MSIX_IRQ_INDEX, vec![])
    );
}

#[test]
fn too_many_vectors_or_a_refused_irqfd_is_reported_and_undone() {
    let mut dev = RemoteDevice::with_backend(Path::new(PATH), mock());
    let err = dev.enable_msix(5).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Vectors {
                available: 4,
                wanted: 5,
                ..
            }
        ),
        "{err}"
    );
    dev.enable_msix(2).unwrap();
    let vm = Arc::new(FakeVm {
        fail_gsi: Some(51),
        ..Default::default()
    });
    let err = dev.register_irqfds(vm.clone(), &[50, 51]).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Irqfd {
                vector: 1,
                gsi: 51,
                ..
            }
        ),
        "{err}"
    );
    assert!(vm.registered.lock().unwrap().is_empty());
    assert!(
        dev.register_irqfds(vm, &[50]).is_err(),
        "one GSI per vector"
    );
}

#[test]
fn set_irqs_failure_names_the_index() {
    let mut dev = RemoteDevice::with_backend(Path::new(PATH), mock());
    *dev.backend().fail_set_irqs.lock().unwrap() = Some(VFIO_PCI_MSIX_IRQ_INDEX);
    let err = dev.enable_msix(1).unwrap_err();
    assert!(
        matches!(
            err,
            Error::SetIrqs {
                index: 2,
                count: 1,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn err_and_req_reach_the_handler_through_event_manager() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut dev = RemoteDevice::with_backend(Path::new(PATH), mock());
    let s = seen.clone();
    let sub = dev
        .enable_notifiers(move |path, ev| s.lock().unwrap().push((path.to_path_buf(), ev)))
        .unwrap();
    let err_fd = sub.error_eventfd().unwrap().try_clone().unwrap();
    let req_fd = sub.request_eventfd().unwrap().try_clone().unwrap();
    let mut em = EventManager::<Box<dyn MutEventSubscriber + Send>>::new().unwrap();
    em.add_subscriber(Box::new(sub));
    assert_eq!(em.run_with_timeout(0).unwrap(), 0);
    err_fd.write(1).unwrap();
    em.run_with_timeout(1000).unwrap();
    req_fd.write(1).unwrap();
    em.run_with_timeout(1000).unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        vec![
            (Path::new(PATH).to_path_buf(), DeviceEvent::Error),
            (Path::new(PATH).to_path_buf(), DeviceEvent::Request)
        ]
    );
    let calls = dev.backend().irq_calls.lock().unwrap().clone();
    assert_eq!(calls[0].0, VFIO_PCI_ERR_IRQ_INDEX);
    assert_eq!(calls[1].0, VFIO_PCI_REQ_IRQ_INDEX);
}

#[test]
fn a_device_without_notifiers_says_so() {
    let mut dev = RemoteDevice::with_backend(
        Path::new(PATH),
        MockVfio::new().with_irqs(VFIO_PCI_MSIX_IRQ_INDEX, 1),
    );
    let err = dev.enable_notifiers(|_, _| {}).unwrap_err();
    assert!(matches!(err, Error::NoNotifier { .. }), "{err}");
}
