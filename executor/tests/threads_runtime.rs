//! The thread runtime itself: fusion, sharing of replicated blocks, f32 and
//! f64, reports, progress, determinism, errors (the reference's), many sites.

use std::collections::BTreeMap;
use std::sync::Arc;
use tra_executor::reference::{
    self, compare, eval_ia, random_inputs, random_relation, AnyLayout, InterpError, Relation,
};
use tra_executor::threads::{self, Progress, RunOptions, TRelation, ThreadRuntime};
use tra_optimizer::check::check_plan;
use tra_optimizer::cost::{plan_report, Weights};
use tra_optimizer::Plan;

fn plan(json: &str) -> Plan {
    Plan::from_json(json).unwrap()
}

/// BMM: broadcast X, Y partitioned on its column blocks, joined and summed.
const BMM: &str = r#"{
  "inputs": {"X": {"key_bounds": [3, 4], "array_bounds": [8, 6]},
             "Y": {"key_bounds": [4, 5], "array_bounds": [6, 7]}},
  "nodes": {"bx": {"op": "broadcast", "input": "X"},
            "sy": {"op": "shuffle", "input": "Y", "dims": [1]},
            "j": {"op": "local_join", "left": "bx", "right": "sy", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
            "Z": {"op": "local_aggregate", "input": "j", "group_by": [0, 2], "kernel": "matAdd"}},
  "outputs": ["Z"]}"#;

/// CMM with two-phase aggregation: partial aggregates, then a shuffle.
const CMM: &str = r#"{
  "inputs": {"X": {"key_bounds": [2, 6], "array_bounds": [5, 4]},
             "Y": {"key_bounds": [6, 2], "array_bounds": [4, 3]}},
  "nodes": {"sx": {"op": "shuffle", "input": "X", "dims": [1]},
            "sy": {"op": "shuffle", "input": "Y", "dims": [0]},
            "j": {"op": "local_join", "left": "sx", "right": "sy", "left_keys": [1], "right_keys": [0], "kernel": "matMulNT"},
            "p": {"op": "local_aggregate", "input": "j", "group_by": [0, 2], "kernel": "matAdd"},
            "s": {"op": "shuffle", "input": "p", "dims": [0, 1]},
            "Z": {"op": "local_aggregate", "input": "s", "group_by": [0, 1], "kernel": "matAdd"}},
  "outputs": ["Z"]}"#;

fn inputs_for(p: &Plan, seed: u64) -> BTreeMap<String, Relation> {
    random_inputs(&p.inputs, seed).unwrap()
}

fn to_threads<T: threads::Elem>(
    rt: &ThreadRuntime<T>,
    inputs: &BTreeMap<String, Relation>,
) -> BTreeMap<String, TRelation<T>> {
    inputs.iter().map(|(n, r)| (n.clone(), TRelation::from_relation(r, rt.pool()))).collect()
}

fn cmm_plan() -> Plan {
    // matMulNT needs Y's blocks as [n, k]: transpose the declared shape.
    let mut p = plan(CMM);
    p.inputs["Y"].array_bounds = vec![3, 4];
    p
}

#[test]
fn fused_and_unfused_matmul_agree_with_the_reference() {
    for (p, sites) in [(plan(BMM), 3), (plan(BMM), 1), (cmm_plan(), 4), (cmm_plan(), 2)] {
        check_plan(&p, sites).unwrap();
        let inputs = inputs_for(&p, 7);
        let want = eval_ia(&p, sites, &inputs, AnyLayout::RoundRobin).unwrap();
        let rt = ThreadRuntime::<f64>::with_threads(2);
        let data = to_threads(&rt, &inputs);
        for fuse in [true, false] {
            let opts = RunOptions { fuse, ..RunOptions::default() };
            let run = rt.run(&p, sites, &data, &opts).unwrap();
            let fused: Vec<_> = run.report.nodes.iter().filter(|n| n.fused_into.is_some()).collect();
            assert_eq!(fused.len(), usize::from(fuse), "fuse = {fuse}");
            let got = run.outputs["Z"].to_reference();
            let w = &want.outputs["Z"];
            assert_eq!(w.tuples.len(), got.tuples.len());
            for (a, b) in w.tuples.iter().zip(&got.tuples) {
                assert_eq!((&a.key, a.site), (&b.key, b.site));
                let one = |x: &reference::Block| Relation { tuples: [(a.key.clone(), x.clone())].into() };
                compare(&one(&a.block), &one(&b.block), 1e-12).unwrap();
            }
            assert_eq!(run.floats_moved, want.floats_moved);
        }
    }
}

#[test]
fn replicated_blocks_are_shared_not_copied() {
    let p = plan(BMM);
    let rt = ThreadRuntime::<f64>::with_threads(2);
    let data = to_threads(&rt, &inputs_for(&p, 1));
    let opts = RunOptions { keep_values: true, ..RunOptions::default() };
    let run = rt.run(&p, 5, &data, &opts).unwrap();
    let bx = &run.values["bx"];
    assert!(bx.sites.iter().all(|s| s.is_empty()));
    assert_eq!(bx.everywhere.len(), 12);
    for (k, b) in bx.everywhere.iter() {
        let input = data["X"].get(k).unwrap();
        assert!(Arc::ptr_eq(b, input), "broadcast copied the block of {k:?}");
    }
    // Shuffled blocks are the input's too: an exchange moves pointers.
    for s in &run.values["sy"].sites {
        for (k, b) in s.iter() {
            assert!(Arc::ptr_eq(b, data["Y"].get(k).unwrap()));
        }
    }
    // ...but the floats moved are counted as the cost model defines them.
    assert_eq!(run.floats_moved["bx"], 5 * 12 * 48);
    assert_eq!(run.floats_moved["sy"], 20 * 42);
}

#[test]
fn f32_and_f64_agree() {
    let p = plan(BMM);
    let inputs = inputs_for(&p, 3);
    let r64 = ThreadRuntime::<f64>::new();
    let r32 = ThreadRuntime::<f32>::new();
    let a = r64.run(&p, 2, &to_threads(&r64, &inputs), &RunOptions::default()).unwrap();
    let b = r32.run(&p, 2, &to_threads(&r32, &inputs), &RunOptions::default()).unwrap();
    let (a, b) = (a.erased_outputs().unwrap(), b.erased_outputs().unwrap());
    // Small integer inputs: every product and sum is exact in f32 too.
    compare(&a["Z"].to_relation(), &b["Z"].to_relation(), 0.0).unwrap();
    assert_eq!(b["Z"].tuples[0].1.as_slice().len(), 56);
}

#[test]
fn report_progress_and_measured_floats() {
    let p = cmm_plan();
    let sites = 3;
    let rt = ThreadRuntime::<f64>::new();
    let data = to_threads(&rt, &inputs_for(&p, 5));
    let progress = Arc::new(Progress::default());
    let opts = RunOptions { progress: Some(progress.clone()), ..RunOptions::default() };
    let run = rt.run(&p, sites, &data, &opts).unwrap();
    let typed = check_plan(&p, sites).unwrap();
    let predicted = plan_report(&p, &typed, sites, Weights { network: 1.0, compute: 0.0 });
    assert_eq!(run.report.nodes.len(), p.nodes.len());
    for n in &run.report.nodes {
        assert!(n.wall_ms >= 0.0 && n.site_ms.len() == sites);
        match n.op {
            "shuffle" | "broadcast" => {
                assert_eq!(n.floats_moved, Some(predicted[&n.name].network_floats), "{}", n.name)
            }
            _ => assert_eq!(n.floats_moved, None),
        }
    }
    let total: u64 = predicted.values().map(|r| r.network_floats).sum();
    assert_eq!(run.report.network_floats, total);
    assert_eq!(run.total_floats_moved(), total);
    assert_eq!(progress.nodes_done.load(std::sync::atomic::Ordering::SeqCst), p.nodes.len() as u64);
    // Products are counted (2mkn each); the fused sums are not separate kernel calls.
    let products: u64 = predicted["j"].flops;
    assert_eq!(progress.flops_done.load(std::sync::atomic::Ordering::SeqCst), products + predicted["Z"].flops);
    let json = serde_json::to_value(&run.report).unwrap();
    assert!(json["nodes"].as_array().unwrap().iter().any(|n| n["fused_into"] == "p"));
}

#[test]
fn runs_are_deterministic_and_many_sites_work() {
    let p = cmm_plan();
    let inputs = inputs_for(&p, 9);
    let rt = ThreadRuntime::<f64>::with_threads(3);
    let data = to_threads(&rt, &inputs);
    for sites in [1, 2, 7, 16, 33] {
        let want = eval_ia(&p, sites, &inputs, AnyLayout::Seeded(2)).unwrap();
        let opts = RunOptions { layout: AnyLayout::Seeded(2), ..RunOptions::default() };
        let first = rt.run(&p, sites, &data, &opts).unwrap().outputs["Z"].to_reference();
        for _ in 0..3 {
            let again = rt.run(&p, sites, &data, &opts).unwrap().outputs["Z"].to_reference();
            assert_eq!(first, again, "{sites} sites: a rerun differs");
        }
        assert_eq!(want.outputs["Z"].tuples.len(), first.tuples.len());
        let e = reference::erase(&want.outputs["Z"]).unwrap();
        compare(&e, &reference::erase(&first).unwrap(), 1e-12).unwrap();
    }
}

#[test]
fn errors_are_the_references() {
    let p = plan(BMM);
    let inputs = inputs_for(&p, 1);
    let check = |p: &Plan, inputs: &BTreeMap<String, Relation>, sites: usize| {
        let want = eval_ia(p, sites, inputs, AnyLayout::RoundRobin).unwrap_err();
        let got = threads::eval_ia(p, sites, inputs, AnyLayout::RoundRobin).unwrap_err();
        assert_eq!(got, want);
        got
    };
    // No data for an input.
    let mut missing = inputs.clone();
    missing.remove("Y");
    assert_eq!(check(&p, &missing, 2), InterpError::MissingInput("Y".into()));
    // A block of the wrong shape.
    let mut wrong = inputs.clone();
    wrong.insert("X".into(), random_relation(&[3, 4], &[8, 5], 1));
    assert!(matches!(check(&p, &wrong, 2), InterpError::BadInput { .. }));
    // A key out of bounds.
    let mut out = inputs.clone();
    out.insert("X".into(), random_relation(&[3, 5], &[8, 6], 1));
    check(&p, &out, 2);
    // No sites.
    assert_eq!(check(&p, &inputs, 0), InterpError::NoSites);
    // A kernel on operands of the wrong shape names the node.
    let mut bad = p.clone();
    bad.inputs["Y"].array_bounds = vec![5, 7];
    let e = check(&bad, &inputs_for(&bad, 1), 2);
    assert_eq!(e.node(), Some("j"));
    // A shuffle on a key dim that does not exist.
    let sh = plan(
        r#"{"inputs": {"X": {"key_bounds": [2], "array_bounds": [2]}},
        "nodes": {"s": {"op": "shuffle", "input": "X", "dims": [3]}}, "outputs": ["s"]}"#,
    );
    assert_eq!(check(&sh, &inputs_for(&sh, 1), 3).node(), Some("s"));
    // An unknown operand, an unknown output, a cycle.
    let unk = plan(
        r#"{"inputs": {"X": {"key_bounds": [2], "array_bounds": [2]}},
        "nodes": {"s": {"op": "shuffle", "input": "Q", "dims": [0]}}, "outputs": ["s"]}"#,
    );
    check(&unk, &inputs_for(&unk, 1), 2);
    let uo = plan(
        r#"{"inputs": {"X": {"key_bounds": [2], "array_bounds": [2]}},
        "nodes": {"s": {"op": "shuffle", "input": "X", "dims": [0]}}, "outputs": ["nope"]}"#,
    );
    check(&uo, &inputs_for(&uo, 1), 2);
    let cyc = plan(
        r#"{"inputs": {"X": {"key_bounds": [2], "array_bounds": [2]}},
        "nodes": {"a": {"op": "shuffle", "input": "b", "dims": [0]}, "b": {"op": "shuffle", "input": "a", "dims": [0]}},
        "outputs": ["a"]}"#,
    );
    check(&cyc, &inputs_for(&cyc, 1), 2);
    // A partial aggregate output cannot be erased.
    let part = plan(
        r#"{"inputs": {"X": {"key_bounds": [4, 4], "array_bounds": [2]}},
        "nodes": {"s": {"op": "shuffle", "input": "X", "dims": [1]},
                  "a": {"op": "local_aggregate", "input": "s", "group_by": [0], "kernel": "matAdd"}},
        "outputs": ["a"]}"#,
    );
    let ins = inputs_for(&part, 1);
    let want = eval_ia(&part, 3, &ins, AnyLayout::RoundRobin).unwrap().erased_outputs().unwrap_err();
    let got = threads::eval_ia(&part, 3, &ins, AnyLayout::RoundRobin).unwrap().erased_outputs().unwrap_err();
    assert_eq!(got, want);
}

#[test]
fn thousands_of_sites_run_on_a_few_threads_and_a_deadline_stops_a_run() {
    use std::time::{Duration, Instant};
    use tra_optimizer::deadline::Deadline;
    let p = cmm_plan();
    let inputs = inputs_for(&p, 3);
    let rt = ThreadRuntime::<f64>::with_threads(2);
    let data = to_threads(&rt, &inputs);
    // Far more sites than tuples or cores: the same answer as the reference,
    // on at most one site thread per core.
    let sites = 2048;
    let want = eval_ia(&p, sites, &inputs, AnyLayout::RoundRobin).unwrap();
    let run = rt.run(&p, sites, &data, &RunOptions::default()).unwrap();
    assert!(run.report.site_threads <= threads::runtime::site_threads(sites));
    assert!(run.report.site_threads <= std::thread::available_parallelism().map_or(1, |n| n.get()));
    let got = reference::erase(&run.outputs["Z"].to_reference()).unwrap();
    compare(&reference::erase(&want.outputs["Z"]).unwrap(), &got, 1e-12).unwrap();
    assert_eq!(run.total_floats_moved(), want.floats_moved.values().sum::<u64>());

    // A deadline already passed: the run stops at its first node, naming it and the limit.
    let past = Deadline::at(Instant::now() - Duration::from_millis(1), "a test limit of 0 s");
    let opts = RunOptions { deadline: Some(past), ..RunOptions::default() };
    let e = rt.run(&p, 4, &data, &opts).unwrap_err();
    assert!(matches!(&e, InterpError::Stopped { node, .. } if node == "sx"), "{e}");
    assert!(e.to_string().contains("a test limit of 0 s passed"), "{e}");
    // A deadline far away changes nothing.
    let later = Deadline::after(Duration::from_secs(600), "later");
    let opts = RunOptions { deadline: Some(later), ..RunOptions::default() };
    let again = rt.run(&p, sites, &data, &opts).unwrap();
    assert_eq!(reference::erase(&again.outputs["Z"].to_reference()).unwrap(), got);
}

#[test]
fn kernel_calls_in_chunks_under_a_deadline_give_the_same_result() {
    use std::time::Duration;
    use tra_optimizer::deadline::Deadline;
    // BMM with 20 × 20 × 20 block products on one site: far more than one chunk.
    let mut p = plan(BMM);
    p.inputs["X"].key_bounds = vec![20, 20];
    p.inputs["Y"].key_bounds = vec![20, 20];
    p.inputs["X"].array_bounds = vec![2, 3];
    p.inputs["Y"].array_bounds = vec![3, 2];
    let inputs = inputs_for(&p, 5);
    let rt = ThreadRuntime::<f64>::with_threads(2);
    let data = to_threads(&rt, &inputs);
    for fuse in [true, false] {
        let plain = rt.run(&p, 1, &data, &RunOptions { fuse, ..RunOptions::default() }).unwrap();
        let later = Deadline::after(Duration::from_secs(600), "later");
        let chunked =
            rt.run(&p, 1, &data, &RunOptions { fuse, deadline: Some(later), ..RunOptions::default() }).unwrap();
        assert_eq!(plain.outputs["Z"].to_reference(), chunked.outputs["Z"].to_reference(), "fuse {fuse}");
    }
}
