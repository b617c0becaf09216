//! The example programs built into the binary (`GET /v1/examples`), read from
//! `examples/*.json` at compile time. To add one, add a line to [`SOURCES`].

use serde_json::Value;

/// `(name, description, program JSON)` of every built-in example, in the order
/// `GET /v1/examples` lists them.
pub const SOURCES: &[(&str, &str, &str)] = &[
    (
        "matmul",
        "Distributed matrix multiply Z = X·Y of two 4000×4000 matrices cut into 4×4 blocks of \
         1000×1000, X hash-partitioned on its row-block key, on 10 sites (the API example).",
        include_str!("../../examples/matmul.json"),
    ),
    (
        "matmul-common-large-dim",
        "Matrix multiply with a common large dimension: X is 4×40 blocks, Y is 40×4 blocks of \
         1000×1000, on 10 sites. Cross-product matmul with two-phase aggregation wins.",
        include_str!("../../examples/matmul-common-large-dim.json"),
    ),
    (
        "matmul-two-large-dims",
        "Matrix multiply with two large dimensions: X is 40×4 blocks, Y is 4×40 blocks of \
         1000×1000, on 10 sites. Broadcast matmul wins.",
        include_str!("../../examples/matmul-two-large-dims.json"),
    ),
    (
        "diag-x-plus-y",
        "diag(X + Y) over 8×8 blocks of 500×500 (paper §5.2.1): the filter on the diagonal \
         keys can move below the addition, so only the diagonal blocks are added and moved.",
        include_str!("../../examples/diag-x-plus-y.json"),
    ),
    (
        "nn-search-wide",
        "Nearest neighbour under a Riemannian metric (x − X_i) A (x − X_i)ᵀ, wide data: 2,000 points \
         of 20,000 features on 8 sites. Partitioning the features (Opt4Horizontal-like) wins.",
        include_str!("../../examples/nn-search-wide.json"),
    ),
    (
        "nn-search-many-points",
        "Nearest neighbour under a Riemannian metric, many points: 1,000,000 points of 4,000 \
         features on 8 sites. Partitioning the points and broadcasting A (Opt4Vertical-like) wins.",
        include_str!("../../examples/nn-search-many-points.json"),
    ),
    (
        "ffnn-google-speech",
        "One SGD step of a two-layer network, Google speech shape: a very wide hidden layer \
         (16,384) on a small input (1,024 features), batch 65,536. The data-parallel plan wins.",
        include_str!("../../examples/ffnn-google-speech.json"),
    ),
    (
        "ffnn-amazoncat",
        "One SGD step of a two-layer network, AmazonCat-14K shape: 597,540 features and 14,588 \
         labels (padded), a narrow hidden layer of 1,000, batch 1,000. A model-parallel plan wins.",
        include_str!("../../examples/ffnn-amazoncat.json"),
    ),
    (
        "softmax",
        "Softmax over the rows of a 65,536×4,096 matrix in 64×4 blocks on 8 sites: row maxima and sums \
         are rowMax/rowSum per block aggregated over the column blocks, then joined back. With X \
         partitioned by row blocks, nothing moves.",
        include_str!("../../examples/softmax.json"),
    ),
    (
        "layernorm",
        "Layer normalization of 262,144 rows of 1,024 features in row blocks on 8 sites: mean and \
         variance per row, then gain and bias per feature. Only the gain and bias are broadcast.",
        include_str!("../../examples/layernorm.json"),
    ),
    (
        "logreg-step",
        "One gradient step of logistic regression on a tall X (1,048,576 × 1,024 in 128 row blocks) \
         on 8 sites: sigmoid, the log loss, the gradient Xᵀ(P − Y) and the update. The weights are \
         broadcast and the data stays put.",
        include_str!("../../examples/logreg-step.json"),
    ),
    (
        "attention-head",
        "One attention head softmax(Q·Kᵀ/√d)·V, sequence 4,096 × head 128 in 8 row blocks on 8 sites. \
         The plan keeps the 4,096×4,096 score matrix where it is computed.",
        include_str!("../../examples/attention-head.json"),
    ),
];

/// One built-in example.
#[derive(Debug, Clone)]
pub struct Example {
    /// Its name, as `GET /v1/examples` keys it.
    pub name: &'static str,
    /// What it shows, in a sentence or two.
    pub description: &'static str,
    /// The TRA program.
    pub program: Value,
}

/// Every built-in example, parsed. Panics if a built-in file is not JSON (a
/// test checks they all parse and type-check).
pub fn all() -> Vec<Example> {
    SOURCES
        .iter()
        .map(|(name, description, json)| Example {
            name,
            description,
            program: serde_json::from_str(json)
                .unwrap_or_else(|e| panic!("built-in example {name} is not valid JSON: {e}")),
        })
        .collect()
}

/// The example called `name`.
pub fn get(name: &str) -> Option<Example> {
    all().into_iter().find(|e| e.name == name)
}

/// The body of `GET /v1/examples`: `{name: {description, program}}`.
pub fn as_json() -> Value {
    let mut map = serde_json::Map::new();
    for e in all() {
        map.insert(e.name.to_string(), serde_json::json!({"description": e.description, "program": e.program}));
    }
    Value::Object(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tra_optimizer::check::check_program;
    use tra_optimizer::Program;

    #[test]
    fn every_example_parses_and_type_checks() {
        let all = all();
        assert_eq!(all.len(), SOURCES.len());
        for e in &all {
            let p = Program::from_value(&e.program).unwrap_or_else(|err| panic!("{}: {err:?}", e.name));
            check_program(&p).unwrap_or_else(|err| panic!("{}: {err:?}", e.name));
        }
        let names: std::collections::HashSet<_> = all.iter().map(|e| e.name).collect();
        assert_eq!(names.len(), all.len(), "example names are unique");
        assert!(get("matmul").is_some());
        assert_eq!(as_json().as_object().unwrap().len(), all.len());
    }
}
