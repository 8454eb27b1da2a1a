//! `devlend libvirt-xml`: libvirt XML for an mdev.

use super::mdev_uuid;
use crate::error::{CliError, Result};
use crate::sysfs::{self, Sysfs};
use crate::vmmargs;

/// What to write.
#[derive(Debug, Default)]
pub struct Request<'a> {
    /// The mdev's UUID (with `nodedev` and `device`: the new mdev's, made
    /// up if `None`).
    pub uuid: Option<&'a str>,
    /// Wrap the hostdev in a minimal domain of this name.
    pub domain: Option<&'a str>,
    /// Guest memory in MiB for `domain`.
    pub memory: u64,
    /// Device alias (must start with `ua-`).
    pub alias: Option<&'a str>,
    /// The node device definition instead.
    pub nodedev: bool,
    /// With `nodedev`: define a new mdev for this remote device.
    pub device: Option<&'a str>,
    /// Do not check that the mdev exists on this host.
    pub no_check: bool,
}

/// The XML: a `<hostdev>`, a domain around it, or a node device (of an
/// existing mdev, or of a new one for a remote device).
pub fn run(sys: &Sysfs, a: &Request<'_>) -> Result<String> {
    if let Some(al) = a.alias {
        if !al.starts_with("ua-") {
            return Err(CliError::usage(format!(
                "alias {al:?} must start with \"ua-\" (libvirt's rule for user aliases)"
            )));
        }
    }
    Ok(if let Some(spec) = a.device {
        // A definition for libvirt to create (through mdevctl): the
        // adapter is the parent, the type follows the class.
        let uuid = sysfs::given_or_new_uuid(a.uuid)?;
        let r = sys.find_remote(spec)?;
        let adapter = sys.adapter()?;
        let parent = adapter
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        vmmargs::libvirt_nodedev(&uuid, &parent, r.default_type(), Some(&r.id))
    } else if a.nodedev {
        let m = sys.find_mdev(a.uuid.unwrap_or_default())?;
        let parent = m.parent.clone().ok_or_else(|| {
            CliError::not_found(format!("mdev {} has no parent device", m.uuid), "")
        })?;
        let t = m.mdev_type.clone().unwrap_or_else(|| "devlend-any".into());
        let remote = m.remote_device.as_deref().filter(|r| *r != "any");
        vmmargs::libvirt_nodedev(&m.uuid, &parent, &t, remote)
    } else {
        let uuid = mdev_uuid(sys, a.uuid.unwrap_or_default(), a.no_check)?;
        match a.domain {
            Some(name) => vmmargs::libvirt_domain(&uuid, name, a.memory, a.alias),
            None => vmmargs::libvirt_hostdev(&uuid, a.alias, ""),
        }
    })
}
