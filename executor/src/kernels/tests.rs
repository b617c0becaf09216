//! The reference kernels against hand-computed values and numpy's conventions.

use super::*;
use ndarray::ArrayView1;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tra_optimizer::kernel::catalog;

fn k(s: &str) -> KernelRef {
    KernelRef::parse(s).unwrap()
}

fn random(rng: &mut ChaCha8Rng, shape: &[usize]) -> Block {
    Block::from_shape_fn(IxDyn(shape), |_| rng.random_range(-1.0..1.0))
}

fn rng() -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(7)
}

fn one(kernel: &str, inputs: &[&Block]) -> Block {
    let mut out = apply(&k(kernel), inputs).unwrap();
    assert_eq!(out.len(), 1, "{kernel}");
    out.pop().unwrap()
}

fn m2(b: &Block) -> ArrayView2<'_, f64> {
    b.view().into_dimensionality::<Ix2>().unwrap()
}

fn close(a: &Block, b: &Block) -> bool {
    a.shape() == b.shape() && Zip::from(a).and(b).all(|&x, &y| (x - y).abs() <= 1e-12 * (1.0 + x.abs()))
}

/// For each catalog entry: a kernel reference, valid operand shapes and
/// the flops of one application, computed by hand.
fn sample(name: &str) -> Option<(KernelRef, Vec<Vec<usize>>, u64)> {
    let s = |v: &[&[usize]]| v.iter().map(|x| x.to_vec()).collect::<Vec<_>>();
    Some(match name {
        "matMul" => (k("matMul"), s(&[&[3, 4], &[4, 5]]), 2 * 3 * 4 * 5),
        "matMulTN" => (k("matMulTN"), s(&[&[4, 3], &[4, 5]]), 2 * 3 * 4 * 5),
        "matMulNT" => (k("matMulNT"), s(&[&[3, 4], &[5, 4]]), 2 * 3 * 4 * 5),
        "matMulTT" => (k("matMulTT"), s(&[&[4, 3], &[5, 4]]), 2 * 3 * 4 * 5),
        "matAdd" => (k("matAdd"), s(&[&[3, 4], &[3, 4]]), 12),
        "matSub" => (k("matSub"), s(&[&[6], &[6]]), 6),
        "elemMul" => (k("elemMul"), s(&[&[2, 3, 4], &[2, 3, 4]]), 24),
        "max" => (k("max"), s(&[&[3, 4], &[3, 4]]), 12),
        "min" => (k("min"), s(&[&[3, 4], &[3, 4]]), 12),
        "reluGrad" => (k("reluGrad"), s(&[&[3, 4], &[3, 4]]), 12),
        "sgdStep" => (k("sgdStep(0.1)"), s(&[&[3, 4], &[3, 4]]), 24),
        "relu" => (k("relu"), s(&[&[3, 4]]), 12),
        "sigmoid" => (k("sigmoid"), s(&[&[3, 4]]), 48),
        "scale" => (k("scale(2.5)"), s(&[&[3, 4]]), 12),
        "neg" => (k("neg"), s(&[&[5]]), 5),
        "diag" => (k("diag"), s(&[&[4, 4]]), 0),
        "transpose" => (k("transpose"), s(&[&[3, 4]]), 0),
        "matVecAdd" => (k("matVecAdd"), s(&[&[3, 4], &[4]]), 12),
        "matVecSub" => (k("matVecSub"), s(&[&[3, 4], &[4]]), 12),
        "rowSum" => (k("rowSum"), s(&[&[3, 4]]), 3 * 3),
        "colSum" => (k("colSum"), s(&[&[3, 4]]), 2 * 4),
        "minIndex" => (k("minIndex"), s(&[&[3, 4]]), 12),
        "minPair" => (k("minPair"), s(&[&[3, 2], &[3, 2]]), 3),
        "offsetIndex" => (k("offsetIndex(8)"), s(&[&[3, 2]]), 3),
        "tile" => (k("tile(1,2)"), s(&[&[3, 6]]), 0),
        "concat" => (k("concat(0,1)"), s(&[&[3, 2], &[3, 2]]), 0),
        "einSum" => (k("einSum(ij_jk_ik)"), s(&[&[3, 4], &[4, 5]]), 2 * 3 * 4 * 5),
        "exp" | "log" | "sqrt" => (k(name), s(&[&[3, 4]]), 12),
        "shift" => (k("shift(1e-5)"), s(&[&[3, 4]]), 12),
        "elemDiv" => (k("elemDiv"), s(&[&[3, 4], &[3, 4]]), 12),
        "rowMax" => (k("rowMax"), s(&[&[3, 4]]), 3 * 3),
        "colMax" => (k("colMax"), s(&[&[3, 4]]), 2 * 4),
        "matVecMul" | "matVecDiv" => (k(name), s(&[&[3, 4], &[4]]), 12),
        "matColVecAdd" | "matColVecSub" | "matColVecMul" | "matColVecDiv" => (k(name), s(&[&[3, 4], &[3]]), 12),
        "add" | "sub" | "mul" | "div" | "pow" | "maximum" | "minimum" | "lt" | "le" | "gt" | "ge" | "eq" | "ne"
        | "selectIf" | "selectElse" => (k(name), s(&[&[3, 1], &[4]]), 12),
        "concatAxis" => (k("concatAxis(1)"), s(&[&[3, 2], &[3, 5]]), 0),
        "abs" | "log1p" | "expm1" | "recip" | "rsqrt" | "sign" | "square" | "floor" | "ceil" | "logicalNot" => {
            (k(name), s(&[&[3, 4]]), 12)
        }
        "tanh" | "erf" => (k(name), s(&[&[3, 4]]), 48),
        "powc" => (k("powc(3)"), s(&[&[3, 4]]), 12),
        "expandDims" => (k("expandDims(1)"), s(&[&[3, 4]]), 0),
        "squeezeAxis" => (k("squeezeAxis(1)"), s(&[&[3, 1, 4]]), 0),
        "mergeAxes" => (k("mergeAxes(0)"), s(&[&[3, 4, 2]]), 0),
        "splitAxis" => (k("splitAxis(1,2)"), s(&[&[3, 4]]), 0),
        "repeatAxis" => (k("repeatAxis(0,3)"), s(&[&[1, 4]]), 0),
        "einMax" | "einMin" => (k(&format!("{name}(ijk_ki)")), s(&[&[2, 3, 4]]), 24),
        _ => return None,
    })
}

#[test]
fn every_catalog_entry_applies_with_its_shape_rule() {
    let mut rng = rng();
    for info in catalog() {
        let (kernel, shapes, flops) =
            sample(info.name).unwrap_or_else(|| panic!("no sample for catalog entry `{}`", info.name));
        kernel.check().unwrap();
        assert_eq!(kernel.arity(), info.arity, "{}", info.name);
        assert_eq!(shapes.len(), info.arity, "{}", info.name);
        let shape_refs: Vec<&[usize]> = shapes.iter().map(|s| s.as_slice()).collect();
        assert_eq!(kernel.flops(&shape_refs), flops, "flops of {}", info.name);
        let blocks: Vec<Block> = shapes.iter().map(|s| random(&mut rng, s)).collect();
        let refs: Vec<&Block> = blocks.iter().collect();
        let want = kernel.output_shape(&shape_refs).unwrap();
        let n = kernel.outputs_per_call(&shape_refs).unwrap();
        if info.name == "concat" {
            // Applied by aggregation: output shape is the piece shape,
            // multiplied along array_dim by the piece count.
            assert!(matches!(apply(&kernel, &refs), Err(KernelError::BadUse(_))));
            let out = concat_pieces(&[(0, refs[0]), (1, refs[1])], 1, 2).unwrap();
            assert_eq!(out.shape(), &[want[0], want[1] * 2]);
            continue;
        }
        let out = apply(&kernel, &refs).unwrap();
        assert_eq!(out.len(), n, "{}", info.name);
        for b in &out {
            assert_eq!(b.shape(), want.as_slice(), "{}", info.name);
            assert!(b.is_standard_layout(), "{}", info.name);
        }
        if info.elementwise {
            assert_eq!(want, shapes[0], "{}", info.name);
        }
    }
}

#[test]
fn matrix_products_match_loops() {
    let mut rng = rng();
    let (m, kk, n) = (3, 4, 5);
    let a = random(&mut rng, &[m, kk]);
    let b = random(&mut rng, &[kk, n]);
    let mut want = Block::zeros(IxDyn(&[m, n]));
    for i in 0..m {
        for j in 0..n {
            for l in 0..kk {
                want[[i, j]] += a[[i, l]] * b[[l, j]];
            }
        }
    }
    assert!(close(&one("matMul", &[&a, &b]), &want));
    let at = m2(&a).t().to_owned().into_dyn();
    let bt = m2(&b).t().to_owned().into_dyn();
    assert!(close(&one("matMulTN", &[&at, &b]), &want));
    assert!(close(&one("matMulNT", &[&a, &bt]), &want));
    assert!(close(&one("matMulTT", &[&at, &bt]), &want));
    // matMulTN against transpose + dot.
    let c = random(&mut rng, &[kk, n]);
    let tn = one("matMulTN", &[&a.t().to_owned().into_dyn(), &c]);
    assert!(close(&tn, &m2(&a).dot(&m2(&c)).into_dyn()));
    assert!(close(&one("matMulTT", &[&c, &bt]), &m2(&c).t().dot(&m2(&b)).into_dyn()));
    // Operands in column-major layout give the same, row-major, result.
    let af = a.t().as_standard_layout().t().to_owned();
    assert!(!af.is_standard_layout());
    let r = one("matMul", &[&af, &b]);
    assert!(r.is_standard_layout() && close(&r, &want));
}

#[test]
fn elementwise_kernels_match_scalar_formulas() {
    let mut rng = rng();
    let a = random(&mut rng, &[3, 4]);
    let b = random(&mut rng, &[3, 4]);
    let zip = |f: fn(f64, f64) -> f64| Zip::from(&a).and(&b).map_collect(|&x, &y| f(x, y));
    assert_eq!(one("matAdd", &[&a, &b]), &a + &b);
    assert_eq!(one("matSub", &[&a, &b]), &a - &b);
    assert_eq!(one("elemMul", &[&a, &b]), &a * &b);
    assert_eq!(one("max", &[&a, &b]), zip(|x, y| if x > y { x } else { y }));
    assert_eq!(one("min", &[&a, &b]), zip(|x, y| if x < y { x } else { y }));
    assert_eq!(one("reluGrad", &[&a, &b]), zip(|g, z| if z > 0.0 { g } else { 0.0 }));
    assert_eq!(one("sgdStep(0.5)", &[&a, &b]), zip(|w, g| w - 0.5 * g));
    assert_eq!(one("relu", &[&a]), a.mapv(|x| x.max(0.0)));
    assert!(close(&one("sigmoid", &[&a]), &a.mapv(|x| 1.0 / (1.0 + (-x).exp()))));
    assert_eq!(one("scale(2.5)", &[&a]), &a * 2.5);
    assert_eq!(one("neg", &[&a]), -&a);
    // Vectors too.
    let v = random(&mut rng, &[5]);
    assert_eq!(one("matAdd", &[&v, &v]), &v * 2.0);
    // reluGrad by hand.
    let g = Block::from_shape_vec(IxDyn(&[4]), vec![1.0, 2.0, 3.0, 4.0]).unwrap();
    let z = Block::from_shape_vec(IxDyn(&[4]), vec![-1.0, 0.0, 0.5, 7.0]).unwrap();
    assert_eq!(one("reluGrad", &[&g, &z]).into_raw_vec_and_offset().0, vec![0.0, 0.0, 3.0, 4.0]);
    // sgdStep by hand.
    let w = Block::from_shape_vec(IxDyn(&[2]), vec![1.0, 1.0]).unwrap();
    let gr = Block::from_shape_vec(IxDyn(&[2]), vec![10.0, -10.0]).unwrap();
    assert_eq!(one("sgdStep(0.1)", &[&w, &gr]).into_raw_vec_and_offset().0, vec![0.0, 2.0]);
}

#[test]
fn structural_kernels() {
    let mut rng = rng();
    let a = random(&mut rng, &[4, 4]);
    let d = one("diag", &[&a]);
    assert_eq!(d.shape(), &[4]);
    for i in 0..4 {
        assert_eq!(d[[i]], a[[i, i]]);
    }
    let r = random(&mut rng, &[3, 5]);
    let t = one("transpose", &[&r]);
    assert_eq!(t.shape(), &[5, 3]);
    assert!(t.is_standard_layout());
    for i in 0..3 {
        for j in 0..5 {
            assert_eq!(t[[j, i]], r[[i, j]]);
        }
    }
    let v = random(&mut rng, &[5]);
    let add = one("matVecAdd", &[&r, &v]);
    let sub = one("matVecSub", &[&r, &v]);
    let rs = one("rowSum", &[&r]);
    let cs = one("colSum", &[&r]);
    for i in 0..3 {
        let mut row = 0.0;
        for j in 0..5 {
            assert_eq!(add[[i, j]], r[[i, j]] + v[[j]]);
            assert_eq!(sub[[i, j]], r[[i, j]] - v[[j]]);
            row += r[[i, j]];
        }
        assert!((rs[[i]] - row).abs() < 1e-12);
    }
    for j in 0..5 {
        let col: f64 = (0..3).map(|i| r[[i, j]]).sum();
        assert!((cs[[j]] - col).abs() < 1e-12);
    }
}

fn row_argmin(row: ArrayView1<'_, f64>) -> (f64, usize) {
    let mut best = 0;
    for j in 0..row.len() {
        if row[j] < row[best] {
            best = j;
        }
    }
    (row[best], best)
}

#[test]
fn min_index_and_min_pair() {
    let a = Block::from_shape_vec(IxDyn(&[3, 4]), vec![3.0, 1.0, 2.0, 1.0, 5.0, 6.0, 7.0, 4.0, -1.0, 0.0, -2.0, 9.0])
        .unwrap();
    let mi = one("minIndex", &[&a]);
    assert_eq!(mi.into_raw_vec_and_offset().0, vec![1.0, 1.0, 4.0, 3.0, -2.0, 2.0]);
    let p = Block::from_shape_vec(IxDyn(&[3, 2]), vec![1.0, 5.0, 2.0, 0.0, 3.0, 3.0]).unwrap();
    let q = Block::from_shape_vec(IxDyn(&[3, 2]), vec![1.0, 4.0, 1.0, 9.0, 4.0, 1.0]).unwrap();
    let want = vec![1.0, 4.0, 1.0, 9.0, 3.0, 3.0];
    assert_eq!(one("minPair", &[&p, &q]).into_raw_vec_and_offset().0, want);
    assert_eq!(one("minPair", &[&q, &p]).into_raw_vec_and_offset().0, want);
    assert_eq!(one("offsetIndex(10)", &[&p]).into_raw_vec_and_offset().0, vec![1.0, 15.0, 2.0, 10.0, 3.0, 13.0]);

    // Distributed arg-min: minIndex per column block, offset, fold minPair.
    let mut rng = rng();
    let x = random(&mut rng, &[5, 12]);
    let blocks: Vec<Block> = apply(&k("tile(1,4)"), &[&x]).unwrap();
    let partial: Vec<Block> = blocks
        .iter()
        .enumerate()
        .map(|(i, b)| one(&format!("compose(offsetIndex({}),minIndex)", 4 * i), &[b]))
        .collect();
    let refs: Vec<&Block> = partial.iter().rev().collect();
    let got = fold(&k("minPair"), &refs).unwrap();
    for (i, row) in m2(&x).rows().into_iter().enumerate() {
        let (v, j) = row_argmin(row);
        assert_eq!((got[[i, 0]], got[[i, 1]]), (v, j as f64));
    }
}

#[test]
fn tile_and_concat_round_trip() {
    let mut rng = rng();
    let x = random(&mut rng, &[4, 6, 2]);
    for (dim, size) in [(0, 2), (1, 3), (1, 1), (2, 2), (0, 4)] {
        let kernel = k(&format!("tile({dim},{size})"));
        let pieces = apply(&kernel, &[&x]).unwrap();
        assert_eq!(pieces.len(), x.shape()[dim] / size);
        for (i, p) in pieces.iter().enumerate() {
            assert_eq!(p, &x.slice_axis(Axis(dim), Slice::from(i * size..(i + 1) * size)));
        }
        // Any order of pieces.
        let indexed: Vec<(u32, &Block)> = pieces.iter().enumerate().rev().map(|(i, p)| (i as u32, p)).collect();
        let back = concat_pieces(&indexed, dim, pieces.len() as u32).unwrap();
        assert_eq!(back, x);
    }
}

#[test]
fn concat_zero_fills_and_rejects_bad_indices() {
    let a = Block::from_elem(IxDyn(&[2, 2]), 1.0);
    let b = Block::from_elem(IxDyn(&[2, 2]), 2.0);
    let out = concat_pieces(&[(2, &b), (0, &a)], 0, 4).unwrap();
    assert_eq!(out.shape(), &[8, 2]);
    let rows: Vec<f64> = (0..8).map(|i| out[[i, 0]]).collect();
    assert_eq!(rows, vec![1.0, 1.0, 0.0, 0.0, 2.0, 2.0, 0.0, 0.0]);
    assert!(matches!(concat_pieces(&[(4, &a)], 0, 4), Err(KernelError::BadUse(_))));
    assert!(matches!(concat_pieces(&[(1, &a), (1, &b)], 0, 4), Err(KernelError::BadUse(_))));
    assert!(matches!(concat_pieces(&[], 0, 4), Err(KernelError::BadUse(_))));
    assert!(matches!(concat_pieces(&[(0, &a)], 2, 4), Err(KernelError::BadShape(_))));
    let c = Block::zeros(IxDyn(&[2, 3]));
    assert!(matches!(concat_pieces(&[(0, &a), (1, &c)], 0, 4), Err(KernelError::BadShape(_))));
}

#[test]
fn compositions() {
    let mut rng = rng();
    let a = random(&mut rng, &[4, 4]);
    let b = random(&mut rng, &[4, 4]);
    let sum = one("matAdd", &[&a, &b]);
    assert_eq!(one("compose(relu,matAdd)", &[&a, &b]), one("relu", &[&sum]));
    assert_eq!(one("compose(diag,matAdd)", &[&a, &b]), one("diag", &[&sum]));
    assert_eq!(one("compose(transpose,max)", &[&a, &b]), one("transpose", &[&one("max", &[&a, &b])]));
    let prod = one("matMul", &[&a, &b]);
    assert_eq!(one("compose(diag,matMul)", &[&a, &b]), one("diag", &[&prod]));
    assert_eq!(one("compose(sigmoid,matMul)", &[&a, &b]), one("sigmoid", &[&prod]));
    let nested = one("compose(scale(3),compose(neg,sgdStep(0.1)))", &[&a, &b]);
    let step = one("sgdStep(0.1)", &[&a, &b]);
    assert_eq!(nested, one("scale(3)", &[&one("neg", &[&step])]));
    assert_eq!(one("compose(relu,neg)", &[&a]), one("relu", &[&one("neg", &[&a])]));
    let pieces = apply(&k("compose(tile(0,2),matAdd)"), &[&a, &b]).unwrap();
    assert_eq!(pieces, apply(&k("tile(0,2)"), &[&sum]).unwrap());
}

#[test]
fn fold_is_a_left_fold() {
    let mut rng = rng();
    let bs: Vec<Block> = (0..4).map(|_| random(&mut rng, &[3, 3])).collect();
    let refs: Vec<&Block> = bs.iter().collect();
    assert_eq!(fold(&k("matAdd"), &refs[..1]).unwrap(), bs[0]);
    let want = one("matSub", &[&one("matSub", &[&one("matSub", &[&bs[0], &bs[1]]), &bs[2]]), &bs[3]]);
    assert_eq!(fold(&k("matSub"), &refs).unwrap(), want);
    assert!(matches!(fold(&k("matAdd"), &[]), Err(KernelError::BadUse(_))));
    assert!(matches!(fold(&k("relu"), &refs), Err(KernelError::BadUse(_))));
    assert!(matches!(fold(&k("concat(0,0)"), &refs), Err(KernelError::BadUse(_))));
    assert!(matches!(fold(&k("nope"), &refs), Err(KernelError::Unknown(_))));
    let v = random(&mut rng, &[3]);
    assert!(matches!(fold(&k("matAdd"), &[&bs[0], &v]), Err(KernelError::BadShape(_))));
}

#[test]
fn errors_not_panics() {
    let mut rng = rng();
    let a = random(&mut rng, &[4, 3]);
    let b = random(&mut rng, &[5, 2]);
    let v = random(&mut rng, &[4]);
    let e = apply(&k("matMul"), &[&a, &b]).unwrap_err();
    assert_eq!(e, KernelError::BadShape("matMul: inner dimensions differ: [4, 3] × [5, 2]".into()));
    assert!(matches!(apply(&k("matMul"), &[&a]), Err(KernelError::BadUse(_))));
    assert!(matches!(apply(&k("relu"), &[&a, &a]), Err(KernelError::BadUse(_))));
    assert!(matches!(apply(&k("relu"), &[]), Err(KernelError::BadUse(_))));
    assert!(matches!(apply(&k("matAdd"), &[&a, &b]), Err(KernelError::BadShape(_))));
    assert!(matches!(apply(&k("matAdd"), &[&a, &v]), Err(KernelError::BadShape(_))));
    assert!(matches!(apply(&k("diag"), &[&a]), Err(KernelError::BadShape(_))));
    assert!(matches!(apply(&k("diag"), &[&v]), Err(KernelError::BadShape(_))));
    assert!(matches!(apply(&k("matVecAdd"), &[&a, &v]), Err(KernelError::BadShape(_))));
    assert!(matches!(apply(&k("minPair"), &[&a, &a]), Err(KernelError::BadShape(_))));
    assert!(matches!(apply(&k("offsetIndex(1)"), &[&a]), Err(KernelError::BadShape(_))));
    assert!(matches!(apply(&k("minIndex"), &[&Block::zeros(IxDyn(&[3, 0]))]), Err(KernelError::BadShape(_))));
    let e = apply(&k("matmul"), &[&a, &b]).unwrap_err();
    assert_eq!(e.to_string(), "unknown kernel `matmul`; did you mean `matMul`?");
    let e = apply(&k("tile(1,2)"), &[&a]).unwrap_err();
    assert_eq!(e, KernelError::BadShape("tile(1,2): array dim 1 has bound 3, not a multiple of 2".into()));
    assert!(matches!(apply(&k("tile(2,1)"), &[&a]), Err(KernelError::BadShape(_))));
    assert!(matches!(apply(&k("tile(1)"), &[&a]), Err(KernelError::BadUse(_))));
    assert!(matches!(apply(&k("compose(matAdd,relu)"), &[&a]), Err(KernelError::BadUse(_))));
    assert!(matches!(apply(&k("compose(relu,tile(0,2))"), &[&a]), Err(KernelError::BadUse(_))));
    assert!(matches!(apply(&k("compose(diag,matMul)"), &[&a, &a]), Err(KernelError::BadShape(_))));
    // A hand-built reference with a non-numeric argument.
    let bad = KernelRef::Named { name: "scale".into(), args: vec!["x".into()] };
    assert!(matches!(apply(&bad, &[&a]), Err(KernelError::BadUse(_))));
}

#[test]
fn empty_blocks() {
    let z = Block::zeros(IxDyn(&[0, 3]));
    assert_eq!(one("rowSum", &[&z]).shape(), &[0]);
    assert_eq!(one("colSum", &[&z]).into_raw_vec_and_offset().0, vec![0.0; 3]);
    assert_eq!(one("matMulTN", &[&z, &z]), Block::zeros(IxDyn(&[3, 3])));
}

proptest::proptest! {
    #[test]
    fn prop_elementwise_fusion_matches_sequential(
        seed in 0u64..1000, m in 1usize..5, n in 1usize..5, c in -3.0f64..3.0,
    ) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let a = random(&mut rng, &[m, n]);
        let b = random(&mut rng, &[m, n]);
        let scale = format!("scale({c})");
        for inner in ["matAdd", "matSub", "elemMul", "max", "min", "reluGrad", "sgdStep(0.3)"] {
            let mid = one(inner, &[&a, &b]);
            for outer in ["relu", "neg", "sigmoid", scale.as_str()] {
                let fused = one(&format!("compose({outer},{inner})"), &[&a, &b]);
                proptest::prop_assert_eq!(&fused, &one(outer, &[&mid]));
            }
            if m == n {
                let fused = one(&format!("compose(diag,{inner})"), &[&a, &b]);
                proptest::prop_assert_eq!(&fused, &one("diag", &[&mid]));
            }
            let fused = one(&format!("compose(transpose,{inner})"), &[&a, &b]);
            proptest::prop_assert_eq!(&fused, &one("transpose", &[&mid]));
        }
    }

    #[test]
    fn prop_tile_concat_round_trip(seed in 0u64..1000, pieces in 1usize..5, size in 1usize..4, dim in 0usize..2) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut shape = vec![2, 3];
        shape[dim] = pieces * size;
        let x = random(&mut rng, &shape);
        let out = apply(&k(&format!("tile({dim},{size})")), &[&x]).unwrap();
        proptest::prop_assert_eq!(out.len(), pieces);
        let indexed: Vec<(u32, &Block)> = out.iter().enumerate().map(|(i, p)| (i as u32, p)).collect();
        proptest::prop_assert_eq!(concat_pieces(&indexed, dim, pieces as u32).unwrap(), x);
    }
}

/// The batched-GEMM path of einSum against the loops, and known values.
#[test]
fn einsum_paths_agree() {
    let mut rng = rng();
    let a = random(&mut rng, &[3, 4]);
    let b = random(&mut rng, &[4, 5]);
    assert!(close(&one("einSum(ij_jk_ik)", &[&a, &b]), &one("matMul", &[&a, &b])));
    let c = random(&mut rng, &[4, 3]);
    assert!(close(&one("einSum(ji_jk_ik)", &[&b, &c]), &one("matMulTN", &[&b, &c])));
    let sq = random(&mut rng, &[4, 4]);
    assert!(close(&one("einSum(ii_i)", &[&sq]), &one("diag", &[&sq])));
    assert!(close(&one("einSum(ij_ji)", &[&a]), &one("transpose", &[&a])));
    assert!(close(&one("einSum(ij_i)", &[&a]), &one("rowSum", &[&a])));
    let trace = one("einSum(ii_)", &[&sq]);
    assert_eq!(trace.shape(), &[] as &[usize]);
    assert!((trace[IxDyn(&[])] - (0..4).map(|i| sq[[i, i]]).sum::<f64>()).abs() < 1e-12);
    let dims = |l: &str| l.chars().map(|c| 2 + (c as usize - 'a' as usize) % 3).collect::<Vec<usize>>();
    for spec in [
        "ij_jk_ik",
        "ij_jk_ki",
        "bij_bjk_bik",
        "ijk_jkl_il",
        "i_j_ij",
        "i_i_",
        "i_i_i",
        "ij_ij_",
        "ab_cd_dcba",
        "abc_cab_b",
        "ab_b_a",
        "_ab_ba",
        "ab__ab",
        "__",
        "abc_bd_adc",
        "ab_ab_ba",
    ] {
        let spec = EinSumSpec::parse(spec).unwrap();
        let ins: Vec<Block> =
            spec.inputs.iter().map(|l| random(&mut rng, &dims(&l.iter().collect::<String>()))).collect();
        let refs: Vec<&Block> = ins.iter().collect();
        let sizes = spec.sizes(&refs.iter().map(|b| b.shape()).collect::<Vec<_>>()).unwrap();
        let fast = einsum(&spec, &refs).unwrap();
        let slow = einsum_loops(&spec, &sizes, &refs);
        assert!(fast.is_standard_layout());
        assert!(close(&fast, &slow), "{spec}: {fast} vs {slow}");
        assert!(close(&apply(&spec.kernel(), &refs).unwrap()[0], &slow), "{spec}");
    }
    // Shapes the spec does not accept are the catalog's errors.
    assert!(matches!(apply(&k("einSum(ij_jk_ik)"), &[&a, &a]), Err(KernelError::BadShape(_))));
}

#[test]
fn nonlinear_kernels_follow_numpy() {
    let mut rng = rng();
    let a = random(&mut rng, &[3, 4]);
    let b = random(&mut rng, &[3, 4]).mapv(|x| x + 2.0);
    assert!(close(&one("exp", &[&a]), &a.mapv(f64::exp)));
    assert!(close(&one("log", &[&b]), &b.mapv(f64::ln)));
    assert!(close(&one("sqrt", &[&b]), &b.mapv(f64::sqrt)));
    assert!(close(&one("shift(0.5)", &[&a]), &a.mapv(|x| x + 0.5)));
    assert!(close(&one("elemDiv", &[&a, &b]), &(&a / &b)));
    let m = m2(&a);
    let rows = one("rowMax", &[&a]);
    let cols = one("colMax", &[&a]);
    for i in 0..3 {
        assert_eq!(rows[[i]], m.row(i).iter().cloned().fold(f64::MIN, f64::max));
    }
    for j in 0..4 {
        assert_eq!(cols[[j]], m.column(j).iter().cloned().fold(f64::MIN, f64::max));
    }
    // A row and a column vector broadcast like numpy's a * v and a / v[:, None].
    let v = random(&mut rng, &[4]);
    let c = random(&mut rng, &[3]);
    let mv = one("matVecMul", &[&a, &v]);
    let cd = one("matColVecDiv", &[&a, &c]);
    let cs = one("matColVecSub", &[&a, &c]);
    for i in 0..3 {
        for j in 0..4 {
            assert_eq!(mv[[i, j]], a[[i, j]] * v[[j]]);
            assert_eq!(cd[[i, j]], a[[i, j]] / c[[i]]);
            assert_eq!(cs[[i, j]], a[[i, j]] - c[[i]]);
        }
    }
    // NaN loses to a number; an empty row gives −∞ (max's identity).
    let nan = Block::from_shape_vec(IxDyn(&[1, 3]), vec![f64::NAN, 1.0, -2.0]).unwrap();
    assert_eq!(one("rowMax", &[&nan])[[0]], 1.0);
    assert_eq!(one("rowMax", &[&Block::zeros(IxDyn(&[2, 0]))]).into_raw_vec_and_offset().0, vec![f64::NEG_INFINITY; 2]);
    // rowMax distributes over max, as the catalog states.
    assert_eq!(one("compose(rowMax,max)", &[&a, &b]), one("max", &[&one("rowMax", &[&a]), &one("rowMax", &[&b])]));
    // A column vector of the wrong length is refused with both shapes.
    let err = apply(&k("matColVecDiv"), &[&a, &v]).unwrap_err().to_string();
    assert!(err.contains("[3, 4]") && err.contains("[4]"), "{err}");
}

fn vec_block(v: &[f64]) -> Block {
    Block::from_shape_vec(IxDyn(&[v.len()]), v.to_vec()).unwrap()
}

fn values(b: Block) -> Vec<f64> {
    b.as_standard_layout().iter().copied().collect()
}

/// Equal as numbers, with NaN equal to NaN and the sign of a zero compared.
fn same(got: &[f64], want: &[f64]) -> bool {
    got.len() == want.len()
        && got.iter().zip(want).all(|(g, w)| (g.is_nan() && w.is_nan()) || (g == w && g.signum() == w.signum()))
}

#[test]
fn numpy_binaries_broadcast_and_follow_numpy() {
    let nan = f64::NAN;
    // [3,1] × [4] → [3,4], numpy's broadcasting.
    let a = Block::from_shape_vec(IxDyn(&[3, 1]), vec![1.0, 2.0, 3.0]).unwrap();
    let b = vec_block(&[10.0, 20.0, 30.0, 40.0]);
    let d = one("sub", &[&a, &b]);
    assert_eq!(d.shape(), &[3, 4]);
    for i in 0..3 {
        for j in 0..4 {
            assert_eq!(d[[i, j]], a[[i, 0]] - b[[j]]);
        }
    }
    assert_eq!(one("add", &[&b, &a]).shape(), &[3, 4]);
    // A scalar block broadcasts against anything.
    let two = Block::from_elem(IxDyn(&[]), 2.0);
    assert_eq!(values(one("pow", &[&b, &two])), vec![100.0, 400.0, 900.0, 1600.0]);
    assert_eq!(values(one("div", &[&two, &b])), vec![0.2, 0.1, 2.0 / 30.0, 0.05]);
    assert_eq!(one("mul", &[&two, &two]).shape(), &[] as &[usize]);
    // maximum / minimum propagate NaN (max / min let it lose).
    let x = vec_block(&[nan, 1.0, 2.0, nan, -0.0]);
    let y = vec_block(&[0.0, nan, 1.0, nan, 0.0]);
    assert!(same(&values(one("maximum", &[&x, &y])), &[nan, nan, 2.0, nan, 0.0]));
    assert!(same(&values(one("minimum", &[&x, &y])), &[nan, nan, 1.0, nan, 0.0]));
    assert!(same(&values(one("max", &[&x, &y]))[..4], &[0.0, 1.0, 2.0, nan]));
    // Comparisons: 1 or 0, a NaN compares false (and unequal).
    let p = vec_block(&[1.0, 2.0, 3.0, nan, nan]);
    let q = vec_block(&[2.0, 2.0, 2.0, 1.0, nan]);
    assert_eq!(values(one("lt", &[&p, &q])), vec![1.0, 0.0, 0.0, 0.0, 0.0]);
    assert_eq!(values(one("le", &[&p, &q])), vec![1.0, 1.0, 0.0, 0.0, 0.0]);
    assert_eq!(values(one("gt", &[&p, &q])), vec![0.0, 0.0, 1.0, 0.0, 0.0]);
    assert_eq!(values(one("ge", &[&p, &q])), vec![0.0, 1.0, 1.0, 0.0, 0.0]);
    assert_eq!(values(one("eq", &[&p, &q])), vec![0.0, 1.0, 0.0, 0.0, 0.0]);
    assert_eq!(values(one("ne", &[&p, &q])), vec![1.0, 0.0, 1.0, 1.0, 1.0]);
    // where(c, x, y) = add(selectIf(c, x), selectElse(c, y)); a NaN c is true.
    let c = vec_block(&[1.0, 0.0, nan, -0.0, -3.0]);
    let xs = vec_block(&[5.0, 6.0, 7.0, 8.0, 9.0]);
    let ys = vec_block(&[-5.0, f64::INFINITY, nan, -8.0, f64::INFINITY]);
    let si = one("selectIf", &[&c, &xs]);
    let se = one("selectElse", &[&c, &ys]);
    assert_eq!(values(si.clone()), vec![5.0, 0.0, 7.0, 0.0, 9.0]);
    assert_eq!(values(se.clone()), vec![0.0, f64::INFINITY, 0.0, -8.0, 0.0]);
    assert_eq!(values(one("add", &[&si, &se])), vec![5.0, f64::INFINITY, 7.0, -8.0, 9.0]);
    // A scalar condition selects a whole block.
    assert_eq!(values(one("selectIf", &[&Block::from_elem(IxDyn(&[]), 0.0), &xs])), vec![0.0; 5]);
    // Shapes that do not broadcast: the catalog's error, both shapes named.
    let e = apply(&k("add"), &[&Block::zeros(IxDyn(&[3, 2])), &b]).unwrap_err().to_string();
    assert!(e.starts_with("add: ") && e.contains("[3, 2] and [4]"), "{e}");
}

#[test]
fn numpy_unary_maps_follow_numpy() {
    let (nan, inf) = (f64::NAN, f64::INFINITY);
    let x = vec_block(&[-2.5, -0.0, 0.0, 1.5, nan, -inf]);
    assert!(same(&values(one("sign", &[&x])), &[-1.0, 0.0, 0.0, 1.0, nan, -1.0]));
    assert!(same(&values(one("abs", &[&x])), &[2.5, 0.0, 0.0, 1.5, nan, inf]));
    assert!(same(&values(one("square", &[&x])), &[6.25, 0.0, 0.0, 2.25, nan, inf]));
    assert!(same(&values(one("floor", &[&x])), &[-3.0, -0.0, 0.0, 1.0, nan, -inf]));
    assert!(same(&values(one("ceil", &[&x])), &[-2.0, -0.0, 0.0, 2.0, nan, -inf]));
    assert!(same(&values(one("logicalNot", &[&x])), &[0.0, 1.0, 1.0, 0.0, 0.0, 0.0]));
    assert!(same(&values(one("recip", &[&x])), &[-0.4, -inf, inf, 1.0 / 1.5, nan, -0.0]));
    let pos = vec_block(&[0.25, 4.0, 0.0, 1e-10]);
    assert_eq!(values(one("rsqrt", &[&pos])), vec![2.0, 0.5, inf, 1.0 / 1e-10f64.sqrt()]);
    assert_eq!(values(one("log1p", &[&pos])), pos.iter().map(|v| v.ln_1p()).collect::<Vec<_>>());
    assert_eq!(values(one("expm1", &[&pos])), pos.iter().map(|v| v.exp_m1()).collect::<Vec<_>>());
    assert_eq!(values(one("tanh", &[&pos])), pos.iter().map(|v| v.tanh()).collect::<Vec<_>>());
    let e = values(one("erf", &[&vec_block(&[0.0, 10.0, -10.0, 0.5])]));
    assert_eq!(&e[..3], &[0.0, 1.0, -1.0]);
    assert!((e[3] - 0.520_499_877_813_046_5).abs() < 1e-15, "{}", e[3]);
    // powc: by squaring for integers up to 64, powf otherwise.
    let b = vec_block(&[1.5, -2.0, 0.0, nan, 3.0]);
    assert!(same(&values(one("powc(3)", &[&b])), &[3.375, -8.0, 0.0, nan, 27.0]));
    assert!(same(&values(one("powc(-2)", &[&b])), &[1.0 / 2.25, 0.25, inf, nan, 1.0 / 9.0]));
    assert!(same(&values(one("powc(0)", &[&b])), &[1.0, 1.0, 1.0, 1.0, 1.0]));
    assert!(same(&values(one("powc(0.5)", &[&b])), &[1.5f64.sqrt(), nan, 0.0, nan, 3.0f64.sqrt()]));
    assert_eq!(values(one("powc(64)", &[&vec_block(&[2.0])])), vec![2f64.powi(64)]);
    assert_eq!(values(one("powc(65)", &[&vec_block(&[2.0])])), vec![2f64.powf(65.0)]);
    // By squaring: x⁷ = ((1·x)·x²)·x⁴, the same products everywhere.
    let (x1, x2) = (1.1f64, 1.1f64 * 1.1);
    assert_eq!(scalar::powi(x1, 7), ((1.0 * x1) * x2) * (x2 * x2));
    assert_eq!(scalar::powi(2.0, -3), 0.125);
    // Rank 0 blocks, and compositions in one pass.
    let s = Block::from_elem(IxDyn(&[]), -3.0);
    assert_eq!(values(one("abs", &[&s])), vec![3.0]);
    let a = vec_block(&[0.5, -1.0]);
    assert_eq!(
        one("compose(tanh,compose(powc(2),matAdd))", &[&a, &a]),
        one("tanh", &[&one("powc(2)", &[&one("matAdd", &[&a, &a])])])
    );
}

#[test]
fn numpy_shape_kernels_round_trip() {
    let mut rng = rng();
    let x = random(&mut rng, &[2, 6, 3]);
    let split = one("splitAxis(1,3)", &[&x]);
    assert_eq!(split.shape(), &[2, 2, 3, 3]);
    for (i, j, kk) in (0..2).flat_map(|i| (0..6).flat_map(move |j| (0..3).map(move |kk| (i, j, kk)))) {
        assert_eq!(split[[i, j / 3, j % 3, kk]], x[[i, j, kk]]);
    }
    assert_eq!(one("mergeAxes(1)", &[&split]), x);
    assert_eq!(one("mergeAxes(0)", &[&x]).shape(), &[12, 3]);
    // A transposed (column-major) operand is merged in its logical order.
    let t = one("transpose", &[&random(&mut rng, &[3, 4])]);
    let tf = t.t().as_standard_layout().t().to_owned();
    assert_eq!(one("mergeAxes(0)", &[&tf]), t.into_shape_with_order(IxDyn(&[12])).unwrap());
    let e = one("expandDims(3)", &[&x]);
    assert_eq!(e.shape(), &[2, 6, 3, 1]);
    assert_eq!(one("squeezeAxis(3)", &[&e]), x);
    assert_eq!(one("expandDims(0)", &[&Block::from_elem(IxDyn(&[]), 4.0)]), Block::from_elem(IxDyn(&[1]), 4.0));
    assert_eq!(one("squeezeAxis(0)", &[&Block::from_elem(IxDyn(&[1]), 4.0)]), Block::from_elem(IxDyn(&[]), 4.0));
    // repeatAxis copies along the size-1 axis.
    let r = random(&mut rng, &[2, 1, 3]);
    let rep = one("repeatAxis(1,4)", &[&r]);
    assert_eq!(rep.shape(), &[2, 4, 3]);
    assert!(rep.is_standard_layout());
    for (i, j, kk) in (0..2).flat_map(|i| (0..4).flat_map(move |j| (0..3).map(move |kk| (i, j, kk)))) {
        assert_eq!(rep[[i, j, kk]], r[[i, 0, kk]]);
    }
    assert_eq!(one("repeatAxis(1,0)", &[&r]).shape(), &[2, 0, 3]);
    // concatAxis undoes a tile of two pieces.
    for axis in 0..3 {
        let size = x.shape()[axis];
        if size.is_multiple_of(2) {
            let halves = apply(&k(&format!("tile({axis},{})", size / 2)), &[&x]).unwrap();
            assert_eq!(one(&format!("concatAxis({axis})"), &[&halves[0], &halves[1]]), x, "axis {axis}");
        }
    }
    let empty = Block::zeros(IxDyn(&[2, 0, 3]));
    assert_eq!(one("concatAxis(1)", &[&empty, &x]), x);
    assert!(matches!(apply(&k("squeezeAxis(0)"), &[&x]), Err(KernelError::BadShape(_))));
}

#[test]
fn ein_max_and_min_reduce_like_row_max() {
    let mut rng = rng();
    let x = random(&mut rng, &[2, 3, 4]);
    let m = one("einMax(ijk_ki)", &[&x]);
    let n = one("einMin(ijk_ik)", &[&x]);
    assert_eq!(m.shape(), &[4, 2]);
    for i in 0..2 {
        for kk in 0..4 {
            let col: Vec<f64> = (0..3).map(|j| x[[i, j, kk]]).collect();
            assert_eq!(m[[kk, i]], col.iter().copied().fold(f64::NEG_INFINITY, f64::max));
            assert_eq!(n[[i, kk]], col.iter().copied().fold(f64::INFINITY, f64::min));
        }
    }
    // einMax(ij_i) is rowMax, NaN rows included; an empty reduction is ∓∞.
    let nan = f64::NAN;
    let r = Block::from_shape_vec(IxDyn(&[3, 2]), vec![nan, 1.0, nan, nan, -2.0, 5.0]).unwrap();
    assert_eq!(values(one("einMax(ij_i)", &[&r])), values(one("rowMax", &[&r])));
    assert_eq!(values(one("einMax(ij_i)", &[&r])), vec![1.0, f64::NEG_INFINITY, 5.0]);
    assert_eq!(values(one("einMin(ij_i)", &[&r])), vec![1.0, f64::INFINITY, -2.0]);
    let z = Block::zeros(IxDyn(&[2, 0]));
    assert_eq!(values(one("einMax(ij_i)", &[&z])), vec![f64::NEG_INFINITY; 2]);
    assert_eq!(values(one("einMin(ij_i)", &[&z])), vec![f64::INFINITY; 2]);
    assert_eq!(values(one("einMax(ij_)", &[&z])), vec![f64::NEG_INFINITY]);
    // Without a reduced letter: a selection (transpose, diagonal).
    let sq = random(&mut rng, &[3, 3]);
    assert_eq!(one("einMax(ij_ji)", &[&sq]), one("transpose", &[&sq]));
    assert_eq!(one("einMin(ii_i)", &[&sq]), one("diag", &[&sq]));
    assert_eq!(values(one("einMax(ii_)", &[&sq])), vec![(0..3).map(|i| sq[[i, i]]).fold(f64::NEG_INFINITY, f64::max)]);
}
