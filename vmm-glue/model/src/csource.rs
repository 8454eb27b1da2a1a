//! Which variant of the protocol the C implements, read from the source.
//!
//! Deliberately simple text matching on the C with its comments and
//! string literals blanked out, so that it can be checked by reading:
//!
//! - **Item 1** ([`Params::fix_remove_order`]): in the body of
//!   `dl_lender_remove()` (`mdev-kmod/lender/driver.c`), the first
//!   `xa_erase(` comes after the first `dl_lent_reclaim(`: the device is
//!   taken back (everything unmapped) before it leaves the table.
//! - **Item 5** ([`Params::fix_lease_inc`]): in the body of
//!   `dl_session_borrow()` (`mdev-kmod/borrower/session.c`), the lease's
//!   incarnation is assigned (`lease->incarnation =`) after the
//!   DL_MSG_DEV_ACQUIRE request is made, and that request's code (the body
//!   of `dl_session_borrow()` or of the function in the file that sends
//!   `DL_MSG_DEV_ACQUIRE`) reads the fabric request's `peer_inc`: the
//!   incarnation the request went to. A lease created from
//!   `v->remote->incarnation` and never renamed is the old variant.
//!
//! Anything else (a function not found, neither pattern) is an error, so
//! that a refactoring of the C fails the test loudly instead of checking
//! the wrong model.
//!
//! [`Params::fix_remove_order`]: crate::Params::fix_remove_order
//! [`Params::fix_lease_inc`]: crate::Params::fix_lease_inc

use std::path::{Path, PathBuf};

/// The variant the C implements, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CVariant {
    /// Item 1 is fixed in `dl_lender_remove()`.
    pub fix_remove_order: bool,
    /// Item 5 is fixed in `dl_session_borrow()`.
    pub fix_lease_inc: bool,
    /// `dl_serve_acquire()` reads the link again after naming the holder.
    pub acquire_recheck: bool,
    /// ... and then leaves the ACQUIRE unanswered instead of refusing it.
    pub fix_acquire_silent: bool,
    /// What was seen, for the test log.
    pub evidence: Vec<String>,
}

/// Blanks comments and string/char literals (keeping offsets and line
/// breaks), so that a word in a comment is never taken for code.
pub fn strip_comments(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
            let end = src[i + 2..].find("*/").map_or(b.len(), |e| i + 2 + e + 2);
            out.extend(
                b[i..end]
                    .iter()
                    .map(|&c| if c == b'\n' { b'\n' } else { b' ' }),
            );
            i = end;
        } else if b[i] == b'/' && b.get(i + 1) == Some(&b'/') {
            let end = src[i..].find('\n').map_or(b.len(), |e| i + e);
            out.resize(out.len() + (end - i), b' ');
            i = end;
        } else if b[i] == b'"' || b[i] == b'\'' {
            let q = b[i];
            out.push(q);
            i += 1;
            while i < b.len() && b[i] != q {
                let n = if b[i] == b'\\' { 2 } else { 1 };
                for _ in 0..n {
                    if i < b.len() {
                        out.push(if b[i] == b'\n' { b'\n' } else { b' ' });
                        i += 1;
                    }
                }
            }
            if i < b.len() {
                out.push(q);
                i += 1;
            }
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).expect("only ASCII blanks were substituted")
}

/// The body (between its outer braces) of the definition of `name` in
/// `code` (comments stripped): a line that starts in column 0 and names
/// `name(`, whose parameter list is followed by `{`.
pub fn function_body<'a>(code: &'a str, name: &str) -> Result<&'a str, String> {
    let pat = format!("{name}(");
    let mut line_start = 0;
    for line in code.split_inclusive('\n') {
        let at = line_start;
        line_start += line.len();
        let starts_def = line
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        let Some(pos) = line.find(&pat) else { continue };
        let before = &line[..pos];
        if !starts_def || before.contains('=') || before.contains('(') {
            continue;
        }
        // Match the parameter list, then expect the body.
        let open = at + pos + name.len();
        let close = matching(code, open, b'(', b')')
            .ok_or_else(|| format!("{name}: unbalanced parameter list"))?;
        let rest = &code[close + 1..];
        let trimmed = rest.trim_start();
        if !trimmed.starts_with('{') {
            continue; // a declaration
        }
        let brace = close + 1 + (rest.len() - trimmed.len());
        let end =
            matching(code, brace, b'{', b'}').ok_or_else(|| format!("{name}: unbalanced body"))?;
        return Ok(&code[brace + 1..end]);
    }
    Err(format!("no definition of {name}() found"))
}

/// The index of the bracket closing the one at `open`.
fn matching(code: &str, open: usize, o: u8, c: u8) -> Option<usize> {
    let b = code.as_bytes();
    debug_assert_eq!(b[open], o);
    let mut depth = 0usize;
    for (i, &ch) in b.iter().enumerate().skip(open) {
        if ch == o {
            depth += 1;
        } else if ch == c {
            depth -= 1;
            if depth == 0 {
                return Some(i);
            }
        }
    }
    None
}

/// Item 1 from `lender/driver.c`'s text.
pub fn remove_order(driver_c: &str) -> Result<(bool, String), String> {
    let code = strip_comments(driver_c);
    let body = function_body(&code, "dl_lender_remove")?;
    let erase = body
        .find("xa_erase(")
        .ok_or("dl_lender_remove() calls no xa_erase()")?;
    let reclaim = body
        .find("dl_lent_reclaim(")
        .ok_or("dl_lender_remove() calls no dl_lent_reclaim()")?;
    let fixed = erase > reclaim;
    Ok((
        fixed,
        format!(
            "dl_lender_remove(): xa_erase() at offset {erase}, dl_lent_reclaim() at {reclaim}: {}",
            if fixed {
                "taken back, then erased (item 1 fixed)"
            } else {
                "erased, then taken back (item 1 NOT fixed)"
            }
        ),
    ))
}

/// Item 5 from `borrower/session.c`'s text.
pub fn lease_incarnation(session_c: &str) -> Result<(bool, String), String> {
    let code = strip_comments(session_c);
    let mut body = function_body(&code, "dl_session_borrow")?;
    // The lease may be taken in a helper the borrow shares with the
    // migration's takeover (dl_session_take()): read that one.
    if !body.contains("dl_lease_new") {
        if let Some(helper) = lease_helper(&code, body) {
            body = function_body(&code, &helper)?;
        }
    }
    // Where the ACQUIRE goes out: in the body, or through a helper of the
    // file that sends it (the one that reads the request's peer_inc).
    let (acq_at, acq_code) = if let Some(at) = body.find("DL_MSG_DEV_ACQUIRE(") {
        (at, body.to_string())
    } else if let Some((at, helper)) = request_helper(&code, body) {
        (at, function_body(&code, &helper)?.to_string())
    } else if let Some(at) = body.find("DL_MSG_DEV_ACQUIRE") {
        (at, body.to_string())
    } else {
        let helper = acquire_helper(&code)?;
        let at = body.find(&format!("{helper}(")).ok_or_else(|| {
            format!("dl_session_borrow() sends no DL_MSG_DEV_ACQUIRE and calls no {helper}()")
        })?;
        (at, function_body(&code, &helper)?.to_string())
    };
    let renamed = body[acq_at..].contains("lease->incarnation =");
    let peer_inc = acq_code.contains("peer_inc");
    let from_entry = body.contains("remote->incarnation");
    match (renamed && peer_inc, from_entry) {
        (true, _) => Ok((
            true,
            "dl_session_borrow(): the lease's incarnation is set after DL_MSG_DEV_ACQUIRE, from the request's peer_inc (item 5 fixed)"
                .into(),
        )),
        (false, true) => Ok((
            false,
            "dl_session_borrow(): the lease keeps v->remote->incarnation, the remote entry's (item 5 NOT fixed)"
                .into(),
        )),
        (false, false) => Err(
            "dl_session_borrow(): cannot tell where the lease's incarnation comes from (neither remote->incarnation nor a peer_inc rename); update csource.rs"
                .into(),
        ),
    }
}

/// The second read of the link in `lender/msg.c`'s `dl_serve_acquire()`,
/// if any, and what its branch answers: (recheck, silent, evidence).
pub fn acquire_recheck(msg_c: &str) -> Result<(bool, bool, String), String> {
    let code = strip_comments(msg_c);
    let body = function_body(&code, "dl_serve_acquire")?;
    let reads: Vec<usize> = body
        .match_indices("dl_fabric_peer_info(")
        .map(|(at, _)| at)
        .collect();
    let Some(&second) = reads.get(1) else {
        return Ok((
            false,
            false,
            "dl_serve_acquire(): the link is read once, before the holder is named (no re-read)"
                .into(),
        ));
    };
    let after = &body[second..];
    let later = after.find("return DL_LENDER_LATER");
    let einval = after.find("return -EINVAL");
    let silent = match (later, einval) {
        (Some(l), Some(e)) => l < e,
        (Some(_), None) => true,
        (None, Some(_)) => false,
        (None, None) => {
            return Err(
                "dl_serve_acquire(): the re-read's branch returns neither DL_LENDER_LATER nor -EINVAL; update csource.rs"
                    .into(),
            )
        }
    };
    Ok((
        true,
        silent,
        format!(
            "dl_serve_acquire(): the link is read again after the holder is named; a borrower found down is {}",
            if silent {
                "left unanswered (the race fixed)"
            } else {
                "answered -EINVAL (the race NOT fixed)"
            }
        ),
    ))
}

/// The function of the file whose body sends DL_MSG_DEV_ACQUIRE.
/// The functions of the file `body` calls (`dl_session_*(`), in order.
fn called_session_fns(body: &str) -> Vec<(usize, String)> {
    body.match_indices("dl_session_")
        .filter_map(|(at, _)| {
            let name: String = body[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            body[at + name.len()..]
                .starts_with('(')
                .then_some((at, name))
        })
        .collect()
}

/// The function of the file `body` calls that takes the lease.
fn lease_helper(code: &str, body: &str) -> Option<String> {
    called_session_fns(body)
        .into_iter()
        .map(|(_, name)| name)
        .find(|name| function_body(code, name).is_ok_and(|b| b.contains("dl_lease_new")))
}

/// The call in `body` of the file's function that sends the request and
/// reads its `peer_inc`: where, and its name.
fn request_helper(code: &str, body: &str) -> Option<(usize, String)> {
    called_session_fns(body).into_iter().find(|(_, name)| {
        function_body(code, name)
            .is_ok_and(|b| b.contains("dl_fabric_req_submit") && b.contains("peer_inc"))
    })
}

fn acquire_helper(code: &str) -> Result<String, String> {
    let at = code
        .find("DL_MSG_DEV_ACQUIRE")
        .ok_or("borrower/session.c never sends DL_MSG_DEV_ACQUIRE")?;
    // The last definition line (column 0, with a parenthesis) before it.
    let head = &code[..at];
    for line in head.lines().rev() {
        let starts_def = line
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        if starts_def && line.contains('(') && !line.trim_end().ends_with(';') {
            let name_end = line.find('(').expect("checked");
            let name = line[..name_end]
                .rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .next()
                .unwrap_or("");
            if !name.is_empty() {
                return Ok(name.to_string());
            }
        }
    }
    Err("no function around DL_MSG_DEV_ACQUIRE".into())
}

/// `mdev-kmod/` of this checkout, from the crate's directory.
pub fn kmod_dir(manifest_dir: &Path) -> PathBuf {
    manifest_dir.join("../../mdev-kmod")
}

/// Reads both files and tells the variant.
pub fn variant(kmod: &Path) -> Result<CVariant, String> {
    let read = |rel: &str| {
        let p = kmod.join(rel);
        std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))
    };
    let (fix_remove_order, e1) = remove_order(&read("lender/driver.c")?)?;
    let (fix_lease_inc, e5) = lease_incarnation(&read("borrower/session.c")?)?;
    let (acquire_recheck, fix_acquire_silent, e7) = acquire_recheck(&read("lender/msg.c")?)?;
    Ok(CVariant {
        fix_remove_order,
        fix_lease_inc,
        acquire_recheck,
        fix_acquire_silent,
        evidence: vec![e1, e5, e7],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_and_strings_are_blanked() {
        let src = "a /* xa_erase( */ b // dl_lent_reclaim(\n\"x(\" c";
        let s = strip_comments(src);
        assert!(!s.contains("xa_erase") && !s.contains("reclaim") && !s.contains("x("));
        assert_eq!(s.len(), src.len());
        assert!(s.contains('c'));
    }

    #[test]
    fn remove_order_both_ways() {
        let old = "static void dl_lender_remove(struct pci_dev *pdev)\n{\n\txa_erase(&x, 1);\n\t/* dl_lent_reclaim( */\n\tdl_lent_reclaim(l, \"x\");\n}\n";
        assert!(!remove_order(old).unwrap().0);
        let new = "static void dl_lender_remove(struct pci_dev *pdev)\n{\n\t/* xa_erase( later */\n\tdl_lent_reclaim(l, \"x\");\n\txa_erase(&x, 1);\n}\n";
        assert!(remove_order(new).unwrap().0);
        assert!(remove_order("static void other(void)\n{\n}\n").is_err());
        // A declaration is not a definition.
        let decl = "static void dl_lender_remove(struct pci_dev *pdev);\n";
        assert!(remove_order(decl).is_err());
    }

    #[test]
    fn lease_incarnation_both_ways() {
        let old = "int dl_session_borrow(struct dl_vdev *v)\n{\n\tlease = dl_lease_new(b, v->host, v->dev_id, v->remote->incarnation);\n\tret = dl_session_request(v, DL_MSG_DEV_ACQUIRE, &ref);\n}\n";
        assert!(!lease_incarnation(old).unwrap().0);
        let new = "static int dl_session_acquire(struct dl_vdev *v, struct dl_acquire *a)\n{\n\tret = dl_fabric_req_submit(f, h, DL_MSG_DEV_ACQUIRE, &r);\n\ta->inc = req.peer_inc;\n}\n\nint dl_session_borrow(struct dl_vdev *v)\n{\n\tlease = dl_lease_new(b, v->host, v->dev_id, v->remote->incarnation);\n\tret = dl_session_acquire(v, &acq);\n\tif (acq.inc)\n\t\tlease->incarnation = acq.inc;\n}\n";
        assert!(lease_incarnation(new).unwrap().0);
        assert!(lease_incarnation(
            "int dl_session_borrow(void)\n{\n\tx = DL_MSG_DEV_ACQUIRE;\n}\n"
        )
        .is_err());
    }
}
