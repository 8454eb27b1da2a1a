//! Compiles a C program against `devlend_wire.h` with gcc and checks that
//! the size and offset of every field, and the value of every constant,
//! is what the bindgen-generated Rust says.
//!
//! bindgen asks clang; this asks gcc, the compiler the kernel module is
//! built with. Skipped (with a message) only when gcc is not installed.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::mem::{offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;

use devlend_wire::sys;

/// One field as Rust sees it.
struct Field {
    strukt: &'static str,
    /// The C name (bindgen renames `type` to `type_`).
    c_name: &'static str,
    offset: usize,
    /// `None` for the flexible array member.
    size: Option<usize>,
}

const fn size_of_field<S, T>(_: fn(S) -> T) -> usize {
    size_of::<T>()
}

macro_rules! field {
    ($s:ident . $f:ident) => {
        field!($s.$f as stringify!($f))
    };
    ($s:ident . $f:ident as $c:expr) => {
        Field {
            strukt: stringify!($s),
            c_name: $c,
            offset: offset_of!(sys::$s, $f),
            size: Some(size_of_field(|x: sys::$s| x.$f)),
        }
    };
}

fn rust_fields() -> Vec<Field> {
    vec![
        field!(dl_ctl_header.magic),
        field!(dl_ctl_header.layout_version),
        field!(dl_ctl_header.max_hosts),
        field!(dl_ctl_header.ring_slots),
        field!(dl_ctl_header.slot_size),
        field!(dl_ctl_header.hosts_off),
        field!(dl_ctl_header.host_stride),
        field!(dl_ctl_header.inbox_size),
        field!(dl_ctl_header.ring_stride),
        field!(dl_ctl_header.total_size),
        field!(dl_ctl_header.fabric_id),
        field!(dl_ctl_header.reserved),
        field!(dl_host_info.magic),
        field!(dl_host_info.state),
        field!(dl_host_info.host_id),
        field!(dl_host_info.incarnation),
        field!(dl_host_info.heartbeat),
        field!(dl_host_info.proto_min),
        field!(dl_host_info.proto_max),
        field!(dl_host_info.inbound),
        field!(dl_host_info.ram_size),
        field!(dl_host_info.ram_low_size),
        field!(dl_host_info.ram_high_base),
        field!(dl_host_info.ident_phys),
        field!(dl_host_info.ident_token),
        field!(dl_host_info.name),
        field!(dl_host_info.inbox_phys),
        field!(dl_host_info.bound),
        field!(dl_host_info.reserved),
        field!(dl_ring_ctrl.prod),
        field!(dl_ring_ctrl.pad0),
        field!(dl_ring_ctrl.cons),
        field!(dl_ring_ctrl.pad1),
        field!(dl_msg_hdr.type_ as "type"),
        field!(dl_msg_hdr.proto),
        field!(dl_msg_hdr.len),
        field!(dl_msg_hdr.flags),
        field!(dl_msg_hdr.src),
        field!(dl_msg_hdr.epoch),
        field!(dl_msg_hdr.seq),
        field!(dl_msg_hdr.status),
        field!(dl_msg_hdr.req_id),
        field!(dl_ping.test_seq),
        field!(dl_ping.data_crc),
        field!(dl_ping.nonce),
        Field {
            strukt: "dl_ping",
            c_name: "data",
            offset: offset_of!(sys::dl_ping, data),
            size: None,
        },
        field!(dl_bar_desc.size),
        field!(dl_bar_desc.flags),
        field!(dl_bar_desc.reserved),
        field!(dl_dev_info.dev_id),
        field!(dl_dev_info.vendor),
        field!(dl_dev_info.device),
        field!(dl_dev_info.subsys_vendor),
        field!(dl_dev_info.subsys_device),
        field!(dl_dev_info.class_rev),
        field!(dl_dev_info.state),
        field!(dl_dev_info.borrower),
        field!(dl_dev_info.flags),
        field!(dl_dev_info.msix_count),
        field!(dl_dev_info.msi_count),
        field!(dl_dev_info.cfg_size),
        field!(dl_dev_info.bars),
        field!(dl_dev_info.name),
        field!(dl_dev_ref.dev_id),
        field!(dl_dev_ref.flags),
        field!(dl_dev_info_ext.pf_name),
        field!(dl_dev_info_ext.group),
        field!(dl_dev_info_ext.reserved),
        field!(dl_dev_info_full.info),
        field!(dl_dev_info_full.ext),
        field!(dl_dev_list.total),
        field!(dl_dev_list.count),
        field!(dl_dev_list.ids),
        field!(dl_cfg_access.dev_id),
        field!(dl_cfg_access.offset),
        field!(dl_cfg_access.size),
        field!(dl_cfg_access.reserved),
        field!(dl_cfg_access.value),
        field!(dl_cfg_block_req.dev_id),
        field!(dl_cfg_block_req.offset),
        field!(dl_cfg_block_req.len),
        field!(dl_cfg_block.dev_id),
        field!(dl_cfg_block.offset),
        field!(dl_cfg_block.len),
        field!(dl_cfg_block.data),
        field!(dl_bar_access.dev_id),
        field!(dl_bar_access.bar),
        field!(dl_bar_access.size),
        field!(dl_bar_access.reserved),
        field!(dl_bar_access.offset),
        field!(dl_bar_access.value),
        field!(dl_dma_range.iova),
        field!(dl_dma_range.addr),
        field!(dl_dma_range.len),
        field!(dl_dma_map.dev_id),
        field!(dl_dma_map.count),
        field!(dl_dma_unmap.dev_id),
        field!(dl_dma_unmap.flags),
        field!(dl_dma_unmap.iova),
        field!(dl_dma_unmap.len),
        field!(dl_irq_set.dev_id),
        field!(dl_irq_set.type_ as "type"),
        field!(dl_irq_set.flags),
        field!(dl_irq_set.count),
        field!(dl_irq_fire.dev_id),
        field!(dl_irq_fire.type_ as "type"),
        field!(dl_irq_fire.vector),
        field!(dl_irq_mask.dev_id),
        field!(dl_irq_mask.type_ as "type"),
        field!(dl_irq_mask.vector),
        field!(dl_irq_mask.mask),
        field!(dl_irq_mask.reserved),
        field!(dl_irq_direct.dev_id),
        field!(dl_irq_direct.type_ as "type"),
        field!(dl_irq_direct.vector),
        field!(dl_irq_direct.db_vector),
        field!(dl_irq_direct.reserved),
        field!(dl_bar_window.dev_id),
        field!(dl_bar_window.bar),
        field!(dl_bar_window.reserved),
        field!(dl_bar_window.token),
        field!(dl_bar_window.offset),
        field!(dl_bar_window.len),
        field!(dl_bar_dma.dev_id),
        field!(dl_bar_dma.bar),
        field!(dl_bar_dma.flags),
        field!(dl_bar_dma.reserved),
        field!(dl_bar_dma.iova),
        field!(dl_p2p_dma.dev_id),
        field!(dl_p2p_dma.target_id),
        field!(dl_p2p_dma.bar),
        field!(dl_p2p_dma.flags),
        field!(dl_p2p_dma.reserved),
        field!(dl_p2p_dma.target_host),
        field!(dl_p2p_dma.iova),
        field!(dl_dev_fault.dev_id),
        field!(dl_dev_fault.flags),
        field!(dl_dev_fault.iova),
        field!(dl_ntb_hello.flags),
        field!(dl_ntb_hello.reserved),
        field!(dl_ntb_db.bits),
        field!(dl_ntb_reg.index),
        field!(dl_ntb_reg.value),
        field!(dl_ntb_mw.index),
        field!(dl_ntb_mw.flags),
        field!(dl_ntb_mw.addr),
        field!(dl_ntb_mw.size),
        field!(dl_ntb_xlate.index),
        field!(dl_ntb_xlate.reserved),
        field!(dl_ntb_xlate.off),
        field!(dl_ntb_xlate.len),
        field!(dl_ntb_xlate.addr),
        Field {
            strukt: "dl_dma_map",
            c_name: "ranges",
            offset: offset_of!(sys::dl_dma_map, ranges),
            size: None,
        },
    ]
}

fn rust_struct_sizes() -> Vec<(&'static str, usize)> {
    vec![
        ("dl_ctl_header", size_of::<sys::dl_ctl_header>()),
        ("dl_host_info", size_of::<sys::dl_host_info>()),
        ("dl_ring_ctrl", size_of::<sys::dl_ring_ctrl>()),
        ("dl_msg_hdr", size_of::<sys::dl_msg_hdr>()),
        ("dl_ping", size_of::<sys::dl_ping>()),
        ("dl_bar_desc", size_of::<sys::dl_bar_desc>()),
        ("dl_dev_info", size_of::<sys::dl_dev_info>()),
        ("dl_dev_ref", size_of::<sys::dl_dev_ref>()),
        ("dl_dev_info_ext", size_of::<sys::dl_dev_info_ext>()),
        ("dl_dev_info_full", size_of::<sys::dl_dev_info_full>()),
        ("dl_dev_list", size_of::<sys::dl_dev_list>()),
        ("dl_cfg_access", size_of::<sys::dl_cfg_access>()),
        ("dl_cfg_block_req", size_of::<sys::dl_cfg_block_req>()),
        ("dl_cfg_block", size_of::<sys::dl_cfg_block>()),
        ("dl_bar_access", size_of::<sys::dl_bar_access>()),
        ("dl_dma_range", size_of::<sys::dl_dma_range>()),
        ("dl_dma_map", size_of::<sys::dl_dma_map>()),
        ("dl_dma_unmap", size_of::<sys::dl_dma_unmap>()),
        ("dl_irq_set", size_of::<sys::dl_irq_set>()),
        ("dl_irq_fire", size_of::<sys::dl_irq_fire>()),
        ("dl_irq_mask", size_of::<sys::dl_irq_mask>()),
        ("dl_irq_direct", size_of::<sys::dl_irq_direct>()),
        ("dl_bar_window", size_of::<sys::dl_bar_window>()),
        ("dl_bar_dma", size_of::<sys::dl_bar_dma>()),
        ("dl_p2p_dma", size_of::<sys::dl_p2p_dma>()),
        ("dl_dev_fault", size_of::<sys::dl_dev_fault>()),
        ("dl_ntb_hello", size_of::<sys::dl_ntb_hello>()),
        ("dl_ntb_db", size_of::<sys::dl_ntb_db>()),
        ("dl_ntb_reg", size_of::<sys::dl_ntb_reg>()),
        ("dl_ntb_mw", size_of::<sys::dl_ntb_mw>()),
        ("dl_ntb_xlate", size_of::<sys::dl_ntb_xlate>()),
    ]
}

/// Every constant of the header, as the generated Rust has it.
fn rust_constants() -> Vec<(&'static str, u64)> {
    macro_rules! consts {
        ($($c:ident),* $(,)?) => { vec![$((stringify!($c), sys::$c as u64)),*] };
    }
    consts![
        DL_CTL_MAGIC,
        DL_HOST_MAGIC,
        DL_CTL_LAYOUT_VERSION,
        DL_PROTO_V1,
        DL_PROTO_MIN,
        DL_PROTO_MAX,
        DL_MAX_HOSTS,
        DL_MAX_SLOT_SIZE,
        DL_MIN_SLOT_SIZE,
        DL_MAX_RING_SLOTS,
        DL_DEFAULT_RING_SLOTS,
        DL_DEFAULT_SLOT_SIZE,
        DL_DEFAULT_CTL_SIZE,
        DL_HEARTBEAT_MS,
        DL_PEER_TIMEOUT_MS,
        DL_DB_VEC_MSG,
        DL_DB_VECTORS,
        DL_DB_VECTORS_MAX,
        DL_HOST_ABSENT,
        DL_HOST_INIT,
        DL_HOST_UP,
        DL_INBOUND_RAM,
        DL_INBOUND_WINDOW,
        DL_MSG_PING,
        DL_MSG_DEV_LIST,
        DL_MSG_DEV_INFO,
        DL_MSG_DEV_CHANGED,
        DL_MSG_DEV_ACQUIRE,
        DL_MSG_DEV_RELEASE,
        DL_MSG_DEV_RESET,
        DL_MSG_CFG_READ,
        DL_MSG_CFG_WRITE,
        DL_MSG_BAR_READ,
        DL_MSG_BAR_WRITE,
        DL_MSG_DMA_MAP,
        DL_MSG_DMA_UNMAP,
        DL_MSG_IRQ_SET,
        DL_MSG_IRQ_FIRE,
        DL_MSG_DEV_FAULT,
        DL_MSG_CFG_READ_BLOCK,
        DL_MSG_IRQ_MASK,
        DL_MSG_IRQ_DIRECT,
        DL_MSG_BAR_WINDOW,
        DL_MSG_BAR_DMA,
        DL_MSG_P2P_DMA,
        DL_MSG_NTB_HELLO,
        DL_MSG_NTB_DB,
        DL_MSG_NTB_SPAD,
        DL_MSG_NTB_SPAD_READ,
        DL_MSG_NTB_MSG,
        DL_MSG_NTB_MW,
        DL_MSG_NTB_XLATE,
        DL_NTB_SPADS,
        DL_NTB_MSGS,
        DL_NTB_MWS,
        DL_NTB_DB_BITS,
        DL_NTB_F_PRESENT,
        DL_NTB_F_LINK,
        DL_NTB_F_ASK,
        DL_NTB_MW_F_BUS,
        DL_CFG_BLOCK_MAX,
        DL_LENT_AVAILABLE,
        DL_LENT_BORROWED,
        DL_LENT_RETURNING,
        DL_LENT_FAILED,
        DL_DEV_F_MSIX,
        DL_DEV_F_MSI,
        DL_DEV_F_INTX,
        DL_DEV_F_PCIE,
        DL_DEV_F_VF,
        DL_DEV_F_NO_RESET,
        DL_DEV_REF_F_INFO_EXT,
        DL_BAR_F_PRESENT,
        DL_BAR_F_IO,
        DL_BAR_F_MEM64,
        DL_BAR_F_PREFETCH,
        DL_BAR_DMA_F_MAP,
        DL_P2P_DMA_F_MAP,
        DL_NUM_BARS,
        DL_NO_HOST,
        DL_DEV_LIST_MAX,
        DL_DMA_UNMAP_F_ALL,
        DL_IRQ_INTX,
        DL_IRQ_MSI,
        DL_IRQ_MSIX,
        DL_BAR_DESC_SIZE,
        DL_DEV_INFO_SIZE,
        DL_DEV_INFO_EXT_SIZE,
        DL_DEV_INFO_FULL_SIZE,
        DL_DEV_REF_SIZE,
        DL_DEV_LIST_SIZE,
        DL_CFG_ACCESS_SIZE,
        DL_CFG_BLOCK_REQ_SIZE,
        DL_CFG_BLOCK_SIZE,
        DL_BAR_ACCESS_SIZE,
        DL_DMA_RANGE_SIZE,
        DL_DMA_MAP_SIZE,
        DL_DMA_UNMAP_SIZE,
        DL_IRQ_SET_SIZE,
        DL_IRQ_FIRE_SIZE,
        DL_IRQ_MASK_SIZE,
        DL_IRQ_DIRECT_SIZE,
        DL_BAR_WINDOW_SIZE,
        DL_BAR_DMA_SIZE,
        DL_P2P_DMA_SIZE,
        DL_DEV_FAULT_SIZE,
        DL_MSG_F_RESPONSE,
        DL_STATUS_OK,
        DL_STATUS_EINVAL,
        DL_STATUS_ENOTSUPP,
        DL_STATUS_EBUSY,
        DL_STATUS_ENODEV,
        DL_STATUS_EIO,
        DL_STATUS_ETIMEDOUT,
        DL_CTL_HEADER_SIZE,
        DL_HOST_INFO_SIZE,
        DL_RING_CTRL_SIZE,
        DL_MSG_HDR_SIZE,
        DL_PING_SIZE,
    ]
}

fn c_program(fields: &[Field]) -> String {
    let mut c = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include \"devlend_wire.h\"\n\n\
         #define FIELD(s, f) printf(\"field %s %s %zu %zu\\n\", #s, #f, \
         offsetof(struct s, f), sizeof(((struct s *)0)->f))\n\
         #define FLEX(s, f) printf(\"field %s %s %zu -\\n\", #s, #f, offsetof(struct s, f))\n\
         #define SIZE(s) printf(\"size %s %zu\\n\", #s, sizeof(struct s))\n\
         #define CONST(c) printf(\"const %s %llu\\n\", #c, (unsigned long long)(c))\n\n\
         int main(void)\n{\n",
    );
    for (s, _) in rust_struct_sizes() {
        writeln!(c, "\tSIZE({s});").unwrap();
    }
    for f in fields {
        let mac = if f.size.is_some() { "FIELD" } else { "FLEX" };
        writeln!(c, "\t{mac}({}, {});", f.strukt, f.c_name).unwrap();
    }
    for (name, _) in rust_constants() {
        writeln!(c, "\tCONST({name});").unwrap();
    }
    c.push_str("\treturn 0;\n}\n");
    c
}

#[test]
fn gcc_agrees_with_generated_layout() {
    if Command::new("gcc").arg("--version").output().is_err() {
        eprintln!("SKIPPED gcc_agrees_with_generated_layout: gcc is not installed");
        return;
    }
    let include = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../mdev-kmod/include/uapi");
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("layout.c");
    let exe = dir.path().join("layout");
    let fields = rust_fields();
    std::fs::write(&src, c_program(&fields)).unwrap();

    let out = Command::new("gcc")
        .args(["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(&include)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "gcc failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&exe).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();

    let mut c_sizes = BTreeMap::new();
    let mut c_fields = BTreeMap::new();
    let mut c_consts = BTreeMap::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split(' ').collect();
        match words[..] {
            ["size", s, n] => {
                c_sizes.insert(s.to_owned(), n.parse::<usize>().unwrap());
            }
            ["field", s, f, off, size] => {
                let size = (size != "-").then(|| size.parse::<usize>().unwrap());
                c_fields.insert(
                    (s.to_owned(), f.to_owned()),
                    (off.parse::<usize>().unwrap(), size),
                );
            }
            ["const", c, v] => {
                c_consts.insert(c.to_owned(), v.parse::<u64>().unwrap());
            }
            _ => panic!("unexpected output line {line:?}"),
        }
    }

    for (s, size) in rust_struct_sizes() {
        assert_eq!(c_sizes[s], size, "sizeof(struct {s})");
    }
    for f in &fields {
        let key = (f.strukt.to_owned(), f.c_name.to_owned());
        assert_eq!(
            c_fields[&key],
            (f.offset, f.size),
            "offset and size of {}.{}",
            f.strukt,
            f.c_name
        );
    }
    for (name, value) in rust_constants() {
        assert_eq!(c_consts[name], value, "{name}");
    }

    // The list above names every field: in each packed struct the fields
    // tile it from 0 to its size without gaps or overlaps.
    for (s, size) in rust_struct_sizes() {
        let mut members: Vec<&Field> = fields.iter().filter(|f| f.strukt == s).collect();
        members.sort_by_key(|f| f.offset);
        let mut end = 0;
        for f in members {
            assert_eq!(f.offset, end, "gap or overlap before {s}.{}", f.c_name);
            end = f.offset + f.size.unwrap_or(0);
        }
        assert_eq!(end, size, "fields of {s} do not reach its end");
    }
}
