//! Operands against terms: labels per axis, sizes that must agree (or
//! broadcast), one block per index, the output's labels. Everything after
//! this works on an [`Analysis`], not on the text.

use crate::error::EinsumError;
use crate::parse::{Item, Parsed};
use crate::{BlockSpec, Request, DEFAULT_BLOCK, DEFAULT_OUTPUT, MAX_OPERANDS};
use std::collections::{BTreeMap, HashMap, HashSet};
use tra_optimizer::kernel::{EinSumSpec, KernelRef};
use tra_optimizer::program::{InputDecl, PlacementDecl};
use tra_optimizer::ErrorCode;

/// An index: a letter (its code point) or axis `j` of `...` (`ELLIPSIS + j`).
pub(crate) type Label = u32;
const ELLIPSIS: Label = 1 << 20;

/// One occurrence of an index on an operand's axis.
#[derive(Debug, Clone, Copy)]
struct Occurrence {
    pub(crate) operand: usize,
    pub(crate) axis: usize,
    pub(crate) pos: usize,
    pub(crate) size: usize,
}

/// The analysed request.
pub(crate) struct Analysis {
    pub(crate) expr: String,
    /// Per operand: labels of the relation's dims (possibly repeated).
    pub(crate) labels: Vec<Vec<Label>>,
    /// Per operand: the dense axes kept.
    pub(crate) axes: Vec<Vec<usize>>,
    /// Output labels in order.
    pub(crate) output: Vec<Label>,
    /// Every label in order of first appearance.
    pub(crate) order: Vec<Label>,
    pub(crate) size: HashMap<Label, usize>,
    pub(crate) block: HashMap<Label, usize>,
    pub(crate) letter: HashMap<Label, char>,
    pub(crate) names: Vec<String>,
    pub(crate) output_name: String,
}

impl Analysis {
    pub(crate) fn blocks(&self, l: Label) -> u32 {
        // An empty index is one empty block.
        if self.block[&l] == 0 {
            return 1;
        }
        self.size[&l].div_ceil(self.block[&l]) as u32
    }
    pub(crate) fn decl(&self, labels: &[Label]) -> InputDecl {
        InputDecl {
            key_bounds: labels.iter().map(|l| i64::from(self.blocks(*l))).collect(),
            array_bounds: labels.iter().map(|l| self.block[l] as i64).collect(),
            placement: PlacementDecl::Any,
        }
    }
    pub(crate) fn letters(&self, labels: &[Label]) -> String {
        labels.iter().map(|l| self.letter[l]).collect()
    }
    pub(crate) fn spec(&self, inputs: &[&[Label]], output: &[Label]) -> KernelRef {
        EinSumSpec {
            inputs: inputs.iter().map(|l| l.iter().map(|x| self.letter[x]).collect()).collect(),
            output: output.iter().map(|x| self.letter[x]).collect(),
        }
        .kernel()
    }
    /// Floats of a relation with these labels.
    pub(crate) fn floats(&self, labels: &[Label]) -> u64 {
        labels.iter().fold(1u64, |a, l| a.saturating_mul(u64::from(self.blocks(*l)) * self.block[l] as u64))
    }
}

pub(crate) fn describe(l: Label) -> String {
    if l >= ELLIPSIS {
        format!("axis {} of `...`", l - ELLIPSIS)
    } else {
        format!("index `{}`", char::from_u32(l).unwrap_or('?'))
    }
}

pub(crate) fn index_name(l: Label) -> String {
    if l >= ELLIPSIS {
        format!("...{}", l - ELLIPSIS)
    } else {
        char::from_u32(l).unwrap_or('?').to_string()
    }
}

pub(crate) fn analyze(req: &Request, p: &Parsed) -> Result<Analysis, EinsumError> {
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
        // An empty index is one block of size 0: the relation has its
        // tuples, each block is empty, and the result is numpy's (empty, or
        // zeros where the empty index is summed).
        let s = first_big.map_or(1, |o| o.size);
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
        let blocks = if b == 0 { 1 } else { (s as u64).div_ceil(b as u64) };
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
    let padded = |l: &Label| {
        let b = (block[l] as u64).max(1);
        (size[l] as u64).div_ceil(b).checked_mul(b)
    };
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
