//! The one place that reads parameter leaves and converts between e-nodes
//! and the operators of programs and plans.
//!
//! A parameter ([`Param`]) is a leaf class of the e-graph, or a leaf node of
//! an extracted [`RecExpr`](egg::RecExpr); an operator reads each of its
//! parameters as one kind (dims, kernel, key map, predicate, input name).
//! Typing, extraction, the rules and the test oracle all read them through
//! the accessors here, so that "expected dims, found …" is said one way, and
//! the mapping between [`Ia`] nodes and [`TraOp`] / [`IaOp`] is written once.

use super::{Ia, Param, TraEGraph};
use crate::kernel::KernelRef;
use crate::keyexpr::{KeyFn, Predicate};
use crate::program::{IaOp, TraOp};
use egg::Id;
use std::fmt;

/// A parameter that is not of the kind an operator reads there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafError {
    /// The kind the operator reads (`dims`, `a kernel`, …).
    pub expected: &'static str,
    /// What was found, as written in patterns (or the class's analysis).
    pub found: String,
}

impl fmt::Display for LeafError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "expected {}, found {}", self.expected, self.found)
    }
}

impl std::error::Error for LeafError {}

impl Param {
    fn wrong(&self, expected: &'static str) -> LeafError {
        LeafError { expected, found: self.to_string() }
    }

    /// A dim list.
    pub fn as_dims(&self) -> Result<&[usize], LeafError> {
        match self {
            Param::Dims(d) => Ok(d),
            p => Err(p.wrong("dims")),
        }
    }

    /// A kernel.
    pub fn as_kernel(&self) -> Result<&KernelRef, LeafError> {
        match self {
            Param::Kernel(k) => Ok(k),
            p => Err(p.wrong("a kernel")),
        }
    }

    /// A local map's kernel: `None` for `id`.
    pub fn as_kernel_or_id(&self) -> Result<Option<&KernelRef>, LeafError> {
        match self {
            Param::Kernel(k) => Ok(Some(k)),
            Param::Id => Ok(None),
            p => Err(p.wrong("a kernel or id")),
        }
    }

    /// A key expression.
    pub fn as_key(&self) -> Result<&KeyFn, LeafError> {
        match self {
            Param::Key(k) => Ok(k),
            p => Err(p.wrong("a key expression")),
        }
    }

    /// A key map: `None` for `id`.
    pub fn as_key_or_id(&self) -> Result<Option<&KeyFn>, LeafError> {
        match self {
            Param::Key(k) => Ok(Some(k)),
            Param::Id => Ok(None),
            p => Err(p.wrong("a key expression or id")),
        }
    }

    /// A predicate.
    pub fn as_pred(&self) -> Result<&Predicate, LeafError> {
        match self {
            Param::Pred(p) => Ok(p),
            p => Err(p.wrong("a predicate")),
        }
    }

    /// An input's name.
    pub fn as_name(&self) -> Result<&str, LeafError> {
        match self {
            Param::Name(n) => Ok(n),
            p => Err(p.wrong("an input name")),
        }
    }

    /// True for `id` (the identity key map or kernel).
    pub fn is_id(&self) -> bool {
        matches!(self, Param::Id)
    }

    /// True for a key map that is the identity on keys of `arity` dims:
    /// `id`, or a key expression `[k0, …, k{arity-1}]`.
    pub fn is_identity_key(&self, arity: usize) -> bool {
        match self {
            Param::Id => true,
            Param::Key(k) => k.is_identity(arity),
            _ => false,
        }
    }
}

/// The parameter of a leaf class of the e-graph.
pub fn leaf(eg: &TraEGraph, id: Id) -> Result<&Param, LeafError> {
    eg[id].data.param().ok_or_else(|| LeafError { expected: "a parameter leaf", found: format!("{:?}", eg[id].data) })
}

/// Why an e-node could not be read as an operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeError {
    /// A parameter of the wrong kind.
    Leaf(LeafError),
    /// The node is not of the sort asked for (a TRA operator where an IA one
    /// was expected, or the reverse, or a leaf).
    WrongSort {
        /// The node's operator.
        node: String,
        /// The sort that was asked for (`a TRA operator`, `an IA operator`).
        expected: &'static str,
    },
    /// Fewer operand names than the node has relation operands.
    MissingOperand {
        /// The node's operator.
        node: String,
        /// The position of the first operand without a name.
        index: usize,
    },
    /// A `tile` or `concat` whose dim list is not two numbers.
    BadDimPair {
        /// The node's operator.
        node: String,
        /// The dims found.
        dims: Vec<usize>,
    },
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeError::Leaf(e) => write!(f, "{e}"),
            NodeError::WrongSort { node, expected } => write!(f, "{node} is not {expected}"),
            NodeError::MissingOperand { node, index } => write!(f, "{node}: no name for operand {index}"),
            NodeError::BadDimPair { node, dims } => write!(f, "{node} parameters {dims:?}: expected two dims"),
        }
    }
}

impl std::error::Error for NodeError {}

impl From<LeafError> for NodeError {
    fn from(e: LeafError) -> Self {
        NodeError::Leaf(e)
    }
}

/// The relation operands of a node, in order (its parameter leaves left
/// out); empty for a leaf or an input.
pub fn operands(node: &Ia) -> Vec<Id> {
    match node {
        Ia::Join([_, _, _, a, b]) | Ia::LJoin([_, _, _, a, b]) => vec![*a, *b],
        Ia::Aggregate([_, _, x]) | Ia::LAgg([_, _, x]) | Ia::LMap([_, _, x]) => vec![*x],
        Ia::Rekey([_, x])
        | Ia::Filter([_, x])
        | Ia::Transform([_, x])
        | Ia::Tile([_, x])
        | Ia::Concat([_, x])
        | Ia::Shuffle([_, x])
        | Ia::LFilter([_, x]) => vec![*x],
        Ia::Erase(x) | Ia::Broadcast(x) => vec![*x],
        Ia::Input(_) | Ia::Param(_) => vec![],
    }
}

fn operand_name<N: AsRef<str>>(node: &Ia, names: &[N], index: usize) -> Result<String, NodeError> {
    names
        .get(index)
        .map(|n| n.as_ref().to_string())
        .ok_or_else(|| NodeError::MissingOperand { node: node.to_string(), index })
}

fn dim_pair(node: &Ia, dims: &[usize]) -> Result<(usize, usize), NodeError> {
    match *dims {
        [a, b] => Ok((a, b)),
        _ => Err(NodeError::BadDimPair { node: node.to_string(), dims: dims.to_vec() }),
    }
}

/// The TRA operator of a TRA (L-sort) node: its parameters read by `param`
/// (a leaf class of an e-graph, or a leaf of an expression), its relation
/// operands named by `names` in the order of [`operands`].
pub fn tra_op<'p, N: AsRef<str>>(
    node: &Ia,
    param: impl Fn(Id) -> Result<&'p Param, LeafError>,
    names: &[N],
) -> Result<TraOp, NodeError> {
    let n = |i: usize| operand_name(node, names, i);
    Ok(match node {
        Ia::Join([jl, jr, k, _, _]) => TraOp::Join {
            left: n(0)?,
            right: n(1)?,
            left_keys: param(*jl)?.as_dims()?.to_vec(),
            right_keys: param(*jr)?.as_dims()?.to_vec(),
            kernel: param(*k)?.as_kernel()?.clone(),
        },
        Ia::Aggregate([g, k, _]) => TraOp::Aggregate {
            input: n(0)?,
            group_by: param(*g)?.as_dims()?.to_vec(),
            kernel: param(*k)?.as_kernel()?.clone(),
        },
        Ia::Rekey([f, _]) => TraOp::Rekey { input: n(0)?, key: param(*f)?.as_key()?.clone() },
        Ia::Filter([p, _]) => TraOp::Filter { input: n(0)?, predicate: param(*p)?.as_pred()?.clone() },
        Ia::Transform([k, _]) => TraOp::Transform { input: n(0)?, kernel: param(*k)?.as_kernel()?.clone() },
        Ia::Tile([ds, _]) => {
            let (dim, size) = dim_pair(node, param(*ds)?.as_dims()?)?;
            TraOp::Tile { input: n(0)?, dim, size }
        }
        Ia::Concat([ds, _]) => {
            let (key_dim, array_dim) = dim_pair(node, param(*ds)?.as_dims()?)?;
            TraOp::Concat { input: n(0)?, key_dim, array_dim }
        }
        other => return Err(NodeError::WrongSort { node: other.to_string(), expected: "a TRA operator" }),
    })
}

/// The IA operator of a shuffle, broadcast or local (P-sort) node: its
/// parameters read by `param`, its relation operands named by `names` in the
/// order of [`operands`].
pub fn ia_op<'p, N: AsRef<str>>(
    node: &Ia,
    param: impl Fn(Id) -> Result<&'p Param, LeafError>,
    names: &[N],
) -> Result<IaOp, NodeError> {
    let n = |i: usize| operand_name(node, names, i);
    Ok(match node {
        Ia::Shuffle([d, _]) => IaOp::Shuffle { input: n(0)?, dims: param(*d)?.as_dims()?.to_vec() },
        Ia::Broadcast(_) => IaOp::Broadcast { input: n(0)? },
        Ia::LJoin([jl, jr, k, _, _]) => IaOp::LocalJoin {
            left: n(0)?,
            right: n(1)?,
            left_keys: param(*jl)?.as_dims()?.to_vec(),
            right_keys: param(*jr)?.as_dims()?.to_vec(),
            kernel: param(*k)?.as_kernel()?.clone(),
        },
        Ia::LAgg([g, k, _]) => IaOp::LocalAggregate {
            input: n(0)?,
            group_by: param(*g)?.as_dims()?.to_vec(),
            kernel: param(*k)?.as_kernel()?.clone(),
        },
        Ia::LFilter([p, _]) => IaOp::LocalFilter { input: n(0)?, predicate: param(*p)?.as_pred()?.clone() },
        Ia::LMap([f, k, _]) => IaOp::LocalMap {
            input: n(0)?,
            key: param(*f)?.as_key_or_id()?.cloned(),
            kernel: param(*k)?.as_kernel_or_id()?.cloned(),
        },
        other => return Err(NodeError::WrongSort { node: other.to_string(), expected: "an IA operator" }),
    })
}

/// The e-node of a TRA operator: `leaf` adds a parameter leaf and gives its
/// class, `operand` gives the class of a named operand.
pub fn tra_node(op: &TraOp, mut leaf: impl FnMut(Param) -> Id, operand: impl Fn(&str) -> Id) -> Ia {
    match op {
        TraOp::Join { left, right, left_keys, right_keys, kernel } => Ia::Join([
            leaf(Param::Dims(left_keys.clone())),
            leaf(Param::Dims(right_keys.clone())),
            leaf(Param::Kernel(kernel.clone())),
            operand(left),
            operand(right),
        ]),
        TraOp::Aggregate { input, group_by, kernel } => {
            Ia::Aggregate([leaf(Param::Dims(group_by.clone())), leaf(Param::Kernel(kernel.clone())), operand(input)])
        }
        TraOp::Rekey { input, key } => Ia::Rekey([leaf(Param::Key(key.clone())), operand(input)]),
        TraOp::Filter { input, predicate } => Ia::Filter([leaf(Param::Pred(predicate.clone())), operand(input)]),
        TraOp::Transform { input, kernel } => Ia::Transform([leaf(Param::Kernel(kernel.clone())), operand(input)]),
        TraOp::Tile { input, dim, size } => Ia::Tile([leaf(Param::Dims(vec![*dim, *size])), operand(input)]),
        TraOp::Concat { input, key_dim, array_dim } => {
            Ia::Concat([leaf(Param::Dims(vec![*key_dim, *array_dim])), operand(input)])
        }
    }
}
