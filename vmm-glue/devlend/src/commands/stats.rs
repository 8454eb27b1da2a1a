//! `devlend stats`: rates and round trips, or the counters for Prometheus.

use std::time::{Duration, Instant};

use crate::error::{CliError, Result};
use crate::stats::{self, Reading, Stats};
use crate::sysfs::Sysfs;

/// What `stats` reports.
#[derive(Debug)]
pub enum Report {
    /// Rates over the interval.
    Rates(Stats),
    /// One reading in Prometheus' text format.
    Prometheus(String),
}

/// Reads the counters twice, `interval` seconds apart, or once for
/// `prometheus` (which has no JSON form).
pub fn run(sys: &Sysfs, interval: f64, prometheus: bool, json: bool) -> Result<Report> {
    if prometheus {
        if json {
            return Err(CliError::usage(
                "--prometheus and --json exclude each other",
            ));
        }
        return Ok(Report::Prometheus(stats::prometheus(&Reading::take(sys)?)));
    }
    if !(interval > 0.0 && interval <= 3600.0) {
        return Err(CliError::usage(format!(
            "--interval {interval}: give seconds, more than 0 and at most 3600"
        )));
    }
    let before = Reading::take(sys)?;
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(interval));
    let after = Reading::take(sys)?;
    Ok(Report::Rates(stats::compare(
        &before,
        &after,
        t0.elapsed().as_secs_f64(),
    )))
}
