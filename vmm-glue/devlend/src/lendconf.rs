//! The lender's persistent configuration: which devices to lend, and to
//! whom, applied at boot by `devlend apply` (the unit
//! `systemd/devlend-lend.service`), as mdevctl's definitions are for mdevs.
//!
//! `/etc/devlend/lend.conf`, one device per line, `#` starts a comment:
//!
//! ```text
//! # address      hosts it is lent to (default: all)
//! 0000:01:00.0   to=1,2
//! 0000:02:00.0
//! ```

use std::path::Path;

use crate::sysfs::check_bdf;
use crate::{CliError, Result};

/// Where `devlend apply` reads by default.
pub const DEFAULT_PATH: &str = "/etc/devlend/lend.conf";

/// Host ids one fabric has (the kernel's `DL_MAX_HOSTS`).
pub const MAX_HOSTS: u32 = 8;

/// The hosts a device is lent to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hosts {
    /// Every host of the fabric.
    All,
    /// These host ids only (sorted, no duplicates).
    Only(Vec<u32>),
}

impl Hosts {
    /// Parses `all` or host ids separated by commas.
    pub fn parse(s: &str) -> Result<Self> {
        let s = s.trim();
        if s == "all" {
            return Ok(Hosts::All);
        }
        let mut ids = Vec::new();
        for tok in s.split(',') {
            let id: u32 = tok.trim().parse().map_err(|_| {
                CliError::usage(format!(
                    "hosts {s:?}: give `all` or host ids separated by commas (`devlend hosts` lists them)"
                ))
            })?;
            if id >= MAX_HOSTS {
                return Err(CliError::usage(format!(
                    "host id {id}: a fabric has host ids 0 to {}",
                    MAX_HOSTS - 1
                )));
            }
            ids.push(id);
        }
        ids.sort_unstable();
        ids.dedup();
        Ok(Hosts::Only(ids))
    }

    /// The value the kernel's `allowed_hosts` attribute takes and shows.
    pub fn to_sysfs(&self) -> String {
        match self {
            Hosts::All => "all".into(),
            Hosts::Only(ids) => ids.iter().map(u32::to_string).collect::<Vec<_>>().join(","),
        }
    }
}

/// One device of the configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// PCI address.
    pub address: String,
    /// Hosts it is lent to.
    pub to: Hosts,
}

/// Parses a configuration; errors name the line.
pub fn parse(text: &str, origin: &Path) -> Result<Vec<Entry>> {
    let mut entries: Vec<Entry> = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let at = |e: CliError| CliError::usage(format!("{}:{}: {e}", origin.display(), n + 1));
        let mut words = line.split_whitespace();
        let address = words.next().unwrap_or_default().to_owned();
        check_bdf(&address).map_err(at)?;
        let mut to = Hosts::All;
        for w in words {
            match w.strip_prefix("to=") {
                Some(v) => to = Hosts::parse(v).map_err(at)?,
                None => {
                    return Err(at(CliError::usage(format!(
                        "unknown setting {w:?} (only to=HOSTS)"
                    ))))
                }
            }
        }
        if entries.iter().any(|e| e.address == address) {
            return Err(at(CliError::usage(format!("{address} is listed twice"))));
        }
        entries.push(Entry { address, to });
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_comments_and_hosts() {
        let text = "# lent at boot\n0000:01:00.0 to=2,1,2\n\n  0000:02:00.0   # all\n";
        let e = parse(text, Path::new("lend.conf")).unwrap();
        assert_eq!(
            e,
            vec![
                Entry {
                    address: "0000:01:00.0".into(),
                    to: Hosts::Only(vec![1, 2]),
                },
                Entry {
                    address: "0000:02:00.0".into(),
                    to: Hosts::All,
                },
            ]
        );
        assert_eq!(e[0].to.to_sysfs(), "1,2");
        assert_eq!(Hosts::parse(" all ").unwrap().to_sysfs(), "all");
    }

    #[test]
    fn bad_lines_are_refused_with_their_number() {
        for (text, want) in [
            ("0000:01:00.0 to=8", "lend.conf:1: host id 8"),
            ("\n0000:01:00.0 to=x", "lend.conf:2: hosts \"x\""),
            ("01:00.0", "lend.conf:1:"),
            ("0000:01:00.0 with=1", "unknown setting"),
            (
                "0000:01:00.0\n0000:01:00.0 to=1",
                "lend.conf:2: 0000:01:00.0 is listed twice",
            ),
            ("0000:01:00.0 to=", "lend.conf:1: hosts"),
        ] {
            let err = parse(text, Path::new("lend.conf")).unwrap_err().to_string();
            assert!(err.contains(want), "{text:?}: {err}");
        }
    }
}
