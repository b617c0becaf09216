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
use tra_optimizer::kernel::{broadcast_shape, EinSumSpec, KernelError, KernelRef, EIN_MAX, EIN_MIN};

pub mod scalar;
use scalar::{BroadcastOp, Math};

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
                "exp" => Unary(Box::new(f64::exp)),
                "log" => Unary(Box::new(f64::ln)),
                "sqrt" => Unary(Box::new(f64::sqrt)),
                "shift" => {
                    let c = arg(0)?;
                    Unary(Box::new(move |x| x + c))
                }
                "elemDiv" => Binary(Box::new(|a, b| a / b)),
                "neg" => Unary(Box::new(|x| -x)),
                "scale" => {
                    let c = arg(0)?;
                    Unary(Box::new(move |x| c * x))
                }
                // abs, tanh, powc(c), … (shared with the thread executor).
                _ => {
                    let m = Math::of(name, arg(0))?;
                    Unary(Box::new(move |x| m.eval(x)))
                }
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
        "matVecMul" => Zip::from(a).and_broadcast(inputs[1]).map_collect(|&x, &v| x * v),
        "matVecDiv" => Zip::from(a).and_broadcast(inputs[1]).map_collect(|&x, &v| x / v),
        "matColVecAdd" | "matColVecSub" | "matColVecMul" | "matColVecDiv" => {
            let f: fn(f64, f64) -> f64 = match name {
                "matColVecAdd" => |x, v| x + v,
                "matColVecSub" => |x, v| x - v,
                "matColVecMul" => |x, v| x * v,
                _ => |x, v| x / v,
            };
            let v = inputs[1].view().insert_axis(Axis(1));
            Zip::from(a).and_broadcast(&v).map_collect(|&x, &v| f(x, v))
        }
        "rowMax" => mat(a)?.fold_axis(Axis(1), f64::NEG_INFINITY, |&m, &x| m.max(x)).into_dyn(),
        "colMax" => mat(a)?.fold_axis(Axis(0), f64::NEG_INFINITY, |&m, &x| m.max(x)).into_dyn(),
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
        EIN_MAX | EIN_MIN => {
            let spec = args
                .first()
                .and_then(|a| EinSumSpec::parse(a).ok())
                .ok_or_else(|| KernelError::BadUse(format!("{kernel}: the spec is missing or does not parse")))?;
            let sizes = spec.sizes(&[a.shape()]).map_err(|e| KernelError::BadShape(format!("{kernel}: {e}")))?;
            if name == EIN_MAX {
                fold_terms(&spec, &sizes, inputs, f64::NEG_INFINITY, f64::max)
            } else {
                fold_terms(&spec, &sizes, inputs, f64::INFINITY, f64::min)
            }
        }
        "concatAxis" => {
            let axis = arg_usize(kernel, args, 0)?;
            ndarray::concatenate(Axis(axis), &[a.view(), inputs[1].view()])
                .map_err(|e| KernelError::BadShape(format!("{kernel}: {e}")))?
        }
        "expandDims" => a.view().insert_axis(Axis(arg_usize(kernel, args, 0)?)).to_owned(),
        "squeezeAxis" => a.index_axis(Axis(arg_usize(kernel, args, 0)?), 0).to_owned(),
        "mergeAxes" | "splitAxis" => {
            // Row-major data is unchanged: a new shape over the same elements.
            let shape = kernel.output_shape(&[a.shape()])?;
            a.as_standard_layout()
                .into_owned()
                .into_shape_with_order(IxDyn(&shape))
                .map_err(|e| KernelError::BadShape(format!("{kernel}: {e}")))?
        }
        "repeatAxis" => {
            let shape = kernel.output_shape(&[a.shape()])?;
            a.broadcast(IxDyn(&shape))
                .ok_or_else(|| KernelError::BadShape(format!("{kernel}: cannot repeat {:?}", a.shape())))?
                .to_owned()
        }
        other if BroadcastOp::of(other).is_some() => {
            broadcast(kernel, BroadcastOp::of(other).expect("just matched"), a, inputs[1])?
        }
        other => return Err(KernelError::BadUse(format!("kernel `{other}` has no implementation in the executor"))),
    };
    Ok(vec![out])
}

/// A binary kernel with numpy broadcasting: both operands broadcast to the
/// common shape, then the operation element by element.
fn broadcast(kernel: &KernelRef, op: BroadcastOp, a: &Block, b: &Block) -> Result<Block, KernelError> {
    let no = || KernelError::BadShape(format!("{kernel}: {:?} and {:?} do not broadcast", a.shape(), b.shape()));
    let shape = broadcast_shape(a.shape(), b.shape()).ok_or_else(no)?;
    let (av, bv) = (a.broadcast(IxDyn(&shape)).ok_or_else(no)?, b.broadcast(IxDyn(&shape)).ok_or_else(no)?);
    Ok(Zip::from(&av).and(&bv).map_collect(|&x, &y| op.eval(x, y)))
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
    fold_terms(spec, sizes, inputs, 0.0, |acc, term| acc + term)
}

/// Every assignment of the letters: the product of the operands' elements
/// it selects (the element itself for one operand) folded with `combine`
/// into the output element it selects, which starts at `init`. A sum for
/// `einSum`, a maximum or minimum for `einMax` / `einMin`.
fn fold_terms(
    spec: &EinSumSpec,
    sizes: &[(char, usize)],
    inputs: &[&Block],
    init: f64,
    combine: impl Fn(f64, f64) -> f64,
) -> Block {
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
    let mut out = vec![init; out_shape.iter().product()];
    if extent.iter().all(|&n| n > 0) {
        let slices: Vec<&[f64]> = data.iter().map(|d| d.as_slice().expect("standard layout")).collect();
        let mut idx = vec![0usize; letters.len()];
        'terms: loop {
            let mut prod = 1.0;
            for (x, c) in slices.iter().zip(&in_coefs) {
                prod *= x[idx.iter().zip(c).map(|(i, s)| i * s).sum::<usize>()];
            }
            let at = idx.iter().zip(&out_coefs).map(|(i, s)| i * s).sum::<usize>();
            out[at] = combine(out[at], prod);
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
mod tests;
