//! The QEMU command line of one emulated host.
//!
//! Everything that makes a set of QEMU processes a PCIe cluster is here:
//! - the host's RAM is a shared file, so peers can map it;
//! - per peer, an `ivshmem-plain` whose memory is that peer's RAM file: a
//!   window onto the peer's whole physical memory, as an NTB window with an
//!   identity translation would be; a host sends messages by writing into
//!   the peer's inbox through it;
//! - one `ivshmem-doorbell` (the fabric adapter) connected to devlend's
//!   ivshmem server on the socket of this host's id: doorbells to peers, and
//!   the shared control area with the host info slots;
//! - lenders sit on q35 behind an emulated Intel IOMMU and carry the devices
//!   they lend, each behind its own root port so it is alone in its IOMMU
//!   group (a multi-function `gpu`'s two functions share theirs);
//! - the host boots devlend's initramfs, which mounts the outer machine's
//!   root read-only over 9p and runs the agent the harness talks to.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::topology::{DiskControllerSpec, GpuSpec, HostSpec, Topology};

/// Where one run of a cluster keeps its files.
#[derive(Debug, Clone)]
pub struct RunPaths {
    /// Sockets, logs, backing files, the control area: `/var/tmp/devlend/<run>`.
    pub state: PathBuf,
    /// RAM files of the hosts, in memory: `/dev/shm/devlend-<run>`.
    pub ram: PathBuf,
    /// Directory shared read-write with every host (same path inside).
    pub share: PathBuf,
}

impl RunPaths {
    /// The RAM file of a host.
    pub fn ram_file(&self, host: &str) -> PathBuf {
        self.ram.join(format!("{host}.ram"))
    }
    /// The serial console log of a host.
    pub fn serial_log(&self, host: &str) -> PathBuf {
        self.state.join(format!("{host}.serial.log"))
    }
    /// The agent's socket of a host.
    pub fn agent_sock(&self, host: &str) -> PathBuf {
        self.state.join(format!("{host}.agent.sock"))
    }
    /// The QMP socket of a host.
    pub fn qmp_sock(&self, host: &str) -> PathBuf {
        self.state.join(format!("{host}.qmp.sock"))
    }
    /// The QEMU pidfile of a host.
    pub fn pidfile(&self, host: &str) -> PathBuf {
        self.state.join(format!("{host}.pid"))
    }
    /// The ivshmem server socket for fabric host id `id`.
    pub fn doorbell_sock(&self, id: usize) -> PathBuf {
        self.state.join(format!("doorbell-{id}.sock"))
    }
    /// The socket of a cluster-wide network's switch.
    pub fn net_sock(&self, network: &str) -> PathBuf {
        self.state.join(format!("net-{network}.sock"))
    }
    /// The fabric control area file.
    pub fn ctl_file(&self) -> PathBuf {
        self.state.join("fabric.ctl")
    }
    /// The backing file of a disk: an NVMe drive or an AHCI controller's.
    pub fn disk_file(&self, host: &str, id: &str) -> PathBuf {
        self.state.join(format!("{host}-{id}.img"))
    }
    /// The backing file of an NVMe drive.
    pub fn nvme_file(&self, host: &str, id: &str) -> PathBuf {
        self.disk_file(host, id)
    }
    /// The backing file of an NVMe drive's persistent memory region.
    pub fn pmr_file(&self, host: &str, id: &str) -> PathBuf {
        self.state.join(format!("{host}-{id}.pmr"))
    }
}

/// What a host boots.
#[derive(Debug, Clone)]
pub struct BootFiles {
    /// Kernel image.
    pub kernel: PathBuf,
    /// Host initramfs.
    pub initrd: PathBuf,
    /// The agent binary, run inside the host from the outer machine's root.
    pub agent: PathBuf,
    /// More kernel arguments for every host ("" for none).
    pub append: String,
}

/// Doorbell vectors of the fabric adapter: all a host may have, since the
/// ones above the fabric's own carry lent devices' interrupts straight
/// through the fabric.
pub const DOORBELL_VECTORS: u32 = devlend_wire::DL_DB_VECTORS_MAX;

fn push(args: &mut Vec<OsString>, items: &[&str]) {
    args.extend(items.iter().map(OsString::from));
}

fn path_str(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// A raw disk image `file` as the drive `drv-<id>`, for a device to use.
/// A locally administered MAC for NIC `nic` of host `host`: unique in the
/// cluster (each QEMU would otherwise start from the same default).
fn nic_mac(host: usize, nic: usize) -> String {
    format!("52:54:00:d1:{:02x}:{:02x}", host & 0xff, nic & 0xff)
}

fn drive_args(id: &str, file: &Path) -> Vec<String> {
    vec![
        "-drive".to_owned(),
        format!(
            "if=none,id=drv-{id},file={},format=raw,cache=none,aio=threads",
            path_str(file)
        ),
    ]
}

/// The QEMU arguments of a [`GpuSpec`] on the secondary bus of the root
/// port `rp-<id>`: two functions of one slot, one IOMMU group (neither
/// has ACS): the display adapter at function 0, which says it is
/// multi-function so that the OS looks at the slot's other functions, and
/// the HDA controller at function 1 with its codec, which plays into an
/// audio backend that discards (QEMU refuses a codec without one).
///
/// The display is a `virtio-gpu-pci`, as a GPU does: the guest's driver
/// has the device fetch what it draws from guest RAM by DMA, through the
/// IOMMU (`iommu_platform=on`, which a lender requires of a virtio
/// device). A framebuffer in a BAR (`bochs-display`) would be written
/// through a borrower's relay, a message per access (the emulated
/// fabric's windows reach RAM, not a device's memory), which took
/// minutes for one screen under TCG. 320x240 (the preferred mode of its
/// EDID, which the guest's driver takes) keeps every transfer small.
pub fn gpu_args(d: &GpuSpec) -> Vec<String> {
    let id = &d.id;
    let hda = d.hda_id();
    vec![
        "-device".to_owned(),
        format!(
            "virtio-gpu-pci,id={id},bus=rp-{id},addr=0.0,multifunction=on,\
             iommu_platform=on,xres=320,yres=240"
        ),
        "-device".to_owned(),
        format!("intel-hda,id={hda},bus=rp-{id},addr=0.1"),
        "-audiodev".to_owned(),
        format!("none,id=snd-{id}"),
        "-device".to_owned(),
        format!("hda-duplex,bus={hda}.0,audiodev=snd-{id}"),
    ]
}

/// The arguments (without the program) of QEMU for host `id`.
pub fn host_args(topo: &Topology, id: usize, paths: &RunPaths, boot: &BootFiles) -> Vec<OsString> {
    let host: &HostSpec = &topo.hosts[id];
    let mem = host.memory.mib();
    // RAM partly above 4 GiB, as a server's: the RAM file is still the
    // whole RAM, low part first (the layout the fabric publishes).
    let machine = match host.ram_below_4g {
        Some(low) => format!(
            "q35,accel=tcg,memory-backend=ram,max-ram-below-4g={}M",
            low.mib()
        ),
        None => "q35,accel=tcg,memory-backend=ram".to_owned(),
    };
    let mut a: Vec<OsString> = Vec::new();
    push(
        &mut a,
        &[
            // Threads named by role ("CPU 0/TCG"), for the watchdog's
            // reports and for anyone reading /proc.
            "-name",
            &format!(
                "devlend-{}-{},process=devlend-{},debug-threads=on",
                topo.name, host.name, host.name
            ),
            "-machine",
            &machine,
            "-cpu",
            "max",
            "-smp",
            &host.cpus.to_string(),
            "-m",
            &format!("{mem}M"),
            "-object",
            &format!(
                "memory-backend-file,id=ram,size={mem}M,mem-path={},share=on",
                path_str(&paths.ram_file(&host.name))
            ),
            "-nodefaults",
            "-display",
            "none",
            "-no-reboot",
            "-serial",
            &format!("file:{}", path_str(&paths.serial_log(&host.name))),
            "-pidfile",
            &path_str(&paths.pidfile(&host.name)),
            "-qmp",
            &format!(
                "unix:{},server=on,wait=off",
                path_str(&paths.qmp_sock(&host.name))
            ),
        ],
    );
    // The IOMMU must come before the devices it translates for.
    if host.iommu {
        push(&mut a, &["-device", "intel-iommu"]);
    }
    // no_timer_check: Linux's early check that the timer interrupt
    // arrives counts ticks against a calibrated delay, which a TCG host
    // on a busy machine can miss; with interrupt remapping on (an IOMMU)
    // a miss is a panic ("timer doesn't work through Interrupt-remapped
    // IO-APIC"), seen once on a devices cluster. The check is for broken
    // hardware timers, which QEMU's are not.
    let mut cmdline = format!(
        "console=ttyS0 panic=-1 no_timer_check devlend.agent={} devlend.share={} devlend.hostname={}",
        path_str(&boot.agent),
        path_str(&paths.share),
        host.name
    );
    if host.iommu {
        cmdline.push_str(" intel_iommu=on");
    }
    if !boot.append.is_empty() {
        cmdline.push(' ');
        cmdline.push_str(&boot.append);
    }
    push(
        &mut a,
        &[
            "-kernel",
            &path_str(&boot.kernel),
            "-initrd",
            &path_str(&boot.initrd),
            "-append",
            &cmdline,
            "-virtfs",
            "local,path=/,mount_tag=hostroot,security_model=none,readonly=on",
            "-virtfs",
            &format!(
                "local,path={},mount_tag=devlend-share,security_model=none",
                path_str(&paths.share)
            ),
            "-device",
            "virtio-serial-pci",
            "-chardev",
            &format!(
                "socket,id=agent,path={},server=on,wait=off",
                path_str(&paths.agent_sock(&host.name))
            ),
            "-device",
            "virtserialport,chardev=agent,name=org.devlend.agent",
        ],
    );
    // The fabric adapter.
    push(
        &mut a,
        &[
            "-chardev",
            &format!(
                "socket,id=fabric,path={}",
                path_str(&paths.doorbell_sock(id))
            ),
            "-device",
            &format!("ivshmem-doorbell,id=fabric0,chardev=fabric,vectors={DOORBELL_VECTORS}"),
        ],
    );
    // A window onto every peer's RAM.
    for (pid, peer) in topo.hosts.iter().enumerate() {
        if pid == id {
            continue;
        }
        push(
            &mut a,
            &[
                "-object",
                &format!(
                    "memory-backend-file,id=win{pid},size={}M,mem-path={},share=on",
                    peer.memory.mib(),
                    path_str(&paths.ram_file(&peer.name))
                ),
                "-device",
                &format!("ivshmem-plain,id=window{pid},memdev=win{pid}"),
            ],
        );
    }
    // A window onto every peer's NVMe persistent memory region: the
    // emulated fabric's windows reach files, and this BAR is one.
    for (pid, peer) in topo.hosts.iter().enumerate() {
        if pid == id {
            continue;
        }
        for d in &peer.nvme {
            let Some(pmr) = d.pmr else { continue };
            let obj = format!("pmrwin-{}-{}", peer.name, d.id);
            push(
                &mut a,
                &[
                    "-object",
                    &format!(
                        "memory-backend-file,id={obj},size={},mem-path={},share=on",
                        pmr.0,
                        path_str(&paths.pmr_file(&peer.name, &d.id))
                    ),
                    "-device",
                    &format!("ivshmem-plain,id={obj}-dev,memdev={obj}"),
                ],
            );
        }
    }
    // Devices to lend, each behind its own root port (alone in its group),
    // with the device's own arguments after the port's.
    let nvme = host.nvme.iter().map(|d| {
        let serial = d
            .serial
            .clone()
            .unwrap_or_else(|| format!("devlend-{}-{}", host.name, d.id));
        let id = &d.id;
        let mut args = drive_args(id, &paths.nvme_file(&host.name, id));
        let mut pmr = String::new();
        if let Some(size) = d.pmr {
            args.extend([
                "-object".to_owned(),
                format!(
                    "memory-backend-file,id=pmr-{id},size={},mem-path={},share=on",
                    size.0,
                    path_str(&paths.pmr_file(&host.name, id))
                ),
            ]);
            pmr = format!(",pmrdev=pmr-{id}");
        }
        let cmb = d
            .cmb
            .map(|size| format!(",cmb_size_mb={}", size.0 >> 20))
            .unwrap_or_default();
        args.extend([
            "-device".to_owned(),
            format!("nvme,id={id},drive=drv-{id},serial={serial},bus=rp-{id}{pmr}{cmb}"),
        ]);
        (id.clone(), args)
    });
    // MACs unique in the cluster: host index, then NIC.
    let host_id = id;
    let nics = host.nics().enumerate().map(|(n, (model, d))| {
        let id = &d.id;
        let hub = n + 1;
        let mut args = vec![
            "-netdev".to_owned(),
            format!("hubport,id=net-{id},hubid={hub}"),
            "-device".to_owned(),
            format!(
                "{model},id={id},netdev=net-{id},bus=rp-{id},mac={}",
                nic_mac(host_id, 2 * n)
            ),
        ];
        if let Some(net) = &d.network {
            // The hub's way out to the other hosts on the network.
            args.extend([
                "-netdev".to_owned(),
                format!(
                    "stream,id=lan-{id},server=off,addr.type=unix,addr.path={}",
                    path_str(&paths.net_sock(net))
                ),
                "-netdev".to_owned(),
                format!("hubport,id=up-{id},hubid={hub},netdev=lan-{id}"),
            ]);
        }
        if d.peer {
            args.extend([
                "-netdev".to_owned(),
                format!("hubport,id=peer-{id},hubid={hub}"),
                "-device".to_owned(),
                format!(
                    "virtio-net-pci,id=peer-{id},netdev=peer-{id},mac={}",
                    nic_mac(host_id, 2 * n + 1)
                ),
            ]);
        }
        (id.clone(), args)
    });
    // A disk controller with one disk on its first bus: `controller` and
    // `disk` are QEMU device types, `disk_opts` what the disk adds.
    let with_disk = |d: &DiskControllerSpec, controller: &str, disk: &str, disk_opts: &str| {
        let id = &d.id;
        let mut args = drive_args(id, &paths.disk_file(&host.name, id));
        args.extend([
            "-device".to_owned(),
            format!("{controller},id={id},bus=rp-{id}"),
            "-device".to_owned(),
            format!(
                "{disk},drive=drv-{id},bus={id}.0{disk_opts},serial=devlend-{}-{id}",
                host.name
            ),
        ]);
        (id.clone(), args)
    };
    let ahci = host
        .ahci
        .iter()
        .map(|d| with_disk(d, "ich9-ahci", "ide-hd", ""));
    // Conventional PCI on a root port, as the e1000 is; its disk at SCSI
    // id 0, LUN 0.
    let lsi = host
        .lsi
        .iter()
        .map(|d| with_disk(d, "lsi53c895a", "scsi-hd", ",scsi-id=0,lun=0"));
    // Modern only: the guest's virtio-pci finds the device through its
    // vendor-specific capabilities and notifies it through a memory BAR.
    // Its DMA goes through the IOMMU only with iommu_platform=on (QEMU's
    // virtio devices otherwise reach the host's memory directly).
    let virtio_blk = host.virtio_blk.iter().map(|d| {
        let id = &d.id;
        let mut args = drive_args(id, &paths.disk_file(&host.name, id));
        let platform = if d.bypasses_iommu { "off" } else { "on" };
        args.extend([
            "-device".to_owned(),
            format!(
                "virtio-blk-pci,id={id},bus=rp-{id},drive=drv-{id},disable-legacy=on,\
                 iommu_platform={platform},serial=devlend-{}-{id}",
                host.name
            ),
        ]);
        (id.clone(), args)
    });
    // SR-IOV: the PF in an NVM subsystem of its own (QEMU's SR-IOV needs
    // one), 2 queues (admin and one I/O) and 1 vector per VF to assign,
    // and one private namespace per VF that no controller has at boot.
    let nvme_sriov = host.nvme_sriov.iter().map(|d| {
        let id = &d.id;
        let mut args = vec![
            "-device".to_owned(),
            format!("nvme-subsys,id=subsys-{id},nqn=devlend-{}-{id}", host.name),
            "-device".to_owned(),
            format!(
                "nvme,id={id},serial=devlend-{}-{id},bus=rp-{id},subsys=subsys-{id},\
                 sriov_max_vfs={vfs},sriov_vq_flexible={vq},sriov_vi_flexible={vfs}",
                host.name,
                vfs = d.vfs,
                vq = 2 * d.vfs
            ),
        ];
        for nsid in 1..=d.vfs {
            let ns = d.ns_id(nsid);
            args.extend(drive_args(&ns, &paths.disk_file(&host.name, &ns)));
            args.extend([
                "-device".to_owned(),
                format!("nvme-ns,drive=drv-{ns},bus={id},nsid={nsid},shared=off,detached=on"),
            ]);
        }
        (id.clone(), args)
    });
    let vga = host.vga.iter().map(|d| {
        let id = &d.id;
        let args = vec![
            "-device".to_owned(),
            format!("secondary-vga,id={id},bus=rp-{id}"),
        ];
        (id.clone(), args)
    });
    let gpu = host.gpu.iter().map(|d| (d.id.clone(), gpu_args(d)));
    for (chassis, (id, dev_args)) in (1..).zip(
        nvme.chain(nics)
            .chain(ahci)
            .chain(vga)
            .chain(lsi)
            .chain(virtio_blk)
            .chain(nvme_sriov)
            .chain(gpu),
    ) {
        push(
            &mut a,
            &[
                "-device",
                &format!("pcie-root-port,id=rp-{id},chassis={chassis},slot={chassis}"),
            ],
        );
        a.extend(dev_args.into_iter().map(OsString::from));
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topo() -> Topology {
        let t: Topology = toml::from_str(
            "name='t'\n[[host]]\nname='lender'\nmemory='1G'\niommu=true\n\
             [[host.nvme]]\nid='nvme0'\nsize='64M'\n[[host.igb]]\nid='igb0'\npeer=true\n\
             [[host.ahci]]\nid='sata0'\nsize='16M'\n[[host.e1000]]\nid='nic1'\npeer=true\n\
             [[host.lsi]]\nid='scsi0'\nsize='16M'\n\
             [[host.virtio_blk]]\nid='vblk0'\nsize='16M'\n\
             [[host.nvme_sriov]]\nid='nvsr0'\nvfs=2\nsize='16M'\n\
             [[host]]\nname='borrower'\nmemory='512M'\ncpus=2\n\
             [[host.virtio_net]]\nid='lan0'\nnetwork='lan0'\n[[host.vga]]\nid='vga0'\n\
             [[host]]\nname='other'\nmemory='512M'\niommu=true\n\
             [[host.igb]]\nid='nic0'\nnetwork='lan0'\n",
        )
        .unwrap();
        t.validate().unwrap();
        t
    }

    fn paths() -> RunPaths {
        RunPaths {
            state: "/var/tmp/devlend/t-1".into(),
            ram: "/dev/shm/devlend-t-1".into(),
            share: "/var/tmp/devlend/t-1/share".into(),
        }
    }

    fn boot() -> BootFiles {
        BootFiles {
            kernel: "/img/vmlinuz".into(),
            initrd: "/img/host-initrd.img".into(),
            agent: "/bin/devlend-agent".into(),
            append: String::new(),
        }
    }

    fn args(id: usize) -> Vec<String> {
        host_args(&topo(), id, &paths(), &boot())
            .into_iter()
            .map(|s| s.into_string().unwrap())
            .collect()
    }

    fn value_after<'a>(a: &'a [String], flag: &str, containing: &str) -> Vec<&'a str> {
        a.windows(2)
            .filter(|w| w[0] == flag && w[1].contains(containing))
            .map(|w| w[1].as_str())
            .collect()
    }

    #[test]
    fn ram_is_a_shared_file() {
        let a = args(0);
        assert_eq!(
            value_after(&a, "-object", "id=ram,"),
            ["memory-backend-file,id=ram,size=1024M,mem-path=/dev/shm/devlend-t-1/lender.ram,share=on"]
        );
        assert!(value_after(&a, "-machine", "memory-backend=ram").len() == 1);
    }

    #[test]
    fn ram_above_4g_only_when_asked() {
        let a = args(0);
        assert_eq!(
            value_after(&a, "-machine", "q35"),
            ["q35,accel=tcg,memory-backend=ram"]
        );
        let mut t = topo();
        t.hosts[1].ram_below_4g = Some(crate::topology::Size(256 << 20));
        t.validate().unwrap();
        let b: Vec<String> = host_args(&t, 1, &paths(), &boot())
            .into_iter()
            .map(|s| s.into_string().unwrap())
            .collect();
        assert_eq!(
            value_after(&b, "-machine", "q35"),
            ["q35,accel=tcg,memory-backend=ram,max-ram-below-4g=256M"]
        );
        // The RAM file is the whole RAM still.
        assert_eq!(
            value_after(&b, "-object", "id=ram,"),
            ["memory-backend-file,id=ram,size=512M,mem-path=/dev/shm/devlend-t-1/borrower.ram,share=on"]
        );
    }

    #[test]
    fn each_host_has_a_window_onto_every_peer() {
        let lender = args(0);
        assert_eq!(
            value_after(&lender, "-object", "id=win"),
            [
                "memory-backend-file,id=win1,size=512M,mem-path=/dev/shm/devlend-t-1/borrower.ram,share=on",
                "memory-backend-file,id=win2,size=512M,mem-path=/dev/shm/devlend-t-1/other.ram,share=on"
            ]
        );
        let borrower = args(1);
        assert_eq!(
            value_after(&borrower, "-object", "id=win"),
            [
                "memory-backend-file,id=win0,size=1024M,mem-path=/dev/shm/devlend-t-1/lender.ram,share=on",
                "memory-backend-file,id=win2,size=512M,mem-path=/dev/shm/devlend-t-1/other.ram,share=on"
            ]
        );
        assert_eq!(value_after(&borrower, "-device", "ivshmem-plain").len(), 2);
    }

    #[test]
    fn nvme_pmr_is_a_file_every_other_host_has_a_window_onto() {
        let mut t = topo();
        t.hosts[0].nvme[0].pmr = Some(crate::topology::Size(8 << 20));
        t.validate().unwrap();
        let host = |i| -> Vec<String> {
            host_args(&t, i, &paths(), &boot())
                .into_iter()
                .map(|s| s.into_string().unwrap())
                .collect()
        };
        let (lender, borrower) = (host(0), host(1));
        let file = "/var/tmp/devlend/t-1/lender-nvme0.pmr";
        assert_eq!(
            value_after(&lender, "-object", "id=pmr-nvme0"),
            [format!(
                "memory-backend-file,id=pmr-nvme0,size=8388608,mem-path={file},share=on"
            )]
        );
        assert!(value_after(&lender, "-device", "nvme,id=nvme0")[0].ends_with(",pmrdev=pmr-nvme0"));
        assert!(value_after(&lender, "-object", "pmrwin").is_empty());
        assert_eq!(
            value_after(&borrower, "-object", "id=pmrwin-lender-nvme0"),
            [format!(
                "memory-backend-file,id=pmrwin-lender-nvme0,size=8388608,mem-path={file},share=on"
            )]
        );
        assert_eq!(
            value_after(&borrower, "-device", "ivshmem-plain,id=pmrwin"),
            ["ivshmem-plain,id=pmrwin-lender-nvme0-dev,memdev=pmrwin-lender-nvme0"]
        );
        t.hosts[0].nvme[0].pmr = Some(crate::topology::Size(3 << 20));
        assert!(t.validate().is_err());
    }

    #[test]
    fn nvme_cmb_is_given_in_whole_mib() {
        let mut t = topo();
        t.hosts[0].nvme[0].cmb = Some(crate::topology::Size(16 << 20));
        t.validate().unwrap();
        let lender: Vec<String> = host_args(&t, 0, &paths(), &boot())
            .into_iter()
            .map(|s| s.into_string().unwrap())
            .collect();
        assert!(value_after(&lender, "-device", "nvme,id=nvme0")[0].ends_with(",cmb_size_mb=16"));
        t.hosts[0].nvme[0].cmb = Some(crate::topology::Size(3 << 19));
        assert!(t.validate().is_err());
        t.hosts[0].nvme[0].cmb = Some(crate::topology::Size(0));
        assert!(t.validate().is_err());
    }

    #[test]
    fn doorbell_uses_the_socket_of_the_host_id() {
        let a = args(1);
        assert_eq!(
            value_after(&a, "-chardev", "id=fabric"),
            ["socket,id=fabric,path=/var/tmp/devlend/t-1/doorbell-1.sock"]
        );
        assert_eq!(
            value_after(&a, "-device", "ivshmem-doorbell"),
            [format!(
                "ivshmem-doorbell,id=fabric0,chardev=fabric,vectors={DOORBELL_VECTORS}"
            )]
        );
    }

    #[test]
    fn lender_has_iommu_before_its_nvme_behind_a_root_port() {
        let a = args(0);
        let iommu = a.iter().position(|s| s == "intel-iommu").unwrap();
        let nvme = a.iter().position(|s| s.starts_with("nvme,")).unwrap();
        assert!(iommu < nvme);
        assert_eq!(
            a[nvme],
            "nvme,id=nvme0,drive=drv-nvme0,serial=devlend-lender-nvme0,bus=rp-nvme0"
        );
        assert!(value_after(&a, "-append", "intel_iommu=on").len() == 1);
        assert_eq!(
            value_after(&a, "-device", "igb,"),
            ["igb,id=igb0,netdev=net-igb0,bus=rp-igb0,mac=52:54:00:d1:00:00"]
        );
        // The host's own NIC on the igb's hub.
        assert_eq!(
            value_after(&a, "-netdev", "igb0"),
            [
                "hubport,id=net-igb0,hubid=1",
                "hubport,id=peer-igb0,hubid=1"
            ]
        );
        assert_eq!(
            value_after(&a, "-device", "peer-igb0"),
            ["virtio-net-pci,id=peer-igb0,netdev=peer-igb0,mac=52:54:00:d1:00:01"]
        );
        assert_eq!(value_after(&a, "-device", "pcie-root-port").len(), 7);
        // SR-IOV: the PF in its subsystem, a detached private namespace
        // per VF.
        assert_eq!(
            value_after(&a, "-device", "nvsr0"),
            [
                "pcie-root-port,id=rp-nvsr0,chassis=7,slot=7",
                "nvme-subsys,id=subsys-nvsr0,nqn=devlend-lender-nvsr0",
                "nvme,id=nvsr0,serial=devlend-lender-nvsr0,bus=rp-nvsr0,subsys=subsys-nvsr0,\
                 sriov_max_vfs=2,sriov_vq_flexible=4,sriov_vi_flexible=2",
                "nvme-ns,drive=drv-nvsr0-ns1,bus=nvsr0,nsid=1,shared=off,detached=on",
                "nvme-ns,drive=drv-nvsr0-ns2,bus=nvsr0,nsid=2,shared=off,detached=on"
            ]
        );
        // Conventional PCI with its SCSI disk.
        assert_eq!(
            value_after(&a, "-device", "scsi0"),
            [
                "pcie-root-port,id=rp-scsi0,chassis=5,slot=5",
                "lsi53c895a,id=scsi0,bus=rp-scsi0",
                "scsi-hd,drive=drv-scsi0,bus=scsi0.0,scsi-id=0,lun=0,serial=devlend-lender-scsi0"
            ]
        );
        // Modern only, after it.
        assert_eq!(
            value_after(&a, "-device", "vblk0"),
            [
                "pcie-root-port,id=rp-vblk0,chassis=6,slot=6",
                "virtio-blk-pci,id=vblk0,bus=rp-vblk0,drive=drv-vblk0,disable-legacy=on,iommu_platform=on,serial=devlend-lender-vblk0"
            ]
        );
        assert_eq!(
            value_after(&a, "-device", "sata0"),
            [
                "pcie-root-port,id=rp-sata0,chassis=4,slot=4",
                "ich9-ahci,id=sata0,bus=rp-sata0",
                "ide-hd,drive=drv-sata0,bus=sata0.0,serial=devlend-lender-sata0"
            ]
        );
        // Each NIC on a hub of its own with its peer; MACs unique.
        assert_eq!(
            value_after(&a, "-device", "nic1"),
            [
                "pcie-root-port,id=rp-nic1,chassis=3,slot=3",
                "e1000,id=nic1,netdev=net-nic1,bus=rp-nic1,mac=52:54:00:d1:00:02",
                "virtio-net-pci,id=peer-nic1,netdev=peer-nic1,mac=52:54:00:d1:00:03"
            ]
        );
        assert_eq!(
            value_after(&a, "-netdev", "nic1"),
            [
                "hubport,id=net-nic1,hubid=2",
                "hubport,id=peer-nic1,hubid=2"
            ]
        );
        let b = args(1);
        assert!(!b.iter().any(|s| s == "intel-iommu"));
        assert!(!b.iter().any(|s| s.starts_with("nvme,")));
    }

    #[test]
    fn nics_of_different_hosts_share_a_network_through_its_switch() {
        let sock = "addr.path=/var/tmp/devlend/t-1/net-lan0.sock";
        // The borrower's own NIC: behind a root port, its hub out to the switch.
        let b = args(1);
        assert_eq!(
            value_after(&b, "-device", "lan0"),
            [
                "pcie-root-port,id=rp-lan0,chassis=1,slot=1",
                "virtio-net-pci,id=lan0,netdev=net-lan0,bus=rp-lan0,mac=52:54:00:d1:01:00"
            ]
        );
        assert_eq!(
            value_after(&b, "-netdev", "lan0"),
            [
                "hubport,id=net-lan0,hubid=1".to_owned(),
                format!("stream,id=lan-lan0,server=off,addr.type=unix,{sock}"),
                "hubport,id=up-lan0,hubid=1,netdev=lan-lan0".to_owned(),
            ]
        );
        // The other host's igb on the same switch, with a MAC of its own.
        let o = args(2);
        assert_eq!(
            value_after(&o, "-netdev", "nic0"),
            [
                "hubport,id=net-nic0,hubid=1".to_owned(),
                format!("stream,id=lan-nic0,server=off,addr.type=unix,{sock}"),
                "hubport,id=up-nic0,hubid=1,netdev=lan-nic0".to_owned(),
            ]
        );
        assert_eq!(
            value_after(&o, "-device", "igb,"),
            ["igb,id=nic0,netdev=net-nic0,bus=rp-nic0,mac=52:54:00:d1:02:00"]
        );
        // A display adapter, behind the next root port.
        assert_eq!(
            value_after(&b, "-device", "vga0"),
            [
                "pcie-root-port,id=rp-vga0,chassis=2,slot=2",
                "secondary-vga,id=vga0,bus=rp-vga0"
            ]
        );
        // NICs without a network stay on their host's hub.
        assert!(!args(0).iter().any(|s| s.contains("stream")));
    }

    #[test]
    fn gpu_is_display_and_audio_functions_of_one_slot() {
        let mut t = topo();
        t.hosts[0]
            .gpu
            .push(crate::topology::GpuSpec { id: "gpu0".into() });
        t.validate().unwrap();
        let a: Vec<String> = host_args(&t, 0, &paths(), &boot())
            .into_iter()
            .map(|s| s.into_string().unwrap())
            .collect();
        // Behind the next root port after the other devices, function 0
        // multi-function, the HDA controller at function 1 with its codec
        // on the controller's bus.
        assert_eq!(
            value_after(&a, "-device", "gpu0"),
            [
                "pcie-root-port,id=rp-gpu0,chassis=8,slot=8",
                "virtio-gpu-pci,id=gpu0,bus=rp-gpu0,addr=0.0,multifunction=on,\
                 iommu_platform=on,xres=320,yres=240",
                "intel-hda,id=gpu0-hda,bus=rp-gpu0,addr=0.1",
                "hda-duplex,bus=gpu0-hda.0,audiodev=snd-gpu0"
            ]
        );
        assert_eq!(value_after(&a, "-audiodev", ""), ["none,id=snd-gpu0"]);
        // The codec's backend comes before the codec.
        let backend = a.iter().position(|s| s == "none,id=snd-gpu0").unwrap();
        let codec = a.iter().position(|s| s.starts_with("hda-duplex,")).unwrap();
        assert!(backend < codec);
        // One root port more, nothing else moved.
        assert_eq!(value_after(&a, "-device", "pcie-root-port").len(), 8);
        assert_eq!(
            value_after(&a, "-device", "rp-nvsr0")[0],
            "pcie-root-port,id=rp-nvsr0,chassis=7,slot=7"
        );
        // No gpu, no audio backend.
        assert!(args(0).iter().all(|s| s != "-audiodev"));
    }

    #[test]
    fn boots_the_agent_with_hostroot() {
        let a = args(1);
        let append = value_after(&a, "-append", "devlend.agent")[0];
        assert!(append.contains("devlend.agent=/bin/devlend-agent"));
        assert!(append.contains("devlend.hostname=borrower"));
        assert!(append.contains("devlend.share=/var/tmp/devlend/t-1/share"));
        assert_eq!(value_after(&a, "-virtfs", "mount_tag=hostroot").len(), 1);
        assert_eq!(value_after(&a, "-smp", "2"), ["2"]);
    }
    /// The benchmark's lender (qemu-scripts/topologies/bench.toml) carries
    /// two NVMe drives that differ only in their names and backing files,
    /// so that the one lent and the one used locally are the same device.
    #[test]
    fn bench_topology_has_two_identical_nvmes_on_the_lender() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../qemu-scripts/topologies/bench.toml");
        let t = Topology::load(&path).unwrap();
        let (lender, spec) = t.host("lender").unwrap();
        assert_eq!(spec.nvme.len(), 2);
        assert_eq!(spec.nvme[0].size, spec.nvme[1].size);
        let a: Vec<String> = host_args(&t, lender, &paths(), &boot())
            .into_iter()
            .map(|s| s.into_string().unwrap())
            .collect();
        let drives = value_after(&a, "-drive", "id=drv-nvme");
        let devices = value_after(&a, "-device", "nvme,");
        assert_eq!((drives.len(), devices.len()), (2, 2));
        // The same options once the names are taken out.
        let same = |v: &[&str]| v[0].replace("nvme0", "nvmeN") == v[1].replace("nvme1", "nvmeN");
        assert!(same(&drives), "{drives:?}");
        assert!(same(&devices), "{devices:?}");
        assert_ne!(drives[0], drives[1], "separate backing files");
        assert_eq!(t.host("borrower").unwrap().1.nvme.len(), 0);
    }
}
