//! Einstein notation → TRA (paper 004 §2.2, "Expressiveness"): a numpy-style
//! `einsum` expression, the operands' shapes and a block size become a TRA
//! program over blocked tensors, so a user who thinks in `einsum` gets a
//! distributed plan without writing TRA.
//!
//! # The expression
//!
//! numpy's syntax: operand terms separated by `,`, then optionally `->` and
//! the output term (`"ij,jk->ik"`, `"bij,bjk->bik"`, `"ij->i"`, `"ii->i"`,
//! `"ii"`, `"i,j->ij"`, `"ijk,jkl->il"`), any number of operands. Indices are
//! the letters `a`–`z`, `A`–`Z`; spaces are ignored. Without `->` the output
//! is implicit, as in numpy: the indices that appear exactly once, sorted
//! (uppercase before lowercase). `...` stands for the axes a term does not
//! name (right-aligned across operands, as numpy broadcasts them); it must
//! then appear in an explicit output too. An index repeated within a term
//! takes a diagonal (`"ii->i"`); an index absent from the output is summed.
//! Sizes of one index must agree, except that a size-1 axis broadcasts
//! against a larger size (numpy's rule): such an axis is dropped from its
//! operand's relation ([`OperandInfo::relation_axes`]), since the operand
//! does not vary along it.
//!
//! Errors ([`EinsumError`]) speak einsum and carry the character position in
//! the expression (0-based): an unknown character, a lone `.`, `-` or `>`,
//! an index with two sizes, an operand count or rank that does not match the
//! terms, an output index repeated or in no operand.
//!
//! # Blocked tensors, padding
//!
//! An operand of rank `r` and shape `s` is a relation with one key dimension
//! and one array dimension per axis, in the axis order: key bounds
//! `ceil(s_i / b_i)` and array bounds `b_i`, where `b_i` is the block of the
//! axis's index. Every occurrence of an index gets the same block (joins
//! need it): the smallest block asked for it (per operand, per axis, or the
//! default), and never more than the index's size — so a dimension smaller
//! than the block is one block of its own size, and vectors and small
//! dimensions work. When `b_i` does not divide `s_i` the last block is
//! **zero-padded**: zeros do not change sums of products, so the padded
//! result holds the true result in its leading corner, and a front-end (the
//! `tra einsum` command does) **crops** the output back to its true shape
//! when writing it dense. A diagonal of padded blocks is padded with zeros
//! too.
//!
//! # The program
//!
//! Each operand is first reduced on its own: a repeated index becomes a
//! `filter` on equal key components (`k0 == k1`), a `rekey` dropping the
//! copies and a `transform` with a unary `einSum` spec taking the diagonal
//! inside each block; indices that appear in no other operand and not in the
//! output are summed there (`transform` with `einSum`, then `aggregate` with
//! `matAdd` over the remaining key dims). A single operand is finished the
//! same way, its result permuted (`rekey` + `einSum`) to the output's order.
//!
//! Operands are then contracted two at a time, as §2.2 writes it: a `join`
//! on the key dims of the indices both share, with the binary `einSum`
//! kernel contracting inside the blocks (output key = left key ++ right key
//! without its join dims), then an `aggregate` with `matAdd` grouping by the
//! key dims of the indices still needed (by the output or by operands not
//! yet contracted), which sums the others across blocks. When a pairwise
//! contraction is a plain block matrix product (`ij,jk->ik` and its
//! transposed forms) the kernel is `matMul`/`matMulTN`/`matMulNT`/`matMulTT`
//! instead, so the optimizer's matmul strategies (BMM, CMM, RMM) and the
//! executors' GEMM apply.
//!
//! # Order of the contractions
//!
//! With more than two operands the pairwise order is not left to right: for
//! up to [`DP_MAX_OPERANDS`] operands, dynamic programming over subsets of
//! operands picks the tree of least total flops (at padded extents, as
//! opt_einsum's `optimal` path does; ties go to smaller intermediates), in
//! milliseconds; the distribution of each contraction is then chosen when
//! the whole program is optimized. Beyond that (or when the search runs out
//! of time, [`Options::search_time`]) a greedy choice takes the cheapest pair
//! at each step, every candidate contraction a small TRA program (two
//! inputs, join, aggregate) costed by
//! [`optimize`](tra_optimizer::optimize::optimize) (or by its Table-1
//! compilation, after the time). [`Order`] reports the steps, their costs,
//! and what left-to-right would have cost.

#![warn(missing_docs)]

mod analyze;
mod compile;
mod error;
mod ops;
mod order;
mod parse;
mod report;

pub use compile::{check_syntax, compile};
pub use error::EinsumError;
pub use report::{Compiled, IndexInfo, OperandInfo, Order, OutputInfo, Step};

use std::time::Duration;
use tra_optimizer::optimize::Limits;
use tra_optimizer::program::Cluster;
use tra_optimizer::rule::RuleDef;

/// The block size when a request gives none.
pub const DEFAULT_BLOCK: usize = 1000;
/// Up to this many operands the contraction order is found by dynamic
/// programming over subsets; beyond, greedily.
pub const DP_MAX_OPERANDS: usize = 8;
/// The most operands an einsum takes (numpy 2's limit).
pub const MAX_OPERANDS: usize = 64;
/// The output's name when a request gives none.
pub const DEFAULT_OUTPUT: &str = "out";

/// The block size asked for an operand: one for every axis, or one per axis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlockSpec {
    /// The same block size on every axis.
    All(usize),
    /// One block size per axis of the operand.
    PerAxis(Vec<usize>),
}

/// One operand: its name (the input relation's name), its dense shape, and
/// optionally its block size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operand {
    /// Name of the input relation.
    pub name: String,
    /// Dense shape (numpy's `shape`).
    pub shape: Vec<usize>,
    /// Block size; the request's default when absent.
    pub block: Option<BlockSpec>,
}

/// What to compile.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The einsum expression, numpy's syntax.
    pub expression: String,
    /// The operands, in the expression's order.
    pub operands: Vec<Operand>,
    /// Default block size ([`DEFAULT_BLOCK`] when absent).
    pub block: Option<usize>,
    /// Name of the output node ([`DEFAULT_OUTPUT`] when absent).
    pub output: Option<String>,
    /// The cluster the order search and the program are for.
    pub cluster: Option<Cluster>,
}

/// How the order search runs.
#[derive(Debug, Clone, Copy)]
pub struct Options<'a> {
    /// The rules each candidate contraction is optimized with.
    pub rules: &'a [RuleDef],
    /// Limits of each candidate's optimization.
    pub limits: Limits,
    /// Wall time of the whole search; past it, the search finishes greedily.
    pub search_time: Duration,
}

impl<'a> Options<'a> {
    /// Small limits for candidate contractions (they are two-input programs).
    pub fn new(rules: &'a [RuleDef]) -> Options<'a> {
        Options {
            rules,
            limits: Limits { nodes: 20_000, iterations: 30, time: Duration::from_millis(500), ..Limits::default() },
            search_time: Duration::from_secs(10),
        }
    }
}

#[cfg(test)]
mod tests;
