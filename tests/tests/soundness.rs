//! Rule soundness (execute both sides of every rewrite).
//!
//! - Per rule: random instances from the rule's generator; every application
//!   of the rule in the e-graph is checked by executing the e-node it matched
//!   and the e-node it built (or other members of the class) as IA plans with
//!   explicit sites (`tra_tests::soundness`); some instances with the value
//!   oracle on as well. Then every rule at once on random programs and the
//!   shrunk workloads. A failure prints the rule, the seed, the program and
//!   both plans.
//! - Coverage guard: every registered rule has a generator, fires on its
//!   generated instances, and is checked on at least 20 pairs (default count);
//!   and every cell (operand kind × key-map kind × kernel fact) its pattern
//!   can match (`tra_tests::soundness::coverage::reachable`) was matched by
//!   its own generated instances. The report lists reached / reachable cells
//!   per rule (`TRA_SOUNDNESS_COVERAGE=1`: every cell).
//! - Mutation: deliberately unsound variants of real rules
//!   (`tra_tests::soundness::mutants`) stand in for the real rule; each must
//!   be caught three ways: with the analysis's merge assertion off and no
//!   oracle, by executing both sides; with the merge assertion off and nothing
//!   executed, by the value oracle; and as the harness normally runs.
//! - E-graph check: every workload of `examples/` (shrunk) saturated with
//!   every rule while the value oracle evaluates each class on one input.
//!
//! The last line written is `soundness: R rules, I instances, M/N mutants
//! caught, C/D coverage cells`.
//!
//! Environment: `TRA_SOUNDNESS_CASES` (instances per rule, default 200),
//! `TRA_SOUNDNESS_PROGRAMS` (random programs run with every rule, default 200),
//! `TRA_SOAK=1` (both ten times larger),
//! `TRA_SOUNDNESS_SEED` (base seed, default 0), `TRA_SOUNDNESS_REPLAY=RULE:SEED`
//! (run one instance of one real rule, as printed by a failure; with
//! `TRA_SOUNDNESS_MUTANT=NAME` the mutant of that name instead, with
//! `TRA_SOUNDNESS_HELPERS=a,b` other helper rules, with `TRA_SOUNDNESS_DEBUG=1`
//! every pair compared is printed).

#![allow(clippy::result_large_err)]

use std::io::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tra_optimizer::egraph::{add_program, Ia, TraAnalysis, TraEGraph};
use tra_tests::oracle::RefOracle;
use tra_tests::soundness::{
    check_rule, check_seed, coverage, generators, mutants, quietly, random_data, workloads, Caught, Executor, Options,
    RuleReport, RuleSets,
};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(default)
}

/// 10 with `TRA_SOAK` set (the soak: ten times the instances), else 1.
fn soak() -> u64 {
    if std::env::var_os("TRA_SOAK").is_some() {
        10
    } else {
        1
    }
}

fn cases() -> u64 {
    env_u64("TRA_SOUNDNESS_CASES", 200) * soak()
}

fn base_seed() -> u64 {
    env_u64("TRA_SOUNDNESS_SEED", 0)
}

/// Random programs run with every rule at once.
fn random_programs() -> u64 {
    env_u64("TRA_SOUNDNESS_PROGRAMS", 200) * soak()
}

/// Instances per rule run with the value oracle on as well.
const ORACLE_CASES: u64 = 30;

/// The registered rule of this name.
fn real(name: &str) -> impl Fn() -> tra_optimizer::rule::RuleDef + '_ {
    move || tra_rules::by_name(name).unwrap_or_else(|| panic!("rule {name} is not registered"))
}

fn threads() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2).clamp(1, 4)
}

/// Run jobs on a few threads; results in job order.
fn parallel<J: Sync, R: Send>(jobs: &[J], f: impl Fn(&J) -> R + Sync) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let out: Mutex<Vec<Option<R>>> = Mutex::new((0..jobs.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..threads() {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(job) = jobs.get(i) else { break };
                let r = f(job);
                out.lock().expect("lock")[i] = Some(r);
            });
        }
    });
    out.into_inner().expect("lock").into_iter().map(|r| r.expect("every job ran")).collect()
}

struct MutantReport {
    name: &'static str,
    replaces: &'static str,
    change: &'static str,
    /// Merge assertion off, no oracle: caught by executing both sides?
    execution: Option<(Caught, u64)>,
    /// As the harness normally runs, with the oracle: how?
    normal: Option<(Caught, u64)>,
    /// Merge assertion off, nothing executed: caught by the value oracle?
    oracle_only: Option<(Caught, u64)>,
    detail: String,
}

#[test]
fn rules_are_sound_and_mutants_are_caught() {
    let start = Instant::now();
    if let Ok(replay) = std::env::var("TRA_SOUNDNESS_REPLAY") {
        let (rule, seed) = replay.rsplit_once(':').expect("TRA_SOUNDNESS_REPLAY=RULE:SEED");
        let seed: u64 = seed.parse().expect("a seed");
        let name = rule;
        let g = generators::for_rule(name).expect("a generator");
        let helpers_env = std::env::var("TRA_SOUNDNESS_HELPERS").ok();
        let helpers: Vec<&str> = match &helpers_env {
            Some(h) => h.split(',').filter(|x| !x.is_empty()).collect(),
            None => g.helpers.to_vec(),
        };
        let sets = match std::env::var("TRA_SOUNDNESS_MUTANT") {
            Ok(m) => {
                let m = mutants::all().into_iter().find(|x| x.name == m).expect("a mutant of that name");
                RuleSets::new((m.make)(), &helpers)
            }
            Err(_) => RuleSets::new(real(name)(), &helpers),
        };
        for oracle in [false, true] {
            let r = check_seed(&sets, g.gen, seed, &Options { oracle, ..Options::default() });
            match r {
                Ok(s) => {
                    let s = s.get(name).cloned().unwrap_or_default();
                    eprintln!("{rule} seed {seed} (oracle {oracle}): fired {}, {} pairs agree", s.fired, s.pairs)
                }
                Err(f) => panic!("{f}"),
            }
        }
        return;
    }

    let names = tra_rules::names();
    // Coverage guard, part 1: a generator for every registered rule.
    let missing: Vec<&str> = names.iter().copied().filter(|n| generators::for_rule(n).is_none()).collect();
    assert!(
        missing.is_empty(),
        "registered rules without a generator in tests/src/soundness/generators.rs: {missing:?}"
    );

    let (count, base) = (cases(), base_seed());
    let rule_reports: Vec<(RuleReport, RuleReport)> = parallel(&names, |name| {
        let plain = check_rule(&real(name), name, base, count, &Options::default());
        let with_oracle = check_rule(
            &real(name),
            name,
            base.wrapping_add(0x0ac1e),
            ORACLE_CASES,
            &Options { oracle: true, ..Options::default() },
        );
        (plain, with_oracle)
    });

    // Every rule at once, as the optimizer runs them, on random programs
    // (tests/src/gen.rs) and on the shrunk workloads: applications in larger
    // graphs, where rules build on each other's results.
    let mut mixed: Vec<(String, tra_optimizer::Program, u64)> = (0..random_programs())
        .map(|i| {
            let seed = tra_tests::soundness::instance_seed(base, "random program", i);
            let mut rng = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(seed);
            let sites = rand::Rng::random_range(&mut rng, 1..=7);
            let p = tra_tests::gen::random_program(&mut rng, tra_tests::gen::GenOptions { max_nodes: 5, sites });
            (format!("random program {i}"), p, seed)
        })
        .collect();
    mixed.extend(workloads::shrunk_examples().into_iter().map(|(n, p)| (n, p, base)));
    let mixed_reports: Vec<Result<tra_tests::soundness::Stats, tra_tests::soundness::Failure>> =
        parallel(&mixed, |(_, p, seed)| {
            let sets = RuleSets::every_rule();
            let opts = Options { max_pairs: 12, nodes: 20_000, iterations: 20, ..Options::default() };
            tra_tests::soundness::check_instance(&sets, p, *seed, &opts)
        });

    let all_mutants = mutants::all();
    let mutant_reports: Vec<MutantReport> = parallel(&all_mutants, |m| {
        let tries = count.max(50);
        let exec = check_rule(&m.make, m.replaces, base, tries, &Options { check_merges: false, ..Options::default() });
        let normal = check_rule(&m.make, m.replaces, base, tries, &Options { oracle: true, ..Options::default() });
        let oracle_only = check_rule(
            &m.make,
            m.replaces,
            base,
            tries,
            &Options { oracle: true, check_merges: false, execute: false, ..Options::default() },
        );
        let how = |r: &RuleReport| r.failure.as_ref().map(|f| (f.caught, f.seed));
        let detail = match (&exec.failure, &normal.failure) {
            (Some(f), _) => format!("{f}"),
            (None, Some(f)) => format!("{f}"),
            (None, None) => String::new(),
        };
        MutantReport {
            name: m.name,
            replaces: m.replaces,
            change: m.change,
            execution: how(&exec),
            normal: how(&normal),
            oracle_only: how(&oracle_only),
            detail,
        }
    });

    // Report.
    let mut failures: Vec<String> = Vec::new();
    let mut instances = 0usize;
    let mut in_mixed: std::collections::BTreeMap<&str, (usize, usize)> = Default::default();
    for ((what, _, _), r) in mixed.iter().zip(&mixed_reports) {
        match r {
            Ok(stats) => {
                for (rule, s) in stats {
                    let e = in_mixed.entry(rule).or_default();
                    e.0 += s.fired;
                    e.1 += s.pairs;
                }
            }
            Err(f) => {
                let mut f = f.clone();
                f.replay = format!("TRA_SOUNDNESS_SEED={base} (and TRA_SOUNDNESS_PROGRAMS) reproduce `{what}`");
                failures.push(format!("{what}, with every rule:\n{f}"))
            }
        }
    }
    eprintln!(
        "{:<16} {:>8} {:>8} {:>10}   with every rule on {} random programs and workloads: fired, instances",
        "rule",
        "programs",
        "fired",
        "instances",
        mixed.len()
    );
    // Coverage guard, part 2: each rule's own generated instances made it
    // fire and gave pairs to compare (at least 20 at the default count).
    let want = (count / 10).clamp(1, 20) as usize;
    for (plain, oracle) in &rule_reports {
        let (fired, pairs) = (plain.fired + oracle.fired, plain.pairs + oracle.pairs);
        let (mf, mp) = in_mixed.get(plain.rule.as_str()).copied().unwrap_or_default();
        eprintln!(
            "{:<16} {:>8} {:>8} {:>10}   {:>8} {:>10}",
            plain.rule,
            plain.programs + oracle.programs,
            fired,
            pairs,
            mf,
            mp
        );
        instances += pairs + mp;
        for f in [&plain.failure, &oracle.failure].into_iter().flatten() {
            failures.push(format!("{f}"));
        }
        if plain.failure.is_none() && oracle.failure.is_none() {
            if fired == 0 {
                failures.push(format!("coverage: rule {} never fired on its generated instances", plain.rule));
            } else if pairs < want {
                failures.push(format!(
                    "coverage: rule {} gave {pairs} compared pairs on its generated instances, fewer than {want}",
                    plain.rule
                ));
            }
        }
    }
    // Coverage guard, part 3: every cell (operand kind × key-map kind ×
    // kernel fact) that a rule's pattern can match on generated programs was
    // matched by its own generated instances (tra_tests::soundness::coverage).
    let full_table = std::env::var("TRA_SOUNDNESS_COVERAGE").is_ok();
    let (mut cells_reached, mut cells_reachable) = (0usize, 0usize);
    eprintln!("coverage (operand × key map × fact cells reached / reachable, and cells reached beyond those):");
    for (plain, oracle) in &rule_reports {
        let seen: std::collections::BTreeSet<coverage::Cell> = plain.cells.union(&oracle.cells).copied().collect();
        let want = coverage::reachable(&plain.rule);
        let missing: Vec<&coverage::Cell> = want.iter().filter(|c| !seen.contains(c)).collect();
        let extra = seen.iter().filter(|c| !want.contains(c)).count();
        cells_reached += want.len() - missing.len();
        cells_reachable += want.len();
        eprintln!("  {:<16} {:>4} / {:<4} +{extra}", plain.rule, want.len() - missing.len(), want.len());
        if full_table {
            for c in &seen {
                eprintln!("      {:<10} {:<10} {}{}", c.0, c.1, c.2, if want.contains(c) { "" } else { "  (beyond)" });
            }
        }
        if want.is_empty() {
            failures
                .push(format!("coverage: rule {} has no reachable cells listed in coverage::reachable", plain.rule));
        }
        if !missing.is_empty() && plain.failure.is_none() && oracle.failure.is_none() {
            let list: Vec<String> = missing.iter().map(|(o, m, f)| format!("{o} × {m} × {f}")).collect();
            failures.push(format!(
                "coverage: rule {}: {} reachable cell(s) never matched by its generated instances: {}",
                plain.rule,
                missing.len(),
                list.join(", ")
            ));
        }
    }
    let mut caught = 0usize;
    for m in &mutant_reports {
        let show = |c: &Option<(Caught, u64)>| match c {
            Some((how, seed)) => format!("caught by {} (seed {seed})", how.words()),
            None => "NOT caught".to_string(),
        };
        eprintln!("mutant {} [{}]: {}", m.name, m.replaces, m.change);
        eprintln!("    merge assertion off, no oracle: {}", show(&m.execution));
        eprintln!("    merge assertion off, nothing executed, oracle on: {}", show(&m.oracle_only));
        eprintln!("    as normally run, with the oracle: {}", show(&m.normal));
        // Required: executing both sides catches it on its own (a value
        // mismatch or a side that cannot run), the value oracle catches it on
        // its own, and the harness as it normally runs catches it somehow.
        let by_execution = matches!(m.execution, Some((Caught::ValueMismatch | Caught::ExecutionError, _)));
        let by_oracle = matches!(m.oracle_only, Some((Caught::Oracle, _)));
        if by_execution && by_oracle && m.normal.is_some() {
            caught += 1;
        } else {
            failures.push(format!(
                "mutant `{}` (replacing {}) was not caught as required: execution: {}; oracle: {}; normal run: {}\n{}",
                m.name,
                m.replaces,
                show(&m.execution),
                show(&m.oracle_only),
                show(&m.normal),
                m.detail
            ));
        }
    }
    eprintln!("time: {:.1} s", start.elapsed().as_secs_f64());
    let summary = format!(
        "soundness: {} rules, {} instances, {}/{} mutants caught, {}/{} coverage cells",
        names.len(),
        instances,
        caught,
        mutant_reports.len(),
        cells_reached,
        cells_reachable
    );
    // Written past the test harness's capture, so that it shows in every run.
    let _ = writeln!(std::io::stderr().lock(), "\n{summary}");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The same check with both sides of every application run on the thread
/// runtime (a quarter of the instances per rule): the fast executor agrees
/// with itself across every rewrite, and each mutant is caught by executing
/// both sides on it alone.
#[test]
fn rules_are_sound_on_the_thread_runtime() {
    let names = tra_rules::names();
    let (count, base) = ((cases() / 4).max(5), base_seed().wrapping_add(0x7)); // other instances than the reference's
    let on_threads = Options { executor: Executor::Threads, ..Options::default() };
    let reports: Vec<RuleReport> = parallel(&names, |name| check_rule(&real(name), name, base, count, &on_threads));
    let mut failures: Vec<String> = Vec::new();
    let mut pairs = 0usize;
    for r in &reports {
        pairs += r.pairs;
        match &r.failure {
            Some(f) => failures.push(format!("{f}")),
            None if r.fired == 0 => failures.push(format!("coverage: rule {} never fired on its instances", r.rule)),
            None => {}
        }
    }
    let all_mutants = mutants::all();
    let caught: Vec<Option<(Caught, u64)>> = parallel(&all_mutants, |m| {
        let opts = Options { check_merges: false, ..on_threads };
        let r = check_rule(&m.make, m.replaces, base_seed(), cases().max(50), &opts);
        r.failure.map(|f| (f.caught, f.seed))
    });
    for (m, c) in all_mutants.iter().zip(&caught) {
        if !matches!(c, Some((Caught::ValueMismatch | Caught::ExecutionError, _))) {
            failures
                .push(format!("mutant `{}` (replacing {}) was not caught by execution on threads", m.name, m.replaces));
        }
    }
    let n_caught = caught.iter().filter(|c| c.is_some()).count();
    let summary = format!(
        "soundness on threads: {} rules, {pairs} instances, {n_caught}/{} mutants caught by execution",
        names.len(),
        all_mutants.len()
    );
    let _ = writeln!(std::io::stderr().lock(), "\n{summary}");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The e-graph check: while every workload saturates, the analysis evaluates
/// each class on one small random input and panics, naming the rules, on a
/// class whose members disagree.
#[test]
fn workloads_saturate_under_the_value_oracle() {
    let programs = workloads::shrunk_examples();
    assert!(programs.len() >= 5, "the examples folder holds the workloads");
    let results = parallel(&programs, |(name, p)| {
        let sites = p.cluster().sites;
        let data = random_data(p, 11);
        let layout = tra_executor::reference::AnyLayout::Seeded(5);
        let typed = tra_optimizer::check::check_program(p).expect("typed");
        let r = quietly(|| {
            let oracle = Arc::new(RefOracle::new(sites, data.clone(), layout));
            let mut eg = TraEGraph::new(TraAnalysis::with_oracle(sites, p.inputs.clone(), oracle));
            add_program(&mut eg, p, &typed.order);
            let lowering = tra_rules::rewrites(tra_rules::lowering());
            let all = tra_rules::rewrites(tra_rules::all());
            let mut eg = egg::Runner::<Ia, TraAnalysis, ()>::new(eg.analysis.clone())
                .with_egraph(eg)
                .with_iter_limit(30)
                .with_node_limit(20_000)
                .run(&lowering)
                .egraph;
            eg.rebuild();
            let runner = egg::Runner::<Ia, TraAnalysis, ()>::new(eg.analysis.clone())
                .with_egraph(eg)
                .with_iter_limit(30)
                .with_node_limit(20_000)
                .with_time_limit(std::time::Duration::from_secs(30))
                .run(&all);
            let eg = &runner.egraph;
            let classes: Vec<egg::Id> = eg.classes().filter(|c| c.data.param().is_none()).map(|c| c.id).collect();
            let evaluated = classes.iter().filter(|c| eg.analysis.values.contains_key(c)).count();
            (eg.total_number_of_nodes(), (evaluated, classes.len()), format!("{:?}", runner.stop_reason))
        });
        (name.clone(), r)
    });
    let mut failures = Vec::new();
    for (name, r) in results {
        match r {
            Ok((nodes, (evaluated, classes), stop)) => {
                eprintln!("{name}: {nodes} e-nodes, {evaluated} of {classes} classes with a value, stopped: {stop}");
                assert!(evaluated > 0, "{name}: the oracle evaluated nothing");
            }
            Err(msg) => failures.push(format!("{name}: {msg}")),
        }
    }
    assert!(failures.is_empty(), "the value oracle found unsound merges:\n{}", failures.join("\n"));
}

/// Instances on which the harness found a REAL rule failing, kept as tests
/// (each must pass once the rule is fixed).
#[test]
fn instances_found_failing_stay_fixed() {
    // matmul-rmm on empty operands: both filters remove every tuple, the
    // operands' frontiers are 0, and the rule builds the replicating key map
    // `[k0,k1,0..0]` (`KeyFn::replicate` panics: "the range 0..0 is empty")
    // instead of skipping the match. Found with seed 6110446319753213443.
    let cases: &[(&str, &str, u64)] = &[(
        "matmul-rmm",
        r#"{
            "inputs": {
                "I0": {"key_bounds": [3, 1], "array_bounds": [3, 3], "placement": {"hash": [0]}},
                "I1": {"key_bounds": [1, 4], "array_bounds": [3, 1], "placement": {"hash": [0, 1]}}
            },
            "nodes": {
                "N0": {"op": "filter", "input": "I0", "predicate": "k1 >= 2"},
                "N1": {"op": "filter", "input": "I1", "predicate": "k0 == 3"},
                "N2": {"op": "join", "left": "N0", "right": "N1", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
                "N3": {"op": "aggregate", "input": "N2", "group_by": [0, 2], "kernel": "matAdd"}
            },
            "outputs": ["N3"],
            "cluster": {"sites": 1}
        }"#,
        6110446319753213443,
    )];
    let mut failures = Vec::new();
    for (rule, json, seed) in cases {
        let p = tra_tests::program(json);
        let g = generators::for_rule(rule).expect("a generator");
        for oracle in [false, true] {
            let sets = RuleSets::new(real(rule)(), g.helpers);
            if let Err(f) =
                tra_tests::soundness::check_instance(&sets, &p, *seed, &Options { oracle, ..Options::default() })
            {
                failures.push(format!("{f}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
