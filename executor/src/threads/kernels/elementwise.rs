//! Elementwise programs: an elementwise kernel or a composition of them
//! compiled to one first operation and a chain of unary ones, run over a
//! block in chunks of [`CHUNK`] elements (one pass, no block-sized
//! temporary, loops the compiler vectorises).

use crate::kernels::scalar::Math;
use crate::threads::elem::Elem;
use tra_optimizer::kernel::KernelRef;

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
    /// `e^x`.
    Exp,
    /// `ln x`.
    Log,
    /// `√x`.
    Sqrt,
    /// `x + c`.
    Shift(f64),
    /// `abs`, `tanh`, `powc(c)`, …: the reference's scalar function, in
    /// `f64` (bit-identical for `f64` blocks).
    Math(Math),
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
    /// `a / b`.
    Div,
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
    pub(super) fn eval<T: Elem>(&self, a: T, b: T) -> T {
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
        Unary::Exp => x.exp(),
        Unary::Log => x.ln(),
        Unary::Sqrt => x.sqrt(),
        Unary::Shift(c) => x + T::from_f64(c),
        Unary::Math(m) => T::from_f64(m.eval(x.to_f64())),
    }
}

#[inline(always)]
pub(super) fn bin<T: Elem>(op: Binary, a: T, b: T) -> T {
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
        Binary::Div => a / b,
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
                "exp" => First::Unary(Unary::Exp),
                "log" => First::Unary(Unary::Log),
                "sqrt" => First::Unary(Unary::Sqrt),
                "shift" => First::Unary(Unary::Shift(arg(0)?)),
                "elemDiv" => First::Binary(Binary::Div),
                _ => First::Unary(Unary::Math(Math::of(name, arg(0))?)),
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
        u @ (Unary::Exp | Unary::Log | Unary::Sqrt | Unary::Shift(_) | Unary::Math(_)) => {
            o.iter_mut().zip(a).for_each(|(o, &x)| *o = un(u, x))
        }
    }
}

#[inline(always)]
pub(super) fn unary_inplace<T: Elem>(u: Unary, o: &mut [T]) {
    match u {
        Unary::Copy => {}
        Unary::Relu => o.iter_mut().for_each(|x| *x = un(Unary::Relu, *x)),
        Unary::Sigmoid => o.iter_mut().for_each(|x| *x = un(Unary::Sigmoid, *x)),
        Unary::Neg => o.iter_mut().for_each(|x| *x = -*x),
        Unary::Scale(c) => {
            let c = T::from_f64(c);
            o.iter_mut().for_each(|x| *x = c * *x)
        }
        u @ (Unary::Exp | Unary::Log | Unary::Sqrt | Unary::Shift(_) | Unary::Math(_)) => {
            o.iter_mut().for_each(|x| *x = un(u, *x))
        }
    }
}

#[inline(always)]
pub(super) fn binary_into<T: Elem>(op: Binary, o: &mut [T], a: &[T], b: &[T]) {
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
        Binary::Div => it.for_each(|(o, (&x, &y))| *o = x / y),
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
        Binary::Div => it.for_each(|(o, &y)| *o = *o / y),
    }
}

#[inline(always)]
pub(super) fn run_prog_body<T: Elem>(p: &EwProg, out: &mut [T], a: &[T], b: &[T]) {
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
