//! `devlend stats`: what the fabric and the lent devices are doing.
//!
//! The kernel keeps cumulative counters (answers and their summed round
//! trips per peer, interrupts relayed per lent device). Rates and mean
//! round trips come from two readings an interval apart, like `vmstat`;
//! the Prometheus text format exposes the counters themselves, from which
//! Prometheus takes its own rates.

use std::fmt::Write as _;

use serde::Serialize;

use crate::sysfs::{Fabric, LocalDevice, Mdev, Sysfs};
use crate::Result;

/// One reading of everything `stats` reports.
#[derive(Clone, Debug)]
pub struct Reading {
    /// This host on the fabric and its peers.
    pub fabric: Fabric,
    /// This host's lent devices.
    pub lent: Vec<LocalDevice>,
    /// This host's mdevs (the devices it borrows).
    pub mdevs: Vec<Mdev>,
}

impl Reading {
    /// Reads the counters now.
    pub fn take(sys: &Sysfs) -> Result<Self> {
        Ok(Reading {
            fabric: sys.fabric()?,
            lent: sys
                .local_devices(false)?
                .into_iter()
                .filter(|d| d.lent.is_some())
                .collect(),
            mdevs: sys.mdevs().unwrap_or_default(),
        })
    }
}

/// The report: the later reading, with rates over the interval.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Stats {
    /// Seconds between the two readings.
    pub interval_s: f64,
    /// This host's id.
    pub host_id: u32,
    /// This host's name.
    pub hostname: String,
    /// The other hosts.
    pub peers: Vec<PeerStats>,
    /// Devices this host lends.
    pub lent: Vec<LentStats>,
    /// Remote devices this host borrows through mdevs.
    pub mdevs: Vec<MdevStats>,
}

/// A peer host.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PeerStats {
    /// Host id.
    pub host_id: u32,
    /// Host name.
    pub name: String,
    /// `up` or `down`.
    pub link: String,
    /// Milliseconds since its heartbeat moved, if watched.
    pub heartbeat_age_ms: Option<u64>,
    /// Answers per second to this host's requests, over the interval.
    pub answers_per_s: Option<f64>,
    /// Mean round trip of those answers in microseconds; none when no
    /// request was answered in the interval.
    pub round_trip_us: Option<f64>,
    /// Mean round trip of every answer since the module loaded.
    pub round_trip_us_since_load: Option<f64>,
}

/// A device this host lends.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LentStats {
    /// PCI address.
    pub address: String,
    /// The lender's id for it.
    pub dev_id: u32,
    /// available, borrowed, returning or failed.
    pub state: String,
    /// Borrowing host id.
    pub borrower: Option<u32>,
    /// Bytes mapped for the borrower's DMA.
    pub dma_mapped_bytes: u64,
    /// Interrupt vectors allocated.
    pub irq_vectors: u32,
    /// Interrupts relayed per second, over the interval.
    pub irqs_per_s: Option<f64>,
}

/// An mdev of this host: a remote device it borrows or may borrow.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct MdevStats {
    /// UUID.
    pub uuid: String,
    /// The remote device it targets (`<host-id>:<dev_id>` or `any`).
    pub remote_device: Option<String>,
    /// idle, borrowed or lost.
    pub state: Option<String>,
}

fn rate(before: Option<u64>, after: Option<u64>, secs: f64) -> Option<f64> {
    let d = after?.checked_sub(before?)?;
    (secs > 0.0).then(|| d as f64 / secs)
}

fn mean_us(answers: Option<u64>, ns: Option<u64>) -> Option<f64> {
    let n = answers.filter(|&n| n > 0)?;
    Some(ns? as f64 / n as f64 / 1000.0)
}

/// The report from `before` and `after`, taken `secs` apart. A peer or a
/// device present in only one reading (it came or went) gets no rate.
pub fn compare(before: &Reading, after: &Reading, secs: f64) -> Stats {
    let peers = after
        .fabric
        .peers
        .iter()
        .map(|p| {
            let old = before.fabric.peers.iter().find(|o| o.host_id == p.host_id);
            let delta = |f: fn(&crate::sysfs::Peer) -> Option<u64>| f(p)?.checked_sub(f(old?)?);
            PeerStats {
                host_id: p.host_id,
                name: p.name.clone(),
                link: p.state.clone(),
                heartbeat_age_ms: p.heartbeat_age_ms,
                answers_per_s: rate(old.and_then(|o| o.answers), p.answers, secs),
                round_trip_us: mean_us(delta(|p| p.answers), delta(|p| p.answer_ns)),
                round_trip_us_since_load: mean_us(p.answers, p.answer_ns),
            }
        })
        .collect();
    let lent = after
        .lent
        .iter()
        .filter_map(|d| {
            let l = d.lent.as_ref()?;
            let old = before
                .lent
                .iter()
                .find(|o| o.address == d.address)
                .and_then(|o| o.lent.as_ref())
                .filter(|o| o.dev_id == l.dev_id);
            Some(LentStats {
                address: d.address.clone(),
                dev_id: l.dev_id,
                state: l.state.clone(),
                borrower: l.borrower,
                dma_mapped_bytes: l.dma_mapped_bytes,
                irq_vectors: l.irq_vectors,
                irqs_per_s: rate(old.and_then(|o| o.irq_fires), l.irq_fires, secs),
            })
        })
        .collect();
    let mdevs = after
        .mdevs
        .iter()
        .map(|m| MdevStats {
            uuid: m.uuid.clone(),
            remote_device: m.remote_device.clone(),
            state: m.state.clone(),
        })
        .collect();
    Stats {
        interval_s: secs,
        host_id: after.fabric.host_id,
        hostname: after.fabric.hostname.clone(),
        peers,
        lent,
        mdevs,
    }
}

/// Escapes a Prometheus label value.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// One reading in Prometheus' text exposition format (version 0.0.4):
/// counters as counters, for a node exporter's textfile collector or any
/// scraper.
pub fn prometheus(r: &Reading) -> String {
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, samples: Vec<(String, f64)>| {
        let _ = writeln!(out, "# HELP devlend_{name} {help}");
        let _ = writeln!(out, "# TYPE devlend_{name} {kind}");
        for (labels, v) in samples {
            let _ = writeln!(out, "devlend_{name}{{{labels}}} {v}");
        }
    };
    let host = format!("host_id=\"{}\"", r.fabric.host_id);
    let peer = |p: &crate::sysfs::Peer| {
        format!(
            "{host},peer=\"{}\",peer_name=\"{}\"",
            p.host_id,
            label(&p.name)
        )
    };
    family(
        "peer_up",
        "gauge",
        "Whether the link to the peer host is up.",
        r.fabric
            .peers
            .iter()
            .map(|p| (peer(p), f64::from(u8::from(p.state == "up"))))
            .collect(),
    );
    family(
        "peer_answers_total",
        "counter",
        "Answers to this host's requests from the peer.",
        r.fabric
            .peers
            .iter()
            .filter_map(|p| Some((peer(p), p.answers? as f64)))
            .collect(),
    );
    family(
        "peer_answer_seconds_total",
        "counter",
        "Round trips of those answers, summed.",
        r.fabric
            .peers
            .iter()
            .filter_map(|p| Some((peer(p), p.answer_ns? as f64 / 1e9)))
            .collect(),
    );
    let dev = |d: &LocalDevice, dev_id: u32| {
        format!(
            "{host},device=\"{}\",dev_id=\"{dev_id}\"",
            label(&d.address)
        )
    };
    let lent: Vec<_> = r
        .lent
        .iter()
        .filter_map(|d| Some((d, d.lent.as_ref()?)))
        .collect();
    family(
        "lent_borrowed",
        "gauge",
        "Whether the lent device is held by a borrower.",
        lent.iter()
            .map(|(d, l)| (dev(d, l.dev_id), f64::from(u8::from(l.borrower.is_some()))))
            .collect(),
    );
    family(
        "lent_dma_mapped_bytes",
        "gauge",
        "Bytes the lent device may reach for its borrower.",
        lent.iter()
            .map(|(d, l)| (dev(d, l.dev_id), l.dma_mapped_bytes as f64))
            .collect(),
    );
    family(
        "lent_irq_vectors",
        "gauge",
        "Interrupt vectors relayed for the lent device.",
        lent.iter()
            .map(|(d, l)| (dev(d, l.dev_id), f64::from(l.irq_vectors)))
            .collect(),
    );
    family(
        "lent_irqs_total",
        "counter",
        "Interrupts relayed to the borrower since the device was lent.",
        lent.iter()
            .filter_map(|(d, l)| Some((dev(d, l.dev_id), l.irq_fires? as f64)))
            .collect(),
    );
    family(
        "mdev_borrowed",
        "gauge",
        "Whether the mdev holds its remote device.",
        r.mdevs
            .iter()
            .map(|m| {
                (
                    format!(
                        "{host},uuid=\"{}\",remote_device=\"{}\"",
                        label(&m.uuid),
                        label(m.remote_device.as_deref().unwrap_or(""))
                    ),
                    f64::from(u8::from(m.state.as_deref() == Some("borrowed"))),
                )
            })
            .collect(),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sysfs::{Lent, Peer};

    fn reading(answers: u64, answer_ns: u64, irq_fires: u64) -> Reading {
        Reading {
            fabric: Fabric {
                adapter: "0000:00:03.0".into(),
                host_id: 0,
                hostname: "lender".into(),
                fabric_id: "f".into(),
                proto: 1,
                peers: vec![Peer {
                    host_id: 1,
                    name: "borrower".into(),
                    state: "up".into(),
                    proto: 1,
                    window: None,
                    heartbeat_age_ms: Some(20),
                    answers: Some(answers),
                    answer_ns: Some(answer_ns),
                }],
            },
            lent: vec![LocalDevice {
                address: "0000:01:00.0".into(),
                vendor: "0x1b36".into(),
                device: "0x0010".into(),
                class: "0x010802".into(),
                driver: Some("devlend-lender".into()),
                iommu_group: Some(5),
                fabric: false,
                lent: Some(Lent {
                    dev_id: 1,
                    state: "borrowed".into(),
                    borrower: Some(1),
                    dma_mapped_bytes: 4096,
                    irq_vectors: 2,
                    irq_fires: Some(irq_fires),
                    allowed_hosts: Some("all".into()),
                }),
                physfn: None,
                sriov_numvfs: None,
            }],
            mdevs: vec![],
        }
    }

    #[test]
    fn rates_and_round_trips_come_from_the_interval() {
        let s = compare(
            &reading(100, 50_000_000, 10),
            &reading(300, 90_000_000, 510),
            2.0,
        );
        let p = &s.peers[0];
        assert_eq!(p.answers_per_s, Some(100.0));
        // 200 answers took 40 ms between them: 200 us each.
        assert_eq!(p.round_trip_us, Some(200.0));
        assert_eq!(p.round_trip_us_since_load, Some(300.0));
        assert_eq!(s.lent[0].irqs_per_s, Some(250.0));
        assert_eq!(s.lent[0].dma_mapped_bytes, 4096);
    }

    #[test]
    fn no_answers_in_the_interval_means_no_round_trip() {
        let s = compare(&reading(7, 7000, 1), &reading(7, 7000, 1), 1.0);
        assert_eq!(s.peers[0].answers_per_s, Some(0.0));
        assert_eq!(s.peers[0].round_trip_us, None);
        assert_eq!(s.lent[0].irqs_per_s, Some(0.0));
    }

    #[test]
    fn a_device_lent_again_in_between_gets_no_rate() {
        let before = reading(1, 1, 900);
        let mut after = reading(1, 1, 3);
        after.lent[0].lent.as_mut().unwrap().dev_id = 2;
        let s = compare(&before, &after, 1.0);
        assert_eq!(s.lent[0].irqs_per_s, None);
    }

    #[test]
    fn prometheus_text_has_help_type_and_labelled_samples() {
        let text = prometheus(&reading(3, 1_500_000_000, 42));
        assert!(text.contains("# TYPE devlend_peer_answers_total counter\n"));
        assert!(text.contains(
            "devlend_peer_answers_total{host_id=\"0\",peer=\"1\",peer_name=\"borrower\"} 3\n"
        ));
        assert!(text.contains(
            "devlend_peer_answer_seconds_total{host_id=\"0\",peer=\"1\",peer_name=\"borrower\"} 1.5\n"
        ));
        assert!(text.contains(
            "devlend_lent_irqs_total{host_id=\"0\",device=\"0000:01:00.0\",dev_id=\"1\"} 42\n"
        ));
        assert!(
            text.contains("devlend_peer_up{host_id=\"0\",peer=\"1\",peer_name=\"borrower\"} 1\n")
        );
        // Every sample line belongs to a family announced before it.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split('{').next().unwrap();
            assert!(text.contains(&format!("# TYPE {name} ")), "{line}");
        }
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
