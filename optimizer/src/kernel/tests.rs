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
        } else if is_spec_kernel(info.name) {
            vec!["ij_i".to_string()]
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

const NUMPY_BINARIES: [&str; 15] = [
    "add",
    "sub",
    "mul",
    "div",
    "pow",
    "maximum",
    "minimum",
    "lt",
    "le",
    "gt",
    "ge",
    "eq",
    "ne",
    "selectIf",
    "selectElse",
];
const NUMPY_UNARIES: [&str; 14] = [
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
    "powc(3)",
    "powc(0.5)",
];

#[test]
fn numpy_broadcasting_binaries() {
    let sh = |s: &str, i: &[&[usize]]| k(s).output_shape(i);
    for name in NUMPY_BINARIES {
        assert_eq!(k(name).arity(), 2, "{name}");
        assert_eq!(sh(name, &[&[3, 1], &[4]]).unwrap(), vec![3, 4], "{name}");
        assert_eq!(sh(name, &[&[4], &[3, 1]]).unwrap(), vec![3, 4], "{name}");
        assert_eq!(sh(name, &[&[], &[2, 3]]).unwrap(), vec![2, 3], "{name}");
        assert_eq!(sh(name, &[&[2, 3], &[]]).unwrap(), vec![2, 3], "{name}");
        assert_eq!(sh(name, &[&[], &[]]).unwrap(), Vec::<usize>::new(), "{name}");
        assert_eq!(sh(name, &[&[5, 1, 3], &[4, 1]]).unwrap(), vec![5, 4, 3], "{name}");
        assert_eq!(sh(name, &[&[2, 3], &[2, 3]]).unwrap(), vec![2, 3], "{name}");
        assert_eq!(sh(name, &[&[0], &[1]]).unwrap(), vec![0], "{name}");
        assert_eq!(sh(name, &[&[2, 0], &[2, 1]]).unwrap(), vec![2, 0], "{name}");
        // Flops: the output's elements.
        assert_eq!(k(name).flops(&[&[3, 1], &[4]]), 12, "{name}");
        assert_eq!(k(name).flops(&[&[], &[]]), 1, "{name}");
        assert_eq!(k(name).flops(&[&[5, 1, 3], &[4, 1]]), 60, "{name}");
        // No fact: not elementwise (shapes may differ), nothing to reorder.
        assert!(!k(name).is_elementwise() && !k(name).is_assoc_comm(), "{name}");
        assert!(!k(name).is_bilinear_over(&k("matAdd")) && k(name).matrix_product().is_none(), "{name}");
        assert!(k(name).check().is_ok() && matches!(k(&format!("{name}(1)")).check(), Err(KernelError::BadUse(_))));
    }
    assert_eq!(
        sh("add", &[&[3, 2], &[4]]).unwrap_err(),
        KernelError::BadShape(
            "add: operand shapes [3, 2] and [4] do not broadcast: axis 1 of the first and axis 0 of the second \
             (aligned at the end) have sizes 2 and 4, neither 1"
                .into()
        )
    );
    let e = sh("selectIf", &[&[2, 3, 4], &[5, 4]]).unwrap_err().to_string();
    assert!(e.starts_with("selectIf: ") && e.contains("[2, 3, 4] and [5, 4]") && e.contains("sizes 3 and 5"), "{e}");
    assert_eq!(k("add").flops(&[&[3, 2], &[4]]), 0);
    assert_eq!(broadcast_shape(&[3, 1], &[4]), Some(vec![3, 4]));
    assert_eq!(broadcast_shape(&[2], &[3]), None);
    // A composition with a broadcasting binary runs in sequence.
    assert_eq!(k("compose(relu,add)").output_shape(&[&[3, 1], &[4]]).unwrap(), vec![3, 4]);
    assert_eq!(k("compose(relu,add)").flops(&[&[3, 1], &[4]]), 24);
    assert!(!k("compose(relu,add)").is_elementwise());
}

#[test]
fn numpy_unary_maps() {
    for name in NUMPY_UNARIES {
        let kr = k(name);
        kr.check().unwrap();
        assert_eq!(kr.arity(), 1);
        assert!(kr.is_elementwise() && !kr.distributes_over(&k("matAdd")) && !kr.distributes_over(&k("max")), "{name}");
        for shape in [&[2, 3, 4][..], &[], &[0, 5]] {
            assert_eq!(kr.output_shape(&[shape]).unwrap(), shape.to_vec(), "{name}");
        }
        let per = if name == "tanh" || name == "erf" { 4 } else { 1 };
        assert_eq!(kr.flops(&[&[2, 3, 4]]), 24 * per, "{name}");
        assert_eq!(kr.flops(&[&[]]), per, "{name}");
    }
    assert_eq!(k("powc(-2)").to_string(), "powc(-2)");
    assert_eq!(k("powc").check().unwrap_err().to_string(), "powc takes 1 argument (c), got 0");
    assert!(k("abs(1)").check().is_err());
    // Elementwise, so they fuse: one pass.
    assert!(k("compose(tanh,compose(powc(2),matAdd))").is_elementwise());
    assert_eq!(k("compose(tanh,compose(powc(2),matAdd))").flops(&[&[2, 3], &[2, 3]]), 6 + 6 + 24);
}

#[test]
fn numpy_shape_kernels() {
    let sh = |s: &str, i: &[&[usize]]| k(s).output_shape(i).unwrap();
    let err = |s: &str, i: &[&[usize]]| match k(s).output_shape(i) {
        Err(KernelError::BadShape(m)) => m,
        other => panic!("{s} on {i:?}: {other:?}"),
    };
    // concatAxis.
    assert_eq!(sh("concatAxis(1)", &[&[2, 3], &[2, 4]]), vec![2, 7]);
    assert_eq!(sh("concatAxis(0)", &[&[0, 3], &[2, 3]]), vec![2, 3]);
    assert_eq!(sh("concatAxis(0)", &[&[5], &[2]]), vec![7]);
    assert_eq!(err("concatAxis(0)", &[&[2, 3], &[3]]), "concatAxis(0): operand ranks differ: [2, 3] and [3]");
    assert_eq!(
        err("concatAxis(2)", &[&[2, 3], &[2, 3]]),
        "concatAxis(2): axis 2 is out of range for operands of rank 2 ([2, 3] and [2, 3])"
    );
    assert_eq!(
        err("concatAxis(1)", &[&[2, 3], &[3, 3]]),
        "concatAxis(1): operand shapes [2, 3] and [3, 3] differ on axis 0, not only on the joined axis 1"
    );
    assert!(err("concatAxis(0)", &[&[], &[]]).contains("out of range"));
    // expandDims.
    assert_eq!(sh("expandDims(0)", &[&[]]), vec![1]);
    assert_eq!(sh("expandDims(1)", &[&[2, 3]]), vec![2, 1, 3]);
    assert_eq!(sh("expandDims(2)", &[&[2, 3]]), vec![2, 3, 1]);
    assert_eq!(
        err("expandDims(3)", &[&[2, 3]]),
        "expandDims(3): axis 3 is out of range for an operand of shape [2, 3] (a new axis goes at 0 to 2)"
    );
    // squeezeAxis.
    assert_eq!(sh("squeezeAxis(1)", &[&[2, 1, 3]]), vec![2, 3]);
    assert_eq!(sh("squeezeAxis(0)", &[&[1]]), Vec::<usize>::new());
    assert_eq!(err("squeezeAxis(0)", &[&[2, 3]]), "squeezeAxis(0): axis 0 of [2, 3] has size 2, not 1");
    assert_eq!(
        err("squeezeAxis(2)", &[&[2, 1]]),
        "squeezeAxis(2): axis 2 is out of range for an operand of shape [2, 1] (axes 0 to 1)"
    );
    assert_eq!(
        err("squeezeAxis(0)", &[&[]]),
        "squeezeAxis(0): axis 0 is out of range: the operand has shape [] (rank 0, no axis)"
    );
    // mergeAxes.
    assert_eq!(sh("mergeAxes(1)", &[&[2, 3, 4]]), vec![2, 12]);
    assert_eq!(sh("mergeAxes(0)", &[&[2, 3]]), vec![6]);
    assert_eq!(sh("mergeAxes(0)", &[&[0, 3]]), vec![0]);
    assert_eq!(err("mergeAxes(1)", &[&[2, 3]]), "mergeAxes(1): merges axes 1 and 2, the operand [2, 3] has rank 2");
    assert!(err("mergeAxes(0)", &[&[]]).contains("rank 0"));
    assert!(err(&format!("mergeAxes({})", u32::MAX), &[&[2, 3]]).contains("has rank 2"));
    // splitAxis.
    assert_eq!(sh("splitAxis(1,2)", &[&[3, 4]]), vec![3, 2, 2]);
    assert_eq!(sh("splitAxis(0,4)", &[&[4]]), vec![1, 4]);
    assert_eq!(sh("splitAxis(0,3)", &[&[0]]), vec![0, 3]);
    assert_eq!(err("splitAxis(1,3)", &[&[3, 4]]), "splitAxis(1,3): axis 1 of [3, 4] has size 4, not a multiple of 3");
    assert!(err("splitAxis(2,1)", &[&[3, 4]]).contains("axis 2 is out of range for an operand of shape [3, 4]"));
    assert_eq!(k("splitAxis(0,0)").check().unwrap_err().to_string(), "splitAxis(0,0): size must be at least 1");
    assert!(k("splitAxis(-1,2)").check().unwrap_err().to_string().contains("non-negative integer"));
    // repeatAxis.
    assert_eq!(sh("repeatAxis(0,5)", &[&[1, 3]]), vec![5, 3]);
    assert_eq!(sh("repeatAxis(1,0)", &[&[2, 1]]), vec![2, 0]);
    assert_eq!(
        err("repeatAxis(1,4)", &[&[2, 3]]),
        "repeatAxis(1,4): axis 1 of [2, 3] has size 3, not 1 (only a size-1 axis repeats)"
    );
    assert!(err("repeatAxis(0,4)", &[&[]]).contains("shape []"));
    assert!(k("repeatAxis(0,1.5)").check().unwrap_err().to_string().contains("n must be a non-negative integer"));
    assert!(k("expandDims(0.5)").check().unwrap_err().to_string().contains("axis must be a non-negative integer"));
    // No flops, no facts.
    for (name, shapes) in [
        ("concatAxis(1)", &[&[2usize, 3][..], &[2, 4]][..]),
        ("expandDims(0)", &[&[2, 3]]),
        ("squeezeAxis(0)", &[&[1, 3]]),
        ("mergeAxes(0)", &[&[2, 3]]),
        ("splitAxis(1,3)", &[&[2, 3]]),
        ("repeatAxis(0,7)", &[&[1, 3]]),
    ] {
        assert_eq!(k(name).flops(shapes), 0, "{name}");
        assert_eq!(k(name).arity(), shapes.len(), "{name}");
        assert!(!k(name).is_elementwise() && !k(name).is_assoc_comm(), "{name}");
        assert!(!k(name).distributes_over(&k("matAdd")), "{name}");
    }
}

#[test]
fn ein_max_and_min() {
    for text in ["einMax(ijk_ik)", "einMin(ij_ji)", "einMax(ii_)", "einMin(ij_)"] {
        let kr = k(text);
        assert_eq!(kr.to_string(), text);
        kr.check().unwrap();
        assert_eq!(kr.arity(), 1);
        let json = serde_json::to_string(&kr).unwrap();
        assert_eq!(serde_json::from_str::<KernelRef>(&json).unwrap(), kr);
        assert!(!kr.is_elementwise() && !kr.is_assoc_comm() && !kr.distributes_over(&k("max")));
    }
    let sh = |s: &str, i: &[&[usize]]| k(s).output_shape(i);
    assert_eq!(sh("einMax(ijk_ik)", &[&[2, 3, 4]]).unwrap(), vec![2, 4]);
    assert_eq!(sh("einMax(ijk_ki)", &[&[2, 3, 4]]).unwrap(), vec![4, 2]);
    assert_eq!(sh("einMin(ii_)", &[&[3, 3]]).unwrap(), Vec::<usize>::new());
    assert_eq!(sh("einMin(ii_i)", &[&[3, 3]]).unwrap(), vec![3]);
    let e = sh("einMax(ijk_ik)", &[&[2, 3]]).unwrap_err();
    assert!(matches!(&e, KernelError::BadShape(m) if m.starts_with("einMax(ijk_ik): ") && m.contains("[2, 3]")), "{e}");
    assert!(matches!(sh("einMin(ii_i)", &[&[3, 4]]), Err(KernelError::BadShape(_))));
    assert_eq!(sh("einMax(ij_i)", &[&[3], &[3]]).unwrap_err().to_string(), "einMax(ij_i) takes 1 operand, got 2");
    // Flops: the terms when a letter is reduced, else 0.
    let f = |s: &str, i: &[&[usize]]| k(s).flops(i);
    assert_eq!(f("einMax(ijk_ik)", &[&[2, 3, 4]]), 24);
    assert_eq!(f("einMin(ij_)", &[&[2, 3]]), 6);
    assert_eq!(f("einMax(ij_ji)", &[&[2, 3]]), 0);
    assert_eq!(f("einMax(ii_i)", &[&[3, 3]]), 0);
    assert_eq!(f("einMax(ij_i)", &[&[2, 0]]), 0);
    // Bad specs.
    let bad = |s: &str| match k(s).check() {
        Err(KernelError::BadUse(m)) => m,
        other => panic!("{s}: {other:?}"),
    };
    assert_eq!(
        bad("einMax(ij_jk_ik)"),
        "einMax(ij_jk_ik): einMax reduces one operand, the spec names 2 (write it like ijk_ik)"
    );
    assert!(bad("einMin(ij_iz)").contains("`z` is in no operand"));
    assert_eq!(bad("einMax"), "einMax takes 1 argument (spec), got 0");
    assert!(bad("einMax(1)").contains("einMax(1)"));
    assert!(KernelRef::parse("einMin(i-j)").unwrap_err().to_string().contains("spec of letters"));
    // Composable both ways.
    k("compose(neg,einMax(ij_i))").check().unwrap();
    assert_eq!(k("compose(einMin(ij_j),exp)").output_shape(&[&[2, 3]]).unwrap(), vec![3]);
}

#[test]
fn short_names_are_not_suggested_for_unrelated_ones() {
    assert_eq!(k("nope").check().unwrap_err().to_string(), "unknown kernel `nope`");
    assert_eq!(k("Abs").check().unwrap_err().to_string(), "unknown kernel `Abs`; did you mean `abs`?");
    assert_eq!(k("lte").check().unwrap_err().to_string(), "unknown kernel `lte`; did you mean `lt`?");
    assert_eq!(k("einmax").check().unwrap_err().to_string(), "unknown kernel `einmax`; did you mean `einMax`?");
}
