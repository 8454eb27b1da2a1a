//! What the commands print: each command's result as JSON (`--json`) or as
//! the human tables and lines of docs/devlend-cli.md. The commands
//! (`crate::commands`) do the work and return data; nothing here reads or
//! writes sysfs. Results go to stdout, notes and messages to stderr, as the
//! VM tests and scripts that parse the output expect.

use std::path::Path;

use serde::Serialize;

use crate::commands::apply::Applied;
use crate::commands::mdev::create::Created;
use crate::error::CliError;
use crate::stats::Stats;
use crate::sysfs::{Fabric, LocalDevice, Mdev, MdevType, Remote};

/// Prints JSON with `--json`, else the human form.
#[derive(Clone, Copy, Debug)]
pub struct Printer {
    /// `--json`.
    pub json: bool,
}

/// Prints `v` as pretty JSON on stdout.
pub fn print_json<T: Serialize>(v: &T) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).expect("plain data serializes")
    );
}

/// A table on stdout: left-aligned columns two spaces apart, no trailing
/// space.
pub fn table(headers: &[&str], rows: &[Vec<String>]) {
    let mut w: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.len());
        }
    }
    let line = |cells: Vec<&str>| {
        let s: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<width$}", width = w[i]))
            .collect();
        println!("{}", s.join("  ").trim_end());
    };
    line(headers.to_vec());
    for r in rows {
        line(r.iter().map(String::as_str).collect());
    }
}

/// The value, or `-` for none.
pub fn or_dash<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map_or("-".into(), |x| x.to_string())
}

/// `vvvv:dddd` from `0xvvvv` and `0xdddd`.
fn ids(vendor: &str, device: &str) -> String {
    format!(
        "{}:{}",
        vendor.trim_start_matches("0x"),
        device.trim_start_matches("0x")
    )
}

impl Printer {
    /// A listing: the items as JSON, or one table row per item (`when_empty`
    /// printed instead of an empty table, where the command has one).
    fn listing<T: Serialize>(
        &self,
        items: &[T],
        when_empty: Option<&str>,
        headers: &[&str],
        row: impl Fn(&T) -> Vec<String>,
    ) {
        if self.json {
            return print_json(&items);
        }
        if let (true, Some(msg)) = (items.is_empty(), when_empty) {
            println!("{msg}");
            return;
        }
        let rows: Vec<Vec<String>> = items.iter().map(row).collect();
        table(headers, &rows);
    }

    /// `devlend fabrics` (never empty in the human form: the command
    /// fails then).
    pub fn fabrics(&self, fabrics: &[Fabric]) {
        self.listing(
            fabrics,
            None,
            &["FABRIC", "HOST", "FABRIC_ID", "PEERS_UP"],
            |f| {
                let up = f.peers.iter().filter(|p| p.state == "up").count();
                vec![
                    f.adapter.clone(),
                    f.host_id.to_string(),
                    f.fabric_id.clone(),
                    format!("{up}/{}", f.peers.len()),
                ]
            },
        );
    }

    /// `devlend hosts`.
    pub fn hosts(&self, f: &Fabric) {
        if self.json {
            return print_json(f);
        }
        println!(
            "this host: {} (host id {}), adapter {}, fabric {}, protocol {}",
            if f.hostname.is_empty() {
                "?"
            } else {
                &f.hostname
            },
            f.host_id,
            f.adapter,
            f.fabric_id,
            f.proto
        );
        let rows: Vec<Vec<String>> = f
            .peers
            .iter()
            .map(|p| {
                vec![
                    p.host_id.to_string(),
                    p.name.clone(),
                    p.state.clone(),
                    p.proto.to_string(),
                    or_dash(&p.window),
                    or_dash(&p.heartbeat_age_ms),
                ]
            })
            .collect();
        if rows.is_empty() {
            println!("no peers seen yet (are devlend's modules loaded on the other hosts?)");
        } else {
            table(
                &["HOST", "NAME", "LINK", "PROTO", "WINDOW", "HEARTBEAT_MS"],
                &rows,
            );
        }
    }

    /// `devlend devices`.
    pub fn devices(&self, devs: &[LocalDevice]) {
        self.listing(
            devs,
            None,
            &[
                "ADDRESS", "ID", "CLASS", "DRIVER", "IOMMU", "DEV_ID", "STATE", "BORROWER",
                "LENT_TO", "SRIOV",
            ],
            |d| {
                let (state, borrower) = match &d.lent {
                    Some(l) => (format!("lent:{}", l.state), or_dash(&l.borrower)),
                    None if d.fabric => ("fabric".into(), "-".into()),
                    None => ("-".into(), "-".into()),
                };
                vec![
                    d.address.clone(),
                    ids(&d.vendor, &d.device),
                    d.class.trim_start_matches("0x").to_string(),
                    or_dash(&d.driver),
                    or_dash(&d.iommu_group),
                    d.lent.as_ref().map_or("-".into(), |l| l.dev_id.to_string()),
                    state,
                    borrower,
                    d.lent
                        .as_ref()
                        .map_or("-".into(), |l| or_dash(&l.allowed_hosts)),
                    d.sriov(),
                ]
            },
        );
    }

    /// `devlend lend`.
    pub fn lent(&self, d: &LocalDevice) {
        if self.json {
            return print_json(d);
        }
        match &d.lent {
            Some(l) => println!("lent {} as dev_id {} ({})", d.address, l.dev_id, l.state),
            None => println!("lent {}", d.address),
        }
    }

    /// `devlend apply`, as each line of the configuration is done: the
    /// human form reports each at once (stdout, or stderr for a failure),
    /// the JSON form only the failures (the devices come at the end).
    pub fn applied(&self, a: &Applied<'_>) {
        match a {
            Applied::Lent { device, stayed, to } => {
                if !self.json {
                    println!(
                        "{} {} to hosts {}",
                        device.address,
                        if *stayed { "stays lent" } else { "lent" },
                        to.to_sysfs()
                    );
                }
            }
            Applied::Failed { address, err } => {
                eprintln!("devlend apply: {address}: {err}");
            }
        }
    }

    /// `devlend apply`, at the end: the devices it lent (JSON only).
    pub fn apply_done(&self, done: &[LocalDevice]) {
        if self.json {
            print_json(&done);
        }
    }

    /// `devlend unlend`.
    pub fn unlent(&self, d: &LocalDevice) {
        if self.json {
            return print_json(d);
        }
        println!(
            "took {} back (driver now {})",
            d.address,
            or_dash(&d.driver)
        );
    }

    /// `devlend stats --prometheus`.
    pub fn prometheus(&self, text: &str) {
        print!("{text}");
    }

    /// `devlend stats`.
    pub fn stats(&self, s: &Stats) {
        if self.json {
            return print_json(s);
        }
        let name = if s.hostname.is_empty() {
            "?"
        } else {
            &s.hostname
        };
        println!(
            "this host: {name} (host id {}); rates over {:.1} s",
            s.host_id, s.interval_s
        );
        let f1 = |v: &Option<f64>| v.map_or("-".into(), |x| format!("{x:.1}"));
        let peers: Vec<Vec<String>> = s
            .peers
            .iter()
            .map(|p| {
                vec![
                    p.host_id.to_string(),
                    p.name.clone(),
                    p.link.clone(),
                    or_dash(&p.heartbeat_age_ms),
                    f1(&p.answers_per_s),
                    f1(&p.round_trip_us),
                    f1(&p.round_trip_us_since_load),
                ]
            })
            .collect();
        println!();
        table(
            &[
                "HOST",
                "NAME",
                "LINK",
                "HEARTBEAT_MS",
                "ANSWERS/S",
                "RTT_US",
                "RTT_US_SINCE_LOAD",
            ],
            &peers,
        );
        if !s.lent.is_empty() {
            let lent: Vec<Vec<String>> = s
                .lent
                .iter()
                .map(|d| {
                    vec![
                        d.address.clone(),
                        d.dev_id.to_string(),
                        d.state.clone(),
                        or_dash(&d.borrower),
                        d.dma_mapped_bytes.to_string(),
                        d.irq_vectors.to_string(),
                        f1(&d.irqs_per_s),
                    ]
                })
                .collect();
            println!();
            table(
                &[
                    "LENT",
                    "DEV_ID",
                    "STATE",
                    "BORROWER",
                    "DMA_BYTES",
                    "VECTORS",
                    "IRQS/S",
                ],
                &lent,
            );
        }
        if !s.mdevs.is_empty() {
            let mdevs: Vec<Vec<String>> = s
                .mdevs
                .iter()
                .map(|m| vec![m.uuid.clone(), or_dash(&m.remote_device), or_dash(&m.state)])
                .collect();
            println!();
            table(&["MDEV", "REMOTE", "STATE"], &mdevs);
        }
    }

    /// `devlend remote`.
    pub fn remotes(&self, r: &[Remote]) {
        self.listing(
            r,
            Some("no remote devices (is a lender up? `devlend hosts`; has it lent one? `devlend lend` there)"),
            &[
                "ID", "DEVICE", "IDS", "CLASS", "STATE", "BORROWER", "MDEVS", "SRIOV",
            ],
            |x| {
                vec![
                    x.id.clone(),
                    format!("{}/{}", x.lender, x.name),
                    ids(&x.vendor, &x.device),
                    x.class.trim_start_matches("0x").to_string(),
                    x.state.clone(),
                    or_dash(&x.borrower),
                    if x.mdevs.is_empty() {
                        "-".into()
                    } else {
                        x.mdevs.join(",")
                    },
                    x.pf.as_ref()
                        .map_or("-".into(), |pf| format!("vf:{}/{pf}", x.lender)),
                ]
            },
        );
    }

    /// `devlend mdev types`.
    pub fn mdev_types(&self, t: &[MdevType]) {
        self.listing(t, None, &["TYPE", "AVAILABLE", "API", "NAME"], |t| {
            vec![
                t.id.clone(),
                t.available_instances.to_string(),
                t.device_api.clone(),
                t.name.clone(),
            ]
        });
    }

    /// `devlend mdev create`, before the mdev is made: a device held by
    /// another host can be targeted but not opened yet (stderr, in both
    /// forms).
    pub fn note_held(&self, r: &Remote) {
        eprintln!(
            "devlend: note: remote device {} is {}{}; a VM cannot open the mdev until it is given back",
            r.id,
            r.state,
            r.borrower.map_or(String::new(), |b| format!(" by host {b}"))
        );
    }

    /// `devlend mdev create`.
    pub fn mdev_created(&self, c: &Created) {
        let m = &c.mdev;
        if self.json {
            return print_json(m);
        }
        println!("{}", m.uuid);
        eprintln!(
            "created mdev {} of type {} for {}; give it to a VM with `devlend qemu-args {}`",
            m.uuid,
            c.mtype.id,
            c.remote
                .as_ref()
                .map_or("any free device of the type".into(), |r| format!(
                    "{} ({}/{})",
                    r.id, r.lender, r.name
                )),
            m.uuid
        );
    }

    /// `devlend mdev incoming` (the human form on stderr: nothing to parse).
    pub fn mdev_incoming(&self, m: &Mdev) {
        if self.json {
            return print_json(m);
        }
        if m.migration.as_deref() == Some("incoming") {
            eprintln!(
                "mdev {} is a migration's destination: start its VMM with -incoming, the guest's device at the same PCI address as the source's (`devlend qemu-args {} --addr ...`)",
                m.uuid, m.uuid
            );
        } else {
            eprintln!("mdev {}: its next open is an ordinary one", m.uuid);
        }
    }

    /// `devlend mdev list`.
    pub fn mdevs(&self, m: &[Mdev]) {
        self.listing(
            m,
            Some("no devlend mdevs on this host (`devlend mdev create` makes one)"),
            &[
                "UUID",
                "TYPE",
                "PARENT",
                "REMOTE",
                "STATE",
                "IOMMU",
                "MIGRATION",
            ],
            |m| {
                vec![
                    m.uuid.clone(),
                    or_dash(&m.mdev_type),
                    or_dash(&m.parent),
                    or_dash(&m.remote_device),
                    or_dash(&m.state),
                    or_dash(&m.iommu_group),
                    or_dash(&m.migration),
                ]
            },
        );
    }

    /// `devlend mdev remove` (the human form on stderr: nothing to parse).
    pub fn mdev_removed(&self, uuid: &str) {
        if self.json {
            print_json(&serde_json::json!({ "removed": uuid }));
        } else {
            eprintln!("removed mdev {uuid}");
        }
    }

    /// `devlend qemu-args` and `devlend ch-args`: a JSON array, or one
    /// shell-quoted line.
    pub fn vmm_args(&self, args: &[String]) {
        if self.json {
            print_json(&args);
        } else {
            println!("{}", crate::vmmargs::shell_join(args));
        }
    }

    /// `devlend libvirt-xml`.
    pub fn xml(&self, xml: &str) {
        if self.json {
            print_json(&serde_json::json!({ "xml": xml }));
        } else {
            print!("{xml}");
        }
    }

    /// `devlend man`: the pages written (both forms: a file list).
    pub fn files(&self, files: &[String]) {
        for f in files {
            println!("{f}");
        }
    }

    /// `devlend attach`.
    pub fn attached(&self, uuid: &str, id: &str, qmp: &Path) {
        if self.json {
            print_json(&serde_json::json!({ "attached": uuid, "id": id }));
        } else {
            println!(
                "attached mdev {uuid} as device {id}; detach it with `devlend detach --qmp {} {id}`",
                qmp.display()
            );
        }
    }

    /// `devlend detach`.
    pub fn detached(&self, id: &str) {
        if self.json {
            print_json(&serde_json::json!({ "detached": id }));
        } else {
            println!("detached {id}; the guest released it");
        }
    }
}

/// How `main` reports a failed command on stderr.
pub fn error(e: &CliError) {
    eprintln!("devlend: error: {e}");
    if let Some(h) = e.hint() {
        eprintln!("devlend: hint: {h}");
    }
}
