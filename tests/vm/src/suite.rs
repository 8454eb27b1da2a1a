//! Running named checks against a shared cluster, with logs on failure.

use std::path::{Path, PathBuf};
use std::time::Instant;

use devlend_cluster::Cluster;

/// One check: a name and what it does with the cluster.
pub struct Check {
    /// Name, printed and matched by filters.
    pub name: &'static str,
    /// The check; an error fails it.
    pub run: fn(&mut Cluster) -> anyhow::Result<()>,
}

impl std::fmt::Debug for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// What brings the shared cluster back to the state every check starts
/// from (see [`Suite::reset`]).
pub type Reset = fn(&mut Cluster) -> anyhow::Result<()>;

/// A check as a suite runs it: with the suite it was written for (whose
/// name its failure logs go under) and that suite's reset.
struct Entry {
    check: Check,
    part: &'static str,
    reset: Option<Reset>,
}

/// A list of checks and the arguments that select them.
pub struct Suite {
    name: &'static str,
    entries: Vec<Entry>,
    filters: Vec<String>,
    list_only: bool,
    /// `DEVLEND_CHECK_ORDER` as given, and what it says.
    order: (String, CheckOrder),
}

impl std::fmt::Debug for Suite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let checks: Vec<&Check> = self.entries.iter().map(|e| &e.check).collect();
        f.debug_struct("Suite")
            .field("name", &self.name)
            .field("checks", &checks)
            .field("filters", &self.filters)
            .finish()
    }
}

/// The order the selected checks run in (`DEVLEND_CHECK_ORDER`): as
/// listed (empty or `listed`), `reverse`, or `shuffle:<seed>`. Checks must
/// not depend on their order; running a suite in another one shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckOrder {
    /// As the suite lists them.
    Listed,
    /// Last first.
    Reverse,
    /// A permutation from the seed (xorshift64*), the same for a seed.
    Shuffle(u64),
}

impl CheckOrder {
    /// Parses a `DEVLEND_CHECK_ORDER` value.
    pub fn parse(s: &str) -> anyhow::Result<CheckOrder> {
        match s.trim() {
            "" | "listed" => Ok(CheckOrder::Listed),
            "reverse" => Ok(CheckOrder::Reverse),
            s => {
                let seed = s.strip_prefix("shuffle:").ok_or_else(|| {
                    anyhow::anyhow!("{s:?} is not listed, reverse or shuffle:<seed>")
                })?;
                let seed = seed
                    .parse()
                    .map_err(|e| anyhow::anyhow!("shuffle seed {seed:?}: {e}"))?;
                Ok(CheckOrder::Shuffle(seed))
            }
        }
    }

    /// `items` in this order.
    pub fn apply<T>(self, mut items: Vec<T>) -> Vec<T> {
        match self {
            CheckOrder::Listed => {}
            CheckOrder::Reverse => items.reverse(),
            CheckOrder::Shuffle(seed) => {
                // Fisher-Yates with xorshift64* (a zero state would stay 0).
                let mut x = seed | 1;
                for i in (1..items.len()).rev() {
                    x ^= x >> 12;
                    x ^= x << 25;
                    x ^= x >> 27;
                    let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
                    items.swap(i, (r % (i as u64 + 1)) as usize);
                }
            }
        }
        items
    }
}

/// Where failure logs go: `$DEVLEND_ARTIFACTS`, else `target/vm-artifacts`.
pub fn artifacts_dir() -> PathBuf {
    std::env::var_os("DEVLEND_ARTIFACTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| devlend_cluster::tools::repo_root().join("target/vm-artifacts"))
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

impl Suite {
    /// A suite named `name` (the test binary) with the process arguments.
    pub fn new(name: &'static str, checks: Vec<Check>) -> Suite {
        let mut filters = Vec::new();
        let mut list_only = false;
        for a in std::env::args().skip(1) {
            match a.as_str() {
                "--list" => list_only = true,
                // Flags cargo or a user may pass to a libtest harness.
                s if s.starts_with('-') => {}
                s => filters.push(s.to_owned()),
            }
        }
        let given = std::env::var("DEVLEND_CHECK_ORDER").unwrap_or_default();
        let order = match CheckOrder::parse(&given) {
            Ok(o) => o,
            Err(e) => {
                println!("DEVLEND_CHECK_ORDER: {e}");
                std::process::exit(2);
            }
        };
        Suite {
            name,
            entries: checks
                .into_iter()
                .map(|check| Entry {
                    check,
                    part: name,
                    reset: None,
                })
                .collect(),
            filters,
            list_only,
            order: (given, order),
        }
    }

    /// The checks of several suites of one topology, run in turn on one
    /// cluster: each keeps its own reset (run before each of its checks,
    /// as in its own suite) and logs its failures under its own suite's
    /// name. One boot instead of one per suite; filters and
    /// `DEVLEND_CHECK_ORDER` apply to the whole list.
    pub fn merged(name: &'static str, parts: Vec<Suite>) -> Suite {
        let mut suite = Suite::new(name, Vec::new());
        for part in parts {
            suite.entries.extend(part.entries);
        }
        suite
    }

    /// Runs `reset` before every check, so that each starts from the same
    /// state of the shared cluster whatever ran before it (or was
    /// filtered out): the checks do not depend on their order. A reset
    /// that fails fails the check it was for.
    pub fn reset(mut self, reset: Reset) -> Suite {
        for e in &mut self.entries {
            e.reset = Some(reset);
        }
        self
    }

    fn selected(&self) -> Vec<&Entry> {
        let selected = self
            .entries
            .iter()
            .filter(|e| {
                self.filters.is_empty() || self.filters.iter().any(|f| e.check.name.contains(f))
            })
            .collect();
        self.order.1.apply(selected)
    }

    /// Boots the cluster with `boot` (only if a check is selected), runs the
    /// selected checks, tears down, prints the summary and exits.
    pub fn run(self, boot: impl FnOnce() -> anyhow::Result<Cluster>) -> ! {
        let _ = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
            .is_test(false)
            .try_init();
        let selected = self.selected();
        if self.list_only {
            for e in &selected {
                println!("{}: test", e.check.name);
            }
            std::process::exit(0);
        }
        println!("running {} checks of {}", selected.len(), self.name);
        if self.order.1 != CheckOrder::Listed {
            let names: Vec<&str> = selected.iter().map(|e| e.check.name).collect();
            println!("in the order {}: {}", self.order.0, names.join(", "));
        }
        if selected.is_empty() {
            println!("0 passed, 0 failed");
            std::process::exit(0);
        }
        let t0 = Instant::now();
        let mut cluster = match boot() {
            Ok(c) => c,
            Err(e) => {
                println!("cluster boot FAILED: {e:#}");
                println!("0 passed, {} failed", selected.len());
                std::process::exit(1);
            }
        };
        println!("cluster up in {:.1} s", t0.elapsed().as_secs_f64());
        let (mut passed, mut failed) = (0, Vec::new());
        let mut times = Vec::new();
        let mut part_secs: Vec<(&str, f64)> = Vec::new();
        for entry in selected {
            let (c, reset) = (&entry.check, entry.reset);
            println!("test {} ...", c.name);
            let t = Instant::now();
            let run = |cluster: &mut Cluster| -> anyhow::Result<()> {
                if let Some(reset) = reset {
                    let t = Instant::now();
                    reset(cluster).map_err(|e| e.context("resetting the cluster"))?;
                    println!("  (reset in {:.1} s)", t.elapsed().as_secs_f64());
                }
                (c.run)(cluster)
            };
            let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&mut cluster)))
                .unwrap_or_else(|p| {
                    let msg = p
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    Err(anyhow::anyhow!("panicked: {msg}"))
                });
            let secs = t.elapsed().as_secs_f64();
            times.push((secs, c.name));
            match part_secs.iter_mut().find(|(p, _)| *p == entry.part) {
                Some((_, s)) => *s += secs,
                None => part_secs.push((entry.part, secs)),
            }
            match res {
                Ok(()) => {
                    println!("test {} ... ok ({secs:.1} s)", c.name);
                    passed += 1;
                }
                Err(e) => {
                    println!("test {} ... FAILED ({secs:.1} s): {e:#}", c.name);
                    collect_failure(&cluster, entry.part, c.name);
                    failed.push(c.name);
                }
            }
        }
        // Where the suite's time went, slowest first.
        times.sort_by(|a, b| b.0.total_cmp(&a.0));
        println!("time per check, slowest first:");
        for (secs, name) in &times {
            println!("  {secs:7.1} s  {name}");
        }
        if part_secs.len() > 1 {
            println!("time per suite:");
            for (part, secs) in &part_secs {
                println!("  {secs:7.1} s  {part}");
            }
        }
        println!(
            "{}: {:.1} s in all (boot included)",
            self.name,
            t0.elapsed().as_secs_f64()
        );
        cluster.keep_logs(!failed.is_empty());
        drop(cluster);
        if !failed.is_empty() {
            println!("failed: {}", failed.join(", "));
        }
        println!("{passed} passed, {} failed", failed.len());
        std::process::exit(i32::from(!failed.is_empty()));
    }
}

/// Copies logs and every reachable host's dmesg to the artifacts directory
/// and prints the tail of each.
pub fn collect_failure(cluster: &Cluster, suite: &str, check: &str) {
    let dir = artifacts_dir().join(suite).join(check);
    let _ = std::fs::create_dir_all(&dir);
    for log in cluster.log_files() {
        if let Some(name) = log.file_name() {
            let _ = std::fs::copy(&log, dir.join(name));
        }
        println!("---- tail of {} ----\n{}", log.display(), tail(&log, 30));
    }
    for h in &cluster.topology().hosts {
        if let Ok(agent) = cluster.agent(&h.name) {
            if let Ok(out) = agent.sh("dmesg", std::time::Duration::from_secs(20)) {
                let path = dir.join(format!("{}.dmesg", h.name));
                let _ = std::fs::write(&path, &out.stdout);
                println!("---- tail of {} dmesg ----\n{}", h.name, tail(&path, 30));
            }
        }
    }
    println!("logs kept in {}", dir.display());
}

#[cfg(test)]
mod tests {
    use super::CheckOrder;

    #[test]
    fn orders_are_permutations() {
        let listed: Vec<u32> = (0..9).collect();
        assert_eq!(CheckOrder::parse("").unwrap().apply(listed.clone()), listed);
        let rev = CheckOrder::parse("reverse").unwrap().apply(listed.clone());
        assert_eq!(rev, (0..9).rev().collect::<Vec<_>>());
        let a = CheckOrder::parse("shuffle:7")
            .unwrap()
            .apply(listed.clone());
        assert_eq!(
            a,
            CheckOrder::Shuffle(7).apply(listed.clone()),
            "a seed gives one order"
        );
        assert_ne!(a, listed, "seed 7 moves something");
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, listed);
        assert!(CheckOrder::parse("sideways").is_err());
        assert!(CheckOrder::parse("shuffle:x").is_err());
    }
}
