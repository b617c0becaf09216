//! What `tra run`, `tra einsum` and `tra optimize` print: a few lines a
//! person reads at a glance (the plan chosen, its cost, the time it took,
//! the floats moved next to the prediction, where the outputs went, the
//! warnings), or with `--format json` the full report machines parse.
//!
//! The summaries are drawn from the JSON reports themselves, so the two
//! formats can never tell different stories.

use serde_json::Value;
use std::fmt::Write;

/// What a command prints.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    /// A short summary for a person.
    #[default]
    Summary,
    /// The full report as JSON (stable, for scripts).
    Json,
}

/// `1234567` as `1,234,567`.
pub fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A JSON count as `1,234,567`, or `?` when absent.
fn count(v: &Value) -> String {
    match v.as_u64() {
        Some(n) => grouped(n),
        None => v.as_f64().map(|f| format!("{f}")).unwrap_or_else(|| "?".into()),
    }
}

/// Milliseconds, to a sensible precision.
fn ms(v: &Value) -> String {
    let Some(t) = v.as_f64() else { return "?".into() };
    if t >= 10_000.0 {
        format!("{:.1} s", t / 1e3)
    } else if t >= 100.0 {
        format!("{t:.0} ms")
    } else {
        format!("{t:.1} ms")
    }
}

/// A float for a person: NaN and infinities as the report spells them.
fn number(v: &Value) -> String {
    match v {
        Value::Number(n) => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{f:.0}"),
            Some(f) => format!("{f:.6}"),
            None => n.to_string(),
        },
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A list of integers as `(4, 4, 50, 50)`.
fn shape(v: &Value) -> String {
    let items: Vec<String> = v.as_array().map(|a| a.iter().map(|d| d.to_string()).collect()).unwrap_or_default();
    format!("({})", items.join(", "))
}

/// The measured floats next to the prediction.
fn floats_line(measured: &Value, predicted: &Value) -> String {
    let verdict = match (measured.as_u64(), predicted.as_u64()) {
        (Some(m), Some(p)) if m == p => "as predicted".to_string(),
        (Some(_), Some(_)) => "DIFFERS from the prediction".to_string(),
        _ => String::new(),
    };
    format!("network floats: {} measured, {} predicted ({verdict})", count(measured), count(predicted))
}

/// The warnings in one line (each was printed in full on standard error
/// as it happened), or nothing.
fn warnings(out: &mut String, v: &Value) {
    let list: Vec<String> = v
        .as_array()
        .into_iter()
        .flatten()
        .map(|w| format!("{} at {}", w["code"].as_str().unwrap_or("?"), w["at"].as_str().unwrap_or("?")))
        .collect();
    if !list.is_empty() {
        let _ = writeln!(out, "warnings: {} ({}; the messages are above)", list.len(), list.join(", "));
    }
}

/// One line per output of a `tra run` report: where it went and how, or
/// its checksum when it was not written.
fn outputs(out: &mut String, v: &Value) {
    let Some(map) = v.as_object() else { return };
    let _ = writeln!(out, "outputs:");
    for (name, o) in map {
        let relation = format!("key bounds {} × blocks {}", shape(&o["key_bounds"]), shape(&o["array_bounds"]));
        match o["path"].as_str() {
            Some(path) => {
                let layout = o["layout"].as_str().unwrap_or("?");
                let mut line = format!("  {name} → {path}  {layout} {}", shape(&o["shape"]));
                if layout == "relation" {
                    let _ = write!(line, " ({relation})");
                }
                if let Some(z) = o["zero_filled_keys"].as_u64() {
                    let _ = write!(line, ", {} missing blocks written as zeros", grouped(z));
                }
                let busy: Vec<f64> = o["site_write_ms"]
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_f64).collect())
                    .unwrap_or_default();
                if let (Some(least), Some(most)) =
                    (busy.iter().copied().reduce(f64::min), busy.iter().copied().reduce(f64::max))
                {
                    let _ = write!(line, "; writing it took {least:.0}–{most:.0} ms per site");
                }
                let _ = writeln!(out, "{line}");
            }
            None => {
                let _ = writeln!(
                    out,
                    "  {name}: not written (--output {name}=FILE.npy writes it); {relation}, sum {}",
                    number(&o["checksum"]["sum"])
                );
            }
        }
    }
}

/// The share of a machine's processors others may take during a run (its
/// `others_busy`) before the summary says its times are likely slow.
const DISTURBED: f64 = 0.10;

/// The summary of a `tra run` report (threads or cluster).
pub fn run_summary(v: &Value) -> String {
    let mut out = String::new();
    let cluster = v["runtime"] == "cluster";
    let place = if cluster {
        let hosts = if v["hosts"].is_null() { "local processes".to_string() } else { "the hosts' workers".to_string() };
        format!(
            "{} sites ({} processes × {} workers, {hosts})",
            count(&v["sites"]),
            count(&v["processes"]),
            count(&v["workers_per_process"])
        )
    } else {
        format!("{} sites ({} threads)", count(&v["sites"]), count(&v["threads"]))
    };
    let _ = writeln!(
        out,
        "ran {} on {place}, {}",
        v["program"].as_str().unwrap_or("?"),
        v["dtype"].as_str().unwrap_or("?")
    );
    let plan = v["strategy"].as_str().unwrap_or("the optimizer's plan");
    let _ = writeln!(out, "plan: {plan}");
    if cluster && !v["chosen_strategy"].is_null() && v["chosen_strategy"] != v["strategy"] {
        let _ = writeln!(out, "      (the optimizer's choice was: {})", v["chosen_strategy"].as_str().unwrap_or("?"));
    }
    // Why the optimizer chose it: only when the run executes that choice.
    let alts = v["alternatives"].as_array().map_or(&[][..], |a| a.as_slice());
    if alts.first().is_some_and(|a| a["label"] == v["strategy"]) {
        if let Some(why) = why_chosen(alts, v["cost_model"].as_str().unwrap_or("network")) {
            let _ = writeln!(out, "{why}");
        }
    }
    if let Some(flops) = v["flops_predicted"].as_u64() {
        let _ = writeln!(
            out,
            "predicted cost: {} network floats, {} flops",
            count(&v["network_floats_predicted"]),
            grouped(flops)
        );
    }
    let _ = writeln!(out, "{}", floats_line(&v["network_floats_measured"], &v["network_floats_predicted"]));
    let t = &v["timings_ms"];
    let phases: Vec<String> = ["optimize", "job", "load", "run", "write"]
        .iter()
        .filter(|p| !t[**p].is_null())
        .map(|p| format!("{p} {}", ms(&t[*p])))
        .collect();
    let _ = writeln!(out, "time: {} ({})", ms(&t["total"]), phases.join(", "));
    if let Some(others) = v["others_busy"].as_f64().filter(|&o| o > DISTURBED) {
        let _ = writeln!(
            out,
            "      (other programs or the hypervisor took {:.0}% of a machine's processors meanwhile: these times are \
             likely slow)",
            100.0 * others
        );
    }
    if let Some(gemm) = v["gemm"].as_str().filter(|g| !g.is_empty()) {
        let _ = writeln!(out, "GEMM: {gemm}");
    }
    outputs(&mut out, &v["outputs"]);
    warnings(&mut out, &v["warnings"]);
    let _ = write!(out, "(--format json: the full report, with every operator's time and floats)");
    out
}

/// A small dense result as numpy would print it (nested lists), if it has
/// few enough values to read.
fn small_data(v: &Value) -> Option<String> {
    fn len(v: &Value) -> usize {
        match v {
            Value::Array(a) => a.iter().map(len).sum(),
            _ => 1,
        }
    }
    fn show(v: &Value) -> String {
        match v {
            Value::Array(a) => format!("[{}]", a.iter().map(show).collect::<Vec<_>>().join(", ")),
            other => number(other),
        }
    }
    (!v.is_null() && len(v) <= 64).then(|| show(v))
}

/// The summary of a `tra einsum` report.
pub fn einsum_summary(v: &Value) -> String {
    let mut out = String::new();
    let o = &v["output"];
    let _ = writeln!(
        out,
        "einsum {} on {} sites (block {}, {} executor)",
        v["expression"].as_str().unwrap_or("?"),
        count(&v["sites"]),
        count(&v["block"]),
        v["executor"].as_str().unwrap_or("?")
    );
    let _ = writeln!(out, "plan: {}", v["strategy"].as_str().unwrap_or("the optimizer's plan"));
    let _ = writeln!(
        out,
        "predicted cost: {} network floats, {} flops",
        count(&v["cost"]["network_floats"]),
        count(&v["cost"]["flops"])
    );
    let _ = writeln!(out, "{}", floats_line(&v["network_floats_measured"], &v["network_floats_predicted"]));
    let t = &v["timings_ms"];
    let phases: Vec<String> =
        ["compile", "optimize", "load", "run"].iter().map(|p| format!("{p} {}", ms(&t[*p]))).collect();
    let _ = writeln!(out, "time: {} ({})", ms(&t["total"]), phases.join(", "));
    let name = o["name"].as_str().unwrap_or("out");
    match o["path"].as_str() {
        Some(path) => {
            let _ = writeln!(out, "output: {name} → {path}  dense {} float64", shape(&o["shape"]));
        }
        None => {
            let _ = writeln!(
                out,
                "output: {name} {}, sum {} (--output {name}=FILE.npy writes it)",
                shape(&o["shape"]),
                number(&o["checksum"]["sum"])
            );
            if let Some(data) = small_data(&o["data"]) {
                let _ = writeln!(out, "  {data}");
            }
        }
    }
    if let Some(p) = v["padding"].as_str().filter(|p| !p.is_empty() && !p.contains("no padding")) {
        let _ = writeln!(out, "padding: {p}");
    }
    warnings(&mut out, &v["warnings"]);
    let _ = write!(out, "(--format json: the full report, with the contraction order and the plan)");
    out
}

/// The alternatives of an optimizer answer as a run report carries them
/// (what [`why_chosen`] reads): each one's label, network floats, flops,
/// minimized figure (`total`), predicted seconds, bytes moved through
/// memory and operators.
pub fn alternatives_json(answer: &tra_optimizer::optimize::OptimizeAnswer) -> Vec<Value> {
    answer
        .alternatives
        .iter()
        .map(|a| {
            serde_json::json!({
                "label": a.label, "network_floats": a.cost.network_floats, "flops": a.cost.flops,
                "total": a.cost.total, "seconds": a.cost.seconds,
                "memory_bytes": a.site_loads.iter().map(|s| s.memory_bytes).sum::<u64>(),
                "operators": a.plan.nodes.len(),
            })
        })
        .collect()
}

/// A ratio of costs as the page writes it: `1.50×`, and never a
/// misleading `1.00×` for a plan that costs more (`1.004×`).
fn ratio_text(total: f64, best: f64) -> String {
    if best.is_nan() || best <= 0.0 {
        return "more than".into();
    }
    let r = total / best;
    match format!("{r:.2}") {
        s if s == "1.00" && r < 1.001 => format!("{r:.4}×"),
        s if s == "1.00" => format!("{r:.3}×"),
        s => format!("{s}×"),
    }
}

/// One alternative's figures, from an optimize answer (`{"label", "cost":
/// {…}, "plan", "site_loads"}`) or a run report (`{"label", "total", …}`).
struct Alt<'a> {
    label: &'a str,
    total: f64,
    floats: u64,
    flops: u64,
    /// Bytes its kernels move through memory, summed over sites.
    memory: Option<u64>,
    operators: Option<usize>,
}

impl<'a> Alt<'a> {
    fn of(a: &'a Value) -> Option<Alt<'a>> {
        let c = if a["cost"].is_object() { &a["cost"] } else { a };
        let memory = match a["site_loads"].as_array() {
            Some(sites) => Some(sites.iter().filter_map(|s| s["memory_bytes"].as_u64()).sum()),
            None => a["memory_bytes"].as_u64(),
        };
        let operators = a["plan"]["nodes"].as_object().map(|n| n.len()).or(a["operators"].as_u64().map(|n| n as usize));
        Some(Alt {
            label: a["label"].as_str().unwrap_or("?"),
            total: c["total"].as_f64()?,
            floats: c["network_floats"].as_u64().unwrap_or(0),
            flops: c["flops"].as_u64().unwrap_or(0),
            memory,
            operators,
        })
    }
}

/// The line that says why the optimizer chose `alternatives[0]` (the chosen
/// plan first, the others cheapest first, as the optimizer orders them):
/// the runner-up and its cost ratio, or, for a tie, the tie-break that
/// decided, in the optimizer's order (`optimizer/src/optimize.rs`, `pick`).
/// `None` when the alternatives carry no costs.
pub fn why_chosen(alternatives: &[Value], cost_model: &str) -> Option<String> {
    let alts: Vec<Alt> = alternatives.iter().map(Alt::of).collect::<Option<_>>()?;
    let best = alts.first()?;
    let Some(runner) = alts.get(1) else {
        return Some("why: the e-graph holds only one strategy for this program".into());
    };
    if cost_model == "time" {
        return Some(why_time(&alts));
    }
    // α = 1, β = 0 (the default): the cost is the network floats.
    let measure = if alts.iter().all(|a| a.total == a.floats as f64) {
        "network floats"
    } else {
        "cost (α·floats + β·flops)"
    };
    let tied: Vec<&Alt> = alts[1..].iter().filter(|a| a.total == best.total).collect();
    if tied.is_empty() {
        return Some(format!(
            "why: runner-up: {} — {} the {measure}",
            runner.label,
            ratio_text(runner.total, best.total)
        ));
    }
    let mut out = String::new();
    for t in &tied {
        let by = if best.flops != t.flops {
            format!("fewer flops ({} against {})", grouped(best.flops), grouped(t.flops))
        } else if best.floats != t.floats {
            format!("fewer network floats ({} against {})", grouped(best.floats), grouped(t.floats))
        } else {
            "the first place in the optimizer's fixed order (same flops, same network floats)".into()
        };
        let _ = writeln!(out, "why: tied on {measure} with {}; chosen by the tie-break: {by}", t.label);
    }
    let _ = write!(
        out,
        "     (ties are broken by fewer flops, then fewer network floats, then a fixed order: the plan of the \
         optimizer's unrestricted search before the plans restricted to one join strategy)"
    );
    if let Some(next) = alts[1..].iter().find(|a| a.total != best.total) {
        let _ = write!(out, "\n     next: {} — {} the {measure}", next.label, ratio_text(next.total, best.total));
    }
    Some(out)
}

/// [`why_chosen`] under the time model: plans predicted within its
/// resolution of the fastest are not told apart, and the one whose kernels
/// move the fewest bytes through memory wins, then the one with the fewest
/// operators, then the faster prediction.
fn why_time(alts: &[Alt]) -> String {
    let best = &alts[0];
    let fastest = alts.iter().map(|a| a.total).fold(f64::INFINITY, f64::min);
    let bound = fastest * (1.0 + tra_optimizer::optimize::TIME_RESOLUTION);
    let pct = tra_optimizer::optimize::TIME_RESOLUTION * 100.0;
    let close: Vec<&Alt> = alts[1..].iter().filter(|a| a.total <= bound).collect();
    if close.is_empty() || best.total > bound {
        let runner = &alts[1];
        return format!(
            "why: runner-up: {} — {} the predicted time",
            runner.label,
            ratio_text(runner.total, best.total)
        );
    }
    let mut out = String::new();
    for t in &close {
        let by = match (best.memory, t.memory, best.operators, t.operators) {
            (Some(m), Some(n), ..) if m != n => {
                format!("fewer bytes moved through memory ({} against {})", grouped(m), grouped(n))
            }
            (.., Some(m), Some(n)) if m != n => format!("fewer operators ({m} against {n})"),
            _ => "the faster prediction".into(),
        };
        let _ = writeln!(
            out,
            "why: predicted within {pct:.0}% of {} ({} its time), too close for the time model to tell apart; chosen \
             by the tie-break: {by}",
            t.label,
            ratio_text(best.total, t.total)
        );
    }
    let _ = write!(
        out,
        "     (plans within {pct:.0}% are broken by fewer bytes moved through memory, then fewer operators, then the \
         faster prediction)"
    );
    if let Some(next) = alts[1..].iter().find(|a| a.total > bound) {
        let _ = write!(out, "\n     next: {} — {} the predicted time", next.label, ratio_text(next.total, best.total));
    }
    out
}

/// Predicted seconds, in the unit that reads best.
fn seconds(v: &Value) -> String {
    match v.as_f64() {
        Some(s) if s >= 1.0 => format!("{s:.2} s"),
        Some(s) if s >= 1e-3 => format!("{:.2} ms", s * 1e3),
        Some(s) => format!("{:.1} µs", s * 1e6),
        None => "—".into(),
    }
}

/// The summary of a `tra optimize` answer (its JSON) for `sites` sites.
pub fn optimize_summary(v: &Value, sites: usize) -> String {
    let mut out = String::new();
    let alts = v["alternatives"].as_array().cloned().unwrap_or_default();
    let chosen = alts.first().and_then(|a| a["label"].as_str()).unwrap_or("the only plan");
    let c = &v["cost"];
    let _ = writeln!(out, "plan: {chosen}");
    let mut line =
        format!("cost: {} network floats, {} flops on {sites} sites", count(&c["network_floats"]), count(&c["flops"]));
    let time_model = v["stats"]["cost_model"].as_str() == Some("time");
    if !time_model && c["total"].as_f64() != c["network_floats"].as_f64() {
        let _ = write!(line, " (weighted total {})", number(&c["total"]));
    }
    let _ = writeln!(out, "{line}");
    let _ = write!(out, "predicted time: {}", seconds(&c["seconds"]));
    let b = &c["bottleneck"];
    if let (Some(node), Some(site), Some(res)) = (b["node"].as_str(), b["site"].as_u64(), b["resource"].as_str()) {
        let _ = write!(out, ", bound by {node} on site {site} ({res})");
    }
    let model = if time_model { "time" } else { "network" };
    let _ = writeln!(out, "; chosen by the {model} cost model");
    if let Some(why) = why_chosen(&alts, model) {
        let _ = writeln!(out, "{why}");
    }
    let nodes = v["plan"]["nodes"].as_object().map_or(0, |n| n.len());
    let _ = writeln!(out, "plan size: {nodes} operators (--format text prints it with each operator's cost)");
    if alts.len() > 1 {
        let best = alts[0]["cost"]["total"].as_f64().unwrap_or(0.0);
        let _ = writeln!(out, "alternatives, cheapest first:");
        // Under `time`, one predicted a little faster than the chosen plan
        // (within the model's resolution) lost on the bytes its kernels move.
        let faster = alts.iter().skip(1).any(|a| a["cost"]["total"].as_f64().is_some_and(|t| t < best));
        for a in &alts {
            let total = a["cost"]["total"].as_f64().unwrap_or(0.0);
            let ratio = if best > 0.0 { format!("{:.2}×", total / best) } else { "—".into() };
            let _ = writeln!(
                out,
                "  {:>7}  {:>16} floats  {:>10}  {}",
                ratio,
                count(&a["cost"]["network_floats"]),
                seconds(&a["cost"]["seconds"]),
                a["label"].as_str().unwrap_or("?")
            );
        }
        if faster {
            let _ = writeln!(
                out,
                "  (below 1.00×: predicted within {:.0}% of the chosen plan, too close for the time model to tell \
                 apart; the chosen plan's kernels move fewer bytes through memory)",
                tra_optimizer::optimize::TIME_RESOLUTION * 100.0
            );
        }
    }
    let rules: Vec<&str> = v["rules_applied"].as_array().into_iter().flatten().filter_map(|r| r.as_str()).collect();
    if !rules.is_empty() {
        let _ = writeln!(out, "rules applied: {}", rules.join(", "));
    }
    let st = &v["stats"];
    let _ = writeln!(
        out,
        "optimized in {} ({} e-nodes, {} iterations, {})",
        ms(&st["optimize_ms"]),
        count(&st["egraph_nodes"]),
        count(&st["iterations"]),
        match (st["stop_reason"].as_str().unwrap_or("?"), st["stop_phase"].as_str()) {
            (reason, Some(phase)) => format!("{reason} in the {} phase", phase.replace('_', "-")),
            (reason, None) => reason.to_string(),
        }
    );
    warnings(&mut out, &v["warnings"]);
    let _ = write!(out, "(--format json: the full answer with every plan; --format dot: Graphviz)");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_thousands() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1,000");
        assert_eq!(grouped(64_000_000), "64,000,000");
    }

    #[test]
    fn a_run_summary_names_the_gemm_on_one_line() {
        let report = serde_json::json!({
            "program": "p.json", "runtime": "threads", "sites": 2, "threads": 2, "dtype": "f32",
            "gemm": "built-in (OpenBLAS not found)", "gemm_detail": "builtin (the gemm crate; OpenBLAS not used: …)",
            "network_floats_measured": 0, "network_floats_predicted": 0, "timings_ms": {"total": 1.0},
        });
        let text = run_summary(&report);
        let lines: Vec<&str> = text.lines().filter(|l| l.contains("GEMM")).collect();
        assert_eq!(lines, ["GEMM: built-in (OpenBLAS not found)"], "{text}");
        assert!(!text.contains("gemm crate"), "{text}");
    }

    #[test]
    fn a_cluster_run_summary_names_the_plan_outputs_and_warnings() {
        let report = serde_json::json!({
            "program": "p.json", "runtime": "cluster", "processes": 2, "workers_per_process": 2, "hosts": null,
            "sites": 4, "dtype": "f32", "strategy": "CMM — shuffle X by k, Y by k", "chosen_strategy": "BMM — broadcast X",
            "network_floats_measured": 1200, "network_floats_predicted": 1200,
            "timings_ms": {"optimize": 3.0, "job": 40.0, "load": 1.0, "run": 30.0, "write": 2.0, "total": 45.5},
            "outputs": {
                "S": {"key_bounds": [4], "array_bounds": [50, 50], "path": "s.npy", "layout": "relation",
                      "shape": [4, 50, 50], "zero_filled_keys": 1, "checksum": {"sum": 1.5},
                      "site_write_ms": [0.4, 2.6, 0.0, 1.0]},
                "Z": {"key_bounds": [4, 4], "array_bounds": [50, 50], "checksum": {"sum": "NaN"}}
            },
            "warnings": [{"code": "rule_failed", "rule": "R1-4", "at": "D", "message": "…"}],
            "others_busy": 0.02
        });
        let text = run_summary(&report);
        assert!(!text.contains("other programs"), "{text}");
        let mut disturbed = report.clone();
        disturbed["others_busy"] = serde_json::json!(0.31);
        let busy = run_summary(&disturbed);
        assert!(busy.contains("other programs or the hypervisor took 31% of a machine's processors"), "{busy}");
        for want in [
            "ran p.json on 4 sites (2 processes × 2 workers, local processes), f32",
            "plan: CMM — shuffle X by k, Y by k",
            "(the optimizer's choice was: BMM — broadcast X)",
            "network floats: 1,200 measured, 1,200 predicted (as predicted)",
            "time: 45.5 ms (optimize 3.0 ms, job 40.0 ms, load 1.0 ms, run 30.0 ms, write 2.0 ms)",
            "S → s.npy  relation (4, 50, 50) (key bounds (4) × blocks (50, 50)), 1 missing blocks written as zeros; writing it took 0–3 ms per site",
            "Z: not written (--output Z=FILE.npy writes it); key bounds (4, 4) × blocks (50, 50), sum NaN",
            "warnings: 1 (rule_failed at D;",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
    }

    #[test]
    fn an_alternative_predicted_faster_than_the_chosen_plan_is_explained() {
        let alt = |label: &str, total: f64| serde_json::json!({"label": label, "cost": {"total": total, "seconds": total, "network_floats": 8, "flops": 1}});
        let answer = |alternatives: Vec<Value>| {
            serde_json::json!({
                "plan": {"nodes": {}}, "cost": alternatives[0]["cost"].clone(), "alternatives": alternatives,
                "stats": {"cost_model": "time", "optimize_ms": 1.0, "egraph_nodes": 9, "iterations": 2, "stop_reason": "saturated"}
            })
        };
        let text = optimize_summary(&answer(vec![alt("fused", 0.138), alt("unfused", 0.132)]), 2);
        assert!(text.contains("0.96×") && text.contains("within 5% of the chosen plan"), "{text}");
        let text = optimize_summary(&answer(vec![alt("fused", 0.138), alt("CMM", 0.145)]), 2);
        assert!(!text.contains("within 5%"), "{text}");
    }

    #[test]
    fn why_names_the_runner_up_or_the_tie_break() {
        let alt = |label: &str, floats: u64, flops: u64| serde_json::json!({"label": label, "total": floats as f64, "network_floats": floats, "flops": flops});
        let why = why_chosen(&[alt("RMM", 64, 9), alt("CMM", 96, 9), alt("BMM", 160, 9)], "network").unwrap();
        assert_eq!(why, "why: runner-up: CMM — 1.50× the network floats");
        let why = why_chosen(&[alt("BMM", 64, 8), alt("RMM", 64, 9), alt("CMM", 80, 9)], "network").unwrap();
        assert!(
            why.starts_with("why: tied on network floats with RMM; chosen by the tie-break: fewer flops (8 against 9)")
        );
        assert!(why.contains("next: CMM — 1.25× the network floats"), "{why}");
        let why = why_chosen(&[alt("BMM", 64, 9), alt("RMM", 64, 9)], "network").unwrap();
        assert!(why.contains("the first place in the optimizer's fixed order"), "{why}");
        let why = why_chosen(&[alt("A", 1000, 9), alt("B", 1003, 9)], "network").unwrap();
        assert!(why.ends_with("1.003× the network floats"), "{why}");
        let timed = |label: &str, total: f64, memory: u64| serde_json::json!({"label": label, "total": total, "memory_bytes": memory});
        let why = why_chosen(&[timed("fused", 0.138, 10), timed("unfused", 0.132, 30)], "time").unwrap();
        assert!(
            why.contains("within 5% of unfused") && why.contains("fewer bytes moved through memory (10 against 30)"),
            "{why}"
        );
        let why = why_chosen(&[timed("fused", 0.1, 10), timed("CMM", 0.2, 5)], "time").unwrap();
        assert_eq!(why, "why: runner-up: CMM — 2.00× the predicted time");
    }

    #[test]
    fn floats_that_differ_are_called_out() {
        assert!(floats_line(&1.into(), &2.into()).contains("DIFFERS"));
        assert!(floats_line(&2.into(), &2.into()).contains("as predicted"));
    }
}
