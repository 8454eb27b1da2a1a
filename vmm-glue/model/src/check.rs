//! Running the checker and reporting what it found.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::time::Instant;

use stateright::{Checker, HasDiscoveries, Model};

use crate::{Action, Holder, Ownership, Params, State, INV_HOLDER, INV_PAGES};

/// When a run may stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Until {
    /// Every reachable state is visited (unless every property, invariants
    /// included, has a discovery first).
    Exhaustive,
    /// As soon as this property has a discovery.
    Found(&'static str),
    /// As soon as any invariant is violated.
    AnyViolation,
}

/// One step of a discovery: the action and what the system looks like
/// after it.
#[derive(Clone, Debug)]
pub struct Step {
    /// The transition.
    pub action: Action,
    /// A one-line summary of the state it leads to.
    pub after: String,
}

/// What a run found.
#[derive(Debug)]
pub struct Outcome {
    /// The parameters checked.
    pub params: Params,
    /// Distinct states visited.
    pub unique_states: usize,
    /// States generated, repeats included.
    pub states: usize,
    /// The deepest state's distance from the initial state.
    pub max_depth: usize,
    /// Seconds taken.
    pub secs: f64,
    /// Every reachable state was visited.
    pub exhaustive: bool,
    /// Each property with a discovery: for an `always` property the path
    /// to a state violating it, for a `sometimes` one to a state showing
    /// it.
    pub discoveries: BTreeMap<&'static str, Vec<Step>>,
    /// The `sometimes` properties without an example.
    pub never: Vec<&'static str>,
}

impl Outcome {
    /// The invariants violated.
    pub fn violations(&self) -> Vec<&'static str> {
        [INV_PAGES, INV_HOLDER]
            .into_iter()
            .filter(|p| self.discoveries.contains_key(p))
            .collect()
    }

    /// A counterexample as numbered lines.
    pub fn trace(&self, property: &str) -> String {
        let mut out = String::new();
        if let Some(steps) = self.discoveries.get(property) {
            for (i, s) in steps.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "  {:2}. {:<44} {}",
                    i + 1,
                    s.action.to_string(),
                    s.after
                );
            }
        }
        out
    }

    /// The counterexample's action names, in order.
    pub fn actions(&self, property: &str) -> Vec<String> {
        self.discoveries
            .get(property)
            .map(|s| s.iter().map(|s| s.action.to_string()).collect())
            .unwrap_or_default()
    }

    /// A summary for the test log.
    pub fn summary(&self) -> String {
        let mut out = format!(
            "devlend-model {:?}\n  {} distinct states ({} generated), depth {}, {:.1} s, {}\n",
            self.params,
            self.unique_states,
            self.states,
            self.max_depth,
            self.secs,
            if self.exhaustive {
                "exhaustive"
            } else {
                "stopped at a discovery"
            }
        );
        for v in self.violations() {
            let _ = writeln!(out, "  VIOLATED {v}:\n{}", self.trace(v));
        }
        for n in &self.never {
            let _ = writeln!(out, "  never reached: {n}");
        }
        out
    }
}

/// A compact picture of a state, for traces.
pub fn describe(s: &State) -> String {
    let l = &s.lender;
    let dev = match l.dev {
        None => "removed".to_string(),
        Some(d) => format!(
            "{}{}{} holder={} maps={:#b}{}",
            if d.in_table { "" } else { "erased " },
            if d.slow_holds { "busy " } else { "" },
            if d.dead { "dead " } else { "" },
            match d.holder {
                Holder::Nobody => "-",
                Holder::Us => "us",
                Holder::Other => "other",
            },
            d.maps,
            if d.slow.is_some() {
                " release-queued"
            } else {
                ""
            },
        ),
    };
    let m = &s.bor.mdev;
    let leases: Vec<String> = s
        .bor
        .leases
        .iter()
        .flatten()
        .map(|l| {
            format!(
                "inc{}{}{} q={:#b}",
                l.inc,
                if l.settled { " settled" } else { "" },
                if l.unreturned { " unreturned" } else { "" },
                l.quarantine
            )
        })
        .collect();
    format!(
        "| lender inc{}{} dev[{}] | ring {} | borrower {:?} entry={} mdev {:?} pinned={:#b} leases=[{}]",
        l.inc,
        if l.sees_borrower { "" } else { " (sees borrower down)" },
        dev,
        s.reqs.len(),
        s.bor.view,
        match s.bor.entry {
            None => "-".to_string(),
            Some(e) => format!("inc{}{}", e.inc, if e.gone { " gone" } else { "" }),
        },
        m.state,
        m.pinned,
        leases.join(", ")
    )
}

/// One breadth-first run of stateright's checker on every core.
fn bfs(
    model: &Ownership,
    until: Until,
) -> (impl Checker<Ownership>, BTreeMap<&'static str, Vec<Step>>) {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut builder = model.clone().checker().threads(threads);
    builder = match until {
        Until::Exhaustive => builder,
        Until::Found(name) => builder.finish_when(HasDiscoveries::AnyOf(BTreeSet::from([name]))),
        Until::AnyViolation => builder.finish_when(HasDiscoveries::AnyFailures),
    };
    let checker = builder.spawn_bfs().join();
    let mut discoveries = BTreeMap::new();
    for (name, path) in checker.discoveries() {
        // Each pair is (state before, action): replay to get the after.
        let steps = path
            .into_vec()
            .into_iter()
            .filter_map(|(before, action)| {
                action.map(|action| Step {
                    action,
                    after: describe(
                        &model
                            .next_state(&before, action)
                            .expect("a discovery's step leads somewhere"),
                    ),
                })
            })
            .collect();
        discoveries.insert(name, steps);
    }
    (checker, discoveries)
}

/// The shortest paths to states violating the invariants in `want`,
/// each at most `longest` steps. Only for the report: stateright's
/// threads race to record a discovery, so the path a run keeps is a
/// counterexample but not always the shortest, nor the same from run to
/// run. A plain single-threaded breadth-first search with parent links,
/// stopped at the depth of the longest discovery, gives the shortest.
fn shortest(
    model: &Ownership,
    want: &[&'static str],
    longest: usize,
) -> BTreeMap<&'static str, Vec<Step>> {
    let props: Vec<_> = model
        .properties()
        .into_iter()
        .filter(|p| want.contains(&p.name))
        .collect();
    let mut found = BTreeMap::new();
    // Each visited state: its parent's index and the action from it.
    let mut states: Vec<(State, Option<(usize, Action)>)> = Vec::new();
    let mut index: HashMap<State, usize> = HashMap::new();
    for s in model.init_states() {
        index.insert(s.clone(), states.len());
        states.push((s, None));
    }
    let mut level = 0..states.len();
    let mut actions = Vec::new();
    for _depth in 0..=longest {
        for i in level.clone() {
            for p in &props {
                if !found.contains_key(p.name) && !(p.condition)(model, &states[i].0) {
                    found.insert(p.name, path_to(model, &states, i));
                }
            }
        }
        if found.len() == props.len() {
            break;
        }
        let next_start = states.len();
        for i in level {
            actions.clear();
            model.actions(&states[i].0, &mut actions);
            for &a in &actions {
                if let Some(n) = model.next_state(&states[i].0, a) {
                    if !index.contains_key(&n) {
                        index.insert(n.clone(), states.len());
                        states.push((n, Some((i, a))));
                    }
                }
            }
        }
        level = next_start..states.len();
    }
    found
}

/// The steps from the initial state to state `i`.
fn path_to(model: &Ownership, states: &[(State, Option<(usize, Action)>)], i: usize) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut at = i;
    while let Some((parent, action)) = states[at].1 {
        steps.push(Step {
            action,
            after: describe(&states[at].0),
        });
        at = parent;
    }
    let _ = model;
    steps.reverse();
    steps
}

/// Checks the model with these parameters, breadth first, on every core.
/// A violated invariant is reported with a shortest counterexample.
pub fn run(params: Params, until: Until) -> Outcome {
    let model = Ownership::new(params.clone());
    let names: Vec<&'static str> = model.properties().iter().map(|p| p.name).collect();
    let start = Instant::now();
    let (checker, mut discoveries) = bfs(&model, until);
    let violated: Vec<&'static str> = [INV_PAGES, INV_HOLDER]
        .into_iter()
        .filter(|inv| discoveries.contains_key(inv))
        .collect();
    if let Some(longest) = violated.iter().map(|inv| discoveries[inv].len()).max() {
        discoveries.extend(shortest(&model, &violated, longest));
    }
    let secs = start.elapsed().as_secs_f64();
    let violated = discoveries.contains_key(INV_PAGES) || discoveries.contains_key(INV_HOLDER);
    let never = names
        .iter()
        .copied()
        .filter(|n| *n != INV_PAGES && *n != INV_HOLDER && !discoveries.contains_key(n))
        .collect();
    Outcome {
        params,
        unique_states: checker.unique_state_count(),
        states: checker.state_count(),
        max_depth: checker.max_depth(),
        secs,
        // Unless what it waited for was found, only an empty queue ended
        // the run (with an invariant holding, "every property discovered"
        // cannot come).
        exhaustive: match until {
            Until::Exhaustive | Until::AnyViolation => !violated,
            Until::Found(name) => !discoveries.contains_key(name),
        },
        discoveries,
        never,
    }
}
