//! The sysfs ABI file (`mdev-kmod/Documentation/ABI/testing/sysfs-devlend`)
//! against the C sources: every attribute (and module parameter) the
//! modules define is declared there, with the same mode, and every file
//! declared there is defined. The C files are read as text, wherever in
//! `mdev-kmod/` a definition lives, so code moving between files does not
//! matter. Also the lender's SR-IOV rule, which the command checks before
//! asking the kernel (`Sysfs::lend`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use devlend::abi::{MDEV_TYPES, TYPE_PREFIX};

fn kmod() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../mdev-kmod")
}

/// Every module source file (`mdev-kmod/**/*.c`, the unit tests' shims
/// left out): path and text.
fn c_sources() -> Vec<(PathBuf, String)> {
    let mut out = vec![];
    let mut dirs = vec![kmod()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                if !p.ends_with("tests") {
                    dirs.push(p);
                }
            } else if p.extension().is_some_and(|x| x == "c") {
                let text = std::fs::read_to_string(&p).unwrap();
                out.push((p, text));
            }
        }
    }
    assert!(out.len() > 20, "found {} C files in mdev-kmod", out.len());
    out
}

/// A file's mode as the ABI file writes it.
fn mode_of_octal(perm: &str) -> &'static str {
    let p = u32::from_str_radix(perm.trim_start_matches('0'), 8).unwrap_or(0);
    match (p & 0o444 != 0, p & 0o222 != 0) {
        (true, true) => "RW",
        (true, false) => "RO",
        (false, true) => "WO",
        (false, false) => "--",
    }
}

/// The identifier and the rest of the arguments after `at` (just past an
/// opening parenthesis): `("name", ["0444", ...])`.
fn args(text: &str, at: usize) -> Vec<String> {
    let end = text[at..].find(')').map_or(text.len(), |e| at + e);
    text[at..end]
        .split(',')
        .map(|a| a.trim().to_string())
        .collect()
}

/// Every sysfs file the C sources define: name -> modes (a name such as
/// `state` is defined in several directories).
fn c_files() -> BTreeMap<String, BTreeSet<String>> {
    let mut files: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut add = |name: &str, mode: &str| {
        files
            .entry(name.to_string())
            .or_default()
            .insert(mode.to_string());
    };
    for (path, text) in c_sources() {
        // Macros of the module's own that wrap __ATTR(param, mode, ...).
        let mut wrappers = vec![];
        for (at, _) in text.match_indices("#define ") {
            let rest = &text[at + 8..];
            let Some(open) = rest.find('(') else { continue };
            let name = &rest[..open];
            if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                continue;
            }
            let param = args(rest, open + 1)[0].clone();
            let body_end = rest
                .lines()
                .scan(0, |len, l| {
                    *len += l.len() + 1;
                    Some((*len, l.ends_with('\\')))
                })
                .find(|(_, cont)| !cont)
                .map_or(rest.len(), |(len, _)| len);
            let body = &rest[..body_end];
            if let Some(a) = body.find(&format!("__ATTR({param},")) {
                let mode = args(body, a + 7)[1].clone();
                wrappers.push((name.to_string(), mode_of_octal(&mode)));
            }
        }
        for (w, mode) in &wrappers {
            for line in text.lines() {
                if let Some(rest) = line.strip_prefix(&format!("{w}(")) {
                    add(&args(rest, 0)[0], mode);
                }
            }
        }
        for (macro_, mode) in [
            ("DEVICE_ATTR_RO(", "RO"),
            ("DEVICE_ATTR_RW(", "RW"),
            ("DEVICE_ATTR_WO(", "WO"),
            ("DRIVER_ATTR_RO(", "RO"),
            ("DRIVER_ATTR_RW(", "RW"),
            ("DRIVER_ATTR_WO(", "WO"),
            ("__ATTR_RO(", "RO"),
            ("__ATTR_RW(", "RW"),
            ("__ATTR_WO(", "WO"),
        ] {
            for (at, m) in text.match_indices(macro_) {
                add(&args(&text, at + m.len())[0], mode);
            }
        }
        // __ATTR(name, mode, ...) and DEVICE_ATTR(name, mode, ...);
        // a wrapper's parameter (`_name`) is not a file.
        for macro_ in ["__ATTR(", "DEVICE_ATTR("] {
            for (at, m) in text.match_indices(macro_) {
                if text[..at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
                    continue;
                }
                let a = args(&text, at + m.len());
                if a.len() > 1 && !a[0].starts_with('_') {
                    add(&a[0], mode_of_octal(&a[1]));
                }
            }
        }
        // Module parameters: /sys/module/<module>/parameters/<name>.
        for (macro_, perm_arg) in [
            ("module_param(", 2),
            ("module_param_named(", 3),
            ("module_param_cb(", 3),
            ("module_param_string(", 3),
        ] {
            for (at, m) in text.match_indices(macro_) {
                let a = args(&text, at + m.len());
                assert!(a.len() > perm_arg, "{}: {macro_}{a:?}", path.display());
                add(&a[0], mode_of_octal(&a[perm_arg]));
            }
        }
    }
    // The mdev type directories the borrower registers from the shared
    // table (devlend_mdev_types.h).
    for t in MDEV_TYPES {
        add(&format!("{TYPE_PREFIX}{}", t.name), "DIR");
    }
    files
}

/// Every file the ABI file declares: last path component -> modes (the
/// description's "(RO)", "(RW)" or "(WO)"; "DIR" without one).
fn abi_files() -> BTreeMap<String, BTreeSet<String>> {
    let p = kmod().join("Documentation/ABI/testing/sysfs-devlend");
    let text = std::fs::read_to_string(&p).unwrap();
    let mut files: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    // Entries are separated by blank lines; the text before the first
    // What: is the file's preamble.
    for entry in text.split("\n\n").filter(|e| e.starts_with("What:")) {
        let whats: Vec<&str> = entry
            .lines()
            .filter_map(|l| l.strip_prefix("What:"))
            .map(str::trim)
            .collect();
        for field in ["Date:", "KernelVersion:", "Contact:", "Description:"] {
            assert!(
                entry.lines().any(|l| l.starts_with(field)),
                "{whats:?} has no {field}"
            );
        }
        let desc = entry.split("Description:").nth(1).unwrap_or_default();
        let mode = ["RO", "RW", "WO"]
            .into_iter()
            .find(|m| desc.trim_start().starts_with(&format!("({m})")))
            .unwrap_or("DIR");
        for w in whats {
            let leaf = w.trim_end_matches('/').rsplit('/').next().unwrap();
            files
                .entry(leaf.to_string())
                .or_default()
                .insert(mode.to_string());
        }
    }
    files
}

#[test]
fn the_abi_file_declares_what_the_c_sources_define_and_only_that() {
    let c = c_files();
    let abi = abi_files();
    assert!(c.len() > 30, "found only {c:?} in the C sources");
    let only_c: Vec<_> = c.iter().filter(|(k, v)| abi.get(*k) != Some(v)).collect();
    let only_abi: Vec<_> = abi.iter().filter(|(k, v)| c.get(*k) != Some(v)).collect();
    assert!(
        only_c.is_empty() && only_abi.is_empty(),
        "the C sources and sysfs-devlend differ:\n  defined in C (name, modes) but not so in the ABI file: {only_c:?}\n  declared in the ABI file but not so in C: {only_abi:?}"
    );
}

/// The text of the C function `name`, wherever in mdev-kmod it is.
fn c_function(name: &str) -> String {
    let sig = format!("{name}(");
    for (_, text) in c_sources() {
        for (at, _) in text.match_indices(&sig) {
            let line_start = text[..at].rfind('\n').map_or(0, |n| n + 1);
            let head = &text[line_start..at];
            // A definition: the return type starts the line, and a body follows.
            if head.starts_with(|c: char| c.is_ascii_alphabetic()) && !head.contains('=') {
                let rest = &text[at..];
                let body_end = rest.find("\n}\n").expect("a function ends");
                let body = &rest[..body_end];
                if body.contains("\n{\n") {
                    return body.to_string();
                }
            }
        }
    }
    panic!("no function {name} in mdev-kmod");
}

/// The command refuses to lend an SR-IOV physical function with VFs
/// enabled before it asks the kernel, for a message that says how many and
/// what to do. The kernel is the authority: its rule must be the same (any
/// VF enabled), and its answer EBUSY, which the command's refusal matches
/// (exit status 4, and the same message when the kernel is the one to
/// refuse). If the kernel's rule changes, change `Sysfs::lend` with it.
#[test]
fn the_commands_sriov_refusal_is_the_lenders_rule() {
    let check = c_function("dl_lender_vfs_check");
    let squash = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let body = squash(&check);
    assert!(
        body.contains("int n = pci_num_vf(pdev);") && body.contains("if (n <= 0) return 0;"),
        "the lender's rule is no longer \"any VF enabled\": {body}"
    );
    assert!(
        body.contains("return -EBUSY;"),
        "the lender no longer refuses with EBUSY: {body}"
    );
    // lend checks the device named, and every function of its group.
    let lend = squash(&c_function("lend_store"));
    assert!(
        lend.contains("ret = dl_lender_lend_check(drv, pdev);")
            && lend.contains("ret = dl_lender_lend_check(drv, m[i]);"),
        "lend no longer checks what it lends: {lend}"
    );
    let check = squash(&c_function("dl_lender_lend_check"));
    assert!(
        check.contains("ret = dl_lender_vfs_check(pdev);"),
        "lend no longer applies the rule: {check}"
    );
}
