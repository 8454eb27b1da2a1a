//! Linux's NTB stack over devlend's emulated adapter: loading `ntb.ko`
//! (built by `qemu-scripts/build-ntb.sh`), devlend's modules and
//! `devlend_ntb_emu.ko` in a host, and reading what ntb_tool shows.

use std::path::PathBuf;

use anyhow::{bail, Context};
use devlend_agent::AgentClient;

use crate::fabric::{self, sh};

/// Where `build-ntb.sh` put `ntb.ko` and its clients: `$DEVLEND_NTB_DIR`
/// (set by `test.sh` and `demo.sh`).
pub fn ntb_dir() -> anyhow::Result<PathBuf> {
    let dir = std::env::var_os("DEVLEND_NTB_DIR")
        .map(PathBuf::from)
        .context(
            "DEVLEND_NTB_DIR is not set: run through ./test.sh, or set it to the directory \
         qemu-scripts/build-ntb.sh printed",
        )?;
    if !dir.join("ntb.ko").is_file() {
        bail!(
            "{} has no ntb.ko: run qemu-scripts/build-ntb.sh",
            dir.display()
        );
    }
    Ok(dir)
}

/// Loads one of Linux's NTB modules (`ntb`, `ntb_tool`, ...) unless loaded;
/// `params` go to insmod.
pub fn load_linux_module(agent: &AgentClient, name: &str, params: &str) -> anyhow::Result<()> {
    let ko = devlend_cluster::host_view(&ntb_dir()?.join(format!("{name}.ko")));
    sh(
        agent,
        &format!(
            "grep -q '^{name} ' /proc/modules || insmod {} {params}",
            ko.display()
        ),
    )
    .with_context(|| format!("loading {name}"))?;
    Ok(())
}

/// Everything for an emulated NTB port in a host: `ntb.ko`, devlend's
/// modules, then `devlend_ntb_emu.ko` with `params` (the topology's limits,
/// [`devlend_cluster::topology::NtbSpec::module_params`]).
///
/// On a host with an IOMMU, the emulated adapter's devices are first put
/// in identity domains: a peer writes this host's RAM directly, so bus
/// addresses given to the adapter must be physical ones, as they are for
/// an adapter that bypasses translation. A group's domain changes only
/// while no driver holds its devices, so an adapter an earlier check bound
/// (devlend's fabric on it) is unbound for the change and probed again.
pub fn load_emulated_port(agent: &AgentClient, params: &str) -> anyhow::Result<()> {
    load_emulated_port_in(agent, params, "identity")
}

/// [`load_emulated_port`], but on a host with an IOMMU the emulated
/// adapter's devices are left in (or put back into) translating DMA
/// domains: the port translates its peers' stores through the adapter's
/// IOMMU, as a real adapter's are (docs/ntb.md), and devlend's NTB backend
/// places what it shows in a domain of its own.
pub fn load_emulated_port_translating(agent: &AgentClient, params: &str) -> anyhow::Result<()> {
    load_emulated_port_in(agent, params, "DMA")
}

fn load_emulated_port_in(agent: &AgentClient, params: &str, domain: &str) -> anyhow::Result<()> {
    sh(
        agent,
        &format!(
            "set -e; for d in /sys/bus/pci/devices/*; do \
               [ \"$(cat $d/vendor):$(cat $d/device)\" = 0x1af4:0x1110 ] || continue; \
               [ -e $d/iommu_group/type ] || continue; \
               case \"$(cat $d/iommu_group/type)\" in {domain}*) continue;; esac; \
               a=${{d##*/}}; bound=; \
               if [ -e $d/driver ]; then echo $a > $d/driver/unbind; bound=1; fi; \
               echo {domain} > $d/iommu_group/type; \
               if [ -n \"$bound\" ]; then echo $a > /sys/bus/pci/drivers_probe; fi; \
             done"
        ),
    )
    .with_context(|| format!("{domain} IOMMU domains for the emulated adapter"))?;
    load_linux_module(agent, "ntb", "")?;
    fabric::ensure_module(agent)?;
    let ko = devlend_cluster::host_view(&fabric::module_dir().join("devlend_ntb_emu.ko"));
    sh(
        agent,
        &format!(
            "grep -q '^devlend_ntb_emu ' /proc/modules || insmod {} {params}",
            ko.display()
        ),
    )
    .context("loading devlend_ntb_emu (built when build-ntb.sh's Module.symvers is given)")?;
    Ok(())
}

/// The one NTB device of a host (`/sys/bus/ntb/devices/<name>`).
pub fn ntb_device(agent: &AgentClient) -> anyhow::Result<String> {
    let out = sh(agent, "ls /sys/bus/ntb/devices")?;
    let devs: Vec<&str> = out.split_whitespace().collect();
    match devs.as_slice() {
        [one] => Ok((*one).to_owned()),
        _ => bail!("expected one NTB device, found {devs:?}"),
    }
}

/// The emulated port's state line from `devlend/ntb_emu`, as key=value.
pub fn port_state(
    agent: &AgentClient,
) -> anyhow::Result<std::collections::HashMap<String, String>> {
    let text = sh(agent, "cat /sys/kernel/debug/devlend/ntb_emu")?;
    let line = text
        .lines()
        .next()
        .with_context(|| "devlend/ntb_emu is empty: no emulated port")?;
    Ok(fabric::parse_kv(line))
}

/// The emulated port's lines for its peers (`peer=<host id> present link
/// in=<size of our window 0>,<window 1> out=<the peer's for us>`), as
/// key=value maps, by host id.
pub fn port_peers(
    agent: &AgentClient,
) -> anyhow::Result<std::collections::HashMap<u32, std::collections::HashMap<String, String>>> {
    let text = sh(agent, "cat /sys/kernel/debug/devlend/ntb_emu")?;
    text.lines()
        .skip(1)
        .take_while(|l| l.starts_with("peer="))
        .map(|l| {
            let kv = fabric::parse_kv(l);
            let id = kv["peer"]
                .parse()
                .with_context(|| format!("peer line {l:?}"))?;
            Ok((id, kv))
        })
        .collect()
}

/// Waits until the host's NTB fabric (on NTB device `dev`, the fabric of
/// `devlend_ntb.ko`) has peer `peer` up.
pub fn wait_ntb_fabric_peer_up(
    agent: &AgentClient,
    dev: &str,
    peer: u32,
    timeout: std::time::Duration,
) -> anyhow::Result<()> {
    crate::lending::wait_until(
        &format!("the NTB fabric's link to host {peer}"),
        timeout,
        || {
            let out = agent.sh(
                &format!("cat /sys/class/devlend/ntb-{dev}/fabric/peers/{peer}/state"),
                std::time::Duration::from_secs(10),
            )?;
            Ok(out.stdout.trim().to_owned())
        },
        "up",
    )?;
    Ok(())
}

/// The borrower's userspace NVMe driver writes through an mdev of type
/// `devlend-nvme` made on the host's NTB fabric (NTB device `dev`):
/// `args` say where and how much (`--lba`, `--range-blocks`, `--ios`); it
/// verifies what it reads back first. The mdev is removed whatever
/// happened; the driver's JSON report, with at least one verified I/O.
pub fn nvme_writes_over_ntb_fabric(
    agent: &AgentClient,
    dev: &str,
    args: &str,
) -> anyhow::Result<serde_json::Value> {
    let fab = format!("/sys/class/devlend/ntb-{dev}");
    let types = sh(agent, &format!("ls {fab}/mdev_supported_types"))?;
    if !types.split_whitespace().any(|t| t == "devlend-nvme") {
        bail!("no nvme mdev type on the NTB fabric: {types}");
    }
    let uuid = sh(agent, "cat /proc/sys/kernel/random/uuid")?
        .trim()
        .to_owned();
    sh(
        agent,
        &format!("echo {uuid} > {fab}/mdev_supported_types/devlend-nvme/create"),
    )?;
    let drv = crate::twohost::host_bin("devlend-nvme-test", "DEVLEND_NVME_TEST")?;
    let out = agent.sh(
        &format!("{drv} --mdev {uuid} --rw write --pattern seq {args} --json"),
        std::time::Duration::from_secs(600),
    );
    let removed = sh(
        agent,
        &format!("echo 1 > /sys/bus/mdev/devices/{uuid}/remove"),
    );
    let out = out?;
    removed?;
    let r = crate::lending::driver_report(&out)?;
    if r["verified_ios"].as_u64().unwrap_or(0) == 0 {
        bail!("no verified I/O: {r}");
    }
    Ok(r)
}

/// sha256 of `blocks` 4 KiB blocks from 512-byte LBA `lba` of an NVMe
/// backing file, read on the outer machine, outside every VM.
pub fn backing_range_sha256(
    file: &std::path::Path,
    lba: u64,
    blocks: u64,
) -> anyhow::Result<String> {
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "dd if={} bs=4096 skip={} count={blocks} status=none | sha256sum",
            file.display(),
            lba / 8
        ))
        .output()?;
    if !out.status.success() {
        bail!("reading {}: {out:?}", file.display());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Waits until the host's NTB fabric (on NTB device `dev`) lists the
/// remote device at PCI address `addr` among its peers' devices.
pub fn wait_listed_on_ntb_fabric(
    agent: &AgentClient,
    dev: &str,
    addr: &str,
    timeout: std::time::Duration,
) -> anyhow::Result<()> {
    crate::lending::wait_until(
        &format!("{addr} listed on the NTB fabric"),
        timeout,
        || {
            let out = agent.sh(
                &format!("cat /sys/class/devlend/ntb-{dev}/fabric/remote/*/name 2>/dev/null"),
                std::time::Duration::from_secs(10),
            )?;
            Ok(out.stdout.lines().any(|l| l.trim() == addr).to_string())
        },
        "true",
    )?;
    Ok(())
}
