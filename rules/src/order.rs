//! Family `order`: contraction order. Rules on the TRA (logical) sort that
//! change *which* products are computed, not how they are distributed: the
//! same e-graph then holds every order and every distribution, and
//! extraction chooses them together.
//!
//! They run in their own phase, before lowering, on the TRA operators only;
//! the optimizer then keeps, per class, the written member and the cheapest
//! by flops (`tra_optimizer::order`), so that a chain of n products does not
//! lower and explore all of its O(n³) bracketings.
//!
//! The facts they read are the kernel catalog's: `matrix_product` (a block
//! product `op(A)·op(B)`, with which operand is read transposed) and
//! `bilinear_over` (the aggregation kernels over which a binary kernel is
//! linear in each operand). A new product kernel opts in by stating them.

use crate::build::{add_checked, arity, dims, kernel, leaf, logical, vars, Family, Rule, RuleDef, Rw};
use egg::{Id, Subst, Var};
use tra_optimizer::egraph::{Ia, Param, TraEGraph};
use tra_optimizer::kernel::{KernelRef, MatrixProduct};

const FAMILY: Family = Family::Order;

/// Every contraction-order rule.
pub fn rules() -> Vec<RuleDef> {
    vec![matmul_assoc(), agg_eager()]
}

/// One operand of a product: a matrix class, read transposed or not.
#[derive(Debug, Clone, Copy)]
struct Factor {
    class: Id,
    transposed: bool,
}

impl Factor {
    fn flipped(self) -> Factor {
        Factor { transposed: !self.transposed, ..self }
    }
}

/// The contraction dims of a product's operands: `op(A)·op(B)` joins `A`
/// on its columns (`[1]`; its rows `[0]` when transposed) and `B` on its
/// rows (`[0]`; its columns `[1]` when transposed).
fn contraction(p: &MatrixProduct) -> (usize, usize) {
    (usize::from(!p.transpose_left), usize::from(p.transpose_right))
}

/// The product an `(aggregate ?g ?s (join ?jl ?jr ?k A B))` match
/// computes, when it is one, and its aggregation kernel: `k` is a block
/// matrix product (catalog fact `matrix_product`, or `compose(scale(c), …)`)
/// linear in each operand over `s` (fact `bilinear_over`), the join is on the
/// contraction dims of both operands and the aggregation groups the join's
/// output by the two outer dims, in order (`op(A)`'s rows, then `op(B)`'s
/// columns: join output dim 2). The operands are checked by the caller.
fn read_product<'e>(
    eg: &'e TraEGraph,
    s: &Subst,
    [g, agg, jl, jr, k]: [Var; 5],
) -> Option<(MatrixProduct, &'e KernelRef)> {
    let (g, agg, jl, jr, k) =
        (dims(eg, s[g])?, kernel(eg, s[agg])?, dims(eg, s[jl])?, dims(eg, s[jr])?, kernel(eg, s[k])?);
    let p = k.matrix_product()?;
    let (ca, cb) = contraction(&p);
    (k.is_bilinear_over(agg) && jl == [ca] && jr == [cb] && g == [1 - ca, 2]).then_some((p, agg))
}

/// Add the product `c·op(l)·op(r)`, summed by `agg`, as a TRA aggregate of a
/// join, type-checking each node; `None` when it does not type.
fn add_product(eg: &mut TraEGraph, l: Factor, r: Factor, scale: Option<String>, agg: &KernelRef) -> Option<Id> {
    let p = MatrixProduct { transpose_left: l.transposed, transpose_right: r.transposed, scale };
    let (ca, cb) = contraction(&p);
    let jl = leaf(eg, Param::Dims(vec![ca]));
    let jr = leaf(eg, Param::Dims(vec![cb]));
    let k = leaf(eg, Param::Kernel(p.kernel()));
    let join = add_checked(eg, Ia::Join([jl, jr, k, l.class, r.class]))?;
    let g = leaf(eg, Param::Dims(vec![1 - ca, 2]));
    let agg = leaf(eg, Param::Kernel(agg.clone()));
    add_checked(eg, Ia::Aggregate([g, agg, join]))
}

/// The left-nested product `(P·Q)·R` the rule matches.
const LEFT_NESTED: &str = "(aggregate ?g ?s (join ?jl ?jr ?k (aggregate ?g2 ?s2 (join ?jl2 ?jr2 ?k2 ?x ?y)) ?z))";
/// The right-nested product `P·(Q·R)` the rule matches.
const RIGHT_NESTED: &str = "(aggregate ?g ?s (join ?jl ?jr ?k ?x (aggregate ?g2 ?s2 (join ?jl2 ?jr2 ?k2 ?y ?z))))";

/// What the condition of `matmul-assoc` checks, in words.
const ASSOC_CHECKS: &str = "both are block matrix products `c·op(A)·op(B)` (kernel fact `matrix_product`, or \
    `compose(scale(c), …)`) linear in each operand over the same aggregation `s` (fact `bilinear_over`), joined on \
    the contraction dims and grouped by the outer dims; `x`, `y`, `z` complete, key arity 2; an inner product read \
    transposed is `(P·Q)ᵀ = Qᵀ·Pᵀ`; every node of the other bracketing type-checks";

/// Which operand of the outer product the matched inner product is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Nesting {
    /// `(P·Q)·R`: rebuilt as `P·(Q·R)`.
    Left,
    /// `P·(Q·R)`: rebuilt as `(P·Q)·R`.
    Right,
}

/// The other bracketing of a matched nested product (see [`matmul_assoc`]).
fn reassociate(eg: &mut TraEGraph, s: &Subst, nesting: Nesting) -> Option<Id> {
    let outer_vars = vars(["?g", "?s", "?jl", "?jr", "?k"]);
    let inner_vars = vars(["?g2", "?s2", "?jl2", "?jr2", "?k2"]);
    let [x, y, z] = vars(["?x", "?y", "?z"]);
    let (outer, agg) = read_product(eg, s, outer_vars)?;
    let (inner, agg2) = read_product(eg, s, inner_vars)?;
    if agg != agg2 {
        return None;
    }
    let agg = agg.clone();
    let matrix = |id: Id| logical(eg, id).is_some_and(|l| l.complete && l.rel.key_arity() == 2);
    if ![s[x], s[y], s[z]].into_iter().all(matrix) {
        return None;
    }
    let f = |class: Id, transposed: bool| Factor { class, transposed };
    match nesting {
        Nesting::Left => {
            // Outer: op(x·y)·op(z); the inner product's factors, read as the outer reads it.
            let (p, q) = (f(s[x], inner.transpose_left), f(s[y], inner.transpose_right));
            let (p, q) = if outer.transpose_left { (q.flipped(), p.flipped()) } else { (p, q) };
            let r = f(s[z], outer.transpose_right);
            let qr = add_product(eg, q, r, inner.scale, &agg)?;
            add_product(eg, p, f(qr, false), outer.scale, &agg)
        }
        Nesting::Right => {
            let p = f(s[x], outer.transpose_left);
            let (q, r) = (f(s[y], inner.transpose_left), f(s[z], inner.transpose_right));
            let (q, r) = if outer.transpose_right { (r.flipped(), q.flipped()) } else { (q, r) };
            let pq = add_product(eg, p, q, inner.scale, &agg)?;
            add_product(eg, f(pq, false), r, outer.scale, &agg)
        }
    }
}

/// `matmul-assoc`: associativity of block matrix products,
/// `Σ_k (Σ_j X_ij Y_jk) V_kl = Σ_j X_ij (Σ_k Y_jk V_kl)`, on the TRA
/// (logical) sort, both ways: `(P·Q)·R` is also built as `P·(Q·R)` and
/// the reverse, so that the e-graph holds every bracketing of a chain and
/// extraction picks the order together with each product's distribution.
///
/// A product is `aggregate([r, 2], s, join([ca], [cb], k, A, B))` where `k`
/// is a block matrix product `c·op(A)·op(B)` — `matMul`, `matMulTN`,
/// `matMulNT`, `matMulTT` (catalog fact `matrix_product`), or one of them
/// composed with `scale(c)` — linear in each operand over `s` (catalog fact
/// `bilinear_over`: `matAdd`), joined on the contraction dims (`ca` = 1, or 0
/// for a transposed left operand; `cb` = 0, or 1 for a transposed right one)
/// and grouped by the outer dims `[1 - ca, 2]` (the join's output is `A`'s
/// two dims then `B`'s remaining one). Soundness: per output block,
/// `Σ_k (Σ_j X_ij Y_jk) V_kl = Σ_j Σ_k X_ij Y_jk V_kl = Σ_j X_ij (Σ_k Y_jk
/// V_kl)` by linearity of the block product in each operand over the sum
/// and associativity of the matrix product; a key `(i,l)` is present on
/// either side exactly when some `X_ij`, `Y_jk`, `V_kl` are. A transposed
/// inner product is read `(P·Q)ᵀ = Qᵀ·Pᵀ` (flags flipped, factors swapped);
/// scale factors commute, so each stays with its product (the outer's
/// outside). The new products read the original factors as the old ones
/// did; the new inner product is never read transposed.
///
/// Arity audit: `x`, `y`, `z` are checked to be complete relations of key
/// arity 2 (so the inner product is one too); the join dims `[ca]`/`[cb]`
/// name a dim of each 2-dim operand; `[1 - ca, 2]` names two of the join's
/// three output dims; no key map.
pub fn matmul_assoc() -> RuleDef {
    Rule::new("matmul-assoc", FAMILY)
        .why("block matrix products linear in each operand over the sum are associative: (P·Q)·R = P·(Q·R) block by block, and a key is on either side exactly when a chain of blocks meets")
        .rw(Rw::apply(LEFT_NESTED, "P·(Q·R) (the same factors, products built as matched)", |eg, _, s| {
            reassociate(eg, s, Nesting::Left).into_iter().collect()
        })
        .named("right")
        .checks(ASSOC_CHECKS))
        .rw(Rw::apply(RIGHT_NESTED, "(P·Q)·R (the same factors, products built as matched)", |eg, _, s| {
            reassociate(eg, s, Nesting::Right).into_iter().collect()
        })
        .named("left")
        .checks(ASSOC_CHECKS))
        .build()
}

/// What an `agg-eager` match reads: the aggregation's group dims, the join
/// dims on each side and both operands' key arities.
struct EagerMatch {
    g: Vec<usize>,
    jl: Vec<usize>,
    jr: Vec<usize>,
    na: usize,
    nb: usize,
}

/// Reads an `agg-eager` match: `None` unless the join kernel is linear in
/// each operand over the aggregation.
fn eager_match(eg: &TraEGraph, s: &Subst, [g, agg, jl, jr, k, a, b]: [Var; 7]) -> Option<EagerMatch> {
    let (g, aggk, jl, jr, kk) =
        (dims(eg, s[g])?, kernel(eg, s[agg])?, dims(eg, s[jl])?, dims(eg, s[jr])?, kernel(eg, s[k])?);
    if !kk.is_bilinear_over(aggk) {
        return None;
    }
    let (na, nb) = (arity(eg, s[a])?, arity(eg, s[b])?);
    Some(EagerMatch { g: g.to_vec(), jl: jl.to_vec(), jr: jr.to_vec(), na, nb })
}

/// The right-hand side of `agg-eager/left` for a match, when its condition holds.
fn push_aggregation_left(eg: &mut TraEGraph, s: &Subst, vs: [Var; 7]) -> Option<Id> {
    let EagerMatch { g: gd, jl: jld, na, nb, jr: jrd } = eager_match(eg, s, vs)?;
    let [_, agg, _, jr, k, a, b] = vs;
    let rest = (0..nb).filter(|d| !jrd.contains(d)).count();
    // g = ga ++ (every dim of b's rest, in order), ga increasing, holding
    // every left join dim, and leaving some dim of a out.
    let cut = gd.len().checked_sub(rest)?;
    let (ga, gb) = gd.split_at(cut);
    let tail_ok = gb.iter().enumerate().all(|(t, &d)| d == na + t);
    let increasing = ga.windows(2).all(|w| w[0] < w[1]) && ga.iter().all(|&d| d < na);
    if !tail_ok || !increasing || ga.len() == na || !jld.iter().all(|d| ga.contains(d)) {
        return None;
    }
    let jl2: Vec<usize> = jld.iter().map(|d| ga.iter().position(|x| x == d)).collect::<Option<_>>()?;
    let (jr, k, agg) = (s[jr], s[k], s[agg]);
    let ga = leaf(eg, Param::Dims(ga.to_vec()));
    let pre = add_checked(eg, Ia::Aggregate([ga, agg, s[a]]))?;
    let jl2 = leaf(eg, Param::Dims(jl2));
    add_checked(eg, Ia::Join([jl2, jr, k, pre, s[b]]))
}

/// The right-hand side of `agg-eager/right` for a match, when its condition holds.
fn push_aggregation_right(eg: &mut TraEGraph, s: &Subst, vs: [Var; 7]) -> Option<Id> {
    let EagerMatch { g: gd, jr: jrd, na, nb, .. } = eager_match(eg, s, vs)?;
    let [_, agg, jl, _, k, a, b] = vs;
    // b's dims that the join's output keeps (after a's), in order.
    let rest: Vec<usize> = (0..nb).filter(|d| !jrd.contains(d)).collect();
    // g = [0, 1, …, na-1] ++ gb, gb increasing output dims of b's rest,
    // leaving some out.
    let (head, gb) = gd.split_at(na.min(gd.len()));
    let head_ok = head.len() == na && head.iter().enumerate().all(|(t, &d)| d == t);
    let increasing = gb.windows(2).all(|w| w[0] < w[1]) && gb.iter().all(|&d| d >= na && d < na + rest.len());
    if !head_ok || !increasing || gb.len() == rest.len() {
        return None;
    }
    // The pre-aggregate keeps b's join dims and the kept rest dims, in b's order.
    let kept: Vec<usize> = (0..nb).filter(|d| jrd.contains(d) || gb.iter().any(|&o| rest[o - na] == *d)).collect();
    let jr2: Vec<usize> = jrd.iter().map(|d| kept.iter().position(|x| x == d)).collect::<Option<_>>()?;
    let (jl, k, agg) = (s[jl], s[k], s[agg]);
    let gb = leaf(eg, Param::Dims(kept));
    let pre = add_checked(eg, Ia::Aggregate([gb, agg, s[b]]))?;
    let jr2 = leaf(eg, Param::Dims(jr2));
    add_checked(eg, Ia::Join([jl, jr2, k, s[a], pre]))
}

/// `agg-eager`: eager aggregation, `Σ_i k(a_(i,u), b_v) = k(Σ_i a_(i,u),
/// b_v)` and `Σ_i k(a_u, b_(v,i)) = k(a_u, Σ_i b_(v,i))`: an aggregation
/// over a join whose summed-away dims all come from one operand (none a
/// join dim) is pushed below the join, onto that operand, when the join
/// kernel is linear in each operand over the aggregation (catalog fact
/// `bilinear_over`; a kernel opts in by stating it, no rule names a
/// kernel). Applied left to right only: the pushed form has no aggregation
/// over the join left to match, so it does not repeat; the written form
/// stays in the class, and the ordering phase keeps the cheaper by flops
/// (summing before the product saves the product's calls).
///
/// Condition, `left` (dims of `a` summed): `g` is `ga ++ [na, na+1, …]`
/// where `ga` is an increasing list of `a`'s dims (`na` = `a`'s key arity)
/// that holds every left join dim and leaves at least one out, followed by
/// every dim the right operand contributes to the join's output, in order;
/// so both sides key their output (`ga`'s dims, then `b`'s) alike.
/// `right` (dims of `b` summed): `g` is `[0, 1, …, na-1] ++ gb`, every dim
/// of `a` in order, then an increasing list `gb` of the output dims `b`
/// contributes that leaves at least one out; the pre-aggregate groups `b`
/// by its join dims and the kept dims, in `b`'s order, so the join's output
/// (`a`'s dims, then the pre-aggregate's non-join dims) is keyed as `g`.
///
/// Soundness: per group, the sum over the summed operand's tuples of
/// `k(a, b)`, each meeting the same tuple of the other operand (the join
/// dims are kept, and every dim of the other operand is in the group), is
/// `k` of their sum by linearity in that operand; a group is present on
/// either side exactly when some tuple of one operand with its keys meets a
/// tuple of the other.
///
/// Arity audit: `g` is judged against the join's output (`na` + `b`'s
/// non-join dims); `ga` against `a`; the new join dims are positions in the
/// pre-aggregate's keys, the other operand's join dims are unchanged; no
/// key map.
pub fn agg_eager() -> RuleDef {
    let vs = vars(["?g", "?s", "?jl", "?jr", "?k", "?a", "?b"]);
    Rule::new("agg-eager", FAMILY)
        .why("a kernel linear in each operand over the aggregation lets the tuples of one operand that meet the same tuple of the other be summed before the product")
        .rw(Rw::apply(
            "(aggregate ?g ?s (join ?jl ?jr ?k ?a ?b))",
            "(join jl' ?jr ?k (aggregate ga ?s ?a) ?b)",
            move |eg, _, s| push_aggregation_left(eg, s, vs).into_iter().collect(),
        )
        .named("left")
        .checks("`k` bilinear over `s` (fact `bilinear_over`); `g` = `ga` ++ the join's dims from `b` in order, `ga` increasing dims of `a` holding every left join dim `jl` and leaving one out; `jl'` = the positions of `jl` in `ga`"))
        .rw(Rw::apply(
            "(aggregate ?g ?s (join ?jl ?jr ?k ?a ?b))",
            "(join ?jl jr' ?k ?a (aggregate gb' ?s ?b))",
            move |eg, _, s| push_aggregation_right(eg, s, vs).into_iter().collect(),
        )
        .named("right")
        .checks("`k` bilinear over `s` (fact `bilinear_over`); `g` = every dim of `a` in order ++ `gb`, increasing output dims from `b` leaving one out; `gb'` = `b`'s join dims and the dims `gb` keeps, in `b`'s order; `jr'` = the positions of `jr` in `gb'`"))
        .build()
}
