//! The cluster runtime against the thread runtime.
//!
//! - every workload of `examples/*.json`, shrunk (key bounds ≤ 4, blocks
//!   ≤ 8, structure kept), optimized for 3 and 6 sites: the chosen plan and
//!   every alternative run as 3 timely processes (1 and 2 workers each) over
//!   loopback TCP inside this test, and on the thread runtime; outputs must
//!   agree bit for bit, site by site, and the floats moved by every shuffle
//!   and broadcast must equal the thread runtime's and the optimizer's;
//! - the same workloads as 3 real OS processes started by the supervisor
//!   (this test binary re-executes itself as a job process), from `.npy`
//!   files to `.npy` files;
//! - faults: a job process killed mid-run fails the job within seconds with
//!   a clear error, leaves no process behind, and the next job runs; a job
//!   process whose supervisor goes away stops.

mod common;

use common::TempDir;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tra_executor::cluster::job::{JobSpec, LayoutSpec};
use tra_executor::cluster::supervise::{self, Assignment, JobHost, Launcher};
use tra_executor::cluster::{run_loopback, ClusterRun};
use tra_executor::npy::{self, Layout};
use tra_executor::reference::{random_inputs, random_relation, AnyLayout, Relation};
use tra_executor::threads::{PhysValue, RunOptions, TRelation, ThreadRun, ThreadRuntime};
use tra_optimizer::check::{check_plan, check_program};
use tra_optimizer::cost::{plan_report, Weights};
use tra_optimizer::optimize::{optimize, Limits};
use tra_optimizer::{Cluster, Plan, Program};

/// When this binary is started as a job process, be one and exit.
#[test]
fn job_process_entry() {
    if supervise::is_job_process() {
        std::process::exit(supervise::child_main());
    }
}

fn launcher() -> Launcher {
    Launcher {
        program: std::env::current_exe().unwrap(),
        args: vec!["--exact".into(), "job_process_entry".into(), "--nocapture".into(), "--test-threads=1".into()],
        env: Vec::new(),
    }
}

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

/// Shrink a program: key bounds to ≤ 4 and block extents to ≤ 8, keeping
/// equal bounds equal and distinct ones (mostly) distinct.
fn shrink(mut p: Program, sites: usize) -> Program {
    let rank_map = |values: Vec<i64>, top: i64, low: i64| -> BTreeMap<i64, i64> {
        let mut v = values;
        v.sort_unstable_by(|a, b| b.cmp(a));
        v.dedup();
        v.iter().enumerate().map(|(i, &x)| (x, x.min((top - i as i64).max(low)))).collect()
    };
    let keys = rank_map(p.inputs.values().flat_map(|d| d.key_bounds.clone()).collect(), 4, 2);
    let arrays = rank_map(p.inputs.values().flat_map(|d| d.array_bounds.clone()).collect(), 8, 3);
    for d in p.inputs.values_mut() {
        for b in d.key_bounds.iter_mut() {
            *b = keys[b];
        }
        for b in d.array_bounds.iter_mut() {
            *b = arrays[b];
        }
    }
    p.cluster = Some(Cluster { sites, ..p.cluster() });
    p
}

fn workloads(sites: usize) -> Vec<(String, Program)> {
    let mut out = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(examples_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    for f in files {
        let p = Program::from_json(&std::fs::read_to_string(&f).unwrap()).unwrap();
        out.push((f.file_stem().unwrap().to_string_lossy().to_string(), shrink(p, sites)));
    }
    assert!(out.len() >= 8, "the examples are missing");
    out
}

fn inputs_for(p: &Program, seed: u64) -> BTreeMap<String, Relation> {
    random_inputs(&p.inputs, seed).unwrap()
}

fn thread_run(
    plan: &Plan,
    sites: usize,
    inputs: &BTreeMap<String, TRelation<f64>>,
    layout: AnyLayout,
) -> Result<ThreadRun<f64>, String> {
    let rt = ThreadRuntime::<f64>::with_threads(2);
    rt.run(plan, sites, inputs, &RunOptions { layout, ..RunOptions::default() }).map_err(|e| e.to_string())
}

fn same_phys(tag: &str, want: &PhysValue<f64>, got: &PhysValue<f64>) {
    assert_eq!(want.sites.len(), got.sites.len(), "{tag}: site count");
    for (s, (w, g)) in want.sites.iter().zip(&got.sites).enumerate() {
        let wk: Vec<_> = w.iter().map(|t| &t.0).collect();
        let gk: Vec<_> = g.iter().map(|t| &t.0).collect();
        assert_eq!(wk, gk, "{tag}: site {s}: keys differ");
        for (a, b) in w.iter().zip(g.iter()) {
            assert_eq!(a.1.shape(), b.1.shape(), "{tag}: site {s}, key {:?}: shapes", a.0);
            assert!(a.1.as_slice() == b.1.as_slice(), "{tag}: site {s}, key {:?}: blocks differ", a.0);
        }
    }
    let wk: Vec<_> = want.everywhere.iter().map(|t| &t.0).collect();
    let gk: Vec<_> = got.everywhere.iter().map(|t| &t.0).collect();
    assert_eq!(wk, gk, "{tag}: replicated keys differ");
    for (a, b) in want.everywhere.iter().zip(got.everywhere.iter()) {
        assert!(a.1.as_slice() == b.1.as_slice(), "{tag}: replicated key {:?}: blocks differ", a.0);
    }
}

fn check_same(tag: &str, plan: &Plan, sites: usize, want: &ThreadRun<f64>, got: &ClusterRun<f64>) {
    for o in &plan.outputs {
        same_phys(&format!("{tag}, output {o}"), &want.outputs[o], &got.outputs[o]);
    }
    assert_eq!(want.floats_moved, got.floats_moved, "{tag}: floats moved per exchange (threads vs cluster)");
    let typed = check_plan(plan, sites).unwrap();
    let predicted = plan_report(plan, &typed, sites, Weights { network: 1.0, compute: 0.0 });
    for (n, m) in &got.floats_moved {
        assert_eq!(predicted[n].network_floats, *m, "{tag}: node {n}: measured floats differ from the prediction");
    }
}

/// Plans worth running for a program: the chosen one and every alternative.
fn plans_of(p: &Program) -> Vec<(String, Plan)> {
    let answer = optimize(p, &tra_rules::all(), &Limits::default()).unwrap();
    let mut out = vec![("chosen".to_string(), answer.plan.clone())];
    for a in &answer.alternatives {
        if a.plan != answer.plan {
            out.push((a.label.clone(), a.plan.clone()));
        }
    }
    out
}

#[test]
fn loopback_processes_equal_threads_on_every_workload() {
    let rt = ThreadRuntime::<f64>::with_threads(1);
    for (workers, layout) in [(1usize, AnyLayout::RoundRobin), (2, AnyLayout::Seeded(11))] {
        let sites = 3 * workers;
        for (name, p) in workloads(sites) {
            let inputs = inputs_for(&p, 7);
            let data: BTreeMap<String, TRelation<f64>> =
                inputs.iter().map(|(n, r)| (n.clone(), TRelation::from_relation(r, rt.pool()))).collect();
            for (label, plan) in plans_of(&p) {
                let tag = format!("{name} ({label}) on 3 processes × {workers} workers");
                // Equal results, or (where the thread runtime fails) the same error.
                match (thread_run(&plan, sites, &data, layout), run_loopback(&plan, 3, workers, &data, layout)) {
                    (Ok(want), Ok(got)) => check_same(&tag, &plan, sites, &want, &got),
                    (Err(want), Err(got)) => assert_eq!(want, got.message, "{tag}: different errors"),
                    (Ok(_), Err(e)) => panic!("{tag}: {e}\n{}", plan.to_sexpr()),
                    (Err(e), Ok(_)) => panic!("{tag}: the thread runtime fails ({e}) but the cluster runtime does not"),
                }
            }
        }
    }
}

#[test]
fn loopback_f32_and_replicated_inputs() {
    // A replicated input, a hashed one, f32 blocks, a concat aggregation.
    let plan = Plan::from_json(
        r#"{
      "inputs": {"A": {"key_bounds": [3, 2], "array_bounds": [4, 5], "placement": "replicated"},
                 "B": {"key_bounds": [2, 3], "array_bounds": [5, 2], "placement": {"hash": [1]}}},
      "nodes": {"j": {"op": "local_join", "left": "A", "right": "B", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
                "s": {"op": "local_aggregate", "input": "j", "group_by": [0, 2], "kernel": "matAdd"},
                "t": {"op": "shuffle", "input": "s", "dims": [0]},
                "c": {"op": "local_aggregate", "input": "t", "group_by": [0], "kernel": "concat(1,1)"},
                "AA": {"op": "local_join", "left": "A", "right": "A", "left_keys": [0, 1], "right_keys": [0, 1], "kernel": "matAdd"},
                "b": {"op": "broadcast", "input": "c"}},
      "outputs": ["c", "AA", "b"]}"#,
    )
    .unwrap();
    let rt = ThreadRuntime::<f32>::with_threads(1);
    let inputs: BTreeMap<String, TRelation<f32>> = [("A", [3u32, 2], [4usize, 5]), ("B", [2, 3], [5, 2])]
        .iter()
        .enumerate()
        .map(|(i, (n, kb, ab))| {
            (n.to_string(), TRelation::from_relation(&random_relation(kb, ab, 3 + i as u64), rt.pool()))
        })
        .collect();
    for workers in [1, 2] {
        let sites = 3 * workers;
        let want = rt.run(&plan, sites, &inputs, &RunOptions::default()).unwrap();
        let got = run_loopback(&plan, 3, workers, &inputs, AnyLayout::RoundRobin).unwrap();
        for o in &plan.outputs {
            let (w, g) = (&want.outputs[o], &got.outputs[o]);
            for (a, b) in w.sites.iter().zip(&g.sites) {
                assert_eq!(a.len(), b.len(), "{o}");
                for (x, y) in a.iter().zip(b.iter()) {
                    assert_eq!(x.0, y.0, "{o}");
                    assert!(x.1.as_slice() == y.1.as_slice(), "{o}: key {:?}", x.0);
                }
            }
            assert_eq!(w.everywhere.len(), g.everywhere.len(), "{o}");
            for (x, y) in w.everywhere.iter().zip(g.everywhere.iter()) {
                assert!(x.0 == y.0 && x.1.as_slice() == y.1.as_slice(), "{o}: replicated key {:?}", x.0);
            }
        }
        assert_eq!(want.floats_moved, got.floats_moved);
    }
}

#[test]
fn loopback_errors_name_the_node() {
    // A kernel whose operands do not fit fails on every site: the error names the node.
    let plan = Plan::from_json(
        r#"{
      "inputs": {"A": {"key_bounds": [2, 2], "array_bounds": [3, 4]}, "B": {"key_bounds": [2, 2], "array_bounds": [3, 4]}},
      "nodes": {"sa": {"op": "shuffle", "input": "A", "dims": [1]},
                "sb": {"op": "shuffle", "input": "B", "dims": [0]},
                "j": {"op": "local_join", "left": "sa", "right": "sb", "left_keys": [1], "right_keys": [0], "kernel": "matMul"}},
      "outputs": ["j"]}"#,
    )
    .unwrap();
    let rt = ThreadRuntime::<f64>::with_threads(1);
    let inputs: BTreeMap<String, TRelation<f64>> = ["A", "B"]
        .iter()
        .map(|n| (n.to_string(), TRelation::from_relation(&random_relation(&[2, 2], &[3, 4], 1), rt.pool())))
        .collect();
    let want = rt.run(&plan, 3, &inputs, &RunOptions::default()).unwrap_err();
    let got = run_loopback(&plan, 3, 1, &inputs, AnyLayout::RoundRobin).unwrap_err();
    assert_eq!(got.node.as_deref(), Some("j"), "{got}");
    assert_eq!(got.message, want.to_string());
}

// ---------------------------------------------------------------------------
// Real processes.

/// Write a program's inputs as `.npy` files; the job spec for its plan.
fn file_job(
    dir: &Path,
    name: &str,
    p: &Program,
    plan: &Plan,
    processes: usize,
    workers: usize,
) -> (JobSpec, BTreeMap<String, TRelation<f64>>) {
    let rt = ThreadRuntime::<f64>::with_threads(1);
    let typed = check_program(p).unwrap();
    let mut inputs = BTreeMap::new();
    let mut data = BTreeMap::new();
    for (i, (n, r)) in inputs_for(p, 5).into_iter().enumerate() {
        let t = &typed.types[&n];
        let rel = TRelation::from_relation(&r, rt.pool());
        // Alternate the two layouts.
        let layout =
            if i % 2 == 0 || t.frontier.len() != t.array_bounds.len() { Layout::Relation } else { Layout::Dense };
        let path = dir.join(format!("{name}-{n}.npy"));
        npy::write_relation(&path, &rel, &t.frontier, &t.array_bounds, layout).unwrap();
        inputs.insert(n.clone(), path);
        data.insert(n, rel);
    }
    let outputs = plan.outputs.iter().map(|o| (o.clone(), dir.join(format!("{name}-out-{o}.npy")))).collect();
    let spec = JobSpec {
        plan: plan.clone(),
        processes,
        workers,
        dtype: "f64".into(),
        inputs,
        outputs,
        dense: false,
        dense_outputs: Default::default(),
        layout: LayoutSpec::RoundRobin,
        fuse: true,
        threads: Some(1),
        stall_ms: 0,
        connect_timeout_s: 20.0,
        peer_timeout_s: 5.0,
        test_panic: false,
    };
    (spec, data)
}

#[test]
fn three_os_processes_equal_threads_on_every_workload() {
    let dir = TempDir::new("workloads");
    for (name, p) in workloads(3) {
        let plan = optimize(&p, &tra_rules::all(), &Limits::default()).unwrap().plan;
        let (spec, data) = file_job(dir.path(), &name, &p, &plan, 3, 1);
        let result = supervise::run_local(&spec, &launcher(), Duration::from_secs(60), &no_stop, |_| {});
        let want = match thread_run(&plan, 3, &data, AnyLayout::RoundRobin) {
            Ok(w) => w,
            Err(e) => {
                // Where the thread runtime fails, the job fails with the same error.
                assert_eq!(result.expect_err(&name), format!("error while running: {e}"), "{name}");
                continue;
            }
        };
        let report = result.unwrap_or_else(|e| panic!("{name}: {e}\n{}", plan.to_sexpr()));
        assert_eq!(report.floats_moved, want.floats_moved, "{name}: floats moved");
        let typed = check_plan(&plan, 3).unwrap();
        for o in &plan.outputs {
            let t = &typed.types[o];
            let pool = tra_executor::threads::Pool::<f64>::new();
            let (got, _, _) =
                npy::read_relation::<f64>(&spec.outputs[o], &t.rel.frontier, &t.rel.array_bounds, &pool).unwrap();
            let want_rel = want.outputs[o].erase().unwrap();
            for (k, b) in &want_rel.tuples {
                let g = got.get(k).unwrap_or_else(|| panic!("{name}: output {o}: key {k:?} missing"));
                assert!(g.as_slice() == b.as_slice(), "{name}: output {o}, key {k:?}: blocks differ");
            }
        }
    }
}

fn alive(pid: u32) -> bool {
    // A reaped process has no /proc entry; a zombie would still be a leftover.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok()
}

#[test]
fn a_killed_worker_fails_the_job_quickly_and_the_next_job_runs() {
    let dir = TempDir::new("fault");
    let p = workloads(3).into_iter().find(|(n, _)| n == "matmul").unwrap().1;
    let plan = optimize(&p, &tra_rules::all(), &Limits::default()).unwrap().plan;
    let (mut spec, _) = file_job(dir.path(), "fault", &p, &plan, 3, 1);
    // Every local operator sleeps 3 s: the job takes long enough to be killed mid-run.
    spec.stall_ms = 3000;
    let (tx, rx) = std::sync::mpsc::channel();
    let s2 = spec.clone();
    let handle = std::thread::spawn(move || {
        supervise::run_local(&s2, &launcher(), Duration::from_secs(60), &no_stop, |pids| {
            tx.send(pids.to_vec()).unwrap()
        })
    });
    let pids = rx.recv_timeout(Duration::from_secs(20)).expect("the job started");
    std::thread::sleep(Duration::from_millis(1500));
    assert!(pids.iter().all(|&p| alive(p)), "all workers run mid-job");
    let killed_at = Instant::now();
    let st = std::process::Command::new("kill").args(["-9", &pids[1].to_string()]).status().unwrap();
    assert!(st.success());
    let result = handle.join().unwrap();
    let took = killed_at.elapsed();
    let err = result.expect_err("the job must fail");
    assert!(err.contains("worker 1 died (signal 9)"), "unclear error: {err}");
    assert!(took < Duration::from_secs(5), "the job took {took:?} to fail");
    for &pid in &pids {
        assert!(!alive(pid), "worker process {pid} is left behind");
    }
    // The next job runs.
    spec.stall_ms = 0;
    let report = supervise::run_local(&spec, &launcher(), Duration::from_secs(60), &no_stop, |_| {}).unwrap();
    assert_eq!(report.processes, 3);
}

#[test]
fn a_job_process_stops_when_its_supervisor_goes_away_and_removes_its_temporary_files() {
    let dir = TempDir::new("orphan");
    let p = workloads(2).into_iter().find(|(n, _)| n == "matmul").unwrap().1;
    let plan = optimize(&p, &tra_rules::all(), &Limits::default()).unwrap().plan;
    let (spec, _) = file_job(dir.path(), "orphan", &p, &plan, 2, 1);
    // Process 1 of a job whose process 0 never starts: it waits to connect.
    let addrs = tra_executor::cluster::free_loopback_addresses(2).unwrap();
    let key = tra_executor::cluster::auth::Secret::generate().job_key(1);
    let a = Assignment { process: 1, addresses: addrs, token: 1, key: key.to_hex(), listen: None, spec: spec.clone() };
    let mut host = JobHost::spawn(&launcher(), 1).unwrap();
    host.submit(&a).unwrap();
    // A temporary output as the job would have begun it.
    let part = tra_executor::cluster::job::partial_path(spec.outputs.values().next().unwrap(), 1);
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(&part, b"partial").unwrap();
    host.close();
    let t = Instant::now();
    loop {
        if let Some(st) = host.exited() {
            assert_eq!(st.code(), Some(supervise::exit::ORPHANED));
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "the job process did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!part.exists(), "{} left behind", part.display());
}

fn no_stop() -> Option<String> {
    None
}

/// A streamed matmul's time on each site (`site_ms`) counts the GEMMs its
/// kernel threads ran, not only its worker's own bookkeeping: the same
/// products run unfused (a join whose every product is a block of its own)
/// took about as long. `tra calibrate` reads the GEMM rate from it.
#[test]
fn a_streamed_matmul_counts_its_kernel_threads_time_on_each_site() {
    let dir = TempDir::new("streamed-time");
    let b = 256;
    let p = Program::from_json(&format!(
        r#"{{"inputs": {{"A": {{"key_bounds": [4, 8], "array_bounds": [{b}, {b}]}},
                        "B": {{"key_bounds": [8], "array_bounds": [{b}, {b}]}}}},
            "nodes": {{"C": {{"op": "join", "left": "A", "right": "B", "left_keys": [1], "right_keys": [0], "kernel": "matMul"}},
                       "D": {{"op": "aggregate", "input": "C", "group_by": [0], "kernel": "matAdd"}}}},
            "outputs": ["D"], "cluster": {{"sites": 2}}}}"#
    ))
    .unwrap();
    let plan = Plan::from_json(&format!(
        r#"{{"inputs": {{"A": {{"key_bounds": [4, 8], "array_bounds": [{b}, {b}], "placement": {{"hash": [0]}}}},
                        "B": {{"key_bounds": [8], "array_bounds": [{b}, {b}]}}}},
            "nodes": {{"Bb": {{"op": "broadcast", "input": "B"}},
                       "C": {{"op": "local_join", "left": "A", "right": "Bb", "left_keys": [1], "right_keys": [0], "kernel": "matMul"}},
                       "D": {{"op": "local_aggregate", "input": "C", "group_by": [0], "kernel": "matAdd"}}}},
            "outputs": ["D"]}}"#
    ))
    .unwrap();
    let total_ms = |r: &tra_executor::cluster::JobReport, node: &str| -> (f64, bool) {
        let n = r.nodes.iter().find(|n| n["name"] == node).unwrap_or_else(|| panic!("no node {node}"));
        let ms: Vec<f64> = serde_json::from_value(n["site_ms"].clone()).unwrap();
        (ms.iter().sum(), n["streamed"] == true)
    };
    let (mut spec, _) = file_job(dir.path(), "streamed", &p, &plan, 2, 1);
    let streamed = supervise::run_local(&spec, &launcher(), Duration::from_secs(60), &no_stop, |_| {}).unwrap();
    spec.fuse = false;
    let unfused = supervise::run_local(&spec, &launcher(), Duration::from_secs(60), &no_stop, |_| {}).unwrap();
    let (gemms_streamed, was_streamed) = total_ms(&streamed, "D");
    let (gemms_unfused, _) = total_ms(&unfused, "C");
    assert!(was_streamed, "the fused matmul was not streamed: {:?}", streamed.nodes);
    assert!(
        gemms_streamed >= 0.25 * gemms_unfused,
        "the streamed matmul's sites spent {gemms_streamed:.2} ms on it, the unfused join's {gemms_unfused:.2} ms"
    );
}
