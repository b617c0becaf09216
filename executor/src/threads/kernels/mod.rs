//! Fast block kernels for the thread executor, generic over `f32` and `f64`.
//!
//! A [`KernelRef`] is compiled once per operator into a [`FastKernel`]:
//!
//! - **Elementwise programs** (AleaTK's fused expressions, paper 001): an
//!   elementwise kernel or a composition of elementwise kernels (`relu∘matAdd`,
//!   `scale∘neg∘sgdStep`, …) becomes one first operation and a chain of unary
//!   ones, run over the block in chunks of [`CHUNK`] elements that stay in L1:
//!   one pass over memory, no block-sized temporary, every inner loop a plain
//!   slice loop the compiler vectorises (compiled for AVX2 when the CPU has it).
//! - **Selections of elementwise programs**: `diag` and `transpose` of an
//!   elementwise program (`diag∘matAdd` from R1-4/R1-7, `transpose∘max`, and any
//!   unary elementwise chain after them) read only the selected elements and
//!   apply the program to them, in one pass: `diag∘matAdd` on `[n,n]` blocks
//!   touches `2n` elements, not `2n²`.
//! - **Matrix products** go to the system's OpenBLAS when it is installed,
//!   else to the `gemm` crate (AVX-512 kernels with its `x86-v4` feature,
//!   chosen at run time); `TRA_GEMM` chooses ([`gemm_backend()`]). Each call
//!   is single-threaded; the executor parallelises over output blocks. [`matmul_into`] accumulates
//!   into the output (`C += A·B`), which the executor uses to sum over a
//!   join's contracted key without separate block additions.
//! - numpy's broadcasting binaries (`add`, `lt`, `selectIf`, …) run a loop
//!   when both operands have one shape or one is a scalar (`[]`), with the
//!   reference's scalar function ([`crate::kernels::scalar`]); other shapes
//!   go to the reference kernel. The shape kernels (`expandDims`,
//!   `mergeAxes`, …, `concatAxis`, `repeatAxis`) copy rows.
//! - Everything else (`rowSum`, `minIndex`, `tile`, …) is a direct loop;
//!   kernels without one (`einSum`, `einMax`, …) run the reference kernel.
//!
//! Values are those of the reference kernels ([`crate::kernels`]): the same
//! scalar formulas in the same order for elementwise work (so results are
//! bit-identical), and the same three evaluation rules for compositions; only
//! matrix products and row/column sums may round differently.
//!
//! The elementwise programs are in `elementwise`, the matrix products in
//! `matmul`; this module compiles a kernel into a [`FastKernel`] and runs it.

mod elementwise;
pub mod gemm_backend;
mod matmul;

pub use elementwise::{accumulate, ew_prog, run_prog, Binary, EwProg, First, Unary, CHUNK};
use elementwise::{binary_into, run_prog_body, unary_inplace};
pub use gemm_backend::{gemm_backend, warm_thread_buffers, GemmBackend, GemmError, GemmRequest};
pub use matmul::{matmul_into, matmul_into_par, matmul_with, MatMulKind};

use super::elem::Elem;
use super::pool::{Block, Pool};
use crate::kernels::concat_shape;
use crate::kernels::scalar::BroadcastOp;
use tra_optimizer::kernel::{KernelError, KernelRef};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Sel {
    Diag,
    Transpose,
}

#[derive(Debug, Clone, PartialEq)]
enum Named {
    RowSum,
    ColSum,
    RowMax,
    ColMax,
    /// A row vector `[n]` combined with every row of `[m,n]`.
    MatVec(Binary),
    /// A column vector `[m]` combined with every column of `[m,n]`.
    MatColVec(Binary),
    MinIndex,
    MinPair,
    OffsetIndex,
    Tile,
    Concat,
    /// A numpy-broadcasting binary (`add`, `lt`, `selectIf`, …); the loops
    /// cover operands of one shape and a scalar (`[]`) with any block.
    Broadcast(BroadcastOp),
    /// `expandDims`, `squeezeAxis`, `mergeAxes`, `splitAxis`: the row-major
    /// elements unchanged under a new shape.
    Reshape,
    ConcatAxis,
    RepeatAxis,
    Unknown,
}

#[derive(Debug, Clone)]
enum Compiled {
    /// An elementwise program.
    Ew(EwProg),
    /// `diag` or `transpose` of an elementwise program (or of the operand).
    Select(Sel, EwProg),
    /// A matrix product, then unary elementwise operations on its output.
    MatMul(MatMulKind, Vec<Unary>),
    /// `inner(outer(a), outer(b))`: a unary kernel distributed over a binary
    /// elementwise one (reference rule 2, for the non-selections: rowSum, …).
    Distrib(Box<FastKernel>, EwProg),
    /// `outer(inner(…))`.
    Seq(Box<FastKernel>, Box<FastKernel>),
    /// Another catalog kernel.
    Named(Named),
}

/// A kernel compiled for the thread executor.
#[derive(Debug, Clone)]
pub struct FastKernel {
    kernel: KernelRef,
    compiled: Compiled,
}

fn select_of(k: &KernelRef) -> Option<Sel> {
    match k {
        KernelRef::Named { name, .. } if name == "diag" => Some(Sel::Diag),
        KernelRef::Named { name, .. } if name == "transpose" => Some(Sel::Transpose),
        _ => None,
    }
}

fn copy_prog() -> EwProg {
    EwProg { first: First::Unary(Unary::Copy), chain: Vec::new() }
}

fn compile(k: &KernelRef) -> Compiled {
    if let Some(p) = ew_prog(k) {
        return Compiled::Ew(p);
    }
    match k {
        KernelRef::Named { name, .. } => {
            if let Some(kind) = MatMulKind::of(k) {
                return Compiled::MatMul(kind, Vec::new());
            }
            if let Some(s) = select_of(k) {
                return Compiled::Select(s, copy_prog());
            }
            Compiled::Named(match name.as_str() {
                "rowSum" => Named::RowSum,
                "colSum" => Named::ColSum,
                "rowMax" => Named::RowMax,
                "colMax" => Named::ColMax,
                "matVecAdd" => Named::MatVec(Binary::Add),
                "matVecSub" => Named::MatVec(Binary::Sub),
                "matVecMul" => Named::MatVec(Binary::Mul),
                "matVecDiv" => Named::MatVec(Binary::Div),
                "matColVecAdd" => Named::MatColVec(Binary::Add),
                "matColVecSub" => Named::MatColVec(Binary::Sub),
                "matColVecMul" => Named::MatColVec(Binary::Mul),
                "matColVecDiv" => Named::MatColVec(Binary::Div),
                "minIndex" => Named::MinIndex,
                "minPair" => Named::MinPair,
                "offsetIndex" => Named::OffsetIndex,
                "tile" => Named::Tile,
                "concat" => Named::Concat,
                "expandDims" | "squeezeAxis" | "mergeAxes" | "splitAxis" => Named::Reshape,
                "concatAxis" => Named::ConcatAxis,
                "repeatAxis" => Named::RepeatAxis,
                other => BroadcastOp::of(other).map_or(Named::Unknown, Named::Broadcast),
            })
        }
        KernelRef::Compose(outer, inner) => {
            // Rule 2 of the reference: a unary kernel that distributes over a
            // binary elementwise one is applied to each operand first.
            if inner.arity() == 2 && inner.is_elementwise() && outer.distributes_over(inner) {
                let ip = ew_prog(inner).expect("elementwise");
                if let Some(s) = select_of(outer) {
                    // Selecting then combining = combining the selected elements.
                    return Compiled::Select(s, ip);
                }
                return Compiled::Distrib(Box::new(FastKernel::new(outer)), ip);
            }
            // Rule 3: outer(inner(…)), fused where that is exact.
            let ci = compile(inner);
            if let Some(op) = ew_prog(outer) {
                if let First::Unary(u) = op.first {
                    let mut post = vec![u];
                    post.extend(op.chain.iter().copied());
                    match ci {
                        Compiled::MatMul(kind, mut chain) => {
                            chain.extend(post);
                            return Compiled::MatMul(kind, chain);
                        }
                        Compiled::Select(s, mut p) => {
                            p.chain.extend(post);
                            return Compiled::Select(s, p);
                        }
                        ci => {
                            return Compiled::Seq(
                                Box::new(FastKernel::new(outer)),
                                Box::new(FastKernel { kernel: (**inner).clone(), compiled: ci }),
                            )
                        }
                    }
                }
            }
            if let (Some(s), Compiled::Ew(p)) = (select_of(outer), &ci) {
                return Compiled::Select(s, p.clone());
            }
            Compiled::Seq(
                Box::new(FastKernel::new(outer)),
                Box::new(FastKernel { kernel: (**inner).clone(), compiled: ci }),
            )
        }
    }
}

fn arg_f64(kernel: &KernelRef, i: usize) -> Result<f64, KernelError> {
    match kernel {
        KernelRef::Named { args, .. } => args.get(i).and_then(|a| a.parse::<f64>().ok()),
        _ => None,
    }
    .ok_or_else(|| KernelError::BadUse(format!("{kernel}: argument {i} is missing or not a number")))
}

fn arg_usize(kernel: &KernelRef, i: usize) -> Result<usize, KernelError> {
    match kernel {
        KernelRef::Named { args, .. } => args.get(i).and_then(|a| a.parse::<usize>().ok()),
        _ => None,
    }
    .ok_or_else(|| KernelError::BadUse(format!("{kernel}: argument {i} is missing or not an integer")))
}

fn single<T: Elem>(kernel: &KernelRef, mut blocks: Vec<Block<T>>) -> Result<Block<T>, KernelError> {
    if blocks.len() != 1 {
        return Err(KernelError::BadUse(format!("{kernel} gives {} blocks per call, not one", blocks.len())));
    }
    Ok(blocks.pop().expect("one block"))
}

impl FastKernel {
    /// Compile a kernel reference. Never fails: errors (unknown kernel, bad
    /// operands) are reported by [`FastKernel::apply`], as the reference does.
    pub fn new(kernel: &KernelRef) -> FastKernel {
        FastKernel { kernel: kernel.clone(), compiled: compile(kernel) }
    }

    /// The kernel reference.
    pub fn kernel(&self) -> &KernelRef {
        &self.kernel
    }

    /// The matrix-product kind, if this kernel is a plain matrix product.
    pub fn matmul_kind(&self) -> Option<MatMulKind> {
        match &self.compiled {
            Compiled::MatMul(k, post) if post.is_empty() => Some(*k),
            _ => None,
        }
    }

    /// The binary elementwise operation, if this kernel is exactly one
    /// (`matAdd`, `max`, …): aggregation folds with it in place.
    pub fn binary_op(&self) -> Option<Binary> {
        match &self.compiled {
            Compiled::Ew(EwProg { first: First::Binary(op), chain }) if chain.is_empty() => Some(*op),
            _ => None,
        }
    }

    /// Apply to the operands: one block, or for `tile` several. Shapes are
    /// checked by the catalog's rules first, as in the reference.
    pub fn apply<T: Elem>(&self, pool: &Pool<T>, inputs: &[&Block<T>]) -> Result<Vec<Block<T>>, KernelError> {
        let shapes: Vec<&[usize]> = inputs.iter().map(|b| b.shape()).collect();
        let out_shape = self.kernel.output_shape(&shapes)?;
        self.compute(pool, inputs, &out_shape)
    }

    /// Apply a kernel that gives one block.
    pub fn apply1<T: Elem>(&self, pool: &Pool<T>, inputs: &[&Block<T>]) -> Result<Block<T>, KernelError> {
        single(&self.kernel, self.apply(pool, inputs)?)
    }

    fn compute<T: Elem>(
        &self,
        pool: &Pool<T>,
        inputs: &[&Block<T>],
        out_shape: &[usize],
    ) -> Result<Vec<Block<T>>, KernelError> {
        let a = inputs[0];
        let b = inputs.get(1).copied();
        Ok(vec![match &self.compiled {
            Compiled::Ew(p) => {
                let mut out = pool.take(out_shape);
                run_prog(p, out.as_mut_slice(), a.as_slice(), b.map_or(&[][..], |b| b.as_slice()));
                out
            }
            Compiled::Select(s, _) if !select_shapes_ok(*s, inputs) => {
                return reference_apply(&self.kernel, pool, inputs)
            }
            Compiled::MatMul(..) if !inputs.iter().all(|b| b.shape().len() == 2) => {
                return reference_apply(&self.kernel, pool, inputs)
            }
            Compiled::Select(s, p) => {
                let mut out = pool.take(out_shape);
                select(*s, p, out.as_mut_slice(), a, b);
                out
            }
            Compiled::MatMul(kind, post) => {
                let b = b.expect("binary");
                let mut out = pool.take(out_shape);
                matmul_into(*kind, out.as_mut_slice(), a.as_slice(), a.shape(), b.as_slice(), b.shape(), false);
                for &u in post {
                    unary_inplace(u, out.as_mut_slice());
                }
                out
            }
            Compiled::Distrib(outer, p) => {
                let b = b.expect("binary");
                let oa = single(&outer.kernel, outer.apply(pool, &[a])?)?;
                let ob = single(&outer.kernel, outer.apply(pool, &[b])?)?;
                if oa.shape() != ob.shape() {
                    return Err(KernelError::BadShape(format!(
                        "{}: operand shapes differ: {:?} and {:?}",
                        self.kernel,
                        oa.shape(),
                        ob.shape()
                    )));
                }
                let mut out = pool.take(oa.shape());
                run_prog(p, out.as_mut_slice(), oa.as_slice(), ob.as_slice());
                out
            }
            Compiled::Seq(outer, inner) => {
                let mid = single(&inner.kernel, inner.apply(pool, inputs)?)?;
                return outer.apply(pool, &[&mid]);
            }
            Compiled::Named(n) => return self.named(n, pool, inputs, out_shape),
        }])
    }

    fn named<T: Elem>(
        &self,
        n: &Named,
        pool: &Pool<T>,
        inputs: &[&Block<T>],
        out_shape: &[usize],
    ) -> Result<Vec<Block<T>>, KernelError> {
        let a = inputs[0];
        let x = a.as_slice();
        // The shapes the loops below are written for; any other shape the
        // catalog accepts goes to the reference kernel.
        let rank = |i: usize| inputs.get(i).map_or(0, |b| b.shape().len());
        let pairs = |i: usize| rank(i) == 2 && inputs[i].shape()[1] == 2;
        let handled = match n {
            Named::RowSum | Named::ColSum | Named::RowMax | Named::ColMax => rank(0) == 2,
            Named::MatVec(_) => rank(0) == 2 && rank(1) == 1 && inputs[1].shape()[0] == a.shape()[1],
            Named::MatColVec(_) => rank(0) == 2 && rank(1) == 1 && inputs[1].shape()[0] == a.shape()[0],
            Named::MinIndex => (rank(0) == 2 || rank(0) == 1) && !a.is_empty(),
            Named::MinPair => pairs(0) && pairs(1) && inputs[1].shape() == a.shape(),
            Named::OffsetIndex => pairs(0),
            Named::Broadcast(_) => rank(0) == 0 || rank(1) == 0 || inputs[1].shape() == a.shape(),
            Named::Tile | Named::Concat | Named::Reshape | Named::ConcatAxis | Named::RepeatAxis => true,
            Named::Unknown => false,
        };
        if !handled {
            return reference_apply(&self.kernel, pool, inputs);
        }
        let mut out = match n {
            Named::Tile | Named::Concat | Named::Unknown | Named::Reshape => None,
            _ => Some(pool.take(out_shape)),
        };
        match n {
            Named::RowSum => {
                let (m, cols) = (a.shape()[0], a.shape()[1]);
                let o = out.as_mut().unwrap().as_mut_slice();
                for i in 0..m {
                    o[i] = x[i * cols..(i + 1) * cols].iter().fold(T::ZERO, |s, &v| s + v);
                }
            }
            Named::ColSum => {
                let (m, cols) = (a.shape()[0], a.shape()[1]);
                let o = out.as_mut().unwrap().as_mut_slice();
                o.fill(T::ZERO);
                for i in 0..m {
                    accumulate(Binary::Add, o, &x[i * cols..(i + 1) * cols]);
                }
            }
            Named::RowMax => {
                let (m, cols) = (a.shape()[0], a.shape()[1]);
                let o = out.as_mut().unwrap().as_mut_slice();
                let neg_inf = T::from_f64(f64::NEG_INFINITY);
                for i in 0..m {
                    o[i] = x[i * cols..(i + 1) * cols].iter().fold(neg_inf, |s, &v| s.fmax(v));
                }
            }
            Named::ColMax => {
                let (m, cols) = (a.shape()[0], a.shape()[1]);
                let o = out.as_mut().unwrap().as_mut_slice();
                o.fill(T::from_f64(f64::NEG_INFINITY));
                for i in 0..m {
                    accumulate(Binary::Max, o, &x[i * cols..(i + 1) * cols]);
                }
            }
            Named::MatColVec(op) => {
                let v = inputs[1].as_slice();
                let cols = a.shape()[1];
                let o = out.as_mut().unwrap().as_mut_slice();
                if cols > 0 {
                    for ((orow, xrow), &vi) in o.chunks_mut(cols).zip(x.chunks(cols)).zip(v) {
                        orow.iter_mut().zip(xrow).for_each(|(o, &xv)| *o = elementwise::bin(*op, xv, vi));
                    }
                }
            }
            Named::MatVec(op) => {
                let v = inputs[1].as_slice();
                let cols = v.len();
                let op = *op;
                let o = out.as_mut().unwrap().as_mut_slice();
                if cols > 0 {
                    for (orow, xrow) in o.chunks_mut(cols).zip(x.chunks(cols)) {
                        binary_into(op, orow, xrow, v);
                    }
                }
            }
            Named::MinIndex => {
                // A vector is one row.
                let (m, cols) = if a.shape().len() == 1 { (1, a.len()) } else { (a.shape()[0], a.shape()[1]) };
                let o = out.as_mut().unwrap().as_mut_slice();
                for i in 0..m {
                    let row = &x[i * cols..(i + 1) * cols];
                    let mut best = 0;
                    for j in 1..cols {
                        if row[j].total_cmp(&row[best]).is_lt() {
                            best = j;
                        }
                    }
                    o[2 * i] = row[best];
                    o[2 * i + 1] = T::from_f64(best as f64);
                }
            }
            Named::MinPair => {
                let y = inputs[1].as_slice();
                let o = out.as_mut().unwrap().as_mut_slice();
                o.copy_from_slice(x);
                for i in 0..a.shape()[0] {
                    let less = y[2 * i].total_cmp(&x[2 * i]).then(y[2 * i + 1].total_cmp(&x[2 * i + 1])).is_lt();
                    if less {
                        o[2 * i] = y[2 * i];
                        o[2 * i + 1] = y[2 * i + 1];
                    }
                }
            }
            Named::OffsetIndex => {
                let off = T::from_f64(arg_f64(&self.kernel, 0)?);
                let o = out.as_mut().unwrap().as_mut_slice();
                o.copy_from_slice(x);
                for i in 0..a.shape()[0] {
                    o[2 * i + 1] += off;
                }
            }
            Named::Tile => {
                let (dim, size) = (arg_usize(&self.kernel, 0)?, arg_usize(&self.kernel, 1)?);
                let shape = a.shape();
                let pieces = shape[dim] / size;
                let outer: usize = shape[..dim].iter().product();
                let inner: usize = shape[dim + 1..].iter().product();
                let run = size * inner;
                let stride = shape[dim] * inner;
                let mut piece_shape = shape.to_vec();
                piece_shape[dim] = size;
                let mut outs = Vec::with_capacity(pieces);
                for p in 0..pieces {
                    let mut blk = pool.take(&piece_shape);
                    let o = blk.as_mut_slice();
                    for r in 0..outer {
                        let src = r * stride + p * run;
                        o[r * run..(r + 1) * run].copy_from_slice(&x[src..src + run]);
                    }
                    outs.push(blk);
                }
                return Ok(outs);
            }
            Named::Concat => {
                return Err(KernelError::BadUse(format!(
                    "{} is applied by the aggregation operator to a group's pieces (concat_pieces), not pairwise",
                    self.kernel
                )))
            }
            Named::Broadcast(op) => {
                let o = out.as_mut().unwrap().as_mut_slice();
                broadcast_into(*op, o, x, inputs[1].as_slice());
            }
            Named::Reshape => return Ok(vec![pool.copy_of(out_shape, x)]),
            Named::ConcatAxis => {
                // Row-major: `outer` runs of the first operand's `run_a`
                // elements, each followed by the second's `run_b`.
                let axis = arg_usize(&self.kernel, 0)?;
                let y = inputs[1].as_slice();
                let inner: usize = a.shape()[axis + 1..].iter().product();
                let (run_a, run_b) = (a.shape()[axis] * inner, inputs[1].shape()[axis] * inner);
                let o = out.as_mut().unwrap().as_mut_slice();
                let run = run_a + run_b;
                if run > 0 {
                    for (r, orow) in o.chunks_mut(run).enumerate() {
                        orow[..run_a].copy_from_slice(&x[r * run_a..(r + 1) * run_a]);
                        orow[run_a..].copy_from_slice(&y[r * run_b..(r + 1) * run_b]);
                    }
                }
            }
            Named::RepeatAxis => {
                // Every run of `inner` elements (one index of the size-1
                // axis) written `n` times.
                let axis = arg_usize(&self.kernel, 0)?;
                let inner: usize = a.shape()[axis + 1..].iter().product();
                let o = out.as_mut().unwrap().as_mut_slice();
                let n = out_shape[axis];
                if inner > 0 && n > 0 {
                    for (orow, xrow) in o.chunks_mut(n * inner).zip(x.chunks(inner)) {
                        for piece in orow.chunks_mut(inner) {
                            piece.copy_from_slice(xrow);
                        }
                    }
                }
            }
            Named::Unknown => return reference_apply(&self.kernel, pool, inputs),
        }
        Ok(vec![out.expect("an output block")])
    }
}

/// `out = op(a, b)` for operands of one length, or one of them a single
/// element (a `[]` block) broadcast against the other: the reference's scalar
/// function, in `f64` (bit-identical for `f64` blocks), one loop per
/// operation.
fn broadcast_into<T: Elem>(op: BroadcastOp, out: &mut [T], a: &[T], b: &[T]) {
    #[inline(always)]
    fn run<T: Elem>(out: &mut [T], a: &[T], b: &[T], f: impl Fn(f64, f64) -> f64) {
        let g = |x: T, y: T| T::from_f64(f(x.to_f64(), y.to_f64()));
        if a.len() == b.len() {
            out.iter_mut().zip(a.iter().zip(b)).for_each(|(o, (&x, &y))| *o = g(x, y));
        } else if a.len() == 1 {
            out.iter_mut().zip(b).for_each(|(o, &y)| *o = g(a[0], y));
        } else {
            out.iter_mut().zip(a).for_each(|(o, &x)| *o = g(x, b[0]));
        }
    }
    macro_rules! each {
        ($($v:ident),*) => {
            match op {
                $(BroadcastOp::$v => run(out, a, b, |x, y| BroadcastOp::$v.eval(x, y)),)*
            }
        };
    }
    each!(Add, Sub, Mul, Div, Pow, Maximum, Minimum, Lt, Le, Gt, Ge, Eq, Ne, SelectIf, SelectElse)
}

/// A kernel the fast loops do not cover (a catalog entry without a fast
/// implementation, such as `einSum`, or operand shapes they are not written
/// for): the reference kernel in `f64`, converted back. One truth: its values
/// and errors are the reference's.
fn reference_apply<T: Elem>(
    kernel: &KernelRef,
    pool: &Pool<T>,
    inputs: &[&Block<T>],
) -> Result<Vec<Block<T>>, KernelError> {
    let blocks: Vec<crate::kernels::Block> = inputs.iter().map(|b| b.view().mapv(|x| x.to_f64())).collect();
    let refs: Vec<&crate::kernels::Block> = blocks.iter().collect();
    let outs = crate::kernels::apply(kernel, &refs)?;
    Ok(outs.iter().map(|b| pool.from_array(&b.view(), T::from_f64)).collect())
}

/// Operands a selection's loops are written for: matrices of one shape
/// (square for `diag`).
fn select_shapes_ok<T: Elem>(s: Sel, inputs: &[&Block<T>]) -> bool {
    let a = inputs[0].shape();
    a.len() == 2 && inputs.iter().all(|b| b.shape() == a) && (s == Sel::Transpose || a[0] == a[1])
}

/// Tile edge for the transposing selection.
const TILE: usize = 32;

fn select<T: Elem>(s: Sel, p: &EwProg, out: &mut [T], a: &Block<T>, b: Option<&Block<T>>) {
    let x = a.as_slice();
    let y = b.map_or(x, |b| b.as_slice());
    match s {
        Sel::Diag => {
            let n = a.shape()[0];
            for (i, o) in out.iter_mut().enumerate().take(n) {
                let at = i * (n + 1);
                *o = p.eval(x[at], y[at]);
            }
        }
        Sel::Transpose => {
            // out[j, i] = p(a[i, j], b[i, j]) for a of shape [m, n], tile by tile:
            // gather a strip of one output row into stack buffers, run the
            // program on it.
            let (m, n) = (a.shape()[0], a.shape()[1]);
            let mut ta = [T::ZERO; TILE];
            let mut tb = [T::ZERO; TILE];
            for i0 in (0..m).step_by(TILE) {
                let i1 = (i0 + TILE).min(m);
                let w = i1 - i0;
                for j in 0..n {
                    for (t, i) in (i0..i1).enumerate() {
                        ta[t] = x[i * n + j];
                        tb[t] = y[i * n + j];
                    }
                    let o = &mut out[j * m + i0..j * m + i1];
                    run_prog_body(p, o, &ta[..w], &tb[..w]);
                }
            }
        }
    }
}

/// The left fold of a binary kernel over blocks `k(k(b0, b1), b2)…`, with
/// elementwise kernels applied in place on the accumulator. One block gives
/// a copy of itself.
pub fn fold<T: Elem>(kernel: &FastKernel, pool: &Pool<T>, blocks: &[&Block<T>]) -> Result<Block<T>, KernelError> {
    kernel.kernel.check()?;
    if kernel.kernel.arity() != 2 {
        return Err(KernelError::BadUse(format!(
            "fold needs a binary kernel, {} takes {} operand(s)",
            kernel.kernel,
            kernel.kernel.arity()
        )));
    }
    let (first, rest) =
        blocks.split_first().ok_or_else(|| KernelError::BadUse(format!("fold of {}: no blocks", kernel.kernel)))?;
    let Some((second, rest)) = rest.split_first() else {
        return Ok(pool.copy_of(first.shape(), first.as_slice()));
    };
    let mut acc = kernel.apply1(pool, &[first, second])?;
    for b in rest {
        match kernel.binary_op() {
            Some(op) if acc.shape() == b.shape() => accumulate(op, acc.as_mut_slice(), b.as_slice()),
            _ => acc = kernel.apply1(pool, &[&acc, b])?,
        }
    }
    Ok(acc)
}

/// Joins `pieces` (each with its index) along `array_dim` into a block whose
/// bound `array_dim` is the piece bound × `count`; missing pieces are
/// zero-filled (the reference's [`crate::kernels::concat_pieces`], same errors).
pub fn concat_pieces<T: Elem>(
    pool: &Pool<T>,
    pieces: &[(u32, &Block<T>)],
    array_dim: usize,
    count: u32,
) -> Result<Block<T>, KernelError> {
    let out_shape = concat_shape(pieces.iter().map(|&(i, p)| (i, p.shape())), array_dim, count)?;
    let shape = pieces[0].1.shape();
    let piece = shape[array_dim];
    let mut out = pool.take(&out_shape);
    if pieces.len() < count as usize {
        out.as_mut_slice().fill(T::ZERO);
    }
    let outer: usize = shape[..array_dim].iter().product();
    let inner: usize = shape[array_dim + 1..].iter().product();
    let run = piece * inner;
    let stride = out_shape[array_dim] * inner;
    let o = out.as_mut_slice();
    for &(i, p) in pieces {
        let src = p.as_slice();
        for r in 0..outer {
            let dst = r * stride + i as usize * run;
            o[dst..dst + run].copy_from_slice(&src[r * run..(r + 1) * run]);
        }
    }
    Ok(out)
}
