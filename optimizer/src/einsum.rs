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
//! With more than two operands the pairwise order is chosen with the cost
//! model, not left to right: every candidate contraction is a small TRA
//! program (two inputs, join, aggregate) costed by [`optimize`] (or, if that
//! fails, by its Table-1 compilation); dynamic programming over subsets of
//! operands picks the cheapest tree for up to [`DP_MAX_OPERANDS`] operands,
//! a greedy choice of the cheapest pair at each step beyond that (or when the
//! search runs out of time, [`Options::search_time`]; candidates met after
//! that are costed by their Table-1 plan, without saturation). [`Order`]
//! reports the steps, their costs, and what left-to-right would have cost.

use crate::check::{check_plan, check_program};
use crate::compile::compile as table1;
use crate::cost::{plan_report, Cost, Weights};
use crate::error::{ErrorCode, ProgramError};
use crate::kernel::{EinSumSpec, KernelRef};
use crate::keyexpr::{KeyFn, Predicate};
use crate::optimize::{optimize, Limits};
use crate::program::{Cluster, InputDecl, PlacementDecl, Program, TraOp};
use crate::rule::RuleDef;
use indexmap::IndexMap;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::time::{Duration, Instant};

/// The block size when a request gives none.
pub const DEFAULT_BLOCK: usize = 1000;
/// Up to this many operands the contraction order is found by dynamic
/// programming over subsets; beyond, greedily.
pub const DP_MAX_OPERANDS: usize = 6;
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
            limits: Limits { nodes: 20_000, iterations: 30, time: Duration::from_millis(500) },
            search_time: Duration::from_secs(10),
        }
    }
}

/// An einsum mistake: what kind (the API's code), where in the request
/// (`expression`, `inputs.A.block`, `output`), and for mistakes in the
/// expression the 0-based character position.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EinsumError {
    /// The kind of mistake, in the program-error vocabulary.
    pub code: ErrorCode,
    /// What is wrong, in einsum's words (starts with the position when there is one).
    pub message: String,
    /// `expression`, `inputs.NAME.shape`, `inputs.NAME.block`, `block`, `output`, or empty.
    pub at: String,
    /// 0-based character position in the expression.
    pub position: Option<usize>,
    /// The expression.
    pub expression: String,
}

impl EinsumError {
    fn at_pos(expr: &str, pos: usize, code: ErrorCode, msg: impl fmt::Display) -> EinsumError {
        EinsumError {
            code,
            message: format!("einsum `{expr}`, position {pos}: {msg}"),
            at: "expression".into(),
            position: Some(pos),
            expression: expr.into(),
        }
    }

    fn field(expr: &str, at: impl Into<String>, code: ErrorCode, msg: impl Into<String>) -> EinsumError {
        EinsumError { code, message: msg.into(), at: at.into(), position: None, expression: expr.into() }
    }

    /// The expression with a caret under the position (two lines), for a terminal.
    pub fn pointer(&self) -> Option<String> {
        self.position.map(|p| format!("  {}\n  {}^", self.expression, " ".repeat(p)))
    }
}

impl fmt::Display for EinsumError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for EinsumError {}

impl From<EinsumError> for ProgramError {
    fn from(e: EinsumError) -> ProgramError {
        ProgramError::new(e.code, e.at, e.message)
    }
}

// ---------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Item {
    /// A letter and its position.
    Letter(char, usize),
    /// `...` and the position of its first dot.
    Ellipsis(usize),
}

#[derive(Debug, Clone, Default)]
struct Term {
    /// Position where the term starts (its first item, or where it would be).
    start: usize,
    items: Vec<Item>,
}

impl Term {
    fn letters(&self) -> usize {
        self.items.iter().filter(|i| matches!(i, Item::Letter(..))).count()
    }
    fn ellipsis(&self) -> Option<usize> {
        self.items.iter().find_map(|i| match i {
            Item::Ellipsis(p) => Some(*p),
            _ => None,
        })
    }
    fn text(&self) -> String {
        self.items
            .iter()
            .map(|i| match i {
                Item::Letter(c, _) => c.to_string(),
                Item::Ellipsis(_) => "...".into(),
            })
            .collect()
    }
}

#[derive(Debug, Clone)]
struct Parsed {
    inputs: Vec<Term>,
    output: Option<Term>,
    /// Position of `->`, or the length of the expression.
    inputs_end: usize,
}

fn parse(expr: &str) -> Result<Parsed, EinsumError> {
    let chars: Vec<char> = expr.chars().collect();
    let err = |pos: usize, msg: String| EinsumError::at_pos(expr, pos, ErrorCode::BadExpression, msg);
    let mut inputs = vec![Term { start: 0, items: vec![] }];
    let mut output: Option<Term> = None;
    let mut inputs_end = chars.len();
    let mut fresh_term = true;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let term = output.as_mut().unwrap_or_else(|| inputs.last_mut().expect("a term"));
        if fresh_term && !c.is_whitespace() {
            term.start = i;
            fresh_term = false;
        }
        match c {
            c if c.is_whitespace() => {}
            c if c.is_ascii_alphabetic() => term.items.push(Item::Letter(c, i)),
            '.' => {
                if chars[i..].iter().take(3).filter(|&&d| d == '.').count() == 3 {
                    if let Some(p) = term.ellipsis() {
                        return Err(err(i, format!("a term may hold one `...`; this one has another at position {p}")));
                    }
                    term.items.push(Item::Ellipsis(i));
                    i += 3;
                    continue;
                }
                return Err(err(i, "`.` that is not part of an ellipsis `...`".into()));
            }
            ',' if output.is_some() => {
                return Err(err(i, "the output after `->` is a single term: `,` cannot appear there".into()))
            }
            ',' => {
                inputs.push(Term { start: i + 1, items: vec![] });
                fresh_term = true;
            }
            '-' if chars.get(i + 1) == Some(&'>') => {
                if output.is_some() {
                    return Err(err(i, "`->` appears twice; an einsum has one output".into()));
                }
                inputs_end = i;
                output = Some(Term { start: i + 2, items: vec![] });
                fresh_term = true;
                i += 2;
                continue;
            }
            '-' => return Err(err(i, "`-` that is not part of `->`".into())),
            '>' => return Err(err(i, "`>` that is not part of `->`".into())),
            c => {
                return Err(err(
                    i,
                    format!("`{c}` is not an index: indices are the letters a-z and A-Z (and `...` for other axes)"),
                ))
            }
        }
        i += 1;
    }
    Ok(Parsed { inputs, output, inputs_end })
}

// ---------------------------------------------------------------------------
// Analysis: operands against terms, sizes, blocks
// ---------------------------------------------------------------------------

/// An index: a letter (its code point) or axis `j` of `...` (`ELLIPSIS + j`).
type Label = u32;
const ELLIPSIS: Label = 1 << 20;

/// One occurrence of an index on an operand's axis.
#[derive(Debug, Clone, Copy)]
struct Occurrence {
    operand: usize,
    axis: usize,
    pos: usize,
    size: usize,
}

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
    /// Wall time of the search, in milliseconds.
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

/// The analysed request.
struct Analysis {
    expr: String,
    /// Per operand: labels of the relation's dims (possibly repeated).
    labels: Vec<Vec<Label>>,
    /// Per operand: the dense axes kept.
    axes: Vec<Vec<usize>>,
    /// Output labels in order.
    output: Vec<Label>,
    /// Every label in order of first appearance.
    order: Vec<Label>,
    size: HashMap<Label, usize>,
    block: HashMap<Label, usize>,
    letter: HashMap<Label, char>,
    names: Vec<String>,
    output_name: String,
}

impl Analysis {
    fn blocks(&self, l: Label) -> u32 {
        self.size[&l].div_ceil(self.block[&l]) as u32
    }
    fn decl(&self, labels: &[Label]) -> InputDecl {
        InputDecl {
            key_bounds: labels.iter().map(|l| i64::from(self.blocks(*l))).collect(),
            array_bounds: labels.iter().map(|l| self.block[l] as i64).collect(),
            placement: PlacementDecl::Any,
        }
    }
    fn letters(&self, labels: &[Label]) -> String {
        labels.iter().map(|l| self.letter[l]).collect()
    }
    fn spec(&self, inputs: &[&[Label]], output: &[Label]) -> KernelRef {
        EinSumSpec {
            inputs: inputs.iter().map(|l| l.iter().map(|x| self.letter[x]).collect()).collect(),
            output: output.iter().map(|x| self.letter[x]).collect(),
        }
        .kernel()
    }
    /// Floats of a relation with these labels.
    fn floats(&self, labels: &[Label]) -> u64 {
        labels.iter().fold(1u64, |a, l| a.saturating_mul(u64::from(self.blocks(*l)) * self.block[l] as u64))
    }
}

fn describe(l: Label) -> String {
    if l >= ELLIPSIS {
        format!("axis {} of `...`", l - ELLIPSIS)
    } else {
        format!("index `{}`", char::from_u32(l).unwrap_or('?'))
    }
}

fn index_name(l: Label) -> String {
    if l >= ELLIPSIS {
        format!("...{}", l - ELLIPSIS)
    } else {
        char::from_u32(l).unwrap_or('?').to_string()
    }
}

fn analyze(req: &Request, p: &Parsed) -> Result<Analysis, EinsumError> {
    let expr = req.expression.as_str();
    let at = |pos: usize, code: ErrorCode, msg: String| EinsumError::at_pos(expr, pos, code, msg);
    let names: Vec<String> = req.operands.iter().map(|o| o.name.clone()).collect();

    // Names.
    for (i, n) in names.iter().enumerate() {
        if n.is_empty() {
            return Err(EinsumError::field(
                expr,
                "inputs",
                ErrorCode::BadField,
                format!("operand {i} has an empty name"),
            ));
        }
        if names[..i].contains(n) {
            return Err(EinsumError::field(
                expr,
                format!("inputs.{n}"),
                ErrorCode::BadField,
                format!(
                    "two operands are named `{n}`: give each operand its own name (the same data may be given twice)"
                ),
            ));
        }
    }
    let output_name = req.output.clone().unwrap_or_else(|| DEFAULT_OUTPUT.to_string());
    if output_name.is_empty() || names.contains(&output_name) {
        return Err(EinsumError::field(
            expr,
            "output",
            ErrorCode::BadField,
            format!("the output's name `{output_name}` must be non-empty and differ from the operands' names"),
        ));
    }

    // Operand count.
    let (k, n) = (p.inputs.len(), req.operands.len());
    if n > MAX_OPERANDS {
        return Err(EinsumError::field(
            expr,
            "inputs",
            ErrorCode::LimitExceeded,
            format!("{n} operands: an einsum takes at most {MAX_OPERANDS} (as numpy's)"),
        ));
    }
    if k != n {
        let terms: Vec<String> = p.inputs.iter().map(|t| format!("`{}`", t.text())).collect();
        let given = if names.is_empty() { "none".to_string() } else { names.join(", ") };
        return Err(if k > n {
            at(
                p.inputs[n].start,
                ErrorCode::BadField,
                format!(
                    "the expression has {k} operand terms ({}) but {n} input{} given ({given}): term `{}` has no input",
                    terms.join(", "),
                    if n == 1 { " was" } else { "s were" },
                    p.inputs[n].text()
                ),
            )
        } else {
            at(
                p.inputs_end,
                ErrorCode::BadField,
                format!(
                    "the expression has {k} operand term{} ({}) but {n} inputs were given ({given})",
                    if k == 1 { "" } else { "s" },
                    terms.join(", ")
                ),
            )
        });
    }

    // Ranks, ellipses, occurrences.
    let mut ell = vec![0usize; n];
    for (i, (t, o)) in p.inputs.iter().zip(&req.operands).enumerate() {
        let (r, named) = (o.shape.len(), t.letters());
        let ok = if t.ellipsis().is_some() { named <= r } else { named == r };
        if !ok {
            let hint =
                if named < r && t.ellipsis().is_none() { " (write `...` for the axes it does not name)" } else { "" };
            return Err(at(
                t.start,
                ErrorCode::BadField,
                format!(
                    "operand {} has {r} axes (shape {:?}) but its term `{}` names {named}{hint}",
                    names[i],
                    o.shape,
                    t.text()
                ),
            ));
        }
        ell[i] = r - named;
    }
    let e_max = ell.iter().copied().max().unwrap_or(0);
    let mut occ: BTreeMap<Label, Vec<Occurrence>> = BTreeMap::new();
    let mut first_seen: Vec<Label> = Vec::new();
    let mut op_labels: Vec<Vec<(Label, usize)>> = Vec::new(); // (label, pos) per dense axis
    for (i, (t, o)) in p.inputs.iter().zip(&req.operands).enumerate() {
        let mut labels = Vec::new();
        for item in &t.items {
            match *item {
                Item::Letter(c, pos) => labels.push((c as Label, pos)),
                Item::Ellipsis(pos) => {
                    labels.extend((0..ell[i]).map(|j| (ELLIPSIS + (e_max - ell[i] + j) as Label, pos)))
                }
            }
        }
        for (axis, &(l, pos)) in labels.iter().enumerate() {
            if !first_seen.contains(&l) {
                first_seen.push(l);
            }
            occ.entry(l).or_default().push(Occurrence { operand: i, axis, pos, size: o.shape[axis] });
        }
        op_labels.push(labels);
    }

    // Output.
    let output: Vec<Label> = match &p.output {
        Some(t) => {
            let mut out = Vec::new();
            for item in &t.items {
                match *item {
                    Item::Letter(c, pos) => {
                        let l = c as Label;
                        if out.contains(&l) {
                            return Err(at(
                                pos,
                                ErrorCode::BadExpression,
                                format!("index `{c}` appears twice in the output"),
                            ));
                        }
                        if !occ.contains_key(&l) {
                            return Err(at(
                                pos,
                                ErrorCode::BadExpression,
                                format!("output index `{c}` appears in no operand, so it has no size"),
                            ));
                        }
                        out.push(l);
                    }
                    Item::Ellipsis(_) => out.extend((0..e_max).map(|j| ELLIPSIS + j as Label)),
                }
            }
            if e_max > 0 && t.ellipsis().is_none() {
                return Err(at(
                    t.start,
                    ErrorCode::BadExpression,
                    format!(
                        "the operands' `...` stand for {e_max} axis/axes, but the output has no `...` to say where they go"
                    ),
                ));
            }
            out
        }
        None => {
            let mut out: Vec<Label> = (0..e_max).map(|j| ELLIPSIS + j as Label).collect();
            let mut once: Vec<Label> =
                occ.iter().filter(|(l, o)| **l < ELLIPSIS && o.len() == 1).map(|(l, _)| *l).collect();
            once.sort_unstable();
            out.extend(once);
            out
        }
    };

    // Sizes: equal within an operand; across operands equal, or 1 (broadcast).
    let mut size = HashMap::new();
    for (&l, os) in &occ {
        for (j, o) in os.iter().enumerate() {
            if let Some(prev) = os[..j].iter().find(|p| p.operand == o.operand && p.size != o.size) {
                return Err(at(
                    o.pos,
                    ErrorCode::BoundsMismatch,
                    format!(
                        "{} appears twice in {} with sizes {} (axis {}) and {} (axis {}): a diagonal needs equal sizes",
                        describe(l),
                        names[o.operand],
                        prev.size,
                        prev.axis,
                        o.size,
                        o.axis
                    ),
                ));
            }
        }
        let first_big = os.iter().find(|o| o.size != 1);
        if let Some(fb) = first_big {
            if let Some(o) = os.iter().find(|o| o.size != 1 && o.size != fb.size) {
                return Err(at(
                    o.pos,
                    ErrorCode::BoundsMismatch,
                    format!(
                        "{} has size {} in {} (axis {}) but size {} in {} (axis {})",
                        describe(l),
                        o.size,
                        names[o.operand],
                        o.axis,
                        fb.size,
                        names[fb.operand],
                        fb.axis
                    ),
                ));
            }
        }
        let s = first_big.map_or(1, |o| o.size);
        if s == 0 {
            let o = os[0];
            return Err(at(
                o.pos,
                ErrorCode::BadBounds,
                format!("{} has size 0 in {}: tra cannot cut an empty axis into blocks", describe(l), names[o.operand]),
            ));
        }
        size.insert(l, s);
    }

    // Blocks: the smallest asked for an index, at most its size.
    let default = req.block.unwrap_or(DEFAULT_BLOCK);
    if default == 0 {
        return Err(EinsumError::field(expr, "block", ErrorCode::BadField, "the block size must be at least 1"));
    }
    let mut asked: Vec<Vec<usize>> = Vec::new();
    for o in &req.operands {
        let v = match &o.block {
            None => vec![default; o.shape.len()],
            Some(BlockSpec::All(b)) => vec![*b; o.shape.len()],
            Some(BlockSpec::PerAxis(v)) => {
                if v.len() != o.shape.len() {
                    return Err(EinsumError::field(
                        expr,
                        format!("inputs.{}.block", o.name),
                        ErrorCode::BadField,
                        format!(
                            "operand {} has {} axes (shape {:?}) but {} block sizes were given",
                            o.name,
                            o.shape.len(),
                            o.shape,
                            v.len()
                        ),
                    ));
                }
                v.clone()
            }
        };
        if v.contains(&0) {
            return Err(EinsumError::field(
                expr,
                format!("inputs.{}.block", o.name),
                ErrorCode::BadField,
                format!("operand {}: block sizes must be at least 1, got {v:?}", o.name),
            ));
        }
        asked.push(v);
    }
    let mut block = HashMap::new();
    let mut labels = vec![Vec::new(); n];
    let mut axes = vec![Vec::new(); n];
    for (&l, os) in &occ {
        let s = size[&l];
        let mut b = s;
        for o in os.iter().filter(|o| o.size == s) {
            b = b.min(asked[o.operand][o.axis]);
        }
        // Sizes in 64 bits: a key bound is a u32, so an index may have at
        // most u32::MAX blocks (a larger count used to wrap around silently).
        let blocks = (s as u64).div_ceil(b as u64);
        if blocks > u64::from(u32::MAX) {
            let o = os[0];
            let min_block = (s as u64).div_ceil(u64::from(u32::MAX));
            return Err(at(
                o.pos,
                ErrorCode::BadBounds,
                format!(
                    "{} has size {s} in {}: in blocks of {b} that is {blocks} blocks, more than a key bound can \
                     hold ({}); use a block of at least {min_block}",
                    describe(l),
                    names[o.operand],
                    u32::MAX
                ),
            ));
        }
        block.insert(l, b);
    }
    // Every operand and the output must have a size that fits 64 bits
    // (padded to whole blocks).
    let padded = |l: &Label| (size[l] as u64).div_ceil(block[l] as u64).checked_mul(block[l] as u64);
    let overflows =
        |ls: &[Label]| ls.iter().try_fold(1u64, |acc, l| padded(l).and_then(|p| acc.checked_mul(p))).is_none();
    for (i, t) in p.inputs.iter().enumerate() {
        let labels: Vec<Label> = op_labels[i].iter().map(|(l, _)| *l).collect();
        if overflows(&labels) {
            return Err(at(
                t.start,
                ErrorCode::BadBounds,
                format!(
                    "operand {} of shape {:?} has more than 2^64 elements (padded to whole blocks)",
                    names[i], req.operands[i].shape
                ),
            ));
        }
    }
    if overflows(&output) {
        let shape: Vec<usize> = output.iter().map(|l| size[l]).collect();
        let pos = p.output.as_ref().map_or(p.inputs_end, |t| t.start);
        return Err(at(
            pos,
            ErrorCode::BadBounds,
            format!("the output of shape {shape:?} has more than 2^64 elements (padded to whole blocks)"),
        ));
    }
    for (i, ls) in op_labels.iter().enumerate() {
        for (axis, &(l, _)) in ls.iter().enumerate() {
            // A size-1 axis against a larger size broadcasts: dropped.
            if req.operands[i].shape[axis] == size[&l] {
                labels[i].push(l);
                axes[i].push(axis);
            }
        }
    }

    // Letters for einSum specs: letters stand for themselves, axes of `...`
    // take unused letters.
    let mut letter = HashMap::new();
    let used: HashSet<char> = occ.keys().filter(|l| **l < ELLIPSIS).filter_map(|l| char::from_u32(*l)).collect();
    let mut spare = ('a'..='z').rev().chain(('A'..='Z').rev()).filter(|c| !used.contains(c));
    for &l in occ.keys() {
        let c = if l < ELLIPSIS {
            char::from_u32(l).expect("a letter")
        } else {
            match spare.next() {
                Some(c) => c,
                None => {
                    let pos = p.inputs.iter().find_map(|t| t.ellipsis()).unwrap_or(0);
                    return Err(at(
                        pos,
                        ErrorCode::LimitExceeded,
                        "the letters and the axes of `...` need more than 52 distinct indices".into(),
                    ));
                }
            }
        };
        letter.insert(l, c);
    }
    Ok(Analysis {
        expr: expr.to_string(),
        labels,
        axes,
        output,
        order: first_seen,
        size,
        block,
        letter,
        names,
        output_name,
    })
}

// ---------------------------------------------------------------------------
// Program pieces
// ---------------------------------------------------------------------------

fn key_fn(text: &str) -> KeyFn {
    KeyFn::parse(text).expect("generated key expressions parse")
}

fn positions(of: &[Label], within: &[Label]) -> Vec<usize> {
    of.iter().map(|l| within.iter().position(|m| m == l).expect("a label of the relation")).collect()
}

fn permute_key(perm: &[usize]) -> KeyFn {
    let parts: Vec<String> = perm.iter().map(|p| format!("k{p}")).collect();
    key_fn(&format!("[{}]", parts.join(", ")))
}

fn distinct(l: &[Label]) -> Vec<Label> {
    let mut out: Vec<Label> = Vec::new();
    for &x in l {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

fn same_set(a: &[Label], b: &[Label]) -> bool {
    a.len() == b.len() && a.iter().all(|x| b.contains(x))
}

/// Names nodes: `base`, or `base2`, `base3`… when taken.
struct Names {
    taken: HashSet<String>,
}

impl Names {
    fn fresh(&mut self, base: &str) -> String {
        let name = if !self.taken.contains(base) {
            base.to_string()
        } else {
            (2..).map(|i| format!("{base}{i}")).find(|n| !self.taken.contains(n)).expect("a free name")
        };
        self.taken.insert(name.clone());
        name
    }
}

/// The nodes that reduce one operand (`x`, labels `l`) to the labels
/// `target` (distinct, a subset of `l`'s, in the wanted order): diagonal of
/// repeated labels, sums of the others, permutation. Empty when `l` is
/// already `target`.
fn unary_ops(
    a: &Analysis,
    x: &str,
    l: &[Label],
    target: &[Label],
    base: &str,
    names: &mut Names,
) -> Vec<(String, TraOp)> {
    let mut ops: Vec<(String, TraOp)> = Vec::new();
    let d = distinct(l);
    let mut cur = x.to_string();
    let repeated = d.len() != l.len();
    if repeated {
        let mut conds = Vec::new();
        for (p, lab) in l.iter().enumerate() {
            let first = l.iter().position(|m| m == lab).expect("present");
            if first != p {
                conds.push(format!("k{first} == k{p}"));
            }
        }
        let predicate = Predicate::parse(&conds.join(" && ")).expect("generated predicates parse");
        let f = names.fresh(&format!("{base}_diag"));
        ops.push((f.clone(), TraOp::Filter { input: cur, predicate }));
        let first_positions: Vec<usize> =
            d.iter().map(|lab| l.iter().position(|m| m == lab).expect("present")).collect();
        let r = names.fresh(&format!("{base}_diag_key"));
        ops.push((r.clone(), TraOp::Rekey { input: f, key: permute_key(&first_positions) }));
        cur = r;
    }
    // The key is now `d`.
    let sums = !same_set(&d, target);
    if repeated || target != d.as_slice() {
        let t = names.fresh(&format!("{base}_ein"));
        ops.push((t.clone(), TraOp::Transform { input: cur, kernel: a.spec(&[l], target) }));
        cur = t;
    }
    if sums {
        let s = names.fresh(&format!("{base}_sum"));
        ops.push((
            s,
            TraOp::Aggregate { input: cur, group_by: positions(target, &d), kernel: KernelRef::named("matAdd") },
        ));
    } else if target != d.as_slice() {
        let r = names.fresh(&format!("{base}_perm"));
        ops.push((r, TraOp::Rekey { input: cur, key: permute_key(&positions(target, &d)) }));
    }
    ops
}

/// `(swap, kernel, left key dim, right key dim, group_by)` when the
/// contraction is a block matrix product.
fn matmul_form(lx: &[Label], ly: &[Label], res: &[Label]) -> Option<(bool, &'static str, usize, usize, Vec<usize>)> {
    if lx.len() != 2 || ly.len() != 2 || res.len() != 2 || lx[0] == lx[1] || ly[0] == ly[1] || res[0] == res[1] {
        return None;
    }
    let shared: Vec<Label> = lx.iter().copied().filter(|l| ly.contains(l)).collect();
    let [b] = shared.as_slice() else { return None };
    if res.contains(b) {
        return None;
    }
    for (swap, l, r) in [(false, lx, ly), (true, ly, lx)] {
        let lb = l.iter().position(|x| x == b).expect("shared");
        let rb = r.iter().position(|x| x == b).expect("shared");
        let (a, c) = (l[1 - lb], r[1 - rb]);
        if res == [a, c] {
            let kernel = match (lb == 0, rb == 1) {
                (false, false) => "matMul",
                (true, false) => "matMulTN",
                (false, true) => "matMulNT",
                (true, true) => "matMulTT",
            };
            // Join key: l ++ [c]; a is at 1 - lb, c at 2.
            return Some((swap, kernel, lb, rb, vec![1 - lb, 2]));
        }
    }
    None
}

/// The nodes of one pairwise contraction of `x` (labels `lx`) and `y`
/// (labels `ly`, both distinct) into `res` (distinct, in order): a join on
/// the shared labels with `einSum` (or a matrix product), then an aggregate
/// summing the labels not in `res`, or a rekey when only the order differs.
/// The last node is named `last`. Returns the nodes and the kernel.
fn contraction_ops(
    a: &Analysis,
    (x, lx): (&str, &[Label]),
    (y, ly): (&str, &[Label]),
    res: &[Label],
    join_name: &str,
    last: &str,
) -> (Vec<(String, TraOp)>, KernelRef) {
    if let Some((swap, kernel, lk, rk, group_by)) = matmul_form(lx, ly, res) {
        let ((l, _), (r, _)) = if swap { ((y, ly), (x, lx)) } else { ((x, lx), (y, ly)) };
        let k = KernelRef::named(kernel);
        let join = TraOp::Join {
            left: l.to_string(),
            right: r.to_string(),
            left_keys: vec![lk],
            right_keys: vec![rk],
            kernel: k.clone(),
        };
        let agg = TraOp::Aggregate { input: join_name.to_string(), group_by, kernel: KernelRef::named("matAdd") };
        return (vec![(join_name.to_string(), join), (last.to_string(), agg)], k);
    }
    let shared: Vec<Label> = lx.iter().copied().filter(|l| ly.contains(l)).collect();
    let left_keys = positions(&shared, lx);
    let right_keys = positions(&shared, ly);
    let mut j: Vec<Label> = lx.to_vec();
    j.extend(ly.iter().copied().filter(|l| !shared.contains(l)));
    let kernel = a.spec(&[lx, ly], res);
    let join = |name: &str| {
        (
            name.to_string(),
            TraOp::Join {
                left: x.into(),
                right: y.into(),
                left_keys: left_keys.clone(),
                right_keys: right_keys.clone(),
                kernel: kernel.clone(),
            },
        )
    };
    let ops = if j == res {
        vec![join(last)]
    } else if same_set(&j, res) {
        vec![
            join(join_name),
            (last.to_string(), TraOp::Rekey { input: join_name.into(), key: permute_key(&positions(res, &j)) }),
        ]
    } else {
        vec![
            join(join_name),
            (
                last.to_string(),
                TraOp::Aggregate {
                    input: join_name.into(),
                    group_by: positions(res, &j),
                    kernel: KernelRef::named("matAdd"),
                },
            ),
        ]
    };
    (ops, kernel)
}

// ---------------------------------------------------------------------------
// Order search
// ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Tree {
    Leaf(usize),
    Node(Box<Tree>, Box<Tree>),
}

impl Tree {
    fn mask(&self) -> u64 {
        match self {
            Tree::Leaf(i) => 1 << i,
            Tree::Node(l, r) => l.mask() | r.mask(),
        }
    }
}

struct Search<'a, 'o> {
    a: &'a Analysis,
    opts: &'o Options<'o>,
    cluster: Cluster,
    /// Labels of each (reduced) operand.
    rels: Vec<Vec<Label>>,
    memo: HashMap<PairKey, Cost>,
    /// Past it, candidates are costed by their Table-1 plan (no saturation).
    deadline: Instant,
}

/// A candidate contraction: left labels, right labels, result labels.
type PairKey = (Vec<Label>, Vec<Label>, Vec<Label>);
/// A greedy candidate: score, the two positions, the result's labels.
type Pick = ((f64, u64, u64), usize, usize, Vec<Label>);

impl Search<'_, '_> {
    fn labels_of(&self, mask: u64) -> Vec<Label> {
        let mut out = Vec::new();
        for (i, r) in self.rels.iter().enumerate() {
            if mask & (1 << i) != 0 {
                for &l in r {
                    if !out.contains(&l) {
                        out.push(l);
                    }
                }
            }
        }
        out
    }

    /// The labels of the contraction of `lx` and `ly` covering operands
    /// `mask`: the output's order for the last one, else the join's key
    /// order without the labels nothing later needs.
    fn result(&self, lx: &[Label], ly: &[Label], mask: u64) -> Vec<Label> {
        let full = (1u64 << self.rels.len()) - 1;
        if mask == full {
            return self.a.output.clone();
        }
        let outside = self.labels_of(full & !mask);
        let mut j: Vec<Label> = lx.to_vec();
        j.extend(ly.iter().copied().filter(|l| !lx.contains(l)));
        j.into_iter().filter(|l| self.a.output.contains(l) || outside.contains(l)).collect()
    }

    /// The cost of one contraction as a two-input program.
    fn pair_cost(&mut self, lx: &[Label], ly: &[Label], res: &[Label]) -> Cost {
        let key = (lx.to_vec(), ly.to_vec(), res.to_vec());
        if let Some(c) = self.memo.get(&key) {
            return *c;
        }
        let (ops, _) = contraction_ops(self.a, ("L", lx), ("R", ly), res, "J", "Z");
        let mut inputs = IndexMap::new();
        inputs.insert("L".to_string(), self.a.decl(lx));
        inputs.insert("R".to_string(), self.a.decl(ly));
        let program = Program {
            inputs,
            nodes: ops.into_iter().collect(),
            outputs: vec!["Z".into()],
            cluster: Some(self.cluster),
        };
        let w = Weights { network: self.cluster.network_weight, compute: self.cluster.compute_weight };
        let optimized = if Instant::now() < self.deadline {
            optimize(&program, self.opts.rules, &self.opts.limits).ok().map(|a| a.cost)
        } else {
            None
        };
        let cost = optimized.or_else(|| table1_cost(&program, w)).unwrap_or(Cost {
            network_floats: u64::MAX,
            flops: u64::MAX,
            total: f64::INFINITY,
        });
        self.memo.insert(key, cost);
        cost
    }

    /// Cost and labels of a tree.
    fn tree_cost(&mut self, t: &Tree) -> (Cost, Vec<Label>) {
        match t {
            Tree::Leaf(i) => (Cost::default(), self.rels[*i].clone()),
            Tree::Node(l, r) => {
                let (cl, ll) = self.tree_cost(l);
                let (cr, lr) = self.tree_cost(r);
                let res = self.result(&ll, &lr, t.mask());
                let c = self.pair_cost(&ll, &lr, &res);
                (cl + cr + c, res)
            }
        }
    }

    /// Dynamic programming over subsets; `None` when out of time.
    fn dp(&mut self, deadline: Instant) -> Option<Tree> {
        let n = self.rels.len();
        let full = (1u64 << n) - 1;
        let mut best: HashMap<u64, (Cost, Vec<Label>, Tree)> = HashMap::new();
        for i in 0..n {
            best.insert(1 << i, (Cost::default(), self.rels[i].clone(), Tree::Leaf(i)));
        }
        for mask in 1..=full {
            if mask.count_ones() < 2 {
                continue;
            }
            let low = mask & mask.wrapping_neg();
            let mut sub = (mask - 1) & mask;
            let mut chosen: Option<(Cost, Vec<Label>, Tree)> = None;
            while sub > 0 {
                if sub & low != 0 {
                    if Instant::now() > deadline {
                        return None;
                    }
                    let (cl, ll, tl) = best[&sub].clone();
                    let (cr, lr, tr) = best[&(mask & !sub)].clone();
                    let res = self.result(&ll, &lr, mask);
                    let c = cl + cr + self.pair_cost(&ll, &lr, &res);
                    let better = match &chosen {
                        Some((b, _, _)) => c.lt(b),
                        None => true,
                    };
                    if better {
                        chosen = Some((c, res, Tree::Node(Box::new(tl), Box::new(tr))));
                    }
                }
                sub = (sub - 1) & mask;
            }
            best.insert(mask, chosen.expect("a split"));
        }
        best.remove(&full).map(|(_, _, t)| t)
    }

    /// The cheapest pair first, repeatedly. Only pairs that share an index
    /// are candidates while there are any (a product of unrelated operands
    /// is cheap now and costly later); a pair's score is its cost plus the
    /// network weight times the floats of its result, which later steps move.
    fn greedy(&mut self) -> Tree {
        let mut cur: Vec<(Tree, Vec<Label>)> =
            self.rels.iter().cloned().enumerate().map(|(i, l)| (Tree::Leaf(i), l)).collect();
        while cur.len() > 1 {
            let connected = |x: &[Label], y: &[Label]| x.iter().any(|l| y.contains(l));
            let any_connected = (0..cur.len()).any(|i| (i + 1..cur.len()).any(|j| connected(&cur[i].1, &cur[j].1)));
            let mut pick: Option<Pick> = None;
            for i in 0..cur.len() {
                for j in i + 1..cur.len() {
                    if any_connected && !connected(&cur[i].1, &cur[j].1) {
                        continue;
                    }
                    let mask = cur[i].0.mask() | cur[j].0.mask();
                    let res = self.result(&cur[i].1, &cur[j].1, mask);
                    let c = self.pair_cost(&cur[i].1, &cur[j].1, &res);
                    let later = if cur.len() > 2 { self.a.floats(&res) } else { 0 };
                    let score = (c.total + self.cluster.network_weight * later as f64, c.flops, later);
                    if !pick.as_ref().is_some_and(|(k, ..)| score >= *k) {
                        pick = Some((score, i, j, res));
                    }
                }
            }
            let (_, i, j, res) = pick.expect("two relations");
            let (tj, _) = cur.remove(j);
            let (ti, _) = cur.remove(i);
            cur.insert(i, (Tree::Node(Box::new(ti), Box::new(tj)), res));
        }
        cur.pop().expect("one tree").0
    }
}

/// Writes the contractions of an order tree as program nodes.
struct Emitter {
    names: Names,
    nodes: IndexMap<String, TraOp>,
    steps: Vec<Step>,
    /// The sum of the steps' costs, when costed.
    total: Option<Cost>,
    /// Readable base names: a leaf's operand name, a node's concatenation.
    label: HashMap<String, String>,
}

impl Emitter {
    /// Emits `t` post-order; its node name and labels.
    fn emit(
        &mut self,
        t: &Tree,
        root: bool,
        s: &mut Search<'_, '_>,
        rels: &[(String, Vec<Label>)],
    ) -> (String, Vec<Label>) {
        match t {
            Tree::Leaf(i) => {
                let (name, l) = &rels[*i];
                self.label.insert(name.clone(), s.a.names[*i].clone());
                (name.clone(), l.clone())
            }
            Tree::Node(l, r) => {
                let (xn, xl) = self.emit(l, false, s, rels);
                let (yn, yl) = self.emit(r, false, s, rels);
                let res = s.result(&xl, &yl, t.mask());
                let base = format!("{}{}", self.label[&xn], self.label[&yn]);
                let join_name = self.names.fresh(&format!("{base}_join"));
                let last = if root { s.a.output_name.clone() } else { self.names.fresh(&base) };
                let (ops, kernel) = contraction_ops(s.a, (&xn, &xl), (&yn, &yl), &res, &join_name, &last);
                let cost = self.total.is_some().then(|| s.pair_cost(&xl, &yl, &res));
                if let (Some(t), Some(c)) = (self.total.as_mut(), cost) {
                    *t = *t + c;
                }
                self.steps.push(Step {
                    left: xn,
                    right: yn,
                    result: last.clone(),
                    einsum: format!("{},{}->{}", s.a.letters(&xl), s.a.letters(&yl), s.a.letters(&res)),
                    kernel: kernel.to_string(),
                    cost,
                });
                self.nodes.extend(ops);
                self.label.insert(last.clone(), base);
                (last, res)
            }
        }
    }
}

/// The cost of a program's Table-1 compilation.
fn table1_cost(p: &Program, w: Weights) -> Option<Cost> {
    let typed = check_program(p).ok()?;
    let plan = table1(p, &typed);
    let sites = p.cluster().sites;
    let typed_plan = check_plan(&plan, sites).ok()?;
    let report = plan_report(&plan, &typed_plan, sites, w);
    Some(report.values().fold(Cost::default(), |c, r| c + Cost::new(r.network_floats, r.flops, w)))
}

// ---------------------------------------------------------------------------
// The compiler
// ---------------------------------------------------------------------------

/// Check an expression's syntax alone (no shapes): the error, with its
/// position, if it does not parse.
pub fn check_syntax(expression: &str) -> Result<(), EinsumError> {
    parse(expression).map(|_| ())
}

/// Compile an einsum into a TRA program (see the module doc).
pub fn compile(req: &Request, opts: &Options<'_>) -> Result<Compiled, EinsumError> {
    let start = Instant::now();
    let parsed = parse(&req.expression)?;
    let a = analyze(req, &parsed)?;
    let cluster = req.cluster.unwrap_or_default();
    let n = req.operands.len();
    let mut names = Names { taken: a.names.iter().cloned().chain([a.output_name.clone()]).collect() };
    let mut nodes: IndexMap<String, TraOp> = IndexMap::new();

    // Each operand on its own: diagonals, private sums (and for a single
    // operand, the output's order).
    let mut rels: Vec<(String, Vec<Label>)> = Vec::new();
    for i in 0..n {
        let l = &a.labels[i];
        let needed =
            |x: &Label| a.output.contains(x) || a.labels.iter().enumerate().any(|(j, m)| j != i && m.contains(x));
        let target: Vec<Label> =
            if n == 1 { a.output.clone() } else { distinct(l).into_iter().filter(needed).collect() };
        let mut ops = unary_ops(&a, &a.names[i], l, &target, &a.names[i], &mut names);
        if n == 1 {
            if ops.is_empty() {
                ops.push((String::new(), TraOp::Transform { input: a.names[i].clone(), kernel: a.spec(&[l], l) }));
            }
            // The last node is the output.
            let last = ops.len() - 1;
            ops[last].0 = a.output_name.clone();
        }
        let name = ops.last().map_or_else(|| a.names[i].clone(), |(n, _)| n.clone());
        nodes.extend(ops);
        rels.push((name, target));
    }

    // The contraction order.
    let mut search = Search {
        a: &a,
        opts,
        cluster,
        rels: rels.iter().map(|(_, l)| l.clone()).collect(),
        memo: HashMap::new(),
        deadline: start + opts.search_time,
    };
    let (method, tree) = match n {
        1 => ("unary", None),
        2 => ("pair", Some(Tree::Node(Box::new(Tree::Leaf(0)), Box::new(Tree::Leaf(1))))),
        _ => {
            let dp = if n <= DP_MAX_OPERANDS { search.dp(search.deadline) } else { None };
            match dp {
                Some(t) => ("dp", Some(t)),
                None => ("greedy", Some(search.greedy())),
            }
        }
    };
    let costed = n > 2;
    let left_to_right = costed.then(|| {
        let mut t = Tree::Leaf(0);
        for i in 1..n {
            t = Tree::Node(Box::new(t), Box::new(Tree::Leaf(i)));
        }
        search.tree_cost(&t).0
    });
    let total: Option<Cost> = costed.then(Cost::default);

    // Emit the contractions, post-order.
    let mut em = Emitter { names, nodes, steps: Vec::new(), total, label: HashMap::new() };
    if let Some(t) = &tree {
        em.emit(t, true, &mut search, &rels);
    }
    let Emitter { nodes, steps, total, .. } = em;
    let candidates_costed = search.memo.len();

    let mut inputs = IndexMap::new();
    for i in 0..n {
        inputs.insert(a.names[i].clone(), a.decl(&a.labels[i]));
    }
    let program = Program { inputs, nodes, outputs: vec![a.output_name.clone()], cluster: req.cluster };
    check_program(&program).map_err(|e| match e.code {
        // An intermediate of the contraction too large to describe, or to
        // enumerate: a property of the request, not a bug.
        ErrorCode::BadBounds | ErrorCode::LimitExceeded => EinsumError::field(
            &a.expr,
            "",
            e.code,
            format!("the program compiled from `{}` is too large: node {}: {}", a.expr, e.at, e.message),
        ),
        _ => EinsumError::field(
            &a.expr,
            "",
            e.code,
            format!("internal error: the program compiled from `{}` does not check: {}", a.expr, e.message),
        ),
    })?;

    let operands = (0..n)
        .map(|i| OperandInfo {
            name: a.names[i].clone(),
            term: parsed.inputs[i].text(),
            shape: req.operands[i].shape.clone(),
            relation_axes: a.axes[i].clone(),
            letters: a.letters(&a.labels[i]),
            key_bounds: a.labels[i].iter().map(|l| a.blocks(*l)).collect(),
            array_bounds: a.labels[i].iter().map(|l| a.block[l]).collect(),
        })
        .collect();
    let indices: Vec<IndexInfo> = a
        .order
        .iter()
        .map(|&l| IndexInfo {
            index: index_name(l),
            letter: a.letter[&l],
            size: a.size[&l],
            block: a.block[&l],
            blocks: a.blocks(l),
            padding: a.blocks(l) as usize * a.block[&l] - a.size[&l],
            summed: !a.output.contains(&l),
        })
        .collect();
    let output = OutputInfo {
        name: a.output_name.clone(),
        letters: a.letters(&a.output),
        shape: a.output.iter().map(|l| a.size[l]).collect(),
        key_bounds: a.output.iter().map(|l| a.blocks(*l)).collect(),
        array_bounds: a.output.iter().map(|l| a.block[l]).collect(),
        cropped: a.output.iter().any(|l| a.blocks(*l) as usize * a.block[l] != a.size[l]),
    };
    let padded: Vec<String> =
        indices.iter().filter(|i| i.padding > 0).map(|i| format!("{} (+{})", i.index, i.padding)).collect();
    let padding = if padded.is_empty() {
        "every block size divides its index's size: no padding".to_string()
    } else {
        format!(
            "the last block of {} is zero-padded (zeros do not change sums of products); the dense output is the \
             result relation cropped to shape {:?}",
            padded.join(", "),
            output.shape
        )
    };
    Ok(Compiled {
        program,
        operands,
        output,
        indices,
        order: Order {
            method: method.to_string(),
            steps,
            cost: total,
            left_to_right_cost: left_to_right,
            candidates_costed,
            search_ms: start.elapsed().as_secs_f64() * 1e3,
        },
        padding,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::Operator;

    fn req(expr: &str, shapes: &[&[usize]], block: usize) -> Request {
        Request {
            expression: expr.into(),
            operands: shapes
                .iter()
                .enumerate()
                .map(|(i, s)| Operand { name: ((b'A' + i as u8) as char).to_string(), shape: s.to_vec(), block: None })
                .collect(),
            block: Some(block),
            output: None,
            cluster: None,
        }
    }

    fn go(expr: &str, shapes: &[&[usize]], block: usize) -> Result<Compiled, EinsumError> {
        compile(&req(expr, shapes, block), &Options::new(&[]))
    }

    fn err(expr: &str, shapes: &[&[usize]]) -> EinsumError {
        go(expr, shapes, 2).unwrap_err()
    }

    #[test]
    fn matmul_is_the_papers_program() {
        let c = go("ij,jk->ik", &[&[4, 6], &[6, 2]], 2).unwrap();
        let p = &c.program;
        assert_eq!(p.inputs["A"].key_bounds, vec![2, 3]);
        assert_eq!(p.inputs["A"].array_bounds, vec![2, 2]);
        assert_eq!(p.inputs["B"].key_bounds, vec![3, 1]);
        assert_eq!(p.to_sexpr(), "(aggregate [0 2] matAdd (join [1] [0] matMul A B))");
        assert_eq!(c.output.shape, vec![4, 2]);
        assert!(!c.output.cropped);
        assert_eq!(c.order.method, "pair");
        // Transposed forms use the matMul family; the output's order is kept.
        let t = go("ji,jk->ki", &[&[6, 4], &[6, 2]], 2).unwrap();
        assert_eq!(t.program.to_sexpr(), "(aggregate [1 2] matAdd (join [0] [0] matMulTN B A))");
        check_program(&t.program).unwrap();
    }

    #[test]
    fn batched_and_general_contractions_use_einsum() {
        let c = go("bij,bjk->bik", &[&[2, 4, 6], &[2, 6, 3]], 2).unwrap();
        assert_eq!(c.program.to_sexpr(), "(aggregate [0 1 3] matAdd (join [0 2] [0 1] einSum(bij_bjk_bik) A B))");
        let c = go("ijk,jkl->il", &[&[2, 3, 4], &[3, 4, 5]], 2).unwrap();
        assert_eq!(c.program.to_sexpr(), "(aggregate [0 3] matAdd (join [1 2] [0 1] einSum(ijk_jkl_il) A B))");
        assert_eq!(c.output.shape, vec![2, 5]);
        assert!(c.output.cropped);
        // An outer product needs no aggregation.
        let c = go("i,j->ij", &[&[3], &[4]], 2).unwrap();
        assert_eq!(c.program.to_sexpr(), "(join [] [] einSum(i_j_ij) A B)");
        let c = go("i,j->ji", &[&[3], &[4]], 2).unwrap();
        assert_eq!(c.program.to_sexpr(), "(rekey \"[k1, k0]\" (join [] [] einSum(i_j_ji) A B))");
    }

    #[test]
    fn unary_forms() {
        let s = |e: &str, sh: &[usize]| go(e, &[sh], 2).unwrap().program.to_sexpr();
        assert_eq!(s("ij->i", &[4, 6]), "(aggregate [0] matAdd (transform einSum(ij_i) A))");
        assert_eq!(s("ij->ji", &[4, 6]), "(rekey \"[k1, k0]\" (transform einSum(ij_ji) A))");
        assert_eq!(s("ij->ij", &[4, 6]), "(transform einSum(ij_ij) A)");
        assert_eq!(s("ii->i", &[4, 4]), "(transform einSum(ii_i) (rekey \"[k0]\" (filter \"k0 == k1\" A)))");
        assert_eq!(
            s("ii", &[4, 4]),
            "(aggregate [] matAdd (transform einSum(ii_) (rekey \"[k0]\" (filter \"k0 == k1\" A))))"
        );
        assert_eq!(go("ii", &[&[4, 4]], 2).unwrap().output.shape, Vec::<usize>::new());
    }

    #[test]
    fn implicit_output_is_numpys() {
        assert_eq!(go("ij,jk", &[&[2, 3], &[3, 4]], 2).unwrap().output.letters, "ik");
        assert_eq!(go("ba,Ab", &[&[2, 3], &[5, 2]], 2).unwrap().output.letters, "Aa");
        assert_eq!(go("ba,Ab", &[&[2, 3], &[5, 2]], 2).unwrap().output.shape, vec![5, 3]);
        assert_eq!(go("ii", &[&[3, 3]], 2).unwrap().output.letters, "");
        assert_eq!(go("...ij,...jk", &[&[6, 2, 3], &[3, 4]], 2).unwrap().output.shape, vec![6, 2, 4]);
    }

    #[test]
    fn broadcasting_and_ellipsis() {
        // A size-1 axis against a larger size is dropped from its relation.
        let c = go("ij,jk->ik", &[&[2, 1], &[3, 4]], 2).unwrap();
        assert_eq!(c.operands[0].relation_axes, vec![0]);
        assert_eq!(c.output.shape, vec![2, 4]);
        let c = go("...i,...i->...", &[&[2, 1, 3], &[4, 3]], 2).unwrap();
        assert_eq!(c.output.shape, vec![2, 4]);
        assert_eq!(c.operands[0].relation_axes, vec![0, 2]);
        check_program(&c.program).unwrap();
    }

    #[test]
    fn padding_and_blocks() {
        let c = go("ij,jk->ik", &[&[5, 3], &[3, 7]], 4).unwrap();
        let i = |x: &str| c.indices.iter().find(|i| i.index == x).unwrap().clone();
        assert_eq!((i("i").block, i("i").blocks, i("i").padding), (4, 2, 3));
        assert_eq!((i("j").block, i("j").blocks, i("j").padding), (3, 1, 0)); // smaller than the block
        assert_eq!((i("k").block, i("k").blocks, i("k").padding), (4, 2, 1));
        assert!(c.output.cropped);
        assert!(c.padding.contains("zero-padded"), "{}", c.padding);
        // Per-operand blocks: the smallest asked for an index wins.
        let mut r = req("ij,jk->ik", &[&[8, 8], &[8, 8]], 8);
        r.operands[1].block = Some(BlockSpec::PerAxis(vec![2, 4]));
        let c = compile(&r, &Options::new(&[])).unwrap();
        assert_eq!(c.program.inputs["A"].array_bounds, vec![8, 2]);
        assert_eq!(c.program.inputs["B"].array_bounds, vec![2, 4]);
    }

    #[test]
    fn sizes_are_checked_in_64_bits() {
        // 5e12 in blocks of 1000 is 5e9 blocks: more than a u32 key bound
        // (it used to wrap around to 705032704 and compile a wrong program).
        let e = go("ij->ij", &[&[5_000_000_000_000, 2]], 1000).unwrap_err();
        assert_eq!((e.code, e.position), (ErrorCode::BadBounds, Some(0)));
        assert!(e.message.contains("index `i` has size 5000000000000"), "{}", e.message);
        assert!(e.message.contains("use a block of at least 1165"), "{}", e.message);
        // In larger blocks it fits the key bound, but not 64 bits of elements.
        let e = go("ij->ij", &[&[1_000_000_000_000_000_000, 1_000_000_000]], 1 << 40).unwrap_err();
        assert_eq!(e.code, ErrorCode::BadBounds);
        assert!(e.message.contains("more than 2^64 elements"), "{}", e.message);
        assert!(!e.message.contains("internal"), "{}", e.message);
        // An outer product whose result overflows is the request's fault too.
        let e = go("i,j->ij", &[&[1 << 40], &[1 << 40]], 1 << 20).unwrap_err();
        assert_eq!(e.code, ErrorCode::BadBounds, "{}", e.message);
        assert!(!e.message.contains("internal"), "{}", e.message);
    }

    #[test]
    fn errors_speak_einsum_with_positions() {
        let e = err("ij,jk->ik", &[&[2, 3], &[4, 5]]);
        assert_eq!(e.code, ErrorCode::BoundsMismatch);
        assert_eq!(e.position, Some(3));
        assert!(e.message.contains("index `j` has size 4 in B (axis 0) but size 3 in A (axis 1)"), "{}", e.message);
        assert_eq!(e.pointer().unwrap(), "  ij,jk->ik\n     ^");
        let e = err("ij,jk->ik", &[&[2, 3]]);
        assert_eq!((e.code, e.position), (ErrorCode::BadField, Some(3)));
        assert!(e.message.contains("2 operand terms"), "{}", e.message);
        let e = err("ij->ij", &[&[2, 3], &[3, 3]]);
        assert_eq!(e.position, Some(2));
        assert!(e.message.contains("2 inputs were given (A, B)"), "{}", e.message);
        let e = err("ij,j1->i", &[&[2, 3], &[3, 3]]);
        assert_eq!((e.code, e.position), (ErrorCode::BadExpression, Some(4)));
        assert!(e.message.contains("`1` is not an index"), "{}", e.message);
        let e = err("ij->iij", &[&[2, 3]]);
        assert_eq!(e.position, Some(5));
        assert!(e.message.contains("appears twice in the output"));
        let e = err("ij->k", &[&[2, 3]]);
        assert_eq!(e.position, Some(4));
        assert!(e.message.contains("`k` appears in no operand"));
        let e = err("ij,jk", &[&[2, 3, 4], &[3, 4]]);
        assert_eq!(e.position, Some(0));
        assert!(e.message.contains("has 3 axes"), "{}", e.message);
        assert_eq!(err("ij.,jk", &[&[2, 3], &[3, 4]]).position, Some(2));
        assert_eq!(err("ij-jk", &[&[2, 3], &[3, 4]]).position, Some(2));
        assert_eq!(err("ij->i->j", &[&[2, 3]]).position, Some(5));
        assert_eq!(err("ij->i,j", &[&[2, 3]]).position, Some(5));
        assert_eq!(err("ii->i", &[&[2, 3]]).position, Some(1));
        assert_eq!(err("...ij->ij", &[&[6, 2, 3]]).code, ErrorCode::BadExpression);
        assert_eq!(err("i,i->i", &[&[0], &[0]]).code, ErrorCode::BadBounds);
        // Spaces are ignored but positions count them.
        assert_eq!(err("ij, jk -> ik", &[&[2, 3], &[4, 5]]).position, Some(4));
        let pe: ProgramError = err("ij,jk->ik", &[&[2, 3], &[4, 5]]).into();
        assert_eq!(pe.at, "expression");
    }

    #[test]
    fn order_is_chosen_by_cost() {
        // A·B·v with a big A, B: (A(Bv)) is far cheaper than ((AB)v).
        let c = compile(&req("ij,jk,k->i", &[&[64, 64], &[64, 64], &[64]], 8), &Options::new(&[])).unwrap();
        assert_eq!(c.order.method, "dp");
        assert_eq!(c.order.steps.len(), 2);
        assert_eq!((c.order.steps[0].left.as_str(), c.order.steps[0].right.as_str()), ("B", "C"));
        let (best, l2r) = (c.order.cost.unwrap(), c.order.left_to_right_cost.unwrap());
        assert!(best.lt(&l2r), "{best:?} vs {l2r:?}");
        check_program(&c.program).unwrap();
        assert_eq!(c.program.nodes.last().unwrap().0, "out");
        assert!(c.program.nodes.values().all(|op| !op.operands().is_empty()));
    }

    #[test]
    fn many_operands_go_greedy_within_the_time() {
        let letters: Vec<char> = "abcdefghijk".chars().collect();
        let terms: Vec<String> = letters.windows(2).map(|w| format!("{}{}", w[0], w[1])).collect();
        let expr = format!("{}->ak", terms.join(","));
        let shapes: Vec<Vec<usize>> = (0..terms.len()).map(|i| vec![4 + i, 5 + i]).collect();
        let refs: Vec<&[usize]> = shapes.iter().map(|s| s.as_slice()).collect();
        let mut opts = Options::new(&[]);
        opts.search_time = Duration::ZERO;
        let c = compile(&req(&expr, &refs, 2), &opts).unwrap();
        assert_eq!(c.order.method, "greedy");
        assert_eq!(c.order.steps.len(), terms.len() - 1);
        assert_eq!(c.output.shape, vec![4, 14]);
        check_program(&c.program).unwrap();
        let too_many: Vec<&[usize]> = vec![&[2]; MAX_OPERANDS + 1];
        let e = go(&vec!["i"; MAX_OPERANDS + 1].join(","), &too_many, 2).unwrap_err();
        assert_eq!(e.code, ErrorCode::LimitExceeded);
    }
}
