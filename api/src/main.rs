//! `tra`: check, compile, optimize, run and serve TRA programs. Commands that
//! report on a run print a short summary, or the full report with `--format json`.

use clap::{Parser, Subcommand, ValueEnum};
use std::process::ExitCode;
use tra_optimizer::check::{check_plan, check_program};
use tra_optimizer::compile::compile;
use tra_optimizer::cost::{plan_report, Weights};
use tra_optimizer::optimize::{optimize_with, Limits, OnRuleFailure};
use tra_optimizer::{Cluster, Program, ProgramError};

/// The optimizer allocates many small, short-lived values (frontiers, keys,
/// candidate plans); mimalloc serves them faster than the system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "tra", version, about = "Optimize tensor relational algebra programs for distributed execution")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum, PartialEq)]
enum Format {
    Json,
    Text,
}

/// What `tra optimize` prints.
#[derive(Clone, Copy, ValueEnum, PartialEq)]
enum OptimizeFormat {
    /// A short summary: the plan chosen, its cost, the alternatives.
    Summary,
    /// The API's answer (`POST /v1/optimize`'s).
    Json,
    /// The plan as s-expressions, with each operator's cost.
    Text,
    /// Graphviz.
    Dot,
}

/// How `tra kernels` prints the kernel catalog.
#[derive(Clone, Copy, ValueEnum, PartialEq)]
enum KernelsFormat {
    /// What `GET /v1/kernels` returns.
    Json,
    Text,
    /// A markdown table.
    Md,
}

/// How `tra rules` prints the rule list.
#[derive(Clone, Copy, ValueEnum, PartialEq)]
enum RulesFormat {
    Json,
    Text,
    /// The markdown table (`rules/README.md` holds it).
    Md,
}

#[derive(Subcommand)]
enum Command {
    /// Check a program: print each node's type, frontier and size, or the errors.
    Check {
        /// The program (JSON); `-` reads standard input.
        file: String,
        /// Output format.
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
    },
    /// Compile a program to its initial IA plan (the TRA→IA translation of the
    /// TRA paper's Table 1: Yuan et al., PVLDB 2021).
    Compile {
        /// The program (JSON); `-` reads standard input.
        file: String,
        /// Output format: the API's plan JSON, or s-expressions.
        #[arg(long, value_enum, default_value = "json")]
        format: Format,
    },
    /// Optimize a program: the cheapest plan, the alternatives, the rules that built it.
    Optimize {
        /// The program (JSON); `-` reads standard input.
        file: String,
        /// Output format: a short summary (the plan chosen, its cost, the
        /// alternatives), the API's answer as JSON (`POST /v1/optimize`'s), the
        /// plan as s-expressions with each operator's cost, or Graphviz.
        #[arg(long, value_enum, default_value = "summary")]
        format: OptimizeFormat,
        /// Override the program's `cluster.sites`.
        #[arg(long)]
        sites: Option<usize>,
        /// Most e-graph nodes.
        #[arg(long, default_value_t = 200_000)]
        max_nodes: usize,
        /// Time and memory of the optimization.
        #[command(flatten)]
        bounds: tra_api::optimize_limits::OptimizeLimitArgs,
        /// Fail when a rewrite rule breaks an invariant of the optimizer,
        /// instead of optimizing again without it (and warning).
        #[arg(long)]
        strict: bool,
        /// The cost model and the cluster profile.
        #[command(flatten)]
        cost: tra_api::cost_model::CostModelArgs,
    },
    // The help text is `ServeArgs`'s: the limits and how they apply.
    Serve(tra_api::server::flags::ServeArgs),
    /// Measure optimize time and e-graph size per workload, and for chains of matmuls.
    Bench {
        /// Runs per workload (the median is reported).
        #[arg(long, default_value_t = 5)]
        reps: usize,
        /// Chain lengths to measure.
        #[arg(long, value_delimiter = ',', default_value = "2,4,8,16")]
        chains: Vec<usize>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Only the workloads (and chains) whose name contains this (`=NAME`: only the one named exactly NAME, e.g. `="mixed chain of 16 matmuls"`).
        #[arg(long)]
        only: Option<String>,
        /// The cost model every workload is optimized under.
        #[arg(long, value_parser = ["network", "time"], default_value = "network")]
        cost_model: String,
    },
    /// Optimize a program and run it on worker threads, or across processes
    /// with `--processes N` or `--hosts FILE`, reading and writing `.npy` files.
    ///
    /// Inputs may be in either layout (the dense tensor, or the relation:
    /// shape key_bounds ++ array_bounds). Each output is written dense
    /// (numpy's shape) when its key arity equals its block rank, else in the
    /// relation layout; `--layout NAME=relation|dense` chooses per output,
    /// `--dense` asks for dense everywhere. Prints a short summary;
    /// `--format json` prints the full report.
    Run {
        #[command(flatten)]
        run: tra_api::run::RunArgs,
        #[command(flatten)]
        cluster: tra_api::cluster::ClusterArgs,
        /// What to print: a short summary, or the full report as JSON
        /// (every operator's time and floats moved; stable, for scripts).
        #[arg(long, value_enum, default_value = "summary")]
        format: ReportFormat,
    },
    /// A cluster worker (started on each machine with its index and the host
    /// file; it stays up and runs the jobs sent to it).
    Worker(tra_api::cluster::WorkerArgs),
    /// Start, inspect or stop a cluster of warm workers on this machine.
    #[command(subcommand)]
    Cluster(tra_api::cluster::ClusterCommand),
    /// Write a new cluster secret to a file (mode 600).
    Secret(tra_api::cluster::SecretArgs),
    /// Measure this machine's speeds for the time cost model (GEMM flops/s
    /// per site with the executor's kernels, bytes/s per link with timely
    /// exchanges, the latency of an exchange) on `--processes N` job
    /// processes over loopback or on the workers of `--hosts FILE`, through
    /// the runtime `tra run` uses, and print the `profile` JSON (`tra serve
    /// --profile FILE`, `tra optimize --profile FILE`). Takes a few seconds
    /// (longer on slow links: each repetition shuffles 36 MiB per site).
    Calibrate {
        #[command(flatten)]
        args: tra_api::calibrate::CalibrateArgs,
        /// Also print the per-site rates and the time taken (to standard error).
        #[arg(long)]
        verbose: bool,
    },
    /// Compile an einsum expression to TRA, optimize it, run it on dense .npy
    /// operands and write the dense result (numpy's shape, float64).
    ///
    /// Prints a short summary; `--format json` prints the full report.
    Einsum {
        #[command(flatten)]
        args: tra_api::einsum::EinsumArgs,
        /// What to print: a short summary, or the full report as JSON
        /// (the contraction order, padding, plan; stable, for scripts).
        #[arg(long, value_enum, default_value = "summary")]
        format: ReportFormat,
    },
    /// List every rewrite rule with its name, equation, condition and why it is sound.
    Rules {
        /// Output format (`md`: the table of `rules/README.md`).
        #[arg(long, value_enum, default_value = "text")]
        format: RulesFormat,
    },
    /// List the kernel catalog: each kernel's name, arity, parameters and what it computes.
    Kernels {
        /// Output format (`json`: what `GET /v1/kernels` returns).
        #[arg(long, value_enum, default_value = "text")]
        format: KernelsFormat,
    },
}

use tra_api::run::{read_text as read, report};
use tra_api::summary::ReportFormat;

/// A command's JSON report as `format` asks: as it is, or summarized.
fn print_report(json: &str, format: ReportFormat, summarize: fn(&serde_json::Value) -> String) {
    match format {
        ReportFormat::Json => println!("{json}"),
        ReportFormat::Summary => match serde_json::from_str::<serde_json::Value>(json) {
            Ok(v) => println!("{}", summarize(&v)),
            Err(_) => println!("{json}"),
        },
    }
}

/// Commands with no socket of their own, whose output may go to a pipe that
/// closes early (`tra optimize big.json | head`): they end quietly on a
/// broken pipe, as `cat` does.
fn writes_only_to_stdout(c: &Command) -> bool {
    match c {
        Command::Check { .. } | Command::Compile { .. } | Command::Optimize { .. } | Command::Rules { .. } => true,
        Command::Kernels { .. } => true,
        Command::Bench { .. } | Command::Einsum { .. } | Command::Calibrate { .. } => true,
        Command::Run { cluster, .. } => !cluster.active(),
        Command::Serve(_) | Command::Worker(_) | Command::Cluster(_) | Command::Secret(_) => false,
    }
}

fn load(file: &str) -> Result<Program, String> {
    Program::from_json(&read(file)?).map_err(|e| report(&e))
}

fn run(cli: Cli) -> Result<(), String> {
    match cli.command {
        Command::Optimize { file, format, sites, max_nodes, bounds, strict, cost } => {
            let limits = Limits { nodes: max_nodes, ..bounds.limits() };
            let on_failure = if strict { OnRuleFailure::Fail } else { OnRuleFailure::Retry };
            // One deadline for the whole optimization, and the analysis's
            // memory budget, as the server sets them for a request.
            bounds.within(|| optimize_cmd(&file, format, sites, &cost, limits, on_failure))
        }
        Command::Rules { format } => rules_cmd(format),
        Command::Kernels { format } => {
            print!("{}", kernels_text(format));
            Ok(())
        }
        Command::Run { run, cluster, format } => {
            let summary = if cluster.active() {
                tra_api::cluster::run_cluster_command(&run, &cluster)?
            } else {
                let choice = tra_api::run::PlanChoice { plan: cluster.plan, alternative: cluster.alternative };
                tra_api::run::run_command_with(run, &choice)?
            };
            print_report(&summary, format, tra_api::summary::run_summary);
            Ok(())
        }
        Command::Worker(args) => tra_api::cluster::worker_command(args),
        Command::Cluster(cmd) => {
            println!("{}", tra_api::cluster::cluster_command(cmd)?);
            Ok(())
        }
        Command::Secret(args) => {
            println!("{}", tra_api::cluster::secret_command(args)?);
            Ok(())
        }
        Command::Calibrate { args, verbose } => {
            let c = tra_api::calibrate::calibrate(&args)?;
            eprintln!("GEMM: {}", c.gemm);
            if verbose {
                eprintln!(
                    "per-site GEMM flops/s: {:?}; per-site memory bytes/s: {:?}; per-site output writing bytes/s: \
                     {:?}; a small exchange's latency {:.2} ms, a large one's intercept {:.2} ms; calibration took \
                     {:.1} s",
                    c.site_flops_per_second,
                    c.memory_bytes_per_second,
                    c.output_bytes_per_second,
                    c.exchange_latency_seconds * 1e3,
                    c.exchange_intercept_seconds * 1e3,
                    c.seconds
                );
            }
            for w in &c.warnings {
                eprintln!("warning: {w}");
            }
            println!("{}", serde_json::to_string_pretty(&c.profile).expect("JSON"));
            Ok(())
        }
        Command::Einsum { args, format } => {
            print_report(&tra_api::einsum::einsum_command(args)?, format, tra_api::summary::einsum_summary);
            Ok(())
        }
        Command::Bench { reps, chains, json, only, cost_model } => {
            let model = tra_api::cost_model::named(&cost_model);
            let rows = tra_api::bench::run(reps, &chains, only.as_deref(), model)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&rows).unwrap());
            } else {
                print!("{}", tra_api::bench::table(&rows));
            }
            if let Some(w) = tra_api::bench::disturbed(&rows) {
                eprintln!("warning: {w}");
            }
            Ok(())
        }
        Command::Serve(args) => {
            let config = args.config()?;
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the async runtime: {e}"))?;
            let served = rt.block_on(tra_api::server::serve(config));
            // Work cancelled at the end of the shutdown grace stops within
            // moments; do not wait longer for it.
            rt.shutdown_timeout(std::time::Duration::from_secs(1));
            served.map_err(|e| format!("error: cannot serve on {}: {e}", args.addr))
        }
        Command::Check { file, format } => {
            let p = load(&file)?;
            let typed = check_program(&p).map_err(|e| report(&e))?;
            if format == Format::Json {
                let rows: Vec<serde_json::Value> = typed
                    .types
                    .iter()
                    .map(|(name, t)| {
                        let op = p.nodes.get(name).map(|o| tra_optimizer::program::Operator::op_name(o)).unwrap_or("input");
                        serde_json::json!({
                            "name": name, "op": op, "key_bounds": t.frontier, "array_bounds": t.array_bounds,
                            "tuples": t.tuples(), "floats": t.floats(), "dense": matches!(t.keys, tra_optimizer::types::KeySet::Dense),
                        })
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&rows).unwrap());
            } else {
                println!(
                    "{:<16} {:<10} {:<18} {:<18} {:>12} {:>16}",
                    "NAME", "OP", "KEY FRONTIER", "BLOCK", "TUPLES", "FLOATS"
                );
                for (name, t) in &typed.types {
                    let op = p.nodes.get(name).map(|o| tra_optimizer::program::Operator::op_name(o)).unwrap_or("input");
                    let holes = if matches!(t.keys, tra_optimizer::types::KeySet::Dense) { "" } else { " (holes)" };
                    println!(
                        "{:<16} {:<10} {:<18} {:<18} {:>12} {:>16}{holes}",
                        name,
                        op,
                        format!("{:?}", t.frontier),
                        format!("{:?}", t.array_bounds),
                        t.tuples(),
                        t.floats()
                    );
                }
            }
            Ok(())
        }
        Command::Compile { file, format } => {
            let p = load(&file)?;
            let typed = check_program(&p).map_err(|e| report(&e))?;
            let plan = compile(&p, &typed);
            // The compiled plan must type-check; if not, that is a bug worth reporting.
            check_plan(&plan, p.cluster().sites).map_err(|e| format!("internal error: {}", report(&e)))?;
            match format {
                Format::Json => println!("{}", serde_json::to_string_pretty(&plan).unwrap()),
                _ => println!("{}", plan.to_sexpr()),
            }
            Ok(())
        }
    }
}

fn optimize_cmd(
    file: &str,
    format: OptimizeFormat,
    sites: Option<usize>,
    cost: &tra_api::cost_model::CostModelArgs,
    limits: Limits,
    on_failure: OnRuleFailure,
) -> Result<(), String> {
    let mut p = load(file)?;
    if let Some(s) = sites {
        p.cluster = Some(Cluster { sites: s, ..p.cluster() });
    }
    cost.apply(&mut p)?;
    let rules = tra_rules::all();
    // `error [limit_exceeded]: …` for a limit, as a program error is reported.
    let answer = optimize_with(&p, &rules, &limits, on_failure).map_err(|e| report(&ProgramError::from(&e)))?;
    for w in &answer.warnings {
        eprintln!("warning [{}] at {}: {}", w.code, w.at, w.message);
    }
    match format {
        OptimizeFormat::Json => {
            println!("{}", serde_json::to_string_pretty(&tra_api::server::answer_value(&p, &answer)).unwrap())
        }
        OptimizeFormat::Summary => {
            let v = serde_json::to_value(&answer).expect("JSON");
            println!("{}", tra_api::summary::optimize_summary(&v, p.cluster().sites));
        }
        OptimizeFormat::Text | OptimizeFormat::Dot => {
            let cluster = p.cluster();
            let w = Weights { network: cluster.network_weight, compute: cluster.compute_weight };
            let typed =
                check_plan(&answer.plan, cluster.sites).map_err(|e| format!("internal error: {}", report(&e)))?;
            let report = plan_report(&answer.plan, &typed, cluster.sites, w);
            if format == OptimizeFormat::Dot {
                println!("{}", to_dot(&answer.plan, &report));
                return Ok(());
            }
            println!("{}", answer.plan.to_sexpr());
            println!();
            println!("{:<16} {:<16} {:>16} {:>20} {:<14}", "NODE", "OP", "NETWORK FLOATS", "FLOPS", "PLACEMENT");
            for (name, r) in &report {
                println!("{:<16} {:<16} {:>16} {:>20} {:<14}", name, r.op, r.network_floats, r.flops, r.placement);
            }
            println!();
            println!(
                "cost: {} network floats, {} flops, total {}, predicted {:.4} s",
                answer.cost.network_floats, answer.cost.flops, answer.cost.total, answer.cost.seconds
            );
            println!("rules applied: {}", answer.rules_applied.join(", "));
            println!("alternatives:");
            for a in &answer.alternatives {
                println!("  {:>16} network floats  {:>10.4} s  {}", a.cost.network_floats, a.cost.seconds, a.label);
            }
            let st = &answer.stats;
            println!(
                "e-graph: {} nodes, {} classes, {} iterations, {}, {:.1} ms",
                st.egraph_nodes,
                st.egraph_classes,
                st.iterations,
                match st.stop_phase {
                    Some(phase) => format!("{} in the {} phase", st.stop_reason, phase.replace('_', "-")),
                    None => st.stop_reason.clone(),
                },
                st.optimize_ms
            );
        }
    }
    Ok(())
}

fn to_dot(plan: &tra_optimizer::Plan, report: &indexmap::IndexMap<String, tra_optimizer::cost::NodeReport>) -> String {
    use tra_optimizer::program::Operator;
    let max = report.values().map(|r| r.total).fold(0.0f64, f64::max);
    let mut s = String::from("digraph plan {\n  rankdir=BT;\n  node [shape=box, fontname=\"monospace\"];\n");
    for name in plan.inputs.keys() {
        s.push_str(&format!("  \"{name}\" [shape=ellipse];\n"));
    }
    for (name, op) in &plan.nodes {
        let r = &report[name];
        let hot = if max > 0.0 && r.total == max { ", style=filled, fillcolor=\"#f4cccc\"" } else { "" };
        s.push_str(&format!(
            "  \"{name}\" [label=\"{name}: {}\\n{:?} x {:?}\\nnet {} flops {}\"{hot}];\n",
            tra_optimizer::program::sexpr::ia_head(op).replace('"', "'"),
            r.key_bounds,
            r.array_bounds,
            r.network_floats,
            r.flops
        ));
        for o in op.operands() {
            s.push_str(&format!("  \"{o}\" -> \"{name}\";\n"));
        }
    }
    s.push('}');
    s
}

fn rules_cmd(format: RulesFormat) -> Result<(), String> {
    let rules = tra_rules::all();
    match format {
        RulesFormat::Json => {
            let rows: Vec<serde_json::Value> = rules
                .iter()
                .map(|r| {
                    serde_json::json!({"name": r.name, "family": r.family, "equation": r.equation,
                        "condition": r.condition, "why": r.why})
                })
                .collect();
            println!("{}", serde_json::to_string_pretty(&rows).unwrap());
        }
        RulesFormat::Text => {
            for r in &rules {
                println!("{} ({})\n  {}\n  if: {}\n  why: {}\n", r.name, r.family, r.equation, r.condition, r.why);
            }
        }
        RulesFormat::Md => print!("{}", tra_rules::table::markdown(&rules)),
    }
    Ok(())
}

/// The kernel catalog as `tra kernels --format FORMAT` prints it.
fn kernels_text(format: KernelsFormat) -> String {
    let kernels = tra_optimizer::kernel::catalog();
    let params = |p: &[&str]| if p.is_empty() { "none".to_string() } else { p.join(", ") };
    let mut out = String::new();
    match format {
        KernelsFormat::Json => {
            out = serde_json::to_string_pretty(kernels).expect("the catalog serializes");
            out.push('\n');
        }
        KernelsFormat::Text => {
            for k in kernels {
                out += &format!("{} (arity {})\n  parameters: {}\n  {}\n\n", k.name, k.arity, params(k.params), k.doc);
            }
        }
        KernelsFormat::Md => {
            out += "| Kernel | Arity | Parameters | What it computes |\n|---|---|---|---|\n";
            for k in kernels {
                let ps: Vec<String> = k.params.iter().map(|p| format!("`{p}`")).collect();
                let ps = if ps.is_empty() { "—".to_string() } else { ps.join(", ") };
                out += &format!("| `{}` | {} | {ps} | {} |\n", k.name, k.arity, k.doc.replace('|', "\\|"));
            }
        }
    }
    out
}

fn main() -> ExitCode {
    // Before any thread starts (setting the environment is safe only
    // then): a threaded OpenBLAS loaded later by this process or by the job
    // processes it starts (which inherit it) then starts no pool of threads
    // that would wait busily beside the kernel threads.
    let (var, one) = tra_executor::threads::kernels::gemm_backend::ONE_THREAD_ENV;
    std::env::set_var(var, one);
    let cli = Cli::parse();
    if writes_only_to_stdout(&cli.command) {
        tra_api::sigpipe::restore_default();
        // Quiet unless `RUST_LOG` asks (`RUST_LOG=tra_optimizer=debug tra
        // bench --only =matmul` shows each saturation iteration's figures).
        tra_api::server::init_tracing_with("warn,egg=warn");
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
