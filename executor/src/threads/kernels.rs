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
//! - **Matrix products** go to the `gemm` crate (AVX-512 kernels with its
//!   `x86-v4` feature, chosen at run time), single-threaded per call; the
//!   executor parallelises over output blocks. [`matmul_into`] accumulates
//!   into the output (`C += A·B`), which the executor uses to sum over a
//!   join's contracted key without separate block additions.
//! - Everything else (`rowSum`, `minIndex`, `tile`, …) is a direct loop.
//!
//! Values are those of the reference kernels ([`crate::kernels`]): the same
//! scalar formulas in the same order for elementwise work (so results are
//! bit-identical), and the same three evaluation rules for compositions; only
//! matrix products and row/column sums may round differently.

use super::elem::Elem;
use super::pool::{Block, Pool};
use crate::kernels::concat_shape;
use tra_optimizer::kernel::{KernelError, KernelRef};

/// Elements per chunk of an elementwise program.
pub const CHUNK: usize = 256;

/// A unary elementwise operation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Unary {
    /// Identity (the start of a selection without an elementwise kernel).
    Copy,
    /// `if x > 0 { x } else { 0 }`.
    Relu,
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// `-x`.
    Neg,
    /// `c · x`.
    Scale(f64),
}

/// A binary elementwise operation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Binary {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a · b`.
    Mul,
    /// `max(a, b)`.
    Max,
    /// `min(a, b)`.
    Min,
    /// `if z > 0 { grad } else { 0 }` for `(grad, z)`.
    ReluGrad,
    /// `w - lr · g` for `(w, g)`.
    Sgd(f64),
}

/// The first operation of an elementwise program.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum First {
    /// On one operand.
    Unary(Unary),
    /// On two operands.
    Binary(Binary),
}

/// An elementwise program: a first operation, then unary operations in order.
#[derive(Debug, Clone, PartialEq)]
pub struct EwProg {
    /// The operation on the operands.
    pub first: First,
    /// Unary operations applied to its result, innermost first.
    pub chain: Vec<Unary>,
}

impl EwProg {
    fn arity(&self) -> usize {
        match self.first {
            First::Unary(_) => 1,
            First::Binary(_) => 2,
        }
    }

    /// One element through the program (for selections).
    #[inline]
    fn eval<T: Elem>(&self, a: T, b: T) -> T {
        let mut x = match self.first {
            First::Unary(u) => un(u, a),
            First::Binary(op) => bin(op, a, b),
        };
        for &u in &self.chain {
            x = un(u, x);
        }
        x
    }
}

#[inline(always)]
fn un<T: Elem>(u: Unary, x: T) -> T {
    match u {
        Unary::Copy => x,
        Unary::Relu => {
            if x > T::ZERO {
                x
            } else {
                T::ZERO
            }
        }
        Unary::Sigmoid => T::ONE / (T::ONE + (-x).exp()),
        Unary::Neg => -x,
        Unary::Scale(c) => T::from_f64(c) * x,
    }
}

#[inline(always)]
fn bin<T: Elem>(op: Binary, a: T, b: T) -> T {
    match op {
        Binary::Add => a + b,
        Binary::Sub => a - b,
        Binary::Mul => a * b,
        Binary::Max => a.fmax(b),
        Binary::Min => a.fmin(b),
        Binary::ReluGrad => {
            if b > T::ZERO {
                a
            } else {
                T::ZERO
            }
        }
        Binary::Sgd(lr) => a - T::from_f64(lr) * b,
    }
}

/// The elementwise program of a kernel, if it is elementwise (mirrors the
/// reference's per-element functions).
pub fn ew_prog(kernel: &KernelRef) -> Option<EwProg> {
    match kernel {
        KernelRef::Named { name, args } => {
            let arg = |i: usize| args.get(i).and_then(|a| a.parse::<f64>().ok());
            let first = match name.as_str() {
                "matAdd" => First::Binary(Binary::Add),
                "matSub" => First::Binary(Binary::Sub),
                "elemMul" => First::Binary(Binary::Mul),
                "max" => First::Binary(Binary::Max),
                "min" => First::Binary(Binary::Min),
                "reluGrad" => First::Binary(Binary::ReluGrad),
                "sgdStep" => First::Binary(Binary::Sgd(arg(0)?)),
                "relu" => First::Unary(Unary::Relu),
                "sigmoid" => First::Unary(Unary::Sigmoid),
                "neg" => First::Unary(Unary::Neg),
                "scale" => First::Unary(Unary::Scale(arg(0)?)),
                _ => return None,
            };
            Some(EwProg { first, chain: Vec::new() })
        }
        KernelRef::Compose(outer, inner) => {
            let o = ew_prog(outer)?;
            let First::Unary(u) = o.first else { return None };
            let mut p = ew_prog(inner)?;
            p.chain.push(u);
            p.chain.extend(o.chain);
            Some(p)
        }
    }
}

// ---------------------------------------------------------------------------
// Elementwise loops.

#[inline(always)]
fn unary_into<T: Elem>(u: Unary, o: &mut [T], a: &[T]) {
    match u {
        Unary::Copy => o.copy_from_slice(a),
        Unary::Relu => o.iter_mut().zip(a).for_each(|(o, &x)| *o = un(Unary::Relu, x)),
        Unary::Sigmoid => o.iter_mut().zip(a).for_each(|(o, &x)| *o = un(Unary::Sigmoid, x)),
        Unary::Neg => o.iter_mut().zip(a).for_each(|(o, &x)| *o = -x),
        Unary::Scale(c) => {
            let c = T::from_f64(c);
            o.iter_mut().zip(a).for_each(|(o, &x)| *o = c * x)
        }
    }
}

#[inline(always)]
fn unary_inplace<T: Elem>(u: Unary, o: &mut [T]) {
    match u {
        Unary::Copy => {}
        Unary::Relu => o.iter_mut().for_each(|x| *x = un(Unary::Relu, *x)),
        Unary::Sigmoid => o.iter_mut().for_each(|x| *x = un(Unary::Sigmoid, *x)),
        Unary::Neg => o.iter_mut().for_each(|x| *x = -*x),
        Unary::Scale(c) => {
            let c = T::from_f64(c);
            o.iter_mut().for_each(|x| *x = c * *x)
        }
    }
}

#[inline(always)]
fn binary_into<T: Elem>(op: Binary, o: &mut [T], a: &[T], b: &[T]) {
    let it = o.iter_mut().zip(a.iter().zip(b));
    match op {
        Binary::Add => it.for_each(|(o, (&x, &y))| *o = x + y),
        Binary::Sub => it.for_each(|(o, (&x, &y))| *o = x - y),
        Binary::Mul => it.for_each(|(o, (&x, &y))| *o = x * y),
        Binary::Max => it.for_each(|(o, (&x, &y))| *o = x.fmax(y)),
        Binary::Min => it.for_each(|(o, (&x, &y))| *o = x.fmin(y)),
        Binary::ReluGrad => it.for_each(|(o, (&x, &y))| *o = bin(Binary::ReluGrad, x, y)),
        Binary::Sgd(lr) => {
            let lr = T::from_f64(lr);
            it.for_each(|(o, (&x, &y))| *o = x - lr * y)
        }
    }
}

/// `o = op(o, b)` elementwise (an accumulation step).
#[inline(always)]
fn binary_acc<T: Elem>(op: Binary, o: &mut [T], b: &[T]) {
    let it = o.iter_mut().zip(b);
    match op {
        Binary::Add => it.for_each(|(o, &y)| *o += y),
        Binary::Sub => it.for_each(|(o, &y)| *o = *o - y),
        Binary::Mul => it.for_each(|(o, &y)| *o = *o * y),
        Binary::Max => it.for_each(|(o, &y)| *o = o.fmax(y)),
        Binary::Min => it.for_each(|(o, &y)| *o = o.fmin(y)),
        Binary::ReluGrad => it.for_each(|(o, &y)| *o = bin(Binary::ReluGrad, *o, y)),
        Binary::Sgd(lr) => {
            let lr = T::from_f64(lr);
            it.for_each(|(o, &y)| *o = *o - lr * y)
        }
    }
}

#[inline(always)]
fn run_prog_body<T: Elem>(p: &EwProg, out: &mut [T], a: &[T], b: &[T]) {
    let n = out.len();
    let mut start = 0;
    while start < n {
        let end = (start + CHUNK).min(n);
        let o = &mut out[start..end];
        match p.first {
            First::Unary(u) => unary_into(u, o, &a[start..end]),
            First::Binary(op) => binary_into(op, o, &a[start..end], &b[start..end]),
        }
        for &u in &p.chain {
            unary_inplace(u, o);
        }
        start = end;
    }
}

#[inline(always)]
fn acc_prog_body<T: Elem>(op: Binary, out: &mut [T], b: &[T]) {
    binary_acc(op, out, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn run_prog_avx2<T: Elem>(p: &EwProg, out: &mut [T], a: &[T], b: &[T]) {
    run_prog_body(p, out, a, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn acc_avx2<T: Elem>(op: Binary, out: &mut [T], b: &[T]) {
    acc_prog_body(op, out, b)
}

#[cfg(target_arch = "x86_64")]
fn has_avx2() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

/// Run an elementwise program: `out[i] = p(a[i], b[i])` (`b` unused for a
/// unary program). All slices have the same length.
pub fn run_prog<T: Elem>(p: &EwProg, out: &mut [T], a: &[T], b: &[T]) {
    debug_assert_eq!(out.len(), a.len());
    debug_assert!(p.arity() == 1 || b.len() == a.len());
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU has AVX2 and FMA (checked just above). Rust never
        // contracts a*b+c into an FMA on its own, so results are those of the
        // plain loop.
        unsafe { run_prog_avx2(p, out, a, b) };
        return;
    }
    run_prog_body(p, out, a, b)
}

/// `out = op(out, b)` elementwise.
pub fn accumulate<T: Elem>(op: Binary, out: &mut [T], b: &[T]) {
    debug_assert_eq!(out.len(), b.len());
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU has AVX2 and FMA (checked just above).
        unsafe { acc_avx2(op, out, b) };
        return;
    }
    acc_prog_body(op, out, b)
}

// ---------------------------------------------------------------------------
// Matrix products.

/// Which operands of a matrix product are transposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatMulKind {
    /// `matMulT?`: the left operand is stored `[k, m]`.
    pub trans_a: bool,
    /// `matMul?T`: the right operand is stored `[n, k]`.
    pub trans_b: bool,
}

impl MatMulKind {
    /// The kind of a catalog matrix product (`matMul`, `matMulTN`, …).
    pub fn of(kernel: &KernelRef) -> Option<MatMulKind> {
        let KernelRef::Named { name, .. } = kernel else { return None };
        let (trans_a, trans_b) = match name.as_str() {
            "matMul" => (false, false),
            "matMulTN" => (true, false),
            "matMulNT" => (false, true),
            "matMulTT" => (true, true),
            _ => return None,
        };
        Some(MatMulKind { trans_a, trans_b })
    }

    /// `(m, k, n)` from the operand shapes (already checked).
    pub fn dims(self, a: &[usize], b: &[usize]) -> (usize, usize, usize) {
        let (m, k) = if self.trans_a { (a[1], a[0]) } else { (a[0], a[1]) };
        let n = if self.trans_b { b[0] } else { b[1] };
        (m, k, n)
    }
}

/// `out = A·B` (or `out += A·B` when `accumulate`), for row-major `out`
/// `[m, n]`, through `gemm` on the calling thread.
pub fn matmul_into<T: Elem>(
    kind: MatMulKind,
    out: &mut [T],
    a: &[T],
    a_shape: &[usize],
    b: &[T],
    b_shape: &[usize],
    accumulate: bool,
) {
    matmul_into_par(kind, out, a, a_shape, b, b_shape, accumulate, 1)
}

/// [`matmul_into`] split over `threads` tasks of the current rayon pool
/// (for the rare operator with fewer output blocks than cores).
#[allow(clippy::too_many_arguments)]
pub fn matmul_into_par<T: Elem>(
    kind: MatMulKind,
    out: &mut [T],
    a: &[T],
    a_shape: &[usize],
    b: &[T],
    b_shape: &[usize],
    accumulate: bool,
    threads: usize,
) {
    let (m, k, n) = kind.dims(a_shape, b_shape);
    assert_eq!(out.len(), m * n, "matmul output size");
    assert_eq!(a.len(), m * k, "matmul left operand size");
    assert_eq!(b.len(), k * n, "matmul right operand size");
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            out.fill(T::ZERO);
        }
        return;
    }
    // (row stride, column stride) of the logical [m,k] and [k,n] operands.
    let (lhs_rs, lhs_cs) = if kind.trans_a { (1, m as isize) } else { (k as isize, 1) };
    let (rhs_rs, rhs_cs) = if kind.trans_b { (1, k as isize) } else { (n as isize, 1) };
    // SAFETY: the pointers cover m·k, k·n and m·n elements (asserted above)
    // with the given strides; `out` does not alias the operands (it is a
    // `&mut`). T is f32 or f64, which gemm supports.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            out.as_mut_ptr(),
            1,
            n as isize,
            accumulate,
            a.as_ptr(),
            lhs_cs,
            lhs_rs,
            b.as_ptr(),
            rhs_cs,
            rhs_rs,
            T::ONE,
            T::ONE,
            false,
            false,
            false,
            if threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None },
        )
    }
}

// ---------------------------------------------------------------------------
// Compiled kernels.

#[derive(Debug, Clone, Copy, PartialEq)]
enum Sel {
    Diag,
    Transpose,
}

#[derive(Debug, Clone, PartialEq)]
enum Named {
    RowSum,
    ColSum,
    MatVecAdd,
    MatVecSub,
    MinIndex,
    MinPair,
    OffsetIndex,
    Tile,
    Concat,
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
                "matVecAdd" => Named::MatVecAdd,
                "matVecSub" => Named::MatVecSub,
                "minIndex" => Named::MinIndex,
                "minPair" => Named::MinPair,
                "offsetIndex" => Named::OffsetIndex,
                "tile" => Named::Tile,
                "concat" => Named::Concat,
                _ => Named::Unknown,
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
            Named::RowSum | Named::ColSum => rank(0) == 2,
            Named::MatVecAdd | Named::MatVecSub => rank(0) == 2 && rank(1) == 1 && inputs[1].shape()[0] == a.shape()[1],
            Named::MinIndex => (rank(0) == 2 || rank(0) == 1) && !a.is_empty(),
            Named::MinPair => pairs(0) && pairs(1) && inputs[1].shape() == a.shape(),
            Named::OffsetIndex => pairs(0),
            Named::Tile | Named::Concat => true,
            Named::Unknown => false,
        };
        if !handled {
            return reference_apply(&self.kernel, pool, inputs);
        }
        let mut out = match n {
            Named::Tile | Named::Concat | Named::Unknown => None,
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
            Named::MatVecAdd | Named::MatVecSub => {
                let v = inputs[1].as_slice();
                let cols = v.len();
                let op = if *n == Named::MatVecAdd { Binary::Add } else { Binary::Sub };
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
            Named::Unknown => return reference_apply(&self.kernel, pool, inputs),
        }
        Ok(vec![out.expect("an output block")])
    }
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
