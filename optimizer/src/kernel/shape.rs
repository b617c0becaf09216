//! Shape rules and flop counts: what each kernel gives for operands of given
//! shapes (and how many blocks per call), checking operand count and shapes;
//! compositions chain the rules of their parts.

use super::catalog::{resolve, Kernel};
use super::{is_spec_kernel, EinSumSpec, KernelError, KernelRef};

/// Element count, saturating.
pub(super) fn count(shape: &[usize]) -> u64 {
    shape.iter().fold(1u64, |acc, &d| acc.saturating_mul(d as u64))
}

/// `[4, 3]`.
pub(super) fn show(shape: &[usize]) -> String {
    format!("{shape:?}")
}

/// The shape numpy broadcasts two shapes to: aligned at the trailing end,
/// each pair of axes equal or one of them 1 (a missing axis counts as 1); the
/// result has the larger rank. `None` when they do not broadcast.
pub fn broadcast_shape(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for (i, o) in out.iter_mut().enumerate() {
        // Axis `i` of the output is axis `i - (rank - len)` of an operand.
        let at = |s: &[usize]| (i + s.len()).checked_sub(rank).map_or(1, |j| s[j]);
        let (x, y) = (at(a), at(b));
        *o = match (x, y) {
            _ if x == y => x,
            (1, _) => y,
            (_, 1) => x,
            _ => return None,
        };
    }
    Some(out)
}

/// Why two shapes do not broadcast: the first pair of axes (from the end)
/// that is neither equal nor has a 1.
fn broadcast_conflict(a: &[usize], b: &[usize]) -> String {
    let pairs = a.iter().rev().zip(b.iter().rev()).enumerate();
    match pairs.clone().find(|(_, (&x, &y))| x != y && x != 1 && y != 1) {
        Some((from_end, (x, y))) => format!(
            "operand shapes {} and {} do not broadcast: axis {} of the first and axis {} of the second (aligned at \
             the end) have sizes {x} and {y}, neither 1",
            show(a),
            show(b),
            a.len() - 1 - from_end,
            b.len() - 1 - from_end
        ),
        None => format!("operand shapes {} and {} do not broadcast", show(a), show(b)),
    }
}

/// The axis argument `axis` of a kernel on an operand of shape `a`, when it
/// must name an axis (`axis < rank`).
fn axis_in(axis: usize, a: &[usize]) -> Result<(), String> {
    if axis < a.len() {
        return Ok(());
    }
    Err(if a.is_empty() {
        format!("axis {axis} is out of range: the operand has shape [] (rank 0, no axis)")
    } else {
        format!("axis {axis} is out of range for an operand of shape {} (axes 0 to {})", show(a), a.len() - 1)
    })
}

/// Shape of the output blocks and their number, for a decoded kernel;
/// `label` (the kernel as written, e.g. `tile(1,3)`) starts error messages;
/// it is only formatted for an error.
fn named_shape(
    label: &dyn std::fmt::Display,
    k: Kernel,
    inputs: &[&[usize]],
) -> Result<(Vec<usize>, usize), KernelError> {
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
        Kernel::MatVec | Kernel::MatColVec => {
            let (a, b) = (inputs[0], inputs[1]);
            if a.len() != 2 || b.len() != 1 {
                return bad(format!("operands must be a matrix and a vector, got {} and {}", show(a), show(b)));
            }
            // A row vector runs along a row, a column vector along a column.
            let (axis, what) = if k == Kernel::MatVec { (1, "row length") } else { (0, "row count") };
            if a[axis] != b[0] {
                return bad(format!("vector length differs from the {what}: {} and {}", show(a), show(b)));
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
        Kernel::Broadcast => {
            let (a, b) = (inputs[0], inputs[1]);
            match broadcast_shape(a, b) {
                Some(out) => Ok((out, 1)),
                None => bad(broadcast_conflict(a, b)),
            }
        }
        Kernel::ConcatAxis { axis } => {
            let (a, b) = (inputs[0], inputs[1]);
            if a.len() != b.len() {
                return bad(format!("operand ranks differ: {} and {}", show(a), show(b)));
            }
            if axis >= a.len() {
                return bad(format!(
                    "axis {axis} is out of range for operands of rank {} ({} and {})",
                    a.len(),
                    show(a),
                    show(b)
                ));
            }
            if let Some(i) = (0..a.len()).find(|&i| i != axis && a[i] != b[i]) {
                return bad(format!(
                    "operand shapes {} and {} differ on axis {i}, not only on the joined axis {axis}",
                    show(a),
                    show(b)
                ));
            }
            let mut out = a.to_vec();
            out[axis] = a[axis].checked_add(b[axis]).ok_or_else(|| {
                KernelError::BadShape(format!("{label}: joined axis {axis} overflows: {} and {}", show(a), show(b)))
            })?;
            Ok((out, 1))
        }
        Kernel::ExpandDims { axis } => {
            let a = inputs[0];
            if axis > a.len() {
                return bad(format!(
                    "axis {axis} is out of range for an operand of shape {} (a new axis goes at 0 to {})",
                    show(a),
                    a.len()
                ));
            }
            let mut out = a.to_vec();
            out.insert(axis, 1);
            Ok((out, 1))
        }
        Kernel::SqueezeAxis { axis } => {
            let a = inputs[0];
            if let Err(msg) = axis_in(axis, a) {
                return bad(msg);
            }
            if a[axis] != 1 {
                return bad(format!("axis {axis} of {} has size {}, not 1", show(a), a[axis]));
            }
            let mut out = a.to_vec();
            out.remove(axis);
            Ok((out, 1))
        }
        Kernel::MergeAxes { axis } => {
            let a = inputs[0];
            if axis.checked_add(1).is_none_or(|next| next >= a.len()) {
                return bad(format!(
                    "merges axes {axis} and {}, the operand {} has rank {}",
                    axis as u64 + 1,
                    show(a),
                    a.len()
                ));
            }
            let merged = a[axis]
                .checked_mul(a[axis + 1])
                .ok_or_else(|| KernelError::BadShape(format!("{label}: the merged axis of {} overflows", show(a))))?;
            let mut out = a.to_vec();
            out.splice(axis..axis + 2, [merged]);
            Ok((out, 1))
        }
        Kernel::SplitAxis { axis, size } => {
            let a = inputs[0];
            if let Err(msg) = axis_in(axis, a) {
                return bad(msg);
            }
            if !a[axis].is_multiple_of(size) {
                return bad(format!("axis {axis} of {} has size {}, not a multiple of {size}", show(a), a[axis]));
            }
            let mut out = a.to_vec();
            out.splice(axis..axis + 1, [a[axis] / size, size]);
            Ok((out, 1))
        }
        Kernel::RepeatAxis { axis, n } => {
            let a = inputs[0];
            if let Err(msg) = axis_in(axis, a) {
                return bad(msg);
            }
            if a[axis] != 1 {
                return bad(format!(
                    "axis {axis} of {} has size {}, not 1 (only a size-1 axis repeats)",
                    show(a),
                    a[axis]
                ));
            }
            let mut out = a.to_vec();
            out[axis] = n;
            Ok((out, 1))
        }
        // Decoded from the spec by `KernelRef::shape_info`, which never comes here.
        Kernel::EinSum | Kernel::EinReduce => {
            Err(KernelError::BadUse(format!("{label}: the shape of a spec kernel comes from its spec")))
        }
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
        Kernel::MatVec | Kernel::MatColVec | Kernel::MinIndex => count(inputs[0]),
        Kernel::RowSum => d(0, 0).saturating_mul(d(0, 1).saturating_sub(1)),
        Kernel::ColSum => d(0, 0).saturating_sub(1).saturating_mul(d(0, 1)),
        Kernel::MinPair | Kernel::OffsetIndex => d(0, 0),
        Kernel::Broadcast => broadcast_shape(inputs[0], inputs[1]).map_or(0, |s| count(&s)),
        Kernel::Diag
        | Kernel::Transpose
        | Kernel::Tile { .. }
        | Kernel::Concat { .. }
        | Kernel::ConcatAxis { .. }
        | Kernel::ExpandDims { .. }
        | Kernel::SqueezeAxis { .. }
        | Kernel::MergeAxes { .. }
        | Kernel::SplitAxis { .. }
        | Kernel::RepeatAxis { .. } => 0,
        // Counted from the spec by `KernelRef::flops`.
        Kernel::EinSum | Kernel::EinReduce => 0,
    }
}

impl KernelRef {
    /// Output shape and blocks per call; checks the kernel, the operand count
    /// and the shapes.
    fn shape_info(&self, inputs: &[&[usize]]) -> Result<(Vec<usize>, usize), KernelError> {
        self.check()?;
        let arity = self.arity();
        if inputs.len() != arity {
            return Err(KernelError::BadUse(format!(
                "{self} takes {arity} operand{}, got {}",
                if arity == 1 { "" } else { "s" },
                inputs.len()
            )));
        }
        self.shape_checked(inputs)
    }
    /// [`KernelRef::shape_info`] once `check` and the operand count passed:
    /// each part of a composition is read once (a fused chain of `n` maps
    /// costs O(n), not O(n²)).
    fn shape_checked(&self, inputs: &[&[usize]]) -> Result<(Vec<usize>, usize), KernelError> {
        match self {
            KernelRef::Named { name, args } if is_spec_kernel(name) => {
                let spec = EinSumSpec::parse(&args[0]).map_err(|e| KernelError::BadUse(e.to_string()))?;
                let shape = spec.output_shape(inputs).map_err(|e| KernelError::BadShape(format!("{self}: {e}")))?;
                Ok((shape, 1))
            }
            KernelRef::Named { name, args } => named_shape(self, resolve(name, args)?, inputs),
            KernelRef::Compose(outer, inner) => {
                let (mid, n) = inner.shape_checked(inputs)?;
                if n != 1 {
                    return Err(KernelError::BadUse(format!(
                        "{self}: the inner kernel of a composition must give one block per call, {inner} gives {n}"
                    )));
                }
                // `check` made the outer kernel unary.
                outer.shape_checked(&[&mid])
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
        self.shape_and_flops(inputs).map_or(0, |(_, f)| f)
    }
    /// Output shape and flops of operands that [`KernelRef::shape_info`]
    /// accepted, in one pass over a composition.
    fn shape_and_flops(&self, inputs: &[&[usize]]) -> Option<(Vec<usize>, u64)> {
        match self {
            KernelRef::Named { name, args } if is_spec_kernel(name) => {
                let spec = EinSumSpec::parse(&args[0]).ok()?;
                Some((spec.output_shape(inputs).ok()?, spec.flops(inputs)))
            }
            KernelRef::Named { name, args } => {
                let k = resolve(name, args).ok()?;
                let (shape, _) = named_shape(&name, k, inputs).ok()?;
                Some((shape, named_flops(k, inputs)))
            }
            KernelRef::Compose(outer, inner) => {
                if !(outer.is_elementwise() && inner.is_elementwise())
                    && inner.arity() == 2
                    && inner.is_elementwise()
                    && outer.distributes_over(inner)
                {
                    // inner(outer(a), outer(b))
                    let (oa, fa) = outer.shape_and_flops(&inputs[..1])?;
                    let (ob, fb) = outer.shape_and_flops(&inputs[1..])?;
                    let fi = inner.shape_and_flops(&[&oa, &ob]).map_or(0, |(_, f)| f);
                    let (shape, _) = self.shape_checked(inputs).ok()?;
                    Some((shape, fa.saturating_add(fb).saturating_add(fi)))
                } else {
                    let (mid, fi) = inner.shape_and_flops(inputs)?;
                    let (shape, fo) = outer.shape_and_flops(&[&mid])?;
                    Some((shape, fi.saturating_add(fo)))
                }
            }
        }
    }
}
