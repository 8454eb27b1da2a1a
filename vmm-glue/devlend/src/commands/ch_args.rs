//! `devlend ch-args`: cloud-hypervisor arguments for an mdev.

use std::path::Path;

use super::mdev_uuid;
use crate::error::Result;
use crate::sysfs::Sysfs;
use crate::vmmargs;

/// `--device path=...` for the mdev `uuid` (checked to exist unless
/// `no_check`), or with `api_socket` the ch-remote command that hot-plugs
/// it.
pub fn run(
    sys: &Sysfs,
    uuid: &str,
    id: Option<&str>,
    api_socket: Option<&Path>,
    no_check: bool,
) -> Result<Vec<String>> {
    let uuid = mdev_uuid(sys, uuid, no_check)?;
    Ok(match api_socket {
        Some(s) => vmmargs::ch_remote_add(&s.to_string_lossy(), &uuid, id),
        None => vmmargs::ch_args(&uuid, id),
    })
}
