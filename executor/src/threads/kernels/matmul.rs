//! Matrix products through the `gemm` crate, accumulating into the output
//! (`C += A·B`), one call or parallel over row panels.

use crate::threads::elem::Elem;
use tra_optimizer::kernel::KernelRef;

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
