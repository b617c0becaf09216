//! The kernel catalog: what each block kernel is (arity, output shape, flops,
//! algebraic facts). Implementations live in the executor.
//! (SKELETON: the API is fixed; bodies are being written.)

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
    /// Not in the catalog.
    #[error("unknown kernel `{0}`")]
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

/// Every catalog entry.
pub fn catalog() -> &'static [KernelInfo] {
    unimplemented!()
}

/// A catalog entry by name.
pub fn lookup(_name: &str) -> Option<&'static KernelInfo> {
    unimplemented!()
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
    /// Parse `name` or `name(a,b)`.
    pub fn parse(_s: &str) -> Result<KernelRef, KernelError> {
        unimplemented!()
    }
    /// Check names, argument counts and composition arities.
    pub fn check(&self) -> Result<(), KernelError> {
        unimplemented!()
    }
    /// Number of block operands.
    pub fn arity(&self) -> usize {
        unimplemented!()
    }
    /// Shape of each output block for operands of these shapes.
    pub fn output_shape(&self, _inputs: &[&[usize]]) -> Result<Vec<usize>, KernelError> {
        unimplemented!()
    }
    /// Blocks produced per application (a tiling kernel gives several).
    pub fn outputs_per_call(&self, _inputs: &[&[usize]]) -> Result<usize, KernelError> {
        unimplemented!()
    }
    /// Floating-point operations of one application.
    pub fn flops(&self, _inputs: &[&[usize]]) -> u64 {
        unimplemented!()
    }
    /// Binary, associative and commutative.
    pub fn is_assoc_comm(&self) -> bool {
        unimplemented!()
    }
    /// Elementwise.
    pub fn is_elementwise(&self) -> bool {
        unimplemented!()
    }
    /// `self(g(a, b)) == g(self(a), self(b))` for the binary kernel `g`.
    pub fn distributes_over(&self, _g: &KernelRef) -> bool {
        unimplemented!()
    }
    /// The s-expression form: `matMul`, `tile(1,2)`, `(compose diag matAdd)`.
    pub fn to_sexpr(&self) -> String {
        match self {
            KernelRef::Named { .. } => self.to_string(),
            KernelRef::Compose(o, i) => format!("(compose {} {})", o.to_sexpr(), i.to_sexpr()),
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
