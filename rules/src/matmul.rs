//! Family `matmul`: the specific equivalence rules of paper 004 §4.2 for
//! distributed matrix multiplication, `aggregate([0,2], matAdd,
//! join([1], [0], matMul, X, Y))` over blocked matrices `X (i,j)` and
//! `Y (j,k)`: broadcast (BMM), cross-product (CMM) and replication-based 3D
//! (RMM) plans. Each adds an executable form to the TRA aggregate's L class.
//!
//! Condition shared by all three: the aggregation groups by `[0,2]` with
//! `matAdd`, over a join `[1] = [0]` with `matMul`, of two operands with key
//! arity 2 whose common dimension has the same frontier (the join's typing
//! checks block shapes). Each right-hand side is type-checked node by node
//! before it is added.

use crate::support::{get, inst, logical, pat, rewrite, var, Guard};
use egg::Id;
use tra_optimizer::egraph::{Ia, Param, TraEGraph};
use tra_optimizer::keyexpr::KeyFn;
use tra_optimizer::rule::{RuleDef, TraRewrite};
use tra_optimizer::types::KeySet;

const FAMILY: &str = "matmul";

/// The TRA matmul the three rules match.
const MATMUL: &str = "(aggregate [0,2] kernel:matAdd (join [1] [0] kernel:matMul ?x ?y))";

fn def(name: &'static str, equation: &'static str, condition: &'static str, rewrites: Vec<TraRewrite>) -> RuleDef {
    RuleDef { name, family: FAMILY, equation, condition, lowering: false, rewrites }
}

/// Every matmul rule.
pub fn rules() -> Vec<RuleDef> {
    vec![matmul_bmm(), matmul_cmm(), matmul_rmm()]
}

/// The matched operands' frontiers `(X, Y)` when both are complete matrices
/// of key arity 2 with a common dimension of one frontier.
fn operands(eg: &TraEGraph, s: &egg::Subst) -> Option<(Vec<u32>, Vec<u32>)> {
    let (x, y) = (logical(eg, get(s, "?x"))?, logical(eg, get(s, "?y"))?);
    let (fx, fy) = (&x.rel.frontier, &y.rel.frontier);
    (x.complete && y.complete && fx.len() == 2 && fy.len() == 2 && fx[1] == fy[0]).then(|| (fx.clone(), fy.clone()))
}

/// `matmul-bmm`: broadcast matrix multiplication, both ways:
/// `aggregate([0,2],matAdd, join([1],[0],matMul, X, Y))` =
/// `(erase (lagg [0,2] matAdd (ljoin [1] [0] matMul (broadcast X) (shuffle [1] Y))))` =
/// `(erase (lagg [0,2] matAdd (ljoin [1] [0] matMul (shuffle [0] X) (broadcast Y))))`.
///
/// The join's output is hashed on an output dim in `[0,2]` (`k` from `Y`, or
/// `i` from `X`), so the aggregation is complete without another shuffle.
/// Condition: operands of key arity 2 with equal common frontier.
///
/// Arity audit: both operands are checked to have key arity 2; `[1]`/`[0]`
/// shuffle each operand by its own dims, `[0,2]` groups the join's 3-dim
/// output; no key map.
pub fn matmul_bmm() -> RuleDef {
    let left =
        pat("(erase (lagg [0,2] kernel:matAdd (ljoin [1] [0] kernel:matMul (broadcast ?x) (shuffle [1] ?y))))").ast;
    let right =
        pat("(erase (lagg [0,2] kernel:matAdd (ljoin [1] [0] kernel:matMul (shuffle [0] ?x) (broadcast ?y))))").ast;
    def(
        "matmul-bmm",
        "(aggregate [0,2] matAdd (join [1] [0] matMul ?x ?y)) = \
         (erase (lagg [0,2] matAdd (ljoin [1] [0] matMul (broadcast ?x) (shuffle [1] ?y)))) = \
         (erase (lagg [0,2] matAdd (ljoin [1] [0] matMul (shuffle [0] ?x) (broadcast ?y))))",
        "both operands have key arity 2 and the common dimension's frontiers agree.",
        vec![rewrite("matmul-bmm", "matmul-bmm", MATMUL, Guard::Strict, move |eg, _, s| {
            if operands(eg, s).is_none() {
                return vec![];
            }
            let mut out: Vec<Id> = inst(eg, &left, s).into_iter().collect();
            out.extend(inst(eg, &right, s));
            out
        })],
    )
}

/// `matmul-cmm`: cross-product matrix multiplication with two-phase
/// aggregation: `X` hashed on its column block, `Y` on its row block, so the
/// local join produces every product `(i,j,k)` once on the site of `j`; a
/// local pre-aggregation by `(i,k)` gives partial sums, which are shuffled on
/// `(i,k)` and summed:
/// `(erase (lagg [0,1] matAdd (shuffle [0,1] (erase (lagg [0,2] matAdd
/// (ljoin [1] [0] matMul (shuffle [1] X) (shuffle [0] Y)))))))`.
///
/// Condition: operands of key arity 2 with equal common frontier; `matAdd` is
/// associative and commutative (the second phase sums partial sums).
///
/// Arity audit: operands checked to have key arity 2; the first phase groups
/// the join's 3-dim output by `[0,2]`, the second its 2-dim partial results
/// by `[0,1]` (positions, not the join's dims); no key map.
pub fn matmul_cmm() -> RuleDef {
    let rhs = pat("(erase (lagg [0,1] kernel:matAdd (shuffle [0,1] (erase (lagg [0,2] kernel:matAdd \
         (ljoin [1] [0] kernel:matMul (shuffle [1] ?x) (shuffle [0] ?y)))))))")
    .ast;
    def(
        "matmul-cmm",
        "(aggregate [0,2] matAdd (join [1] [0] matMul ?x ?y)) = (erase (lagg [0,1] matAdd (shuffle [0,1] (erase \
         (lagg [0,2] matAdd (ljoin [1] [0] matMul (shuffle [1] ?x) (shuffle [0] ?y)))))))",
        "both operands have key arity 2 and the common dimension's frontiers agree; matAdd is associative and \
         commutative (two-phase aggregation).",
        vec![rewrite("matmul-cmm", "matmul-cmm", MATMUL, Guard::Strict, move |eg, _, s| {
            if operands(eg, s).is_none() {
                return vec![];
            }
            inst(eg, &rhs, s).into_iter().collect()
        })],
    )
}

/// A P member of an L class (the one with the smallest class id, so that
/// repeated matches build the same nodes).
fn member(eg: &TraEGraph, l: Id) -> Option<Id> {
    eg[l].nodes.iter().filter_map(|n| if let Ia::Erase(p) = n { Some(eg.find(*p)) } else { None }).min()
}

/// `matmul-rmm`: replication-based (3D) matrix multiplication. `X (i,j)` is
/// replicated to `(i,j,k)` for every `k < K` (`K` = `Y`'s column-block
/// frontier) by a local map with key `[k0,k1,0..K]`, `Y (j,k)` to `(i,j,k)`
/// for every `i < I` (`I` = `X`'s row-block frontier) by `[0..I,k0,k1]`; both
/// are shuffled on all three dims, joined locally on all three, and the
/// products aggregated by `(i,k)`:
/// `(erase (lagg [0,2] matAdd (shuffle [0,2] (erase (ljoin [0,1,2] [0,1,2] matMul
/// (shuffle [0,1,2] (erase (lmap key:[k0,k1,0..K] id X))) (shuffle [0,1,2] (erase (lmap key:[0..I,k0,k1] id Y))))))))`
/// (R2-5 may then make the aggregation two-phase).
///
/// Condition: both operands are dense matrices (no holes: replication by the
/// frontier then gives exactly the keys the join needs, and the typing of the
/// replicated relations agrees with the TRA join's) of key arity 2 with equal
/// common frontier; every node of the plan type-checks.
///
/// Arity audit: the replicating key maps are built for their input's arity
/// (2, checked) and give arity 3, which the 3-dim join and shuffles name.
pub fn matmul_rmm() -> RuleDef {
    let rhs = pat("(erase (lagg [0,2] kernel:matAdd (shuffle [0,2] (erase (ljoin [0,1,2] [0,1,2] kernel:matMul \
         (shuffle [0,1,2] (erase (lmap ?kx id ?px))) (shuffle [0,1,2] (erase (lmap ?ky id ?py))))))))")
    .ast;
    def(
        "matmul-rmm",
        "(aggregate [0,2] matAdd (join [1] [0] matMul ?x ?y)) = (erase (lagg [0,2] matAdd (shuffle [0,2] (erase \
         (ljoin [0,1,2] [0,1,2] matMul (shuffle [0,1,2] (erase (lmap key:[k0,k1,0..K] id ?px))) \
         (shuffle [0,1,2] (erase (lmap key:[0..I,k0,k1] id ?py))))))))",
        "both operands are dense and non-empty with key arity 2 and equal common frontier; I = X's row-block \
         frontier, K = Y's column-block frontier.",
        vec![rewrite("matmul-rmm", "matmul-rmm", MATMUL, Guard::Strict, move |eg, _, s| {
            let Some((fx, fy)) = operands(eg, s) else { return vec![] };
            let (x, y) = (get(s, "?x"), get(s, "?y"));
            let dense = |id: Id| logical(eg, id).is_some_and(|l| l.rel.keys == KeySet::Dense);
            // An empty operand (frontier 0) has nothing to replicate.
            if !dense(x) || !dense(y) || fx[0] == 0 || fy[1] == 0 {
                return vec![];
            }
            let (Some(px), Some(py)) = (member(eg, x), member(eg, y)) else { return vec![] };
            let kx = KeyFn::replicate(2, 2, fy[1]);
            let ky = KeyFn::replicate(2, 0, fx[0]);
            let mut s = s.clone();
            for (v, id) in [("?px", px), ("?py", py)] {
                s.insert(var(v), id);
            }
            let s = crate::support::extend(eg, &s, vec![("?kx", Param::Key(kx)), ("?ky", Param::Key(ky))]);
            inst(eg, &rhs, &s).into_iter().collect()
        })],
    )
}
