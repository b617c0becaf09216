//! Tests of the catalog, the shape rules, parsing and einSum specs.

use super::*;

fn k(s: &str) -> KernelRef {
    KernelRef::parse(s).unwrap()
}

#[test]
fn catalog_names_are_unique_and_resolvable() {
    for (i, info) in catalog().iter().enumerate() {
        assert!(catalog()[..i].iter().all(|o| o.name != info.name), "duplicate {}", info.name);
        assert!(lookup(info.name).is_some());
        // Every entry decodes with well-formed arguments.
        let args: Vec<String> = if info.name == EINSUM {
            vec!["ij_jk_ik".to_string()]
        } else {
            info.params.iter().map(|_| "1".to_string()).collect()
        };
        resolve(info.name, &args).unwrap();
        assert!(info.arity == 1 || info.arity == 2);
        assert!(!info.assoc_comm || info.arity == 2, "{}", info.name);
        for g in info.distributes_over {
            let g = lookup(g).unwrap();
            assert_eq!(g.arity, 2, "{} distributes over a non-binary {}", info.name, g.name);
            assert_eq!(info.arity, 1);
        }
    }
    assert!(lookup("nope").is_none());
}

#[test]
fn parse_names_and_arguments() {
    assert_eq!(k("matMul"), KernelRef::named("matMul"));
    assert_eq!(k(" tile( 1 , 2 ) "), KernelRef::Named { name: "tile".into(), args: vec!["1".into(), "2".into()] });
    assert_eq!(k("scale(0.01)"), KernelRef::Named { name: "scale".into(), args: vec!["0.01".into()] });
    assert_eq!(k("scale(1e-3)").to_string(), "scale(0.001)");
    assert_eq!(k("scale(2.0)").to_string(), "scale(2)");
    assert_eq!(k("scale(+3)").to_string(), "scale(3)");
    assert_eq!(k("scale(-0.5)").to_string(), "scale(-0.5)");
    assert_eq!(k("scale(.5)").to_string(), "scale(0.5)");
    // Unknown names parse; check reports them.
    assert_eq!(k("frobnicate"), KernelRef::named("frobnicate"));
    let c = k("compose(diag, matAdd)");
    assert_eq!(c, KernelRef::compose(KernelRef::named("diag"), KernelRef::named("matAdd")));
    assert_eq!(k(&c.to_string()), c);
    let nested = k("compose(relu,compose(scale(0.5),sgdStep(0.1)))");
    assert_eq!(k(&nested.to_string()), nested);
    assert_eq!(nested.to_sexpr(), "(compose relu (compose scale(0.5) sgdStep(0.1)))");
}

#[test]
fn parse_errors_are_bad_use() {
    for bad in [
        "",
        "1abc",
        "tile(1,",
        "tile(1,2",
        "tile(1,,2)",
        "tile()",
        "scale(x)",
        "scale(inf)",
        "scale(NaN)",
        "tile(1,2)x",
        "mat Mul",
        "compose",
        "compose(relu)",
        "compose(relu,matAdd",
        "(compose diag matAdd)",
    ] {
        match KernelRef::parse(bad) {
            Err(KernelError::BadUse(msg)) => assert!(msg.contains("cannot parse kernel"), "{bad}: {msg}"),
            other => panic!("{bad:?} gave {other:?}"),
        }
    }
}

#[test]
fn json_round_trip() {
    for s in ["\"matMul\"", "\"tile(1,2)\"", "{\"compose\":[\"diag\",\"matAdd\"]}"] {
        let kr: KernelRef = serde_json::from_str(s).unwrap();
        assert_eq!(serde_json::to_string(&kr).unwrap(), s);
    }
    assert!(serde_json::from_str::<KernelRef>("\"tile(1,\"").is_err());
}

#[test]
fn check_names_arguments_and_compositions() {
    assert_eq!(k("frobnicate").check(), Err(KernelError::Unknown("frobnicate".into())));
    assert_eq!(KernelError::Unknown("frobnicate".into()).to_string(), "unknown kernel `frobnicate`");
    let e = k("matmul").check().unwrap_err();
    assert_eq!(e, KernelError::Unknown("matmul".into()));
    assert_eq!(e.to_string(), "unknown kernel `matmul`; did you mean `matMul`?");
    assert_eq!(k("matAd").check().unwrap_err().to_string(), "unknown kernel `matAd`; did you mean `matAdd`?");
    assert_eq!(k("ReLU").check().unwrap_err().to_string(), "unknown kernel `ReLU`; did you mean `relu`?");
    // A huge name is shown cut, and not compared with every catalog name
    // (a 3 MB name made a 6 MB answer after seconds of edit distances).
    let long = k(&"x".repeat(3_000_000)).check().unwrap_err().to_string();
    assert!(long.len() < 200 && long.contains("3000000 characters"), "{}", &long[..200.min(long.len())]);

    k("tile(1,2)").check().unwrap();
    k("scale(0.01)").check().unwrap();
    k("sgdStep(0.1)").check().unwrap();
    k("concat(2,1)").check().unwrap();
    k("offsetIndex(8)").check().unwrap();
    let bad_use = |s: &str| match k(s).check() {
        Err(KernelError::BadUse(m)) => m,
        other => panic!("{s}: {other:?}"),
    };
    assert_eq!(bad_use("tile(1)"), "tile takes 2 arguments (dim, size), got 1");
    assert_eq!(bad_use("scale"), "scale takes 1 argument (c), got 0");
    assert_eq!(bad_use("relu(1)"), "relu takes no arguments, got 1");
    assert!(bad_use("tile(1.5,2)").contains("non-negative integer"));
    assert!(bad_use("tile(-1,2)").contains("non-negative integer"));
    assert!(bad_use("tile(0,0)").contains("at least 1"));
    assert!(bad_use("offsetIndex(0.5)").contains("non-negative integer"));

    k("compose(diag,matAdd)").check().unwrap();
    k("compose(relu,compose(scale(2),matMul))").check().unwrap();
    assert!(bad_use("compose(matAdd,relu)").contains("must be unary"));
    assert!(bad_use("compose(relu,concat(0,0))").contains("cannot be composed"));
    assert_eq!(k("compose(relu,matmul)").check(), Err(KernelError::Unknown("matmul".into())));
}

#[test]
fn arity_and_flags() {
    assert_eq!(k("matMul").arity(), 2);
    assert_eq!(k("relu").arity(), 1);
    assert_eq!(k("compose(relu,matAdd)").arity(), 2);
    assert_eq!(k("compose(relu,sigmoid)").arity(), 1);
    assert_eq!(k("unknown").arity(), 0);
    for s in ["matAdd", "elemMul", "max", "min", "minPair"] {
        assert!(k(s).is_assoc_comm(), "{s}");
    }
    for s in ["matMul", "matSub", "concat(0,0)", "relu", "compose(relu,matAdd)", "sgdStep(1)"] {
        assert!(!k(s).is_assoc_comm(), "{s}");
    }
    assert!(k("compose(relu,matAdd)").is_elementwise());
    assert!(k("compose(scale(2),compose(neg,reluGrad))").is_elementwise());
    assert!(!k("compose(diag,matAdd)").is_elementwise());
    assert!(!k("minPair").is_elementwise());
}

#[test]
fn distributivity_facts() {
    for g in ["matAdd", "matSub", "max", "min", "elemMul"] {
        assert!(k("diag").distributes_over(&k(g)), "diag over {g}");
        assert!(k("transpose").distributes_over(&k(g)), "transpose over {g}");
    }
    assert!(k("scale(0.5)").distributes_over(&k("matAdd")));
    assert!(k("scale(0.5)").distributes_over(&k("matSub")));
    assert!(!k("scale(0.5)").distributes_over(&k("elemMul")));
    assert!(!k("scale(-1)").distributes_over(&k("max")));
    assert!(k("relu").distributes_over(&k("max")));
    assert!(!k("relu").distributes_over(&k("matAdd")));
    assert!(!k("diag").distributes_over(&k("matMul")));
    assert!(k("offsetIndex(4)").distributes_over(&k("minPair")));
    assert!(!k("compose(diag,transpose)").distributes_over(&k("matAdd")));
    assert!(!k("diag").distributes_over(&k("compose(relu,matAdd)")));
}

#[test]
fn shapes() {
    let sh = |s: &str, ins: &[&[usize]]| k(s).output_shape(ins).unwrap();
    assert_eq!(sh("matMul", &[&[4, 3], &[3, 2]]), vec![4, 2]);
    assert_eq!(sh("matMulTN", &[&[3, 4], &[3, 2]]), vec![4, 2]);
    assert_eq!(sh("matMulNT", &[&[4, 3], &[2, 3]]), vec![4, 2]);
    assert_eq!(sh("matMulTT", &[&[3, 4], &[2, 3]]), vec![4, 2]);
    assert_eq!(sh("matAdd", &[&[5], &[5]]), vec![5]);
    assert_eq!(sh("sigmoid", &[&[2, 3, 4]]), vec![2, 3, 4]);
    assert_eq!(sh("diag", &[&[3, 3]]), vec![3]);
    assert_eq!(sh("transpose", &[&[3, 5]]), vec![5, 3]);
    assert_eq!(sh("matVecSub", &[&[3, 5], &[5]]), vec![3, 5]);
    assert_eq!(sh("rowSum", &[&[3, 5]]), vec![3]);
    assert_eq!(sh("colSum", &[&[3, 5]]), vec![5]);
    assert_eq!(sh("minIndex", &[&[3, 5]]), vec![3, 2]);
    assert_eq!(sh("minPair", &[&[3, 2], &[3, 2]]), vec![3, 2]);
    assert_eq!(sh("tile(1,2)", &[&[3, 4]]), vec![3, 2]);
    assert_eq!(k("tile(1,2)").outputs_per_call(&[&[3, 4]]).unwrap(), 2);
    assert_eq!(k("matMul").outputs_per_call(&[&[3, 4], &[4, 1]]).unwrap(), 1);
    assert_eq!(sh("concat(0,1)", &[&[3, 2], &[3, 2]]), vec![3, 2]);
    assert_eq!(sh("compose(diag,matAdd)", &[&[3, 3], &[3, 3]]), vec![3]);
    assert_eq!(sh("compose(transpose,matMul)", &[&[4, 3], &[3, 2]]), vec![2, 4]);
    assert_eq!(sh("compose(tile(0,2),matMul)", &[&[4, 3], &[3, 2]]), vec![2, 2]);
    assert_eq!(k("compose(tile(0,2),matMul)").outputs_per_call(&[&[4, 3], &[3, 2]]).unwrap(), 2);
}

#[test]
fn shape_errors() {
    let err = |s: &str, ins: &[&[usize]]| k(s).output_shape(ins).unwrap_err();
    assert_eq!(
        err("matMul", &[&[4, 3], &[5, 2]]),
        KernelError::BadShape("matMul: inner dimensions differ: [4, 3] × [5, 2]".into())
    );
    assert_eq!(
        err("matAdd", &[&[2, 2], &[3, 2]]),
        KernelError::BadShape("matAdd: operand shapes differ: [2, 2] and [3, 2]".into())
    );
    assert_eq!(
        err("tile(1,3)", &[&[2, 4]]),
        KernelError::BadShape("tile(1,3): array dim 1 has bound 4, not a multiple of 3".into())
    );
    assert!(matches!(err("tile(2,1)", &[&[2, 4]]), KernelError::BadShape(_)));
    assert!(matches!(err("matMulTN", &[&[4, 3], &[3, 2]]), KernelError::BadShape(_)));
    assert!(matches!(err("diag", &[&[3, 4]]), KernelError::BadShape(_)));
    assert!(matches!(err("diag", &[&[3]]), KernelError::BadShape(_)));
    assert!(matches!(err("matVecAdd", &[&[3, 4], &[3]]), KernelError::BadShape(_)));
    assert!(matches!(err("minIndex", &[&[3, 0]]), KernelError::BadShape(_)));
    assert!(matches!(err("minPair", &[&[3, 3], &[3, 3]]), KernelError::BadShape(_)));
    assert!(matches!(err("concat(0,2)", &[&[3, 3], &[3, 3]]), KernelError::BadShape(_)));
    assert_eq!(err("matMul", &[&[4, 3]]), KernelError::BadUse("matMul takes 2 operands, got 1".into()));
    assert_eq!(err("relu", &[&[4], &[4]]), KernelError::BadUse("relu takes 1 operand, got 2".into()));
    assert_eq!(err("nope", &[&[4]]), KernelError::Unknown("nope".into()));
    assert!(matches!(err("compose(relu,tile(0,2))", &[&[4, 4]]), KernelError::BadUse(_)));
    // ...but a tile that gives one piece composes.
    assert_eq!(k("compose(relu,tile(0,4))").output_shape(&[&[4, 4]]).unwrap(), vec![4, 4]);
    assert!(matches!(err("compose(diag,matMul)", &[&[4, 3], &[3, 2]]), KernelError::BadShape(_)));
}

#[test]
fn flops() {
    let f = |s: &str, ins: &[&[usize]]| k(s).flops(ins);
    assert_eq!(f("matMul", &[&[4, 3], &[3, 2]]), 2 * 4 * 3 * 2);
    assert_eq!(f("matMulTN", &[&[3, 4], &[3, 2]]), 2 * 4 * 3 * 2);
    assert_eq!(f("matMulNT", &[&[4, 3], &[2, 3]]), 2 * 4 * 3 * 2);
    assert_eq!(f("matMulTT", &[&[3, 4], &[2, 3]]), 2 * 4 * 3 * 2);
    assert_eq!(f("matAdd", &[&[4, 3], &[4, 3]]), 12);
    assert_eq!(f("sgdStep(0.1)", &[&[4, 3], &[4, 3]]), 24);
    assert_eq!(f("sigmoid", &[&[4, 3]]), 48);
    assert_eq!(f("relu", &[&[4, 3]]), 12);
    assert_eq!(f("diag", &[&[4, 4]]), 0);
    assert_eq!(f("transpose", &[&[4, 3]]), 0);
    assert_eq!(f("matVecAdd", &[&[4, 3], &[3]]), 12);
    assert_eq!(f("rowSum", &[&[4, 3]]), 8);
    assert_eq!(f("colSum", &[&[4, 3]]), 9);
    assert_eq!(f("rowSum", &[&[4, 0]]), 0);
    assert_eq!(f("minIndex", &[&[4, 3]]), 12);
    assert_eq!(f("minPair", &[&[4, 2], &[4, 2]]), 4);
    assert_eq!(f("offsetIndex(3)", &[&[4, 2]]), 4);
    assert_eq!(f("tile(0,2)", &[&[4, 2]]), 0);
    assert_eq!(f("concat(0,0)", &[&[4, 2], &[4, 2]]), 0);
    // Distributive fusion: only the diagonal is added.
    assert_eq!(f("compose(diag,matAdd)", &[&[5, 5], &[5, 5]]), 5);
    // Elementwise fusion: one pass.
    assert_eq!(f("compose(relu,matAdd)", &[&[5, 5], &[5, 5]]), 50);
    assert_eq!(f("compose(scale(2),matAdd)", &[&[5, 5], &[5, 5]]), 50);
    // Sequential.
    assert_eq!(f("compose(relu,matMul)", &[&[4, 3], &[3, 2]]), 48 + 8);
    assert_eq!(f("compose(offsetIndex(2),minPair)", &[&[4, 2], &[4, 2]]), 8);
    assert_eq!(f("compose(offsetIndex(2),minIndex)", &[&[4, 3]]), 16);
    // Invalid operands count nothing.
    assert_eq!(f("matMul", &[&[4, 3], &[4, 3]]), 0);
    assert_eq!(f("nope", &[&[4, 3]]), 0);
    // No overflow panic.
    assert_eq!(f("matMul", &[&[usize::MAX, 2], &[2, usize::MAX]]), u64::MAX);
}

#[test]
fn einsum_kernel() {
    // Parsing keeps the spec as written; display re-parses to the same kernel.
    for text in
        ["einSum(ij_jk_ik)", "einSum(ii_i)", "einSum(ii_)", "einSum(i_i_)", "einSum(_i_i)", "einSum(bij_bjk_bik)"]
    {
        let kr = k(text);
        assert_eq!(kr.to_string(), text);
        assert_eq!(k(&kr.to_string()), kr);
        kr.check().unwrap();
        let json = serde_json::to_string(&kr).unwrap();
        assert_eq!(serde_json::from_str::<KernelRef>(&json).unwrap(), kr);
    }
    assert_eq!(k(" einSum( ij_jk_ik ) ").to_string(), "einSum(ij_jk_ik)");
    assert_eq!(k("compose(einSum(ij_ji),einSum(ij_jk_ik))").to_string(), "compose(einSum(ij_ji),einSum(ij_jk_ik))");
    k("compose(einSum(ij_ji),einSum(ij_jk_ik))").check().unwrap();
    // Words are specs only for einSum.
    assert!(KernelRef::parse("scale(ij)").is_err());
    assert!(KernelRef::parse("einSum(i-j)").unwrap_err().to_string().contains("spec of letters"));
    // Arity from the spec.
    assert_eq!(k("einSum(ij_jk_ik)").arity(), 2);
    assert_eq!(k("einSum(ij_ji)").arity(), 1);
    assert!(!k("einSum(ij_jk_ik)").is_assoc_comm());
    // Check: bad specs.
    let bad = |s: &str| match k(s).check() {
        Err(KernelError::BadUse(m)) => m,
        other => panic!("{s}: {other:?}"),
    };
    assert!(bad("einSum(ij)").contains("part"), "{}", bad("einSum(ij)"));
    assert!(bad("einSum(i_j_k_l)").contains("4 part"));
    assert!(bad("einSum(ij_jk_ii)").contains("appears twice"));
    assert!(bad("einSum(ij_jk_iz)").contains("`z` is in no operand"));
    assert_eq!(bad("einSum"), "einSum takes 1 argument (spec), got 0");
    // Shapes.
    let sh = |s: &str, ins: &[&[usize]]| k(s).output_shape(ins);
    assert_eq!(sh("einSum(ij_jk_ik)", &[&[4, 3], &[3, 2]]).unwrap(), vec![4, 2]);
    assert_eq!(sh("einSum(ij_jk_ki)", &[&[4, 3], &[3, 2]]).unwrap(), vec![2, 4]);
    assert_eq!(sh("einSum(bij_bjk_bik)", &[&[5, 4, 3], &[5, 3, 2]]).unwrap(), vec![5, 4, 2]);
    assert_eq!(sh("einSum(ii_i)", &[&[3, 3]]).unwrap(), vec![3]);
    assert_eq!(sh("einSum(ii_)", &[&[3, 3]]).unwrap(), Vec::<usize>::new());
    assert_eq!(sh("einSum(i_j_ij)", &[&[3], &[2]]).unwrap(), vec![3, 2]);
    assert!(
        matches!(sh("einSum(ij_jk_ik)", &[&[4, 3], &[5, 2]]), Err(KernelError::BadShape(m)) if m.contains("`j` has size 3 and 5"))
    );
    assert!(matches!(sh("einSum(ii_i)", &[&[3, 4]]), Err(KernelError::BadShape(_))));
    assert!(matches!(sh("einSum(ij_jk_ik)", &[&[4, 3, 1], &[3, 2]]), Err(KernelError::BadShape(_))));
    assert!(matches!(sh("einSum(ij_jk_ik)", &[&[4, 3]]), Err(KernelError::BadUse(_))));
    // Flops.
    let f = |s: &str, ins: &[&[usize]]| k(s).flops(ins);
    assert_eq!(f("einSum(ij_jk_ik)", &[&[4, 3], &[3, 2]]), 2 * 4 * 3 * 2);
    assert_eq!(f("einSum(ij_jk_ik)", &[&[4, 3], &[3, 2]]), f("matMul", &[&[4, 3], &[3, 2]]));
    assert_eq!(f("einSum(bij_bjk_bik)", &[&[5, 4, 3], &[5, 3, 2]]), 2 * 5 * 4 * 3 * 2);
    assert_eq!(f("einSum(i_j_ij)", &[&[3], &[2]]), 6);
    assert_eq!(f("einSum(ij_ji)", &[&[4, 3]]), 0);
    assert_eq!(f("einSum(ii_i)", &[&[4, 4]]), 0);
    assert_eq!(f("einSum(ij_i)", &[&[4, 3]]), 12);
    assert_eq!(f("einSum(ij_jk_ik)", &[&[4, 3], &[4, 3]]), 0);
    // The spec type.
    let spec = EinSumSpec::parse("ij_jk_ik").unwrap();
    assert_eq!(spec.inputs, vec![vec!['i', 'j'], vec!['j', 'k']]);
    assert_eq!(spec.output, vec!['i', 'k']);
    assert_eq!(spec.kernel(), k("einSum(ij_jk_ik)"));
    assert_eq!(EinSumSpec::parse("_i_i").unwrap().to_string(), "_i_i");
}

#[test]
fn nonlinear_kernels_shapes_flops_and_facts() {
    let sh = |s: &str, i: &[&[usize]]| k(s).output_shape(i).unwrap();
    let f = |s: &str, i: &[&[usize]]| k(s).flops(i);
    assert_eq!(sh("exp", &[&[2, 3, 4]]), vec![2, 3, 4]);
    assert_eq!(sh("shift(1e-5)", &[&[3]]), vec![3]);
    assert_eq!(sh("elemDiv", &[&[3, 5], &[3, 5]]), vec![3, 5]);
    assert_eq!(sh("rowMax", &[&[3, 5]]), vec![3]);
    assert_eq!(sh("colMax", &[&[3, 5]]), vec![5]);
    assert_eq!(sh("matVecDiv", &[&[3, 5], &[5]]), vec![3, 5]);
    assert_eq!(sh("matColVecSub", &[&[3, 5], &[3]]), vec![3, 5]);
    assert_eq!(f("exp", &[&[4, 3]]), 12);
    assert_eq!(f("elemDiv", &[&[4, 3], &[4, 3]]), 12);
    assert_eq!(f("rowMax", &[&[4, 3]]), 8);
    assert_eq!(f("colMax", &[&[4, 3]]), 9);
    assert_eq!(f("matColVecDiv", &[&[4, 3], &[4]]), 12);
    let err = k("matColVecDiv").output_shape(&[&[3, 5], &[5]]).unwrap_err().to_string();
    assert!(err.contains("matColVecDiv") && err.contains("row count") && err.contains("[3, 5]"), "{err}");
    let err = k("elemDiv").output_shape(&[&[3, 5], &[5, 3]]).unwrap_err().to_string();
    assert!(err.contains("elemDiv") && err.contains("[5, 3]"), "{err}");
    assert!(matches!(k("shift").check(), Err(KernelError::BadUse(_))));
    // The facts the rules rely on: only rowMax/colMax over max distribute;
    // exp is not linear; none of the block aggregates.
    for name in ["exp", "log", "sqrt", "shift(1)", "elemDiv", "rowMax", "colMax", "matVecDiv", "matColVecSub"] {
        assert!(!k(name).is_assoc_comm(), "{name}");
        assert!(!k(name).distributes_over(&k("matAdd")), "{name}");
    }
    assert!(k("rowMax").distributes_over(&k("max")) && k("colMax").distributes_over(&k("max")));
    assert!(!k("rowMax").distributes_over(&k("min")));
    assert!(k("exp").is_elementwise() && k("elemDiv").is_elementwise() && !k("rowMax").is_elementwise());
}

#[test]
fn every_bracketing_of_a_chain_of_kernels_is_one_kernel() {
    let k = |s: &str| KernelRef::parse(s).unwrap();
    let left = KernelRef::compose(KernelRef::compose(k("relu"), k("neg")), k("matMul"));
    let right = KernelRef::compose(k("relu"), KernelRef::compose(k("neg"), k("matMul")));
    assert_eq!(left, right);
    assert_eq!(left.to_string(), "compose(relu,compose(neg,matMul))");
    assert_eq!(left.parts(), 3);
    // Longer: ((a∘b)∘(c∘d))∘e, written by hand, is a∘(b∘(c∘(d∘e))).
    let ab = KernelRef::compose(k("relu"), k("neg"));
    let cd = KernelRef::compose(k("scale(2)"), k("exp"));
    let e = KernelRef::compose(KernelRef::compose(ab, cd), k("sigmoid"));
    assert_eq!(e.to_string(), "compose(relu,compose(neg,compose(scale(2),compose(exp,sigmoid))))");
    // The value and the flops do not depend on the bracketing.
    let shape: &[usize] = &[3, 4];
    assert_eq!(e.output_shape(&[shape]).unwrap(), vec![3, 4]);
    assert_eq!(e.flops(&[shape]), 12 * (1 + 1 + 1 + 1 + 4));
    // An outer kernel that is not unary is wrong however bracketed: kept as
    // written, and `check` names it.
    let wrong = KernelRef::compose(KernelRef::compose(k("relu"), k("matMul")), k("matAdd"));
    assert_eq!(wrong.to_string(), "compose(compose(relu,matMul),matAdd)");
    assert!(wrong.check().unwrap_err().to_string().contains("must be unary"), "{:?}", wrong.check());
}
