//! The catalog: one entry per named kernel (arity, parameters, algebraic
//! facts, doc), the lookup with a close-name suggestion, and the decoding of
//! a name and its arguments into a [`Kernel`] that the shape rules match on.

use super::{is_spec_kernel, EinSumSpec, KernelError, EINSUM, EIN_MAX, EIN_MIN};

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
    /// Binary kernels only: aggregation kernels `s` over which this kernel is
    /// linear in *each* operand, `k(s(a, a'), b) == s(k(a, b), k(a', b))` and
    /// the same on the right (bilinear). An aggregation by `s` may then be
    /// pushed below or pulled above a join with this kernel (eager and lazy
    /// aggregation).
    pub bilinear_over: &'static [&'static str],
    /// A block matrix product `op(A)·op(B)`: whether each operand is read
    /// transposed (`matMulTN` is `(true, false)`). Products of products
    /// reassociate (`(A·B)·C = A·(B·C)`) when they are also bilinear over the
    /// aggregation that sums them.
    pub matrix_product: Option<(bool, bool)>,
}

impl KernelInfo {
    /// An entry that states no algebraic fact: no rule that needs one
    /// applies to it until the entry opts in with the methods below.
    const fn new(name: &'static str, arity: usize, params: &'static [&'static str], doc: &'static str) -> Self {
        KernelInfo {
            name,
            arity,
            params,
            doc,
            assoc_comm: false,
            elementwise: false,
            distributes_over: &[],
            bilinear_over: &[],
            matrix_product: None,
        }
    }

    /// States that the kernel is associative and commutative.
    const fn assoc_comm(self) -> Self {
        KernelInfo { assoc_comm: true, ..self }
    }

    /// States that the kernel works element by element.
    const fn elementwise(self) -> Self {
        KernelInfo { elementwise: true, ..self }
    }

    /// States the binary kernels this one distributes over.
    const fn distributes_over(self, kernels: &'static [&'static str]) -> Self {
        KernelInfo { distributes_over: kernels, ..self }
    }

    /// States the aggregations this binary kernel is linear over in each operand.
    const fn bilinear_over(self, aggregations: &'static [&'static str]) -> Self {
        KernelInfo { bilinear_over: aggregations, ..self }
    }

    /// States that the kernel is a block matrix product, and which operands it reads transposed.
    const fn matrix_product(self, transpose_a: bool, transpose_b: bool) -> Self {
        KernelInfo { matrix_product: Some((transpose_a, transpose_b)), ..self }
    }
}

/// The binary elementwise kernels: selecting elements (`diag`, `transpose`)
/// distributes over all of them.
const ELEMENTWISE_BINARY: &[&str] = &["matAdd", "matSub", "elemMul", "max", "min", "reluGrad", "sgdStep"];
/// Products are linear in each operand over a sum.
const SUM: &[&str] = &["matAdd"];
/// Linear maps distribute over addition and subtraction.
const LINEAR: &[&str] = &["matAdd", "matSub"];

/// Parameters whose values must be non-negative integers; every other
/// parameter is a finite real number.
fn is_integer_param(param: &str) -> bool {
    matches!(param, "dim" | "size" | "key_dim" | "array_dim" | "o" | "axis" | "n")
}

/// A binary kernel with numpy broadcasting, its doc line from what it
/// computes: no algebraic fact (its operands' shapes may differ, so it is
/// not `elementwise` either).
macro_rules! broadcasting {
    ($name:expr, $what:expr $(,)?) => {
        KernelInfo::new(
            $name,
            2,
            &[],
            concat!(
                $what,
                ", with numpy broadcasting: shapes aligned at the end, each axis pair equal or one of them 1 \
                 (a shape [] broadcasts against anything); the output has the larger rank. Flops: output \
                 element count."
            ),
        )
    };
}

static CATALOG: &[KernelInfo] = &[
    KernelInfo::new("matMul", 2, &[], "Matrix product A·B: [m,k]×[k,n]→[m,n]. Flops 2mkn.")
        .bilinear_over(SUM)
        .matrix_product(false, false),
    KernelInfo::new("matMulTN", 2, &[], "Aᵀ·B: [k,m]×[k,n]→[m,n]. Flops 2mkn.")
        .bilinear_over(SUM)
        .matrix_product(true, false),
    KernelInfo::new("matMulNT", 2, &[], "A·Bᵀ: [m,k]×[n,k]→[m,n]. Flops 2mkn.")
        .bilinear_over(SUM)
        .matrix_product(false, true),
    KernelInfo::new("matMulTT", 2, &[], "Aᵀ·Bᵀ: [k,m]×[n,k]→[m,n]. Flops 2mkn.")
        .bilinear_over(SUM)
        .matrix_product(true, true),
    KernelInfo::new(
        "matAdd",
        2,
        &[],
        "Elementwise a+b of two arrays of the same shape (any rank, vectors too). Flops: element count.",
    )
    .assoc_comm()
    .elementwise(),
    KernelInfo::new("matSub", 2, &[], "Elementwise a−b of two arrays of the same shape. Flops: element count.")
        .elementwise(),
    KernelInfo::new(
        "elemMul",
        2,
        &[],
        "Elementwise product a⊙b of two arrays of the same shape. Flops: element count.",
    )
    .assoc_comm()
    .elementwise()
    .bilinear_over(SUM),
    KernelInfo::new(
        "max",
        2,
        &[],
        "Elementwise maximum of two arrays of the same shape (a NaN loses to a number). Flops: element count.",
    )
    .assoc_comm()
    .elementwise(),
    KernelInfo::new(
        "min",
        2,
        &[],
        "Elementwise minimum of two arrays of the same shape (a NaN loses to a number). Flops: element count.",
    )
    .assoc_comm()
    .elementwise(),
    KernelInfo::new("reluGrad", 2, &[], "(grad, z) → grad ⊙ (z > 0), same shapes. Flops: element count.").elementwise(),
    KernelInfo::new("sgdStep", 2, &["lr"], "(w, g) → w − lr·g, same shapes. Flops: 2 × element count.").elementwise(),
    KernelInfo::new("relu", 1, &[], "max(x, 0) elementwise, any shape. Flops: element count.")
        .elementwise()
        .distributes_over(&["max", "min"]),
    KernelInfo::new("sigmoid", 1, &[], "1/(1+e^−x) elementwise, any shape. Flops: 4 × element count.").elementwise(),
    KernelInfo::new("scale", 1, &["c"], "c·x elementwise, any shape. Flops: element count.")
        .elementwise()
        .distributes_over(LINEAR),
    KernelInfo::new("neg", 1, &[], "−x elementwise, any shape. Flops: element count.")
        .elementwise()
        .distributes_over(LINEAR),
    KernelInfo::new("diag", 1, &[], "The diagonal of a square matrix: [n,n]→[n]. Flops 0.")
        .distributes_over(ELEMENTWISE_BINARY),
    KernelInfo::new("transpose", 1, &[], "Matrix transpose: [m,n]→[n,m]. Flops 0.")
        .distributes_over(ELEMENTWISE_BINARY),
    KernelInfo::new("matVecAdd", 2, &[], "Adds the vector to every row (bias add): [m,n]×[n]→[m,n]. Flops mn."),
    KernelInfo::new("matVecSub", 2, &[], "Subtracts the vector from every row: [m,n]×[n]→[m,n]. Flops mn."),
    KernelInfo::new("rowSum", 1, &[], "Sum of each row: [m,n]→[m]. Flops m(n−1) (additions).").distributes_over(LINEAR),
    KernelInfo::new("colSum", 1, &[], "Sum of each column: [m,n]→[n]. Flops (m−1)n (additions).")
        .distributes_over(LINEAR),
    KernelInfo::new(
        "minIndex",
        1,
        &[],
        "Per row the minimum value and its column index (local to the block, as f64; ties: smaller index): \
              [m,n]→[m,2], n ≥ 1; a vector [n] is one row: [n]→[1,2]. Flops mn.",
    ),
    KernelInfo::new(
        "minPair",
        2,
        &[],
        "Per row keeps the (value, index) pair with the smaller value (ties: smaller index): \
              [m,2]×[m,2]→[m,2]. Flops m.",
    )
    .assoc_comm(),
    KernelInfo::new(
        "offsetIndex",
        1,
        &["o"],
        "Adds the integer o to column 1 (the index of a minIndex result): [m,2]→[m,2]. Flops m.",
    )
    .distributes_over(&["minPair"]),
    KernelInfo::new(
        "tile",
        1,
        &["dim", "size"],
        "Cuts the block along array axis dim into pieces of bound size (bound[dim] must be a multiple \
              of size); gives bound[dim]/size blocks, in order. Flops 0.",
    ),
    KernelInfo::new(
        "concat",
        2,
        &["key_dim", "array_dim"],
        "Undoes tile inside an aggregation: the group's pieces, ordered by key component key_dim, are \
              joined along array axis array_dim; missing pieces are zero-filled. Output shape given for one \
              piece: the caller multiplies bound array_dim by the piece count. Flops 0.",
    ),
    KernelInfo::new(
        EINSUM,
        2,
        &["spec"],
        "Einstein summation inside a block (paper 004's einSumOp). The spec lists the operands' letters, then \
              the output's, separated by `_`: einSum(ij_jk_ik) is numpy's einsum('ij,jk->ik') = matMul, \
              einSum(bij_bjk_bik) a batched product. With one operand it is unary: einSum(ii_i) diagonal, \
              einSum(ij_ji) transpose, einSum(ij_i) row sums, einSum(ii_) trace (an empty part is a scalar, shape []). \
              A letter repeated in an operand takes a diagonal; letters not in the output are summed; all \
              occurrences of a letter must have one size. Flops: T = ∏ sizes of the distinct letters; binary 2T \
              when it sums a letter, else T; unary T when it sums a letter, else 0.",
    )
    .bilinear_over(SUM),
    // Nonlinear and normalising kernels: softmax, layer normalization,
    // logistic loss, attention. Across blocks, a row-wise max is
    // `aggregate(max)` over `rowMax`, a row-wise sum `aggregate(matAdd)` over
    // `rowSum`, and the broadcast back a join with a `matColVec…` kernel.
    nonlinear("exp", 1, &[], "e^x elementwise, any shape. Flops: element count.", true, &[]),
    nonlinear(
        "log",
        1,
        &[],
        "Natural logarithm elementwise, any shape (log 0 = −∞, negative → NaN). Flops: element count.",
        true,
        &[],
    ),
    nonlinear("sqrt", 1, &[], "Square root elementwise, any shape (negative → NaN). Flops: element count.", true, &[]),
    nonlinear(
        "shift",
        1,
        &["c"],
        "x + c elementwise, any shape (e.g. the ε of a variance). Flops: element count.",
        true,
        &[],
    ),
    nonlinear(
        "elemDiv",
        2,
        &[],
        "Elementwise quotient a/b of two arrays of the same shape (IEEE: x/0 = ±∞). Flops: element count.",
        true,
        &[],
    ),
    nonlinear(
        "rowMax",
        1,
        &[],
        "Maximum of each row: [m,n]→[m] (a NaN loses to a number, as max; an empty row gives −∞). Flops m(n−1).",
        false,
        &["max"],
    ),
    nonlinear(
        "colMax",
        1,
        &[],
        "Maximum of each column: [m,n]→[n] (a NaN loses to a number, as max; an empty column gives −∞). Flops (m−1)n.",
        false,
        &["max"],
    ),
    nonlinear(
        "matVecMul",
        2,
        &[],
        "Multiplies every row by the vector elementwise: [m,n]×[n]→[m,n]. Flops mn.",
        false,
        &[],
    ),
    nonlinear(
        "matVecDiv",
        2,
        &[],
        "Divides every row by the vector elementwise: [m,n]×[n]→[m,n]. Flops mn.",
        false,
        &[],
    ),
    nonlinear(
        "matColVecAdd",
        2,
        &[],
        "Adds v[i] to row i (a column vector broadcast along the rows): [m,n]×[m]→[m,n]. Flops mn.",
        false,
        &[],
    ),
    nonlinear("matColVecSub", 2, &[], "Subtracts v[i] from row i: [m,n]×[m]→[m,n]. Flops mn.", false, &[]),
    nonlinear("matColVecMul", 2, &[], "Multiplies row i by v[i]: [m,n]×[m]→[m,n]. Flops mn.", false, &[]),
    nonlinear("matColVecDiv", 2, &[], "Divides row i by v[i]: [m,n]×[m]→[m,n]. Flops mn.", false, &[]),
    // The numpy / JAX / ONNX block. No algebraic fact is stated but
    // `elementwise` on the unary maps: no rule reorders these kernels.
    broadcasting!("add", "a + b"),
    broadcasting!("sub", "a − b"),
    broadcasting!("mul", "a · b"),
    broadcasting!("div", "a / b (IEEE: x/0 = ±∞, 0/0 = NaN)"),
    broadcasting!("pow", "a to the power b (powf; a negative base with a non-integer exponent gives NaN)"),
    broadcasting!("maximum", "the larger of a and b, NaN-propagating like numpy (a NaN operand gives NaN)"),
    broadcasting!("minimum", "the smaller of a and b, NaN-propagating like numpy (a NaN operand gives NaN)"),
    broadcasting!("lt", "1 where a < b, else 0 (IEEE: a NaN compares false)"),
    broadcasting!("le", "1 where a ≤ b, else 0 (IEEE: a NaN compares false)"),
    broadcasting!("gt", "1 where a > b, else 0 (IEEE: a NaN compares false)"),
    broadcasting!("ge", "1 where a ≥ b, else 0 (IEEE: a NaN compares false)"),
    broadcasting!("eq", "1 where a = b, else 0 (IEEE: a NaN compares false)"),
    broadcasting!("ne", "1 where a ≠ b, else 0 (IEEE: a NaN is unequal to everything)"),
    broadcasting!(
        "selectIf",
        "(c, x) → x where c ≠ 0 (a NaN c counts as true), else 0 (numpy's where(c, x, y) is \
              add(selectIf(c, x), selectElse(c, y)))",
    ),
    broadcasting!("selectElse", "(c, y) → y where c = 0, else 0 (the other half of numpy's where)"),
    KernelInfo::new(
        "concatAxis",
        2,
        &["axis"],
        "Joins two arrays of one rank along array axis `axis`: [.., a, ..]×[.., b, ..]→[.., a+b, ..] (every \
              other axis equal). Flops 0.",
    ),
    math("abs", "|x| elementwise, any shape. Flops: element count."),
    math("tanh", "Hyperbolic tangent elementwise, any shape. Flops: 4 × element count."),
    math("erf", "The error function elementwise (libm's erf), any shape. Flops: 4 × element count."),
    math("log1p", "ln(1 + x) elementwise, accurate near 0, any shape. Flops: element count."),
    math("expm1", "e^x − 1 elementwise, accurate near 0, any shape. Flops: element count."),
    math("recip", "1/x elementwise, any shape (1/0 = ∞). Flops: element count."),
    math("rsqrt", "1/√x elementwise, any shape (negative → NaN). Flops: element count."),
    math("sign", "numpy's sign elementwise: −1, 0 (for ±0), +1, NaN for NaN; any shape. Flops: element count."),
    math("square", "x·x elementwise, any shape. Flops: element count."),
    math("floor", "The largest integer ≤ x, elementwise, any shape. Flops: element count."),
    math("ceil", "The smallest integer ≥ x, elementwise, any shape. Flops: element count."),
    math("logicalNot", "1 where x = 0, else 0 (a NaN is true, so gives 0), any shape. Flops: element count."),
    KernelInfo::new(
        "powc",
        1,
        &["c"],
        "x to the constant power c elementwise, any shape: repeated multiplication (by squaring) when c is an \
              integer with |c| ≤ 64, else powf. Flops: element count.",
    )
    .elementwise(),
    KernelInfo::new(
        "expandDims",
        1,
        &["axis"],
        "Inserts an axis of size 1 at position axis (0 ≤ axis ≤ rank): [2,3] with axis 1 → [2,1,3]. Flops 0.",
    ),
    KernelInfo::new(
        "squeezeAxis",
        1,
        &["axis"],
        "Removes array axis `axis`, which must have size 1: [2,1,3] with axis 1 → [2,3]. Flops 0.",
    ),
    KernelInfo::new(
        "mergeAxes",
        1,
        &["axis"],
        "Merges axes axis and axis+1, row-major: [.., a, b, ..]→[.., a·b, ..]. Flops 0.",
    ),
    KernelInfo::new(
        "splitAxis",
        1,
        &["axis", "size"],
        "Splits array axis `axis` row-major: [.., n, ..]→[.., n/size, size, ..] (size ≥ 1 divides n). Flops 0.",
    ),
    KernelInfo::new(
        "repeatAxis",
        1,
        &["axis", "n"],
        "Copies along a size-1 axis: [.., 1, ..]→[.., n, ..] (numpy's broadcast_to on that axis). Flops 0.",
    ),
    KernelInfo::new(
        EIN_MAX,
        1,
        &["spec"],
        "The maximum over the letters a unary einSum-style spec leaves out of the output: einMax(ijk_ik) is the \
              max over j, einMax(ij_ji) a transpose, einMax(ii_i) a diagonal. A NaN loses to a number (as max and \
              rowMax: a NaN alone, like an empty reduction, gives −∞). Flops: ∏ letter sizes when it reduces a \
              letter, else 0.",
    ),
    KernelInfo::new(
        EIN_MIN,
        1,
        &["spec"],
        "The minimum over the letters a unary einSum-style spec leaves out of the output: einMin(ijk_ik) is the \
              min over j. A NaN loses to a number (a NaN alone, like an empty reduction, gives +∞). Flops: ∏ \
              letter sizes when it reduces a letter, else 0.",
    ),
];

/// A unary map on every element, stating only that it is elementwise.
const fn math(name: &'static str, doc: &'static str) -> KernelInfo {
    KernelInfo::new(name, 1, &[], doc).elementwise()
}

/// A catalog entry of the nonlinear block: never associative-commutative
/// (`max` is the aggregation for maxima); `distributes_over` only where
/// exact — `rowMax`/`colMax` over `max` (a maximum of maxima), while `exp`,
/// `log` and `sqrt` distribute over nothing (`exp(a+b) ≠ exp a + exp b`).
const fn nonlinear(
    name: &'static str,
    arity: usize,
    params: &'static [&'static str],
    doc: &'static str,
    elementwise: bool,
    distributes_over: &'static [&'static str],
) -> KernelInfo {
    // No linearity facts: no reordering rule applies to these kernels.
    let entry = KernelInfo::new(name, arity, params, doc).distributes_over(distributes_over);
    if elementwise {
        entry.elementwise()
    } else {
        entry
    }
}

/// Every catalog entry.
pub fn catalog() -> &'static [KernelInfo] {
    CATALOG
}

/// A catalog entry by name.
pub fn lookup(name: &str) -> Option<&'static KernelInfo> {
    CATALOG.iter().find(|k| k.name == name)
}

/// The message of [`KernelError::Unknown`], with a suggestion when one exists.
pub(super) fn unknown_message(name: &str) -> String {
    let shown = crate::error::shown(name);
    match suggestion(name) {
        Some(s) => format!("unknown kernel `{shown}`; did you mean `{s}`?"),
        None => format!("unknown kernel `{shown}`"),
    }
}

/// A catalog name close to `name`: equal ignoring case, else the nearest
/// within two edits (ignoring case).
pub(super) fn suggestion(name: &str) -> Option<&'static str> {
    // No catalog name is near a long one (and the distance would cost its length).
    if name.len() > 64 {
        return None;
    }
    let lower = name.to_lowercase();
    if let Some(k) = CATALOG.iter().find(|k| k.name.to_lowercase() == lower) {
        return Some(k.name);
    }
    CATALOG
        .iter()
        .map(|k| (edit_distance(&lower, &k.name.to_lowercase()), k.name))
        // Within two edits, and not every character of either name replaced
        // (`nope` is not a misspelt `ne`).
        .filter(|&(d, n)| d <= 2 && d < lower.chars().count() && d < n.chars().count())
        .min_by_key(|&(d, _)| d)
        .map(|(_, n)| n)
}

/// Levenshtein distance over chars.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
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
pub(super) enum Kernel {
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
    /// `[m,n]×[m]→[m,n]`: a column vector broadcast along the rows.
    MatColVec,
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
    /// `einMax(spec)`, `einMin(spec)`: a unary spec; shapes and flops come
    /// from it, as for a unary `einSum`.
    EinReduce,
    /// A binary kernel with numpy broadcasting (flops: output elements).
    Broadcast,
    /// `concatAxis(axis)`.
    ConcatAxis {
        axis: usize,
    },
    /// `expandDims(axis)`.
    ExpandDims {
        axis: usize,
    },
    /// `squeezeAxis(axis)`.
    SqueezeAxis {
        axis: usize,
    },
    /// `mergeAxes(axis)`: axes `axis` and `axis + 1`.
    MergeAxes {
        axis: usize,
    },
    /// `splitAxis(axis, size)`.
    SplitAxis {
        axis: usize,
        size: usize,
    },
    /// `repeatAxis(axis, n)`.
    RepeatAxis {
        axis: usize,
        n: usize,
    },
}

/// Decodes a name and its arguments: the entry must exist and the arguments
/// must match its parameters in number and kind.
pub(super) fn resolve(name: &str, args: &[String]) -> Result<Kernel, KernelError> {
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
    if is_spec_kernel(name) {
        let spec = EinSumSpec::parse(&args[0]).map_err(|e| KernelError::BadUse(format!("{name}({}): {e}", args[0])))?;
        if name == EINSUM {
            return Ok(Kernel::EinSum);
        }
        if spec.inputs.len() != 1 {
            return Err(KernelError::BadUse(format!(
                "{name}({}): {name} reduces one operand, the spec names {} (write it like ijk_ik)",
                args[0],
                spec.inputs.len()
            )));
        }
        return Ok(Kernel::EinReduce);
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
        "exp" | "log" | "sqrt" | "shift" => Kernel::Elementwise1(1),
        "elemDiv" => Kernel::Elementwise2(1),
        // Same shapes and flops as the sums (comparisons for additions).
        "rowMax" => Kernel::RowSum,
        "colMax" => Kernel::ColSum,
        "matVecMul" | "matVecDiv" => Kernel::MatVec,
        "matColVecAdd" | "matColVecSub" | "matColVecMul" | "matColVecDiv" => Kernel::MatColVec,
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
        "add" | "sub" | "mul" | "div" | "pow" | "maximum" | "minimum" | "lt" | "le" | "gt" | "ge" | "eq" | "ne"
        | "selectIf" | "selectElse" => Kernel::Broadcast,
        "concatAxis" => Kernel::ConcatAxis { axis: ints[0] },
        "abs" | "log1p" | "expm1" | "recip" | "rsqrt" | "sign" | "square" | "floor" | "ceil" | "logicalNot"
        | "powc" => Kernel::Elementwise1(1),
        "tanh" | "erf" => Kernel::Elementwise1(4),
        "expandDims" => Kernel::ExpandDims { axis: ints[0] },
        "squeezeAxis" => Kernel::SqueezeAxis { axis: ints[0] },
        "mergeAxes" => Kernel::MergeAxes { axis: ints[0] },
        "splitAxis" => {
            if ints[1] == 0 {
                return Err(KernelError::BadUse(format!(
                    "splitAxis({},{}): size must be at least 1",
                    args[0], args[1]
                )));
            }
            Kernel::SplitAxis { axis: ints[0], size: ints[1] }
        }
        "repeatAxis" => Kernel::RepeatAxis { axis: ints[0], n: ints[1] },
        other => unreachable!("catalog entry `{other}` has no shape rule"),
    })
}

/// A finite number from argument text.
pub(super) fn number(text: &str) -> Option<f64> {
    text.trim().parse::<f64>().ok().filter(|v| v.is_finite())
}

/// Canonical text of a numeric argument: integers as `1`, other numbers as the
/// shortest `f64` display.
pub(super) fn canonical_number(text: &str) -> Option<String> {
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
