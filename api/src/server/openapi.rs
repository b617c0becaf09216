//! The machine-readable contract (`GET /openapi.json`): an OpenAPI 3.1
//! document written in one place, mirroring `docs/API.md`. A test checks that
//! every route of [`super::ROUTES`] is in it.

use super::ServerConfig;
use serde_json::{json, Value};

fn r(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

fn json_content(schema: Value) -> Value {
    json!({"application/json": {"schema": schema}})
}

fn error_response(description: &str) -> Value {
    json!({"description": description, "content": json_content(r("Error"))})
}

fn dims() -> Value {
    json!({"type": "array", "items": {"type": "integer", "minimum": 0}})
}

/// Sizes that may be 0: an empty axis of a block, or the frontier of an
/// empty result (a filter that keeps nothing).
fn sizes() -> Value {
    json!({"type": "array", "items": {"type": "integer", "minimum": 0}})
}

fn bounds() -> Value {
    json!({"type": "array", "items": {"type": "integer", "minimum": 1}})
}

/// A program's top-level fields, with an execute request's `data` and
/// `return` when given (each schema refuses any other field).
fn program_fields(data: Option<Value>, ret: Option<Value>) -> Value {
    let mut fields = json!({
        "inputs": {"type": "object", "additionalProperties": r("InputDecl")},
        "nodes": {"type": "object", "additionalProperties": r("TraOp")},
        "outputs": {"type": "array", "items": {"type": "string"}},
        "cluster": r("Cluster")
    });
    if let Some(d) = data {
        fields["data"] = d;
    }
    if let Some(r) = ret {
        fields["return"] = r;
    }
    fields
}

fn name() -> Value {
    json!({"type": "string", "description": "The name of an input or a node"})
}

fn op(op: &str, description: &str, fields: &[(&str, Value)]) -> Value {
    let mut props = serde_json::Map::new();
    props.insert("op".into(), json!({"const": op}));
    let mut required = vec![json!("op")];
    for (f, schema) in fields {
        props.insert((*f).into(), schema.clone());
        required.push(json!(f));
    }
    json!({"type": "object", "description": description, "properties": props, "required": required,
           "additionalProperties": false})
}

fn optional(mut v: Value, fields: &[&str]) -> Value {
    if let Some(req) = v.get_mut("required").and_then(|r| r.as_array_mut()) {
        req.retain(|x| !fields.iter().any(|f| x == f));
    }
    v
}

/// The OpenAPI document, with this configuration's limits in the descriptions.
pub fn document(config: &ServerConfig) -> Value {
    let schemas = json!({
        "Error": {
            "type": "object",
            "description": "Every error answer.",
            "properties": {"error": {
                "type": "object",
                "properties": {
                    "code": {"type": "string", "description":
                        "bad_json (400), host_not_allowed (403), not_found (404), method_not_allowed (405), \
                         body_timeout (408), body_too_large / data_too_large (413), unsupported_media_type (415), \
                         unknown_input, unknown_kernel, unknown_op, cycle, bad_field, bad_bounds, bounds_mismatch, \
                         dim_out_of_range, bad_expression, bad_key_map, bad_kernel_shape, unknown_output (422), \
                         limit_exceeded (503: a limit stopped the work), overloaded (503 with Retry-After: the server \
                         is busy, try again), internal (500)"},
                    "message": {"type": "string", "description": "What is wrong, in words"},
                    "at": {"type": "string", "description": "The node, `node.field` or `data.INPUT` at fault; empty when the whole request is"}
                },
                "required": ["code", "message", "at"]
            }},
            "required": ["error"]
        },
        "Placement": {
            "description": "How an input is laid out over the sites; `any` (the default) when absent.",
            "oneOf": [
                {"type": "object", "properties": {"hash": dims()}, "required": ["hash"], "additionalProperties": false},
                {"const": "replicated"},
                {"const": "any"}
            ]
        },
        "InputDecl": {
            "type": "object",
            "properties": {
                "key_bounds": bounds(),
                "array_bounds": sizes(),
                "placement": r("Placement")
            },
            "required": ["key_bounds", "array_bounds"],
            "additionalProperties": false
        },
        "Kernel": {
            "description": "A catalog name with optional arguments (`matMul`, `scale(0.01)`, `tile(1,2)`), or a composition.",
            "oneOf": [
                {"type": "string"},
                {"type": "object", "properties": {"compose": {"type": "array", "items": r("Kernel"), "minItems": 2, "maxItems": 2,
                 "description": "[outer, inner]"}}, "required": ["compose"], "additionalProperties": false}
            ]
        },
        "KeyExpr": {"type": "string", "description": "A key expression, e.g. `[k0]`, `[2*k0 + k1]`, `[k0, k2]`"},
        "Predicate": {"type": "string", "description": "A predicate over key components, e.g. `k0 == k1`"},
        "TraOp": {
            "oneOf": [
                op("join", "Join on left_keys[i] == right_keys[i]", &[("left", name()), ("right", name()),
                    ("left_keys", dims()), ("right_keys", dims()), ("kernel", r("Kernel"))]),
                op("aggregate", "Group by group_by and fold with kernel", &[("input", name()), ("group_by", dims()), ("kernel", r("Kernel"))]),
                op("rekey", "Map every key", &[("input", name()), ("key", r("KeyExpr"))]),
                op("filter", "Keep the tuples whose key satisfies predicate", &[("input", name()), ("predicate", r("Predicate"))]),
                op("transform", "Apply a unary kernel to every block", &[("input", name()), ("kernel", r("Kernel"))]),
                op("tile", "Cut every block along dim into pieces of size", &[("input", name()),
                    ("dim", json!({"type": "integer", "minimum": 0})), ("size", json!({"type": "integer", "minimum": 1}))]),
                op("concat", "Inverse of tile", &[("input", name()),
                    ("key_dim", json!({"type": "integer", "minimum": 0})), ("array_dim", json!({"type": "integer", "minimum": 0}))])
            ],
            "discriminator": {"propertyName": "op"}
        },
        "IaOp": {
            "oneOf": [
                op("broadcast", "Every tuple to every site", &[("input", name())]),
                op("shuffle", "Every tuple to site h(key[dims])", &[("input", name()), ("dims", dims())]),
                op("local_join", "Join of the tuples on the same site", &[("left", name()), ("right", name()),
                    ("left_keys", dims()), ("right_keys", dims()), ("kernel", r("Kernel"))]),
                op("local_aggregate", "Aggregation per site and group", &[("input", name()), ("group_by", dims()), ("kernel", r("Kernel"))]),
                op("local_filter", "Filter on each site", &[("input", name()), ("predicate", r("Predicate"))]),
                optional(op("local_map", "Map keys and blocks on each site (identity when absent)",
                    &[("input", name()), ("key", r("KeyExpr")), ("kernel", r("Kernel"))]), &["key", "kernel"])
            ],
            "discriminator": {"propertyName": "op"}
        },
        "Cluster": {
            "type": "object",
            "properties": {
                "sites": {"type": "integer", "minimum": 1, "default": 4},
                "network_weight": {"type": "number", "default": 1, "minimum": 0, "maximum": 1e100, "description": "α in α·network_floats + β·flops"},
                "compute_weight": {"type": "number", "default": 0, "minimum": 0, "maximum": 1e100, "description": "β in α·network_floats + β·flops"},
                "cost_model": {"type": "string", "enum": ["network", "time"], "default": "network",
                    "description": "What the optimizer minimizes: `network` (α·network_floats + β·flops, the paper's model) \
                                    or `time` (predicted seconds under `profile`, from exact per-site loads); \
                                    absent: the server's (`tra serve --cost-model`), network unless it says otherwise"},
                "profile": r("Profile")
            },
            "additionalProperties": false
        },
        "Profile": {
            "type": "object",
            "description": "The cluster's speeds that the time model uses (`tra calibrate` measures them and prints this object)",
            "properties": {
                "link_bytes_per_second": {"type": "number", "default": 1.25e9, "minimum": 1,
                    "description": "Bytes per second of each site's own link, each direction"},
                "site_flops_per_second": {"type": "number", "default": 1.0e11, "minimum": 1, "description": "Flops per second of each site"},
                "memory_bytes_per_second": {"type": "number", "default": 1.0e10, "minimum": 1,
                    "description": "Bytes per second that a site's kernel calls read and write in memory (a local operator takes the slower of its flops and these bytes)"},
                "latency_seconds": {"type": "number", "default": 1e-4, "minimum": 0, "maximum": 86400, "description": "Fixed time of one exchange (shuffle or broadcast) of ready operands"},
                "job_overhead_seconds": {"type": "number", "minimum": 0, "maximum": 86400,
                    "description": "Fixed time of a job, once per plan whatever it does (starting the dataflow, the processes agreeing that each operator has finished); optional (absent: 0). It moves every plan alike"},
                "bytes_per_float": {"type": "integer", "default": 4, "minimum": 1, "maximum": 16, "description": "Bytes of one float on the wire"},
                "exchange_cpu_bytes_per_second": {"type": "number", "minimum": 1,
                    "description": "Bytes a site exchanges (sent and received alike) per second of its processors' time; optional (absent: exchanges cost no processor time). A streamed matmul's GEMMs share the processors with its exchanges"},
                "output_bytes_per_second": {"type": "number", "minimum": 1,
                    "description": "Bytes per second a site writes of a plan output into the output's file (`tra run --output` on processes or hosts); optional (absent: writing outputs costs nothing, as when they are returned in memory). Writing is processor time of the site: within the streamed matmul that makes the output, else a stage after the operator that makes it"},
                "machine_processors": {"type": "integer", "minimum": 1,
                    "description": "The processors of the one machine every site runs on, when they share one; optional. With `site_threads` and `machine_sites`: the calibrated rates are those of the machine_sites sites computing at once, and in a stage where m sites have processor work each works max(1, min(site_threads, machine_processors / m) / min(site_threads, machine_processors / machine_sites)) times faster (1 unless the sites' threads outnumber the processors)"},
                "site_threads": {"type": "integer", "minimum": 1,
                    "description": "Kernel threads of each site; optional, used with `machine_processors`"},
                "machine_sites": {"type": "integer", "minimum": 1,
                    "description": "The sites on that machine when the rates were measured; optional, used with `machine_processors`"}
            },
            "additionalProperties": false
        },
        "Bottleneck": {
            "type": ["object", "null"],
            "description": "The stage that takes longest, its busiest site and the resource bounding it; null for a plan without operators",
            "properties": {
                "node": {"type": "string", "description": "The plan operator"},
                "site": {"type": "integer"},
                "resource": {"type": "string", "enum": ["compute", "memory", "link_in", "link_out", "write"]},
                "seconds": {"type": "number", "description": "That stage's predicted seconds"}
            },
            "required": ["node", "site", "resource", "seconds"]
        },
        "SiteLoad": {
            "type": "object",
            "description": "What one site does over a whole plan",
            "properties": {
                "bytes_out": {"type": "integer", "description": "Bytes it sends over its link"},
                "bytes_in": {"type": "integer", "description": "Bytes it receives over its link"},
                "flops": {"type": "integer", "description": "Flops it computes"},
                "memory_bytes": {"type": "integer", "description": "Bytes of blocks its kernel calls read and write in memory"},
                "output_bytes": {"type": "integer", "description": "Bytes of the plan's outputs it writes into their files when the cluster runtime writes them (its own tuples; site 0 also the replicated ones)"}
            },
            "required": ["bytes_out", "bytes_in", "flops", "memory_bytes", "output_bytes"]
        },
        "Program": {
            "type": "object",
            "description": "A TRA program: a DAG of named nodes over named inputs.",
            "properties": program_fields(None, None),
            "required": ["inputs", "nodes", "outputs"],
            "additionalProperties": false
        },
        "Plan": {
            "type": "object",
            "description": "An IA plan; its output names are the request's.",
            "properties": {
                "inputs": {"type": "object", "additionalProperties": r("InputDecl")},
                "nodes": {"type": "object", "additionalProperties": r("IaOp")},
                "outputs": {"type": "array", "items": {"type": "string"}}
            },
            "required": ["inputs", "nodes", "outputs"]
        },
        "Cost": {
            "type": "object",
            "properties": {
                "network_floats": {"type": "integer", "description": "Floats moved by shuffles and broadcasts"},
                "flops": {"type": "integer"},
                "total": {"type": "number", "description": "The value the chosen cost model minimized: α·network_floats + β·flops, or seconds"},
                "seconds": {"type": "number", "description": "Predicted seconds under the cluster's profile (either model)"},
                "bottleneck": r("Bottleneck")
            },
            "required": ["network_floats", "flops", "total", "seconds", "bottleneck"]
        },
        "Alternative": {
            "type": "object",
            "properties": {
                "label": {"type": "string", "description":
                    "The strategy first, then what moves, in words (free text), e.g. `CMM — shuffle X by k, Y by k; partial sums exchanged`"},
                "strategy": {"type": "array", "items": {"type": "string", "enum":
                    ["broadcast_left", "broadcast_right", "broadcast_both", "co_partitioned", "replicated"]},
                    "description": "The join strategies of the plan, in plan order"},
                "plan": r("Plan"),
                "cost": r("Cost"),
                "built_by": {"type": "object", "additionalProperties": {"type": "string"},
                    "description": "Operator name → the rule that built it (as `GET /v1/rules` names it)"},
                "site_loads": {"type": "array", "items": r("SiteLoad"),
                    "description": "Per site (index = site), what the site does over this whole plan"},
                "report": r("PlanReport")
            },
            "required": ["label", "strategy", "plan", "cost", "built_by", "site_loads", "report"]
        },
        "NodeReport": {
            "type": "object",
            "description": "One operator of a plan: its output frontier and placement, and its share of the cost",
            "properties": {
                "op": {"type": "string"},
                "key_bounds": {"type": "array", "items": {"type": "integer"}, "description": "Output key frontier"},
                "array_bounds": {"type": "array", "items": {"type": "integer"}, "description": "Output block shape"},
                "tuples": {"type": "integer", "description": "Output tuples, partial copies counted"},
                "placement": {"type": "string", "description": "Output placement, e.g. `hash[0]`, `replicated`, `any`"},
                "network_floats": {"type": "integer", "description": "Floats this operator moves"},
                "flops": {"type": "integer"},
                "total": {"type": "number", "description": "Its share of α·network_floats + β·flops, under either cost model (predicted seconds have no per-operator share)"}
            },
            "required": ["op", "key_bounds", "array_bounds", "tuples", "placement", "network_floats", "flops", "total"]
        },
        "PlanReport": {
            "type": ["object", "null"],
            "description": "Operator name → its figures (null only if the plan did not type-check, a bug that is logged)",
            "additionalProperties": r("NodeReport")
        },
        "Stats": {
            "type": "object",
            "properties": {
                "egraph_nodes": {"type": "integer"},
                "egraph_classes": {"type": "integer"},
                "iterations": {"type": "integer"},
                "order_nodes_explored": {"type": "integer",
                    "description": "TRA operators the contraction-order phase built (every bracketing of every chain of products)"},
                "order_nodes_kept": {"type": "integer",
                    "description": "TRA operators kept for lowering and exploration: per class the written one and the cheapest by flops"},
                "stop_reason": {"type": "string", "enum": ["saturated", "node_limit", "time_limit", "iteration_limit"]},
                "stop_phase": {"type": ["string", "null"], "enum": ["contraction_order", "lowering", "exploration", null],
                    "description": "The saturation phase the limit of `stop_reason` stopped; null when saturated"},
                "optimize_ms": {"type": "number"},
                "cost_model": {"type": "string", "enum": ["network", "time"],
                    "description": "The cost model that chose the plan: the request's, else the server's (`tra serve --cost-model`), else network"},
                "profile": {"allOf": [r("Profile")],
                    "description": "The profile every `cost.seconds` is predicted under: the request's, else the server's (`tra serve --profile`), else the defaults"},
                "plans_scored": {"type": "integer", "description": "Distinct candidate plans scored exactly under `time` (0 under `network`)"}
            },
            "required": ["egraph_nodes", "egraph_classes", "iterations", "order_nodes_explored", "order_nodes_kept", "stop_reason", "stop_phase", "optimize_ms", "cost_model", "profile", "plans_scored"]
        },
        "OptimizeAnswer": {
            "type": "object",
            "properties": {
                "plan": r("Plan"),
                "cost": r("Cost"),
                "site_loads": {"type": "array", "items": r("SiteLoad"),
                    "description": "Per site (index = site), the bytes sent and received and the flops of the whole chosen plan"},
                "alternatives": {"type": "array", "items": r("Alternative"),
                    "description": "The best plan of each distinct strategy, cheapest first; alternatives[0] is the chosen plan. When the chosen plan computes products in another order than the program wrote, the best plans in the written order too (one per strategy and order)"},
                "rules_applied": {"type": "array", "items": {"type": "string"}},
                "warnings": {"type": "array", "items": r("Warning"),
                    "description": "What went wrong without stopping the answer; empty normally. A rewrite rule that \
                                    broke an invariant of the optimizer is left out and named here (the plan was found \
                                    without it); with `tra serve --strict` that answers 500 instead"},
                "stats": r("Stats"),
                "report": r("PlanReport")
            },
            "required": ["plan", "cost", "site_loads", "alternatives", "rules_applied", "warnings", "stats", "report"]
        },
        "Warning": {
            "type": "object",
            "properties": {
                "code": {"type": "string", "enum": ["rule_failed"],
                    "description": "rule_failed: a rewrite rule broke an invariant of the e-graph (a bug in tra) and was left out"},
                "rule": {"type": "string", "description": "The rule's name, as GET /v1/rules lists it"},
                "at": {"type": "string", "description": "The program node(s) where it failed, comma-separated; empty when not known"},
                "message": {"type": "string"}
            },
            "required": ["code", "rule", "at", "message"]
        },
        "Float": {
            "description": "A float: a JSON number, or for the values JSON has no number for the strings \"NaN\", \
                            \"Infinity\" and \"-Infinity\" (outputs never use null)",
            "oneOf": [{"type": "number"}, {"enum": ["NaN", "Infinity", "-Infinity"]}]
        },
        "NestedArray": {
            "description": "A tensor as nested JSON arrays of floats, row-major",
            "oneOf": [r("Float"), {"type": "array", "items": r("NestedArray")}]
        },
        "InputData": {
            "description": "The data of one input: random integers in [-3, 3] from a seeded generator, or given values \
                            (nested arrays, or a base64 .npy file): the relation array of shape key_bounds ++ \
                            array_bounds, or (key arity == array rank) the dense tensor of shape \
                            key_bounds[i]·array_bounds[i].",
            "oneOf": [
                {"type": "object", "properties": {"random": {"type": "object",
                    "properties": {"seed": {"type": "integer", "minimum": 0, "default": 0}}}},
                 "required": ["random"], "additionalProperties": false},
                {"type": "object", "properties": {"dense": r("NestedArray")}, "required": ["dense"], "additionalProperties": false},
                {"type": "object", "properties": {"npy": {"type": "string", "contentEncoding": "base64",
                    "contentMediaType": "application/x-npy",
                    "description": "The base64 text of a .npy file: float32 or float64, little-endian, C order, \
                                    of either shape; as large as the body allows (--max-body-bytes)"}},
                 "required": ["npy"], "additionalProperties": false}
            ]
        },
        "ReturnFormat": {
            "type": "object",
            "description": "How the outputs are returned: `json` (nested arrays, outputs of at most 10,000 floats) or \
                            `npy` (every output as a base64 .npy file of `dtype`, up to --max-return-floats floats each)",
            "properties": {
                "format": {"type": "string", "enum": ["json", "npy"], "default": "json"},
                "dtype": {"type": "string", "enum": ["float32", "float64"], "default": "float64",
                    "description": "The .npy's element type (format npy; JSON numbers are float64)"}
            },
            "additionalProperties": false
        },
        "ExecuteRequest": {
            "type": "object",
            "description": "A Program, plus data for its inputs and how to return its outputs.",
            "properties": program_fields(Some(json!({"type": "object", "additionalProperties": r("InputData"),
                "description": "Per input; an input without an entry gets {\"random\": {\"seed\": 0}}"})), Some(r("ReturnFormat"))),
            "required": ["inputs", "nodes", "outputs"],
            "additionalProperties": false
        },
        "OutputValue": {
            "type": "object",
            "properties": {
                "checksum": {"$ref": "#/components/schemas/Float", "description": "The sum of all floats of the output"},
                "key_bounds": sizes(),
                "array_bounds": sizes(),
                "tuples": {"type": "integer", "description": "Tuples present (fewer than the product of key_bounds when the relation has holes)"},
                "floats": {"type": "integer"},
                "layout": {"type": "string", "enum": ["dense", "relation"],
                    "description": "The form of `data` or `npy`: the dense tensor (key arity == array rank) or the relation array key_bounds ++ array_bounds"},
                "data": {"$ref": "#/components/schemas/NestedArray",
                    "description": "With format json, when the output holds at most 10,000 floats; holes are zero-filled"},
                "npy": {"type": "string", "contentEncoding": "base64", "contentMediaType": "application/x-npy",
                    "description": "With format npy, always: the base64 text of a .npy file (little-endian float32 or float64 as asked, C order) of the array `layout` names; holes are zero-filled"},
                "note": {"type": "string",
                    "description": "With format json, when the output holds more than 10,000 floats (no `data`): how to get them (\"return\": {\"format\": \"npy\"})"}
            },
            "required": ["checksum", "key_bounds", "array_bounds", "tuples", "floats"]
        },
        "ExecuteAnswer": {
            "type": "object",
            "properties": {
                "timings_ms": {"type": "object", "additionalProperties": {"type": "number"},
                    "description": "Wall time of the whole execution (`total`) and of every operator, by node name (a join fused into its aggregation is counted there)"},
                "operators": {"type": "array", "items": {"type": "object"},
                    "description": "Per operator, in execution order: name, op, wall_ms, site_ms, floats_moved, tuples, fused_into, and streamed (true for a fused matmul the cluster runtime ran streamed, its operand exchanges overlapping its GEMMs; absent otherwise)"},
                "optimize_ms": {"type": "number"},
                "measured_seconds": {"type": "number",
                    "description": "The measured wall time of the run in seconds (`timings_ms.total` / 1000), to set beside the prediction `cost.seconds`"},
                "network_floats_measured": {"type": "integer", "description": "Floats the executor moved"},
                "network_floats_predicted": {"type": "integer", "description": "The cost model's network_floats of the chosen plan"},
                "floats_moved": {"type": "object", "additionalProperties": {"type": "integer"},
                    "description": "Floats moved per broadcast/shuffle node"},
                "sites": {"type": "integer"},
                "plan": r("Plan"),
                "cost": r("Cost"),
                "report": r("PlanReport"),
                "outputs": {"type": "object", "additionalProperties": r("OutputValue")},
                "estimated_memory_bytes": {"type": "integer",
                    "description": "The memory the execution was estimated to need, what it held of the execution memory budget while it ran"},
                "runtime": {"type": "string", "enum": ["threads", "cluster"],
                    "description": "Where the plan ran: worker threads of the server, or the cluster of `tra serve --hosts`"},
                "warnings": {"type": "array", "items": r("Warning"), "description": "As in OptimizeAnswer"}
            },
            "required": ["timings_ms", "measured_seconds", "operators", "optimize_ms", "network_floats_measured",
                         "network_floats_predicted", "floats_moved", "sites", "plan", "cost", "report", "outputs",
                         "estimated_memory_bytes", "runtime", "warnings"]
        },
        "Rule": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "The paper's name, e.g. R2-6"},
                "family": {"type": "string"},
                "equation": {"type": "string"},
                "condition": {"type": "string"},
                "why": {"type": "string", "description": "Why the rewrite is sound, in one line"},
                "lowering": {"type": "boolean"},
                "rewrites": {"type": "integer"}
            },
            "required": ["name", "family", "equation", "condition", "why"]
        },
        "KernelInfo": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "arity": {"type": "integer"},
                "params": {"type": "array", "items": {"type": "string"}},
                "doc": {"type": "string"},
                "assoc_comm": {"type": "boolean"},
                "elementwise": {"type": "boolean"},
                "distributes_over": {"type": "array", "items": {"type": "string"}},
                "bilinear_over": {"type": "array", "items": {"type": "string"}},
                "matrix_product": {
                    "type": ["array", "null"],
                    "items": {"type": "boolean"},
                    "description": "For a block matrix product: whether the left and the right operand are read transposed"
                }
            },
            "required": ["name", "arity", "params", "doc"]
        },
        "Example": {
            "type": "object",
            "properties": {"description": {"type": "string"}, "program": r("Program")},
            "required": ["description", "program"]
        }
    });

    let body_limit = format!("{} bytes", config.max_body_bytes);
    let optimize_errors = json!({
        "400": error_response("Unreadable request: not JSON (bad_json)"),
        "403": error_response("Bound to loopback, a Host other than localhost, 127.0.0.1 or [::1] with the port, \
                               or a name given with --allow-host (host_not_allowed)"),
        "408": error_response(&format!("The body was not sent within {} s (body_timeout)", config.body_timeout.as_secs_f64())),
        "413": error_response(&format!("Body (or its Content-Length) larger than {body_limit} (body_too_large)")),
        "415": error_response("The body was not sent as Content-Type: application/json (unsupported_media_type)"),
        "422": error_response("A well-formed but wrong program: unknown input/kernel/op, cycle, bounds mismatch, bad key expression…"),
        "503": {"description": format!(
            "A limit stopped the work before a plan existed (limit_exceeded): {} e-graph nodes, {} s of optimization, \
             {} bytes of key sets; or the server is busy (overloaded, with a Retry-After header)",
            config.max_egraph_nodes, config.optimize_time.as_secs_f64(), config.analysis_memory_bytes),
            "headers": {"Retry-After": {"description": "Seconds to wait before trying again (overloaded only)",
                "schema": {"type": "integer"}}},
            "content": json_content(r("Error"))},
        "500": error_response("A bug in tra (internal)"),
        "503": error_response(&format!(
            "A limit stopped the work before a plan existed (limit_exceeded): {} e-graph nodes, {} s",
            config.max_egraph_nodes, config.optimize_time.as_secs_f64())),
        "500": error_response("A bug in tra (internal): a rewrite rule failed and optimizing again without it failed \
                                too (or the server is --strict), naming the rule")
    });
    let mut execute_errors = optimize_errors.clone();
    execute_errors["413"] = error_response(&format!(
        "Body larger than {body_limit} (body_too_large, --max-body-bytes; a .npy input travels in it as base64, 4/3 of \
         its bytes), or inputs (or a relation of the program, the products of a matrix product \
         summed as they are made not counted) larger than {} floats, an output asked as .npy larger than {} floats \
         (--max-return-floats), \
         or an execution estimated at more than the execution memory budget of {} bytes, outputs returned as .npy \
         counted (data_too_large; `at` names the heaviest input or node, or the output)",
        config.max_execute_floats, config.max_return_floats, config.execute_memory_bytes
    ));

    let get_json = |summary: &str, schema: Value| json!({"get": {"summary": summary, "responses": {"200": {"description": "OK", "content": json_content(schema)}}}});
    let paths = json!({
        "/": {"get": {"summary": "The web page", "responses": {"200": {"description": "HTML",
            "content": {"text/html": {"schema": {"type": "string"}}}}}}},
        "/healthz": get_json("Liveness, and the budgets of the service with their use", json!({"type": "object",
            "properties": {
                "status": {"const": "ok"},
                "answer_cache": {"type": "object", "description": "hits, misses, entries, bytes, budget_bytes"},
                "execution_memory": {"type": "object", "description": "budget_bytes, reserved_bytes, running, waiting"},
                "executor_pool": {"type": "object", "description": "held_bytes, budget_bytes of freed blocks kept for reuse"},
                "optimizations": {"type": "object", "description": "running, waiting, max"},
                "executions": {"type": "object", "description": "running, waiting, max"},
                "connections": {"type": "object", "description": "open, max, evicted, refused"}
            },
            "required": ["status"]})),
        "/openapi.json": get_json("This document", json!({"type": "object"})),
        "/v1/rules": get_json("The rewrite rules", json!({"type": "array", "items": r("Rule")})),
        "/v1/kernels": get_json("The kernel catalog", json!({"type": "array", "items": r("KernelInfo")})),
        "/v1/examples": get_json("Example programs by name", json!({"type": "object", "additionalProperties": r("Example")})),
        "/v1/optimize": {"post": {
            "summary": "Optimize a TRA program",
            "requestBody": {"required": true,
                "description": "A Program; an execute request's `data` is accepted and not read, so that one body serves both",
                "content": json_content(r("ExecuteRequest"))},
            "responses": merge(json!({"200": {"description": "The chosen plan, its cost, the alternatives, rules and stats",
                "content": json_content(r("OptimizeAnswer"))}}), optimize_errors)
        }},
        "/v1/execute": {"post": {
            "summary": "Optimize a program and run the chosen plan on the thread executor",
            "description": format!(
                "At most {} executions run at once, within an execution memory budget of {} bytes estimated before \
                 each starts (tuples × per-tuple overhead + block bytes, and sites); others wait until their deadline \
                 ({} s of optimization + {} s of execution). At most {} sites. Output floats that JSON has no number \
                 for are the strings \"NaN\", \"Infinity\", \"-Infinity\". Input data may be a base64 .npy \
                 ({{\"npy\": …}}); with \"return\": {{\"format\": \"npy\"}} every output comes back as one, up \
                 to {} floats each (--max-return-floats).",
                config.max_concurrent_executions,
                config.execute_memory_bytes,
                config.optimize_time.as_secs_f64(),
                config.execute_time.as_secs_f64(),
                config.max_execute_sites,
                config.max_return_floats
            ),
            "requestBody": {"required": true, "content": json_content(r("ExecuteRequest"))},
            "responses": merge(json!({"200": {"description": "Timings, floats moved (measured and predicted), outputs",
                "content": json_content(r("ExecuteAnswer"))}}), execute_errors)
        }}
    });

    let (mut paths, mut schemas) = (paths, schemas);
    crate::einsum::add_to_openapi(&mut paths, &mut schemas);
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "tra",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Optimize tensor relational algebra (TRA) programs into distributed implementation-algebra (IA) plans. \
                            Every error is {\"error\": {\"code\", \"message\", \"at\"}}; unknown routes answer 404 and wrong \
                            methods 405 in the same shape."
        },
        "paths": paths,
        "components": {"schemas": schemas}
    })
}

fn merge(mut a: Value, b: Value) -> Value {
    if let (Some(a), Value::Object(b)) = (a.as_object_mut(), b) {
        a.extend(b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `$ref` points at a schema that exists.
    #[test]
    fn refs_resolve_and_routes_are_covered() {
        let doc = document(&ServerConfig::default());
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        fn refs(v: &Value, out: &mut Vec<String>) {
            match v {
                Value::Object(m) => {
                    if let Some(Value::String(s)) = m.get("$ref") {
                        out.push(s.clone());
                    }
                    m.values().for_each(|x| refs(x, out));
                }
                Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
                _ => {}
            }
        }
        let mut all = Vec::new();
        refs(&doc, &mut all);
        assert!(!all.is_empty());
        for r in all {
            let name = r.strip_prefix("#/components/schemas/").unwrap();
            assert!(schemas.contains_key(name), "dangling $ref {r}");
        }
        for (method, path, _) in super::super::ROUTES {
            let m = method.to_ascii_lowercase();
            assert!(doc["paths"][path][&m].is_object(), "route {method} {path} missing from the document");
        }
    }
}
