//! The TRA nodes of one step: reducing an operand on its own (diagonal,
//! private sums, permutation) and contracting two (join with `einSum` or a
//! matmul kernel, then aggregate with `matAdd`).

use crate::analyze::{Analysis, Label};
use std::collections::HashSet;
use tra_optimizer::kernel::KernelRef;
use tra_optimizer::keyexpr::{KeyFn, Predicate};
use tra_optimizer::program::TraOp;

fn key_fn(text: &str) -> KeyFn {
    KeyFn::parse(text).expect("generated key expressions parse")
}

pub(crate) fn positions(of: &[Label], within: &[Label]) -> Vec<usize> {
    of.iter().map(|l| within.iter().position(|m| m == l).expect("a label of the relation")).collect()
}

fn permute_key(perm: &[usize]) -> KeyFn {
    let parts: Vec<String> = perm.iter().map(|p| format!("k{p}")).collect();
    key_fn(&format!("[{}]", parts.join(", ")))
}

pub(crate) fn distinct(l: &[Label]) -> Vec<Label> {
    let mut out: Vec<Label> = Vec::new();
    for &x in l {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

fn same_set(a: &[Label], b: &[Label]) -> bool {
    a.len() == b.len() && a.iter().all(|x| b.contains(x))
}

/// Names nodes: `base`, or `base2`, `base3`… when taken.
pub(crate) struct Names {
    pub(crate) taken: HashSet<String>,
}

impl Names {
    pub(crate) fn fresh(&mut self, base: &str) -> String {
        let name = if !self.taken.contains(base) {
            base.to_string()
        } else {
            (2..).map(|i| format!("{base}{i}")).find(|n| !self.taken.contains(n)).expect("a free name")
        };
        self.taken.insert(name.clone());
        name
    }
}

/// The nodes that reduce one operand (`x`, labels `l`) to the labels
/// `target` (distinct, a subset of `l`'s, in the wanted order): diagonal of
/// repeated labels, sums of the others, permutation. Empty when `l` is
/// already `target`.
pub(crate) fn unary_ops(
    a: &Analysis,
    x: &str,
    l: &[Label],
    target: &[Label],
    base: &str,
    names: &mut Names,
) -> Vec<(String, TraOp)> {
    let mut ops: Vec<(String, TraOp)> = Vec::new();
    let d = distinct(l);
    let mut cur = x.to_string();
    let repeated = d.len() != l.len();
    if repeated {
        let mut conds = Vec::new();
        for (p, lab) in l.iter().enumerate() {
            let first = l.iter().position(|m| m == lab).expect("present");
            if first != p {
                conds.push(format!("k{first} == k{p}"));
            }
        }
        let predicate = Predicate::parse(&conds.join(" && ")).expect("generated predicates parse");
        let f = names.fresh(&format!("{base}_diag"));
        ops.push((f.clone(), TraOp::Filter { input: cur, predicate }));
        let first_positions: Vec<usize> =
            d.iter().map(|lab| l.iter().position(|m| m == lab).expect("present")).collect();
        let r = names.fresh(&format!("{base}_diag_key"));
        ops.push((r.clone(), TraOp::Rekey { input: f, key: permute_key(&first_positions) }));
        cur = r;
    }
    // The key is now `d`.
    let sums = !same_set(&d, target);
    if repeated || target != d.as_slice() {
        let t = names.fresh(&format!("{base}_ein"));
        ops.push((t.clone(), TraOp::Transform { input: cur, kernel: a.spec(&[l], target) }));
        cur = t;
    }
    if sums {
        let s = names.fresh(&format!("{base}_sum"));
        ops.push((
            s,
            TraOp::Aggregate { input: cur, group_by: positions(target, &d), kernel: KernelRef::named("matAdd") },
        ));
    } else if target != d.as_slice() {
        let r = names.fresh(&format!("{base}_perm"));
        ops.push((r, TraOp::Rekey { input: cur, key: permute_key(&positions(target, &d)) }));
    }
    ops
}

/// `(swap, kernel, left key dim, right key dim, group_by)` when the
/// contraction is a block matrix product.
fn matmul_form(lx: &[Label], ly: &[Label], res: &[Label]) -> Option<(bool, &'static str, usize, usize, Vec<usize>)> {
    if lx.len() != 2 || ly.len() != 2 || res.len() != 2 || lx[0] == lx[1] || ly[0] == ly[1] || res[0] == res[1] {
        return None;
    }
    let shared: Vec<Label> = lx.iter().copied().filter(|l| ly.contains(l)).collect();
    let [b] = shared.as_slice() else { return None };
    if res.contains(b) {
        return None;
    }
    for (swap, l, r) in [(false, lx, ly), (true, ly, lx)] {
        let lb = l.iter().position(|x| x == b).expect("shared");
        let rb = r.iter().position(|x| x == b).expect("shared");
        let (a, c) = (l[1 - lb], r[1 - rb]);
        if res == [a, c] {
            let kernel = match (lb == 0, rb == 1) {
                (false, false) => "matMul",
                (true, false) => "matMulTN",
                (false, true) => "matMulNT",
                (true, true) => "matMulTT",
            };
            // Join key: l ++ [c]; a is at 1 - lb, c at 2.
            return Some((swap, kernel, lb, rb, vec![1 - lb, 2]));
        }
    }
    None
}

/// The nodes of one pairwise contraction of `x` (labels `lx`) and `y`
/// (labels `ly`, both distinct) into `res` (distinct, in order): a join on
/// the shared labels with `einSum` (or a matrix product), then an aggregate
/// summing the labels not in `res`, or a rekey when only the order differs.
/// The last node is named `last`. Returns the nodes and the kernel.
pub(crate) fn contraction_ops(
    a: &Analysis,
    (x, lx): (&str, &[Label]),
    (y, ly): (&str, &[Label]),
    res: &[Label],
    join_name: &str,
    last: &str,
) -> (Vec<(String, TraOp)>, KernelRef) {
    if let Some((swap, kernel, lk, rk, group_by)) = matmul_form(lx, ly, res) {
        let ((l, _), (r, _)) = if swap { ((y, ly), (x, lx)) } else { ((x, lx), (y, ly)) };
        let k = KernelRef::named(kernel);
        let join = TraOp::Join {
            left: l.to_string(),
            right: r.to_string(),
            left_keys: vec![lk],
            right_keys: vec![rk],
            kernel: k.clone(),
        };
        let agg = TraOp::Aggregate { input: join_name.to_string(), group_by, kernel: KernelRef::named("matAdd") };
        return (vec![(join_name.to_string(), join), (last.to_string(), agg)], k);
    }
    let shared: Vec<Label> = lx.iter().copied().filter(|l| ly.contains(l)).collect();
    let left_keys = positions(&shared, lx);
    let right_keys = positions(&shared, ly);
    let mut j: Vec<Label> = lx.to_vec();
    j.extend(ly.iter().copied().filter(|l| !shared.contains(l)));
    let kernel = a.spec(&[lx, ly], res);
    let join = |name: &str| {
        (
            name.to_string(),
            TraOp::Join {
                left: x.into(),
                right: y.into(),
                left_keys: left_keys.clone(),
                right_keys: right_keys.clone(),
                kernel: kernel.clone(),
            },
        )
    };
    let ops = if j == res {
        vec![join(last)]
    } else if same_set(&j, res) {
        vec![
            join(join_name),
            (last.to_string(), TraOp::Rekey { input: join_name.into(), key: permute_key(&positions(res, &j)) }),
        ]
    } else {
        vec![
            join(join_name),
            (
                last.to_string(),
                TraOp::Aggregate {
                    input: join_name.into(),
                    group_by: positions(res, &j),
                    kernel: KernelRef::named("matAdd"),
                },
            ),
        ]
    };
    (ops, kernel)
}
