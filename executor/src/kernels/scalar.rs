//! The per-element functions of the numpy-style kernels (`abs`, `tanh`,
//! `powc(c)`, …, and the broadcasting binaries `add` … `selectElse`), shared
//! by the reference kernels and the thread executor, so that both compute
//! the same formula and their `f64` results are bit-identical.

/// A unary elementwise function of the catalog (the kernels with a scalar
/// formula of their own; `relu`, `exp`, … are written where they are used).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Math {
    /// `|x|`.
    Abs,
    /// `tanh x`.
    Tanh,
    /// `erf x` (libm).
    Erf,
    /// `ln(1 + x)`.
    Log1p,
    /// `e^x − 1`.
    Expm1,
    /// `1 / x`.
    Recip,
    /// `1 / √x`.
    Rsqrt,
    /// numpy's sign: −1, 0 (for ±0), +1, NaN for NaN.
    Sign,
    /// `x · x`.
    Square,
    /// `⌊x⌋`.
    Floor,
    /// `⌈x⌉`.
    Ceil,
    /// `1` where `x == 0`, else `0`.
    LogicalNot,
    /// `x^n` for an integer `|n| ≤ 64`, by squaring ([`powi`]).
    Powi(i32),
    /// `x^c` by `powf`.
    Powf(f64),
}

/// The largest integer exponent `powc` computes by multiplication.
pub const POWC_MAX_INT: f64 = 64.0;

impl Math {
    /// The function of the catalog kernel `name` with its numeric argument
    /// (`powc(c)` needs it); `None` for another kernel.
    pub fn of(name: &str, arg: Option<f64>) -> Option<Math> {
        Some(match name {
            "abs" => Math::Abs,
            "tanh" => Math::Tanh,
            "erf" => Math::Erf,
            "log1p" => Math::Log1p,
            "expm1" => Math::Expm1,
            "recip" => Math::Recip,
            "rsqrt" => Math::Rsqrt,
            "sign" => Math::Sign,
            "square" => Math::Square,
            "floor" => Math::Floor,
            "ceil" => Math::Ceil,
            "logicalNot" => Math::LogicalNot,
            "powc" => {
                let c = arg?;
                if c.fract() == 0.0 && c.abs() <= POWC_MAX_INT {
                    Math::Powi(c as i32)
                } else {
                    Math::Powf(c)
                }
            }
            _ => return None,
        })
    }

    /// The function at `x`.
    #[inline(always)]
    pub fn eval(self, x: f64) -> f64 {
        match self {
            Math::Abs => x.abs(),
            Math::Tanh => x.tanh(),
            Math::Erf => libm::erf(x),
            Math::Log1p => x.ln_1p(),
            Math::Expm1 => x.exp_m1(),
            Math::Recip => 1.0 / x,
            Math::Rsqrt => 1.0 / x.sqrt(),
            Math::Sign => sign(x),
            Math::Square => x * x,
            Math::Floor => x.floor(),
            Math::Ceil => x.ceil(),
            Math::LogicalNot => {
                if x == 0.0 {
                    1.0
                } else {
                    0.0
                }
            }
            Math::Powi(n) => powi(x, n),
            Math::Powf(c) => x.powf(c),
        }
    }
}

/// numpy's sign: `1` for `x > 0`, `-1` for `x < 0`, `+0` for `±0`, NaN for NaN.
#[inline(always)]
pub fn sign(x: f64) -> f64 {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else if x == 0.0 {
        0.0
    } else {
        x
    }
}

/// `x^n` by repeated squaring, the same multiplications everywhere (not
/// `f64::powi`, whose expansion the compiler may choose): `x^0 = 1` (NaN
/// included, as numpy), a negative `n` is `1 / x^|n|`.
#[inline(always)]
pub fn powi(x: f64, n: i32) -> f64 {
    let mut e = n.unsigned_abs();
    let (mut base, mut r) = (x, 1.0);
    while e > 0 {
        if e & 1 == 1 {
            r *= base;
        }
        e >>= 1;
        if e > 0 {
            base *= base;
        }
    }
    if n < 0 {
        1.0 / r
    } else {
        r
    }
}

/// A binary kernel with numpy broadcasting, by its per-element function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BroadcastOp {
    /// `a + b`.
    Add,
    /// `a − b`.
    Sub,
    /// `a · b`.
    Mul,
    /// `a / b`.
    Div,
    /// `a.powf(b)`.
    Pow,
    /// numpy's maximum: NaN if either is NaN.
    Maximum,
    /// numpy's minimum: NaN if either is NaN.
    Minimum,
    /// `a < b` as 1 or 0.
    Lt,
    /// `a ≤ b` as 1 or 0.
    Le,
    /// `a > b` as 1 or 0.
    Gt,
    /// `a ≥ b` as 1 or 0.
    Ge,
    /// `a == b` as 1 or 0.
    Eq,
    /// `a != b` as 1 or 0.
    Ne,
    /// `(c, x)`: `x` where `c != 0` (NaN included), else 0.
    SelectIf,
    /// `(c, y)`: `y` where `c == 0`, else 0.
    SelectElse,
}

impl BroadcastOp {
    /// The operation of the catalog kernel `name`, if it is a broadcasting one.
    pub fn of(name: &str) -> Option<BroadcastOp> {
        Some(match name {
            "add" => BroadcastOp::Add,
            "sub" => BroadcastOp::Sub,
            "mul" => BroadcastOp::Mul,
            "div" => BroadcastOp::Div,
            "pow" => BroadcastOp::Pow,
            "maximum" => BroadcastOp::Maximum,
            "minimum" => BroadcastOp::Minimum,
            "lt" => BroadcastOp::Lt,
            "le" => BroadcastOp::Le,
            "gt" => BroadcastOp::Gt,
            "ge" => BroadcastOp::Ge,
            "eq" => BroadcastOp::Eq,
            "ne" => BroadcastOp::Ne,
            "selectIf" => BroadcastOp::SelectIf,
            "selectElse" => BroadcastOp::SelectElse,
            _ => return None,
        })
    }

    /// The operation on one pair of elements.
    #[inline(always)]
    pub fn eval(self, a: f64, b: f64) -> f64 {
        let truth = |t: bool| if t { 1.0 } else { 0.0 };
        match self {
            BroadcastOp::Add => a + b,
            BroadcastOp::Sub => a - b,
            BroadcastOp::Mul => a * b,
            BroadcastOp::Div => a / b,
            BroadcastOp::Pow => a.powf(b),
            // numpy's: `a` when it is NaN or larger, else `b` (NaN when `b` is).
            BroadcastOp::Maximum => {
                if a.is_nan() || a > b {
                    a
                } else {
                    b
                }
            }
            BroadcastOp::Minimum => {
                if a.is_nan() || a < b {
                    a
                } else {
                    b
                }
            }
            BroadcastOp::Lt => truth(a < b),
            BroadcastOp::Le => truth(a <= b),
            BroadcastOp::Gt => truth(a > b),
            BroadcastOp::Ge => truth(a >= b),
            BroadcastOp::Eq => truth(a == b),
            BroadcastOp::Ne => truth(a != b),
            BroadcastOp::SelectIf => {
                if a != 0.0 {
                    b
                } else {
                    0.0
                }
            }
            BroadcastOp::SelectElse => {
                if a == 0.0 {
                    b
                } else {
                    0.0
                }
            }
        }
    }
}
