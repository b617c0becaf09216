//! The distributed matmul: the root class holds the BMM, CMM and RMM plans;
//! pre-partitioned inputs let R2-4 drop shuffles; a chain of matmuls with
//! mixed placements saturates without a merge panicking.

mod common;
use common::{input, matmul_nodes, program, run, saturated};

fn matmul_program(sites: usize, x: String, y: String) -> String {
    let nodes = matmul_nodes("m", "X", "Y");
    let nodes: Vec<(&str, &str)> = nodes.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    program(sites, &[("X", x), ("Y", y)], &nodes, &["m"])
}

const BMM_LEFT: &str =
    "(erase (lagg [0,2] kernel:matAdd (ljoin [1] [0] kernel:matMul (broadcast ?x) (shuffle [1] ?y))))";
const BMM_RIGHT: &str =
    "(erase (lagg [0,2] kernel:matAdd (ljoin [1] [0] kernel:matMul (shuffle [0] ?x) (broadcast ?y))))";
const CMM: &str = "(erase (lagg [0,1] kernel:matAdd (shuffle [0,1] (erase (lagg [0,2] kernel:matAdd \
                   (ljoin [1] [0] kernel:matMul (shuffle [1] ?x) (shuffle [0] ?y)))))))";
const RMM: &str = "(erase (lagg [0,2] kernel:matAdd (shuffle [0,2] (erase (ljoin [0,1,2] [0,1,2] kernel:matMul \
                   (shuffle [0,1,2] (erase (lmap ?kx id ?px))) (shuffle [0,1,2] (erase (lmap ?ky id ?py))))))))";

#[test]
fn matmul_root_holds_bmm_cmm_rmm() {
    let r = run(&matmul_program(10, input(&[4, 4], &[8, 8], ""), input(&[4, 4], &[8, 8], "")));
    assert!(saturated(&r.stop), "{:?} after {} iterations, {} nodes", r.stop, r.iterations, r.nodes());
    for (name, p) in [("BMM (broadcast X)", BMM_LEFT), ("BMM (broadcast Y)", BMM_RIGHT), ("CMM", CMM), ("RMM", RMM)] {
        assert!(!r.search_root("m", p).is_empty(), "no {name} plan in the root class");
    }
    // The RMM replication keys: X (i,j) → (i,j,k) for k < 4, Y (j,k) → (i,j,k) for i < 4.
    let s = &r.search_root("m", RMM)[0];
    assert_eq!(r.param(s, "?kx").to_string(), "key:[k0,k1,0..4]");
    assert_eq!(r.param(s, "?ky").to_string(), "key:[0..4,k0,k1]");
}

#[test]
fn prepartitioned_operand_needs_no_shuffle() {
    // Y hashed on its column blocks: broadcast X and join where Y lies.
    let r = run(&matmul_program(4, input(&[4, 2], &[8, 8], ""), input(&[2, 6], &[8, 8], r#"{"hash": [1]}"#)));
    assert!(saturated(&r.stop));
    let direct = "(erase (lagg [0,2] kernel:matAdd (ljoin [1] [0] kernel:matMul (broadcast ?x) (input Y))))";
    assert!(!r.search_root("m", direct).is_empty(), "R2-4 did not drop the shuffle of Y");
    // X hashed on its rows: the mirror.
    let r = run(&matmul_program(4, input(&[6, 2], &[8, 8], r#"{"hash": [0]}"#), input(&[2, 4], &[8, 8], "")));
    let direct = "(erase (lagg [0,2] kernel:matAdd (ljoin [1] [0] kernel:matMul (input X) (broadcast ?y))))";
    assert!(!r.search_root("m", direct).is_empty(), "R2-4 did not drop the shuffle of X");
}

#[test]
fn matmul_chain_with_mixed_placements() {
    let decls = [
        ("A", input(&[3, 2], &[4, 4], r#"{"hash": [0]}"#)),
        ("B", input(&[2, 3], &[4, 4], r#"{"hash": [1]}"#)),
        ("C", input(&[3, 2], &[4, 4], r#""replicated""#)),
        ("D", input(&[2, 2], &[4, 4], r#"{"hash": [0, 1]}"#)),
        ("E", input(&[2, 3], &[4, 4], "")),
    ];
    let mut nodes = matmul_nodes("ab", "A", "B");
    nodes.extend(matmul_nodes("abc", "ab", "C"));
    nodes.extend(matmul_nodes("abcd", "abc", "D"));
    nodes.extend(matmul_nodes("abcde", "abcd", "E"));
    let nodes: Vec<(&str, &str)> = nodes.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    for sites in [1, 2, 5] {
        let r = run(&program(sites, &decls, &nodes, &["abcde"]));
        assert!(
            saturated(&r.stop),
            "{sites} sites: {:?} after {} iterations, {} nodes",
            r.stop,
            r.iterations,
            r.nodes()
        );
        for name in ["ab", "abc", "abcd", "abcde"] {
            assert!(!r.search_root("abcde", "(erase ?p)").is_empty(), "{name}: no executable member");
        }
    }
}
