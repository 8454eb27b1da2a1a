//! What QEMU, libvirt and cloud-hypervisor need to be given an mdev.

/// `/sys/bus/mdev/devices/<uuid>`.
pub fn mdev_sysfs(uuid: &str) -> String {
    format!("/{}/{uuid}", crate::abi::MDEV_DEVICES)
}

/// The default QEMU device id for an mdev: `devlend-` and the UUID's first
/// group (ids must start with a letter).
pub fn default_id(uuid: &str) -> String {
    format!("devlend-{}", uuid.split('-').next().unwrap_or(uuid))
}

/// Checks a QEMU device id: a letter, then letters, digits, `-`, `.`, `_`.
pub fn valid_qemu_id(id: &str) -> bool {
    let mut c = id.chars();
    c.next().is_some_and(|f| f.is_ascii_alphabetic())
        && c.all(|x| x.is_ascii_alphanumeric() || matches!(x, '-' | '.' | '_'))
}

/// Where QEMU puts a device: its bus, its `slot.function` there, and
/// whether it is function 0 of a multi-function slot (the functions of a
/// lent IOMMU group given to one guest, docs/groups.md).
#[derive(Debug, Clone, Copy, Default)]
pub struct QemuPlace<'a> {
    /// `bus=`.
    pub bus: Option<&'a str>,
    /// `addr=`, checked by [`valid_pci_addr`].
    pub addr: Option<&'a str>,
    /// `multifunction=on`.
    pub multifunction: bool,
}

/// Checks a QEMU PCI address: a slot (hex, up to 1f), optionally `.` and
/// a function (0 to 7).
pub fn valid_pci_addr(addr: &str) -> bool {
    let (slot, func) = match addr.split_once('.') {
        Some((s, f)) => (s, Some(f)),
        None => (addr, None),
    };
    let slot_ok = !slot.is_empty()
        && slot.len() <= 2
        && u8::from_str_radix(slot, 16).is_ok_and(|s| s <= 0x1f);
    let func_ok = func.map_or(true, |f| {
        f.len() == 1 && matches!(f.as_bytes()[0], b'0'..=b'7')
    });
    slot_ok && func_ok
}

/// QEMU's `-device` property value for the mdev (commas in values are
/// doubled, QEMU's escaping).
pub fn qemu_device(uuid: &str, id: &str, place: QemuPlace<'_>) -> String {
    let esc = |s: &str| s.replace(',', ",,");
    let mut v = format!(
        "vfio-pci,sysfsdev={},id={}",
        esc(&mdev_sysfs(uuid)),
        esc(id)
    );
    if let Some(bus) = place.bus {
        v.push_str(&format!(",bus={}", esc(bus)));
    }
    if let Some(addr) = place.addr {
        v.push_str(&format!(",addr={}", esc(addr)));
    }
    if place.multifunction {
        v.push_str(",multifunction=on");
    }
    v
}

/// QEMU command-line arguments.
pub fn qemu_args(uuid: &str, id: &str, place: QemuPlace<'_>) -> Vec<String> {
    vec!["-device".into(), qemu_device(uuid, id, place)]
}

/// cloud-hypervisor command-line arguments (`--device path=.../,id=...`).
pub fn ch_args(uuid: &str, id: Option<&str>) -> Vec<String> {
    vec!["--device".into(), ch_device(uuid, id)]
}

/// cloud-hypervisor's device description, also what `ch-remote add-device` takes.
pub fn ch_device(uuid: &str, id: Option<&str>) -> String {
    let mut v = format!("path={}/", mdev_sysfs(uuid));
    if let Some(id) = id {
        v.push_str(&format!(",id={id}"));
    }
    v
}

/// The `ch-remote` command line that hot-plugs the mdev into a running
/// cloud-hypervisor VM.
pub fn ch_remote_add(api_socket: &str, uuid: &str, id: Option<&str>) -> Vec<String> {
    vec![
        "ch-remote".into(),
        "--api-socket".into(),
        api_socket.into(),
        "add-device".into(),
        ch_device(uuid, id),
    ]
}

/// Quotes one word for a POSIX shell, only when needed.
pub fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@+%".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Words joined for a shell.
pub fn shell_join(words: &[String]) -> String {
    words
        .iter()
        .map(|w| shell_quote(w))
        .collect::<Vec<_>>()
        .join(" ")
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('\'', "&apos;")
        .replace('"', "&quot;")
}

/// libvirt's `<hostdev>` for the mdev, for `virsh attach-device` or a
/// domain's `<devices>`. `alias` must start with `ua-` (libvirt's rule for
/// user aliases).
pub fn libvirt_hostdev(uuid: &str, alias: Option<&str>, indent: &str) -> String {
    let mut x = String::new();
    x.push_str(&format!(
        "{indent}<hostdev mode='subsystem' type='mdev' model='vfio-pci'>\n"
    ));
    x.push_str(&format!("{indent}  <source>\n"));
    x.push_str(&format!(
        "{indent}    <address uuid='{}'/>\n",
        xml_escape(uuid)
    ));
    x.push_str(&format!("{indent}  </source>\n"));
    if let Some(a) = alias {
        x.push_str(&format!("{indent}  <alias name='{}'/>\n", xml_escape(a)));
    }
    x.push_str(&format!("{indent}</hostdev>\n"));
    x
}

/// A minimal whole domain around the hostdev (`virsh define` takes it; so
/// does `virt-xml-validate`). It asks for ACPI: without `<acpi/>` libvirt
/// 9.0 passes `-no-acpi`, which the QEMU 10 we install refuses, and a guest
/// without ACPI has no PCIe hot-plug.
pub fn libvirt_domain(uuid: &str, name: &str, memory_mib: u64, alias: Option<&str>) -> String {
    format!(
        "<domain type='kvm'>\n  <name>{}</name>\n  <memory unit='MiB'>{memory_mib}</memory>\n  <vcpu>1</vcpu>\n  <os>\n    <type arch='x86_64' machine='q35'>hvm</type>\n  </os>\n  <features>\n    <acpi/>\n  </features>\n  <devices>\n{}  </devices>\n</domain>\n",
        xml_escape(name),
        libvirt_hostdev(uuid, alias, "    ")
    )
}

/// libvirt node device XML for the mdev (`virsh nodedev-define`), which
/// libvirt passes on to mdevctl. `parent` is the adapter's PCI address; the
/// name follows libvirt's `mdev_<uuid>_<parent>` convention.
pub fn libvirt_nodedev(uuid: &str, parent: &str, type_id: &str, remote: Option<&str>) -> String {
    let name = format!(
        "mdev_{}_{}",
        uuid.replace('-', "_"),
        parent.replace([':', '.'], "_")
    );
    let parent = format!("pci_{}", parent.replace([':', '.'], "_"));
    let mut x = format!(
        "<device>\n  <name>{}</name>\n  <parent>{}</parent>\n  <capability type='mdev'>\n    <type id='{}'/>\n    <uuid>{}</uuid>\n",
        xml_escape(&name),
        xml_escape(&parent),
        xml_escape(type_id),
        xml_escape(uuid)
    );
    if let Some(r) = remote {
        x.push_str(&format!(
            "    <attr name='remote_device' value='{}'/>\n",
            xml_escape(r)
        ));
    }
    x.push_str("  </capability>\n</device>\n");
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    const U: &str = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001";

    #[test]
    fn qemu_args_name_the_mdev_by_sysfsdev() {
        assert_eq!(
            qemu_args(U, "devlend-83b8f4f2", QemuPlace::default()),
            vec![
                "-device".to_string(),
                format!("vfio-pci,sysfsdev=/sys/bus/mdev/devices/{U},id=devlend-83b8f4f2")
            ]
        );
        let on_rp1 = QemuPlace {
            bus: Some("rp1"),
            ..QemuPlace::default()
        };
        assert_eq!(
            qemu_device(U, "nvme1", on_rp1),
            format!("vfio-pci,sysfsdev=/sys/bus/mdev/devices/{U},id=nvme1,bus=rp1")
        );
        assert_eq!(
            qemu_device(U, "a,b", QemuPlace::default()),
            format!("vfio-pci,sysfsdev=/sys/bus/mdev/devices/{U},id=a,,b")
        );
    }

    #[test]
    fn functions_of_one_slot() {
        let fn0 = QemuPlace {
            addr: Some("5.0"),
            multifunction: true,
            ..QemuPlace::default()
        };
        assert_eq!(
            qemu_device(U, "gpu", fn0),
            format!("vfio-pci,sysfsdev=/sys/bus/mdev/devices/{U},id=gpu,addr=5.0,multifunction=on")
        );
        let fn1 = QemuPlace {
            addr: Some("5.1"),
            ..QemuPlace::default()
        };
        assert!(qemu_device(U, "hda", fn1).ends_with(",id=hda,addr=5.1"));
        for good in ["5", "5.0", "1f.7", "0a.3"] {
            assert!(valid_pci_addr(good), "{good}");
        }
        for bad in ["", "20", "5.8", "5.", ".1", "x.1", "5.0,bus=x", "123"] {
            assert!(!valid_pci_addr(bad), "{bad}");
        }
    }

    #[test]
    fn ids() {
        assert_eq!(default_id(U), "devlend-83b8f4f2");
        assert!(valid_qemu_id("devlend-83b8f4f2"));
        assert!(valid_qemu_id("n.1_x"));
        assert!(!valid_qemu_id("1abc"));
        assert!(!valid_qemu_id(""));
        assert!(!valid_qemu_id("a b"));
    }

    #[test]
    fn ch_args_have_the_trailing_slash() {
        assert_eq!(
            ch_args(U, None),
            vec![
                "--device".to_string(),
                format!("path=/sys/bus/mdev/devices/{U}/")
            ]
        );
        assert_eq!(
            shell_join(&ch_remote_add("/run/ch.sock", U, Some("nvme0"))),
            format!("ch-remote --api-socket /run/ch.sock add-device path=/sys/bus/mdev/devices/{U}/,id=nvme0")
        );
        assert_eq!(
            ch_device(U, Some("nvme0")),
            format!("path=/sys/bus/mdev/devices/{U}/,id=nvme0")
        );
    }

    #[test]
    fn shell_quoting() {
        assert_eq!(shell_quote("-device"), "-device");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_join(&["x".into(), "y z".into()]), "x 'y z'");
    }

    #[test]
    fn libvirt_hostdev_is_the_documented_element() {
        assert_eq!(
            libvirt_hostdev(U, None, ""),
            format!(
                "<hostdev mode='subsystem' type='mdev' model='vfio-pci'>\n  <source>\n    <address uuid='{U}'/>\n  </source>\n</hostdev>\n"
            )
        );
        assert!(libvirt_hostdev(U, Some("ua-x"), "").contains("<alias name='ua-x'/>"));
        let d = libvirt_domain(U, "vm<1>", 512, None);
        assert!(d.contains("<name>vm&lt;1&gt;</name>"));
        // Else libvirt 9.0 passes -no-acpi, which QEMU 10 refuses.
        assert!(d.contains("<features>\n    <acpi/>\n  </features>"));
        assert!(d.contains(&format!("      <address uuid='{U}'/>")));
    }

    #[test]
    fn nodedev_names_parent_type_and_attribute() {
        let x = libvirt_nodedev(
            U,
            "0000:00:03.0",
            "devlend-nvme",
            Some("lender/0000:01:00.0"),
        );
        assert!(x.contains("<parent>pci_0000_00_03_0</parent>"));
        assert!(x.contains("<name>mdev_83b8f4f2_509f_382f_3c1e_e6bfe0fa1001_0000_00_03_0</name>"));
        assert!(x.contains("<type id='devlend-nvme'/>"));
        assert!(x.contains(&format!("<uuid>{U}</uuid>")));
        assert!(x.contains("<attr name='remote_device' value='lender/0000:01:00.0'/>"));
    }
}
