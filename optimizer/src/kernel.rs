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

/// One catalog entry, as `GET /v1/kernels` lists it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct KernelInfo {
    /// Name used in programs.
    pub name: &'static str,
    /// Number of block operands (1 or 2).
    pub arity: usize,
    /// Names of the arguments, e.g. `["dim", "size"]`.
    pub params: &'static [&'static str],
    /// What it computes, with its shape rule.
    pub doc: &'static str,
    /// Binary, associative and commutative: usable to aggregate, and to split
    /// an aggregation in two phases.
    pub assoc_comm: bool,
    /// Works element by element (same shape in and out).
    pub elementwise: bool,
    /// Binary kernels `g` with `self(g(a, b)) == g(self(a), self(b))`.
    pub distributes_over: &'static [&'static str],
}

/// The binary elementwise kernels: selecting elements (`diag`, `transpose`)
/// distributes over all of them.
const ELEMENTWISE_BINARY: &[&str] = &["matAdd", "matSub", "elemMul", "max", "min", "reluGrad", "sgdStep"];
/// Linear maps distribute over addition and subtraction.
const LINEAR: &[&str] = &["matAdd", "matSub"];

/// Parameters whose values must be non-negative integers; every other
/// parameter is a finite real number.
fn is_integer_param(param: &str) -> bool {
    matches!(param, "dim" | "size" | "key_dim" | "array_dim" | "o")
}

static CATALOG: &[KernelInfo] = &[
    KernelInfo {
        name: "matMul",
        arity: 2,
        params: &[],
        doc: "Matrix product A·B: [m,k]×[k,n]→[m,n]. Flops 2mkn.",
        assoc_comm: false,
        elementwise: false,
        distributes_over: &[],
    },
    KernelInfo {
        name: "matMulTN",
        arity: 2,
        params: &[],
        doc: "Aᵀ·B: [k,m]×[k,n]→[m,n]. Flops 2mkn.",
        assoc_comm: false,
        elementwise: false,
        distributes_over: &[],
    },
    KernelInfo {
        name: "matMulNT",
        arity: 2,
        params: &[],
        doc: "A·Bᵀ: [m,k]×[n,k]→[m,n]. Flops 2mkn.",
        assoc_comm: false,
        elementwise: false,
        distributes_over: &[],
    },
    KernelInfo {
        name: "matMulTT",
        arity: 2,
        params: &[],
        doc: "Aᵀ·Bᵀ: [k,m]×[n,k]→[m,n]. Flops 2mkn.",
        assoc_comm: false,
        elementwise: false,
        distributes_over: &[],
    },
    KernelInfo {
        name: "matAdd",
        arity: 2,
        params: &[],
        doc: "Elementwise a+b of two arrays of the same shape (any rank, vectors too). Flops: element count.",
        assoc_comm: true,
        elementwise: true,
        distributes_over: &[],
    },
    KernelInfo {
        name: "matSub",
        arity: 2,
        params: &[],
        doc: "Elementwise a−b of two arrays of the same shape. Flops: element count.",
        assoc_comm: false,
        elementwise: true,
        distributes_over: &[],
    },
    KernelInfo {
        name: "elemMul",
        arity: 2,
        params: &[],
        doc: "Elementwise product a⊙b of two arrays of the same shape. Flops: element count.",
        assoc_comm: true,
        elementwise: true,
        distributes_over: &[],
    },
    KernelInfo {
        name: "max",
        arity: 2,
        params: &[],
        doc: "Elementwise maximum of two arrays of the same shape (a NaN loses to a number). Flops: element count.",
        assoc_comm: true,
        elementwise: true,
        distributes_over: &[],
    },
    KernelInfo {
        name: "min",
        arity: 2,
        params: &[],
        doc: "Elementwise minimum of two arrays of the same shape (a NaN loses to a number). Flops: element count.",
        assoc_comm: true,
        elementwise: true,
        distributes_over: &[],
    },
    KernelInfo {
        name: "reluGrad",
        arity: 2,
        params: &[],
        doc: "(grad, z) → grad ⊙ (z > 0), same shapes. Flops: element count.",
        assoc_comm: false,
        elementwise: true,
        distributes_over: &[],
    },
    KernelInfo {
        name: "sgdStep",
        arity: 2,
        params: &["lr"],
        doc: "(w, g) → w − lr·g, same shapes. Flops: 2 × element count.",
        assoc_comm: false,
        elementwise: true,
        distributes_over: &[],
    },
    KernelInfo {
        name: "relu",
        arity: 1,
        params: &[],
        doc: "max(x, 0) elementwise, any shape. Flops: element count.",
        assoc_comm: false,
        elementwise: true,
        distributes_over: &["max", "min"],
    },
    KernelInfo {
        name: "sigmoid",
        arity: 1,
        params: &[],
        doc: "1/(1+e^−x) elementwise, any shape. Flops: 4 × element count.",
        assoc_comm: false,
        elementwise: true,
        distributes_over: &[],
    },
    KernelInfo {
        name: "scale",
        arity: 1,
        params: &["c"],
        doc: "c·x elementwise, any shape. Flops: element count.",
        assoc_comm: false,
        elementwise: true,
        distributes_over: LINEAR,
    },
    KernelInfo {
        name: "neg",
        arity: 1,
        params: &[],
        doc: "−x elementwise, any shape. Flops: element count.",
        assoc_comm: false,
        elementwise: true,
        distributes_over: LINEAR,
    },
    KernelInfo {
        name: "diag",
        arity: 1,
        params: &[],
        doc: "The diagonal of a square matrix: [n,n]→[n]. Flops 0.",
        assoc_comm: false,
        elementwise: false,
        distributes_over: ELEMENTWISE_BINARY,
    },
    KernelInfo {
        name: "transpose",
        arity: 1,
        params: &[],
        doc: "Matrix transpose: [m,n]→[n,m]. Flops 0.",
        assoc_comm: false,
        elementwise: false,
        distributes_over: ELEMENTWISE_BINARY,
    },
    KernelInfo {
        name: "matVecAdd",
        arity: 2,
        params: &[],
        doc: "Adds the vector to every row (bias add): [m,n]×[n]→[m,n]. Flops mn.",
        assoc_comm: false,
        elementwise: false,
        distributes_over: &[],
    },
    KernelInfo {
        name: "matVecSub",
        arity: 2,
        params: &[],
        doc: "Subtracts the vector from every row: [m,n]×[n]→[m,n]. Flops mn.",
        assoc_comm: false,
        elementwise: false,
        distributes_over: &[],
    },
    KernelInfo {
        name: "rowSum",
        arity: 1,
        params: &[],
        doc: "Sum of each row: [m,n]→[m]. Flops m(n−1) (additions).",
        assoc_comm: false,
        elementwise: false,
        distributes_over: LINEAR,
    },
    KernelInfo {
        name: "colSum",
        arity: 1,
        params: &[],
        doc: "Sum of each column: [m,n]→[n]. Flops (m−1)n (additions).",
        assoc_comm: false,
        elementwise: false,
        distributes_over: LINEAR,
    },
    KernelInfo {
        name: "minIndex",
        arity: 1,
        params: &[],
        doc: "Per row the minimum value and its column index (local to the block, as f64; ties: smaller index): \
              [m,n]→[m,2], n ≥ 1; a vector [n] is one row: [n]→[1,2]. Flops mn.",
        assoc_comm: false,
        elementwise: false,
        distributes_over: &[],
    },
    KernelInfo {
        name: "minPair",
        arity: 2,
        params: &[],
        doc: "Per row keeps the (value, index) pair with the smaller value (ties: smaller index): \
              [m,2]×[m,2]→[m,2]. Flops m.",
        assoc_comm: true,
        elementwise: false,
        distributes_over: &[],
    },
    KernelInfo {
        name: "offsetIndex",
        arity: 1,
        params: &["o"],
        doc: "Adds the integer o to column 1 (the index of a minIndex result): [m,2]→[m,2]. Flops m.",
        assoc_comm: false,
        elementwise: false,
        distributes_over: &["minPair"],
    },
    KernelInfo {
        name: "tile",
        arity: 1,
        params: &["dim", "size"],
        doc: "Cuts the block along array axis dim into pieces of bound size (bound[dim] must be a multiple \
              of size); gives bound[dim]/size blocks, in order. Flops 0.",
        assoc_comm: false,
        elementwise: false,
        distributes_over: &[],
    },
    KernelInfo {
        name: "concat",
        arity: 2,
        params: &["key_dim", "array_dim"],
        doc: "Undoes tile inside an aggregation: the group's pieces, ordered by key component key_dim, are \
              joined along array axis array_dim; missing pieces are zero-filled. Output shape given for one \
              piece: the caller multiplies bound array_dim by the piece count. Flops 0.",
        assoc_comm: false,
        elementwise: false,
        distributes_over: &[],
    },
    KernelInfo {
        name: EINSUM,
        arity: 2,
        params: &["spec"],
        doc: "Einstein summation inside a block (paper 004's einSumOp). The spec lists the operands' letters, then \
              the output's, separated by `_`: einSum(ij_jk_ik) is numpy's einsum('ij,jk->ik') = matMul, \
              einSum(bij_bjk_bik) a batched product. With one operand it is unary: einSum(ii_i) diagonal, \
              einSum(ij_ji) transpose, einSum(ij_i) row sums, einSum(ii_) trace (an empty part is a scalar, shape []). \
              A letter repeated in an operand takes a diagonal; letters not in the output are summed; all \
              occurrences of a letter must have one size. Flops: T = ∏ sizes of the distinct letters; binary 2T \
              when it sums a letter, else T; unary T when it sums a letter, else 0.",
        assoc_comm: false,
        elementwise: false,
        distributes_over: &[],
    },
];

/// Every catalog entry.
pub fn catalog() -> &'static [KernelInfo] {
    CATALOG
}

/// A catalog entry by name.
pub fn lookup(name: &str) -> Option<&'static KernelInfo> {
    CATALOG.iter().find(|k| k.name == name)
}

/// The message of [`KernelError::Unknown`], with a suggestion when one exists.
fn unknown_message(name: &str) -> String {
    match suggestion(name) {
        Some(s) => format!("unknown kernel `{name}`; did you mean `{s}`?"),
        None => format!("unknown kernel `{name}`"),
    }
}

/// A catalog name close to `name`: equal ignoring case, else the nearest
/// within two edits (ignoring case).
fn suggestion(name: &str) -> Option<&'static str> {
    let lower = name.to_lowercase();
    if let Some(k) = CATALOG.iter().find(|k| k.name.to_lowercase() == lower) {
        return Some(k.name);
    }
    CATALOG
        .iter()
        .map(|k| (edit_distance(&lower, &k.name.to_lowercase()), k.name))
        .filter(|&(d, _)| d <= 2 && d < lower.chars().count())
        .min_by_key(|&(d, _)| d)
        .map(|(_, n)| n)
}

/// Levenshtein distance over chars.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, &cb) in b.iter().enumerate() {
            let subst = prev[j] + usize::from(ca != cb);
            cur[j + 1] = subst.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// A named kernel with its arguments decoded.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kernel {
    MatMul,
    MatMulTN,
    MatMulNT,
    MatMulTT,
    /// Same-shape binary elementwise kernels (flops per element).
    Elementwise2(u64),
    /// Any-shape unary elementwise kernels (flops per element).
    Elementwise1(u64),
    Diag,
    Transpose,
    MatVec,
    RowSum,
    ColSum,
    MinIndex,
    MinPair,
    OffsetIndex,
    Tile {
        dim: usize,
        size: usize,
    },
    Concat {
        array_dim: usize,
    },
    /// `einSum(spec)`: shapes and flops come from the spec ([`EinSumSpec`]).
    EinSum,
}

/// Decodes a name and its arguments: the entry must exist and the arguments
/// must match its parameters in number and kind.
fn resolve(name: &str, args: &[String]) -> Result<Kernel, KernelError> {
    if name == "compose" {
        return Err(KernelError::BadUse("compose takes two kernels: compose(outer,inner)".into()));
    }
    let info = lookup(name).ok_or_else(|| KernelError::Unknown(name.to_string()))?;
    if args.len() != info.params.len() {
        let wanted = match info.params.len() {
            0 => "no arguments".to_string(),
            1 => format!("1 argument ({})", info.params[0]),
            n => format!("{n} arguments ({})", info.params.join(", ")),
        };
        return Err(KernelError::BadUse(format!("{name} takes {wanted}, got {}", args.len())));
    }
    if name == EINSUM {
        EinSumSpec::parse(&args[0]).map_err(|e| KernelError::BadUse(format!("{name}({}): {e}", args[0])))?;
        return Ok(Kernel::EinSum);
    }
    let mut ints = Vec::new();
    for (param, arg) in info.params.iter().zip(args) {
        let value = number(arg)
            .ok_or_else(|| KernelError::BadUse(format!("{name}: argument {param} is not a finite number: `{arg}`")))?;
        if is_integer_param(param) {
            if value < 0.0 || value.fract() != 0.0 || value > u32::MAX as f64 {
                return Err(KernelError::BadUse(format!(
                    "{name}: argument {param} must be a non-negative integer, got {arg}"
                )));
            }
            ints.push(value as usize);
        }
    }
    Ok(match name {
        "matMul" => Kernel::MatMul,
        "matMulTN" => Kernel::MatMulTN,
        "matMulNT" => Kernel::MatMulNT,
        "matMulTT" => Kernel::MatMulTT,
        "matAdd" | "matSub" | "elemMul" | "max" | "min" | "reluGrad" => Kernel::Elementwise2(1),
        "sgdStep" => Kernel::Elementwise2(2),
        "relu" | "scale" | "neg" => Kernel::Elementwise1(1),
        "sigmoid" => Kernel::Elementwise1(4),
        "diag" => Kernel::Diag,
        "transpose" => Kernel::Transpose,
        "matVecAdd" | "matVecSub" => Kernel::MatVec,
        "rowSum" => Kernel::RowSum,
        "colSum" => Kernel::ColSum,
        "minIndex" => Kernel::MinIndex,
        "minPair" => Kernel::MinPair,
        "offsetIndex" => Kernel::OffsetIndex,
        "tile" => {
            if ints[1] == 0 {
                return Err(KernelError::BadUse(format!("tile({},{}): size must be at least 1", args[0], args[1])));
            }
            Kernel::Tile { dim: ints[0], size: ints[1] }
        }
        "concat" => Kernel::Concat { array_dim: ints[1] },
        other => unreachable!("catalog entry `{other}` has no shape rule"),
    })
}

/// A finite number from argument text.
fn number(text: &str) -> Option<f64> {
    text.trim().parse::<f64>().ok().filter(|v| v.is_finite())
}

/// Canonical text of a numeric argument: integers as `1`, other numbers as the
/// shortest `f64` display.
fn canonical_number(text: &str) -> Option<String> {
    if let Ok(i) = text.parse::<i64>() {
        return Some(i.to_string());
    }
    // Rust's float parser also takes `inf` and `NaN`; only digits are numbers here.
    if !text.chars().any(|c| c.is_ascii_digit()) {
        return None;
    }
    let v = number(text)?;
    Some(if v == 0.0 { "0".to_string() } else { v.to_string() })
}

/// Element count, saturating.
fn count(shape: &[usize]) -> u64 {
    shape.iter().fold(1u64, |acc, &d| acc.saturating_mul(d as u64))
}

/// `[4, 3]`.
fn show(shape: &[usize]) -> String {
    format!("{shape:?}")
}

/// Shape of the output blocks and their number, for a decoded kernel;
/// `label` (the kernel as written, e.g. `tile(1,3)`) starts error messages.
fn named_shape(label: &str, k: Kernel, inputs: &[&[usize]]) -> Result<(Vec<usize>, usize), KernelError> {
    let bad = |msg: String| Err(KernelError::BadShape(format!("{label}: {msg}")));
    let matrices = |what: &str| -> Result<(), KernelError> {
        match inputs.iter().find(|s| s.len() != 2) {
            Some(s) => Err(KernelError::BadShape(format!("{label}: {what} must be a matrix, got {}", show(s)))),
            None => Ok(()),
        }
    };
    match k {
        Kernel::MatMul | Kernel::MatMulTN | Kernel::MatMulNT | Kernel::MatMulTT => {
            matrices("each operand")?;
            let (a, b) = (inputs[0], inputs[1]);
            // (rows, inner) of the left factor, (inner, cols) of the right one.
            let (m, ka) = if matches!(k, Kernel::MatMulTN | Kernel::MatMulTT) { (a[1], a[0]) } else { (a[0], a[1]) };
            let (kb, n) = if matches!(k, Kernel::MatMulNT | Kernel::MatMulTT) { (b[1], b[0]) } else { (b[0], b[1]) };
            if ka != kb {
                return bad(format!("inner dimensions differ: {} × {}", show(a), show(b)));
            }
            Ok((vec![m, n], 1))
        }
        Kernel::Elementwise2(_) | Kernel::MinPair | Kernel::Concat { .. } => {
            let (a, b) = (inputs[0], inputs[1]);
            if a != b {
                return bad(format!("operand shapes differ: {} and {}", show(a), show(b)));
            }
            match k {
                Kernel::MinPair if a.len() != 2 || a[1] != 2 => {
                    bad(format!("operands must be [m, 2] (value, index) pairs, got {}", show(a)))
                }
                Kernel::Concat { array_dim } if array_dim >= a.len() => {
                    bad(format!("array dim {array_dim} is out of range for pieces of shape {}", show(a)))
                }
                _ => Ok((a.to_vec(), 1)),
            }
        }
        Kernel::Elementwise1(_) => Ok((inputs[0].to_vec(), 1)),
        Kernel::Diag => {
            matrices("the operand")?;
            let a = inputs[0];
            if a[0] != a[1] {
                return bad(format!("the operand must be a square matrix, got {}", show(a)));
            }
            Ok((vec![a[0]], 1))
        }
        Kernel::Transpose => {
            matrices("the operand")?;
            Ok((vec![inputs[0][1], inputs[0][0]], 1))
        }
        Kernel::MatVec => {
            let (a, b) = (inputs[0], inputs[1]);
            if a.len() != 2 || b.len() != 1 {
                return bad(format!("operands must be a matrix and a vector, got {} and {}", show(a), show(b)));
            }
            if a[1] != b[0] {
                return bad(format!("vector length differs from the row length: {} and {}", show(a), show(b)));
            }
            Ok((a.to_vec(), 1))
        }
        Kernel::RowSum => {
            matrices("the operand")?;
            Ok((vec![inputs[0][0]], 1))
        }
        Kernel::ColSum => {
            matrices("the operand")?;
            Ok((vec![inputs[0][1]], 1))
        }
        Kernel::MinIndex => {
            let a = inputs[0];
            if a.len() == 1 {
                // A vector is one row.
                if a[0] == 0 {
                    return bad(format!("the vector must have at least one element, got {}", show(a)));
                }
                return Ok((vec![1, 2], 1));
            }
            matrices("the operand")?;
            if a[1] == 0 {
                return bad(format!("rows must have at least one element, got {}", show(a)));
            }
            Ok((vec![a[0], 2], 1))
        }
        Kernel::OffsetIndex => {
            let a = inputs[0];
            if a.len() != 2 || a[1] != 2 {
                return bad(format!("the operand must be [m, 2] (value, index) pairs, got {}", show(a)));
            }
            Ok((a.to_vec(), 1))
        }
        Kernel::Tile { dim, size } => {
            let a = inputs[0];
            if dim >= a.len() {
                return bad(format!("array dim {dim} is out of range for an array of shape {}", show(a)));
            }
            let rest = a[dim] % size;
            if rest != 0 {
                return bad(format!("array dim {dim} has bound {}, not a multiple of {size}", a[dim]));
            }
            let mut piece = a.to_vec();
            piece[dim] = size;
            Ok((piece, a[dim] / size))
        }
        // Decoded from the spec by `KernelRef::shape_info`, which never comes here.
        Kernel::EinSum => Err(KernelError::BadUse(format!("{label}: the shape of einSum comes from its spec"))),
    }
}

/// Flops of a decoded kernel on operands whose shapes it accepts.
fn named_flops(k: Kernel, inputs: &[&[usize]]) -> u64 {
    let d = |i: usize, j: usize| inputs[i][j] as u64;
    match k {
        Kernel::MatMul | Kernel::MatMulNT => 2u64
            .saturating_mul(d(0, 0))
            .saturating_mul(d(0, 1))
            .saturating_mul(if matches!(k, Kernel::MatMul) { d(1, 1) } else { d(1, 0) }),
        Kernel::MatMulTN | Kernel::MatMulTT => 2u64
            .saturating_mul(d(0, 0))
            .saturating_mul(d(0, 1))
            .saturating_mul(if matches!(k, Kernel::MatMulTN) { d(1, 1) } else { d(1, 0) }),
        Kernel::Elementwise2(per) | Kernel::Elementwise1(per) => per.saturating_mul(count(inputs[0])),
        Kernel::MatVec | Kernel::MinIndex => count(inputs[0]),
        Kernel::RowSum => d(0, 0).saturating_mul(d(0, 1).saturating_sub(1)),
        Kernel::ColSum => d(0, 0).saturating_sub(1).saturating_mul(d(0, 1)),
        Kernel::MinPair | Kernel::OffsetIndex => d(0, 0),
        Kernel::Diag | Kernel::Transpose | Kernel::Tile { .. } | Kernel::Concat { .. } => 0,
        // Counted from the spec by `KernelRef::flops`.
        Kernel::EinSum => 0,
    }
}

/// A small recursive-descent parser for kernel text.
struct Parser<'a> {
    src: &'a str,
    rest: &'a str,
}

impl<'a> Parser<'a> {
    fn err(&self, what: impl fmt::Display) -> KernelError {
        KernelError::BadUse(format!("cannot parse kernel `{}`: {what}", self.src))
    }

    fn skip_ws(&mut self) {
        self.rest = self.rest.trim_start();
    }

    fn eat(&mut self, c: char) -> bool {
        self.skip_ws();
        match self.rest.strip_prefix(c) {
            Some(r) => {
                self.rest = r;
                true
            }
            None => false,
        }
    }

    fn ident(&mut self) -> Result<&'a str, KernelError> {
        self.skip_ws();
        let first_ok = self.rest.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        if !first_ok {
            return Err(match self.rest.chars().next() {
                Some(c) => self.err(format!("expected a kernel name, found `{c}`")),
                None => self.err("expected a kernel name"),
            });
        }
        let end = self.rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(self.rest.len());
        let (id, rest) = self.rest.split_at(end);
        self.rest = rest;
        Ok(id)
    }

    fn kernel(&mut self) -> Result<KernelRef, KernelError> {
        let name = self.ident()?;
        if !self.eat('(') {
            if name == "compose" {
                return Err(self.err("compose takes two kernels: compose(outer,inner)"));
            }
            return Ok(KernelRef::named(name));
        }
        if name == "compose" {
            let outer = self.kernel()?;
            if !self.eat(',') {
                return Err(self.err("compose takes two kernels: compose(outer,inner)"));
            }
            let inner = self.kernel()?;
            if !self.eat(')') {
                return Err(self.err("expected `)` after the two kernels of compose"));
            }
            return Ok(KernelRef::compose(outer, inner));
        }
        if self.eat(')') {
            return Err(self.err(format!("empty argument list; write `{name}` without parentheses")));
        }
        let mut args = Vec::new();
        loop {
            self.skip_ws();
            let end = self.rest.find([',', ')']).ok_or_else(|| self.err("missing `)`"))?;
            let text = self.rest[..end].trim();
            if text.is_empty() {
                return Err(self.err("empty argument"));
            }
            let arg = match canonical_number(text) {
                Some(a) => a,
                // einSum's spec is a word of letters and `_`, kept as written.
                None if name == EINSUM && is_spec_token(text) => text.to_string(),
                None if name == EINSUM => {
                    return Err(self
                        .err(format!("argument `{text}` of {name} is not a spec of letters and `_` like `ij_jk_ik`")))
                }
                None => return Err(self.err(format!("argument `{text}` of {name} is not a number"))),
            };
            args.push(arg);
            let sep = self.rest[end..].chars().next();
            self.rest = &self.rest[end + 1..];
            if sep == Some(')') {
                break;
            }
        }
        Ok(KernelRef::Named { name: name.to_string(), args })
    }
}

impl KernelRef {
    /// A catalog kernel without arguments.
    pub fn named(name: &str) -> KernelRef {
        KernelRef::Named { name: name.to_string(), args: vec![] }
    }
    /// `outer ∘ inner`.
    pub fn compose(outer: KernelRef, inner: KernelRef) -> KernelRef {
        KernelRef::Compose(Box::new(outer), Box::new(inner))
    }
    /// Parse `name` or `name(a,b)` (numeric arguments, stored as canonical
    /// text), or `compose(outer,inner)` as [`fmt::Display`] writes it. Spaces
    /// around tokens are allowed. Names are not looked up: [`KernelRef::check`]
    /// does that.
    pub fn parse(s: &str) -> Result<KernelRef, KernelError> {
        let mut p = Parser { src: s, rest: s };
        let k = p.kernel()?;
        p.skip_ws();
        if !p.rest.is_empty() {
            return Err(p.err(format!("unexpected `{}` after the kernel", p.rest)));
        }
        Ok(k)
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
    /// Output shape and blocks per call; checks the kernel, the operand count
    /// and the shapes.
    fn shape_info(&self, inputs: &[&[usize]]) -> Result<(Vec<usize>, usize), KernelError> {
        self.check()?;
        if inputs.len() != self.arity() {
            return Err(KernelError::BadUse(format!(
                "{self} takes {} operand{}, got {}",
                self.arity(),
                if self.arity() == 1 { "" } else { "s" },
                inputs.len()
            )));
        }
        match self {
            KernelRef::Named { name, args } if name == EINSUM => {
                let spec = EinSumSpec::parse(&args[0]).map_err(KernelError::BadUse)?;
                let shape = spec.output_shape(inputs).map_err(|e| KernelError::BadShape(format!("{self}: {e}")))?;
                Ok((shape, 1))
            }
            KernelRef::Named { name, args } => named_shape(&self.to_string(), resolve(name, args)?, inputs),
            KernelRef::Compose(outer, inner) => {
                let (mid, n) = inner.shape_info(inputs)?;
                if n != 1 {
                    return Err(KernelError::BadUse(format!(
                        "{self}: the inner kernel of a composition must give one block per call, {inner} gives {n}"
                    )));
                }
                outer.shape_info(&[&mid])
            }
        }
    }
    /// Shape of each output block for operands of these shapes. For `concat`,
    /// the shape of one piece (the caller multiplies bound `array_dim` by the
    /// piece count).
    pub fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, KernelError> {
        self.shape_info(inputs).map(|(s, _)| s)
    }
    /// Blocks produced per application (a tiling kernel gives several).
    pub fn outputs_per_call(&self, inputs: &[&[usize]]) -> Result<usize, KernelError> {
        self.shape_info(inputs).map(|(_, n)| n)
    }
    /// Floating-point operations of one application (see the module doc for
    /// compositions). Operands the kernel does not accept count 0: validate
    /// with [`KernelRef::output_shape`].
    pub fn flops(&self, inputs: &[&[usize]]) -> u64 {
        if self.shape_info(inputs).is_err() {
            return 0;
        }
        match self {
            KernelRef::Named { name, args } if name == EINSUM => {
                EinSumSpec::parse(&args[0]).map_or(0, |spec| spec.flops(inputs))
            }
            KernelRef::Named { name, args } => resolve(name, args).map_or(0, |k| named_flops(k, inputs)),
            KernelRef::Compose(outer, inner) => {
                if !(outer.is_elementwise() && inner.is_elementwise())
                    && inner.arity() == 2
                    && inner.is_elementwise()
                    && outer.distributes_over(inner)
                {
                    // inner(outer(a), outer(b))
                    let (Ok(oa), Ok(ob)) = (outer.output_shape(&inputs[..1]), outer.output_shape(&inputs[1..])) else {
                        return 0;
                    };
                    outer
                        .flops(&inputs[..1])
                        .saturating_add(outer.flops(&inputs[1..]))
                        .saturating_add(inner.flops(&[&oa, &ob]))
                } else {
                    let Ok(mid) = inner.output_shape(inputs) else { return 0 };
                    inner.flops(inputs).saturating_add(outer.flops(&[&mid]))
                }
            }
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
    /// The s-expression form: `matMul`, `tile(1,2)`, `(compose diag matAdd)`.
    pub fn to_sexpr(&self) -> String {
        match self {
            KernelRef::Named { .. } => self.to_string(),
            KernelRef::Compose(o, i) => format!("(compose {} {})", o.to_sexpr(), i.to_sexpr()),
        }
    }
}

/// The name of the Einstein-summation kernel.
pub const EINSUM: &str = "einSum";

/// An argument word of einSum: letters and `_`.
fn is_spec_token(text: &str) -> bool {
    !text.is_empty() && text.chars().all(|c| c.is_ascii_alphabetic() || c == '_')
}

/// The spec of an `einSum` kernel (see the module doc): each operand's letters
/// and the output's, written `ij_jk_ik`. `parse(s).to_string() == s`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EinSumSpec {
    /// Letters of each operand, one or two operands.
    pub inputs: Vec<Vec<char>>,
    /// Letters of the output: distinct, each in some operand.
    pub output: Vec<char>,
}

impl EinSumSpec {
    /// Parse `ij_jk_ik` (binary) or `ii_i` (unary).
    pub fn parse(text: &str) -> Result<EinSumSpec, String> {
        if let Some(c) = text.chars().find(|c| !(c.is_ascii_alphabetic() || *c == '_')) {
            return Err(format!("the spec may hold only letters and `_`, found `{c}`"));
        }
        let mut parts: Vec<Vec<char>> = text.split('_').map(|p| p.chars().collect()).collect();
        if !(2..=3).contains(&parts.len()) {
            return Err(format!(
                "the spec is one or two operands and the output separated by `_` (like ij_jk_ik or ii_i), \
                 `{text}` has {} part(s)",
                parts.len()
            ));
        }
        let output = parts.pop().expect("two or more parts");
        for (i, c) in output.iter().enumerate() {
            if output[..i].contains(c) {
                return Err(format!("output letter `{c}` appears twice"));
            }
            if !parts.iter().any(|p| p.contains(c)) {
                return Err(format!("output letter `{c}` is in no operand"));
            }
        }
        Ok(EinSumSpec { inputs: parts, output })
    }

    /// The size of every letter, checking operand ranks and that all
    /// occurrences of a letter have one size.
    pub fn sizes(&self, inputs: &[&[usize]]) -> Result<Vec<(char, usize)>, String> {
        if inputs.len() != self.inputs.len() {
            return Err(format!("takes {} operand(s), got {}", self.inputs.len(), inputs.len()));
        }
        let mut sizes: Vec<(char, usize)> = Vec::new();
        for (i, (letters, shape)) in self.inputs.iter().zip(inputs).enumerate() {
            if letters.len() != shape.len() {
                return Err(format!(
                    "operand {i} has shape {} but its letters `{}` name {} axes",
                    show(shape),
                    letters.iter().collect::<String>(),
                    letters.len()
                ));
            }
            for (&c, &n) in letters.iter().zip(shape.iter()) {
                match sizes.iter().find(|(d, _)| *d == c) {
                    Some(&(_, m)) if m != n => {
                        return Err(format!("letter `{c}` has size {m} and {n} (operand shapes {})", {
                            let s: Vec<String> = inputs.iter().map(|s| show(s)).collect();
                            s.join(" and ")
                        }))
                    }
                    Some(_) => {}
                    None => sizes.push((c, n)),
                }
            }
        }
        Ok(sizes)
    }

    /// The output shape for operands of these shapes.
    pub fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        let sizes = self.sizes(inputs)?;
        Ok(self.output.iter().map(|c| sizes.iter().find(|(d, _)| d == c).expect("checked").1).collect())
    }

    /// Whether some letter is summed (absent from the output).
    pub fn sums(&self) -> bool {
        self.inputs.iter().flatten().any(|c| !self.output.contains(c))
    }

    /// Flops (see the module doc); 0 for shapes the spec does not accept.
    pub fn flops(&self, inputs: &[&[usize]]) -> u64 {
        let Ok(sizes) = self.sizes(inputs) else { return 0 };
        let terms = sizes.iter().fold(1u64, |acc, &(_, n)| acc.saturating_mul(n as u64));
        match (self.inputs.len(), self.sums()) {
            (2, true) => terms.saturating_mul(2),
            (2, false) | (_, true) => terms,
            _ => 0,
        }
    }

    /// The kernel `einSum(spec)`.
    pub fn kernel(&self) -> KernelRef {
        KernelRef::Named { name: EINSUM.to_string(), args: vec![self.to_string()] }
    }
}

impl fmt::Display for EinSumSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in &self.inputs {
            write!(f, "{}_", p.iter().collect::<String>())?;
        }
        write!(f, "{}", self.output.iter().collect::<String>())
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

/// JSON: a string (`"matMul"`, `"tile(1,2)"`) or `{"compose": [outer, inner]}`.
impl serde::Serialize for KernelRef {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            KernelRef::Named { .. } => s.serialize_str(&self.to_string()),
            KernelRef::Compose(o, i) => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("compose", &[o.as_ref(), i.as_ref()])?;
                m.end()
            }
        }
    }
}

impl<'de> serde::Deserialize<'de> for KernelRef {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let v = serde_json::Value::deserialize(d)?;
        match v {
            serde_json::Value::String(s) => KernelRef::parse(&s).map_err(D::Error::custom),
            serde_json::Value::Object(m) if m.len() == 1 && m.contains_key("compose") => {
                let parts: Vec<KernelRef> = serde_json::from_value(m["compose"].clone()).map_err(D::Error::custom)?;
                match <[KernelRef; 2]>::try_from(parts) {
                    Ok([o, i]) => Ok(KernelRef::compose(o, i)),
                    Err(_) => Err(D::Error::custom("`compose` takes exactly two kernels: [outer, inner]")),
                }
            }
            other => Err(D::Error::custom(format!(
                "a kernel is a name like \"matMul\" or {{\"compose\": [outer, inner]}}, not {other}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(s: &str) -> KernelRef {
        KernelRef::parse(s).unwrap()
    }

    #[test]
    fn catalog_names_are_unique_and_resolvable() {
        for (i, info) in catalog().iter().enumerate() {
            assert!(catalog()[..i].iter().all(|o| o.name != info.name), "duplicate {}", info.name);
            assert!(lookup(info.name).is_some());
            // Every entry decodes with well-formed arguments.
            let args: Vec<String> = if info.name == EINSUM {
                vec!["ij_jk_ik".to_string()]
            } else {
                info.params.iter().map(|_| "1".to_string()).collect()
            };
            resolve(info.name, &args).unwrap();
            assert!(info.arity == 1 || info.arity == 2);
            assert!(!info.assoc_comm || info.arity == 2, "{}", info.name);
            for g in info.distributes_over {
                let g = lookup(g).unwrap();
                assert_eq!(g.arity, 2, "{} distributes over a non-binary {}", info.name, g.name);
                assert_eq!(info.arity, 1);
            }
        }
        assert!(lookup("nope").is_none());
    }

    #[test]
    fn parse_names_and_arguments() {
        assert_eq!(k("matMul"), KernelRef::named("matMul"));
        assert_eq!(k(" tile( 1 , 2 ) "), KernelRef::Named { name: "tile".into(), args: vec!["1".into(), "2".into()] });
        assert_eq!(k("scale(0.01)"), KernelRef::Named { name: "scale".into(), args: vec!["0.01".into()] });
        assert_eq!(k("scale(1e-3)").to_string(), "scale(0.001)");
        assert_eq!(k("scale(2.0)").to_string(), "scale(2)");
        assert_eq!(k("scale(+3)").to_string(), "scale(3)");
        assert_eq!(k("scale(-0.5)").to_string(), "scale(-0.5)");
        assert_eq!(k("scale(.5)").to_string(), "scale(0.5)");
        // Unknown names parse; check reports them.
        assert_eq!(k("frobnicate"), KernelRef::named("frobnicate"));
        let c = k("compose(diag, matAdd)");
        assert_eq!(c, KernelRef::compose(KernelRef::named("diag"), KernelRef::named("matAdd")));
        assert_eq!(k(&c.to_string()), c);
        let nested = k("compose(relu,compose(scale(0.5),sgdStep(0.1)))");
        assert_eq!(k(&nested.to_string()), nested);
        assert_eq!(nested.to_sexpr(), "(compose relu (compose scale(0.5) sgdStep(0.1)))");
    }

    #[test]
    fn parse_errors_are_bad_use() {
        for bad in [
            "",
            "1abc",
            "tile(1,",
            "tile(1,2",
            "tile(1,,2)",
            "tile()",
            "scale(x)",
            "scale(inf)",
            "scale(NaN)",
            "tile(1,2)x",
            "mat Mul",
            "compose",
            "compose(relu)",
            "compose(relu,matAdd",
            "(compose diag matAdd)",
        ] {
            match KernelRef::parse(bad) {
                Err(KernelError::BadUse(msg)) => assert!(msg.contains("cannot parse kernel"), "{bad}: {msg}"),
                other => panic!("{bad:?} gave {other:?}"),
            }
        }
    }

    #[test]
    fn json_round_trip() {
        for s in ["\"matMul\"", "\"tile(1,2)\"", "{\"compose\":[\"diag\",\"matAdd\"]}"] {
            let kr: KernelRef = serde_json::from_str(s).unwrap();
            assert_eq!(serde_json::to_string(&kr).unwrap(), s);
        }
        assert!(serde_json::from_str::<KernelRef>("\"tile(1,\"").is_err());
    }

    #[test]
    fn check_names_arguments_and_compositions() {
        assert_eq!(k("frobnicate").check(), Err(KernelError::Unknown("frobnicate".into())));
        assert_eq!(KernelError::Unknown("frobnicate".into()).to_string(), "unknown kernel `frobnicate`");
        let e = k("matmul").check().unwrap_err();
        assert_eq!(e, KernelError::Unknown("matmul".into()));
        assert_eq!(e.to_string(), "unknown kernel `matmul`; did you mean `matMul`?");
        assert_eq!(k("matAd").check().unwrap_err().to_string(), "unknown kernel `matAd`; did you mean `matAdd`?");
        assert_eq!(k("ReLU").check().unwrap_err().to_string(), "unknown kernel `ReLU`; did you mean `relu`?");

        k("tile(1,2)").check().unwrap();
        k("scale(0.01)").check().unwrap();
        k("sgdStep(0.1)").check().unwrap();
        k("concat(2,1)").check().unwrap();
        k("offsetIndex(8)").check().unwrap();
        let bad_use = |s: &str| match k(s).check() {
            Err(KernelError::BadUse(m)) => m,
            other => panic!("{s}: {other:?}"),
        };
        assert_eq!(bad_use("tile(1)"), "tile takes 2 arguments (dim, size), got 1");
        assert_eq!(bad_use("scale"), "scale takes 1 argument (c), got 0");
        assert_eq!(bad_use("relu(1)"), "relu takes no arguments, got 1");
        assert!(bad_use("tile(1.5,2)").contains("non-negative integer"));
        assert!(bad_use("tile(-1,2)").contains("non-negative integer"));
        assert!(bad_use("tile(0,0)").contains("at least 1"));
        assert!(bad_use("offsetIndex(0.5)").contains("non-negative integer"));

        k("compose(diag,matAdd)").check().unwrap();
        k("compose(relu,compose(scale(2),matMul))").check().unwrap();
        assert!(bad_use("compose(matAdd,relu)").contains("must be unary"));
        assert!(bad_use("compose(relu,concat(0,0))").contains("cannot be composed"));
        assert_eq!(k("compose(relu,matmul)").check(), Err(KernelError::Unknown("matmul".into())));
    }

    #[test]
    fn arity_and_flags() {
        assert_eq!(k("matMul").arity(), 2);
        assert_eq!(k("relu").arity(), 1);
        assert_eq!(k("compose(relu,matAdd)").arity(), 2);
        assert_eq!(k("compose(relu,sigmoid)").arity(), 1);
        assert_eq!(k("unknown").arity(), 0);
        for s in ["matAdd", "elemMul", "max", "min", "minPair"] {
            assert!(k(s).is_assoc_comm(), "{s}");
        }
        for s in ["matMul", "matSub", "concat(0,0)", "relu", "compose(relu,matAdd)", "sgdStep(1)"] {
            assert!(!k(s).is_assoc_comm(), "{s}");
        }
        assert!(k("compose(relu,matAdd)").is_elementwise());
        assert!(k("compose(scale(2),compose(neg,reluGrad))").is_elementwise());
        assert!(!k("compose(diag,matAdd)").is_elementwise());
        assert!(!k("minPair").is_elementwise());
    }

    #[test]
    fn distributivity_facts() {
        for g in ["matAdd", "matSub", "max", "min", "elemMul"] {
            assert!(k("diag").distributes_over(&k(g)), "diag over {g}");
            assert!(k("transpose").distributes_over(&k(g)), "transpose over {g}");
        }
        assert!(k("scale(0.5)").distributes_over(&k("matAdd")));
        assert!(k("scale(0.5)").distributes_over(&k("matSub")));
        assert!(!k("scale(0.5)").distributes_over(&k("elemMul")));
        assert!(!k("scale(-1)").distributes_over(&k("max")));
        assert!(k("relu").distributes_over(&k("max")));
        assert!(!k("relu").distributes_over(&k("matAdd")));
        assert!(!k("diag").distributes_over(&k("matMul")));
        assert!(k("offsetIndex(4)").distributes_over(&k("minPair")));
        assert!(!k("compose(diag,transpose)").distributes_over(&k("matAdd")));
        assert!(!k("diag").distributes_over(&k("compose(relu,matAdd)")));
    }

    #[test]
    fn shapes() {
        let sh = |s: &str, ins: &[&[usize]]| k(s).output_shape(ins).unwrap();
        assert_eq!(sh("matMul", &[&[4, 3], &[3, 2]]), vec![4, 2]);
        assert_eq!(sh("matMulTN", &[&[3, 4], &[3, 2]]), vec![4, 2]);
        assert_eq!(sh("matMulNT", &[&[4, 3], &[2, 3]]), vec![4, 2]);
        assert_eq!(sh("matMulTT", &[&[3, 4], &[2, 3]]), vec![4, 2]);
        assert_eq!(sh("matAdd", &[&[5], &[5]]), vec![5]);
        assert_eq!(sh("sigmoid", &[&[2, 3, 4]]), vec![2, 3, 4]);
        assert_eq!(sh("diag", &[&[3, 3]]), vec![3]);
        assert_eq!(sh("transpose", &[&[3, 5]]), vec![5, 3]);
        assert_eq!(sh("matVecSub", &[&[3, 5], &[5]]), vec![3, 5]);
        assert_eq!(sh("rowSum", &[&[3, 5]]), vec![3]);
        assert_eq!(sh("colSum", &[&[3, 5]]), vec![5]);
        assert_eq!(sh("minIndex", &[&[3, 5]]), vec![3, 2]);
        assert_eq!(sh("minPair", &[&[3, 2], &[3, 2]]), vec![3, 2]);
        assert_eq!(sh("tile(1,2)", &[&[3, 4]]), vec![3, 2]);
        assert_eq!(k("tile(1,2)").outputs_per_call(&[&[3, 4]]).unwrap(), 2);
        assert_eq!(k("matMul").outputs_per_call(&[&[3, 4], &[4, 1]]).unwrap(), 1);
        assert_eq!(sh("concat(0,1)", &[&[3, 2], &[3, 2]]), vec![3, 2]);
        assert_eq!(sh("compose(diag,matAdd)", &[&[3, 3], &[3, 3]]), vec![3]);
        assert_eq!(sh("compose(transpose,matMul)", &[&[4, 3], &[3, 2]]), vec![2, 4]);
        assert_eq!(sh("compose(tile(0,2),matMul)", &[&[4, 3], &[3, 2]]), vec![2, 2]);
        assert_eq!(k("compose(tile(0,2),matMul)").outputs_per_call(&[&[4, 3], &[3, 2]]).unwrap(), 2);
    }

    #[test]
    fn shape_errors() {
        let err = |s: &str, ins: &[&[usize]]| k(s).output_shape(ins).unwrap_err();
        assert_eq!(
            err("matMul", &[&[4, 3], &[5, 2]]),
            KernelError::BadShape("matMul: inner dimensions differ: [4, 3] × [5, 2]".into())
        );
        assert_eq!(
            err("matAdd", &[&[2, 2], &[3, 2]]),
            KernelError::BadShape("matAdd: operand shapes differ: [2, 2] and [3, 2]".into())
        );
        assert_eq!(
            err("tile(1,3)", &[&[2, 4]]),
            KernelError::BadShape("tile(1,3): array dim 1 has bound 4, not a multiple of 3".into())
        );
        assert!(matches!(err("tile(2,1)", &[&[2, 4]]), KernelError::BadShape(_)));
        assert!(matches!(err("matMulTN", &[&[4, 3], &[3, 2]]), KernelError::BadShape(_)));
        assert!(matches!(err("diag", &[&[3, 4]]), KernelError::BadShape(_)));
        assert!(matches!(err("diag", &[&[3]]), KernelError::BadShape(_)));
        assert!(matches!(err("matVecAdd", &[&[3, 4], &[3]]), KernelError::BadShape(_)));
        assert!(matches!(err("minIndex", &[&[3, 0]]), KernelError::BadShape(_)));
        assert!(matches!(err("minPair", &[&[3, 3], &[3, 3]]), KernelError::BadShape(_)));
        assert!(matches!(err("concat(0,2)", &[&[3, 3], &[3, 3]]), KernelError::BadShape(_)));
        assert_eq!(err("matMul", &[&[4, 3]]), KernelError::BadUse("matMul takes 2 operands, got 1".into()));
        assert_eq!(err("relu", &[&[4], &[4]]), KernelError::BadUse("relu takes 1 operand, got 2".into()));
        assert_eq!(err("nope", &[&[4]]), KernelError::Unknown("nope".into()));
        assert!(matches!(err("compose(relu,tile(0,2))", &[&[4, 4]]), KernelError::BadUse(_)));
        // ...but a tile that gives one piece composes.
        assert_eq!(k("compose(relu,tile(0,4))").output_shape(&[&[4, 4]]).unwrap(), vec![4, 4]);
        assert!(matches!(err("compose(diag,matMul)", &[&[4, 3], &[3, 2]]), KernelError::BadShape(_)));
    }

    #[test]
    fn flops() {
        let f = |s: &str, ins: &[&[usize]]| k(s).flops(ins);
        assert_eq!(f("matMul", &[&[4, 3], &[3, 2]]), 2 * 4 * 3 * 2);
        assert_eq!(f("matMulTN", &[&[3, 4], &[3, 2]]), 2 * 4 * 3 * 2);
        assert_eq!(f("matMulNT", &[&[4, 3], &[2, 3]]), 2 * 4 * 3 * 2);
        assert_eq!(f("matMulTT", &[&[3, 4], &[2, 3]]), 2 * 4 * 3 * 2);
        assert_eq!(f("matAdd", &[&[4, 3], &[4, 3]]), 12);
        assert_eq!(f("sgdStep(0.1)", &[&[4, 3], &[4, 3]]), 24);
        assert_eq!(f("sigmoid", &[&[4, 3]]), 48);
        assert_eq!(f("relu", &[&[4, 3]]), 12);
        assert_eq!(f("diag", &[&[4, 4]]), 0);
        assert_eq!(f("transpose", &[&[4, 3]]), 0);
        assert_eq!(f("matVecAdd", &[&[4, 3], &[3]]), 12);
        assert_eq!(f("rowSum", &[&[4, 3]]), 8);
        assert_eq!(f("colSum", &[&[4, 3]]), 9);
        assert_eq!(f("rowSum", &[&[4, 0]]), 0);
        assert_eq!(f("minIndex", &[&[4, 3]]), 12);
        assert_eq!(f("minPair", &[&[4, 2], &[4, 2]]), 4);
        assert_eq!(f("offsetIndex(3)", &[&[4, 2]]), 4);
        assert_eq!(f("tile(0,2)", &[&[4, 2]]), 0);
        assert_eq!(f("concat(0,0)", &[&[4, 2], &[4, 2]]), 0);
        // Distributive fusion: only the diagonal is added.
        assert_eq!(f("compose(diag,matAdd)", &[&[5, 5], &[5, 5]]), 5);
        // Elementwise fusion: one pass.
        assert_eq!(f("compose(relu,matAdd)", &[&[5, 5], &[5, 5]]), 50);
        assert_eq!(f("compose(scale(2),matAdd)", &[&[5, 5], &[5, 5]]), 50);
        // Sequential.
        assert_eq!(f("compose(relu,matMul)", &[&[4, 3], &[3, 2]]), 48 + 8);
        assert_eq!(f("compose(offsetIndex(2),minPair)", &[&[4, 2], &[4, 2]]), 8);
        assert_eq!(f("compose(offsetIndex(2),minIndex)", &[&[4, 3]]), 16);
        // Invalid operands count nothing.
        assert_eq!(f("matMul", &[&[4, 3], &[4, 3]]), 0);
        assert_eq!(f("nope", &[&[4, 3]]), 0);
        // No overflow panic.
        assert_eq!(f("matMul", &[&[usize::MAX, 2], &[2, usize::MAX]]), u64::MAX);
    }

    #[test]
    fn einsum_kernel() {
        // Parsing keeps the spec as written; display re-parses to the same kernel.
        for text in
            ["einSum(ij_jk_ik)", "einSum(ii_i)", "einSum(ii_)", "einSum(i_i_)", "einSum(_i_i)", "einSum(bij_bjk_bik)"]
        {
            let kr = k(text);
            assert_eq!(kr.to_string(), text);
            assert_eq!(k(&kr.to_string()), kr);
            kr.check().unwrap();
            let json = serde_json::to_string(&kr).unwrap();
            assert_eq!(serde_json::from_str::<KernelRef>(&json).unwrap(), kr);
        }
        assert_eq!(k(" einSum( ij_jk_ik ) ").to_string(), "einSum(ij_jk_ik)");
        assert_eq!(k("compose(einSum(ij_ji),einSum(ij_jk_ik))").to_string(), "compose(einSum(ij_ji),einSum(ij_jk_ik))");
        k("compose(einSum(ij_ji),einSum(ij_jk_ik))").check().unwrap();
        // Words are specs only for einSum.
        assert!(KernelRef::parse("scale(ij)").is_err());
        assert!(KernelRef::parse("einSum(i-j)").unwrap_err().to_string().contains("spec of letters"));
        // Arity from the spec.
        assert_eq!(k("einSum(ij_jk_ik)").arity(), 2);
        assert_eq!(k("einSum(ij_ji)").arity(), 1);
        assert!(!k("einSum(ij_jk_ik)").is_assoc_comm());
        // Check: bad specs.
        let bad = |s: &str| match k(s).check() {
            Err(KernelError::BadUse(m)) => m,
            other => panic!("{s}: {other:?}"),
        };
        assert!(bad("einSum(ij)").contains("part"), "{}", bad("einSum(ij)"));
        assert!(bad("einSum(i_j_k_l)").contains("4 part"));
        assert!(bad("einSum(ij_jk_ii)").contains("appears twice"));
        assert!(bad("einSum(ij_jk_iz)").contains("`z` is in no operand"));
        assert_eq!(bad("einSum"), "einSum takes 1 argument (spec), got 0");
        // Shapes.
        let sh = |s: &str, ins: &[&[usize]]| k(s).output_shape(ins);
        assert_eq!(sh("einSum(ij_jk_ik)", &[&[4, 3], &[3, 2]]).unwrap(), vec![4, 2]);
        assert_eq!(sh("einSum(ij_jk_ki)", &[&[4, 3], &[3, 2]]).unwrap(), vec![2, 4]);
        assert_eq!(sh("einSum(bij_bjk_bik)", &[&[5, 4, 3], &[5, 3, 2]]).unwrap(), vec![5, 4, 2]);
        assert_eq!(sh("einSum(ii_i)", &[&[3, 3]]).unwrap(), vec![3]);
        assert_eq!(sh("einSum(ii_)", &[&[3, 3]]).unwrap(), Vec::<usize>::new());
        assert_eq!(sh("einSum(i_j_ij)", &[&[3], &[2]]).unwrap(), vec![3, 2]);
        assert!(
            matches!(sh("einSum(ij_jk_ik)", &[&[4, 3], &[5, 2]]), Err(KernelError::BadShape(m)) if m.contains("`j` has size 3 and 5"))
        );
        assert!(matches!(sh("einSum(ii_i)", &[&[3, 4]]), Err(KernelError::BadShape(_))));
        assert!(matches!(sh("einSum(ij_jk_ik)", &[&[4, 3, 1], &[3, 2]]), Err(KernelError::BadShape(_))));
        assert!(matches!(sh("einSum(ij_jk_ik)", &[&[4, 3]]), Err(KernelError::BadUse(_))));
        // Flops.
        let f = |s: &str, ins: &[&[usize]]| k(s).flops(ins);
        assert_eq!(f("einSum(ij_jk_ik)", &[&[4, 3], &[3, 2]]), 2 * 4 * 3 * 2);
        assert_eq!(f("einSum(ij_jk_ik)", &[&[4, 3], &[3, 2]]), f("matMul", &[&[4, 3], &[3, 2]]));
        assert_eq!(f("einSum(bij_bjk_bik)", &[&[5, 4, 3], &[5, 3, 2]]), 2 * 5 * 4 * 3 * 2);
        assert_eq!(f("einSum(i_j_ij)", &[&[3], &[2]]), 6);
        assert_eq!(f("einSum(ij_ji)", &[&[4, 3]]), 0);
        assert_eq!(f("einSum(ii_i)", &[&[4, 4]]), 0);
        assert_eq!(f("einSum(ij_i)", &[&[4, 3]]), 12);
        assert_eq!(f("einSum(ij_jk_ik)", &[&[4, 3], &[4, 3]]), 0);
        // The spec type.
        let spec = EinSumSpec::parse("ij_jk_ik").unwrap();
        assert_eq!(spec.inputs, vec![vec!['i', 'j'], vec!['j', 'k']]);
        assert_eq!(spec.output, vec!['i', 'k']);
        assert_eq!(spec.kernel(), k("einSum(ij_jk_ik)"));
        assert_eq!(EinSumSpec::parse("_i_i").unwrap().to_string(), "_i_i");
    }
}
