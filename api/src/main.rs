//! `tra`: check, compile (and later optimize, run and serve) TRA programs.

use clap::{Parser, Subcommand, ValueEnum};
use std::io::Read;
use std::process::ExitCode;
use tra_optimizer::check::{check_plan, check_program};
use tra_optimizer::compile::compile;
use tra_optimizer::{ProgramError, Program};

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
    /// Compile a program to its initial IA plan (paper 004, Table 1).
    Compile {
        /// The program (JSON); `-` reads standard input.
        file: String,
        /// Output format: the API's plan JSON, or s-expressions.
        #[arg(long, value_enum, default_value = "json")]
        format: Format,
    },
}

fn read(file: &str) -> Result<String, String> {
    if file == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).map_err(|e| format!("cannot read standard input: {e}"))?;
        Ok(s)
    } else {
        std::fs::read_to_string(file).map_err(|e| format!("cannot read {file}: {e}"))
    }
}

fn report(e: &ProgramError) -> String {
    if e.at.is_empty() {
        format!("error [{}]: {}", e.code.as_str(), e.message)
    } else {
        format!("error [{}] at {}: {}", e.code.as_str(), e.at, e.message)
    }
}

fn load(file: &str) -> Result<Program, String> {
    Program::from_json(&read(file)?).map_err(|e| report(&e))
}

fn run(cli: Cli) -> Result<(), String> {
    match cli.command {
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
                println!("{:<16} {:<10} {:<18} {:<18} {:>12} {:>16}", "NAME", "OP", "KEY FRONTIER", "BLOCK", "TUPLES", "FLOATS");
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
                Format::Text => println!("{}", plan.to_sexpr()),
            }
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
