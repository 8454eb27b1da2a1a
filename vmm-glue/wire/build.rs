//! Generates the Rust view of `mdev-kmod/include/uapi/devlend_wire.h`.
//!
//! The C header is the one definition of the fabric wire format; this build
//! script runs bindgen on it so the Rust types can never drift from it.
//! Only `dl_*` types and `DL_*` constants are emitted.

use std::env;
use std::path::PathBuf;

use bindgen::callbacks::{IntKind, ParseCallbacks};

/// Gives every `DL_*` macro the Rust type its users compare it with, so the
/// constants are usable without casts.
#[derive(Debug)]
struct MacroTypes;

impl ParseCallbacks for MacroTypes {
    fn int_macro(&self, name: &str, _value: i64) -> Option<IntKind> {
        let kind = match name {
            // 64-bit fields: magics and the total size of the area.
            "DL_CTL_MAGIC" | "DL_HOST_MAGIC" | "DL_DEFAULT_CTL_SIZE" => IntKind::U64,
            // Sizes of wire structs: compared with `size_of` and slice lengths.
            n if n.ends_with("_SIZE") && !n.contains("SLOT") => IntKind::Custom {
                name: "usize",
                is_signed: false,
            },
            // 16-bit fields: protocol versions and message flags.
            n if n.starts_with("DL_PROTO_") || n.starts_with("DL_MSG_F_") => IntKind::U16,
            // Everything else (counts, limits, sizes, times) lives in u32 fields.
            n if n.starts_with("DL_") => IntKind::U32,
            _ => return None,
        };
        Some(kind)
    }
}

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let include_dir = manifest_dir.join("../../mdev-kmod/include/uapi");
    let header = include_dir.join("devlend_wire.h");
    println!("cargo:rerun-if-changed={}", header.display());
    println!("cargo:rerun-if-changed=build.rs");

    let bindings = bindgen::Builder::default()
        .header(header.to_string_lossy())
        .clang_arg(format!("-I{}", include_dir.display()))
        .allowlist_type("dl_.*")
        .allowlist_var("DL_.*")
        // Enum constants keep their C names (`DL_HOST_UP`, not
        // `dl_host_state_DL_HOST_UP`), like the kernel sees them.
        .prepend_enum_name(false)
        .derive_default(true)
        .derive_copy(true)
        .derive_debug(true)
        // Generated helpers such as `__IncompleteArrayField::as_slice` are
        // unsafe fns; wrap their bodies so `unsafe_op_in_unsafe_fn` holds.
        .wrap_unsafe_ops(true)
        .generate_comments(true)
        .layout_tests(true)
        .rust_target(bindgen::RustTarget::stable(80, 0).expect("Rust 1.80 is a valid target"))
        .parse_callbacks(Box::new(MacroTypes))
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .generate()
        .unwrap_or_else(|e| panic!("bindgen failed on {}: {e}", header.display()));

    let out =
        PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("devlend_wire.rs");
    bindings
        .write_to_file(&out)
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", out.display()));
}
