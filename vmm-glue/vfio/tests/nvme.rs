//! The userspace NVMe driver against a fake NVMe controller built on the
//! mock backend: registers in BAR0, queues and data in DMA-mapped memory,
//! completions signalled on the MSI-X eventfds. No /dev/vfio needed.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use devlend_vfio::mock::MockVfio;
use devlend_vfio::nvme::{Nvme, NvmeConfig, NvmeError, NVM_READ, NVM_WRITE};
use devlend_vfio::{
    RemoteDevice, VFIO_PCI_BAR0_REGION_INDEX as BAR0, VFIO_PCI_CONFIG_REGION_INDEX as CFG,
    VFIO_PCI_MSIX_IRQ_INDEX as MSIX,
};

const BLOCKS: u64 = 1024;
const BS: usize = 512;

#[derive(Default)]
struct Faults {
    /// Complete commands but never signal the vector.
    no_interrupts: bool,
    /// Never complete I/O commands.
    hang_io: bool,
}

#[derive(Default)]
struct Cq {
    base: u64,
    size: u16,
    tail: u16,
    phase: bool,
    vector: usize,
    ien: bool,
}

#[derive(Default)]
struct Sq {
    base: u64,
    size: u16,
    head: u16,
    cqid: u16,
}

#[derive(Default)]
struct Ctrl {
    sqs: HashMap<u16, Sq>,
    cqs: HashMap<u16, Cq>,
    disk: Vec<u8>,
    faults: Faults,
}

fn reg32(m: &MockVfio, off: usize) -> u32 {
    let b = m.region_bytes(BAR0);
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}

fn reg64(m: &MockVfio, off: usize) -> u64 {
    u64::from(reg32(m, off)) | u64::from(reg32(m, off + 4)) << 32
}

fn set_csts(m: &MockVfio, rdy: bool) {
    use devlend_vfio::VfioBackend;
    // Written around the hook: the CSTS register is read-only to the driver.
    // Offset 0x1c is not a register the hook reacts to.
    m.write_region(BAR0, 0x1c, &u32::from(rdy).to_le_bytes())
        .unwrap();
}

impl Ctrl {
    fn transfer(&mut self, m: &MockVfio, sqe: &[u8; 64], write: bool) -> u16 {
        let prp1 = u64::from_le_bytes(sqe[24..32].try_into().unwrap());
        let prp2 = u64::from_le_bytes(sqe[32..40].try_into().unwrap());
        let slba = u64::from_le_bytes(sqe[40..48].try_into().unwrap());
        let nlb = u64::from(u16::from_le_bytes(sqe[48..50].try_into().unwrap())) + 1;
        if slba + nlb > BLOCKS {
            return 0x80;
        }
        let len = (nlb as usize) * BS;
        let first = len.min(4096 - (prp1 as usize & 0xfff));
        let disk = &mut self.disk[slba as usize * BS..slba as usize * BS + len];
        let ok = if write {
            m.dma_read(prp1, &mut disk[..first])
                && (first == len || m.dma_read(prp2, &mut disk[first..]))
        } else {
            m.dma_write(prp1, &disk[..first]) && (first == len || m.dma_write(prp2, &disk[first..]))
        };
        if ok {
            0
        } else {
            0x04 // Data Transfer Error: the "IOMMU" blocked it
        }
    }

    fn execute(&mut self, m: &MockVfio, qid: u16, sqe: &[u8; 64]) -> Option<u16> {
        let opcode = sqe[0];
        let cdw10 = u32::from_le_bytes(sqe[40..44].try_into().unwrap());
        let cdw11 = u32::from_le_bytes(sqe[44..48].try_into().unwrap());
        let prp1 = u64::from_le_bytes(sqe[24..32].try_into().unwrap());
        if qid != 0 {
            if self.faults.hang_io {
                return None;
            }
            return Some(match opcode {
                NVM_WRITE => self.transfer(m, sqe, true),
                NVM_READ => self.transfer(m, sqe, false),
                _ => 0x01,
            });
        }
        Some(match opcode {
            0x06 => {
                let mut page = vec![0u8; 4096];
                if cdw10 & 0xff == 1 {
                    page[0..2].copy_from_slice(&0x1b36u16.to_le_bytes());
                    page[4..24].copy_from_slice(b"fake-serial         ");
                    page[24..64].copy_from_slice(&[b' '; 40]);
                    page[24..34].copy_from_slice(b"Fake NVMe ");
                    page[64..72].copy_from_slice(b"1.0     ");
                    page[516..520].copy_from_slice(&1u32.to_le_bytes());
                } else {
                    page[0..8].copy_from_slice(&BLOCKS.to_le_bytes());
                    page[128 + 2] = 9; // LBA format 0: 512-byte blocks
                }
                if m.dma_write(prp1, &page) {
                    0
                } else {
                    0x04
                }
            }
            0x05 => {
                self.cqs.insert(
                    (cdw10 & 0xffff) as u16,
                    Cq {
                        base: prp1,
                        size: (cdw10 >> 16) as u16 + 1,
                        phase: true,
                        vector: (cdw11 >> 16) as usize,
                        ien: cdw11 & 2 != 0,
                        ..Default::default()
                    },
                );
                0
            }
            0x01 => {
                self.sqs.insert(
                    (cdw10 & 0xffff) as u16,
                    Sq {
                        base: prp1,
                        size: (cdw10 >> 16) as u16 + 1,
                        cqid: (cdw11 >> 16) as u16,
                        ..Default::default()
                    },
                );
                0
            }
            _ => 0x01,
        })
    }

    fn doorbell(&mut self, m: &MockVfio, qid: u16, tail: u16) {
        loop {
            let (sqe, head, cqid) = {
                let Some(sq) = self.sqs.get_mut(&qid) else {
                    return;
                };
                if sq.head == tail {
                    return;
                }
                let mut sqe = [0u8; 64];
                assert!(m.dma_read(sq.base + u64::from(sq.head) * 64, &mut sqe));
                sq.head = (sq.head + 1) % sq.size;
                (sqe, sq.head, sq.cqid)
            };
            let Some(status) = self.execute(m, qid, &sqe) else {
                continue;
            };
            let cq = self.cqs.get_mut(&cqid).unwrap();
            let mut cqe = [0u8; 16];
            cqe[8..10].copy_from_slice(&head.to_le_bytes());
            cqe[10..12].copy_from_slice(&qid.to_le_bytes());
            cqe[12..14].copy_from_slice(&sqe[2..4]);
            cqe[14..16].copy_from_slice(&((status << 1) | u16::from(cq.phase)).to_le_bytes());
            assert!(m.dma_write(cq.base + u64::from(cq.tail) * 16, &cqe));
            cq.tail += 1;
            if cq.tail == cq.size {
                cq.tail = 0;
                cq.phase = !cq.phase;
            }
            if cq.ien && !self.faults.no_interrupts {
                assert!(
                    m.signal(MSIX, cq.vector),
                    "vector {} not enabled",
                    cq.vector
                );
            }
        }
    }
}

/// A fake NVMe controller with 1024 blocks of 512 bytes.
fn fake_nvme(faults: Faults) -> MockVfio {
    let ctrl = Arc::new(Mutex::new(Ctrl {
        disk: vec![0; BLOCKS as usize * BS],
        faults,
        ..Default::default()
    }));
    let hook: devlend_vfio::mock::WriteHook = Arc::new(move |m, index, off, data| {
        if index != BAR0 {
            return;
        }
        let v = u32::from_le_bytes(data[..4].try_into().unwrap_or([0; 4]));
        let mut c = ctrl.lock().unwrap();
        match off {
            0x14 if v & 1 == 1 => {
                let aqa = reg32(m, 0x24);
                c.sqs.insert(
                    0,
                    Sq {
                        base: reg64(m, 0x28),
                        size: (aqa & 0xfff) as u16 + 1,
                        ..Default::default()
                    },
                );
                c.cqs.insert(
                    0,
                    Cq {
                        base: reg64(m, 0x30),
                        size: (aqa >> 16 & 0xfff) as u16 + 1,
                        phase: true,
                        ien: true,
                        ..Default::default()
                    },
                );
                drop(c);
                set_csts(m, true);
            }
            0x14 => {
                drop(c);
                set_csts(m, false);
            }
            off if off >= 0x1000 => {
                let db = (off - 0x1000) / 4;
                if db % 2 == 0 {
                    c.doorbell(m, (db / 2) as u16, v as u16);
                }
            }
            _ => {}
        }
    });
    let m = MockVfio::new()
        .with_region(CFG, 256, 3)
        .with_region(BAR0, 0x4000, 3)
        .with_irqs(MSIX, 4)
        .on_write(hook);
    use devlend_vfio::VfioBackend;
    // Class 010802, CAP: MQES 255, TO 1 (500 ms), DSTRD 0, NVM command set.
    m.write_region(CFG, 8, &[0x02, 0x02, 0x08, 0x01]).unwrap();
    m.write_region(BAR0, 0, &(255u64 | 1 << 24 | 1 << 37).to_le_bytes())
        .unwrap();
    m.write_region(BAR0, 8, &0x10400u32.to_le_bytes()).unwrap();
    m
}

fn cfg() -> NvmeConfig {
    NvmeConfig {
        timeout: Duration::from_millis(500),
        ..Default::default()
    }
}

fn open(faults: Faults) -> Nvme<MockVfio> {
    let dev =
        RemoteDevice::with_backend(Path::new("/sys/bus/mdev/devices/fake"), fake_nvme(faults));
    Nvme::new(dev, cfg()).unwrap()
}

#[test]
fn identify_then_write_and_read_back_with_interrupts() {
    let mut n = open(Faults::default());
    let id = n.identify_and_setup().unwrap();
    assert_eq!(
        (id.vid, id.serial.as_str(), id.model.as_str()),
        (0x1b36, "fake-serial", "Fake NVMe")
    );
    assert_eq!(
        (id.ns_blocks, id.block_size, id.version),
        (BLOCKS, 512, 0x10400)
    );
    // Bus master was set before the device could DMA.
    let cmd = n.device().read_u16(CFG, 4).unwrap();
    assert_eq!(cmd & 0x6, 0x6);

    // Eight writes in flight at once, then eight reads.
    let data: Vec<Vec<u8>> = (0..8u8)
        .map(|i| vec![i.wrapping_mul(37) ^ 0x5a; 4096])
        .collect();
    for (i, d) in data.iter().enumerate() {
        n.fill_slot(i, d).unwrap();
    }
    let cmds: Vec<_> = (0..8)
        .map(|i| n.rw_command(NVM_WRITE, i as u64 * 8, i))
        .collect();
    n.submit_io(&cmds).unwrap();
    let mut done = 0;
    while done < 8 {
        let cs = n.reap_io().unwrap();
        assert!(cs.iter().all(|c| c.ok()));
        done += cs.len();
    }
    for i in 0..8 {
        n.fill_slot(i, &[0u8; 4096]).unwrap();
    }
    let cmds: Vec<_> = (0..8)
        .map(|i| n.rw_command(NVM_READ, i as u64 * 8, 7 - i))
        .collect();
    n.submit_io(&cmds).unwrap();
    let mut done = 0;
    while done < 8 {
        done += n.reap_io().unwrap().len();
    }
    let mut got = vec![0u8; 4096];
    for (i, want) in data.iter().enumerate() {
        n.read_slot(7 - i, &mut got).unwrap();
        assert_eq!(&got, want, "I/O {i}");
    }
    let c = n.counters();
    assert_eq!(c.completions, 4 + 16, "4 admin commands and 16 I/Os");
    assert!(c.irq_signals >= 1);
    n.shutdown().unwrap();
}

#[test]
fn the_queues_wrap_and_the_phase_flips() {
    let mut n = open(Faults::default());
    n.identify_and_setup().unwrap();
    // 64-entry I/O queue: 200 commands wrap it three times.
    for i in 0..200u64 {
        let cmd = n.rw_command(NVM_READ, i % 100, 0);
        n.io_sync("read", cmd).unwrap();
    }
}

#[test]
fn an_out_of_range_lba_is_reported_with_its_status() {
    let mut n = open(Faults::default());
    n.identify_and_setup().unwrap();
    let cmd = n.rw_command(NVM_READ, BLOCKS, 0);
    match n.io_sync("read past the end", cmd) {
        Err(NvmeError::Command {
            sct: 0,
            sc: 0x80,
            what,
        }) => assert_eq!(what, "read past the end"),
        other => panic!("{other:?}"),
    }
    let cmd = n.rw_command(NVM_READ, 0, 0);
    n.io_sync("read after", cmd).unwrap();
}

#[test]
fn dma_outside_the_mapped_window_is_blocked() {
    let mut n = open(Faults::default());
    n.identify_and_setup().unwrap();
    let (base, len) = n.dma_window();
    let mut cmd = n.rw_command(NVM_READ, 0, 0);
    cmd.prp1 = base + len + 0x20_0000;
    match n.io_sync("stray read", cmd) {
        Err(NvmeError::Command { sc: 0x04, .. }) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_completion_without_its_interrupt_is_an_error_of_its_own() {
    let dev = RemoteDevice::with_backend(
        Path::new("/sys/bus/mdev/devices/fake"),
        fake_nvme(Faults {
            no_interrupts: true,
            ..Default::default()
        }),
    );
    let mut n = Nvme::new(dev, cfg()).unwrap();
    match n.identify_and_setup() {
        Err(NvmeError::NoInterrupt {
            qid: 0, vector: 0, ..
        }) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_device_that_never_completes_times_out() {
    let mut n = open(Faults {
        hang_io: true,
        ..Default::default()
    });
    n.identify_and_setup().unwrap();
    let cmd = n.rw_command(NVM_READ, 0, 0);
    match n.io_sync("read", cmd) {
        Err(NvmeError::Timeout {
            qid: 1, pending: 1, ..
        }) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_device_that_is_not_nvme_is_refused() {
    let m = fake_nvme(Faults::default());
    use devlend_vfio::VfioBackend;
    m.write_region(CFG, 8, &[0x00, 0x00, 0x00, 0x02]).unwrap();
    let dev = RemoteDevice::with_backend(Path::new("/sys/bus/mdev/devices/fake"), m);
    match Nvme::new(dev, cfg()) {
        Err(NvmeError::NotNvme {
            class: 0x020000, ..
        }) => {}
        other => panic!("{other:?}"),
    }
}
