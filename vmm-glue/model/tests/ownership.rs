//! The device-ownership model, checked: (a) with every fix it holds, (b)
//! without item 1's fix invariant 1 fails, (c) without item 5's an
//! invariant fails, (d) the variant the C implements holds.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use devlend_model::check::{run, Outcome, Until};
use devlend_model::csource;
use devlend_model::{Params, INV_PAGES};

fn report(o: &Outcome) {
    println!("{}", o.summary());
}

/// An exhaustive run, done once for all the tests that ask for the same
/// parameters ((a), and (d) when the C has every fix).
fn exhaustive(p: Params) -> Arc<Outcome> {
    static RUNS: Mutex<Option<HashMap<Params, Arc<Outcome>>>> = Mutex::new(None);
    let mut runs = RUNS.lock().unwrap_or_else(|e| e.into_inner());
    runs.get_or_insert_with(HashMap::new)
        .entry(p.clone())
        .or_insert_with(|| Arc::new(run(p, Until::AnyViolation)))
        .clone()
}

#[test]
fn a_every_fix_holds_exhaustively() {
    let o = exhaustive(Params::fixed().from_env());
    report(&o);
    assert!(o.violations().is_empty(), "{}", o.summary());
    assert!(
        o.exhaustive,
        "the run stopped before every state was visited"
    );
    assert!(o.never.is_empty(), "paths never taken: {:?}", o.never);
    println!(
        "(a) no violation in {} distinct states, depth {}",
        o.unique_states, o.max_depth
    );
}

#[test]
fn b_item1_remove_order_breaks_invariant_1() {
    let p = Params {
        fix_remove_order: false,
        ..Params::fixed()
    };
    let o = run(p, Until::Found(INV_PAGES));
    report(&o);
    assert!(
        o.discoveries.contains_key(INV_PAGES),
        "no counterexample to invariant 1 without item 1's fix"
    );
    println!(
        "(b) item 1 counterexample, actions: {:?}",
        o.actions(INV_PAGES)
    );
}

#[test]
fn c_item5_stale_lease_incarnation_breaks_an_invariant() {
    let p = Params {
        fix_lease_inc: false,
        ..Params::fixed()
    };
    // Until the pages go: the device held for good (invariant 2) is
    // found on the way.
    let o = run(p, Until::Found(INV_PAGES));
    report(&o);
    let v = o.violations();
    assert!(!v.is_empty(), "no counterexample without item 5's fix");
    for inv in &v {
        println!(
            "(c) item 5 counterexample to {inv}, actions: {:?}",
            o.actions(inv)
        );
    }
    assert!(
        v.contains(&INV_PAGES),
        "no counterexample to invariant 1 without item 5's fix"
    );
}

#[test]
fn d_the_c_implements_a_variant_that_holds() {
    // DEVLEND_KMOD_DIR: another copy of mdev-kmod/ (e.g. one with a fix
    // reverted, to see this test fail).
    let kmod = std::env::var_os("DEVLEND_KMOD_DIR").map_or_else(
        || csource::kmod_dir(Path::new(env!("CARGO_MANIFEST_DIR"))),
        Into::into,
    );
    let v = csource::variant(&kmod).unwrap_or_else(|e| panic!("reading the C: {e}"));
    for e in &v.evidence {
        println!("(d) {e}");
    }
    let p = Params {
        fix_remove_order: v.fix_remove_order,
        fix_lease_inc: v.fix_lease_inc,
        acquire_race: v.acquire_recheck,
        fix_acquire_silent: v.fix_acquire_silent,
        ..Params::fixed().from_env()
    };
    let o = exhaustive(p);
    report(&o);
    assert!(
        o.violations().is_empty(),
        "the C as it is violates the ownership protocol:\n{}",
        o.summary()
    );
    assert!(o.exhaustive);
}

/// The race the model found in `dl_serve_acquire()`'s re-read of the
/// link (docs/model.md, "A race the model found"): answering -EINVAL
/// there lets the borrower settle a lease the lender holds the device for.
#[test]
fn e_acquire_refused_after_recheck_breaks_invariant_2() {
    let p = Params {
        fix_acquire_silent: false,
        ..Params::fixed()
    };
    let o = run(p, Until::AnyViolation);
    report(&o);
    let v = o.violations();
    assert!(
        !v.is_empty(),
        "no counterexample with the ACQUIRE refused after the re-read"
    );
    for inv in &v {
        println!(
            "(e) acquire race counterexample to {inv}, actions: {:?}",
            o.actions(inv)
        );
    }
}
