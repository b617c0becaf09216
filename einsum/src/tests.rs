//! Unit tests of the compiler: programs, errors with positions, orders.

use crate::*;
use tra_optimizer::check::check_program;
use tra_optimizer::program::Operator;
use tra_optimizer::{ErrorCode, ProgramError};

fn req(expr: &str, shapes: &[&[usize]], block: usize) -> Request {
    Request {
        expression: expr.into(),
        operands: shapes
            .iter()
            .enumerate()
            .map(|(i, s)| Operand { name: ((b'A' + i as u8) as char).to_string(), shape: s.to_vec(), block: None })
            .collect(),
        block: Some(block),
        output: None,
        cluster: None,
    }
}

fn go(expr: &str, shapes: &[&[usize]], block: usize) -> Result<Compiled, EinsumError> {
    compile(&req(expr, shapes, block), &Options::new(&[]))
}

fn err(expr: &str, shapes: &[&[usize]]) -> EinsumError {
    go(expr, shapes, 2).unwrap_err()
}

#[test]
fn matmul_is_the_papers_program() {
    let c = go("ij,jk->ik", &[&[4, 6], &[6, 2]], 2).unwrap();
    let p = &c.program;
    assert_eq!(p.inputs["A"].key_bounds, vec![2, 3]);
    assert_eq!(p.inputs["A"].array_bounds, vec![2, 2]);
    assert_eq!(p.inputs["B"].key_bounds, vec![3, 1]);
    assert_eq!(p.to_sexpr(), "(aggregate [0 2] matAdd (join [1] [0] matMul A B))");
    assert_eq!(c.output.shape, vec![4, 2]);
    assert!(!c.output.cropped);
    assert_eq!(c.order.method, "pair");
    // Transposed forms use the matMul family; the output's order is kept.
    let t = go("ji,jk->ki", &[&[6, 4], &[6, 2]], 2).unwrap();
    assert_eq!(t.program.to_sexpr(), "(aggregate [1 2] matAdd (join [0] [0] matMulTN B A))");
    check_program(&t.program).unwrap();
}

#[test]
fn batched_and_general_contractions_use_einsum() {
    let c = go("bij,bjk->bik", &[&[2, 4, 6], &[2, 6, 3]], 2).unwrap();
    assert_eq!(c.program.to_sexpr(), "(aggregate [0 1 3] matAdd (join [0 2] [0 1] einSum(bij_bjk_bik) A B))");
    let c = go("ijk,jkl->il", &[&[2, 3, 4], &[3, 4, 5]], 2).unwrap();
    assert_eq!(c.program.to_sexpr(), "(aggregate [0 3] matAdd (join [1 2] [0 1] einSum(ijk_jkl_il) A B))");
    assert_eq!(c.output.shape, vec![2, 5]);
    assert!(c.output.cropped);
    // An outer product needs no aggregation.
    let c = go("i,j->ij", &[&[3], &[4]], 2).unwrap();
    assert_eq!(c.program.to_sexpr(), "(join [] [] einSum(i_j_ij) A B)");
    let c = go("i,j->ji", &[&[3], &[4]], 2).unwrap();
    assert_eq!(c.program.to_sexpr(), "(rekey \"[k1, k0]\" (join [] [] einSum(i_j_ji) A B))");
}

#[test]
fn unary_forms() {
    let s = |e: &str, sh: &[usize]| go(e, &[sh], 2).unwrap().program.to_sexpr();
    assert_eq!(s("ij->i", &[4, 6]), "(aggregate [0] matAdd (transform einSum(ij_i) A))");
    assert_eq!(s("ij->ji", &[4, 6]), "(rekey \"[k1, k0]\" (transform einSum(ij_ji) A))");
    assert_eq!(s("ij->ij", &[4, 6]), "(transform einSum(ij_ij) A)");
    assert_eq!(s("ii->i", &[4, 4]), "(transform einSum(ii_i) (rekey \"[k0]\" (filter \"k0 == k1\" A)))");
    assert_eq!(
        s("ii", &[4, 4]),
        "(aggregate [] matAdd (transform einSum(ii_) (rekey \"[k0]\" (filter \"k0 == k1\" A))))"
    );
    assert_eq!(go("ii", &[&[4, 4]], 2).unwrap().output.shape, Vec::<usize>::new());
}

#[test]
fn implicit_output_is_numpys() {
    assert_eq!(go("ij,jk", &[&[2, 3], &[3, 4]], 2).unwrap().output.letters, "ik");
    assert_eq!(go("ba,Ab", &[&[2, 3], &[5, 2]], 2).unwrap().output.letters, "Aa");
    assert_eq!(go("ba,Ab", &[&[2, 3], &[5, 2]], 2).unwrap().output.shape, vec![5, 3]);
    assert_eq!(go("ii", &[&[3, 3]], 2).unwrap().output.letters, "");
    assert_eq!(go("...ij,...jk", &[&[6, 2, 3], &[3, 4]], 2).unwrap().output.shape, vec![6, 2, 4]);
}

#[test]
fn broadcasting_and_ellipsis() {
    // A size-1 axis against a larger size is dropped from its relation.
    let c = go("ij,jk->ik", &[&[2, 1], &[3, 4]], 2).unwrap();
    assert_eq!(c.operands[0].relation_axes, vec![0]);
    assert_eq!(c.output.shape, vec![2, 4]);
    let c = go("...i,...i->...", &[&[2, 1, 3], &[4, 3]], 2).unwrap();
    assert_eq!(c.output.shape, vec![2, 4]);
    assert_eq!(c.operands[0].relation_axes, vec![0, 2]);
    check_program(&c.program).unwrap();
}

#[test]
fn padding_and_blocks() {
    let c = go("ij,jk->ik", &[&[5, 3], &[3, 7]], 4).unwrap();
    let i = |x: &str| c.indices.iter().find(|i| i.index == x).unwrap().clone();
    assert_eq!((i("i").block, i("i").blocks, i("i").padding), (4, 2, 3));
    assert_eq!((i("j").block, i("j").blocks, i("j").padding), (3, 1, 0)); // smaller than the block
    assert_eq!((i("k").block, i("k").blocks, i("k").padding), (4, 2, 1));
    assert!(c.output.cropped);
    assert!(c.padding.contains("zero-padded"), "{}", c.padding);
    // Per-operand blocks: the smallest asked for an index wins.
    let mut r = req("ij,jk->ik", &[&[8, 8], &[8, 8]], 8);
    r.operands[1].block = Some(BlockSpec::PerAxis(vec![2, 4]));
    let c = compile(&r, &Options::new(&[])).unwrap();
    assert_eq!(c.program.inputs["A"].array_bounds, vec![8, 2]);
    assert_eq!(c.program.inputs["B"].array_bounds, vec![2, 4]);
}

#[test]
fn sizes_are_checked_in_64_bits() {
    // 5e12 in blocks of 1000 is 5e9 blocks: more than a u32 key bound
    // (it used to wrap around to 705032704 and compile a wrong program).
    let e = go("ij->ij", &[&[5_000_000_000_000, 2]], 1000).unwrap_err();
    assert_eq!((e.code, e.position), (ErrorCode::BadBounds, Some(0)));
    assert!(e.message.contains("index `i` has size 5000000000000"), "{}", e.message);
    assert!(e.message.contains("use a block of at least 1165"), "{}", e.message);
    // In larger blocks it fits the key bound, but not 64 bits of elements.
    let e = go("ij->ij", &[&[1_000_000_000_000_000_000, 1_000_000_000]], 1 << 40).unwrap_err();
    assert_eq!(e.code, ErrorCode::BadBounds);
    assert!(e.message.contains("more than 2^64 elements"), "{}", e.message);
    assert!(!e.message.contains("internal"), "{}", e.message);
    // An outer product whose result overflows is the request's fault too.
    let e = go("i,j->ij", &[&[1 << 40], &[1 << 40]], 1 << 20).unwrap_err();
    assert_eq!(e.code, ErrorCode::BadBounds, "{}", e.message);
    assert!(!e.message.contains("internal"), "{}", e.message);
}

#[test]
fn errors_speak_einsum_with_positions() {
    let e = err("ij,jk->ik", &[&[2, 3], &[4, 5]]);
    assert_eq!(e.code, ErrorCode::BoundsMismatch);
    assert_eq!(e.position, Some(3));
    assert!(e.message.contains("index `j` has size 4 in B (axis 0) but size 3 in A (axis 1)"), "{}", e.message);
    assert_eq!(e.pointer().unwrap(), "  ij,jk->ik\n     ^");
    let e = err("ij,jk->ik", &[&[2, 3]]);
    assert_eq!((e.code, e.position), (ErrorCode::BadField, Some(3)));
    assert!(e.message.contains("2 operand terms"), "{}", e.message);
    let e = err("ij->ij", &[&[2, 3], &[3, 3]]);
    assert_eq!(e.position, Some(2));
    assert!(e.message.contains("2 inputs were given (A, B)"), "{}", e.message);
    let e = err("ij,j1->i", &[&[2, 3], &[3, 3]]);
    assert_eq!((e.code, e.position), (ErrorCode::BadExpression, Some(4)));
    assert!(e.message.contains("`1` is not an index"), "{}", e.message);
    let e = err("ij->iij", &[&[2, 3]]);
    assert_eq!(e.position, Some(5));
    assert!(e.message.contains("appears twice in the output"));
    let e = err("ij->k", &[&[2, 3]]);
    assert_eq!(e.position, Some(4));
    assert!(e.message.contains("`k` appears in no operand"));
    let e = err("ij,jk", &[&[2, 3, 4], &[3, 4]]);
    assert_eq!(e.position, Some(0));
    assert!(e.message.contains("has 3 axes"), "{}", e.message);
    assert_eq!(err("ij.,jk", &[&[2, 3], &[3, 4]]).position, Some(2));
    assert_eq!(err("ij-jk", &[&[2, 3], &[3, 4]]).position, Some(2));
    assert_eq!(err("ij->i->j", &[&[2, 3]]).position, Some(5));
    assert_eq!(err("ij->i,j", &[&[2, 3]]).position, Some(5));
    assert_eq!(err("ii->i", &[&[2, 3]]).position, Some(1));
    assert_eq!(err("...ij->ij", &[&[6, 2, 3]]).code, ErrorCode::BadExpression);
    // An empty axis is valid: one block of size 0.
    let c = go("i,i->i", &[&[0], &[0]], 4).unwrap();
    assert_eq!(
        (c.program.inputs["A"].key_bounds.clone(), c.program.inputs["A"].array_bounds.clone()),
        (vec![1], vec![0])
    );
    // Spaces are ignored but positions count them.
    assert_eq!(err("ij, jk -> ik", &[&[2, 3], &[4, 5]]).position, Some(4));
    let pe: ProgramError = err("ij,jk->ik", &[&[2, 3], &[4, 5]]).into();
    assert_eq!(pe.at, "expression");
}

#[test]
fn order_is_chosen_by_cost() {
    // A·B·v with a big A, B: (A(Bv)) is far cheaper than ((AB)v).
    let c = compile(&req("ij,jk,k->i", &[&[64, 64], &[64, 64], &[64]], 8), &Options::new(&[])).unwrap();
    assert_eq!(c.order.method, "dp");
    assert_eq!(c.order.steps.len(), 2);
    assert_eq!((c.order.steps[0].left.as_str(), c.order.steps[0].right.as_str()), ("B", "C"));
    let (best, l2r) = (c.order.cost.unwrap(), c.order.left_to_right_cost.unwrap());
    assert!(best.lt(&l2r), "{best:?} vs {l2r:?}");
    check_program(&c.program).unwrap();
    assert_eq!(c.program.nodes.last().unwrap().0, "out");
    assert!(c.program.nodes.values().all(|op| !op.operands().is_empty()));
}

#[test]
fn many_operands_go_greedy_within_the_time() {
    let letters: Vec<char> = "abcdefghijk".chars().collect();
    let terms: Vec<String> = letters.windows(2).map(|w| format!("{}{}", w[0], w[1])).collect();
    let expr = format!("{}->ak", terms.join(","));
    let shapes: Vec<Vec<usize>> = (0..terms.len()).map(|i| vec![4 + i, 5 + i]).collect();
    let refs: Vec<&[usize]> = shapes.iter().map(|s| s.as_slice()).collect();
    let mut opts = Options::new(&[]);
    opts.search_time = Duration::ZERO;
    let c = compile(&req(&expr, &refs, 2), &opts).unwrap();
    assert_eq!(c.order.method, "greedy");
    assert_eq!(c.order.steps.len(), terms.len() - 1);
    assert_eq!(c.output.shape, vec![4, 14]);
    check_program(&c.program).unwrap();
    let too_many: Vec<&[usize]> = vec![&[2]; MAX_OPERANDS + 1];
    let e = go(&vec!["i"; MAX_OPERANDS + 1].join(","), &too_many, 2).unwrap_err();
    assert_eq!(e.code, ErrorCode::LimitExceeded);
}
