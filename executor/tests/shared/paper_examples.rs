//! The worked examples of paper 004 (§2.1, §3, §4.2), with its exact matrices;
//! IA plans on several site counts; the float counts of broadcast and shuffle
//! against hand computation; errors. Included by `paper_examples.rs` (the
//! reference interpreter) and `threads_paper_examples.rs` (the thread
//! runtime), each of which brings its own `eval_ia`: both executors are held
//! to the same exact values, sites, float counts and errors.

use super::eval_ia;
use ndarray::{array, ArrayD};
use std::collections::BTreeMap;
use tra_executor::reference::{
    compare, erase, eval_tra, eval_tra_all, place, random_relation, AnyLayout, Block, InterpError, PhysRelation,
    Relation, Site,
};
use tra_optimizer::kernel::KernelRef;
use tra_optimizer::keyexpr::{KeyFn, Predicate};
use tra_optimizer::program::{IaOp, InputDecl, PlacementDecl, Plan, Program, TraOp};

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

fn b2(rows: &[&[f64]]) -> Block {
    let n = rows.len();
    let m = rows.first().map_or(0, |r| r.len());
    let flat: Vec<f64> = rows.iter().flat_map(|r| r.iter().copied()).collect();
    ArrayD::from_shape_vec(vec![n, m], flat).unwrap()
}

fn rel(tuples: Vec<(Vec<u32>, Block)>) -> Relation {
    Relation::from_tuples(tuples).unwrap()
}

fn k(name: &str) -> KernelRef {
    KernelRef::named(name)
}

fn kargs(name: &str, args: &[usize]) -> KernelRef {
    KernelRef::Named { name: name.into(), args: args.iter().map(|a| a.to_string()).collect() }
}

fn decl(key_bounds: &[i64], array_bounds: &[i64], placement: PlacementDecl) -> InputDecl {
    InputDecl { key_bounds: key_bounds.to_vec(), array_bounds: array_bounds.to_vec(), placement }
}

fn program(inputs: Vec<(&str, InputDecl)>, nodes: Vec<(&str, TraOp)>, outputs: &[&str]) -> Program {
    Program {
        inputs: inputs.into_iter().map(|(n, d)| (n.to_string(), d)).collect(),
        nodes: nodes.into_iter().map(|(n, o)| (n.to_string(), o)).collect(),
        outputs: outputs.iter().map(|s| s.to_string()).collect(),
        cluster: None,
        dim_names: Default::default(),
    }
}

fn plan(inputs: Vec<(&str, InputDecl)>, nodes: Vec<(&str, IaOp)>, outputs: &[&str]) -> Plan {
    Plan {
        inputs: inputs.into_iter().map(|(n, d)| (n.to_string(), d)).collect(),
        nodes: nodes.into_iter().map(|(n, o)| (n.to_string(), o)).collect(),
        outputs: outputs.iter().map(|s| s.to_string()).collect(),
    }
}

fn data(pairs: Vec<(&str, Relation)>) -> BTreeMap<String, Relation> {
    pairs.into_iter().map(|(n, r)| (n.to_string(), r)).collect()
}

fn s(x: &str) -> String {
    x.to_string()
}

fn assert_same(expected: &Relation, actual: &Relation) {
    if let Err(e) = compare(expected, actual, 1e-12) {
        panic!("{e}");
    }
}

/// Evaluate a one-input TRA program and return its single output.
fn tra1(input: &Relation, input_decl: InputDecl, nodes: Vec<(&str, TraOp)>, output: &str) -> Relation {
    let p = program(vec![("R", input_decl)], nodes, &[output]);
    let mut out = eval_tra(&p, &data(vec![("R", input.clone())])).unwrap();
    out.remove(output).unwrap()
}

/// The paper's matrix A (§2.1).
fn matrix_a() -> Block {
    array![[1., 2., 5., 6.], [3., 4., 7., 8.], [9., 10., 13., 14.], [11., 12., 15., 16.]].into_dyn()
}

/// The paper's R_A: A cut into 2×2 blocks.
fn r_a() -> Relation {
    rel(vec![
        (vec![0, 0], b2(&[&[1., 2.], &[3., 4.]])),
        (vec![0, 1], b2(&[&[5., 6.], &[7., 8.]])),
        (vec![1, 0], b2(&[&[9., 10.], &[11., 12.]])),
        (vec![1, 1], b2(&[&[13., 14.], &[15., 16.]])),
    ])
}

fn r_a_decl(placement: PlacementDecl) -> InputDecl {
    decl(&[2, 2], &[2, 2], placement)
}

/// The paper's R_B: the 2×8 matrix B as two 2×4 blocks.
fn r_b() -> Relation {
    rel(vec![
        (vec![0], b2(&[&[1., 2., 5., 6.], &[3., 4., 7., 8.]])),
        (vec![1], b2(&[&[9., 10., 13., 14.], &[11., 12., 15., 16.]])),
    ])
}

/// `TILE_(0,2)(R_B)` as the paper prints it.
fn r_b_tiled() -> Relation {
    rel(vec![
        (vec![0, 0], b2(&[&[1., 2.], &[3., 4.]])),
        (vec![0, 1], b2(&[&[5., 6.], &[7., 8.]])),
        (vec![1, 0], b2(&[&[9., 10.], &[11., 12.]])),
        (vec![1, 1], b2(&[&[13., 14.], &[15., 16.]])),
    ])
}

const SITE_COUNTS: [usize; 4] = [1, 2, 3, 7];

// ---------------------------------------------------------------------------
// §2.1, TRA
// ---------------------------------------------------------------------------

#[test]
fn r_a_is_a_cut_into_blocks() {
    assert_same(&r_a(), &Relation::from_dense(&matrix_a(), &[2, 2]).unwrap());
    assert_eq!(r_a().to_dense().unwrap(), matrix_a());
}

#[test]
fn aggregate_examples() {
    // Σ_(<1>, matAdd)(R_A): groups the pairs by key position 1 and sums them
    // ("vertically": block rows are added), exactly the paper's numbers.
    let by_col = tra1(
        &r_a(),
        r_a_decl(PlacementDecl::Any),
        vec![("S", TraOp::Aggregate { input: s("R"), group_by: vec![1], kernel: k("matAdd") })],
        "S",
    );
    assert_same(
        &rel(vec![(vec![0], b2(&[&[10., 12.], &[14., 16.]])), (vec![1], b2(&[&[18., 20.], &[22., 24.]]))]),
        &by_col,
    );
    // Σ_(<>, matAdd)(R_A): everything into one block with the empty key.
    let all = tra1(
        &r_a(),
        r_a_decl(PlacementDecl::Any),
        vec![("S", TraOp::Aggregate { input: s("R"), group_by: vec![], kernel: k("matAdd") })],
        "S",
    );
    assert_same(&rel(vec![(vec![], b2(&[&[28., 32.], &[36., 40.]]))]), &all);
}

#[test]
fn join_and_matmul_example() {
    let p = program(
        vec![("R", r_a_decl(PlacementDecl::Any))],
        vec![
            (
                "J",
                TraOp::Join {
                    left: s("R"),
                    right: s("R"),
                    left_keys: vec![1],
                    right_keys: vec![0],
                    kernel: k("matMul"),
                },
            ),
            ("P", TraOp::Aggregate { input: s("J"), group_by: vec![0, 2], kernel: k("matAdd") }),
        ],
        &["J", "P"],
    );
    let out = eval_tra(&p, &data(vec![("R", r_a())])).unwrap();
    let j = &out["J"];
    // 2 × 2 × 2 pairs join.
    assert_eq!(j.len(), 8);
    // (<0,1>, [[5,6],[7,8]]) joined with (<1,0>, [[9,10],[11,12]]).
    assert_eq!(j.get(&[0, 1, 0]).unwrap(), &b2(&[&[111., 122.], &[151., 166.]]));
    // Σ_(<0,2>, matAdd) of the join is A·A.
    let a = matrix_a().into_dimensionality::<ndarray::Ix2>().unwrap();
    let aa = a.dot(&a).into_dyn();
    assert_same(&Relation::from_dense(&aa, &[2, 2]).unwrap(), &out["P"]);
}

#[test]
fn tile_rekey_and_concat_examples() {
    // The paper's TILE_(0,2) cuts each block into pieces of two columns: the
    // paper calls the column axis "dimension 0"; in numpy convention (ours)
    // columns are axis 1, so it is tile(dim = 1, size = 2).
    let tiled = tra1(
        &r_b(),
        decl(&[2], &[2, 4], PlacementDecl::Any),
        vec![("T", TraOp::Tile { input: s("R"), dim: 1, size: 2 })],
        "T",
    );
    assert_same(&r_b_tiled(), &tiled);

    // REKEY_(<key1,key2> → <2*key1 + key2>)(TILE_(0,2)(R_B)).
    let p = program(
        vec![("R", decl(&[2], &[2, 4], PlacementDecl::Any))],
        vec![
            ("T", TraOp::Tile { input: s("R"), dim: 1, size: 2 }),
            ("K", TraOp::Rekey { input: s("T"), key: KeyFn::parse("[2*k0 + k1]").unwrap() }),
            // The paper's STACK_(1,0): key dim 1 orders the pieces, joined along
            // the column axis (numpy axis 1).
            ("C", TraOp::Concat { input: s("T"), key_dim: 1, array_dim: 1 }),
            // The same through aggregation with the concat kernel.
            ("A", TraOp::Aggregate { input: s("T"), group_by: vec![0], kernel: kargs("concat", &[1, 1]) }),
        ],
        &["K", "C", "A"],
    );
    let out = eval_tra(&p, &data(vec![("R", r_b())])).unwrap();
    assert_same(
        &rel(vec![
            (vec![0], b2(&[&[1., 2.], &[3., 4.]])),
            (vec![1], b2(&[&[5., 6.], &[7., 8.]])),
            (vec![2], b2(&[&[9., 10.], &[11., 12.]])),
            (vec![3], b2(&[&[13., 14.], &[15., 16.]])),
        ]),
        &out["K"],
    );
    assert_same(&r_b(), &out["C"]);
    assert_same(&r_b(), &out["A"]);
}

#[test]
fn diagonal_example() {
    // λ_diag(REKEY_(<k0,k1> → k0)(σ_checkEq(R_A))); diag takes the diagonal
    // of a square block: [n,n] → [n].
    let p = program(
        vec![("R", r_a_decl(PlacementDecl::Any))],
        vec![
            ("F", TraOp::Filter { input: s("R"), predicate: Predicate::parse("k0 == k1").unwrap() }),
            ("K", TraOp::Rekey { input: s("F"), key: KeyFn::parse("[k0]").unwrap() }),
            ("D", TraOp::Transform { input: s("K"), kernel: k("diag") }),
        ],
        &["F", "D"],
    );
    let out = eval_tra(&p, &data(vec![("R", r_a())])).unwrap();
    assert_same(
        &rel(vec![(vec![0, 0], b2(&[&[1., 2.], &[3., 4.]])), (vec![1, 1], b2(&[&[13., 14.], &[15., 16.]]))]),
        &out["F"],
    );
    assert_same(&rel(vec![(vec![0], array![1., 4.].into_dyn()), (vec![1], array![13., 16.].into_dyn())]), &out["D"]);
}

/// §4.2's λ^L_(insertDim(2), duplicate(2)) on R_A. The paper's listing prints
/// `<0,1,0>` twice (once with the block of `<0,0>`); the correct set has
/// `<0,0,1>` there. Here it is, explicitly.
fn replicated_r_a() -> Relation {
    let a00 = b2(&[&[1., 2.], &[3., 4.]]);
    let a01 = b2(&[&[5., 6.], &[7., 8.]]);
    let a10 = b2(&[&[9., 10.], &[11., 12.]]);
    let a11 = b2(&[&[13., 14.], &[15., 16.]]);
    rel(vec![
        (vec![0, 0, 0], a00.clone()),
        (vec![0, 0, 1], a00),
        (vec![0, 1, 0], a01.clone()),
        (vec![0, 1, 1], a01),
        (vec![1, 0, 0], a10.clone()),
        (vec![1, 0, 1], a10),
        (vec![1, 1, 0], a11.clone()),
        (vec![1, 1, 1], a11),
    ])
}

#[test]
fn replication_map_example() {
    let key = KeyFn::parse("[k0, k1, 0..2]").unwrap();
    for sites in SITE_COUNTS {
        let pl = plan(
            vec![("R", r_a_decl(PlacementDecl::Hash(vec![0, 1])))],
            vec![("M", IaOp::LocalMap { input: s("R"), key: Some(key.clone()), kernel: None })],
            &["M"],
        );
        let run = eval_ia(&pl, sites, &data(vec![("R", r_a())]), AnyLayout::RoundRobin).unwrap();
        let m = &run.outputs["M"];
        assert_eq!(m.len(), 8);
        // The site is unchanged: every copy stays where its original was.
        let placed = &run.values["R"];
        for t in &m.tuples {
            let orig = placed.tuples.iter().find(|o| o.key[..] == t.key[..2]).unwrap();
            assert_eq!(t.site, orig.site, "key {:?}", t.key);
        }
        assert_same(&replicated_r_a(), &erase(m).unwrap());
    }
    // The TRA rekey with a range component does the same.
    let out = tra1(&r_a(), r_a_decl(PlacementDecl::Any), vec![("K", TraOp::Rekey { input: s("R"), key })], "K");
    assert_same(&replicated_r_a(), &out);
}

#[test]
fn local_map_pairs_tile_pieces_with_range_keys() {
    // TILE as a local map: key [k0, 0..2] paired by position with tile(1,2)'s pieces.
    let pl = plan(
        vec![("R", decl(&[2], &[2, 4], PlacementDecl::Any))],
        vec![(
            "M",
            IaOp::LocalMap {
                input: s("R"),
                key: Some(KeyFn::parse("[k0, 0..2]").unwrap()),
                kernel: Some(kargs("tile", &[1, 2])),
            },
        )],
        &["M"],
    );
    for sites in SITE_COUNTS {
        let run = eval_ia(&pl, sites, &data(vec![("R", r_b())]), AnyLayout::Seeded(5)).unwrap();
        assert_same(&r_b_tiled(), &erase(&run.outputs["M"]).unwrap());
    }
}

// ---------------------------------------------------------------------------
// §3 and §4.2, IA
// ---------------------------------------------------------------------------

fn matmul_tra(x: InputDecl, y: InputDecl) -> Program {
    program(
        vec![("X", x), ("Y", y)],
        vec![
            (
                "J",
                TraOp::Join {
                    left: s("X"),
                    right: s("Y"),
                    left_keys: vec![1],
                    right_keys: vec![0],
                    kernel: k("matMul"),
                },
            ),
            ("Z", TraOp::Aggregate { input: s("J"), group_by: vec![0, 2], kernel: k("matAdd") }),
        ],
        &["Z"],
    )
}

fn ljoin(left: &str, right: &str) -> IaOp {
    IaOp::LocalJoin { left: s(left), right: s(right), left_keys: vec![1], right_keys: vec![0], kernel: k("matMul") }
}

fn lagg(input: &str) -> IaOp {
    IaOp::LocalAggregate { input: s(input), group_by: vec![0, 2], kernel: k("matAdd") }
}

fn shuffle(input: &str, dims: &[usize]) -> IaOp {
    IaOp::Shuffle { input: s(input), dims: dims.to_vec() }
}

/// X: key bounds [a, b], blocks [p, q]; Y: [b, c], blocks [q, r].
const A: u32 = 3;
const B: u32 = 4;
const C: u32 = 2;
const P: usize = 2;
const Q: usize = 3;
const R: usize = 2;

fn xy_decls(x: PlacementDecl, y: PlacementDecl) -> (InputDecl, InputDecl) {
    (decl(&[A as i64, B as i64], &[P as i64, Q as i64], x), decl(&[B as i64, C as i64], &[Q as i64, R as i64], y))
}

fn xy_data() -> BTreeMap<String, Relation> {
    data(vec![("X", random_relation(&[A, B], &[P, Q], 11)), ("Y", random_relation(&[B, C], &[Q, R], 12))])
}

fn layouts() -> [AnyLayout; 4] {
    [AnyLayout::RoundRobin, AnyLayout::Seeded(1), AnyLayout::Seeded(99), AnyLayout::OneSite(0)]
}

#[test]
fn broadcast_join_aggregate_matmul() {
    let inputs = xy_data();
    for (xp, yp) in [
        (PlacementDecl::Any, PlacementDecl::Any),
        (PlacementDecl::Hash(vec![0]), PlacementDecl::Hash(vec![1])),
        (PlacementDecl::Replicated, PlacementDecl::Hash(vec![0, 1])),
    ] {
        let (xd, yd) = xy_decls(xp, yp);
        let expected = eval_tra(&matmul_tra(xd.clone(), yd.clone()), &inputs).unwrap().remove("Z").unwrap();
        // Dense check of the TRA result itself.
        let x = inputs["X"].to_dense().unwrap().into_dimensionality::<ndarray::Ix2>().unwrap();
        let y = inputs["Y"].to_dense().unwrap().into_dimensionality::<ndarray::Ix2>().unwrap();
        assert_same(&Relation::from_dense(&x.dot(&y).into_dyn(), &[P, R]).unwrap(), &expected);

        let pl = plan(
            vec![("X", xd), ("Y", yd)],
            vec![
                ("bx", IaOp::Broadcast { input: s("X") }),
                ("j", ljoin("bx", "Y")),
                ("sj", shuffle("j", &[0, 2])),
                ("Z", lagg("sj")),
            ],
            &["Z"],
        );
        for sites in SITE_COUNTS {
            for layout in layouts() {
                let run = eval_ia(&pl, sites, &inputs, layout).unwrap();
                assert_same(&expected, &erase(&run.outputs["Z"]).unwrap());
                assert_same(&expected, &run.erased_outputs().unwrap()["Z"]);
                // Broadcast moves sites × |X|; the shuffle moves the join output once.
                let x_floats = (A * B) as u64 * (P * Q) as u64;
                let join_floats = (A * B * C) as u64 * (P * R) as u64;
                assert_eq!(run.floats_moved["bx"], sites as u64 * x_floats);
                assert_eq!(run.floats_moved["sj"], join_floats);
                assert_eq!(run.floats_moved.len(), 2);
                assert_eq!(run.total_floats_moved(), sites as u64 * x_floats + join_floats);
                // Every broadcast tuple is one replicated copy.
                assert!(run.values["bx"].tuples.iter().all(|t| t.site == Site::Everywhere));
                assert_eq!(run.values["bx"].len(), (A * B) as usize);
            }
        }
    }
}

#[test]
fn shuffle_join_matmul() {
    let inputs = xy_data();
    let (xd, yd) = xy_decls(PlacementDecl::Any, PlacementDecl::Hash(vec![1]));
    let expected = eval_tra(&matmul_tra(xd.clone(), yd.clone()), &inputs).unwrap().remove("Z").unwrap();
    let pl = plan(
        vec![("X", xd), ("Y", yd)],
        vec![
            ("sx", shuffle("X", &[1])),
            ("sy", shuffle("Y", &[0])),
            ("j", ljoin("sx", "sy")),
            ("sj", shuffle("j", &[0, 2])),
            ("Z", lagg("sj")),
        ],
        &["Z"],
    );
    for sites in SITE_COUNTS {
        for layout in layouts() {
            let run = eval_ia(&pl, sites, &inputs, layout).unwrap();
            assert_same(&expected, &erase(&run.outputs["Z"]).unwrap());
            // Each shuffle moves its input once.
            assert_eq!(run.floats_moved["sx"], (A * B) as u64 * (P * Q) as u64);
            assert_eq!(run.floats_moved["sy"], (B * C) as u64 * (Q * R) as u64);
            assert_eq!(run.floats_moved["sj"], (A * B * C) as u64 * (P * R) as u64);
            // The shuffled tuples are where the placement function says.
            for t in &run.values["sx"].tuples {
                assert_eq!(t.site, Site::At(tra_optimizer::placement::site_of(&t.key, &[1], sites)));
            }
        }
    }
}

#[test]
fn aggregation_not_partitioned_by_group_keys_gives_partial_aggregates() {
    // Join dim j has 8 values, so on several sites the (i, k) groups are spread.
    let x = random_relation(&[2, 8], &[2, 2], 21);
    let y = random_relation(&[8, 2], &[2, 2], 22);
    let inputs = data(vec![("X", x), ("Y", y)]);
    let xd = decl(&[2, 8], &[2, 2], PlacementDecl::Any);
    let yd = decl(&[8, 2], &[2, 2], PlacementDecl::Any);
    let expected = eval_tra(&matmul_tra(xd.clone(), yd.clone()), &inputs).unwrap().remove("Z").unwrap();
    let pl = plan(
        vec![("X", xd), ("Y", yd)],
        vec![
            ("sx", shuffle("X", &[1])),
            ("sy", shuffle("Y", &[0])),
            ("j", ljoin("sx", "sy")),
            // No shuffle on [0, 2]: the join output is partitioned by j only.
            ("Z", lagg("j")),
        ],
        &["Z"],
    );
    for sites in SITE_COUNTS {
        let run = eval_ia(&pl, sites, &inputs, AnyLayout::RoundRobin).unwrap();
        let z = &run.outputs["Z"];
        let spread = (0..8u32).map(|j| tra_optimizer::placement::site_of(&[j], &[0], sites)).collect::<Vec<_>>();
        let distinct: std::collections::BTreeSet<_> = spread.iter().collect();
        if sites == 1 {
            assert_same(&expected, &erase(z).unwrap());
        } else {
            assert!(distinct.len() > 1, "the hash puts every j on one site: pick other bounds");
            match erase(z) {
                Err(InterpError::NotATensorRelation { key, sites: held, .. }) => {
                    assert!(held.len() > 1);
                    assert!(held.iter().all(|s| matches!(s, Site::At(_))));
                    assert_eq!(key.len(), 2);
                }
                other => panic!("{sites} sites: expected partial aggregates, got {other:?}"),
            }
            // The partial sums of each group add up to the right answer.
            let mut sums: BTreeMap<Vec<u32>, Block> = BTreeMap::new();
            for t in &z.tuples {
                let e = sums.entry(t.key.clone()).or_insert_with(|| Block::zeros(t.block.raw_dim()));
                *e += &t.block;
            }
            assert_same(&expected, &Relation { tuples: sums });
            let err = run.erased_outputs().unwrap_err();
            assert!(err.to_string().starts_with("node Z: not a tensor relation"), "{err}");
        }
    }
}

#[test]
fn aggregation_of_replicated_relation_is_replicated() {
    let x = random_relation(&[3, 2], &[2, 2], 5);
    let xd = decl(&[3, 2], &[2, 2], PlacementDecl::Any);
    let expected = tra1(
        &x,
        xd.clone(),
        vec![("S", TraOp::Aggregate { input: s("R"), group_by: vec![1], kernel: k("matAdd") })],
        "S",
    );
    let pl = plan(
        vec![("R", xd)],
        vec![
            ("b", IaOp::Broadcast { input: s("R") }),
            ("S", IaOp::LocalAggregate { input: s("b"), group_by: vec![1], kernel: k("matAdd") }),
            // A shuffle of replicated tuples sends each once.
            ("sh", shuffle("b", &[0])),
        ],
        &["S", "sh"],
    );
    for sites in SITE_COUNTS {
        let run = eval_ia(&pl, sites, &data(vec![("R", x.clone())]), AnyLayout::Seeded(3)).unwrap();
        let s_out = &run.outputs["S"];
        assert!(s_out.tuples.iter().all(|t| t.site == Site::Everywhere));
        assert_same(&expected, &erase(s_out).unwrap());
        assert_eq!(run.floats_moved["b"], sites as u64 * 6 * 4);
        assert_eq!(run.floats_moved["sh"], 6 * 4);
        assert_same(&x, &erase(&run.outputs["sh"]).unwrap());
    }
}

#[test]
fn local_concat_over_partitioned_pieces() {
    // concat as local_aggregate over shuffle by the group dims gives R_B back.
    let pl = plan(
        vec![("T", decl(&[2, 2], &[2, 2], PlacementDecl::Any))],
        vec![
            ("s", shuffle("T", &[0])),
            ("C", IaOp::LocalAggregate { input: s("s"), group_by: vec![0], kernel: kargs("concat", &[1, 1]) }),
        ],
        &["C"],
    );
    for sites in SITE_COUNTS {
        let run = eval_ia(&pl, sites, &data(vec![("T", r_b_tiled())]), AnyLayout::RoundRobin).unwrap();
        assert_same(&r_b(), &erase(&run.outputs["C"]).unwrap());
    }
}

#[test]
fn placement_of_inputs() {
    let x = random_relation(&[4, 3], &[1], 8);
    for sites in SITE_COUNTS {
        let rr = place(&x, &PlacementDecl::Any, sites, AnyLayout::RoundRobin).unwrap();
        for (i, key) in x.tuples.keys().enumerate() {
            let t = rr.tuples.iter().find(|t| &t.key == key).unwrap();
            assert_eq!(t.site, Site::At(i % sites));
        }
        let h = place(&x, &PlacementDecl::Hash(vec![1]), sites, AnyLayout::RoundRobin).unwrap();
        assert!(h.tuples.iter().all(|t| t.site == Site::At(tra_optimizer::placement::site_of(&t.key, &[1], sites))));
        let r = place(&x, &PlacementDecl::Replicated, sites, AnyLayout::RoundRobin).unwrap();
        assert!(r.tuples.iter().all(|t| t.site == Site::Everywhere));
        let one = place(&x, &PlacementDecl::Any, sites, AnyLayout::OneSite(sites - 1)).unwrap();
        assert!(one.tuples.iter().all(|t| t.site == Site::At(sites - 1)));
        let a = place(&x, &PlacementDecl::Any, sites, AnyLayout::Seeded(4)).unwrap();
        assert_eq!(a, place(&x, &PlacementDecl::Any, sites, AnyLayout::Seeded(4)).unwrap());
        assert!(a.tuples.iter().all(|t| matches!(t.site, Site::At(s) if s < sites)));
        for p in [&rr, &h, &r, &one, &a] {
            assert_same(&x, &erase(p).unwrap());
        }
    }
    assert!(matches!(place(&x, &PlacementDecl::Any, 0, AnyLayout::RoundRobin), Err(InterpError::NoSites)));
    assert!(place(&x, &PlacementDecl::Any, 2, AnyLayout::OneSite(2)).is_err());
    assert!(place(&x, &PlacementDecl::Hash(vec![2]), 2, AnyLayout::RoundRobin).is_err());
}

#[test]
fn erase_detects_a_key_on_a_site_and_everywhere() {
    let b = b2(&[&[1.]]);
    let p = PhysRelation {
        tuples: vec![
            tra_executor::reference::PhysTuple { key: vec![0], block: b.clone(), site: Site::Everywhere },
            tra_executor::reference::PhysTuple { key: vec![0], block: b.clone(), site: Site::At(1) },
            tra_executor::reference::PhysTuple { key: vec![1], block: b, site: Site::At(0) },
        ],
    };
    let e = erase(&p).unwrap_err();
    assert_eq!(
        e,
        InterpError::NotATensorRelation { node: None, key: vec![0], sites: vec![Site::Everywhere, Site::At(1)] }
    );
    assert!(e.to_string().contains("[0]"), "{e}");
}

// ---------------------------------------------------------------------------
// Utilities
// ---------------------------------------------------------------------------

#[test]
fn random_relations_are_dense_small_and_seeded() {
    let r = random_relation(&[2, 3], &[4, 5], 42);
    assert_eq!(r.len(), 6);
    assert_eq!(r, random_relation(&[2, 3], &[4, 5], 42));
    assert_ne!(r, random_relation(&[2, 3], &[4, 5], 43));
    for (key, b) in &r.tuples {
        assert!(key[0] < 2 && key[1] < 3);
        assert_eq!(b.shape(), &[4, 5]);
        assert!(b.iter().all(|&v| v.fract() == 0.0 && (-3.0..=3.0).contains(&v)));
    }
    assert_eq!(random_relation(&[], &[2], 1).len(), 1);
    assert!(random_relation(&[3, 0], &[2], 1).is_empty());
}

#[test]
fn compare_names_the_first_difference() {
    let a = r_a();
    assert!(compare(&a, &a, 0.0).is_ok());
    let mut b = a.clone();
    b.tuples.get_mut(&vec![1, 0]).unwrap()[[1, 1]] += 1e-3;
    let msg = compare(&a, &b, 1e-9).unwrap_err();
    assert!(msg.contains("[1, 0]") && msg.contains("12"), "{msg}");
    assert!(compare(&a, &b, 1e-2).is_ok());
    let mut c = a.clone();
    c.tuples.remove(&vec![0, 1]);
    assert!(compare(&a, &c, 1e-9).unwrap_err().contains("[0, 1]"));
    assert!(compare(&c, &a, 1e-9).unwrap_err().contains("[0, 1]"));
    let mut d = a.clone();
    d.tuples.insert(vec![0, 1], b2(&[&[5., 6., 0.]]));
    assert!(compare(&a, &d, 1e-9).unwrap_err().contains("shape"));
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

#[test]
fn plan_naming_a_missing_node() {
    let pl = plan(
        vec![("R", r_a_decl(PlacementDecl::Any))],
        vec![("bad", IaOp::Broadcast { input: s("nowhere") })],
        &["bad"],
    );
    let e = eval_ia(&pl, 2, &data(vec![("R", r_a())]), AnyLayout::RoundRobin).unwrap_err();
    assert_eq!(e, InterpError::UnknownOperand { node: s("bad"), operand: s("nowhere") });
    assert!(e.to_string().starts_with("node bad:"), "{e}");

    let p = program(
        vec![("R", r_a_decl(PlacementDecl::Any))],
        vec![("T", TraOp::Transform { input: s("ghost"), kernel: k("relu") })],
        &["T"],
    );
    let e = eval_tra(&p, &data(vec![("R", r_a())])).unwrap_err();
    assert!(e.to_string().starts_with("node T:") && e.to_string().contains("ghost"), "{e}");

    // An output that names nothing.
    let p = program(vec![("R", r_a_decl(PlacementDecl::Any))], vec![], &["nope"]);
    assert_eq!(eval_tra(&p, &data(vec![("R", r_a())])).unwrap_err(), InterpError::UnknownOutput(s("nope")));
}

#[test]
fn kernel_on_wrong_shapes_names_the_node() {
    // matMul of 2×3 by 2×3 blocks.
    let x = random_relation(&[2, 2], &[2, 3], 1);
    let xd = decl(&[2, 2], &[2, 3], PlacementDecl::Any);
    let p = matmul_tra(xd.clone(), xd.clone());
    let inputs = data(vec![("X", x.clone()), ("Y", x)]);
    let e = eval_tra(&p, &inputs).unwrap_err();
    assert!(matches!(&e, InterpError::Kernel { node, .. } if node == "J"), "{e:?}");
    assert!(e.to_string().starts_with("node J:"), "{e}");

    let pl = plan(
        vec![("X", xd.clone()), ("Y", xd)],
        vec![("bx", IaOp::Broadcast { input: s("X") }), ("jj", ljoin("bx", "Y"))],
        &["jj"],
    );
    let e = eval_ia(&pl, 3, &inputs, AnyLayout::RoundRobin).unwrap_err();
    assert!(matches!(&e, InterpError::Kernel { node, .. } if node == "jj"), "{e:?}");
    assert!(e.to_string().starts_with("node jj:"), "{e}");
}

#[test]
fn other_errors() {
    let ra = data(vec![("R", r_a())]);
    // Missing input data.
    let p = program(vec![("R", r_a_decl(PlacementDecl::Any))], vec![], &["R"]);
    assert_eq!(eval_tra(&p, &BTreeMap::new()).unwrap_err(), InterpError::MissingInput(s("R")));
    // Input data of the wrong arity and shape.
    let p = program(vec![("R", decl(&[2], &[2, 2], PlacementDecl::Any))], vec![], &["R"]);
    assert!(matches!(eval_tra(&p, &ra).unwrap_err(), InterpError::BadInput { input, .. } if input == "R"));
    let p = program(vec![("R", decl(&[2, 2], &[2, 3], PlacementDecl::Any))], vec![], &["R"]);
    assert!(matches!(eval_tra(&p, &ra).unwrap_err(), InterpError::BadInput { .. }));
    let p = program(vec![("R", decl(&[1, 2], &[2, 2], PlacementDecl::Any))], vec![], &["R"]);
    assert!(matches!(eval_tra(&p, &ra).unwrap_err(), InterpError::BadInput { .. }));
    // Zero sites.
    let pl = plan(vec![("R", r_a_decl(PlacementDecl::Any))], vec![], &["R"]);
    assert_eq!(eval_ia(&pl, 0, &ra, AnyLayout::RoundRobin).unwrap_err(), InterpError::NoSites);
    // An input is a valid output.
    let run = eval_ia(&pl, 2, &ra, AnyLayout::RoundRobin).unwrap();
    assert_same(&r_a(), &erase(&run.outputs["R"]).unwrap());
    // A rekey that breaks key uniqueness.
    let p = program(
        vec![("R", r_a_decl(PlacementDecl::Any))],
        vec![("K", TraOp::Rekey { input: s("R"), key: KeyFn::parse("[k0]").unwrap() })],
        &["K"],
    );
    let e = eval_tra(&p, &ra).unwrap_err();
    assert!(matches!(&e, InterpError::DuplicateKey { node, .. } if node == "K"), "{e:?}");
    // Dims out of range.
    let p = program(
        vec![("R", r_a_decl(PlacementDecl::Any))],
        vec![("S", TraOp::Aggregate { input: s("R"), group_by: vec![5], kernel: k("matAdd") })],
        &["S"],
    );
    assert!(matches!(eval_tra(&p, &ra).unwrap_err(), InterpError::BadNode { node, .. } if node == "S"));
    let pl = plan(vec![("R", r_a_decl(PlacementDecl::Any))], vec![("sh", shuffle("R", &[2]))], &["sh"]);
    assert!(
        matches!(eval_ia(&pl, 2, &ra, AnyLayout::RoundRobin).unwrap_err(), InterpError::BadNode { node, .. } if node == "sh")
    );
    // A transform kernel that gives several blocks.
    let p = program(
        vec![("R", r_a_decl(PlacementDecl::Any))],
        vec![("T", TraOp::Transform { input: s("R"), kernel: kargs("tile", &[0, 1]) })],
        &["T"],
    );
    assert!(matches!(eval_tra(&p, &ra).unwrap_err(), InterpError::BadNode { node, .. } if node == "T"));
    // A local map whose key expression and kernel disagree on the count.
    let pl = plan(
        vec![("R", r_a_decl(PlacementDecl::Any))],
        vec![(
            "m",
            IaOp::LocalMap {
                input: s("R"),
                key: Some(KeyFn::parse("[k0, k1, 0..3]").unwrap()),
                kernel: Some(kargs("tile", &[0, 1])),
            },
        )],
        &["m"],
    );
    let e = eval_ia(&pl, 2, &ra, AnyLayout::RoundRobin).unwrap_err();
    assert!(matches!(&e, InterpError::BadNode { node, .. } if node == "m"), "{e:?}");
    // A cycle.
    let p = program(
        vec![("R", r_a_decl(PlacementDecl::Any))],
        vec![
            ("a", TraOp::Transform { input: s("b"), kernel: k("relu") }),
            ("b", TraOp::Transform { input: s("a"), kernel: k("relu") }),
        ],
        &["a"],
    );
    let e = eval_tra(&p, &ra).unwrap_err();
    assert!(e.to_string().contains("cycle"), "{e}");
    // A node named like an input.
    let p = program(
        vec![("R", r_a_decl(PlacementDecl::Any))],
        vec![("R", TraOp::Transform { input: s("R"), kernel: k("relu") })],
        &["R"],
    );
    assert!(eval_tra(&p, &ra).is_err());
    // Join with unequal numbers of join dims.
    let p = program(
        vec![("R", r_a_decl(PlacementDecl::Any))],
        vec![(
            "J",
            TraOp::Join {
                left: s("R"),
                right: s("R"),
                left_keys: vec![0, 1],
                right_keys: vec![0],
                kernel: k("matMul"),
            },
        )],
        &["J"],
    );
    assert!(matches!(eval_tra(&p, &ra).unwrap_err(), InterpError::BadNode { node, .. } if node == "J"));
}

#[test]
fn eval_tra_all_holds_every_value() {
    let p = program(
        vec![("R", r_a_decl(PlacementDecl::Any))],
        vec![("T", TraOp::Transform { input: s("R"), kernel: k("relu") })],
        &["T"],
    );
    let all = eval_tra_all(&p, &data(vec![("R", r_a())])).unwrap();
    assert_eq!(all.keys().cloned().collect::<Vec<_>>(), vec![s("R"), s("T")]);
}
