//! The userspace NVMe driver against a fake NVMe controller built on the
//! mock backend: registers in BAR0, queues and data in DMA-mapped memory,
//! completions signalled on the MSI-X eventfds. No /dev/vfio needed.
//!
//! The fake moves data the way a controller with 4 KiB pages does: PRP1,
//! then PRP2 as a page or as a pointer to a PRP list (following a chained
//! list page when the last entry of one has to be a pointer), with the
//! spec's offset rules, and through the mock's "IOMMU" (only DMA-mapped
//! IOVAs). It logs the pages of every transfer, so tests can check that the
//! driver's PRPs cover its buffer exactly.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use devlend_nvme_test::{Nvme, NvmeConfig, NvmeError, MAX_IO_SIZE, NVM_READ, NVM_WRITE};
use devlend_vfio::mock::MockVfio;
use devlend_vfio::{
    RemoteDevice, VFIO_PCI_BAR0_REGION_INDEX as BAR0, VFIO_PCI_CONFIG_REGION_INDEX as CFG,
    VFIO_PCI_MSIX_IRQ_INDEX as MSIX,
};

const BLOCKS: u64 = 4096;
const BS: usize = 512;
const PAGE: u64 = 4096;

// Generic command status codes the fake answers with.
const SC_INVALID_FIELD: u16 = 0x02;
const SC_DATA_TRANSFER_ERROR: u16 = 0x04;
const SC_PRP_OFFSET_INVALID: u16 = 0x13;
const SC_LBA_OUT_OF_RANGE: u16 = 0x80;

#[derive(Default)]
struct Faults {
    /// Complete commands but never signal the vector.
    no_interrupts: bool,
    /// Never complete I/O commands.
    hang_io: bool,
    /// Identify Controller MDTS (0: no limit); the fake also refuses
    /// longer transfers itself.
    mdts: u8,
    /// CAP.MPSMIN: the smallest page is 2^(12 + this).
    mpsmin: u8,
}

/// One data transfer the fake did: the (IOVA, length) pieces in order.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Transfer {
    write: bool,
    slba: u64,
    pages: Vec<(u64, usize)>,
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
    log: Vec<Transfer>,
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

/// The pieces of memory a controller with 4 KiB pages transfers for `len`
/// bytes described by PRP1 and PRP2, reading the PRP list from memory when
/// there is one; Err is the status to complete with.
fn prp_pieces(m: &MockVfio, prp1: u64, prp2: u64, len: usize) -> Result<Vec<(u64, usize)>, u16> {
    // PRP1 may carry an offset (dword aligned); every later entry starts a
    // page.
    if prp1 & 3 != 0 {
        return Err(SC_PRP_OFFSET_INVALID);
    }
    let first = len.min((PAGE - prp1 % PAGE) as usize);
    let mut pieces = vec![(prp1, first)];
    let mut left = len - first;
    if left == 0 {
        return Ok(pieces);
    }
    if left <= PAGE as usize {
        // PRP2 is the second (and last) page.
        if prp2 % PAGE != 0 {
            return Err(SC_PRP_OFFSET_INVALID);
        }
        pieces.push((prp2, left));
        return Ok(pieces);
    }
    // PRP2 points to a PRP list (qword aligned, may start mid-page).
    if prp2 & 7 != 0 {
        return Err(SC_PRP_OFFSET_INVALID);
    }
    let mut at = prp2;
    while left > 0 {
        let mut e = [0u8; 8];
        if !m.dma_read(at, &mut e) {
            return Err(SC_DATA_TRANSFER_ERROR);
        }
        let entry = u64::from_le_bytes(e);
        // The last entry of a list page points to the next list page when
        // more than one page is still to come.
        if (at + 8) % PAGE == 0 && left > PAGE as usize {
            if entry & 7 != 0 {
                return Err(SC_PRP_OFFSET_INVALID);
            }
            at = entry;
            continue;
        }
        if entry % PAGE != 0 {
            return Err(SC_PRP_OFFSET_INVALID);
        }
        let n = left.min(PAGE as usize);
        pieces.push((entry, n));
        left -= n;
        at += 8;
    }
    Ok(pieces)
}

impl Ctrl {
    fn transfer(&mut self, m: &MockVfio, sqe: &[u8; 64], write: bool) -> u16 {
        let prp1 = u64::from_le_bytes(sqe[24..32].try_into().unwrap());
        let prp2 = u64::from_le_bytes(sqe[32..40].try_into().unwrap());
        let slba = u64::from_le_bytes(sqe[40..48].try_into().unwrap());
        let nlb = u64::from(u16::from_le_bytes(sqe[48..50].try_into().unwrap())) + 1;
        if slba + nlb > BLOCKS {
            return SC_LBA_OUT_OF_RANGE;
        }
        let len = (nlb as usize) * BS;
        if self.faults.mdts != 0 && len as u64 > PAGE << self.faults.mdts {
            return SC_INVALID_FIELD;
        }
        let pieces = match prp_pieces(m, prp1, prp2, len) {
            Ok(p) => p,
            Err(sc) => return sc,
        };
        let mut disk = &mut self.disk[slba as usize * BS..slba as usize * BS + len];
        for &(iova, n) in &pieces {
            let (here, rest) = disk.split_at_mut(n);
            let ok = if write {
                m.dma_read(iova, here)
            } else {
                m.dma_write(iova, here)
            };
            if !ok {
                return SC_DATA_TRANSFER_ERROR; // the "IOMMU" blocked it
            }
            disk = rest;
        }
        self.log.push(Transfer {
            write,
            slba,
            pages: pieces,
        });
        0
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
                    page[77] = self.faults.mdts;
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

/// A fake NVMe controller with [`BLOCKS`] blocks of 512 bytes.
fn fake_nvme(faults: Faults) -> MockVfio {
    fake_nvme_ctrl(faults).0
}

/// A fake NVMe controller, and its state to look at.
fn fake_nvme_ctrl(faults: Faults) -> (MockVfio, Arc<Mutex<Ctrl>>) {
    let mpsmin = u64::from(faults.mpsmin);
    let ctrl = Arc::new(Mutex::new(Ctrl {
        disk: vec![0; BLOCKS as usize * BS],
        faults,
        ..Default::default()
    }));
    let state = ctrl.clone();
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
    // Class 010802, CAP: MQES 255, TO 1 (500 ms), DSTRD 0, NVM command set,
    // MPSMIN as asked, MPSMAX 1 (8 KiB).
    m.write_region(CFG, 8, &[0x02, 0x02, 0x08, 0x01]).unwrap();
    let cap = 255u64 | 1 << 24 | 1 << 37 | mpsmin << 48 | 1 << 52;
    m.write_region(BAR0, 0, &cap.to_le_bytes()).unwrap();
    m.write_region(BAR0, 8, &0x10400u32.to_le_bytes()).unwrap();
    (m, state)
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

/// A driver for `io_size` bytes per I/O at queue depth `qd`, identified,
/// and the fake's state.
fn open_sized(faults: Faults, io_size: u32, qd: u16) -> (Nvme<MockVfio>, Arc<Mutex<Ctrl>>) {
    let (m, ctrl) = fake_nvme_ctrl(faults);
    let dev = RemoteDevice::with_backend(Path::new("/sys/bus/mdev/devices/fake"), m);
    let mut n = Nvme::new(
        dev,
        NvmeConfig {
            io_size,
            queue_depth: qd,
            ..cfg()
        },
    )
    .unwrap();
    n.identify_and_setup().unwrap();
    (n, ctrl)
}

/// Runs `cmds` at once and waits for all of them; every one must succeed.
fn run_all(n: &mut Nvme<MockVfio>, cmds: &[devlend_nvme_test::Command]) {
    n.submit_io(cmds).unwrap();
    let mut done = 0;
    while done < cmds.len() {
        let cs = n.reap_io().unwrap();
        assert!(cs.iter().all(|c| c.ok()), "{cs:?}");
        done += cs.len();
    }
}

/// Distinct bytes for slot `i` of a run of `len`-byte I/Os.
fn data_for(i: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|b| (b as u32 ^ (b as u32 >> 8) ^ (i as u32 * 97 + 13)) as u8)
        .collect()
}

/// The pages one I/O of `len` bytes at `iova` must move, in order: the
/// buffer, page by page, and nothing past it.
fn pages_of(iova: u64, len: usize) -> Vec<(u64, usize)> {
    (0..len.div_ceil(PAGE as usize))
        .map(|p| {
            let off = p * PAGE as usize;
            (iova + off as u64, (len - off).min(PAGE as usize))
        })
        .collect()
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

#[test]
fn every_io_size_moves_its_slot_exactly_through_its_prps() {
    // One page, two pages (PRP2 a page), then PRP lists up to 128 KiB.
    for io_size in [512, 4096, 8192, 12288, 65536 + 4096, MAX_IO_SIZE] {
        let qd = 4;
        let (mut n, ctrl) = open_sized(Faults::default(), io_size, qd);
        let len = io_size as usize;
        let per_io = (len / BS) as u64;
        for i in 0..usize::from(qd) {
            n.fill_slot(i, &data_for(i, len)).unwrap();
        }
        let cmds: Vec<_> = (0..usize::from(qd))
            .map(|i| n.rw_command(NVM_WRITE, i as u64 * per_io, i))
            .collect();
        run_all(&mut n, &cmds);
        for i in 0..usize::from(qd) {
            n.fill_slot(i, &vec![0u8; len]).unwrap();
        }
        // Read back into other slots, so a PRP of the wrong slot shows.
        let cmds: Vec<_> = (0..usize::from(qd))
            .map(|i| n.rw_command(NVM_READ, i as u64 * per_io, usize::from(qd) - 1 - i))
            .collect();
        run_all(&mut n, &cmds);
        let mut got = vec![0u8; len];
        for i in 0..usize::from(qd) {
            n.read_slot(usize::from(qd) - 1 - i, &mut got).unwrap();
            assert!(got == data_for(i, len), "{io_size}: I/O {i} read back");
        }
        let c = ctrl.lock().unwrap();
        // On the "disk", at the right LBAs, and nothing after them.
        for i in 0..usize::from(qd) {
            assert!(
                c.disk[i * len..(i + 1) * len] == data_for(i, len),
                "{io_size}: I/O {i} on the disk"
            );
        }
        assert!(c.disk[usize::from(qd) * len..].iter().all(|&b| b == 0));
        // Every transfer covered its slot page by page, with no entry past
        // the buffer (the fake reads exactly as many list entries as
        // pages are left).
        assert_eq!(c.log.len(), 2 * usize::from(qd));
        for t in &c.log {
            let slot = if t.write {
                (t.slba / per_io) as usize
            } else {
                usize::from(qd) - 1 - (t.slba / per_io) as usize
            };
            assert_eq!(
                t.pages,
                pages_of(n.slot_iova(slot), len),
                "{io_size}: {t:?}"
            );
        }
    }
}

#[test]
fn prp_lists_live_in_their_own_page_per_slot() {
    let (n, _) = open_sized(Faults::default(), 12288, 8);
    let (base, size) = n.dma_window();
    let lists: Vec<u64> = (0..8).map(|i| n.prp_list_iova(i)).collect();
    for (i, &l) in lists.iter().enumerate() {
        assert_eq!(l % PAGE, 0);
        assert!(l >= base && l + PAGE <= base + size);
        let cmd = n.rw_command(NVM_READ, 0, i);
        assert_eq!((cmd.prp1, cmd.prp2), (n.slot_iova(i), l));
        // No list page overlaps any data slot.
        for j in 0..8 {
            let s = n.slot_iova(j);
            assert!(l + PAGE <= s || s + 12288 <= l, "list {i}, slot {j}");
        }
    }
    lists.windows(2).for_each(|w| assert_eq!(w[1], w[0] + PAGE));
    // Up to two pages PRP2 is a data page, not a list.
    let (n, _) = open_sized(Faults::default(), 8192, 2);
    let cmd = n.rw_command(NVM_READ, 0, 1);
    assert_eq!(cmd.prp2, n.slot_iova(1) + PAGE);
}

#[test]
fn the_fake_follows_list_pointers_and_checks_them() {
    let (mut n, ctrl) = open_sized(Faults::default(), MAX_IO_SIZE, 2);
    let len = MAX_IO_SIZE as usize;
    n.fill_slot(0, &data_for(0, len)).unwrap();
    let cmd = n.rw_command(NVM_WRITE, 0, 0);
    n.io_sync("write", cmd).unwrap();

    // A hand-made list in slot 1, starting 16 bytes before a page ends, so
    // its second entry must chain to the next page: the fake follows it.
    let s1 = n.slot_iova(1);
    let pages: Vec<u64> = (1..32).map(|p| n.slot_iova(0) + p * PAGE).collect();
    let mut mem = vec![0u8; 3 * PAGE as usize];
    let start = PAGE as usize - 16;
    mem[start..start + 8].copy_from_slice(&pages[0].to_le_bytes());
    mem[start + 8..start + 16].copy_from_slice(&(s1 + 2 * PAGE).to_le_bytes());
    for (k, p) in pages[1..].iter().enumerate() {
        let at = 2 * PAGE as usize + 8 * k;
        mem[at..at + 8].copy_from_slice(&p.to_le_bytes());
    }
    n.fill_slot(1, &mem).unwrap();
    let mut cmd = n.rw_command(NVM_READ, 0, 0);
    cmd.prp2 = s1 + start as u64;
    n.fill_slot(0, &vec![0u8; len]).unwrap();
    n.io_sync("read through a chained list", cmd).unwrap();
    let mut got = vec![0u8; len];
    n.read_slot(0, &mut got).unwrap();
    assert!(got == data_for(0, len));
    assert_eq!(
        ctrl.lock().unwrap().log.last().unwrap().pages,
        pages_of(n.slot_iova(0), len)
    );

    // A list nobody mapped: the transfer fails.
    let (base, size) = n.dma_window();
    let mut cmd = n.rw_command(NVM_READ, 0, 0);
    cmd.prp2 = base + size + 0x20_0000;
    match n.io_sync("read with an unmapped list", cmd) {
        Err(NvmeError::Command { sc: 0x04, .. }) => {}
        other => panic!("{other:?}"),
    }
    // An entry with an offset: PRP Offset Invalid.
    let mut bad = vec![0u8; PAGE as usize];
    bad[..8].copy_from_slice(&(pages[0] + 0x200).to_le_bytes());
    n.fill_slot(1, &bad).unwrap();
    let mut cmd = n.rw_command(NVM_READ, 0, 0);
    cmd.prp2 = s1;
    match n.io_sync("read with a misaligned entry", cmd) {
        Err(NvmeError::Command { sc: 0x13, .. }) => {}
        other => panic!("{other:?}"),
    }
    // The driver's own commands still work.
    let cmd = n.rw_command(NVM_READ, 0, 0);
    n.io_sync("read after", cmd).unwrap();
}

#[test]
fn an_io_size_above_mdts_is_refused_naming_it() {
    // MDTS 4: 16 pages, 64 KiB.
    let (m, _) = fake_nvme_ctrl(Faults {
        mdts: 4,
        ..Default::default()
    });
    let dev = RemoteDevice::with_backend(Path::new("/sys/bus/mdev/devices/fake"), m);
    let mut n = Nvme::new(
        dev,
        NvmeConfig {
            io_size: MAX_IO_SIZE,
            ..cfg()
        },
    )
    .unwrap();
    let e = n.identify_and_setup().unwrap_err();
    match &e {
        NvmeError::Mdts {
            io_size: MAX_IO_SIZE,
            mdts: 4,
            max: 65536,
        } => {}
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains("MDTS"), "{e}");

    // At the limit it works, and Identity reports it.
    let (mut n, _) = open_sized(
        Faults {
            mdts: 5,
            ..Default::default()
        },
        MAX_IO_SIZE,
        2,
    );
    let cmd = n.rw_command(NVM_WRITE, 0, 1);
    n.io_sync("write of MDTS bytes", cmd).unwrap();
    let mut n2 = open(Faults {
        mdts: 5,
        ..Default::default()
    });
    let id = n2.identify_and_setup().unwrap();
    assert_eq!((id.mdts, id.max_transfer_bytes), (5, Some(128 << 10)));
    let id = open(Faults::default()).identify_and_setup().unwrap();
    assert_eq!((id.mdts, id.max_transfer_bytes), (0, None));
    // The fake enforces MDTS too, so a driver that ignored it would fail.
    let mut cmd = n.rw_command(NVM_WRITE, 0, 1);
    cmd.cdw[2] = (MAX_IO_SIZE / BS as u32) * 2 - 1;
    match n.io_sync("write past MDTS", cmd) {
        Err(NvmeError::Command { sc: 0x02, .. }) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_controller_without_4k_pages_is_refused() {
    let dev = RemoteDevice::with_backend(
        Path::new("/sys/bus/mdev/devices/fake"),
        fake_nvme(Faults {
            mpsmin: 1,
            ..Default::default()
        }),
    );
    match Nvme::new(dev, cfg()) {
        Err(NvmeError::Config(msg)) => assert!(msg.contains("MPSMIN"), "{msg}"),
        other => panic!("{other:?}"),
    }
}
