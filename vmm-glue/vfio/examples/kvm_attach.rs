//! Attaches a devlend mdev to a KVM VM the way a rust-vmm VMM does, with no
//! guest code: guest memory as KVM memslots and DMA mappings, the VFIO group
//! registered with KVM's VFIO device, every MSI-X vector an eventfd routed
//! to a GSI by a KVM irqfd, and ERR/REQ watched through event-manager.
//!
//! ```sh
//! kvm_attach <mdev-uuid> [hold-seconds]
//! ```
//! It borrows the device (reset), sets Bus Master Enable (the borrower then
//! pins the memslots and the lender maps them), holds it for a while so the
//! lender's `devlend devices` shows the mappings and vectors, and undoes
//! everything on exit.

use std::error::Error;
use std::sync::Arc;
use std::time::Duration;

use devlend_vfio::{mdev_path, IrqfdRegistrar, KernelVfio, RemoteDevice};
use event_manager::{EventManager, MutEventSubscriber, SubscriberOps};
use kvm_bindings::{
    kvm_create_device, kvm_device_type_KVM_DEV_TYPE_VFIO, kvm_irq_routing_entry,
    kvm_userspace_memory_region, KvmIrqRouting, KVM_IRQ_ROUTING_MSI,
};
use kvm_ioctls::Kvm;
use vfio_ioctls::VfioDeviceFd;
use vm_memory::{GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

const GSI_BASE: u32 = 24;

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let uuid = args
        .next()
        .ok_or("usage: kvm_attach <mdev-uuid> [hold-seconds]")?;
    let hold: u64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(3);
    let path = mdev_path(&uuid);

    // Declared before the VM, so it is dropped after it.
    let mem: GuestMemoryMmap = GuestMemoryMmap::from_ranges(&[
        (GuestAddress(0), 32 << 20),
        (GuestAddress(0x1_0000_0000), 16 << 20),
    ])?;
    let kvm = Kvm::new()?;
    let vm = Arc::new(kvm.create_vm()?);
    vm.create_irq_chip()?;
    for (slot, region) in mem.iter().enumerate() {
        let r = kvm_userspace_memory_region {
            slot: slot as u32,
            flags: 0,
            guest_phys_addr: region.start_addr().0,
            memory_size: region.len(),
            userspace_addr: region.as_ptr() as u64,
        };
        // SAFETY: the region is a live mapping of `memory_size` bytes owned
        // by `mem`, which is declared before `vm` and so outlives it on
        // every path out of main; no vCPU ever runs.
        unsafe { vm.set_user_memory_region(r)? };
    }

    let mut cd = kvm_create_device {
        type_: kvm_device_type_KVM_DEV_TYPE_VFIO,
        fd: 0,
        flags: 0,
    };
    let kvm_vfio = Arc::new(VfioDeviceFd::new_from_kvm(vm.create_device(&mut cd)?));
    let backend = KernelVfio::open_with_kvm(&path, Some(kvm_vfio))?;
    let mut dev = RemoteDevice::with_backend(&path, backend);
    let (vendor, device, class) = dev.ids()?;
    println!(
        "{}: {vendor:04x}:{device:04x} class {class:06x}",
        path.display()
    );

    dev.map_guest_memory(&mem)?;
    dev.reset()?;
    dev.enable_bus_master()?;
    println!("DMA-mapped {:x?}, bus master on", dev.dma_mappings());

    let n = dev.msix_count().min(4);
    dev.enable_msix(n)?;
    let gsis: Vec<u32> = (0..n).map(|i| GSI_BASE + i).collect();
    let mut routing = KvmIrqRouting::new(n as usize)?;
    for (e, (i, &gsi)) in routing
        .as_mut_slice()
        .iter_mut()
        .zip(gsis.iter().enumerate())
    {
        *e = kvm_irq_routing_entry {
            gsi,
            type_: KVM_IRQ_ROUTING_MSI,
            ..Default::default()
        };
        // MSI to the BSP's local APIC, vector 0x40 + i, as a guest's MSI-X
        // table entry would say.
        e.u.msi.address_lo = 0xfee0_0000;
        e.u.msi.data = 0x40 + i as u32;
    }
    vm.set_gsi_routing(&routing)?;
    dev.register_irqfds(vm.clone() as Arc<dyn IrqfdRegistrar>, &gsis)?;
    println!("{n} MSI-X vectors: eventfds handed to VFIO and KVM irqfds on GSIs {gsis:?}");

    let sub = dev.enable_notifiers(|p, ev| println!("{}: {ev:?}", p.display()))?;
    let mut em = EventManager::<Box<dyn MutEventSubscriber + Send>>::new()
        .map_err(|e| format!("event manager: {e:?}"))?;
    em.add_subscriber(Box::new(sub));
    println!("ERR/REQ watched; holding for {hold} s");
    let end = std::time::Instant::now() + Duration::from_secs(hold);
    while std::time::Instant::now() < end {
        em.run_with_timeout(100)
            .map_err(|e| format!("event manager: {e:?}"))?;
    }
    dev.disable_bus_master()?;
    drop(dev);
    drop(vm);
    println!("detached: irqfds, vectors and DMA mappings undone");
    Ok(())
}
