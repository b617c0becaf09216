//! What a compiled einsum reports besides its program: the indices, operands
//! and output as blocked relations, and the contraction order with its costs.

use serde::Serialize;
use tra_optimizer::cost::Cost;
use tra_optimizer::program::Program;

/// What an index is, after analysis.
#[derive(Debug, Clone, Serialize)]
pub struct IndexInfo {
    /// The index as written: a letter, or `...0`, `...1` for the axes of `...`.
    pub index: String,
    /// The letter that stands for it in `einSum` specs (the index itself for letters).
    pub letter: char,
    /// Its size.
    pub size: usize,
    /// Its block size (every occurrence has this one).
    pub block: usize,
    /// Number of blocks: `ceil(size / block)`, the key bound.
    pub blocks: u32,
    /// Zeros added to the last block (`blocks · block − size`).
    pub padding: usize,
    /// True when the output lacks it: it is summed.
    pub summed: bool,
}

/// An operand as the program declares it.
#[derive(Debug, Clone, Serialize)]
pub struct OperandInfo {
    /// The input relation's name.
    pub name: String,
    /// Its term as written.
    pub term: String,
    /// Its dense shape.
    pub shape: Vec<usize>,
    /// The axes of the dense tensor that are the relation's dims, in order:
    /// all of them except size-1 axes broadcast against a larger size
    /// (dropped: the operand does not vary along them).
    pub relation_axes: Vec<usize>,
    /// The letters of the relation's dims (`einSum` letters).
    pub letters: String,
    /// The relation's key bounds (blocks per dim).
    pub key_bounds: Vec<u32>,
    /// The relation's block shape.
    pub array_bounds: Vec<usize>,
}

/// The output as the program computes it.
#[derive(Debug, Clone, Serialize)]
pub struct OutputInfo {
    /// The output node's name.
    pub name: String,
    /// Its letters (`einSum` letters), one key dim and one array dim each.
    pub letters: String,
    /// The true (dense) shape: numpy's result shape.
    pub shape: Vec<usize>,
    /// The relation's key bounds.
    pub key_bounds: Vec<u32>,
    /// The relation's block shape.
    pub array_bounds: Vec<usize>,
    /// True when some index is padded: crop the dense relation to `shape`.
    pub cropped: bool,
}

/// One pairwise contraction of the chosen order.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    /// Left operand (an input or an earlier step's result).
    pub left: String,
    /// Right operand.
    pub right: String,
    /// The node holding the result.
    pub result: String,
    /// The contraction in einsum form, e.g. `ij,jk->ik`.
    pub einsum: String,
    /// The join kernel.
    pub kernel: String,
    /// Its cost as a two-input program (absent when not costed).
    pub cost: Option<Cost>,
}

/// How the contraction order was chosen.
#[derive(Debug, Clone, Serialize)]
pub struct Order {
    /// `unary` (one operand), `pair` (two), `dp` (dynamic programming over
    /// subsets), `greedy` (cheapest pair first).
    pub method: String,
    /// The contractions, in program order.
    pub steps: Vec<Step>,
    /// The sum of the steps' costs.
    pub cost: Option<Cost>,
    /// The same sum for the left-to-right order, for comparison.
    pub left_to_right_cost: Option<Cost>,
    /// Distinct candidate contractions costed.
    pub candidates_costed: usize,
    /// Wall time of the order search, in milliseconds (the costing of the
    /// chosen steps and of left to right, for this report, not included).
    pub search_ms: f64,
}

/// A compiled einsum: the TRA program and what it means.
#[derive(Debug, Clone, Serialize)]
pub struct Compiled {
    /// The TRA program: one input per operand, one output.
    pub program: Program,
    /// The operands.
    pub operands: Vec<OperandInfo>,
    /// The output.
    pub output: OutputInfo,
    /// Every index, in order of first appearance.
    pub indices: Vec<IndexInfo>,
    /// The contraction order.
    pub order: Order,
    /// How blocks are padded and the output cropped, in words.
    pub padding: String,
}
