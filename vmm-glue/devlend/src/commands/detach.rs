//! `devlend detach`: hot-unplug a device from a running QEMU.

use std::path::Path;
use std::time::Duration;

use super::check_id;
use crate::error::Result;
use crate::progress::with_progress;
use crate::qmp::{self, Qmp};
use crate::sysfs;
use crate::vmmargs;

/// `device_del`s `device` (a QEMU device id, or an mdev's UUID meaning its
/// default id) from the QEMU behind `qmp_socket` and waits up to `timeout`
/// seconds for the guest to release it; returns the device id.
pub fn run(qmp_socket: &Path, device: &str, timeout: u64) -> Result<String> {
    let id = if sysfs::check_uuid(device).is_ok() {
        vmmargs::default_id(&device.to_ascii_lowercase())
    } else {
        device.to_string()
    };
    check_id(&id)?;
    let timeout = Duration::from_secs(timeout);
    let mut q = Qmp::connect(qmp_socket, timeout)?;
    with_progress(&format!("waiting for the guest to release {id}"), || {
        qmp::device_del(&mut q, &id, timeout)
    })?;
    Ok(id)
}
