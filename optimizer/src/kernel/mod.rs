//! The kernel catalog: what each block kernel is — its arity, arguments,
//! output shape, number of output blocks, flop count and algebraic facts
//! (associative-commutative, elementwise, distributivity). The executor
//! (`tra-executor`, module `kernels`) holds the implementations on ndarray.
//!
//! # Conventions
//!
//! * Blocks are arrays of `f64`; shapes follow numpy: row-major, axis 0 is the
//!   rows. A shape is written `[m, n]`.
//! * A kernel is referred to by a [`KernelRef`]: a catalog name with optional
//!   numeric arguments (`matMul`, `tile(1,2)`, `scale(0.01)`), or a composition
//!   `compose(outer, inner)`. Arguments are kept as canonical text: integers as
//!   `1`, other numbers as Rust's shortest `f64` display (`0.01`).
//! * Parsing accepts any name (so that JSON can be read); [`KernelRef::check`]
//!   reports unknown names ([`KernelError::Unknown`], whose message suggests a
//!   close catalog name), wrong argument counts and kinds, and compositions
//!   whose outer kernel is not unary.
//! * Shape rules ([`KernelRef::output_shape`]) check the operand count and
//!   shapes and report [`KernelError::BadShape`] with both shapes in the text.
//!
//! # The catalog
//!
//! | kernel | operands → output | flops |
//! |---|---|---|
//! | `matMul` | `[m,k]×[k,n]→[m,n]` (A·B) | 2mkn |
//! | `matMulTN` | `[k,m]×[k,n]→[m,n]` (Aᵀ·B) | 2mkn |
//! | `matMulNT` | `[m,k]×[n,k]→[m,n]` (A·Bᵀ) | 2mkn |
//! | `matMulTT` | `[k,m]×[n,k]→[m,n]` (Aᵀ·Bᵀ) | 2mkn |
//! | `matAdd`, `matSub`, `elemMul`, `max`, `min` | `s×s→s` (any shape `s`) | \|s\| |
//! | `reluGrad` | `s×s→s`: grad ⊙ (z > 0) | \|s\| |
//! | `sgdStep(lr)` | `s×s→s`: w − lr·g | 2\|s\| |
//! | `relu`, `neg`, `scale(c)` | `s→s` | \|s\| |
//! | `sigmoid` | `s→s` | 4\|s\| |
//! | `diag` | `[n,n]→[n]` | 0 |
//! | `transpose` | `[m,n]→[n,m]` | 0 |
//! | `matVecAdd`, `matVecSub` | `[m,n]×[n]→[m,n]` (vector added to / subtracted from every row) | mn |
//! | `rowSum` | `[m,n]→[m]` | m(n−1) (additions only) |
//! | `colSum` | `[m,n]→[n]` | (m−1)n |
//! | `minIndex` | `[m,n]→[m,2]` (n ≥ 1): per row (min value, its column) | mn |
//! | `minPair` | `[m,2]×[m,2]→[m,2]`: per row the smaller (value, index) pair | m |
//! | `offsetIndex(o)` | `[m,2]→[m,2]`: adds `o` to column 1 | m |
//! | `tile(dim,size)` | `s→` pieces of `s` with `s[dim]` = `size`; `s[dim]/size` blocks | 0 |
//! | `concat(key_dim,array_dim)` | applied by the aggregation operator, see below | 0 |
//! | `einSum(spec)` | Einstein summation inside a block, see below | see below |
//! | `exp`, `log`, `sqrt`, `shift(c)` (x + c) | `s→s` | \|s\| |
//! | `elemDiv` | `s×s→s`: a / b | \|s\| |
//! | `rowMax` / `colMax` | `[m,n]→[m]` / `[m,n]→[n]` (a NaN loses; empty → −∞) | m(n−1) / (m−1)n |
//! | `matVecMul`, `matVecDiv` | `[m,n]×[n]→[m,n]` (every row times / over the vector) | mn |
//! | `matColVecAdd`, `…Sub`, `…Mul`, `…Div` | `[m,n]×[m]→[m,n]`: row i with v\[i\] | mn |
//! | `add`, `sub`, `mul`, `div`, `pow`, `maximum`, `minimum` | `s×t→b` with numpy broadcasting, see below (`maximum`/`minimum` propagate NaN) | \|b\| |
//! | `lt`, `le`, `gt`, `ge`, `eq`, `ne` | `s×t→b`: 1 where the comparison holds, else 0 (IEEE: NaN compares false) | \|b\| |
//! | `selectIf`, `selectElse` | `(c,x)→b`: x where c ≠ 0 / where c = 0, else 0 | \|b\| |
//! | `concatAxis(axis)` | `[..,a,..]×[..,b,..]→[..,a+b,..]` | 0 |
//! | `abs`, `log1p`, `expm1`, `recip`, `rsqrt`, `sign`, `square`, `floor`, `ceil`, `logicalNot`, `powc(c)` | `s→s` | \|s\| |
//! | `tanh`, `erf` | `s→s` | 4\|s\| |
//! | `expandDims(axis)` / `squeezeAxis(axis)` | inserts / removes a size-1 axis | 0 |
//! | `mergeAxes(axis)` | `[..,a,b,..]→[..,a·b,..]` (row-major) | 0 |
//! | `splitAxis(axis,size)` | `[..,n,..]→[..,n/size,size,..]` | 0 |
//! | `repeatAxis(axis,n)` | `[..,1,..]→[..,n,..]` | 0 |
//! | `einMax(spec)`, `einMin(spec)` | max / min over the letters a unary spec drops, see below | as a unary `einSum` |
//!
//! # Softmax and normalization across blocks
//!
//! A row-wise reduction of a matrix cut into `[I, J]` blocks is a per-block
//! kernel and an aggregation over the column-block key: the row maxima are
//! `aggregate(max, [0], transform(rowMax, X))` (`rowMax` distributes over
//! `max`, so R1-4 may move it), the row sums the same with `rowSum` and
//! `matAdd`. The broadcast back is a join on the row-block key with a
//! `matColVec…` kernel: softmax is `E = exp ∘ (X matColVecSub M)`, then
//! `E matColVecDiv rowsums(E)`; layer normalization divides the centred rows
//! by `sqrt ∘ shift(ε)` of the mean square. `exp`, `log` and `sqrt`
//! distribute over no kernel, so no rule moves them through a sum.
//!
//! # Arg-min across blocks
//!
//! `minIndex` gives, for every row of a block, the smallest value and the
//! column index where it is (as `f64`; ties: the smaller index; values are
//! compared with `f64::total_cmp`, so `-0 < +0` and NaN is largest). The index
//! is *local to the block*: a front-end adds the block's column offset with
//! `offsetIndex(o)`. `minPair` is associative and commutative, so a distributed
//! arg-min is `aggregate(minPair)` over `transform(compose(offsetIndex(o), minIndex))`.
//!
//! # `concat`
//!
//! `concat(key_dim, array_dim)` undoes a `tile`. It has arity 2 for catalog
//! purposes but is not associative-commutative and is not applied pairwise:
//! the (local) aggregation operator treats it specially — the pieces of a
//! group, ordered by key component `key_dim`, are joined along array axis
//! `array_dim`, and missing pieces are zero-filled. [`KernelRef::output_shape`]
//! cannot know the number of pieces: it returns the (common) piece shape, and
//! the caller multiplies bound `array_dim` by the piece count. `concat` cannot
//! appear in a composition.
//!
//! # `einSum`
//!
//! `einSum(spec)` is paper 004 §2.2's `einSumOp`: Einstein summation inside a
//! block. Its one argument is not a number but a *spec*: the operands' letters
//! and then the output's, separated by `_` — `einSum(ij_jk_ik)` is numpy's
//! `einsum("ij,jk->ik")`. One operand makes it unary (`einSum(ii_i)`: diagonal,
//! `einSum(ij_ji)`: transpose, `einSum(ij_i)`: row sums, `einSum(ii_)`:
//! trace); two make it binary. Letters are ASCII letters; a letter repeated
//! within an operand takes a diagonal; letters absent from the output are
//! summed; an empty part is a scalar (a block of rank 0, shape `[]`). The
//! output's letters are distinct and each appears in an operand; every
//! occurrence of a letter must have the same size ([`EinSumSpec`]). Flops:
//! `∏ size(letter)` over all distinct letters is the number of terms; a
//! binary einSum counts 2 per term when it sums a letter (`einSum(ij_jk_ik)`
//! on `[m,k]×[k,n]` is `2mkn`, as `matMul`), 1 otherwise (products only); a
//! unary one counts 1 per term when it sums a letter, else 0 (a selection or
//! permutation, as `diag` and `transpose`). Its arity comes from the spec.
//!
//! # numpy's operations
//!
//! The kernels a numpy, JAX or ONNX front-end emits state no algebraic fact
//! but `elementwise` on the unary maps, so no rule reorders them.
//!
//! * The binaries `add` … `selectElse` broadcast like numpy: the operand
//!   shapes are aligned at the trailing end, each pair of axes is equal or
//!   one of them is 1 (a missing axis counts as 1, so `[]` broadcasts against
//!   anything), and the output has the larger rank: `[3,1]×[4]→[3,4]`
//!   ([`broadcast_shape`]). They are not `elementwise` (their operands'
//!   shapes may differ). `maximum`/`minimum` propagate NaN, unlike `max`/`min`
//!   (where a NaN loses); comparisons give 1 or 0; numpy's `where(c, x, y)`
//!   is `add(selectIf(c, x), selectElse(c, y))` (a NaN `c` counts as true).
//! * `powc(c)` multiplies (by squaring) when `c` is an integer with
//!   \|c\| ≤ 64, else uses `powf`. `sign` is numpy's: −1, 0 for ±0, +1, NaN.
//! * The shape kernels (`expandDims`, `squeezeAxis`, `mergeAxes`,
//!   `splitAxis`, `repeatAxis`, `concatAxis`) take array axes of the block,
//!   which may have any rank, `[]` included; an axis out of range is a
//!   [`KernelError::BadShape`] naming the kernel, the axis and the shape.
//! * `einMax(spec)` / `einMin(spec)` take a unary `einSum` spec and reduce
//!   the letters absent from the output with a maximum / minimum instead of a
//!   sum: `einMax(ijk_ik)` is the maximum over `j`, output letters may be
//!   permuted and repeated letters take diagonals. A NaN loses to a number
//!   (as `max` and `rowMax`; a NaN alone gives the identity); an empty
//!   reduction gives −∞ / +∞. Flops as a unary `einSum`.
//!
//! # Compositions
//!
//! `compose(outer, inner)` applies `outer` (which must be unary) to the single
//! block that `inner` (any arity) gives. Its arity is `inner`'s; its output
//! shape is `outer(inner(shapes))`; its blocks per call are `outer`'s (inner
//! must give one); it is elementwise iff both parts are; it is never
//! associative-commutative and [`KernelRef::distributes_over`] is false for it.
//! The executor evaluates it in one of three ways, and [`KernelRef::flops`]
//! counts accordingly:
//!
//! 1. both parts elementwise: one pass, `outer(inner(a, b))` element by element;
//!    flops = flops(inner) + flops(outer on inner's output);
//! 2. otherwise, if `inner` is binary elementwise and `outer` distributes over
//!    it: `inner(outer(a), outer(b))`; flops = flops(outer, a) +
//!    flops(outer, b) + flops(inner on outer's outputs) — `compose(diag,
//!    matAdd)` on `[n,n]` operands costs n;
//! 3. otherwise `outer(inner(…))`: flops(inner) + flops(outer on inner's output).
//!
//! # Layout
//!
//! `catalog` holds the entries and decodes a name and its arguments; `shape`
//! the shape rules and flop counts; `parse` the text and JSON forms;
//! `einsum_spec` the `einSum` spec. This module keeps [`KernelRef`], its
//! checks and algebraic queries.

mod catalog;
pub(crate) use catalog::edit_distance;
mod einsum_spec;
mod parse;
mod shape;

pub use catalog::{catalog, lookup, KernelInfo};
pub use einsum_spec::{is_spec_kernel, EinSumSpec, EinSumSpecError, EINSUM, EIN_MAX, EIN_MIN};
pub use shape::broadcast_shape;

use catalog::{resolve, unknown_message};
use std::fmt;

/// A reference to a kernel: a catalog name with optional integer or decimal
/// arguments (`matMul`, `tile(1,2)`, `scale(0.01)`), or a composition
/// `compose(outer, inner)`: `outer` applied to the result of `inner`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KernelRef {
    /// A catalog entry and its arguments (canonical decimal text).
    Named {
        /// Catalog name.
        name: String,
        /// Arguments, canonical text (`1`, `0.01`).
        args: Vec<String>,
    },
    /// `outer ∘ inner`.
    Compose(Box<KernelRef>, Box<KernelRef>),
}

/// Why a kernel reference or application is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelError {
    /// Not in the catalog. Holds the name as written; the message adds a
    /// suggestion when a catalog name is close (`unknown kernel `matmul`; did
    /// you mean `matMul`?`).
    #[error("{}", unknown_message(.0))]
    Unknown(String),
    /// Wrong number or kind of arguments, wrong arity in a composition.
    #[error("{0}")]
    BadUse(String),
    /// Operand shapes the kernel does not accept.
    #[error("{0}")]
    BadShape(String),
}

impl KernelRef {
    /// A catalog kernel without arguments.
    pub fn named(name: &str) -> KernelRef {
        KernelRef::Named { name: name.to_string(), args: vec![] }
    }
    /// `outer ∘ inner`, bracketed to the right: `(a ∘ b) ∘ c` is built as
    /// `a ∘ (b ∘ c)` when `b` is unary (composition is associative), so
    /// every bracketing of one chain of kernels is one kernel. Fusing a
    /// chain of `n` maps pairwise then names each segment once (O(n²)
    /// kernels), not once per bracketing (Catalan many: a chain of 20
    /// transforms built a million e-nodes).
    pub fn compose(outer: KernelRef, inner: KernelRef) -> KernelRef {
        // A composition whose outer kernel is not unary is wrong whatever
        // its bracketing: it is kept as written, for `check` to name.
        if !matches!(outer, KernelRef::Compose(..)) || outer.arity() != 1 {
            return KernelRef::Compose(Box::new(outer), Box::new(inner));
        }
        // The unary kernels of `outer`, outermost first, then nested to the
        // right around `inner` (no recursion: chains can be long).
        let mut parts = Vec::new();
        let mut open = vec![outer];
        while let Some(k) = open.pop() {
            match k {
                KernelRef::Compose(a, b) => {
                    open.push(*b);
                    open.push(*a);
                }
                named => parts.push(named),
            }
        }
        parts.into_iter().rev().fold(inner, |acc, part| KernelRef::Compose(Box::new(part), Box::new(acc)))
    }
    /// The catalog kernels a composition is made of (1 for a named kernel).
    pub fn parts(&self) -> usize {
        let (mut parts, mut open) = (0, vec![self]);
        while let Some(k) = open.pop() {
            match k {
                KernelRef::Named { .. } => parts += 1,
                KernelRef::Compose(a, b) => open.extend([a.as_ref(), b.as_ref()]),
            }
        }
        parts
    }
    /// Check names, argument counts and kinds, and composition arities (the
    /// outer kernel of a composition must be unary; `concat` cannot be
    /// composed).
    pub fn check(&self) -> Result<(), KernelError> {
        match self {
            KernelRef::Named { name, args } => resolve(name, args).map(|_| ()),
            KernelRef::Compose(outer, inner) => {
                outer.check()?;
                inner.check()?;
                for part in [outer, inner] {
                    if matches!(part.as_ref(), KernelRef::Named { name, .. } if name == "concat") {
                        return Err(KernelError::BadUse(format!(
                            "{self}: concat is applied by the aggregation operator and cannot be composed"
                        )));
                    }
                }
                if outer.arity() != 1 {
                    return Err(KernelError::BadUse(format!(
                        "{self}: the outer kernel of a composition must be unary, {outer} takes {} operands",
                        outer.arity()
                    )));
                }
                Ok(())
            }
        }
    }
    /// Number of block operands (0 for an unknown name; `check` reports it).
    pub fn arity(&self) -> usize {
        match self {
            KernelRef::Named { name, args } if name == EINSUM => {
                args.first().and_then(|a| EinSumSpec::parse(a).ok()).map_or(0, |s| s.inputs.len())
            }
            KernelRef::Named { name, .. } => lookup(name).map_or(0, |k| k.arity),
            KernelRef::Compose(_, inner) => inner.arity(),
        }
    }
    /// Binary, associative and commutative.
    pub fn is_assoc_comm(&self) -> bool {
        match self {
            KernelRef::Named { name, .. } => lookup(name).is_some_and(|k| k.assoc_comm),
            KernelRef::Compose(..) => false,
        }
    }
    /// Elementwise.
    pub fn is_elementwise(&self) -> bool {
        match self {
            KernelRef::Named { name, .. } => lookup(name).is_some_and(|k| k.elementwise),
            KernelRef::Compose(outer, inner) => outer.is_elementwise() && inner.is_elementwise(),
        }
    }
    /// `self(g(a, b)) == g(self(a), self(b))` for the binary kernel `g`
    /// (by name: arguments of `g` do not matter). False for compositions.
    pub fn distributes_over(&self, g: &KernelRef) -> bool {
        match (self, g) {
            (KernelRef::Named { name, .. }, KernelRef::Named { name: g, .. }) => {
                lookup(name).is_some_and(|k| k.distributes_over.contains(&g.as_str()))
            }
            _ => false,
        }
    }
    /// A binary kernel linear in each operand over the aggregation kernel
    /// `s` (catalog fact `bilinear_over`, by name). A composition
    /// `compose(outer, inner)` is when `inner` is and `outer` distributes
    /// over `s` (`compose(scale(c), matMul)` over `matAdd`).
    pub fn is_bilinear_over(&self, s: &KernelRef) -> bool {
        match (self, s) {
            (KernelRef::Named { name, .. }, KernelRef::Named { name: s, .. }) => {
                lookup(name).is_some_and(|k| k.arity == 2 && k.bilinear_over.contains(&s.as_str()))
            }
            (KernelRef::Compose(outer, inner), _) => outer.distributes_over(s) && inner.is_bilinear_over(s),
            _ => false,
        }
    }
    /// The block matrix product this kernel is, if it is one: `c·op(A)·op(B)`
    /// for a catalog product (fact `matrix_product`) or `compose(scale(c),
    /// product)`.
    pub fn matrix_product(&self) -> Option<MatrixProduct> {
        match self {
            KernelRef::Named { name, .. } => lookup(name)?.matrix_product.map(|(transpose_left, transpose_right)| {
                MatrixProduct { transpose_left, transpose_right, scale: None }
            }),
            KernelRef::Compose(outer, inner) => match outer.as_ref() {
                KernelRef::Named { name, args } if name == "scale" && args.len() == 1 => {
                    let p = inner.matrix_product()?;
                    p.scale.is_none().then(|| MatrixProduct { scale: Some(args[0].clone()), ..p })
                }
                _ => None,
            },
        }
    }
    /// The s-expression form: `matMul`, `tile(1,2)`, `(compose diag matAdd)`.
    pub fn to_sexpr(&self) -> String {
        match self {
            KernelRef::Named { .. } => self.to_string(),
            KernelRef::Compose(o, i) => format!("(compose {} {})", o.to_sexpr(), i.to_sexpr()),
        }
    }
}

/// A block matrix product `c·op(A)·op(B)`, as [`KernelRef::matrix_product`]
/// reads it: `op` transposes where the flag says so; `scale` is the factor
/// `c` of `compose(scale(c), …)` (canonical text), `None` for 1.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MatrixProduct {
    /// The left operand is read transposed.
    pub transpose_left: bool,
    /// The right operand is read transposed.
    pub transpose_right: bool,
    /// The scale factor, if any.
    pub scale: Option<String>,
}

impl MatrixProduct {
    /// The kernel computing this product: `matMul`, `matMulTN`, `matMulNT` or
    /// `matMulTT`, composed with `scale(c)` when there is a factor.
    pub fn kernel(&self) -> KernelRef {
        let name = match (self.transpose_left, self.transpose_right) {
            (false, false) => "matMul",
            (true, false) => "matMulTN",
            (false, true) => "matMulNT",
            (true, true) => "matMulTT",
        };
        let product = KernelRef::named(name);
        match &self.scale {
            None => product,
            Some(c) => KernelRef::compose(KernelRef::Named { name: "scale".into(), args: vec![c.clone()] }, product),
        }
    }
}

impl fmt::Display for KernelRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelRef::Named { name, args } if args.is_empty() => write!(f, "{name}"),
            KernelRef::Named { name, args } => write!(f, "{name}({})", args.join(",")),
            KernelRef::Compose(o, i) => write!(f, "compose({o},{i})"),
        }
    }
}

#[cfg(test)]
mod tests;
