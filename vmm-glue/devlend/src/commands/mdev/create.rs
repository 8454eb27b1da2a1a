//! `devlend mdev create`: an mdev of a type or for one named remote
//! device, at once or (`--wait`) as soon as one is free.

use std::time::Duration;

use crate::error::{CliError, Result};
use crate::progress::with_progress;
use crate::sysfs::{self, Remote, Sysfs};

/// What to create.
#[derive(Debug, Default)]
pub struct Request<'a> {
    /// The type (`nvme` or `devlend-nvme`); default: from the device's
    /// class, else `devlend-any`.
    pub mtype: Option<&'a str>,
    /// The remote device to pin it to (`<host-id>:<dev_id>` or
    /// `<lender>/<pci-address>`).
    pub device: Option<&'a str>,
    /// Its UUID; default: a new random one.
    pub uuid: Option<&'a str>,
    /// Seconds to wait for a free device; 0: do not wait.
    pub wait: u64,
    /// A live migration's destination for `device`, which the migration's
    /// source (another host) may hold.
    pub incoming: bool,
}

/// An mdev made, with its type and the remote device it is pinned to.
pub use crate::sysfs::Created;

/// Creates the mdev. `note_held` is told, before the mdev is made, when
/// the device named is held by another host (the mdev can target it, but
/// a VM cannot open it until it is given back).
pub fn run(sys: &Sysfs, req: &Request<'_>, note_held: impl FnOnce(&Remote)) -> Result<Created> {
    let uuid = sysfs::given_or_new_uuid(req.uuid)?;
    // A device not offered at all is refused at once, also with --wait: a
    // mistyped name is not worth waiting for.
    let remote = match req.device {
        Some(spec) => Some(sys.find_remote(spec)?),
        None => None,
    };
    let type_name = match (req.mtype, &remote) {
        (Some(t), _) => t.to_string(),
        (None, Some(r)) => r.default_type().to_string(),
        (None, None) => "devlend-any".to_string(),
    };
    if req.incoming {
        let Some(r) = remote else {
            return Err(CliError::usage(
                "a migration's destination must name its source's device: --device",
            ));
        };
        if req.wait > 0 {
            return Err(CliError::usage(
                "--incoming does not wait: the destination takes the device the source holds",
            ));
        }
        create_incoming(sys, &type_name, r, &uuid)
    } else if req.wait > 0 {
        create_waiting(sys, &type_name, req.device, &uuid, req.wait)
    } else {
        create_now(sys, &type_name, remote, &uuid, note_held)
    }
}

/// Without --wait: refuses at once what is not free.
fn create_now(
    sys: &Sysfs,
    type_name: &str,
    remote: Option<Remote>,
    uuid: &str,
    note_held: impl FnOnce(&Remote),
) -> Result<Created> {
    // An mdev stands for one device on this host: a device another mdev
    // targets is refused (the kernel would refuse it too). A device held
    // by another host may be targeted now and opened later, if the type
    // has an instance to spare: say so.
    if let Some(r) = &remote {
        if !r.mdevs.is_empty() {
            return Err(targeted(
                r,
                "an mdev holds its device on this host: give that mdev to the VM, or remove it first (`devlend mdev remove UUID`); `--wait SECONDS` queues for it",
            ));
        }
        match r.state.as_str() {
            "available" => {}
            "failed" => {
                return Err(CliError::busy(
                    format!(
                        "remote device {} ({}/{}) failed its reset on its lender",
                        r.id, r.lender, r.name
                    ),
                    "its lender lends it to nobody until its administrator lends it again (`devlend unlend` then `devlend lend` there)",
                ))
            }
            "borrowed" | "returning" => note_held(r),
            other => {
                return Err(CliError::busy(
                    format!("remote device {} ({}/{}) is {other}", r.id, r.lender, r.name),
                    "its lender no longer offers it; `devlend remote` shows what is offered",
                ))
            }
        }
    }
    let (dir, mtype) = sys.find_type(type_name)?;
    let mdev = sys.mdev_create(&dir, &mtype, uuid, remote.as_ref().map(|r| r.id.as_str()))?;
    Ok(Created {
        mtype,
        remote,
        mdev,
    })
}

/// With --incoming: an mdev that takes the device `r` whoever holds it,
/// as a live migration's destination (it borrows the device only when
/// the migration hands it over).
fn create_incoming(sys: &Sysfs, type_name: &str, r: Remote, uuid: &str) -> Result<Created> {
    if !r.mdevs.is_empty() {
        return Err(targeted(
            &r,
            "make that mdev the destination (`devlend mdev incoming UUID`), or remove it first",
        ));
    }
    if !matches!(r.state.as_str(), "available" | "borrowed" | "returning") {
        return Err(CliError::busy(
            format!("remote device {} ({}/{}) is {}", r.id, r.lender, r.name, r.state),
            "a migration's destination needs the device its source uses; `devlend remote` shows what is offered",
        ));
    }
    let (dir, mtype) = sys.find_type(type_name)?;
    let mdev = sys.mdev_create_incoming(&dir, uuid, &r)?;
    Ok(Created {
        mtype,
        remote: Some(r),
        mdev,
    })
}

/// With --wait SECONDS: queues for a free device, with progress on
/// stderr.
fn create_waiting(
    sys: &Sysfs,
    type_name: &str,
    device: Option<&str>,
    uuid: &str,
    wait: u64,
) -> Result<Created> {
    let (_, t) = sys.find_type(type_name)?;
    // Nothing to wait for when the UUID is taken already.
    sys.new_mdev_dir(uuid)?;
    let what = match device {
        Some(spec) => format!("waiting up to {wait} s for remote device {spec} to be free"),
        None => format!("waiting up to {wait} s for a free {} device", t.id),
    };
    with_progress(&what, || {
        sys.mdev_create_waiting(type_name, device, uuid, Duration::from_secs(wait))
    })
}

/// The device `r` is the target of an mdev of this host already: one mdev
/// per device on a host, as the kernel has it.
fn targeted(r: &Remote, hint: &str) -> CliError {
    CliError::busy(
        format!(
            "remote device {} is the target of mdev {} on this host",
            r.id,
            r.mdevs.join(", ")
        ),
        hint,
    )
}
