//! The element types the thread executor computes in: `f32` and `f64`.

use std::cmp::Ordering;
use std::fmt;
use std::ops::{Add, AddAssign, Div, Mul, Neg, Sub};

/// A floating-point element type of blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// IEEE single precision.
    F32,
    /// IEEE double precision.
    F64,
}

impl Dtype {
    /// `f32` or `f64`.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F64 => "f64",
        }
    }
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::F64 => 8,
        }
    }
    /// numpy's name (`float32`, `float64`).
    pub fn numpy_name(self) -> &'static str {
        match self {
            Dtype::F32 => "float32",
            Dtype::F64 => "float64",
        }
    }
    /// Parse `f32`, `float32`, `f64`, `float64`.
    pub fn parse(s: &str) -> Option<Dtype> {
        match s {
            "f32" | "float32" | "single" => Some(Dtype::F32),
            "f64" | "float64" | "double" => Some(Dtype::F64),
            _ => None,
        }
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The operations kernels need from an element type. The scalar functions
/// follow the reference kernels ([`crate::kernels`]) exactly: `fmax`/`fmin`
/// are Rust's `max`/`min` (a NaN loses to a number), comparisons for
/// `minIndex`/`minPair` use `total_cmp`.
pub trait Elem:
    Copy
    + Send
    + Sync
    + 'static
    + Default
    + PartialEq
    + PartialOrd
    + fmt::Debug
    + fmt::Display
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
{
    /// 0.
    const ZERO: Self;
    /// 1.
    const ONE: Self;
    /// Which type this is.
    const DTYPE: Dtype;
    /// Conversion from `f64` (rounding for `f32`).
    fn from_f64(x: f64) -> Self;
    /// Conversion to `f64` (exact).
    fn to_f64(self) -> f64;
    /// `e^x`.
    fn exp(self) -> Self;
    /// Natural logarithm.
    fn ln(self) -> Self;
    /// Square root.
    fn sqrt(self) -> Self;
    /// Maximum; a NaN loses to a number.
    fn fmax(self, o: Self) -> Self;
    /// Minimum; a NaN loses to a number.
    fn fmin(self, o: Self) -> Self;
    /// IEEE total order.
    fn total_cmp(&self, o: &Self) -> Ordering;
    /// Bytes of `self`'s native little-endian representation, for `.npy`.
    fn write_le(self, out: &mut Vec<u8>);
    /// From native little-endian bytes (`bytes.len()` is the element size).
    fn read_le(bytes: &[u8]) -> Self;
    /// From big-endian bytes.
    fn read_be(bytes: &[u8]) -> Self;
}

macro_rules! impl_elem {
    ($t:ty, $d:expr) => {
        impl Elem for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const DTYPE: Dtype = $d;
            #[inline(always)]
            fn from_f64(x: f64) -> Self {
                x as $t
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            #[inline(always)]
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            #[inline(always)]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline(always)]
            fn fmax(self, o: Self) -> Self {
                <$t>::max(self, o)
            }
            #[inline(always)]
            fn fmin(self, o: Self) -> Self {
                <$t>::min(self, o)
            }
            #[inline(always)]
            fn total_cmp(&self, o: &Self) -> Ordering {
                <$t>::total_cmp(self, o)
            }
            #[inline(always)]
            fn write_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            #[inline(always)]
            fn read_le(bytes: &[u8]) -> Self {
                <$t>::from_le_bytes(bytes.try_into().expect("element size"))
            }
            #[inline(always)]
            fn read_be(bytes: &[u8]) -> Self {
                <$t>::from_be_bytes(bytes.try_into().expect("element size"))
            }
        }
    };
}

impl_elem!(f32, Dtype::F32);
impl_elem!(f64, Dtype::F64);
