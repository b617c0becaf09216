//! Matrix products through the chosen GEMM ([`super::gemm_backend()`]: the
//! system's OpenBLAS or the `gemm` crate), into or accumulating into the
//! output (`C += A·B`), one call or parallel over row panels.

use super::gemm_backend::{kernel_backend, GemmBackend};
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
/// `[m, n]`, through the chosen GEMM on the calling thread.
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
/// (for the rare operator with fewer output blocks than cores): row panels
/// of the output, one single-threaded OpenBLAS call each, or the `gemm`
/// crate's own split.
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
    matmul_with(kernel_backend(), kind, out, a, a_shape, b, b_shape, accumulate, threads)
}

/// [`matmul_into_par`] through `backend` rather than the process's GEMM
/// (to compare the two, in tests and benchmarks).
#[allow(clippy::too_many_arguments)]
pub fn matmul_with<T: Elem>(
    backend: &GemmBackend,
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
    let lda = if kind.trans_a { m } else { k };
    let ldb = if kind.trans_b { k } else { n };
    let trans = (kind.trans_a, kind.trans_b);
    let panels = if matches!(backend, GemmBackend::OpenBlas(_)) { threads.clamp(1, m) } else { 1 };
    if panels <= 1 {
        // SAFETY: the slices cover m·k, k·n and m·n elements (asserted above)
        // with these leading dimensions; `out` does not alias the operands
        // (it is a `&mut`); m, n, k are not zero.
        unsafe {
            backend.gemm(trans, (m, n, k), a.as_ptr(), lda, b.as_ptr(), ldb, out.as_mut_ptr(), n, accumulate, threads)
        };
        return;
    }
    // OpenBLAS runs single-threaded per call: split the output into row
    // panels, one single-threaded call each, as tasks of the current pool.
    use rayon::prelude::*;
    let rows = m.div_ceil(panels);
    out.par_chunks_mut(rows * n).enumerate().for_each(|(p, c)| {
        let (r0, r) = (p * rows, c.len() / n);
        // Rows r0.. of A: row r0 of the [m,k] matrix, or column r0 of the
        // stored [k,m] one.
        let a0 = if kind.trans_a { r0 } else { r0 * k };
        // SAFETY: as above, for the r rows from r0 of `out` and of A.
        unsafe {
            backend.gemm(trans, (r, n, k), a[a0..].as_ptr(), lda, b.as_ptr(), ldb, c.as_mut_ptr(), n, accumulate, 1)
        };
    });
}
