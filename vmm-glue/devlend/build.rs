//! Generates the devlend command's table of mdev types from
//! `mdev-kmod/include/uapi/devlend_mdev_types.h`, the one table the
//! borrower module registers too, so the two cannot differ.
//!
//! The header is plain `#define DL_MDEV_...  value` lines, read as text
//! (bindgen would need libclang to build the command, which its package
//! does not otherwise need).

use std::collections::BTreeMap;
use std::env;
use std::fmt::Write as _;
use std::path::PathBuf;

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let header = manifest_dir.join("../../mdev-kmod/include/uapi/devlend_mdev_types.h");
    println!("cargo:rerun-if-changed={}", header.display());
    println!("cargo:rerun-if-changed=build.rs");
    let text = std::fs::read_to_string(&header)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", header.display()));

    let defs: BTreeMap<String, String> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("#define "))
        .filter_map(|l| {
            let (name, value) = l.trim().split_once(char::is_whitespace)?;
            Some((name.to_string(), value.trim().to_string()))
        })
        .collect();
    let get = |name: &str| {
        defs.get(name)
            .unwrap_or_else(|| panic!("{} does not define {name}", header.display()))
    };
    let string = |name: &str| {
        let v = get(name);
        let s = v
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or_else(|| panic!("{name} is not one C string literal: {v}"));
        assert!(
            !s.contains(['"', '\\']),
            "{name}: keep the strings free of quotes and escapes"
        );
        s.to_string()
    };
    let number = |name: &str| {
        let v = get(name);
        let n = match v.strip_prefix("0x") {
            Some(h) => u32::from_str_radix(h, 16),
            None => v.parse(),
        };
        n.unwrap_or_else(|e| panic!("{name} is not a number ({v}): {e}"))
    };

    let nr = number("DL_MDEV_NR_TYPES");
    let mut out = String::new();
    writeln!(
        out,
        "/// The mdev type directories' prefix, `DL_MDEV_TYPE_PREFIX`.\n\
         pub const TYPE_PREFIX: &str = {:?};",
        string("DL_MDEV_TYPE_PREFIX")
    )
    .unwrap();
    writeln!(
        out,
        "/// devlend's mdev types, in the header's order.\npub const MDEV_TYPES: &[MdevTypeDef] = &["
    )
    .unwrap();
    for i in 0..nr {
        let f = |field: &str| format!("DL_MDEV_TYPE{i}_{field}");
        writeln!(
            out,
            "    MdevTypeDef {{ name: {:?}, dir: {:?}, pretty_name: {:?}, description: {:?}, class_mask: {:#08x}, class_val: {:#08x} }},",
            string(&f("NAME")),
            format!("{}{}", string("DL_MDEV_TYPE_PREFIX"), string(&f("NAME"))),
            string(&f("PRETTY")),
            string(&f("DESC")),
            number(&f("CLASS_MASK")),
            number(&f("CLASS_VAL")),
        )
        .unwrap();
    }
    writeln!(out, "];").unwrap();
    let dest =
        PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("mdev_types.rs");
    std::fs::write(&dest, out).unwrap_or_else(|e| panic!("cannot write {}: {e}", dest.display()));
}
