//! The thread executor's kernels against the reference kernels: every catalog
//! kernel and a set of compositions (fused elementwise chains, selections of
//! elementwise programs, products with elementwise tails, distributed and
//! sequential compositions), in f64 (elementwise results bit-identical) and
//! f32; errors are the reference's.

use ndarray::IxDyn;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tra_executor::kernels as reference;
use tra_executor::reference::Block as RefBlock;
use tra_executor::threads::kernels::{concat_pieces, fold, FastKernel};
use tra_executor::threads::{Block, Elem, Pool};
use tra_optimizer::kernel::{catalog, KernelRef};

fn k(s: &str) -> KernelRef {
    KernelRef::parse(s).unwrap()
}

fn random(rng: &mut ChaCha8Rng, shape: &[usize]) -> RefBlock {
    RefBlock::from_shape_fn(IxDyn(shape), |_| rng.random_range(-2.0..2.0))
}

fn to_fast<T: Elem>(pool: &Pool<T>, b: &RefBlock) -> Block<T> {
    pool.from_array(&b.view(), T::from_f64)
}

fn close(want: &RefBlock, got: &RefBlock, tol: f64) -> Result<(), String> {
    if want.shape() != got.shape() {
        return Err(format!("shape {:?} expected, {:?} got", want.shape(), got.shape()));
    }
    for (i, (&w, &g)) in want.iter().zip(got.iter()).enumerate() {
        let ok = w == g || (w.is_nan() && g.is_nan()) || (w - g).abs() <= tol * (1.0 + w.abs());
        if !ok {
            return Err(format!("element {i}: expected {w}, got {g}"));
        }
    }
    Ok(())
}

fn check<T: Elem>(kernel: &str, shapes: &[&[usize]], tol: f64, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let pool = Pool::<T>::new();
    let ins: Vec<RefBlock> = shapes.iter().map(|s| random(&mut rng, s)).collect();
    // The reference sees the values the fast kernel sees (rounded to T).
    let ins: Vec<RefBlock> = ins.iter().map(|b| b.mapv(|x| T::from_f64(x).to_f64())).collect();
    let refs: Vec<&RefBlock> = ins.iter().collect();
    let want = reference::apply(&k(kernel), &refs);
    let fast: Vec<Block<T>> = ins.iter().map(|b| to_fast(&pool, b)).collect();
    let frefs: Vec<&Block<T>> = fast.iter().collect();
    let got = FastKernel::new(&k(kernel)).apply(&pool, &frefs);
    match (want, got) {
        (Ok(w), Ok(g)) => {
            assert_eq!(w.len(), g.len(), "{kernel}: number of blocks");
            for (w, g) in w.iter().zip(&g) {
                let g = g.view().mapv(|x| x.to_f64());
                close(w, &g, tol).unwrap_or_else(|e| panic!("{kernel} ({}): {e}", T::DTYPE));
            }
        }
        (Err(w), Err(g)) => assert_eq!(w, g, "{kernel}: errors differ"),
        (w, g) => panic!("{kernel}: reference {:?}, fast {:?}", w.map(|_| ()), g.map(|_| ())),
    }
}

fn check_both(kernel: &str, shapes: &[&[usize]], exact: bool) {
    for seed in 0..3 {
        check::<f64>(kernel, shapes, if exact { 0.0 } else { 1e-12 }, seed);
        check::<f32>(kernel, shapes, if exact { 1e-6 } else { 1e-5 }, seed);
    }
}

/// For every catalog entry: valid operand shapes, and whether the fast
/// kernel must be bit-identical.
fn sample(name: &str) -> (String, Vec<Vec<usize>>, bool) {
    let s = |v: &[&[usize]]| v.iter().map(|x| x.to_vec()).collect::<Vec<_>>();
    let (k, sh, exact) = match name {
        "matMul" => ("matMul", s(&[&[5, 7], &[7, 3]]), false),
        "matMulTN" => ("matMulTN", s(&[&[7, 5], &[7, 3]]), false),
        "matMulNT" => ("matMulNT", s(&[&[5, 7], &[3, 7]]), false),
        "matMulTT" => ("matMulTT", s(&[&[7, 5], &[3, 7]]), false),
        "matAdd" | "matSub" | "elemMul" | "max" | "min" | "reluGrad" => (name, s(&[&[33, 17], &[33, 17]]), true),
        "sgdStep" => ("sgdStep(0.1)", s(&[&[300], &[300]]), true),
        "relu" | "sigmoid" | "neg" => (name, s(&[&[3, 4, 5]]), true),
        "scale" => ("scale(2.5)", s(&[&[600]]), true),
        "diag" => ("diag", s(&[&[6, 6]]), true),
        "transpose" => ("transpose", s(&[&[37, 70]]), true),
        "matVecAdd" | "matVecSub" => (name, s(&[&[4, 9], &[9]]), true),
        "rowSum" | "colSum" => (name, s(&[&[6, 9]]), false),
        "minIndex" => ("minIndex", s(&[&[5, 8]]), true),
        "minPair" => ("minPair", s(&[&[6, 2], &[6, 2]]), true),
        "offsetIndex" => ("offsetIndex(8)", s(&[&[6, 2]]), true),
        "tile" => ("tile(1,2)", s(&[&[3, 8]]), true),
        "concat" => ("concat(0,1)", s(&[&[3, 2], &[3, 2]]), true),
        "einSum" => ("einSum(ij_jk_ik)", s(&[&[5, 7], &[7, 3]]), false),
        "exp" | "log" | "sqrt" => (name, s(&[&[3, 4, 5]]), true),
        "shift" => ("shift(-0.25)", s(&[&[300]]), true),
        "elemDiv" => (name, s(&[&[33, 17], &[33, 17]]), true),
        "rowMax" | "colMax" => (name, s(&[&[6, 9]]), true),
        "matVecMul" | "matVecDiv" => (name, s(&[&[4, 9], &[9]]), true),
        "matColVecAdd" | "matColVecSub" | "matColVecMul" | "matColVecDiv" => (name, s(&[&[4, 9], &[4]]), true),
        // Broadcast [3,1]×[4] runs the reference kernel; one shape and a
        // scalar operand run the fast loops (compositions_match_the_reference).
        "add" | "sub" | "mul" | "div" | "pow" | "maximum" | "minimum" | "lt" | "le" | "gt" | "ge" | "eq" | "ne"
        | "selectIf" | "selectElse" => (name, s(&[&[3, 1], &[4]]), true),
        "concatAxis" => ("concatAxis(1)", s(&[&[3, 2, 4], &[3, 5, 4]]), true),
        "abs" | "tanh" | "erf" | "log1p" | "expm1" | "recip" | "rsqrt" | "sign" | "square" | "floor" | "ceil"
        | "logicalNot" => (name, s(&[&[3, 4, 5]]), true),
        "powc" => ("powc(3)", s(&[&[300]]), true),
        "expandDims" => ("expandDims(1)", s(&[&[3, 4]]), true),
        "squeezeAxis" => ("squeezeAxis(1)", s(&[&[3, 1, 4]]), true),
        "mergeAxes" => ("mergeAxes(1)", s(&[&[3, 4, 2]]), true),
        "splitAxis" => ("splitAxis(1,2)", s(&[&[3, 4]]), true),
        "repeatAxis" => ("repeatAxis(1,3)", s(&[&[2, 1, 4]]), true),
        "einMax" => ("einMax(ijk_ki)", s(&[&[2, 3, 4]]), true),
        "einMin" => ("einMin(ijk_ik)", s(&[&[2, 3, 4]]), true),
        other => panic!("no sample for catalog entry `{other}`"),
    };
    (k.to_string(), sh, exact)
}

#[test]
fn every_catalog_kernel_matches_the_reference() {
    for info in catalog() {
        let (kernel, shapes, exact) = sample(info.name);
        let sh: Vec<&[usize]> = shapes.iter().map(|s| s.as_slice()).collect();
        check_both(&kernel, &sh, exact);
    }
}

#[test]
fn compositions_match_the_reference() {
    let sq: &[&[usize]] = &[&[9, 9], &[9, 9]];
    let rect: &[&[usize]] = &[&[13, 40], &[13, 40]];
    for (kernel, shapes, exact) in [
        ("compose(relu,matAdd)", rect, true),
        ("compose(sigmoid,elemMul)", rect, true),
        ("compose(scale(3),compose(neg,sgdStep(0.1)))", rect, true),
        ("compose(relu,compose(scale(-2),max))", rect, true),
        ("compose(diag,matAdd)", sq, true),
        ("compose(diag,reluGrad)", sq, true),
        ("compose(diag,compose(relu,matSub))", sq, true),
        ("compose(relu,compose(diag,matAdd))", sq, true),
        ("compose(transpose,max)", rect, true),
        ("compose(neg,compose(transpose,min))", rect, true),
        ("compose(diag,matMul)", sq, false),
        ("compose(sigmoid,matMul)", sq, false),
        ("compose(relu,matMulTN)", sq, false),
        ("compose(tile(0,3),matAdd)", sq, true),
        ("compose(rowSum,matAdd)", rect, false),
        ("compose(colSum,matSub)", rect, false),
        ("compose(offsetIndex(2),minPair)", &[&[6, 2], &[6, 2]], true),
        ("compose(diag,transpose)", &[&[9, 9]], true),
        ("compose(transpose,relu)", &[&[9, 20]], true),
        ("compose(relu,neg)", &[&[9, 20]], true),
        ("compose(offsetIndex(4),minIndex)", &[&[5, 7]], true),
        ("compose(relu,tile(0,9))", &[&[9, 4]], true),
        ("minIndex", &[&[7]], true),
        ("compose(minIndex,rowSum)", &[&[6, 5]], false),
        ("einSum(ii_i)", &[&[6, 6]], true),
        ("compose(relu,einSum(bij_bjk_bik))", &[&[2, 3, 4], &[2, 4, 5]], false),
        ("compose(exp,matSub)", rect, true),
        ("compose(log,compose(sigmoid,matSub))", rect, true),
        ("compose(neg,elemDiv)", rect, true),
        ("compose(sqrt,compose(shift(1e-5),elemMul))", rect, true),
        ("compose(exp,matColVecSub)", &[&[9, 20], &[9]], true),
        ("compose(rowMax,max)", rect, true),
        ("compose(colMax,compose(exp,matAdd))", rect, true),
        ("rowMax", &[&[4, 0]], true),
        // numpy's maps fuse with the others.
        ("compose(tanh,compose(square,matAdd))", rect, true),
        ("compose(powc(3),compose(exp,matSub))", rect, true),
        ("compose(powc(-2),compose(abs,elemMul))", rect, true),
        ("compose(powc(0.5),compose(sign,matSub))", rect, true),
        ("compose(powc(2.5),elemDiv)", rect, true),
        ("compose(logicalNot,compose(floor,elemMul))", rect, true),
        ("compose(recip,compose(rsqrt,compose(ceil,max)))", rect, true),
        ("compose(expm1,compose(log1p,compose(erf,min)))", rect, true),
        ("compose(diag,compose(tanh,matAdd))", sq, true),
        ("compose(transpose,compose(erf,matSub))", rect, true),
        ("compose(abs,matMul)", sq, false),
        // Broadcasting binaries: one shape and a scalar in the fast loops,
        // the rest by the reference kernel; compositions in sequence.
        ("add", rect, true),
        ("pow", rect, true),
        ("selectIf", rect, true),
        ("maximum", &[&[], &[13, 40]], true),
        ("lt", &[&[13, 40], &[]], true),
        ("selectElse", &[&[], &[]], true),
        ("div", &[&[], &[0, 3]], true),
        ("mul", &[&[5, 1, 3], &[4, 1]], true),
        ("ge", &[&[1], &[6]], true),
        ("compose(relu,sub)", &[&[9, 1], &[20]], true),
        ("compose(tanh,mul)", &[&[], &[9, 20]], true),
        ("compose(transpose,add)", &[&[9, 20], &[20]], true),
        // Shape kernels on every edge: rank 0, empty axes.
        ("expandDims(0)", &[&[]], true),
        ("squeezeAxis(0)", &[&[1]], true),
        ("mergeAxes(0)", &[&[0, 5]], true),
        ("splitAxis(0,3)", &[&[0]], true),
        ("repeatAxis(0,0)", &[&[1, 3]], true),
        ("repeatAxis(2,5)", &[&[2, 3, 1]], true),
        ("repeatAxis(0,4)", &[&[1]], true),
        ("concatAxis(0)", &[&[0, 3], &[2, 3]], true),
        ("concatAxis(1)", &[&[2, 0], &[2, 3]], true),
        ("concatAxis(1)", &[&[2, 3], &[2, 0]], true),
        ("concatAxis(0)", &[&[4], &[3]], true),
        ("compose(mergeAxes(0),concatAxis(1))", &[&[2, 3], &[2, 4]], true),
        ("compose(sigmoid,compose(einMax(ij_i),exp))", &[&[6, 9]], true),
        ("einMin(ij_)", &[&[0, 4]], true),
    ] {
        check_both(kernel, shapes, exact);
    }
}

#[test]
fn errors_are_the_references() {
    for (kernel, shapes) in [
        ("matMul", &[&[4usize, 3][..], &[5, 2]][..]),
        ("matAdd", &[&[2, 2], &[3, 2]]),
        ("diag", &[&[3, 4]]),
        ("relu", &[&[3], &[3]]),
        ("nope", &[&[3]]),
        ("matmul", &[&[3, 3], &[3, 3]]),
        ("tile(1,3)", &[&[2, 4]]),
        ("compose(diag,matMul)", &[&[4, 3], &[3, 2]]),
        ("compose(matAdd,relu)", &[&[4]]),
        ("concat(0,0)", &[&[2, 2], &[2, 2]]),
        ("minIndex", &[&[3, 0]]),
        ("add", &[&[3, 2], &[4]]),
        ("lt", &[&[3], &[4]]),
        ("concatAxis(1)", &[&[2, 3], &[3, 3]]),
        ("squeezeAxis(0)", &[&[2]]),
        ("mergeAxes(1)", &[&[2, 3]]),
        ("splitAxis(0,2)", &[&[3]]),
        ("repeatAxis(0,2)", &[&[]]),
        ("expandDims(2)", &[&[4]]),
        ("einMax(ij_i)", &[&[3]]),
        ("einMin(ij_jk_ik)", &[&[3, 3]]),
        ("powc", &[&[3]]),
    ] {
        check::<f64>(kernel, shapes, 0.0, 1);
    }
}

#[test]
fn fold_and_concat_match_the_reference() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let pool = Pool::<f64>::new();
    let bs: Vec<RefBlock> = (0..5).map(|_| random(&mut rng, &[4, 3])).collect();
    let fast: Vec<Block<f64>> = bs.iter().map(|b| to_fast(&pool, b)).collect();
    for kernel in ["matAdd", "matSub", "max", "minPair", "compose(relu,matAdd)"] {
        let (kr, fk) = (k(kernel), FastKernel::new(&k(kernel)));
        for n in 1..=5 {
            let refs: Vec<&RefBlock> = bs[..n].iter().collect();
            let frefs: Vec<&Block<f64>> = fast[..n].iter().collect();
            let (bs2, fast2);
            let (refs, frefs) = if kernel == "minPair" {
                bs2 = bs[..n].iter().map(|b| b.slice(ndarray::s![.., 0..2]).to_owned().into_dyn()).collect::<Vec<_>>();
                fast2 = bs2.iter().map(|b| to_fast(&pool, b)).collect::<Vec<_>>();
                (bs2.iter().collect::<Vec<_>>(), fast2.iter().collect::<Vec<_>>())
            } else {
                (refs, frefs)
            };
            match (reference::fold(&kr, &refs), fold(&fk, &pool, &frefs)) {
                (Ok(w), Ok(g)) => {
                    close(&w, &g.view().to_owned(), 0.0).unwrap_or_else(|e| panic!("fold {kernel} of {n}: {e}"))
                }
                (Err(w), Err(g)) => assert_eq!(w, g),
                (w, g) => panic!("fold {kernel}: {:?} vs {:?}", w.map(|_| ()), g.map(|_| ())),
            }
        }
    }
    // Concat, any order, with holes and errors.
    let x = random(&mut rng, &[4, 6, 2]);
    for (dim, size) in [(0, 2), (1, 3), (2, 1), (1, 1)] {
        let pieces = reference::apply(&k(&format!("tile({dim},{size})")), &[&x]).unwrap();
        let fp: Vec<Block<f64>> = pieces.iter().map(|b| to_fast(&pool, b)).collect();
        let count = pieces.len() as u32 + 1;
        let idx: Vec<(u32, &RefBlock)> = pieces.iter().enumerate().rev().skip(1).map(|(i, p)| (i as u32, p)).collect();
        let fidx: Vec<(u32, &Block<f64>)> = fp.iter().enumerate().rev().skip(1).map(|(i, p)| (i as u32, p)).collect();
        let want = reference::concat_pieces(&idx, dim, count).unwrap();
        let got = concat_pieces(&pool, &fidx, dim, count).unwrap();
        close(&want, &got.view().to_owned(), 0.0).unwrap();
    }
    let a = to_fast(&pool, &random(&mut rng, &[2, 2]));
    assert_eq!(
        concat_pieces(&pool, &[(1, &a), (1, &a)], 0, 4).unwrap_err(),
        reference::concat_pieces(&[(1, &a.view().to_owned()), (1, &a.view().to_owned())], 0, 4).unwrap_err()
    );
}

#[test]
fn large_products_and_accumulation() {
    // Sizes that exercise gemm's packing paths, and C += A·B.
    use tra_executor::threads::kernels::{matmul_into, MatMulKind};
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let (m, kk, n) = (70, 130, 50);
    let a = random(&mut rng, &[m, kk]);
    let b = random(&mut rng, &[kk, n]);
    let a2 = a.view().into_dimensionality::<ndarray::Ix2>().unwrap();
    let b2 = b.view().into_dimensionality::<ndarray::Ix2>().unwrap();
    let want = a2.dot(&b2);
    let mut out = vec![0.0f64; m * n];
    let kind = MatMulKind::of(&k("matMul")).unwrap();
    matmul_into(kind, &mut out, a.as_slice().unwrap(), a.shape(), b.as_slice().unwrap(), b.shape(), false);
    matmul_into(kind, &mut out, a.as_slice().unwrap(), a.shape(), b.as_slice().unwrap(), b.shape(), true);
    for (i, w) in want.iter().enumerate() {
        assert!((out[i] - 2.0 * w).abs() < 1e-9 * (1.0 + w.abs()), "element {i}");
    }
    // Split over rayon tasks: the same result.
    let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
    let mut par = vec![0.0f64; m * n];
    pool.install(|| {
        use tra_executor::threads::kernels::matmul_into_par;
        let (a, b) = (a.as_slice().unwrap(), b.as_slice().unwrap());
        matmul_into_par(kind, &mut par, a, &[m, kk], b, &[kk, n], false, 3);
        matmul_into_par(kind, &mut par, a, &[m, kk], b, &[kk, n], true, 3);
    });
    for (i, w) in want.iter().enumerate() {
        assert!((par[i] - 2.0 * w).abs() < 1e-9 * (1.0 + w.abs()), "element {i}");
    }
}

#[test]
fn composed_kernels_allocate_only_their_output() {
    // Fused in one pass: the only block a call takes from the pool is its
    // output (no temporary for the inner kernel's result).
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    let a = random(&mut rng, &[64, 64]);
    let b = random(&mut rng, &[64, 64]);
    for (kernel, out_len, fused) in [
        ("compose(relu,matAdd)", 64 * 64, true),
        ("compose(diag,matAdd)", 64, true),
        ("compose(relu,compose(diag,matSub))", 64, true),
        ("compose(transpose,compose(sigmoid,max))", 64 * 64, true),
        ("compose(scale(2),compose(neg,sgdStep(0.5)))", 64 * 64, true),
        ("compose(relu,matMul)", 64 * 64, true),
        ("compose(tanh,compose(powc(3),matAdd))", 64 * 64, true),
        ("compose(diag,matMul)", 64, false),
    ] {
        let pool = Pool::<f64>::new();
        let (fa, fb) = (to_fast(&pool, &a), to_fast(&pool, &b));
        let before = pool.stats();
        let out = FastKernel::new(&k(kernel)).apply1(&pool, &[&fa, &fb]).unwrap();
        assert_eq!(out.len(), out_len);
        let after = pool.stats();
        let taken = after.fresh_allocations - before.fresh_allocations;
        if fused {
            assert_eq!(taken, 1, "{kernel}: {taken} blocks taken, only the output expected");
            assert_eq!(after.fresh_bytes - before.fresh_bytes, (out_len * 8) as u64, "{kernel}");
        } else {
            assert_eq!(taken, 2, "{kernel}: the product, then its diagonal");
        }
    }
}

/// The numpy kernels on the values where formulas differ (NaN, ±0, ±∞,
/// integers, halves): the fast kernels give the reference's bits, in every
/// operand layout the fast loops cover.
#[test]
fn numpy_kernels_on_special_values_are_the_references_bits() {
    let specials = [f64::NAN, 0.0, -0.0, 1.0, -1.0, 2.0, 0.5, -2.5, f64::INFINITY, f64::NEG_INFINITY, 3.0, 1e-300];
    let n = specials.len();
    let pool = Pool::<f64>::new();
    // Every pair of special values: a[i, j] = s[i], b[i, j] = s[j].
    let a = RefBlock::from_shape_fn(IxDyn(&[n, n]), |ix| specials[ix[0]]);
    let b = RefBlock::from_shape_fn(IxDyn(&[n, n]), |ix| specials[ix[1]]);
    let bits = |blk: &RefBlock| blk.iter().map(|x| x.to_bits()).collect::<Vec<u64>>();
    let run = |kernel: &str, ins: &[&RefBlock]| {
        let want = reference::apply(&k(kernel), ins).unwrap().remove(0);
        let fast: Vec<Block<f64>> = ins.iter().map(|b| to_fast(&pool, b)).collect();
        let frefs: Vec<&Block<f64>> = fast.iter().collect();
        let got = FastKernel::new(&k(kernel)).apply1(&pool, &frefs).unwrap().view().to_owned();
        assert_eq!(want.shape(), got.shape(), "{kernel}");
        assert_eq!(bits(&want), bits(&got), "{kernel}: {want} vs {got}");
    };
    for name in ["add", "sub", "mul", "div", "pow", "maximum", "minimum", "lt", "le", "gt", "ge", "eq", "ne"]
        .into_iter()
        .chain(["selectIf", "selectElse"])
    {
        run(name, &[&a, &b]);
        for &s in &specials {
            let scalar = RefBlock::from_elem(IxDyn(&[]), s);
            run(name, &[&scalar, &a]);
            run(name, &[&a, &scalar]);
        }
    }
    for name in [
        "abs",
        "tanh",
        "erf",
        "log1p",
        "expm1",
        "recip",
        "rsqrt",
        "sign",
        "square",
        "floor",
        "ceil",
        "logicalNot",
        "powc(2)",
        "powc(3)",
        "powc(-3)",
        "powc(0)",
        "powc(64)",
        "powc(-64)",
        "powc(0.5)",
        "powc(65)",
        "powc(-1.5)",
    ] {
        run(name, &[&a]);
        run(&format!("compose({name},matAdd)"), &[&a, &b]);
    }
}
