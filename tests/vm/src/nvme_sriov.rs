//! NVMe with SR-IOV across hosts on `devices.toml`: the lender's NVMe
//! controller with SR-IOV (`[[host.nvme_sriov]]`) keeps its PF with the
//! lender's `nvme` driver, which gives each secondary controller its
//! queues and its interrupt and puts it online (NVMe's Virtualization
//! Management), and attaches private namespace k to VF k (Namespace
//! Attachment). Two VFs are lent, one to a KVM guest on each borrower at
//! once; each guest's `nvme` writes and reads back bytes on the one
//! namespace it sees, and each namespace's backing file holds its own
//! guest's bytes.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{ensure, Context};
use devlend_agent::AgentClient;
use devlend_cluster::{tools, Cluster};

use crate::fabric::sh;
use crate::guest::{self, BackgroundGuest, GuestOpts};
use crate::lending;
use crate::sriov::{self, ANY_TYPE, BORROWER2};
use crate::twohost::{BORROWER, LENDER, WAIT};

/// MiB each guest writes and reads back on its namespace.
const MIB: u64 = 4;
/// The VFs lent: one per borrower.
const VFS: usize = 2;

/// The lender's SR-IOV NVMe PF: the NVMe function that offers VFs.
fn pf_of(l: &AgentClient) -> anyhow::Result<String> {
    let out = sh(
        l,
        &format!(
            "for d in /sys/bus/pci/devices/*; do
  [ \"$(cat $d/class)\" = {} ] && [ -e $d/sriov_totalvfs ] && basename $d
done; true",
            lending::NVME_CLASS
        ),
    )?;
    out.lines()
        .next()
        .map(str::to_owned)
        .context("no NVMe function with SR-IOV on the lender")
}

/// The PF with the lender's `nvme`, its flexible resources given up (a
/// reset makes that take), `VFS` VFs enabled (none bound on the lender),
/// each secondary controller given 2 queues and 1 vector and put online,
/// and namespace k attached to VF k. The VFs' addresses, in VF order.
fn pf_with_online_vfs(l: &AgentClient, pf: &str) -> anyhow::Result<Vec<String>> {
    let out = sh(
        l,
        &format!(
            "set -e; d=/sys/bus/pci/devices/{pf}
modprobe nvme
live() {{
  for i in $(seq 150); do
    c=$(ls $d/nvme 2>/dev/null | head -n 1)
    [ -n \"$c\" ] && [ \"$(cat $d/nvme/$c/state 2>/dev/null)\" = live ] && return 0
    sleep 0.2
  done
  echo \"the PF's controller is not live\" >&2; return 1
}}
[ -e $d/driver ] || echo {pf} > /sys/bus/pci/drivers/nvme/bind
live
ctrl=/dev/$c
pf_id=$(nvme id-ctrl $ctrl | awk '$1 == \"cntlid\" {{print $3}}')
nvme virt-mgmt $ctrl -c $pf_id -r 1 -a 1 -n 0 >/dev/null
nvme virt-mgmt $ctrl -c $pf_id -r 0 -a 1 -n 0 >/dev/null
echo 1 > $d/reset
live
ctrl=/dev/$c
echo 0 > $d/sriov_drivers_autoprobe
echo {VFS} > $d/sriov_numvfs
# VF number and secondary controller id, per secondary controller.
nvme list-secondary $ctrl | awk '$1 == \"SCID\" {{s = $NF}} $1 == \"VFN\" {{print $NF, s}}' > /tmp/nvme-scids
for k in $(seq {VFS}); do
  s=
  while read -r vfn scid; do [ $((vfn)) -ne $k ] || s=$scid; done < /tmp/nvme-scids
  [ -n \"$s\" ] || {{ echo \"no secondary controller for VF $k\" >&2; cat /tmp/nvme-scids >&2; exit 1; }}
  nvme virt-mgmt $ctrl -c $s -r 1 -a 8 -n 1 >/dev/null
  nvme virt-mgmt $ctrl -c $s -r 0 -a 8 -n 2 >/dev/null
  nvme virt-mgmt $ctrl -c $s -r 0 -a 9 -n 0 >/dev/null
  nvme attach-ns $ctrl -n $k -c $s >/dev/null
done
for k in $(seq 0 $(({VFS} - 1))); do basename $(readlink $d/virtfn$k); done"
        ),
    )
    .context("the NVMe PF with online VFs on the lender")?;
    let vfs: Vec<String> = out.lines().map(str::to_owned).collect();
    ensure!(vfs.len() == VFS, "VFs of {pf}: {out:?}");
    Ok(vfs)
}

/// A guest on a borrower with one VF, and its mdev.
struct VfGuest {
    host: &'static str,
    uuid: String,
    guest: Option<BackgroundGuest>,
}

/// Two VFs of the lender's SR-IOV NVMe, each lent to a guest on another
/// borrower at once: each guest's `nvme` binds its VF and sees one
/// namespace, on which it writes `MIB` MiB of random bytes and reads them
/// back; namespace k's backing file (`files[k]`) holds guest k's bytes.
/// Afterwards the VFs are back in the pool, unlent and removed.
pub fn two_vfs_to_two_borrowers(
    c: &Cluster,
    files: &[PathBuf],
    step: &dyn Fn(&str),
) -> anyhow::Result<()> {
    ensure!(files.len() >= VFS, "{VFS} namespaces needed: {files:?}");
    let l = c.agent(LENDER)?;
    for h in [LENDER, BORROWER, BORROWER2] {
        lending::ensure_module(c.agent(h)?)?;
    }
    let pf = pf_of(l)?;
    let vfs = pf_with_online_vfs(l, &pf)?;
    step(&format!(
        "the lender's NVMe PF {pf} stays with its nvme driver, which enables {VFS} VFs ({}), gives each secondary controller 2 queues and 1 vector, puts it online and attaches namespace k to VF k",
        vfs.join(", ")
    ));
    let mut guests: Vec<VfGuest> = Vec::new();
    let res = run(c, &vfs, files, &mut guests, step).map_err(|e| {
        let consoles: Vec<String> = guests
            .iter()
            .filter_map(|g| {
                let console = g.guest.as_ref()?.console(c.agent(g.host).ok()?).ok()?;
                Some(format!("{}:\n{console}", g.host))
            })
            .collect();
        e.context(format!("guest consoles:\n{}", consoles.join("\n")))
    });
    for g in &guests {
        if let Ok(b) = c.agent(g.host) {
            if let Some(guest) = &g.guest {
                let _ = guest.kill(b);
            }
            let _ = lending::remove_mdev(b, &g.uuid);
        }
    }
    // Back in the pool, then unlent; the VFs go whatever happened.
    let mut back = Ok(());
    for vf in &vfs {
        let r = lending::wait_until(
            &format!("VF {vf} back in the pool"),
            WAIT,
            || lending::lent_state(l, vf),
            "available",
        );
        if back.is_ok() {
            back = r.map(drop);
        }
    }
    let removed = sriov::remove_vfs(l, &pf);
    res?;
    back?;
    removed?;
    step("both VFs back in the pool, unlent and removed");
    Ok(())
}

fn run(
    c: &Cluster,
    vfs: &[String],
    files: &[PathBuf],
    guests: &mut Vec<VfGuest>,
    step: &dyn Fn(&str),
) -> anyhow::Result<()> {
    let l = c.agent(LENDER)?;
    for vf in vfs {
        lending::lend(l, vf)?;
    }
    let images = tools::guest_images_dir()?;
    let script = lending::nvme_guest_script(&format!(
        "echo \"namespaces $(ls /dev | grep -c '^nvme0n[0-9]*$')\"\n{}",
        lending::write_and_read("/dev/nvme0n1", MIB)
    ));
    for (k, host) in [BORROWER, BORROWER2].into_iter().enumerate() {
        let b = c.agent(host)?;
        lending::wait_remote_listed(b, &vfs[k], &format!("VF {} on {host}", vfs[k]))?;
        sh(b, "modprobe kvm_amd").context("KVM for the borrowers' guests")?;
        let uuid = lending::create_mdev(b, ANY_TYPE, Some(&format!("{LENDER}/{}", vfs[k])))?;
        guests.push(VfGuest {
            host,
            uuid: uuid.clone(),
            guest: None,
        });
        let g = guest::spawn(
            b,
            &images,
            &script,
            &GuestOpts {
                mem_mib: 256,
                extra_qemu_args: &lending::vfio_arg(&uuid),
                qmp: None,
                kernel_args: "",
            },
            "/tmp/nvme-vf.console",
        )?;
        guests.last_mut().context("no guest")?.guest = Some(g);
        step(&format!(
            "a KVM guest on {host} gets VF {} (namespace {}) through mdev {uuid}",
            vfs[k],
            k + 1
        ));
    }
    for (k, g) in guests.iter().enumerate() {
        let guest = g.guest.as_ref().context("no guest")?;
        let run = guest.wait(c.agent(g.host)?, Duration::from_secs(600))?;
        ensure!(run.rc == 0, "guest {k} failed:\n{}", run.console);
        let found = lending::output_field(&run.output, "pci")?;
        ensure!(
            found.ends_with("driver=nvme"),
            "guest {k}: nvme did not take the VF: {found}"
        );
        let namespaces = lending::output_field(&run.output, "namespaces")?;
        ensure!(
            namespaces == "1",
            "guest {k} sees {namespaces} namespaces, not its own one"
        );
        let written = lending::output_field(&run.output, "written")?;
        ensure!(
            lending::output_field(&run.output, "read")? == written,
            "guest {k} read back other bytes"
        );
        ensure!(
            lending::file_sha256_mib(&files[k], MIB)? == written,
            "namespace {}'s backing file does not hold guest {k}'s bytes",
            k + 1
        );
        step(&format!(
            "guest {k} on {}: nvme took its VF, one namespace; {MIB} MiB written and read back, found in namespace {}'s backing file",
            g.host,
            k + 1
        ));
    }
    Ok(())
}
