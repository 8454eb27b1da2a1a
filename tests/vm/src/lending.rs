//! Driving device lending through sysfs, as docs/lending.md describes it:
//! lend on the lender, discover and create mdevs on the borrower.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use devlend_agent::AgentClient;

use crate::fabric::{self, sh};

/// PCI class of an NVMe controller.
pub const NVME_CLASS: &str = "0x010802";

/// The lender's driver directory.
pub const LENDER_DRIVER: &str = "/sys/bus/pci/drivers/devlend-lender";

/// A PCI device of a host: its address and ids as sysfs shows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciDev {
    /// Domain:bus:slot.function.
    pub addr: String,
    /// "0x1b36".
    pub vendor: String,
    /// "0x0010".
    pub device: String,
}

/// The module, with what the borrower needs to open mdevs (the type1
/// IOMMU backend of VFIO containers, which QEMU uses).
pub fn ensure_module(agent: &AgentClient) -> anyhow::Result<()> {
    fabric::ensure_module(agent)?;
    sh(agent, "modprobe vfio_iommu_type1")?;
    Ok(())
}

/// The devices of a PCI class (e.g. "0x010802" for NVMe), in address order.
pub fn find_all_by_class(agent: &AgentClient, class: &str) -> anyhow::Result<Vec<PciDev>> {
    let out = sh(
        agent,
        &format!(
            "for d in /sys/bus/pci/devices/*; do \
               if [ \"$(cat $d/class)\" = {class} ]; then \
                 echo \"$(basename $d) $(cat $d/vendor) $(cat $d/device)\"; fi; done"
        ),
    )?;
    out.lines()
        .map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            ensure!(f.len() == 3, "PCI device line {line:?}");
            Ok(PciDev {
                addr: f[0].to_owned(),
                vendor: f[1].to_owned(),
                device: f[2].to_owned(),
            })
        })
        .collect()
}

/// The first device of a PCI class (e.g. "0x010802" for NVMe).
pub fn find_by_class(agent: &AgentClient, class: &str) -> anyhow::Result<PciDev> {
    find_all_by_class(agent, class)?
        .into_iter()
        .next()
        .with_context(|| format!("no PCI device of class {class}"))
}

/// The driver a PCI device is bound to, if any.
pub fn driver_of(agent: &AgentClient, addr: &str) -> anyhow::Result<Option<String>> {
    let out = sh(
        agent,
        &format!(
            "d=/sys/bus/pci/devices/{addr}/driver; if [ -e $d ]; then basename $(readlink $d); fi"
        ),
    )?;
    Ok(Some(out.trim().to_owned()).filter(|s| !s.is_empty()))
}

/// Lends a local device.
pub fn lend(agent: &AgentClient, addr: &str) -> anyhow::Result<()> {
    sh(agent, &format!("echo {addr} > {LENDER_DRIVER}/lend"))?;
    Ok(())
}

/// Lends a device unless it is lent already (by an earlier check, say):
/// what a check that needs it lent calls, whatever ran before it.
pub fn ensure_lent(agent: &AgentClient, addr: &str) -> anyhow::Result<()> {
    if lent_state(agent, addr).is_err() {
        lend(agent, addr)?;
    }
    Ok(())
}

/// Takes a lent device back (it must be available).
pub fn unlend(agent: &AgentClient, addr: &str) -> anyhow::Result<()> {
    sh(agent, &format!("echo {addr} > {LENDER_DRIVER}/unlend"))?;
    Ok(())
}

/// A lent device's state on its lender ("available", "borrowed", ...).
pub fn lent_state(agent: &AgentClient, addr: &str) -> anyhow::Result<String> {
    Ok(sh(
        agent,
        &format!("cat /sys/bus/pci/devices/{addr}/devlend/state"),
    )?
    .trim()
    .to_owned())
}

/// Waits until the borrower lists a remote device whose name (its PCI
/// address on the lender) is `addr`; `what` names it in the error.
pub fn wait_remote_listed(borrower: &AgentClient, addr: &str, what: &str) -> anyhow::Result<()> {
    wait_until(
        what,
        crate::twohost::WAIT,
        || {
            Ok(remote_devices(borrower)?
                .values()
                .any(|d| d.get("name").map(String::as_str) == Some(addr))
                .to_string())
        },
        "true",
    )?;
    Ok(())
}

/// Waits until `probe` returns `want`.
pub fn wait_until(
    what: &str,
    timeout: Duration,
    mut probe: impl FnMut() -> anyhow::Result<String>,
    want: &str,
) -> anyhow::Result<Duration> {
    let t0 = Instant::now();
    let mut last = String::new();
    while t0.elapsed() < timeout {
        match probe() {
            Ok(v) if v == want => return Ok(t0.elapsed()),
            Ok(v) => last = v,
            Err(e) => last = format!("error: {e:#}"),
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    bail!("{what}: not {want:?} after {timeout:?} (last: {last})")
}

/// The fabric adapter (the mdev parent) of a host: its sysfs directory.
pub fn adapter_dir(agent: &AgentClient) -> anyhow::Result<String> {
    let out = sh(
        agent,
        "dirname $(ls -d /sys/bus/pci/devices/*/fabric | head -n 1)",
    )?;
    Ok(out.trim().to_owned())
}

/// The remote devices a borrower knows: key (`<host>:<dev_id>`) -> attributes.
pub fn remote_devices(
    agent: &AgentClient,
) -> anyhow::Result<HashMap<String, HashMap<String, String>>> {
    let adapter = adapter_dir(agent)?;
    let out = sh(
        agent,
        &format!(
            "for r in {adapter}/fabric/remote/*; do [ -d \"$r\" ] || continue; \
               printf '%s' \"$(basename $r)\"; \
               for a in lender name vendor device class state borrower pf; do \
                 printf ' %s=%s' $a \"$(cat $r/$a 2>/dev/null | tr ' ' '_')\"; done; echo; done"
        ),
    )?;
    Ok(out
        .lines()
        .filter_map(|l| {
            let (key, rest) = l.split_once(' ')?;
            Some((key.to_owned(), fabric::parse_kv(rest)))
        })
        .collect())
}

/// The sysfs directory of an mdev type of the borrower's adapter.
pub fn type_dir(agent: &AgentClient, type_id: &str) -> anyhow::Result<String> {
    Ok(format!(
        "{}/mdev_supported_types/{type_id}",
        adapter_dir(agent)?
    ))
}

/// `available_instances` of an mdev type.
pub fn available_instances(agent: &AgentClient, type_id: &str) -> anyhow::Result<u32> {
    let t = type_dir(agent, type_id)?;
    let s = sh(agent, &format!("cat {t}/available_instances"))?;
    s.trim()
        .parse()
        .with_context(|| format!("available_instances {s:?}"))
}

/// Waits until an mdev type offers `n` instances.
pub fn wait_instances(agent: &AgentClient, type_id: &str, n: u32) -> anyhow::Result<()> {
    wait_until(
        "available_instances",
        Duration::from_secs(60),
        || Ok(available_instances(agent, type_id)?.to_string()),
        &n.to_string(),
    )?;
    Ok(())
}

/// The JSON report of a `devlend-nvme-test --json` run that exited 0 and
/// says it passed; an error with its output otherwise.
pub fn driver_report(out: &devlend_agent::ExecOutput) -> anyhow::Result<serde_json::Value> {
    if out.exit_code != Some(0) {
        bail!("devlend-nvme-test failed: {out:?}");
    }
    let r: serde_json::Value = serde_json::from_str(&out.stdout)
        .with_context(|| format!("driver output: {}", out.stdout))?;
    if r["passed"] != true {
        bail!("driver: {r}");
    }
    Ok(r)
}

/// Creates an mdev of a type, pinned to `remote` (`<lender>/<pci addr>`) if
/// given, the way mdevctl does (create, then attributes); its UUID.
pub fn create_mdev(
    agent: &AgentClient,
    type_id: &str,
    remote: Option<&str>,
) -> anyhow::Result<String> {
    let t = type_dir(agent, type_id)?;
    let uuid = sh(agent, "cat /proc/sys/kernel/random/uuid")?
        .trim()
        .to_owned();
    sh(agent, &format!("echo {uuid} > {t}/create"))?;
    if let Some(r) = remote {
        if let Err(e) = sh(
            agent,
            &format!("echo {r} > /sys/bus/mdev/devices/{uuid}/remote_device"),
        ) {
            let _ = remove_mdev(agent, &uuid);
            return Err(e.context(format!("pinning mdev {uuid} to {r}")));
        }
    }
    Ok(uuid)
}

/// Removes an mdev.
pub fn remove_mdev(agent: &AgentClient, uuid: &str) -> anyhow::Result<()> {
    sh(
        agent,
        &format!("echo 1 > /sys/bus/mdev/devices/{uuid}/remove"),
    )?;
    Ok(())
}

/// Runs `script` (inside [`nvme_guest_script`]) in a KVM guest of
/// `mem_mib` MiB given mdev `uuid`, and removes the mdev afterwards,
/// whatever happened to the guest.
pub fn nvme_guest_on_mdev(
    agent: &AgentClient,
    uuid: &str,
    script: &str,
    mem_mib: u32,
) -> anyhow::Result<crate::guest::GuestRun> {
    let images = devlend_cluster::tools::guest_images_dir()?;
    nvme_guest_on_mdev_booting(agent, &images, uuid, script, mem_mib)
}

/// [`nvme_guest_on_mdev`] with the guest booting the kernel in `images`
/// (the peer-to-peer checks' own).
pub fn nvme_guest_on_mdev_booting(
    agent: &AgentClient,
    images: &std::path::Path,
    uuid: &str,
    script: &str,
    mem_mib: u32,
) -> anyhow::Result<crate::guest::GuestRun> {
    let run = crate::guest::run_with(
        agent,
        images,
        &nvme_guest_script(script),
        &crate::guest::GuestOpts {
            mem_mib,
            extra_qemu_args: &vfio_arg(uuid),
            qmp: None,
            kernel_args: "",
        },
    );
    let removed = remove_mdev(agent, uuid);
    let run = run?;
    removed?;
    Ok(run)
}

/// The QEMU argument that gives a guest an mdev.
pub fn vfio_arg(uuid: &str) -> String {
    format!("-device vfio-pci,sysfsdev=/sys/bus/mdev/devices/{uuid}")
}

/// A guest script: find the NVMe, wait for its namespace, print
/// `pci <vendor> <device> driver=<driver>`, then run `body`.
pub fn nvme_guest_script(body: &str) -> String {
    format!(
        "set -e
p=
for d in /sys/bus/pci/devices/*; do [ \"$(cat $d/class)\" = {NVME_CLASS} ] && p=$d; done
[ -n \"$p\" ] || {{ echo no-nvme; exit 3; }}
for i in $(seq 150); do [ -b /dev/nvme0n1 ] && break; sleep 0.2; done
echo \"pci $(cat $p/vendor) $(cat $p/device) driver=$(basename $(readlink $p/driver))\"
{body}"
    )
}

/// Where the guest scripts write, and how much: [`IO_SIZE_MIB`] MiB at
/// [`IO_OFFSET_MIB`] MiB of the namespace.
pub const IO_OFFSET_MIB: u64 = 16;
/// See [`IO_OFFSET_MIB`].
pub const IO_SIZE_MIB: u64 = 16;

/// Guest script body: `mib` MiB of random data written with O_DIRECT to
/// block device `dev` at [`IO_OFFSET_MIB`] MiB and read back; prints
/// `written <sha256>` and `read <sha256>`.
pub fn write_and_read(dev: &str, mib: u64) -> String {
    write_and_read_keyed(dev, mib, "")
}

/// [`write_and_read`], its keys ending in `suffix` (`written<suffix>`,
/// `read<suffix>`): one of several devices of a guest.
pub fn write_and_read_keyed(dev: &str, mib: u64, suffix: &str) -> String {
    format!(
        "head -c $(({mib} << 20)) /dev/urandom > /tmp/data
echo \"written{suffix} $(sha256sum /tmp/data | cut -d' ' -f1)\"
dd if=/tmp/data of={dev} bs=1M seek={IO_OFFSET_MIB} oflag=direct conv=fsync 2>/dev/null
rm /tmp/data
dd if={dev} of=/tmp/back bs=1M skip={IO_OFFSET_MIB} count={mib} iflag=direct 2>/dev/null
echo \"read{suffix} $(sha256sum /tmp/back | cut -d' ' -f1)\""
    )
}

/// [`write_and_read`] of [`IO_SIZE_MIB`] MiB on the guest's NVMe.
pub fn nvme_write_and_read() -> String {
    write_and_read("/dev/nvme0n1", IO_SIZE_MIB)
}

/// Guest script body: the range [`write_and_read`] writes, read back from
/// the guest's NVMe; prints `<key> <sha256>`.
pub fn read_back(key: &str) -> String {
    format!(
        "dd if=/dev/nvme0n1 of=/tmp/back bs=1M skip={IO_OFFSET_MIB} count={IO_SIZE_MIB} iflag=direct 2>/dev/null
echo \"{key} $(sha256sum /tmp/back | cut -d' ' -f1)\""
    )
}

/// The value after `key` on the first output line that starts with it.
pub fn output_field<'a>(out: &'a str, key: &str) -> anyhow::Result<&'a str> {
    out.lines()
        .find_map(|l| l.trim().strip_prefix(key).map(str::trim))
        .with_context(|| format!("guest printed no {key:?} line:\n{out}"))
}

/// What a guest that ran [`nvme_guest_script`] around [`write_and_read`]
/// of `mib` MiB proved: it exited 0, saw `nvme` (its ids, Linux's nvme
/// driver bound), read back what it wrote, and `backing` (the NVMe's
/// backing file on the outer machine) holds those bytes. Their sha256.
pub fn guest_wrote_to_backing(
    run: &crate::guest::GuestRun,
    nvme: &PciDev,
    backing: &std::path::Path,
    mib: u64,
) -> anyhow::Result<String> {
    anyhow::ensure!(run.rc == 0, "guest failed:\n{}", run.console);
    let ids = output_field(&run.output, "pci")?;
    anyhow::ensure!(
        ids == format!("{} {} driver=nvme", nvme.vendor, nvme.device),
        "guest sees {ids:?}, lender has {nvme:?}"
    );
    let written = output_field(&run.output, "written")?.to_owned();
    anyhow::ensure!(
        output_field(&run.output, "read")? == written,
        "read back differs:\n{}",
        run.output
    );
    anyhow::ensure!(
        file_sha256_mib(backing, mib)? == written,
        "the lender's backing file does not hold the guest's bytes"
    );
    Ok(written)
}

/// sha256 of the range of a file (an NVMe backing file on the outer
/// machine, outside every VM) that the guest scripts use.
pub fn file_sha256(file: &std::path::Path) -> anyhow::Result<String> {
    file_sha256_mib(file, IO_SIZE_MIB)
}

/// The sha256 of `mib` MiB at [`IO_OFFSET_MIB`] MiB of a backing file.
pub fn file_sha256_mib(file: &std::path::Path, mib: u64) -> anyhow::Result<String> {
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "dd if={} bs=1M skip={IO_OFFSET_MIB} count={mib} status=none | sha256sum",
            file.display()
        ))
        .output()?;
    if !out.status.success() {
        bail!("reading {}: {out:?}", file.display());
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned())
}
