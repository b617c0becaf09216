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

use crate::build::{rw, vars, Bound, Family, Rule, RuleDef};
use crate::cond::{dense_nonempty, matrices, matrix_frontiers};
use egg::Id;
use tra_optimizer::egraph::{Ia, Param, TraEGraph};
use tra_optimizer::keyexpr::KeyFn;

const FAMILY: Family = Family::Matmul;

/// The TRA matmul the three rules match.
const MATMUL: &str = "(aggregate [0,2] kernel:matAdd (join [1] [0] kernel:matMul ?x ?y))";

/// Every matmul rule.
pub fn rules() -> Vec<RuleDef> {
    vec![matmul_bmm(), matmul_cmm(), matmul_rmm()]
}

/// `matmul-bmm`: broadcast matrix multiplication, both ways (`X` broadcast
/// and `Y` shuffled on its column blocks, or the mirror).
///
/// The join's output is hashed on an output dim in `[0,2]` (`k` from `Y`, or
/// `i` from `X`), so the aggregation is complete without another shuffle.
/// Condition: operands of key arity 2 with equal common frontier.
///
/// Arity audit: both operands are checked to have key arity 2; `[1]`/`[0]`
/// shuffle each operand by its own dims, `[0,2]` groups the join's 3-dim
/// output; no key map.
pub fn matmul_bmm() -> RuleDef {
    Rule::new("matmul-bmm", FAMILY)
        .why(
            "with one operand on every site, each product meets on the other's sites, already grouped by an output dim",
        )
        .rw(rw(
            MATMUL,
            "(erase (lagg [0,2] kernel:matAdd (ljoin [1] [0] kernel:matMul (broadcast ?x) (shuffle [1] ?y))))",
        )
        .or("(erase (lagg [0,2] kernel:matAdd (ljoin [1] [0] kernel:matMul (shuffle [0] ?x) (broadcast ?y))))")
        .when(matrices("?x", "?y")))
        .build()
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
    Rule::new("matmul-cmm", FAMILY)
        .why("every product (i,j,k) is made once, on the site of j; matAdd is associative and commutative, so partial sums by (i,k) are summed again")
        .rw(rw(
            MATMUL,
            "(erase (lagg [0,1] kernel:matAdd (shuffle [0,1] (erase (lagg [0,2] kernel:matAdd \
             (ljoin [1] [0] kernel:matMul (shuffle [1] ?x) (shuffle [0] ?y)))))))",
        )
        .when(matrices("?x", "?y")))
        .build()
}

/// A P member of an L class (the one with the smallest class id, so that
/// repeated matches build the same nodes).
pub fn member(eg: &TraEGraph, l: Id) -> Option<Id> {
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
    let [x, y] = vars(["?x", "?y"]);
    Rule::new("matmul-rmm", FAMILY)
        .why("replicating dense operands by the other's outer frontier gives exactly the keys the 3-dim join needs, each product on one site")
        .rw(rw(
            MATMUL,
            "(erase (lagg [0,2] kernel:matAdd (shuffle [0,2] (erase (ljoin [0,1,2] [0,1,2] kernel:matMul \
             (shuffle [0,1,2] (erase (lmap ?kx id ?px))) (shuffle [0,1,2] (erase (lmap ?ky id ?py))))))))",
        )
        .when(matrices("?x", "?y"))
        .when(dense_nonempty("?x", "?y"))
        .reads_members()
        .bind(
            &[("?px", "member(?x)"), ("?py", "member(?y)"), ("?kx", "key:[k0,k1,0..K]"), ("?ky", "key:[0..I,k0,k1]")],
            move |eg, _, s| {
                let (fx, fy) = matrix_frontiers(eg, s[x], s[y])?;
                let (px, py) = (member(eg, s[x])?, member(eg, s[y])?);
                let kx = KeyFn::replicate(2, 2, fy[1]);
                let ky = KeyFn::replicate(2, 0, fx[0]);
                Some(vec![
                    Bound::Class(px),
                    Bound::Class(py),
                    Bound::Leaf(Param::Key(kx)),
                    Bound::Leaf(Param::Key(ky)),
                ])
            },
        ))
        .build()
}
