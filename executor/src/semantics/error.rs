//! What goes wrong while evaluating a program or plan: [`InterpError`], whose
//! every variant that belongs to a node names it, and the constructors the
//! executors build it with.

use super::relation::Site;
use tra_optimizer::kernel::{KernelError, KernelRef};
use tra_optimizer::keyexpr::{EvalError, Key, KeyFn, Predicate};

/// What went wrong while interpreting. Every variant that belongs to a node
/// names it; the message starts with `node NAME:` (or `input NAME:`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InterpError {
    /// A node names an operand that is neither an input nor a node.
    #[error("node {node}: unknown operand `{operand}` (neither an input nor a node)")]
    UnknownOperand {
        /// The node.
        node: String,
        /// The name it refers to.
        operand: String,
    },
    /// An output name that is neither an input nor a node.
    #[error("output `{0}`: neither an input nor a node")]
    UnknownOutput(String),
    /// A declared input without data.
    #[error("input {0}: no data given for it")]
    MissingInput(String),
    /// Input data that does not match its declaration (or a placement that
    /// cannot be applied to it).
    #[error("input {input}: {message}")]
    BadInput {
        /// The input.
        input: String,
        /// What is wrong.
        message: String,
    },
    /// A node whose parameters do not fit its operands, a kernel that gives the
    /// wrong number of blocks, a name clash, a cycle.
    #[error("node {node}: {message}")]
    BadNode {
        /// The node.
        node: String,
        /// What is wrong.
        message: String,
    },
    /// A kernel failed (unknown kernel, operands of the wrong shape).
    #[error("node {node}: kernel {kernel}: {source}")]
    Kernel {
        /// The node.
        node: String,
        /// The kernel, as written.
        kernel: String,
        /// The kernel's error.
        source: KernelError,
    },
    /// A key expression or predicate could not be evaluated on a key.
    #[error("node {node}: on key {key:?}: {source}")]
    KeyEval {
        /// The node.
        node: String,
        /// The key it was evaluated on.
        key: Key,
        /// The evaluation error.
        source: EvalError,
    },
    /// Two tuples of a (logical) relation got the same key.
    #[error("node {node}: two tuples get the key {key:?}: keys are no longer unique")]
    DuplicateKey {
        /// The node.
        node: String,
        /// The key.
        key: Key,
    },
    /// `sites` is zero.
    #[error("the number of sites must be at least 1")]
    NoSites,
    /// The GEMM `TRA_GEMM` asks for cannot be used (checked before a run
    /// starts).
    #[error("{0}")]
    Gemm(#[from] crate::threads::kernels::GemmError),
    /// The run was stopped before it finished (its deadline passed, or the
    /// process is shutting down).
    #[error("node {node}: stopped: {reason}")]
    Stopped {
        /// The node that was running.
        node: String,
        /// Why, in words (which limit, and its value).
        reason: String,
    },
    /// A physical relation holds a key more than once (on several sites, or on
    /// one site and everywhere): it is not a tensor relation.
    #[error("{}not a tensor relation: key {key:?} is held {} times, on {}", node_prefix(.node), .sites.len(), sites_list(.sites))]
    NotATensorRelation {
        /// The node (or output) whose value it is, when known.
        node: Option<String>,
        /// The first key held more than once.
        key: Key,
        /// Every site holding it (once per copy).
        sites: Vec<Site>,
    },
}

fn node_prefix(node: &Option<String>) -> String {
    match node {
        Some(n) => format!("node {n}: "),
        None => String::new(),
    }
}

fn sites_list(sites: &[Site]) -> String {
    let parts: Vec<String> = sites.iter().map(|s| s.to_string()).collect();
    parts.join(", ")
}

impl InterpError {
    /// The node (or input, or output) the error belongs to, when there is one.
    pub fn node(&self) -> Option<&str> {
        match self {
            InterpError::UnknownOperand { node, .. }
            | InterpError::BadNode { node, .. }
            | InterpError::Kernel { node, .. }
            | InterpError::KeyEval { node, .. }
            | InterpError::DuplicateKey { node, .. }
            | InterpError::Stopped { node, .. } => Some(node),
            InterpError::BadInput { input, .. } => Some(input),
            InterpError::MissingInput(n) | InterpError::UnknownOutput(n) => Some(n),
            InterpError::NotATensorRelation { node, .. } => node.as_deref(),
            InterpError::NoSites | InterpError::Gemm(_) => None,
        }
    }
}

/// A result whose error names the node at fault.
pub(crate) type Res<T> = Result<T, InterpError>;

/// A [`InterpError::BadNode`] of `node`.
pub(crate) fn bad(node: &str, message: impl Into<String>) -> InterpError {
    InterpError::BadNode { node: node.to_string(), message: message.into() }
}

/// A kernel's failure as an error of `node`.
pub(crate) fn kernel_err(node: &str, kernel: &KernelRef, e: KernelError) -> InterpError {
    InterpError::Kernel { node: node.to_string(), kernel: kernel.to_string(), source: e }
}

/// A key expression evaluated on `key`, its failure an error of `node`.
pub(crate) fn eval_key(node: &str, f: &KeyFn, key: &[u32]) -> Res<Vec<Key>> {
    f.eval(key).map_err(|e| InterpError::KeyEval { node: node.to_string(), key: key.to_vec(), source: e })
}

/// A predicate evaluated on `key`, its failure an error of `node`.
pub(crate) fn eval_pred(node: &str, p: &Predicate, key: &[u32]) -> Res<bool> {
    p.eval(key).map_err(|e| InterpError::KeyEval { node: node.to_string(), key: key.to_vec(), source: e })
}
