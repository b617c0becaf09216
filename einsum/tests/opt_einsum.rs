//! The contraction order against opt_einsum's: for expressions of 3 to 8
//! operands (the 6-operand one that once took half a second to order, and
//! random ones), the flops of the path the front-end chooses equal
//! `opt_einsum.contract_path(..., optimize="optimal")`'s optimized FLOP
//! count (at most it, where an index is in three or more operands), and the
//! search takes at most 20 ms (it is reported; the bound is
//! generous, the search takes a few milliseconds).
//!
//! Operands are one block each (the block size covers every extent), so no
//! padding enters the count. Flops of one contraction are counted as
//! opt_einsum counts them: the product of the sizes of every index either
//! side holds, twice when an index is summed. Needs `python3` with
//! `opt_einsum` (`pip install opt_einsum`). `TRA_EINSUM_CASES` sets the number
//! of random expressions (default 40).

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::process::Command;
use tra_einsum::{compile, Operand, Options, Request};

/// A random expression of `n` operands over 3–9 letters, each operand 1–4
/// letters, every letter in two operands or in one and the output, and its
/// shapes.
fn random_expression(rng: &mut ChaCha8Rng, n: usize) -> (String, Vec<Vec<usize>>) {
    let letters: Vec<char> = "abcdefghij".chars().take(rng.random_range(3..=9)).collect();
    let size: HashMap<char, usize> = letters.iter().map(|&l| (l, rng.random_range(2..=9))).collect();
    let mut terms: Vec<Vec<char>> = vec![Vec::new(); n];
    let mut output = Vec::new();
    for &l in &letters {
        // Two distinct operands, or one and the output.
        let mut at: Vec<usize> = (0..n).collect();
        at.shuffle(rng);
        terms[at[0]].push(l);
        if rng.random_bool(0.8) {
            terms[at[1]].push(l);
        } else {
            output.push(l);
        }
    }
    for (i, t) in terms.iter_mut().enumerate() {
        if t.is_empty() {
            // An operand needs an index: share a letter of its neighbour.
            let l = letters[i % letters.len()];
            t.push(l);
        }
        t.truncate(4);
    }
    // Letters left in one operand only (truncation) go to the output.
    for &l in &letters {
        let count = terms.iter().filter(|t| t.contains(&l)).count();
        if count == 1 && !output.contains(&l) {
            output.push(l);
        }
        if count == 0 {
            output.retain(|&o| o != l);
        }
    }
    let expr = format!(
        "{}->{}",
        terms.iter().map(|t| t.iter().collect::<String>()).collect::<Vec<_>>().join(","),
        output.iter().collect::<String>()
    );
    let shapes = terms.iter().map(|t| t.iter().map(|l| size[l]).collect()).collect();
    (expr, shapes)
}

/// opt_einsum's optimal FLOP count for each expression.
fn opt_einsum_flops(cases: &[(String, Vec<Vec<usize>>)]) -> Vec<u64> {
    let script = "import sys, ast, opt_einsum\n\
        for line in sys.stdin:\n    \
            expr, shapes = line.split(';')\n    \
            shapes = ast.literal_eval(shapes)\n    \
            _, info = opt_einsum.contract_path(expr, *shapes, shapes=True, optimize='optimal')\n    \
            print(int(info.opt_cost))\n";
    let input: String = cases.iter().map(|(e, s)| format!("{e};{s:?}\n")).collect();
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    {
        use std::io::Write;
        child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("write the cases");
    }
    let out = child.wait_with_output().expect("python3 finishes");
    assert!(
        out.status.success(),
        "python3 with opt_einsum failed (pip install opt_einsum): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8").lines().map(|l| l.trim().parse().expect("a count")).collect()
}

/// The flops of a step `ab,bc->ac` with these index sizes.
fn step_flops(einsum: &str, size: &HashMap<char, usize>) -> u64 {
    let (inputs, output) = einsum.split_once("->").expect("an arrow");
    let mut all: Vec<char> = Vec::new();
    for c in inputs.chars().filter(|c| *c != ',') {
        if !all.contains(&c) {
            all.push(c);
        }
    }
    let product: u64 = all.iter().map(|c| size[c] as u64).product();
    if all.iter().any(|c| !output.contains(*c)) {
        2 * product
    } else {
        product
    }
}

#[test]
fn the_chosen_paths_flops_equal_opt_einsums_optimal() {
    let mut rng = ChaCha8Rng::seed_from_u64(0x0e1);
    let mut cases: Vec<(String, Vec<Vec<usize>>)> = vec![(
        "hbc,bdef,cdkj,ji,ikeh,lfo->lo".to_string(),
        vec![vec![4, 5, 6], vec![5, 3, 7, 2], vec![6, 3, 8, 4], vec![4, 9], vec![9, 8, 7, 4], vec![5, 2, 6]],
    )];
    let n_cases = std::env::var("TRA_EINSUM_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(40);
    for _ in 0..n_cases {
        let n = rng.random_range(3..=8);
        cases.push(random_expression(&mut rng, n));
    }
    let expected = opt_einsum_flops(&cases);
    let opts = Options::new(&[]);
    let mut plain = 0;
    for ((expr, shapes), optimal) in cases.iter().zip(expected) {
        let req = Request {
            expression: expr.clone(),
            operands: shapes
                .iter()
                .enumerate()
                .map(|(i, s)| Operand { name: format!("T{i}"), shape: s.clone(), block: None })
                .collect(),
            block: Some(16),
            output: None,
            cluster: None,
        };
        let c = compile(&req, &opts).unwrap_or_else(|e| panic!("{expr} {shapes:?}: {e}"));
        let (terms, _) = expr.split_once("->").expect("an arrow");
        let mut size = HashMap::new();
        for (t, s) in terms.split(',').zip(shapes) {
            for (l, n) in t.chars().zip(s) {
                size.insert(l, *n);
            }
        }
        if shapes.len() > 2 {
            assert_eq!(c.order.method, "dp", "{expr}");
        }
        let ours: u64 = c.order.steps.iter().map(|s| step_flops(&s.einsum, &size)).sum();
        // An index in three or more operands (a hyperedge) is kept only as
        // long as a later contraction needs it, which opt_einsum's count
        // does not always credit: there the path may only be cheaper.
        let hyperedge = size.keys().any(|l| terms.split(',').filter(|t| t.contains(*l)).count() > 2);
        if hyperedge {
            assert!(ours <= optimal, "{expr} {shapes:?}: {ours} > {optimal}, our path {:?}", c.order.steps);
        } else {
            assert_eq!(ours, optimal, "{expr} {shapes:?}: our path {:?}", c.order.steps);
            plain += 1;
        }
        assert!(c.order.search_ms <= 20.0, "{expr}: the order search took {} ms", c.order.search_ms);
    }
    assert!(plain * 3 >= cases.len(), "too few expressions without hyperedges: {plain} of {}", cases.len());
}
