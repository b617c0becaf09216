//! Masks: a relation with holes (a filter's result) joined with a complete
//! one is an inner join on keys — a missing key matches nothing — and the
//! result's type lists exactly the keys it has (its frontier is theirs: the
//! largest key plus one). Triangular and banded masks on either side of elementwise joins and
//! products, for random key bounds: the inferred keys against the reference
//! interpreter's, every plan the optimizer offers against the interpreter on
//! 1-7 sites. numpy checks of the same programs are in
//! `scripts/programs-numpy-test.py`.

use tra_executor::reference::{compare, eval_ia, eval_tra_all, AnyLayout};
use tra_optimizer::check::check_program;
use tra_optimizer::optimize::{optimize, Limits};
use tra_optimizer::ErrorCode;
use tra_tests::program;

/// `mask` is a predicate over block keys; `side` puts the masked relation
/// left or right of an elementwise join; `product` multiplies the masked
/// relation by a complete one instead.
fn masked(i: u32, j: u32, mask: &str, masked_left: bool, product: bool) -> String {
    let (l, r) = if masked_left { ("F", "Y") } else { ("Y", "F") };
    let tail = if product {
        r#""J": {"op": "join", "left": "F", "right": "Z", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
               "O": {"op": "aggregate", "input": "J", "group_by": [0, 2], "kernel": "matAdd"}"#
            .to_string()
    } else {
        format!(
            r#""O": {{"op": "join", "left": "{l}", "right": "{r}", "left_keys": [0, 1], "right_keys": [0, 1], "kernel": "matSub"}}"#
        )
    };
    format!(
        r#"{{"inputs": {{"X": {{"key_bounds": [{i}, {j}], "array_bounds": [2, 3]}},
                       "Y": {{"key_bounds": [{i}, {j}], "array_bounds": [2, 3]}},
                       "Z": {{"key_bounds": [{j}, 2], "array_bounds": [3, 2]}}}},
            "nodes": {{"F": {{"op": "filter", "input": "X", "predicate": "{mask}"}}, {tail}}},
            "outputs": ["O"], "cluster": {{"sites": 3}}}}"#
    )
}

const MASKS: &[&str] = &["k0 <= k1", "k0 >= k1", "k0 <= k1 + 1 && k1 <= k0 + 1", "k0 == k1", "k0 + k1 < 3"];

#[test]
fn masked_joins_are_inner_joins_with_exact_frontiers() {
    let (mut checked, mut refused) = (0, 0);
    for (seed, &mask) in MASKS.iter().enumerate() {
        for (i, j) in [(3, 2), (2, 4), (4, 4), (1, 3)] {
            for masked_left in [true, false] {
                for product in [false, true] {
                    let p = program(&masked(i, j, mask, masked_left, product));
                    let typed = match check_program(&p) {
                        Ok(t) => t,
                        // A mask that leaves a complete rectangle of other
                        // bounds is a complete relation: the bounds must agree.
                        Err(e) if e.code == ErrorCode::BoundsMismatch => {
                            assert!(e.to_string().contains("both relations are complete"), "{e}");
                            refused += 1;
                            continue;
                        }
                        Err(e) => panic!("{mask} [{i},{j}]: {e}"),
                    };
                    let inputs = tra_tests::random_inputs(&p, seed as u64);
                    let values = eval_tra_all(&p, &inputs).unwrap();
                    let (f, o) = (&values["F"], &values["O"]);
                    // The inferred keys are the interpreter's.
                    let want: Vec<_> = typed.types["O"].key_list().unwrap().to_vec();
                    let got: Vec<_> = o.tuples.keys().cloned().collect();
                    assert_eq!(want, got, "{mask} [{i},{j}]: inferred keys");
                    if !product {
                        // Inner join with a complete relation: exactly the mask's keys.
                        let fk: Vec<_> = f.tuples.keys().cloned().collect();
                        assert_eq!(fk, got, "{mask} [{i},{j}]: the join keeps the mask's keys");
                        let max = |d: usize| fk.iter().map(|k| k[d] + 1).max().unwrap_or(0);
                        assert_eq!(typed.types["O"].frontier, vec![max(0), max(1)], "{mask}: exact frontier");
                    }
                    let answer = optimize(&p, &tra_rules::all(), &Limits::default()).unwrap();
                    for alt in &answer.alternatives {
                        for sites in 1..=7 {
                            let run = eval_ia(&alt.plan, sites, &inputs, AnyLayout::Seeded(seed as u64 ^ sites as u64))
                                .unwrap_or_else(|e| panic!("{mask} [{i},{j}] {}: {e}", alt.label));
                            let erased = run.erased_outputs().unwrap();
                            compare(o, &erased["O"], 1e-9)
                                .unwrap_or_else(|e| panic!("{mask} [{i},{j}], {sites} sites, {}: {e}", alt.label));
                            checked += 1;
                        }
                    }
                }
            }
        }
    }
    assert!(checked > 500 && refused <= 16, "{checked} plan runs, {refused} refused");
}

#[test]
fn complete_relations_must_still_agree_on_joined_bounds() {
    let json = r#"{"inputs": {"X": {"key_bounds": [3, 2], "array_bounds": [2, 2]},
                              "Y": {"key_bounds": [2, 2], "array_bounds": [2, 2]}},
                   "nodes": {"J": {"op": "join", "left": "X", "right": "Y", "left_keys": [0, 1], "right_keys": [0, 1], "kernel": "matAdd"}},
                   "outputs": ["J"]}"#;
    let e = check_program(&program(json)).unwrap_err();
    assert_eq!(e.code, ErrorCode::BoundsMismatch, "{e}");
}
