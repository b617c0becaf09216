//! The einsum front-end ([`tra_einsum`]) against a naive einsum
//! written here (numpy's semantics: every assignment of the indices, one
//! product each, summed into the output), on random expressions and shapes:
//! any number of operands, shared, repeated (diagonal) and private indices,
//! scalars, explicit and implicit outputs, blocks that do not divide the
//! sizes (padded). Each compiled program runs on the TRA interpreter, and
//! its optimized plan on the reference IA interpreter and on the thread
//! executor; the dense, cropped result must equal the naive one. The Python
//! script `scripts/einsum-numpy-test.py` checks `tra einsum` against
//! `numpy.einsum` itself.

use ndarray::{ArrayD, Axis, IxDyn, Slice};
use proptest::prelude::*;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use tra_einsum::{compile, BlockSpec, Compiled, Operand, Options, Request};
use tra_executor::reference::{eval_ia, eval_tra, AnyLayout, Relation};
use tra_executor::threads;
use tra_optimizer::optimize::{optimize, Limits};
use tra_optimizer::{Cluster, ErrorCode};

// ---------------------------------------------------------------------------
// numpy.einsum, naively (letters only, explicit or implicit output)
// ---------------------------------------------------------------------------

fn naive_einsum(expr: &str, ops: &[ArrayD<f64>]) -> ArrayD<f64> {
    let expr: String = expr.chars().filter(|c| !c.is_whitespace()).collect();
    let (ins, out) = match expr.split_once("->") {
        Some((i, o)) => (i.to_string(), Some(o.to_string())),
        None => (expr.clone(), None),
    };
    let terms: Vec<Vec<char>> = ins.split(',').map(|t| t.chars().collect()).collect();
    assert_eq!(terms.len(), ops.len());
    let mut sizes: BTreeMap<char, usize> = BTreeMap::new();
    let mut count: BTreeMap<char, usize> = BTreeMap::new();
    for (t, a) in terms.iter().zip(ops) {
        assert_eq!(t.len(), a.ndim());
        for (&c, &n) in t.iter().zip(a.shape()) {
            let s = sizes.entry(c).or_insert(n);
            // numpy broadcasts size 1.
            if *s == 1 {
                *s = n;
            }
            assert!(n == 1 || n == *s, "size of {c}");
            *count.entry(c).or_default() += 1;
        }
    }
    let out: Vec<char> = match out {
        Some(o) => o.chars().collect(),
        None => count.iter().filter(|(_, &n)| n == 1).map(|(&c, _)| c).collect(), // BTreeMap: sorted by code
    };
    let letters: Vec<char> = sizes.keys().copied().collect();
    let ext: Vec<usize> = letters.iter().map(|c| sizes[c]).collect();
    let out_shape: Vec<usize> = out.iter().map(|c| sizes[c]).collect();
    let mut result = ArrayD::<f64>::zeros(IxDyn(&out_shape));
    if ext.contains(&0) {
        return result;
    }
    let mut idx = vec![0usize; letters.len()];
    let at = |c: char, idx: &[usize]| idx[letters.iter().position(|&d| d == c).unwrap()];
    loop {
        let mut prod = 1.0;
        for (t, a) in terms.iter().zip(ops) {
            let ix: Vec<usize> = t.iter().zip(a.shape()).map(|(&c, &n)| if n == 1 { 0 } else { at(c, &idx) }).collect();
            prod *= a[IxDyn(&ix)];
        }
        let oix: Vec<usize> = out.iter().map(|&c| at(c, &idx)).collect();
        result[IxDyn(&oix)] += prod;
        let mut d = idx.len();
        loop {
            if d == 0 {
                return result;
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < ext[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

// ---------------------------------------------------------------------------
// Dense ↔ blocked relations (pad, cut, crop), written independently of the CLI
// ---------------------------------------------------------------------------

fn to_relation(c: &Compiled, i: usize, dense: &ArrayD<f64>) -> Relation {
    let op = &c.operands[i];
    let mut v = dense.view();
    for ax in (0..dense.ndim()).rev() {
        if !op.relation_axes.contains(&ax) {
            v = v.index_axis_move(Axis(ax), 0);
        }
    }
    let mut tuples = BTreeMap::new();
    for key in tra_executor::reference::all_keys(&op.key_bounds) {
        let block = ArrayD::from_shape_fn(IxDyn(&op.array_bounds), |ix| {
            let g: Vec<usize> =
                (0..op.array_bounds.len()).map(|d| key[d] as usize * op.array_bounds[d] + ix[d]).collect();
            if g.iter().zip(v.shape()).all(|(&x, &n)| x < n) {
                v[IxDyn(&g)]
            } else {
                0.0 // padding
            }
        });
        tuples.insert(key, block);
    }
    Relation { tuples }
}

fn from_relation(c: &Compiled, rel: &Relation) -> ArrayD<f64> {
    let o = &c.output;
    let expected_keys = tra_executor::reference::all_keys(&o.key_bounds);
    assert_eq!(rel.tuples.keys().cloned().collect::<Vec<_>>(), expected_keys, "output keys");
    let full = rel.to_dense().unwrap();
    let mut v = full.view();
    for (ax, &n) in o.shape.iter().enumerate() {
        v.slice_axis_inplace(Axis(ax), Slice::from(0..n));
    }
    v.to_owned()
}

fn close(want: &ArrayD<f64>, got: &ArrayD<f64>) -> Result<(), String> {
    if want.shape() != got.shape() {
        return Err(format!("shape {:?} expected, got {:?}", want.shape(), got.shape()));
    }
    for (w, g) in want.iter().zip(got.iter()) {
        if (w - g).abs() > 1e-9 * (1.0 + w.abs()) {
            return Err(format!("expected\n{want}\ngot\n{got}"));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Random expressions
// ---------------------------------------------------------------------------

struct Case {
    expr: String,
    shapes: Vec<Vec<usize>>,
    block: usize,
    per_operand_block: Vec<Option<BlockSpec>>,
    sites: usize,
}

fn random_case(seed: u64) -> Case {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let pool: Vec<char> = "abcdefgABC".chars().collect();
    let n_ops = *[1usize, 2, 2, 2, 3, 3, 4].choose(&mut rng).unwrap();
    let n_letters = rng.random_range(1..=5);
    let letters: Vec<char> = pool.choose_multiple(&mut rng, n_letters).copied().collect();
    let size: BTreeMap<char, usize> = letters.iter().map(|&c| (c, rng.random_range(1..=5))).collect();
    let mut terms: Vec<Vec<char>> = Vec::new();
    for _ in 0..n_ops {
        let rank = *[0usize, 1, 1, 2, 2, 2, 3, 3].choose(&mut rng).unwrap();
        let mut t: Vec<char> = Vec::new();
        for _ in 0..rank {
            // Mostly distinct letters within a term; sometimes a repeat (a diagonal).
            let fresh: Vec<char> = letters.iter().copied().filter(|c| !t.contains(c)).collect();
            let c = if fresh.is_empty() || (!t.is_empty() && rng.random_bool(0.12)) {
                *t.choose(&mut rng).or(letters.first()).unwrap()
            } else {
                *fresh.choose(&mut rng).unwrap()
            };
            t.push(c);
        }
        terms.push(t);
    }
    let used: Vec<char> = letters.iter().copied().filter(|c| terms.iter().any(|t| t.contains(c))).collect();
    let explicit = rng.random_bool(0.7);
    let mut expr: String = terms.iter().map(|t| t.iter().collect::<String>()).collect::<Vec<_>>().join(",");
    if explicit {
        let mut out: Vec<char> = used.iter().copied().filter(|_| rng.random_bool(0.5)).collect();
        // Shuffle the output's order.
        for i in (1..out.len()).rev() {
            out.swap(i, rng.random_range(0..=i));
        }
        expr.push_str("->");
        expr.extend(out);
    }
    let shapes: Vec<Vec<usize>> = terms.iter().map(|t| t.iter().map(|c| size[c]).collect()).collect();
    let block = rng.random_range(1..=4);
    let per_operand_block = shapes
        .iter()
        .map(|s| match rng.random_range(0..6) {
            0 => Some(BlockSpec::All(rng.random_range(1..=4))),
            1 => Some(BlockSpec::PerAxis(s.iter().map(|_| rng.random_range(1..=4)).collect())),
            _ => None,
        })
        .collect();
    Case { expr, shapes, block, per_operand_block, sites: rng.random_range(1..=4) }
}

fn random_data(shapes: &[Vec<usize>], seed: u64) -> Vec<ArrayD<f64>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
    shapes.iter().map(|s| ArrayD::from_shape_fn(IxDyn(s), |_| f64::from(rng.random_range(-3i32..=3)))).collect()
}

fn request(case: &Case) -> Request {
    Request {
        expression: case.expr.clone(),
        operands: case
            .shapes
            .iter()
            .zip(&case.per_operand_block)
            .enumerate()
            .map(|(i, (s, b))| Operand { name: format!("T{i}"), shape: s.clone(), block: b.clone() })
            .collect(),
        block: Some(case.block),
        output: Some("R".into()),
        cluster: Some(Cluster { sites: case.sites, ..Cluster::default() }),
    }
}

/// Compile, run every way, compare with the naive einsum.
fn check_case(case: &Case, seed: u64, rules: &[tra_optimizer::rule::RuleDef], run_plans: bool) -> Result<(), String> {
    let tag = format!("`{}` shapes {:?} block {} (seed {seed})", case.expr, case.shapes, case.block);
    let data = random_data(&case.shapes, seed);
    let want = naive_einsum(&case.expr, &data);
    let mut opts = Options::new(rules);
    opts.limits =
        Limits { nodes: 5_000, iterations: 20, time: std::time::Duration::from_millis(300), ..Limits::default() };
    let c = compile(&request(case), &opts).map_err(|e| format!("{tag}: compile: {e}"))?;
    if c.output.shape != want.shape() {
        return Err(format!("{tag}: output shape {:?}, numpy's {:?}", c.output.shape, want.shape()));
    }
    let inputs: BTreeMap<String, Relation> =
        data.iter().enumerate().map(|(i, d)| (c.operands[i].name.clone(), to_relation(&c, i, d))).collect();
    let p = &c.program;
    let tra = eval_tra(p, &inputs).map_err(|e| format!("{tag}: TRA interpreter: {e}\n{}", p.to_sexpr()))?;
    close(&want, &from_relation(&c, &tra["R"]))
        .map_err(|e| format!("{tag}: TRA interpreter:\n{}\n{e}", p.to_sexpr()))?;
    if !run_plans {
        return Ok(());
    }
    let answer =
        optimize(p, rules, &Limits::default()).map_err(|e| format!("{tag}: optimize: {e}\n{}", p.to_sexpr()))?;
    for alt in &answer.alternatives {
        let plan = &alt.plan;
        let layout = AnyLayout::Seeded(seed);
        let r = eval_ia(plan, case.sites, &inputs, layout)
            .map_err(|e| format!("{tag}: reference IA: {e}\n{}", plan.to_sexpr()))?;
        let out = r.erased_outputs().map_err(|e| format!("{tag}: {e}"))?;
        close(&want, &from_relation(&c, &out["R"]))
            .map_err(|e| format!("{tag}: reference IA ({}):\n{}\n{e}", alt.label, plan.to_sexpr()))?;
        if r.total_floats_moved() != alt.cost.network_floats {
            return Err(format!(
                "{tag}: {} floats moved, {} predicted\n{}",
                r.total_floats_moved(),
                alt.cost.network_floats,
                plan.to_sexpr()
            ));
        }
        let t = threads::eval_ia(plan, case.sites, &inputs, layout)
            .map_err(|e| format!("{tag}: threads: {e}\n{}", plan.to_sexpr()))?;
        let out = t.erased_outputs().map_err(|e| format!("{tag}: {e}"))?;
        close(&want, &from_relation(&c, &out["R"]))
            .map_err(|e| format!("{tag}: threads ({}):\n{}\n{e}", alt.label, plan.to_sexpr()))?;
    }
    Ok(())
}

fn rules() -> &'static [tra_optimizer::rule::RuleDef] {
    static R: std::sync::OnceLock<Vec<tra_optimizer::rule::RuleDef>> = std::sync::OnceLock::new();
    R.get_or_init(tra_rules::all)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    /// Random expressions: the TRA program and every optimized plan (on both
    /// IA executors) agree with the naive einsum.
    #[test]
    fn prop_random_expressions_match_naive_einsum(seed in any::<u64>()) {
        let case = random_case(seed);
        if let Err(e) = check_case(&case, seed, rules(), true) {
            return Err(TestCaseError::fail(e));
        }
    }
}

/// Many more random expressions, on the TRA interpreter only (fast).
#[test]
fn random_expressions_on_the_tra_interpreter() {
    for seed in 0..400u64 {
        let case = random_case(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        check_case(&case, seed, &[], false).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// The paper's forms and numpy's examples, run every way.
#[test]
fn named_forms() {
    let cases: &[(&str, &[&[usize]], usize)] = &[
        ("ij,jk->ik", &[&[5, 7], &[7, 3]], 2),
        ("ij,jk", &[&[5, 7], &[7, 3]], 3),
        ("ji,jk->ki", &[&[7, 5], &[7, 3]], 2),
        ("ij,kj->ik", &[&[5, 7], &[3, 7]], 4),
        ("bij,bjk->bik", &[&[3, 4, 5], &[3, 5, 2]], 2),
        ("ij->i", &[&[5, 7]], 2),
        ("ij->j", &[&[5, 7]], 3),
        ("ij->", &[&[5, 7]], 3),
        ("ij->ji", &[&[5, 7]], 2),
        ("ii->i", &[&[5, 5]], 2),
        ("ii", &[&[5, 5]], 2),
        ("iij->ji", &[&[4, 4, 3]], 3),
        ("i,j->ij", &[&[5], &[3]], 2),
        ("i,i->", &[&[7], &[7]], 3),
        ("i,i", &[&[7], &[7]], 3),
        ("i,i->i", &[&[7], &[7]], 3),
        ("ijk,jkl->il", &[&[3, 4, 5], &[4, 5, 2]], 2),
        ("ij,jk,kl->il", &[&[6, 5], &[5, 4], &[4, 3]], 2),
        ("ij,jk,k->i", &[&[6, 5], &[5, 4], &[4]], 2),
        ("ab,bc,cd,de->ae", &[&[3, 4], &[4, 5], &[5, 2], &[2, 3]], 2),
        ("ij,ij,ij->ij", &[&[3, 4], &[3, 4], &[3, 4]], 2),
        ("i,jk->ijk", &[&[3], &[2, 2]], 2),
        (",ij->ij", &[&[], &[3, 2]], 2),
        ("->", &[&[]], 2),
        ("ab,cd,ef->", &[&[2, 2], &[2, 2], &[2, 2]], 1),
    ];
    for (i, (expr, shapes, block)) in cases.iter().enumerate() {
        let case = Case {
            expr: expr.to_string(),
            shapes: shapes.iter().map(|s| s.to_vec()).collect(),
            block: *block,
            per_operand_block: vec![None; shapes.len()],
            sites: 1 + i % 4,
        };
        check_case(&case, i as u64, rules(), true).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// numpy broadcasting: size-1 axes and `...`.
#[test]
fn broadcasting_forms() {
    let rules = rules();
    for (expr, shapes, naive_expr) in [
        ("ij,jk->ik", vec![vec![3, 1], vec![4, 2]], "ij,jk->ik"),
        ("...ij,...jk->...ik", vec![vec![2, 3, 4], vec![4, 5]], "aij,jk->aik"),
        ("...i,...i->...", vec![vec![2, 1, 3], vec![4, 3]], "abi,bi->ab"),
        ("i...->...", vec![vec![3, 2, 2]], "iab->ab"),
        ("...ij,...jk", vec![vec![2, 3, 4], vec![2, 4, 5]], "aij,ajk->aik"),
    ] {
        let data = random_data(&shapes, 3);
        let want = naive_einsum(naive_expr, &data);
        let case = Case { expr: expr.into(), per_operand_block: vec![None; shapes.len()], shapes, block: 2, sites: 3 };
        let c = compile(&request(&case), &Options::new(rules)).unwrap();
        let inputs: BTreeMap<String, Relation> =
            data.iter().enumerate().map(|(i, d)| (c.operands[i].name.clone(), to_relation(&c, i, d))).collect();
        let tra = eval_tra(&c.program, &inputs).unwrap();
        close(&want, &from_relation(&c, &tra["R"])).unwrap_or_else(|e| panic!("{expr}: {e}"));
    }
}

/// Errors speak einsum and say where.
#[test]
fn errors_name_the_position() {
    let case = |expr: &str, shapes: Vec<Vec<usize>>| Case {
        expr: expr.into(),
        per_operand_block: vec![None; shapes.len()],
        shapes,
        block: 2,
        sites: 2,
    };
    let err = |c: Case| compile(&request(&c), &Options::new(&[])).unwrap_err();
    let e = err(case("ij,jk->ik", vec![vec![2, 3], vec![4, 5]]));
    assert_eq!((e.code, e.position, e.at.as_str()), (ErrorCode::BoundsMismatch, Some(3), "expression"));
    assert!(e.message.contains("index `j` has size 4 in T1 (axis 0) but size 3 in T0 (axis 1)"), "{}", e.message);
    let e = err(case("ij,jk,kl->il", vec![vec![2, 3], vec![3, 4]]));
    assert_eq!((e.code, e.position), (ErrorCode::BadField, Some(6)));
    assert!(e.message.contains("term `kl` has no input"), "{}", e.message);
    let e = err(case("ij#k->i", vec![vec![2, 3, 4]]));
    assert_eq!((e.code, e.position), (ErrorCode::BadExpression, Some(2)));
    assert!(e.message.contains("`#` is not an index"), "{}", e.message);
    assert_eq!(e.pointer().unwrap(), "  ij#k->i\n    ^");
}

/// With three or more operands the order comes from the cost model: for
/// `A·B·v` contracting `B·v` first moves far less than `(A·B)·v`.
#[test]
fn order_comes_from_the_cost_model() {
    let mut req = request(&Case {
        expr: "ij,jk,k->i".into(),
        shapes: vec![vec![400, 400], vec![400, 400], vec![400]],
        block: 50,
        per_operand_block: vec![None; 3],
        sites: 4,
    });
    req.cluster = Some(Cluster { sites: 4, ..Cluster::default() });
    let c = compile(&req, &Options::new(rules())).unwrap();
    assert_eq!(c.order.method, "dp");
    let first = &c.order.steps[0];
    assert_eq!((first.left.as_str(), first.right.as_str()), ("T1", "T2"), "{:#?}", c.order);
    let (best, l2r) = (c.order.cost.unwrap(), c.order.left_to_right_cost.unwrap());
    assert!(best.lt(&l2r), "{best:?} not below left-to-right {l2r:?}");
    // The last step's result is the output, in the output's order.
    assert_eq!(c.order.steps.last().unwrap().result, "R");
}
