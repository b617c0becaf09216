//! The compiler: parse, analyse, reduce each operand, search the order,
//! emit the contractions, check the program.

use crate::analyze::{analyze, index_name, Label};
use crate::error::EinsumError;
use crate::ops::{distinct, unary_ops, Names};
use crate::order::{Emitter, Search, Tree};
use crate::parse::parse;
use crate::report::{Compiled, IndexInfo, OperandInfo, Order, OutputInfo};
use crate::{Options, Request, DP_MAX_OPERANDS};
use indexmap::IndexMap;
use std::collections::HashMap;
use std::time::Instant;
use tra_optimizer::check::check_program;
use tra_optimizer::cost::Cost;
use tra_optimizer::program::{Program, TraOp};
use tra_optimizer::ErrorCode;

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
    let search_start = Instant::now();
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
    let search_ms = search_start.elapsed().as_secs_f64() * 1e3;
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
    // The plan labels name key dims by the expression's letters.
    let dim_names =
        (0..n).map(|i| (a.names[i].clone(), a.labels[i].iter().map(|l| a.letter[l].to_string()).collect())).collect();
    let program = Program { inputs, nodes, outputs: vec![a.output_name.clone()], cluster: req.cluster, dim_names };
    check_program(&program).map_err(|e| match e.code {
        // An intermediate of the contraction too large to describe, or to
        // enumerate: a property of the request, not a bug.
        ErrorCode::BadBounds | ErrorCode::LimitExceeded => EinsumError::field(
            &a.expr,
            "",
            e.code,
            format!("the program compiled from `{}` is too large: node {}: {}", a.expr, e.at, e.message),
        ),
        // The request's own cluster (`sites` 0, a bad profile): its field.
        _ if e.at.starts_with("cluster") => EinsumError::field(&a.expr, &e.at, e.code, e.message),
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
            search_ms,
        },
        padding,
    })
}
