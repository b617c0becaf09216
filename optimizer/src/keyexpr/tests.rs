//! Tests of parsing, display round trips, evaluation and composition.

use super::ast::{mk_or, AddOp, CmpOp, MulOp};
use super::parser::{CMP_OPS, INT_START, NEED_BOOL, NEED_INT, PRED_START};
use super::*;
use proptest::prelude::*;

fn k(s: &str) -> KeyFn {
    KeyFn::parse(s).unwrap_or_else(|e| panic!("`{s}`: {e}"))
}
fn p(s: &str) -> Predicate {
    Predicate::parse(s).unwrap_or_else(|e| panic!("`{s}`: {e}"))
}
fn kerr(s: &str) -> ParseError {
    KeyFn::parse(s).expect_err(s)
}
fn perr(s: &str) -> ParseError {
    Predicate::parse(s).expect_err(s)
}
fn pe(column: usize, expected: &str, found: &str) -> ParseError {
    ParseError { column, expected: expected.into(), found: found.into() }
}

#[test]
fn parse_and_eval_key_expressions() {
    let f = k("[k0]");
    assert_eq!(f.eval(&[3, 4]).unwrap(), vec![vec![3]]);
    assert_eq!(f.to_string(), "[k0]");
    assert!(f.is_identity(1));
    assert!(!f.is_identity(2));
    assert_eq!(f.passthrough(), vec![Some(0)]);
    assert_eq!(f.fanout(), 1);

    let f = k("[2*k0 + k1]");
    assert_eq!(f.eval(&[3, 4]).unwrap(), vec![vec![10]]);
    assert_eq!(f.to_string(), "[2*k0 + k1]");
    assert_eq!(f.dims_read(), BTreeSet::from([0, 1]));
    assert_eq!(f.passthrough(), vec![None]);
    assert_eq!(f.output_arity(), 1);
    // A bare expression is a 1-tuple; whitespace and parentheses are not kept.
    assert_eq!(k(" 2 * k0+k1 "), f);
    assert_eq!(k("[((2)*(k0)) + k1]"), f);

    let f = k("[k0, k1, 0..4]");
    assert_eq!(f.eval(&[1, 2]).unwrap(), vec![vec![1, 2, 0], vec![1, 2, 1], vec![1, 2, 2], vec![1, 2, 3]]);
    assert_eq!(f.fanout(), 4);
    assert_eq!(f.output_arity(), 3);
    assert_eq!(f.passthrough(), vec![Some(0), Some(1), None]);
    assert!(f.has_ranges());
    assert_eq!(f.to_string(), "[k0, k1, 0..4]");

    assert_eq!(k("[k0, 0..2, k1]").eval(&[5, 7]).unwrap(), vec![vec![5, 0, 7], vec![5, 1, 7]]);
    assert_eq!(k("[0..2, 3..5]").eval(&[]).unwrap(), vec![vec![0, 3], vec![0, 4], vec![1, 3], vec![1, 4]]);
    assert_eq!(k("[1..3, k0, 0..3]").fanout(), 6);

    let empty = k("[]");
    assert_eq!(empty.output_arity(), 0);
    assert_eq!(empty.eval(&[9]).unwrap(), vec![Vec::<u32>::new()]);
    assert!(empty.is_identity(0));
    assert_eq!(empty.to_string(), "[]");
    assert_eq!(k("[ k0 , k1 , ]"), k("[k0, k1]"));
    assert_eq!(k("[k12]").dims_read(), BTreeSet::from([12]));

    assert_eq!(k("[k0 % 3, k0 / 3, k1 - k0 + 1, --k0]").eval(&[7, 9]).unwrap(), vec![vec![1, 2, 3, 7]]);
}

#[test]
fn parse_and_eval_predicates() {
    let q = p("k0 == k1");
    assert!(q.eval(&[1, 1]).unwrap());
    assert!(!q.eval(&[1, 2]).unwrap());
    assert_eq!(q.dims_read(), BTreeSet::from([0, 1]));

    let src = "k0 == k1 && !(k2 < 3) || false";
    let q = p(src);
    assert_eq!(q.to_string(), src);
    assert!(q.eval(&[1, 1, 5]).unwrap());
    assert!(!q.eval(&[1, 1, 2]).unwrap());
    assert!(!q.eval(&[1, 2, 5]).unwrap());

    // Parentheses around integers and around conditions.
    assert!(p("(k0 + 1) == k1").eval(&[1, 2]).unwrap());
    assert!(p("(k0 == k1)").eval(&[2, 2]).unwrap());
    assert!(p("((k0 + 1) * 2 == k1) && (k1 > (k0))").eval(&[1, 4]).unwrap());
    assert_eq!(p("((k0 == 1))"), p("k0 == 1"));
    assert_eq!(p("(k0 < 1 && k1 < 2) && k2 < 3"), p("k0 < 1 && (k1 < 2 && k2 < 3)"));
    assert_eq!(p("(k0 < 1 && k1 < 2) && k2 < 3").to_string(), "k0 < 1 && k1 < 2 && k2 < 3");
    assert_eq!(p("(k0 < 1 || k1 < 2) && k2 < 3").to_string(), "(k0 < 1 || k1 < 2) && k2 < 3");
    assert_eq!(p("!k0 == 1"), p("!(k0 == 1)"));
    assert_eq!(p("!!true").to_string(), "!!true");
    assert!(p("true").is_always());
    assert!(p("-k0 < 0 && k0 - k1 != 0").eval(&[2, 1]).unwrap());

    // Every operator.
    for (src, want) in [
        ("3 == 3", true),
        ("3 != 3", false),
        ("2 < 3", true),
        ("3 <= 3", true),
        ("3 > 3", false),
        ("3 >= 3", true),
        ("true || false", true),
        ("true && false", false),
        ("!false", true),
    ] {
        assert_eq!(p(src).eval(&[]).unwrap(), want, "{src}");
    }

    // Euclidean division and remainder.
    for src in ["-7 / 2 == -4", "-7 % 2 == 1", "7 / -2 == -3", "7 % -2 == 1", "-7 / -2 == 4", "-7 % -2 == 1"] {
        assert!(p(src).eval(&[]).unwrap(), "{src}");
    }
    // Short-circuit: no division by zero.
    assert!(!p("k1 != 0 && k0 / k1 == 2").eval(&[4, 0]).unwrap());
    assert!(p("k1 == 0 || k0 / k1 == 2").eval(&[4, 0]).unwrap());
}

#[test]
fn key_expression_parse_errors() {
    assert_eq!(kerr("[k0, 2*]"), pe(8, "a number, a key component like k0, or (", "]"));
    assert_eq!(kerr("[k0 k1]"), pe(5, "`,` or `]`", "k1"));
    assert_eq!(kerr(""), pe(1, "a key expression like [k0, k1]", "end of input"));
    assert_eq!(kerr("   "), pe(4, "a key expression like [k0, k1]", "end of input"));
    assert_eq!(kerr("[k0"), pe(4, "`,` or `]`", "end of input"));
    assert_eq!(kerr("[,]"), pe(2, INT_START, ","));
    assert_eq!(kerr("[k0,,]"), pe(5, INT_START, ","));
    assert_eq!(kerr("[x]"), pe(2, INT_START, "x"));
    assert_eq!(kerr("[K0]"), pe(2, INT_START, "K0"));
    assert_eq!(kerr("[true]"), pe(2, INT_START, "true"));
    assert_eq!(kerr("[k0] k1"), pe(6, "end of input", "k1"));
    assert_eq!(kerr("[(k0 + 1]"), pe(9, "`)`", "]"));
    assert_eq!(kerr("[3..3]"), pe(2, "a non-empty range (its start must be smaller than its end)", "3..3"));
    assert_eq!(kerr("[k0, 4 .. 2]"), pe(6, "a non-empty range (its start must be smaller than its end)", "4 .. 2"));
    assert_eq!(kerr("[0..x]"), pe(5, "a number (the end of the range)", "x"));
    assert_eq!(kerr("[0..4294967296]"), pe(5, "a range bound no larger than 4294967295", "4294967296"));
    assert_eq!(
        kerr("[k0 + 9223372036854775808]"),
        pe(7, "a number no larger than 9223372036854775807", "9223372036854775808")
    );
    assert_eq!(kerr("[k0, «]"), pe(6, INT_START, "«"), "columns count characters, not bytes");
    assert_eq!(kerr("[é k0]"), pe(2, INT_START, "é"));

    // Comparisons are not key components.
    let e = kerr("[k0 == 1]");
    assert_eq!((e.column, e.found.as_str()), (5, "=="));
    assert!(e.expected.starts_with("`,` or `]` (a key component is an integer expression"), "{e}");
    // Ranges must be plain and bracketed.
    let e = kerr("0..4");
    assert_eq!((e.column, e.found.as_str()), (2, ".."));
    assert!(e.expected.contains("range component"), "{e}");
    let e = kerr("[-1..3]");
    assert_eq!((e.column, e.found.as_str()), (4, ".."));
    let e = kerr("k0, k1");
    assert_eq!((e.column, e.found.as_str()), (3, ","));
    assert!(e.expected.contains("written in brackets"), "{e}");

    assert_eq!(kerr("[k0, 2*]").to_string(), "column 8: expected a number, a key component like k0, or (, found ]");
}

#[test]
fn predicate_parse_errors() {
    assert_eq!(perr(""), pe(1, PRED_START, "end of input"));
    assert_eq!(perr("k0 + 1"), pe(1, NEED_BOOL, "the integer expression `k0 + 1`"));
    assert!(perr("k0 + 1").to_string().contains("expected a comparison"));
    assert_eq!(perr("k0 == 1 && k1"), pe(12, NEED_BOOL, "the integer expression `k1`"));
    assert_eq!(perr("!(k0 + 1)"), pe(2, NEED_BOOL, "the integer expression `(k0 + 1)`"));
    assert_eq!(perr("true + 1"), pe(1, NEED_INT, "the condition `true`"));
    assert_eq!(perr("(k0 == 1) == 1"), pe(1, NEED_INT, "the condition `(k0 == 1)`"));
    assert_eq!(perr("k0 == (k1 < 2)"), pe(7, NEED_INT, "the condition `(k1 < 2)`"));
    assert_eq!(perr("-(k0 < 2) < 1"), pe(2, NEED_INT, "the condition `(k0 < 2)`"));
    assert_eq!(perr("k0 == "), pe(7, INT_START, "end of input"));
    assert_eq!(perr("k0 == 1 &&"), pe(11, PRED_START, "end of input"));
    assert_eq!(perr("k0 == 1 k2"), pe(9, "`&&`, `||` or end of input", "k2"));
    assert_eq!(perr("(k0 == 1"), pe(9, "`)`", "end of input"));
    assert_eq!(perr("k0 k1"), pe(4, CMP_OPS, "k1"));
    assert_eq!(perr("k0 == 1 & k1 == 2"), pe(9, "`&&`, `||` or end of input (write && for `and`)", "&"));

    let e = perr("k0 < k1 < k2");
    assert_eq!((e.column, e.found.as_str()), (9, "<"));
    assert!(e.expected.contains("comparisons do not chain"), "{e}");
    let e = perr("k0 = 1");
    assert_eq!((e.column, e.found.as_str()), (4, "="));
    assert!(e.expected.starts_with("a comparison operator") && e.expected.contains("write =="), "{e}");
    let e = perr("k0 == 1 && k1 = 2");
    assert_eq!((e.column, e.found.as_str()), (15, "="));
}

#[test]
fn deep_nesting_is_a_parse_error() {
    let too_deep = format!("at most {MAX_NESTING} levels of nesting");
    for (src, pred) in [
        ("(".repeat(10_000), false),
        ("(".repeat(10_000), true),
        (format!("[{}]", "(".repeat(10_000)), false),
        (format!("{}k0", "-".repeat(10_000)), false),
        (format!("{}k0", "-".repeat(10_000)), true),
        (format!("{}true", "!".repeat(10_000)), true),
        (format!("{}k0", "(-".repeat(10_000)), false),
        (format!("{}k0", "!(".repeat(10_000)), true),
    ] {
        let e = if pred { perr(&src) } else { kerr(&src) };
        assert_eq!(e.expected, too_deep, "{e}");
        assert!(e.found.contains("expression nested too deeply (more than 256 levels)"), "{e}");
    }
    assert_eq!(kerr(&"(".repeat(10_000)).column, MAX_NESTING + 1);

    // Exactly at the limit is fine.
    let ok = format!("{}k0{}", "(".repeat(MAX_NESTING), ")".repeat(MAX_NESTING));
    assert_eq!(k(&ok), k("k0"));
    assert_eq!(p(&format!("{ok} == 1")), p("k0 == 1"));
    let ok = format!("{}(k0 == 1){}", "(".repeat(MAX_NESTING - 1), ")".repeat(MAX_NESTING - 1));
    assert_eq!(p(&ok), p("k0 == 1"));
    assert_eq!(k(&format!("{}k0", "-".repeat(MAX_NESTING))).to_string().len(), MAX_NESTING + 4);

    // Parsing stays well within a small stack, even for the worst mix of
    // operators at every level.
    let worst = format!("{}k0", "true || true && k0 == k0 + k0*(".repeat(10_000));
    let at_limit = format!("{}k0 == 1{}", "(".repeat(MAX_NESTING), ")".repeat(MAX_NESTING));
    std::thread::Builder::new()
        .stack_size(1 << 20)
        .spawn(move || {
            assert!(Predicate::parse(&worst).unwrap_err().found.contains("nested too deeply"));
            assert!(Predicate::parse(&at_limit).is_ok());
        })
        .unwrap()
        .join()
        .unwrap();

    // Long flat chains are not nesting: one n-ary node each.
    let long = vec!["k0"; 20_000].join(" + ");
    let f = k(&long);
    assert_eq!(f.eval(&[2]).unwrap(), vec![vec![40_000]]);
    assert_eq!(k(&f.to_string()), f);
    let conj = vec!["k0 < 5"; 20_000].join(" && ");
    let q = p(&conj);
    assert!(q.eval(&[2]).unwrap());
    assert_eq!(p(&q.to_string()), q);
}

#[test]
fn eval_errors() {
    let err = |f: &str, key: &[u32]| k(f).eval(key).unwrap_err().to_string();
    assert_eq!(err("[k3]", &[1, 2]), "k3 is out of range for a key of arity 2");
    assert_eq!(
        err("[k0 - 1]", &[0]),
        "component 0 of `[k0 - 1]` is -1 for key [0]: key components must be natural numbers"
    );
    assert_eq!(
        err("[k0, k0 + 4294967295]", &[1]),
        "component 1 of `[k0, k0 + 4294967295]` is 4294967296 for key [1]: key components must be at most 4294967295"
    );
    assert_eq!(err("[k0 / k1]", &[1, 0]), "division by zero in `k0/k1` for key [1, 0]");
    assert_eq!(err("[k0 + 3 % (k1 - 1)]", &[1, 1]), "division by zero in `3%(k1 - 1)` for key [1, 1]");
    assert!(err("[k0*4294967295*4294967295*4294967295]", &[4294967295]).starts_with("arithmetic overflow in `"));
    assert!(err("[-(0 - 9223372036854775807 - 1), k0]", &[]).starts_with("arithmetic overflow in `-(0 - "));
    assert!(err("[(0 - 9223372036854775807 - 1) / -1]", &[]).starts_with("arithmetic overflow"));
    // Intermediate values may be negative.
    assert_eq!(k("[k0 - 5 + k1]").eval(&[1, 5]).unwrap(), vec![vec![1]]);

    assert_eq!(p("k5 == 1").eval(&[1]).unwrap_err().to_string(), "k5 is out of range for a key of arity 1");
    assert_eq!(p("k0 % k1 == 0").eval(&[1, 0]).unwrap_err().to_string(), "division by zero in `k0%k1` for key [1, 0]");
    // The error says what and where as data, too.
    assert_eq!(p("k5 == 1").eval(&[1]).unwrap_err(), EvalError::KeyOutOfRange { dim: 5, arity: 1 });
    assert_eq!(
        k("[k0 - 1]").eval(&[0]).unwrap_err(),
        EvalError::ComponentOutOfRange { position: 0, key_fn: "[k0 - 1]".into(), value: -1, key: vec![0] }
    );
    assert!(p("k0 - 9 < 0").eval(&[1]).unwrap());
}

#[test]
fn identity_and_replicate() {
    assert_eq!(KeyFn::identity(3), k("[k0, k1, k2]"));
    assert!(KeyFn::identity(3).is_identity(3));
    assert!(!k("[k1, k0]").is_identity(2));
    assert!(!k("[k0 + 0]").is_identity(1));
    assert_eq!(KeyFn::replicate(2, 1, 4), k("[k0, 0..4, k1]"));
    assert_eq!(KeyFn::replicate(2, 2, 3), k("[k0, k1, 0..3]"));
    assert_eq!(KeyFn::replicate(0, 0, 1), k("[0..1]"));
    assert_eq!(KeyFn::replicate(1, 0, 2).eval(&[9]).unwrap(), vec![vec![0, 9], vec![1, 9]]);
}

#[test]
fn compose() {
    let c = |a: &str, b: &str| k(a).compose(&k(b)).map(|f| f.to_string());
    assert_eq!(c("[k0]", "[k1, k0]").as_deref(), Some("[k1]"));
    assert_eq!(c("[2*k0 + k1]", "[k1, k0]").as_deref(), Some("[2*k1 + k0]"));
    assert_eq!(c("[k0 + 1]", "[k0 + k1]").as_deref(), Some("[(k0 + k1) + 1]"));
    assert_eq!(c("[k0*2]", "[k0 + k1]").as_deref(), Some("[(k0 + k1)*2]"));
    assert_eq!(c("[-k0]", "[k0 - 1]").as_deref(), Some("[-(k0 - 1)]"));
    assert_eq!(c("[k0, k0]", "[k1*3]").as_deref(), Some("[k1*3, k1*3]"));
    assert_eq!(c("[]", "[k0]").as_deref(), Some("[]"));
    assert_eq!(c("[k2]", "[k0, k1]"), None, "reads beyond the inner arity");
    // Ranges of the outer expression stay.
    assert_eq!(c("[k0, 0..2]", "[k1]").as_deref(), Some("[k1, 0..2]"));
    // Ranges of the inner expression: passed through exactly once.
    assert_eq!(c("[k1, k0]", "[k0, 0..3]").as_deref(), Some("[0..3, k0]"));
    assert_eq!(c("[k0, k1 + 1, k2]", "[k0, 5..7, k1]"), None, "a range in arithmetic");
    assert_eq!(c("[k0, k2, k1]", "[k0, 5..7, k1]").as_deref(), Some("[k0, k1, 5..7]"));
    assert_eq!(c("[k0]", "[k0, 0..3]"), None, "dropping a range duplicates keys");
    assert_eq!(c("[k1, k1]", "[k0, 0..3]"), None, "a range used twice");
    assert_eq!(c("[k1 + 1]", "[k0, 0..3]"), None, "a range in arithmetic");
    assert_eq!(c("[k1, k1 + 1]", "[k0, 0..3]"), None, "a range in arithmetic");

    // Identity is neutral.
    let f = k("[k1 % 4, 0..2, 3*k0]");
    assert_eq!(f.compose(&KeyFn::identity(2)), Some(f.clone()));
    assert_eq!(KeyFn::identity(3).compose(&f), Some(f.clone()));

    // Semantics on an example.
    let outer = k("[k0 + 1, k1, k0 / 2, 0..2]");
    let inner = k("[k0, 0..3]");
    let composed = outer.compose(&inner).expect("composable");
    let mut two_step: Vec<Key> = inner.eval(&[8]).unwrap().iter().flat_map(|x| outer.eval(x).unwrap()).collect();
    two_step.sort();
    assert_eq!(composed.eval(&[8]).unwrap(), two_step);

    // Composition never builds something too deep to re-parse.
    let neg = k("[-k0]");
    let mut g = KeyFn::identity(1);
    let mut steps = 0;
    while let Some(next) = neg.compose(&g) {
        g = next;
        steps += 1;
        assert!(steps <= MAX_NESTING);
    }
    assert_eq!(steps, MAX_NESTING);
    assert_eq!(k(&g.to_string()), g);
    assert_eq!(g.eval(&[3]).unwrap(), vec![vec![3]]);
}

#[test]
fn substitute_remap_and() {
    let q = p("k0 == k1");
    assert_eq!(q.substitute(&k("[k1, k0 + 1]")), Some(p("k1 == k0 + 1")));
    assert_eq!(p("k0*2 == 1").substitute(&k("[k1 + k2]")).unwrap().to_string(), "(k1 + k2)*2 == 1");
    assert_eq!(q.substitute(&k("[k0, 0..2]")), None, "ranges");
    assert_eq!(q.substitute(&k("[k0]")), None, "k1 is beyond the arity");
    assert_eq!(Predicate::always().substitute(&k("[]")), Some(Predicate::always()));
    let f = k("[k2, k0 % 3]");
    let q = p("k0 < 4 && k1 != 0 || !(k0 == k1)");
    let s = q.substitute(&f).unwrap();
    for key in [[0u32, 1, 2], [5, 4, 3], [3, 3, 3]] {
        assert_eq!(s.eval(&key).unwrap(), q.eval(&f.eval(&key).unwrap()[0]).unwrap());
    }

    assert_eq!(k("[2*k0 + k1, 0..2]").remap(&|i| i + 1), k("[2*k1 + k2, 0..2]"));
    assert_eq!(p("k0 == k1 && !(k2 < 3)").remap(&|i| 2 - i), p("k2 == k1 && !(k0 < 3)"));

    let a = p("k0 == 1");
    assert_eq!(Predicate::always().and(&a), a);
    assert_eq!(a.and(&Predicate::always()), a);
    assert_eq!(Predicate::always().and(&Predicate::always()), Predicate::always());
    assert_eq!(p("k0 < 1 && k1 < 2").and(&p("k2 < 3 && k3 < 4")), p("k0 < 1 && k1 < 2 && k2 < 3 && k3 < 4"));
    assert_eq!(p("k0 < 1 || k1 < 2").and(&a).to_string(), "(k0 < 1 || k1 < 2) && k0 == 1");
    assert_eq!(a.and(&p("false")).to_string(), "k0 == 1 && false");
}

#[test]
fn serde_uses_the_text_form() {
    let f = k("[k0, 2*k1 + k2, 0..4]");
    let json = serde_json::to_string(&f).unwrap();
    assert_eq!(json, "\"[k0, 2*k1 + k2, 0..4]\"");
    assert_eq!(serde_json::from_str::<KeyFn>(&json).unwrap(), f);
    let q = p("k0 == k1 && !(k2 < 3)");
    let json = serde_json::to_string(&q).unwrap();
    assert_eq!(json, "\"k0 == k1 && !(k2 < 3)\"");
    assert_eq!(serde_json::from_str::<Predicate>(&json).unwrap(), q);
    let e = serde_json::from_str::<KeyFn>("\"[k0 k1]\"").unwrap_err().to_string();
    assert!(e.contains("bad key expression `[k0 k1]`: column 5: expected `,` or `]`, found k1"), "{e}");
}

// --- property tests -----------------------------------------------------

fn arb_int(max_key: usize) -> impl Strategy<Value = IntExpr> {
    let leaf = prop_oneof![
        (0i64..20).prop_map(IntExpr::Lit),
        (0i64..=i64::MAX).prop_map(IntExpr::Lit),
        (0..max_key).prop_map(IntExpr::Key),
    ];
    let add = prop_oneof![Just(AddOp::Add), Just(AddOp::Sub)];
    let mul = prop_oneof![Just(MulOp::Mul), Just(MulOp::Div), Just(MulOp::Mod)];
    leaf.prop_recursive(5, 40, 4, move |inner| {
        prop_oneof![
            inner.clone().prop_map(|e| IntExpr::Neg(Box::new(e))),
            (inner.clone(), prop::collection::vec((add.clone(), inner.clone()), 1..4))
                .prop_map(|(f, r)| IntExpr::Sum(Box::new(f), r)),
            (inner.clone(), prop::collection::vec((mul.clone(), inner), 1..4))
                .prop_map(|(f, r)| IntExpr::Product(Box::new(f), r)),
        ]
    })
}

/// `huge_ranges`: also ranges up to `u32::MAX` (not to be evaluated).
fn arb_component(max_key: usize, huge_ranges: bool) -> impl Strategy<Value = Component> {
    let huge = if huge_ranges { 1 } else { 0 };
    prop_oneof![
        4 => arb_int(max_key).prop_map(Component::Expr),
        1 => (0u32..5, 1u32..4).prop_map(|(lo, n)| Component::Range(lo, lo + n)),
        huge => (0u32..u32::MAX).prop_map(|lo| Component::Range(lo, u32::MAX)),
    ]
}

fn arb_keyfn(max_key: usize, len: std::ops::Range<usize>, huge_ranges: bool) -> impl Strategy<Value = KeyFn> {
    prop::collection::vec(arb_component(max_key, huge_ranges), len).prop_map(|components| KeyFn { components })
}

fn arb_pred() -> impl Strategy<Value = Predicate> {
    let cmp = prop_oneof![
        Just(CmpOp::Eq),
        Just(CmpOp::Ne),
        Just(CmpOp::Lt),
        Just(CmpOp::Le),
        Just(CmpOp::Gt),
        Just(CmpOp::Ge)
    ];
    let leaf = prop_oneof![
        any::<bool>().prop_map(PredExpr::Const),
        (cmp, arb_int(4), arb_int(4)).prop_map(|(op, l, r)| PredExpr::Cmp(op, l, r)),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            inner.clone().prop_map(|e| PredExpr::Not(Box::new(e))),
            prop::collection::vec(inner.clone(), 2..4).prop_map(mk_and),
            prop::collection::vec(inner, 2..4).prop_map(mk_or),
        ]
    })
    .prop_map(|expr| Predicate { expr })
}

/// Keys whose components keep arithmetic small.
fn arb_key(arity: usize) -> impl Strategy<Value = Key> {
    prop::collection::vec(prop_oneof![0u32..10, Just(u32::MAX)], arity)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn keyfn_display_round_trips(f in arb_keyfn(6, 0..5, true)) {
        let text = f.to_string();
        let back = KeyFn::parse(&text).map_err(|e| TestCaseError::fail(format!("`{text}`: {e}")))?;
        prop_assert_eq!(&back, &f, "text: {}", text);
        prop_assert_eq!(back.to_string(), text);
    }

    #[test]
    fn predicate_display_round_trips(q in arb_pred()) {
        let text = q.to_string();
        let back = Predicate::parse(&text).map_err(|e| TestCaseError::fail(format!("`{text}`: {e}")))?;
        prop_assert_eq!(&back, &q, "text: {}", text);
    }

    #[test]
    fn compose_agrees_with_two_steps(
        outer in arb_keyfn(3, 0..4, false),
        inner in arb_keyfn(2, 3..4, false),
        key in arb_key(2),
    ) {
        if let Some(c) = outer.compose(&inner) {
            prop_assert_eq!(KeyFn::parse(&c.to_string()).ok(), Some(c.clone()));
            let two_step: Result<Vec<Key>, EvalError> = inner.eval(&key).and_then(|xs| {
                let mut all = Vec::new();
                for x in xs {
                    all.extend(outer.eval(&x)?);
                }
                Ok(all)
            });
            if let Ok(mut want) = two_step {
                let mut got = c.eval(&key).map_err(|e| TestCaseError::fail(format!("{c}: {e}")))?;
                want.sort();
                got.sort();
                prop_assert_eq!(got, want, "composed: {}", c);
            }
        } else {
            let ranges_ok = inner.components.iter().enumerate().all(|(i, ic)| {
                !matches!(ic, Component::Range(..))
                    || outer.passthrough().iter().filter(|&&x| x == Some(i)).count() == 1
            });
            prop_assert!(
                !ranges_ok || outer.dims_read().iter().any(|&i| i >= 3)
                    || outer.components.iter().any(|c| match c {
                        Component::Expr(IntExpr::Key(_)) | Component::Range(..) => false,
                        Component::Expr(e) => {
                            let mut d = BTreeSet::new();
                            e.collect_dims(&mut d);
                            d.iter().any(|&i| matches!(inner.components[i], Component::Range(..)))
                        }
                    }),
                "unexpected None for {} ∘ {}", outer, inner
            );
        }
    }

    #[test]
    fn substitute_agrees_with_eval(q in arb_pred(), f in arb_keyfn(3, 4..5, false), key in arb_key(3)) {
        let f = KeyFn {
            components: f.components.into_iter()
                .map(|c| match c { Component::Range(lo, _) => Component::Expr(IntExpr::Lit(i64::from(lo))), c => c })
                .collect(),
        };
        let s = q.substitute(&f).expect("no ranges, arity 4 covers k0..k3");
        if let Ok(mapped) = f.eval(&key) {
            if let Ok(want) = q.eval(&mapped[0]) {
                prop_assert_eq!(s.eval(&key).ok(), Some(want));
            }
        }
    }

    #[test]
    fn parser_never_panics(src in "[\\[\\]()k0-9 ,.+*/%<>=!&|a-z_-]{0,40}") {
        let _ = KeyFn::parse(&src);
        let _ = Predicate::parse(&src);
    }
}
