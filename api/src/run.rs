//! `tra run FILE --input NAME=FILE.npy … --output NAME=FILE.npy [--dense]
//! [--sites N] [--dtype f32|f64]`: optimize a program, load its inputs from
//! `.npy` files (either layout, docs/API.md "Files"), run the chosen plan on
//! worker threads, write the outputs, and answer a JSON summary: timings per
//! operator, floats moved per shuffle and broadcast, measured next to the
//! optimizer's prediction. `--alternative TEXT` runs another of the
//! optimizer's alternatives, `--plan FILE` a given IA plan ([`choose_plan`],
//! shared with the cluster runtime).

use std::collections::BTreeMap;
use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tra_executor::npy::{self, Layout};
use tra_executor::threads::{Dtype, Elem, Progress, RunOptions, TRelation, ThreadRuntime};
use tra_optimizer::check::check_plan;
use tra_optimizer::cost::{plan_report, Weights};
use tra_optimizer::optimize::{optimize_with, OnRuleFailure, OptimizeAnswer};
use tra_optimizer::{Cluster, Plan, Program, ProgramError};

/// Arguments of `tra run`.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// The program (JSON); `-` reads standard input.
    pub file: String,
    /// An input relation from a `.npy` file: `NAME=FILE.npy`, once per input.
    /// The file holds either the relation (shape `key_bounds ++ array_bounds`)
    /// or, when key arity equals block rank, the dense tensor.
    #[arg(long = "input", value_name = "NAME=FILE.npy")]
    pub inputs: Vec<String>,
    /// Where to write an output: `NAME=FILE.npy`, once per output wanted.
    /// An output is written as the dense tensor (numpy's shape,
    /// `key_bounds[i] · array_bounds[i]`) when its key arity equals its
    /// block rank, and in the relation layout (shape `key_bounds ++
    /// array_bounds`) otherwise; `--layout` chooses per output.
    #[arg(long = "output", value_name = "NAME=FILE.npy")]
    pub outputs: Vec<String>,
    /// Write every output as a dense tensor; an output whose key arity
    /// differs from its block rank is an error naming it (unless `--layout
    /// NAME=relation` says otherwise).
    #[arg(long)]
    pub dense: bool,
    /// The layout of one output, `NAME=relation` or `NAME=dense`; overrides
    /// the default and `--dense`.
    #[arg(long = "layout", value_name = "NAME=relation|dense")]
    pub layouts: Vec<String>,
    /// Override the program's `cluster.sites` (one worker thread per site).
    #[arg(long)]
    pub sites: Option<usize>,
    /// Element type to compute in: `f32` or `f64`. Default: the inputs' type
    /// (they must agree); other float files are converted.
    #[arg(long, value_parser = ["f32", "f64"])]
    pub dtype: Option<String>,
    /// Kernel threads (default: one per core).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Never draw a progress bar.
    #[arg(long)]
    pub no_progress: bool,
    /// Fail when a rewrite rule breaks an invariant of the optimizer, instead
    /// of optimizing again without it (and warning).
    #[arg(long)]
    pub strict: bool,
    /// The cost model and the cluster profile.
    #[command(flatten)]
    pub cost: crate::cost_model::CostModelArgs,
    /// Time and memory of the optimization (the run has no time limit).
    #[command(flatten)]
    pub bounds: crate::optimize_limits::OptimizeLimitArgs,
}

/// Which plan a run executes: the optimizer's choice (the default), the
/// cheapest alternative whose label contains `alternative`, or the IA plan
/// of the file `plan`.
#[derive(Debug, Clone, Default)]
pub struct PlanChoice {
    /// An IA plan file (JSON, as `tra optimize` writes plans).
    pub plan: Option<PathBuf>,
    /// Text in the label of one of the optimizer's alternatives (`BMM`, `CMM`, …).
    pub alternative: Option<String>,
}

/// The plan a run executes, what it is called, and what it is predicted to cost.
#[derive(Debug, Clone)]
pub struct ChosenPlan {
    /// The plan.
    pub plan: Plan,
    /// Its strategy in words (`the plan of FILE` for a plan file).
    pub label: Option<String>,
    /// Floats its shuffles and broadcasts move.
    pub network_floats: u64,
    /// Its flops.
    pub flops: u64,
}

/// A program error as one line: `error [code] at node: message`.
pub fn report(e: &ProgramError) -> String {
    if e.at.is_empty() {
        format!("error [{}]: {}", e.code.as_str(), e.message)
    } else {
        format!("error [{}] at {}: {}", e.code.as_str(), e.at, e.message)
    }
}

/// The text of a file, or of standard input for `-`.
pub fn read_text(file: &str) -> Result<String, String> {
    if file == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).map_err(|e| format!("cannot read standard input: {e}"))?;
        Ok(s)
    } else {
        std::fs::read_to_string(file).map_err(|e| format!("cannot read {file}: {e}"))
    }
}

/// A program from a file (or standard input for `-`), errors as [`report`] words them.
pub fn read_program(file: &str) -> Result<Program, String> {
    Program::from_json(&read_text(file)?).map_err(|e| report(&e))
}

/// `NAME=PATH` pairs of a flag (`--input`, `--output`), checked against the names allowed.
pub fn pairs(
    flag: &str,
    items: &[String],
    allowed: &[String],
    what: &str,
) -> Result<BTreeMap<String, PathBuf>, String> {
    let mut out = BTreeMap::new();
    for item in items {
        let (name, path) = item
            .split_once('=')
            .filter(|(n, p)| !n.is_empty() && !p.is_empty())
            .ok_or_else(|| format!("--{flag} {item:?}: expected NAME=FILE.npy"))?;
        if !allowed.iter().any(|a| a == name) {
            return Err(format!(
                "--{flag} {name}={path}: the program has no {what} `{name}` (its {what}s: {})",
                allowed.join(", ")
            ));
        }
        if out.insert(name.to_string(), PathBuf::from(path)).is_some() {
            return Err(format!("--{flag} {name}: given twice"));
        }
    }
    Ok(out)
}

/// How each output named by `--output` is written: `--layout NAME=…` if
/// given, else dense with `--dense`, else dense when the output's key arity
/// equals its block rank and the relation layout otherwise. An output that
/// is asked to be dense but cannot be is an error naming it, before any work.
pub fn output_layouts(
    p: &Program,
    args: &RunArgs,
    outputs: &BTreeMap<String, PathBuf>,
) -> Result<BTreeMap<String, Layout>, String> {
    let mut asked: BTreeMap<String, Layout> = BTreeMap::new();
    for item in &args.layouts {
        let (name, layout) =
            item.split_once('=').ok_or_else(|| format!("--layout {item:?}: expected NAME=relation or NAME=dense"))?;
        let layout = match layout {
            "relation" => Layout::Relation,
            "dense" => Layout::Dense,
            other => return Err(format!("--layout {name}={other}: the layout is `relation` or `dense`")),
        };
        if !p.outputs.iter().any(|o| o == name) {
            return Err(format!(
                "--layout {item}: the program has no output `{name}` (its outputs: {})",
                p.outputs.join(", ")
            ));
        }
        if !outputs.contains_key(name) {
            return Err(format!("--layout {item}: output `{name}` is not written (pass --output {name}=FILE.npy)"));
        }
        if asked.insert(name.to_string(), layout).is_some() {
            return Err(format!("--layout {name}: given twice"));
        }
    }
    if outputs.is_empty() {
        return Ok(BTreeMap::new());
    }
    let typed = tra_optimizer::check::check_program(p).map_err(|e| report(&e))?;
    let mut layouts = BTreeMap::new();
    for name in outputs.keys() {
        let t = &typed.types[name];
        let (keys, rank) = (t.frontier.len(), t.array_bounds.len());
        let can_be_dense = keys == rank;
        let layout = match (asked.get(name), args.dense) {
            (Some(&l), _) => l,
            (None, true) => Layout::Dense,
            (None, false) if can_be_dense => Layout::Dense,
            (None, false) => Layout::Relation,
        };
        if layout == Layout::Dense && !can_be_dense {
            let flag = if asked.contains_key(name) { format!("--layout {name}=dense") } else { "--dense".into() };
            return Err(format!(
                "output `{name}` cannot be written dense ({flag}): its key has {keys} dim{} (key bounds {:?}) but \
                 its blocks have rank {rank} ({:?}); write it in the relation layout with --layout {name}=relation",
                if keys == 1 { "" } else { "s" },
                t.frontier,
                t.array_bounds
            ));
        }
        layouts.insert(name.clone(), layout);
    }
    Ok(layouts)
}

/// Peak resident memory of this process, from `/proc/self/status` (Linux).
pub fn peak_rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The `--input` and `--output` files of a run, checked against the
/// program (every input given, no unknown name, each input a float `.npy`),
/// and the element type to compute in: `--dtype`, or the inputs' own (they
/// must agree). Headers are read first, so that a missing or wrong file fails
/// before any work.
#[allow(clippy::type_complexity)]
pub fn files_and_dtype(
    p: &Program,
    args: &RunArgs,
) -> Result<(BTreeMap<String, PathBuf>, BTreeMap<String, PathBuf>, Dtype), String> {
    let input_names: Vec<String> = p.inputs.keys().cloned().collect();
    let inputs = pairs("input", &args.inputs, &input_names, "input")?;
    if let Some(missing) = input_names.iter().find(|n| !inputs.contains_key(*n)) {
        return Err(format!(
            "input `{missing}` has no data: pass --input {missing}=FILE.npy (the program's inputs: {})",
            input_names.join(", ")
        ));
    }
    let outputs = pairs("output", &args.outputs, &p.outputs, "output")?;
    let dtype = input_dtype(&inputs, args.dtype.as_deref())?;
    Ok((inputs, outputs, dtype))
}

/// The element type to compute in for float `.npy` inputs (`NAME → FILE`):
/// `forced` (`--dtype f32|f64`), else the files' own type, which must agree
/// (no inputs: f64). Reads only the headers; a file that is missing or holds
/// no floats is an error naming its input. Shared by `tra run` and `tra
/// einsum`.
pub fn input_dtype(inputs: &BTreeMap<String, PathBuf>, forced: Option<&str>) -> Result<Dtype, String> {
    let mut dtypes: BTreeMap<String, Dtype> = BTreeMap::new();
    for (name, path) in inputs {
        let h = npy::read_file_header(path).map_err(|e| format!("input `{name}`: {e}"))?;
        let d = h.dtype.float.ok_or_else(|| {
            format!(
                "input `{name}`: {}: holds {} values (dtype {:?}); tra reads float32 or float64",
                path.display(),
                h.dtype.numpy_name(),
                h.dtype.descr
            )
        })?;
        dtypes.insert(name.clone(), d);
    }
    let dtype = match forced {
        Some(d) => Dtype::parse(d).ok_or_else(|| format!("--dtype {d}: expected f32 or f64"))?,
        None => {
            let mut distinct: Vec<Dtype> = dtypes.values().copied().collect();
            distinct.dedup();
            distinct.sort_by_key(|d| d.size());
            distinct.dedup();
            match distinct.as_slice() {
                [] => Dtype::F64,
                [d] => *d,
                _ => {
                    let list: Vec<String> =
                        dtypes.iter().map(|(n, d)| format!("{} is {}", inputs[n].display(), d.numpy_name())).collect();
                    return Err(format!(
                        "the inputs have different dtypes ({}): pass --dtype f32 or --dtype f64 to convert them",
                        list.join(", ")
                    ));
                }
            }
        }
    };
    Ok(dtype)
}

/// Optimize a program with every rule within `bounds`; the answer and the
/// milliseconds it took, errors worded for the command line. A rule that
/// fails is left out and warned about on standard error (the warnings are
/// in the answer too), unless `strict`.
pub fn optimize_timed(
    p: &Program,
    strict: bool,
    bounds: &crate::optimize_limits::OptimizeLimitArgs,
) -> Result<(OptimizeAnswer, f64), String> {
    let t = Instant::now();
    let on_failure = if strict { OnRuleFailure::Fail } else { OnRuleFailure::Retry };
    let answer = bounds
        .within(|| optimize_with(p, &tra_rules::all(), &bounds.limits(), on_failure))
        .map_err(|e| report(&ProgramError::from(&e)))?;
    for w in &answer.warnings {
        eprintln!("warning [{}] at {}: {}", w.code, w.at, w.message);
    }
    Ok((answer, t.elapsed().as_secs_f64() * 1e3))
}

/// The plan to run: `choice.plan` read and checked against the program
/// ([`read_plan_file`]); else the alternative of `answer` whose label
/// contains `choice.alternative` (case-insensitive); else `answer`'s chosen
/// plan. `answer` may be `None` only with a plan file.
pub fn choose_plan(p: &Program, answer: Option<&OptimizeAnswer>, choice: &PlanChoice) -> Result<ChosenPlan, String> {
    if let Some(path) = &choice.plan {
        return read_plan_file(path, p);
    }
    let answer = answer.ok_or("internal error: no optimizer answer to choose a plan from")?;
    let alt = match &choice.alternative {
        None => answer.alternatives.first(),
        Some(text) => {
            let t = text.to_lowercase();
            let found = answer.alternatives.iter().find(|a| a.label.to_lowercase().contains(&t));
            if found.is_none() {
                // One per line: labels hold `;` themselves.
                let labels: Vec<String> = answer.alternatives.iter().map(|a| format!("\n  {}", a.label)).collect();
                return Err(format!(
                    "--alternative {text}: no alternative plan's label contains it; the alternatives:{}",
                    labels.concat()
                ));
            }
            found
        }
    };
    Ok(match alt {
        Some(a) => ChosenPlan {
            plan: a.plan.clone(),
            label: Some(a.label.clone()),
            network_floats: a.cost.network_floats,
            flops: a.cost.flops,
        },
        None => ChosenPlan {
            plan: answer.plan.clone(),
            label: None,
            network_floats: answer.cost.network_floats,
            flops: answer.cost.flops,
        },
    })
}

/// An IA plan file checked against the program it is to run for: JSON in
/// the plan format, the program's inputs (same names and declarations), the
/// program's outputs (same names, and each of the program's key bounds and
/// block shape), well-typed on the program's sites. Every error names the
/// file and what is wrong where.
pub fn read_plan_file(path: &Path, p: &Program) -> Result<ChosenPlan, String> {
    let file = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("--plan {file}: cannot read it: {e}"))?;
    let plan = Plan::from_json(&text).map_err(|e| format!("--plan {file}: not an IA plan: {}", report(&e)))?;
    for (name, decl) in &p.inputs {
        match plan.inputs.get(name) {
            None => return Err(format!("--plan {file}: the plan does not declare the program's input `{name}`")),
            Some(d) if d != decl => {
                return Err(format!(
                    "--plan {file}: input `{name}` is declared differently in the plan ({}) and in the program ({})",
                    serde_json::to_string(d).unwrap_or_default(),
                    serde_json::to_string(decl).unwrap_or_default()
                ))
            }
            Some(_) => {}
        }
    }
    if let Some(extra) = plan.inputs.keys().find(|n| !p.inputs.contains_key(*n)) {
        return Err(format!("--plan {file}: the plan declares an input `{extra}` the program does not have"));
    }
    if let Some(missing) = p.outputs.iter().find(|o| !plan.outputs.contains(o)) {
        return Err(format!(
            "--plan {file}: the plan has no output `{missing}` (its outputs: {}; the program's: {})",
            plan.outputs.join(", "),
            p.outputs.join(", ")
        ));
    }
    if let Some(extra) = plan.outputs.iter().find(|o| !p.outputs.contains(o)) {
        return Err(format!("--plan {file}: the plan's output `{extra}` is not an output of the program"));
    }
    let cluster = p.cluster();
    let typed = check_plan(&plan, cluster.sites).map_err(|e| format!("--plan {file}: {}", report(&e)))?;
    let program = tra_optimizer::check::check_program(p).map_err(|e| report(&e))?;
    for o in &p.outputs {
        let (got, want) = (&typed.types[o].rel, &program.types[o]);
        if (&got.frontier, &got.array_bounds) != (&want.frontier, &want.array_bounds) {
            return Err(format!(
                "--plan {file}: output `{o}` has key bounds {:?} and blocks {:?} in the plan, but {:?} and {:?} in the program",
                got.frontier, got.array_bounds, want.frontier, want.array_bounds
            ));
        }
    }
    let w = Weights { network: cluster.network_weight, compute: cluster.compute_weight };
    let report = plan_report(&plan, &typed, cluster.sites, w);
    Ok(ChosenPlan {
        label: Some(format!("the plan of {file}")),
        network_floats: report.values().map(|r| r.network_floats).sum(),
        flops: report.values().map(|r| r.flops).sum(),
        plan,
    })
}

/// Run `tra run` with the optimizer's choice; the answer is the JSON summary
/// (pretty-printed).
pub fn run_command(args: RunArgs) -> Result<String, String> {
    run_command_with(args, &PlanChoice::default())
}

/// Run `tra run` on worker threads with the plan `choice` names (a plan
/// file is run without optimizing); the JSON summary (pretty-printed).
pub fn run_command_with(args: RunArgs, choice: &PlanChoice) -> Result<String, String> {
    let t_start = Instant::now();
    let mut p = read_program(&args.file)?;
    if let Some(s) = args.sites {
        if s == 0 {
            return Err("--sites must be at least 1".into());
        }
        p.cluster = Some(Cluster { sites: s, ..p.cluster() });
    }
    args.cost.apply(&mut p)?;
    if let Some(t) = args.threads {
        let max = tra_executor::threads::runtime::MAX_KERNEL_THREADS;
        if t == 0 || t > max {
            return Err(format!("--threads {t}: between 1 and {max} kernel threads (the default is one per core)"));
        }
    }
    let (inputs, outputs, dtype) = files_and_dtype(&p, &args)?;
    let layouts = output_layouts(&p, &args, &outputs)?;

    let (answer, optimize_ms) = match choice.plan {
        Some(_) => (None, 0.0),
        None => optimize_timed(&p, args.strict, &args.bounds).map(|(a, ms)| (Some(a), ms))?,
    };
    let chosen = choose_plan(&p, answer.as_ref(), choice)?;
    let warnings = answer.as_ref().map(|a| a.warnings.clone()).unwrap_or_default();
    let ctx = Ctx {
        p: &p,
        chosen: &chosen,
        warnings: &warnings,
        inputs: &inputs,
        outputs: &outputs,
        layouts: &layouts,
        args: &args,
        optimize_ms,
        t_start,
    };
    let mut summary = match dtype {
        Dtype::F32 => run_typed::<f32>(&ctx)?,
        Dtype::F64 => run_typed::<f64>(&ctx)?,
    };
    // The optimizer's alternatives, the chosen one first (none for `--plan`):
    // the summary says why it won.
    if let Some(a) = &answer {
        summary["alternatives"] = serde_json::json!(crate::summary::alternatives_json(a));
        summary["cost_model"] = serde_json::json!(a.stats.cost_model);
    }
    Ok(serde_json::to_string_pretty(&summary).expect("JSON"))
}

struct Ctx<'a> {
    p: &'a Program,
    chosen: &'a ChosenPlan,
    warnings: &'a [tra_optimizer::optimize::Warning],
    inputs: &'a BTreeMap<String, PathBuf>,
    outputs: &'a BTreeMap<String, PathBuf>,
    layouts: &'a BTreeMap<String, Layout>,
    args: &'a RunArgs,
    optimize_ms: f64,
    t_start: Instant,
}

fn run_typed<T: Elem>(c: &Ctx<'_>) -> Result<serde_json::Value, String> {
    use serde_json::json;
    let cluster = c.p.cluster();
    let sites = cluster.sites;
    let plan = &c.chosen.plan;
    let typed = check_plan(plan, sites)
        .map_err(|e| format!("internal error: the chosen plan does not check: {}", report(&e)))?;
    let predicted =
        plan_report(plan, &typed, sites, Weights { network: cluster.network_weight, compute: cluster.compute_weight });
    let rt: ThreadRuntime<T> = match c.args.threads {
        Some(n) => ThreadRuntime::with_threads(n),
        None => ThreadRuntime::new(),
    };

    // Inputs.
    let t_load = Instant::now();
    let mut data: BTreeMap<String, TRelation<T>> = BTreeMap::new();
    let mut input_info = serde_json::Map::new();
    for (name, path) in c.inputs {
        let t = &typed.types[name];
        let (rel, layout, file_dtype) = npy::read_relation::<T>(path, &t.rel.frontier, &t.rel.array_bounds, rt.pool())
            .map_err(|e| format!("input `{name}`: {e}"))?;
        input_info.insert(
            name.clone(),
            json!({"path": path.display().to_string(), "layout": layout, "dtype": file_dtype.name(),
                   "key_bounds": t.rel.frontier, "array_bounds": t.rel.array_bounds, "tuples": rel.len()}),
        );
        data.insert(name.clone(), rel);
    }
    let load_ms = t_load.elapsed().as_secs_f64() * 1e3;

    // Run, with a progress bar on a terminal once it takes more than a second.
    let progress = Arc::new(Progress::default());
    let total_flops: u64 = predicted.values().map(|r| r.flops).sum();
    let done = Arc::new(AtomicBool::new(false));
    let bar = (!c.args.no_progress && std::io::stderr().is_terminal()).then(|| {
        let (progress, done) = (progress.clone(), done.clone());
        let nodes = plan.nodes.len() as u64;
        std::thread::spawn(move || progress_bar(&progress, &done, total_flops, nodes))
    });
    let opts = RunOptions { progress: Some(progress.clone()), ..RunOptions::default() };
    let result = rt.run(plan, sites, &data, &opts);
    done.store(true, Ordering::SeqCst);
    if let Some(b) = bar {
        let _ = b.join();
    }
    let run = result.map_err(|e| format!("error while running: {e}"))?;
    drop(data);

    // Outputs.
    let t_write = Instant::now();
    let mut output_info = serde_json::Map::new();
    for (name, value) in &run.outputs {
        let rel = value.erase().map_err(|e| format!("output `{name}`: {e}"))?;
        let t = &typed.types[name];
        let (sum, abs) =
            rel.tuples.iter().flat_map(|(_, b)| b.as_slice().iter()).fold((0.0f64, 0.0f64), |(s, a), &x| {
                let x = x.to_f64();
                (s + x, a + x.abs())
            });
        let mut info = json!({
            "key_bounds": t.rel.frontier, "array_bounds": t.rel.array_bounds, "tuples": rel.len(),
            "checksum": {"sum": crate::server::json_float(sum), "abs_sum": crate::server::json_float(abs)},
        });
        if let Some(path) = c.outputs.get(name) {
            let layout = c.layouts.get(name).copied().unwrap_or(Layout::Relation);
            let holes = npy::write_relation(path, &rel, &t.rel.frontier, &t.rel.array_bounds, layout)
                .map_err(|e| format!("output `{name}`: {e}"))?;
            let shape = npy::layout_shape(layout, &t.rel.frontier, &t.rel.array_bounds);
            info["path"] = json!(path.display().to_string());
            info["layout"] = json!(layout);
            info["shape"] = json!(shape);
            if holes > 0 {
                info["zero_filled_keys"] = json!(holes);
            }
        }
        output_info.insert(name.clone(), info);
    }
    let write_ms = t_write.elapsed().as_secs_f64() * 1e3;

    let operators: Vec<serde_json::Value> = run
        .report
        .nodes
        .iter()
        .map(|n| {
            let mut v = serde_json::to_value(n).expect("JSON");
            let pred = &predicted[&n.name];
            if n.floats_moved.is_some() {
                v["predicted_floats"] = json!(pred.network_floats);
            }
            v["predicted_flops"] = json!(pred.flops);
            v["placement"] = json!(pred.placement);
            v
        })
        .collect();
    let measured = run.total_floats_moved();
    let predicted_total = c.chosen.network_floats;
    Ok(json!({
        "program": c.args.file,
        "sites": sites,
        "threads": rt.threads(),
        "dtype": T::DTYPE.name(),
        "gemm": run.report.gemm,
        "gemm_detail": run.report.gemm_detail,
        "plan": plan.to_sexpr(),
        "strategy": c.chosen.label,
        "network_floats_measured": measured,
        "network_floats_predicted": predicted_total,
        "floats_match": measured == predicted_total,
        "flops_predicted": c.chosen.flops,
        "timings_ms": {
            "optimize": c.optimize_ms, "load": load_ms, "run": run.report.wall_ms, "write": write_ms,
            "total": c.t_start.elapsed().as_secs_f64() * 1e3,
        },
        "operators": operators,
        "inputs": input_info,
        "outputs": output_info,
        "pool": run.report.pool,
        "peak_rss_bytes": peak_rss_bytes(),
        "warnings": c.warnings,
    }))
}

/// Draws a bar on standard error once the run has taken a second, until `done`.
fn progress_bar(p: &Progress, done: &AtomicBool, total_flops: u64, nodes: u64) {
    let start = Instant::now();
    let mut drawn = false;
    while !done.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100));
        if start.elapsed() < Duration::from_secs(1) {
            continue;
        }
        let frac = if total_flops > 0 {
            p.flops_done.load(Ordering::Relaxed) as f64 / total_flops as f64
        } else {
            p.nodes_done.load(Ordering::Relaxed) as f64 / nodes.max(1) as f64
        }
        .clamp(0.0, 1.0);
        const W: usize = 40;
        let full = (frac * W as f64).round() as usize;
        let line = format!(
            "\r[{}{}] {:>3.0}%  {:.1}s  node {}/{}",
            "#".repeat(full),
            "-".repeat(W - full),
            frac * 100.0,
            start.elapsed().as_secs_f64(),
            p.nodes_done.load(Ordering::Relaxed).min(nodes),
            nodes
        );
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(line.as_bytes());
        let _ = err.flush();
        drawn = true;
    }
    if drawn {
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(format!("\r{}\r", " ".repeat(80)).as_bytes());
        let _ = err.flush();
    }
}
