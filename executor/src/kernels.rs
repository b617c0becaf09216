//! The block kernels of the catalog ([`tra_optimizer::kernel`]) on ndarray.
//!
//! [`apply`] checks a kernel and its operands through the catalog's shape
//! rules, then computes. The code is plain and direct (a faster executor is
//! separate): matrix products use ndarray's `dot`, elementwise kernels are
//! per-element scalar functions, so that a composition of elementwise kernels
//! runs in one pass without temporaries. Results are in standard (row-major)
//! layout.
//!
//! `concat` is not applied pairwise: the aggregation operator joins a group's
//! pieces with [`concat_pieces`]. [`fold`] is the left fold of a binary kernel
//! that aggregation uses for the other kernels.

use ndarray::{ArrayD, ArrayView2, Axis, Ix2, IxDyn, Slice, Zip};
use tra_optimizer::kernel::{EinSumSpec, KernelError, KernelRef};

/// A block: an n-dimensional array of `f64`.
pub type Block = ArrayD<f64>;

/// Applies `kernel` to `inputs`: one block, or for `tile` several (in piece
/// order). Errors (unknown kernel, wrong arguments or arity, shapes the kernel
/// does not accept) come from the catalog's rules, before any computation.
/// `concat` gives [`KernelError::BadUse`]: use [`concat_pieces`].
pub fn apply(kernel: &KernelRef, inputs: &[&Block]) -> Result<Vec<Block>, KernelError> {
    let shapes: Vec<&[usize]> = inputs.iter().map(|b| b.shape()).collect();
    kernel.output_shape(&shapes)?;
    let out = compute(kernel, inputs)?;
    Ok(out.into_iter().map(standard_layout).collect())
}

/// The block itself if it is row-major, else a row-major copy.
fn standard_layout(b: Block) -> Block {
    if b.is_standard_layout() {
        b
    } else {
        b.as_standard_layout().into_owned()
    }
}

/// Left fold of the binary kernel over one or more blocks: `k(k(b0, b1), b2)…`;
/// one block gives a copy of itself.
pub fn fold(kernel: &KernelRef, blocks: &[&Block]) -> Result<Block, KernelError> {
    kernel.check()?;
    if kernel.arity() != 2 {
        return Err(KernelError::BadUse(format!(
            "fold needs a binary kernel, {kernel} takes {} operand(s)",
            kernel.arity()
        )));
    }
    let (first, rest) =
        blocks.split_first().ok_or_else(|| KernelError::BadUse(format!("fold of {kernel}: no blocks")))?;
    let mut acc = (*first).clone();
    for b in rest {
        acc = single(kernel, apply(kernel, &[&acc, b])?)?;
    }
    Ok(acc)
}

/// Joins `pieces` (each with its index) along axis `array_dim`, in index
/// order, into a block whose bound `array_dim` is the piece bound × `count`;
/// missing indices are zero-filled. All pieces must have the same shape;
/// indices must be below `count` and distinct.
pub fn concat_pieces(pieces: &[(u32, &Block)], array_dim: usize, count: u32) -> Result<Block, KernelError> {
    let out_shape = concat_shape(pieces.iter().map(|&(i, p)| (i, p.shape())), array_dim, count)?;
    let piece = pieces[0].1.shape()[array_dim];
    let mut out = Block::zeros(IxDyn(&out_shape));
    for &(i, p) in pieces {
        let start = i as usize * piece;
        out.slice_axis_mut(Axis(array_dim), Slice::from(start..start + piece)).assign(p);
    }
    Ok(out)
}

/// The shape of a concat of pieces (each index with its piece's shape)
/// along `array_dim` into `count` pieces, after checking that there are
/// pieces, all of one shape, with distinct indices below `count` (the checks,
/// and their errors, of both `concat_pieces`).
pub(crate) fn concat_shape<'a>(
    pieces: impl Iterator<Item = (u32, &'a [usize])> + Clone,
    array_dim: usize,
    count: u32,
) -> Result<Vec<usize>, KernelError> {
    let Some((_, shape)) = pieces.clone().next() else {
        return Err(KernelError::BadUse("concat: no pieces, so no piece shape".into()));
    };
    if array_dim >= shape.len() {
        return Err(KernelError::BadShape(format!(
            "concat: array dim {array_dim} is out of range for pieces of shape {shape:?}"
        )));
    }
    let mut seen: Vec<u32> = Vec::new();
    for (i, p) in pieces {
        if p != shape {
            return Err(KernelError::BadShape(format!("concat: piece shapes differ: {shape:?} and {p:?}")));
        }
        if i >= count {
            return Err(KernelError::BadUse(format!("concat: piece index {i} is not below the count {count}")));
        }
        seen.push(i);
    }
    seen.sort_unstable();
    if let Some(w) = seen.windows(2).find(|w| w[0] == w[1]) {
        return Err(KernelError::BadUse(format!("concat: two pieces have index {}", w[0])));
    }
    let piece = shape[array_dim];
    let mut out_shape = shape.to_vec();
    out_shape[array_dim] = piece.checked_mul(count as usize).ok_or_else(|| {
        KernelError::BadShape(format!("concat: {count} pieces of bound {piece} overflow array dim {array_dim}"))
    })?;
    Ok(out_shape)
}

/// The only block of a result.
fn single(kernel: &KernelRef, mut blocks: Vec<Block>) -> Result<Block, KernelError> {
    if blocks.len() != 1 {
        return Err(KernelError::BadUse(format!("{kernel} gives {} blocks per call, not one", blocks.len())));
    }
    Ok(blocks.pop().expect("one block"))
}

/// Computes an already checked kernel.
fn compute(kernel: &KernelRef, inputs: &[&Block]) -> Result<Vec<Block>, KernelError> {
    match kernel {
        KernelRef::Named { name, args } => named(kernel, name, args, inputs),
        KernelRef::Compose(outer, inner) => {
            if let Some(f) = scalar(kernel) {
                // Both parts elementwise: one pass.
                return Ok(vec![run_scalar(&f, inputs)]);
            }
            if inner.arity() == 2 && inner.is_elementwise() && outer.distributes_over(inner) {
                // inner(outer(a), outer(b)): e.g. only the diagonals are added.
                let oa = single(outer, compute(outer, &inputs[..1])?)?;
                let ob = single(outer, compute(outer, &inputs[1..])?)?;
                return compute(inner, &[&oa, &ob]);
            }
            let mid = single(inner, compute(inner, inputs)?)?;
            compute(outer, &[&mid])
        }
    }
}

/// A per-element function of an elementwise kernel.
enum Scalar {
    Unary(Box<dyn Fn(f64) -> f64>),
    Binary(Box<dyn Fn(f64, f64) -> f64>),
}

/// The per-element function of an elementwise kernel or composition of
/// elementwise kernels; `None` for other kernels.
fn scalar(kernel: &KernelRef) -> Option<Scalar> {
    use Scalar::{Binary, Unary};
    match kernel {
        KernelRef::Named { name, args } => {
            let arg = |i: usize| args.get(i).and_then(|a| a.parse::<f64>().ok());
            Some(match name.as_str() {
                "matAdd" => Binary(Box::new(|a, b| a + b)),
                "matSub" => Binary(Box::new(|a, b| a - b)),
                "elemMul" => Binary(Box::new(|a, b| a * b)),
                "max" => Binary(Box::new(f64::max)),
                "min" => Binary(Box::new(f64::min)),
                "reluGrad" => Binary(Box::new(|grad, z| if z > 0.0 { grad } else { 0.0 })),
                "sgdStep" => {
                    let lr = arg(0)?;
                    Binary(Box::new(move |w, g| w - lr * g))
                }
                "relu" => Unary(Box::new(|x| if x > 0.0 { x } else { 0.0 })),
                "sigmoid" => Unary(Box::new(|x| 1.0 / (1.0 + (-x).exp()))),
                "neg" => Unary(Box::new(|x| -x)),
                "scale" => {
                    let c = arg(0)?;
                    Unary(Box::new(move |x| c * x))
                }
                _ => return None,
            })
        }
        KernelRef::Compose(outer, inner) => {
            let Unary(f) = scalar(outer)? else { return None };
            Some(match scalar(inner)? {
                Unary(g) => Unary(Box::new(move |x| f(g(x)))),
                Binary(g) => Binary(Box::new(move |a, b| f(g(a, b)))),
            })
        }
    }
}

/// Applies a per-element function to operands of one shape.
fn run_scalar(f: &Scalar, inputs: &[&Block]) -> Block {
    match f {
        Scalar::Unary(f) => inputs[0].mapv(f),
        Scalar::Binary(f) => Zip::from(inputs[0]).and(inputs[1]).map_collect(|&a, &b| f(a, b)),
    }
}

/// A block as a matrix view (the shape rules have checked the rank).
fn mat(b: &Block) -> Result<ArrayView2<'_, f64>, KernelError> {
    b.view()
        .into_dimensionality::<Ix2>()
        .map_err(|_| KernelError::BadShape(format!("expected a matrix, got {:?}", b.shape())))
}

/// A numeric argument (canonical text, checked by the catalog).
fn arg_f64(kernel: &KernelRef, args: &[String], i: usize) -> Result<f64, KernelError> {
    args.get(i)
        .and_then(|a| a.parse::<f64>().ok())
        .ok_or_else(|| KernelError::BadUse(format!("{kernel}: argument {i} is missing or not a number")))
}

/// An integer argument (canonical text, checked by the catalog).
fn arg_usize(kernel: &KernelRef, args: &[String], i: usize) -> Result<usize, KernelError> {
    args.get(i)
        .and_then(|a| a.parse::<usize>().ok())
        .ok_or_else(|| KernelError::BadUse(format!("{kernel}: argument {i} is missing or not an integer")))
}

/// Orders (value, index) pairs: by value (`total_cmp`), then by index.
fn pair_less(v1: f64, i1: f64, v2: f64, i2: f64) -> bool {
    v1.total_cmp(&v2).then(i1.total_cmp(&i2)).is_lt()
}

/// Computes a checked catalog kernel.
fn named(kernel: &KernelRef, name: &str, args: &[String], inputs: &[&Block]) -> Result<Vec<Block>, KernelError> {
    if let Some(f) = scalar(kernel) {
        return Ok(vec![run_scalar(&f, inputs)]);
    }
    let out = match name {
        "matMul" => mat(inputs[0])?.dot(&mat(inputs[1])?),
        "matMulTN" => mat(inputs[0])?.t().dot(&mat(inputs[1])?),
        "matMulNT" => mat(inputs[0])?.dot(&mat(inputs[1])?.t()),
        "matMulTT" => mat(inputs[0])?.t().dot(&mat(inputs[1])?.t()),
        "transpose" => mat(inputs[0])?.t().as_standard_layout().into_owned(),
        _ => return named_other(kernel, name, args, inputs),
    };
    Ok(vec![out.into_dyn()])
}

/// The other catalog kernels.
fn named_other(kernel: &KernelRef, name: &str, args: &[String], inputs: &[&Block]) -> Result<Vec<Block>, KernelError> {
    let a = inputs[0];
    let out: Block = match name {
        "diag" => mat(a)?.diag().to_owned().into_dyn(),
        "matVecAdd" => Zip::from(a).and_broadcast(inputs[1]).map_collect(|&x, &v| x + v),
        "matVecSub" => Zip::from(a).and_broadcast(inputs[1]).map_collect(|&x, &v| x - v),
        "rowSum" => mat(a)?.sum_axis(Axis(1)).into_dyn(),
        "colSum" => mat(a)?.sum_axis(Axis(0)).into_dyn(),
        "minIndex" => {
            // A vector is one row.
            let a = if a.ndim() == 1 {
                a.view().into_shape_with_order((1, a.len())).map_err(|e| KernelError::BadShape(e.to_string()))?
            } else {
                mat(a)?
            };
            let mut out = Block::zeros(IxDyn(&[a.nrows(), 2]));
            for (i, row) in a.rows().into_iter().enumerate() {
                let mut best = 0;
                for j in 1..row.len() {
                    if row[j].total_cmp(&row[best]).is_lt() {
                        best = j;
                    }
                }
                out[[i, 0]] = row[best];
                out[[i, 1]] = best as f64;
            }
            out
        }
        "minPair" => {
            let mut out = a.clone();
            let b = inputs[1];
            for i in 0..a.shape()[0] {
                if pair_less(b[[i, 0]], b[[i, 1]], a[[i, 0]], a[[i, 1]]) {
                    out[[i, 0]] = b[[i, 0]];
                    out[[i, 1]] = b[[i, 1]];
                }
            }
            out
        }
        "offsetIndex" => {
            let o = arg_f64(kernel, args, 0)?;
            let mut out = a.clone();
            out.index_axis_mut(Axis(1), 1).mapv_inplace(|x| x + o);
            out
        }
        "tile" => {
            let (dim, size) = (arg_usize(kernel, args, 0)?, arg_usize(kernel, args, 1)?);
            let pieces = a.shape()[dim] / size;
            return Ok((0..pieces)
                .map(|p| {
                    a.slice_axis(Axis(dim), Slice::from(p * size..(p + 1) * size)).as_standard_layout().into_owned()
                })
                .collect());
        }
        "concat" => {
            return Err(KernelError::BadUse(format!(
                "{kernel} is applied by the aggregation operator to a group's pieces (concat_pieces), not pairwise"
            )))
        }
        "einSum" => einsum_named(kernel, args, inputs)?,
        other => return Err(KernelError::BadUse(format!("kernel `{other}` has no implementation in the executor"))),
    };
    Ok(vec![out])
}

/// `einSum(spec)` from its kernel reference.
fn einsum_named(kernel: &KernelRef, args: &[String], inputs: &[&Block]) -> Result<Block, KernelError> {
    let spec = args
        .first()
        .and_then(|a| EinSumSpec::parse(a).ok())
        .ok_or_else(|| KernelError::BadUse(format!("{kernel}: the spec is missing or does not parse")))?;
    einsum(&spec, inputs)
}

/// Einstein summation of one or two blocks ([`EinSumSpec`], paper 004's
/// `einSumOp`). A binary spec without a letter repeated inside an operand
/// runs as a batched matrix product: each operand is first summed over the
/// letters only it has (and the output lacks), then permuted to
/// `[batch, free, contracted]` / `[batch, contracted, free]` and multiplied
/// batch by batch with ndarray's GEMM; the product is permuted to the output's
/// letter order. Anything else (diagonals, unary specs) runs as plain loops
/// over every assignment of the letters. The result is row-major.
pub fn einsum(spec: &EinSumSpec, inputs: &[&Block]) -> Result<Block, KernelError> {
    let shapes: Vec<&[usize]> = inputs.iter().map(|b| b.shape()).collect();
    let sizes = spec.sizes(&shapes).map_err(|e| KernelError::BadShape(format!("einSum({spec}): {e}")))?;
    let distinct = |l: &[char]| l.iter().enumerate().all(|(i, c)| !l[..i].contains(c));
    if inputs.len() == 2 && spec.inputs.iter().all(|l| distinct(l)) {
        return einsum_pair(spec, &sizes, inputs[0], inputs[1]);
    }
    Ok(einsum_loops(spec, &sizes, inputs))
}

fn size_of(sizes: &[(char, usize)], c: char) -> usize {
    sizes.iter().find(|(d, _)| *d == c).map_or(0, |&(_, n)| n)
}

/// Sums `b` (letters `l`) over the letters not in `keep`; returns the rest.
fn sum_out(b: &Block, l: &[char], keep: impl Fn(char) -> bool) -> (Block, Vec<char>) {
    let mut b = b.clone();
    let mut letters = l.to_vec();
    for axis in (0..l.len()).rev() {
        if !keep(l[axis]) {
            b = b.sum_axis(Axis(axis));
            letters.remove(axis);
        }
    }
    (b, letters)
}

/// Permutes `b` (letters `l`) into the order `want` and reshapes it to `dims`.
fn arrange(b: &Block, l: &[char], want: &[char], dims: &[usize]) -> Result<Block, KernelError> {
    let perm: Vec<usize> =
        want.iter().map(|c| l.iter().position(|d| d == c).expect("a letter of the operand")).collect();
    let p = b.view().permuted_axes(IxDyn(&perm));
    p.to_shape(IxDyn(dims))
        .map(|c| c.into_owned())
        .map_err(|e| KernelError::BadShape(format!("einSum: cannot reshape: {e}")))
}

fn einsum_pair(spec: &EinSumSpec, sizes: &[(char, usize)], a: &Block, b: &Block) -> Result<Block, KernelError> {
    let (la, lb, out) = (&spec.inputs[0], &spec.inputs[1], &spec.output);
    let (a, la) = sum_out(a, la, |c| out.contains(&c) || lb.contains(&c));
    let (b, lb) = sum_out(b, lb, |c| out.contains(&c) || la.contains(&c));
    let batch: Vec<char> = la.iter().copied().filter(|c| lb.contains(c) && out.contains(c)).collect();
    let contracted: Vec<char> = la.iter().copied().filter(|c| lb.contains(c) && !out.contains(c)).collect();
    let left: Vec<char> = la.iter().copied().filter(|c| !lb.contains(c)).collect();
    let right: Vec<char> = lb.iter().copied().filter(|c| !la.contains(c)).collect();
    let n = |l: &[char]| l.iter().map(|&c| size_of(sizes, c)).product::<usize>();
    let (nb, nl, nc, nr) = (n(&batch), n(&left), n(&contracted), n(&right));
    let cat = |parts: &[&[char]]| parts.concat();
    let a3 = arrange(&a, &la, &cat(&[&batch, &left, &contracted]), &[nb, nl, nc])?;
    let b3 = arrange(&b, &lb, &cat(&[&batch, &contracted, &right]), &[nb, nc, nr])?;
    let mut r = ndarray::Array3::<f64>::zeros((nb, nl, nr));
    for i in 0..nb {
        let ai = a3.index_axis(Axis(0), i).into_dimensionality::<Ix2>().expect("rank 2");
        let bi = b3.index_axis(Axis(0), i).into_dimensionality::<Ix2>().expect("rank 2");
        let mut ri = r.index_axis_mut(Axis(0), i);
        ndarray::linalg::general_mat_mul(1.0, &ai, &bi, 0.0, &mut ri);
    }
    let have = cat(&[&batch, &left, &right]);
    let dims: Vec<usize> = have.iter().map(|&c| size_of(sizes, c)).collect();
    let r =
        r.into_dyn().to_shape(IxDyn(&dims)).map_err(|e| KernelError::BadShape(format!("einSum: {e}")))?.into_owned();
    let out_dims: Vec<usize> = out.iter().map(|&c| size_of(sizes, c)).collect();
    let o = arrange(&r, &have, out, &out_dims)?;
    Ok(o.as_standard_layout().into_owned())
}

/// Every assignment of the letters, one multiply-add each.
fn einsum_loops(spec: &EinSumSpec, sizes: &[(char, usize)], inputs: &[&Block]) -> Block {
    let letters: Vec<char> = sizes.iter().map(|&(c, _)| c).collect();
    let extent: Vec<usize> = sizes.iter().map(|&(_, n)| n).collect();
    // Per operand (and the output), the stride of each letter: the sum of the
    // strides of the axes it names (a repeated letter walks the diagonal).
    let coefs = |l: &[char], shape: &[usize]| -> Vec<usize> {
        let mut strides = vec![0usize; l.len()];
        let mut acc = 1;
        for ax in (0..l.len()).rev() {
            strides[ax] = acc;
            acc *= shape[ax];
        }
        letters.iter().map(|c| l.iter().zip(&strides).filter(|(d, _)| *d == c).map(|(_, s)| s).sum()).collect()
    };
    let data: Vec<ndarray::CowArray<'_, f64, IxDyn>> = inputs.iter().map(|b| b.as_standard_layout()).collect();
    let in_coefs: Vec<Vec<usize>> = spec.inputs.iter().zip(inputs).map(|(l, b)| coefs(l, b.shape())).collect();
    let out_shape: Vec<usize> = spec.output.iter().map(|&c| size_of(sizes, c)).collect();
    let out_coefs = coefs(&spec.output, &out_shape);
    let mut out = vec![0.0f64; out_shape.iter().product()];
    if extent.iter().all(|&n| n > 0) {
        let slices: Vec<&[f64]> = data.iter().map(|d| d.as_slice().expect("standard layout")).collect();
        let mut idx = vec![0usize; letters.len()];
        'terms: loop {
            let mut prod = 1.0;
            for (x, c) in slices.iter().zip(&in_coefs) {
                prod *= x[idx.iter().zip(c).map(|(i, s)| i * s).sum::<usize>()];
            }
            out[idx.iter().zip(&out_coefs).map(|(i, s)| i * s).sum::<usize>()] += prod;
            let mut d = idx.len();
            loop {
                if d == 0 {
                    break 'terms;
                }
                d -= 1;
                idx[d] += 1;
                if idx[d] < extent[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
    }
    Block::from_shape_vec(IxDyn(&out_shape), out).expect("the output shape")
}

#[cfg(test)]
mod tests {
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
        let a =
            Block::from_shape_vec(IxDyn(&[3, 4]), vec![3.0, 1.0, 2.0, 1.0, 5.0, 6.0, 7.0, 4.0, -1.0, 0.0, -2.0, 9.0])
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
}
