//! Buffer reuse (paper 002): a plan run a second time in the same process
//! allocates no block memory. A counting global allocator records every
//! allocation of the second run; none may be as large as a block, and the
//! pool reports no fresh block buffer.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use tra_executor::reference::AnyLayout;
use tra_executor::threads::{RunOptions, TRelation, ThreadRuntime};
use tra_optimizer::Plan;

struct Counting;
static ON: AtomicBool = AtomicBool::new(false);
static BYTES: AtomicU64 = AtomicU64::new(0);
static COUNT: AtomicU64 = AtomicU64::new(0);
static LARGEST: AtomicU64 = AtomicU64::new(0);

fn record(size: usize) {
    if ON.load(Ordering::Relaxed) {
        BYTES.fetch_add(size as u64, Ordering::Relaxed);
        COUNT.fetch_add(1, Ordering::Relaxed);
        LARGEST.fetch_max(size as u64, Ordering::Relaxed);
    }
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        record(l.size());
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        record(l.size());
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        record(new);
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Every operator kind, a fused matmul, composed kernels, tiles and a concat.
const PLAN: &str = r#"{
  "inputs": {
    "X": {"key_bounds": [3, 3], "array_bounds": [96, 96]},
    "Y": {"key_bounds": [3, 3], "array_bounds": [96, 96], "placement": {"hash": [0]}}
  },
  "nodes": {
    "bx": {"op": "broadcast", "input": "X"},
    "sy": {"op": "shuffle", "input": "Y", "dims": [1]},
    "j": {"op": "local_join", "left": "bx", "right": "sy", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
    "mm": {"op": "local_aggregate", "input": "j", "group_by": [0, 2], "kernel": "matAdd"},
    "e": {"op": "local_join", "left": "bx", "right": "sy", "left_keys": [0, 1], "right_keys": [0, 1],
          "kernel": {"compose": ["relu", "matSub"]}},
    "f": {"op": "local_filter", "input": "e", "predicate": "k0 == k1"},
    "d": {"op": "local_map", "input": "f", "key": "[k0]", "kernel": {"compose": ["scale(2)", "transpose"]}},
    "t": {"op": "local_map", "input": "mm", "kernel": "tile(1,32)", "key": "[k0, k1, 0..3]"},
    "st": {"op": "shuffle", "input": "t", "dims": [0, 1]},
    "c": {"op": "local_aggregate", "input": "st", "group_by": [0, 1], "kernel": "concat(2,1)"},
    "s": {"op": "shuffle", "input": "e", "dims": [1]},
    "a": {"op": "local_aggregate", "input": "s", "group_by": [1], "kernel": "max"}
  },
  "outputs": ["c", "d", "a"]
}"#;

#[test]
fn a_second_run_allocates_no_block_memory() {
    let plan = Plan::from_json(PLAN).unwrap();
    tra_optimizer::check::check_plan(&plan, 3).expect("a well-typed plan");
    let rt = ThreadRuntime::<f64>::with_threads(2);
    let data = |seed: u64| {
        let rel = tra_executor::reference::random_relation(&[3, 3], &[96, 96], seed);
        TRelation::from_relation(&rel, rt.pool())
    };
    let inputs: BTreeMap<String, TRelation<f64>> = [("X".to_string(), data(1)), ("Y".to_string(), data(2))].into();
    let opts = RunOptions { layout: AnyLayout::Seeded(4), ..RunOptions::default() };
    let block_bytes = 96 * 96 * 8u64;
    let smallest_block_bytes = 96 * 32 * 8u64; // the tiles

    let first = rt.run(&plan, 3, &inputs, &opts).unwrap();
    assert!(first.report.fresh_block_bytes > 0);
    let want = first.erased_outputs().unwrap();
    assert!(first.report.nodes.iter().any(|n| n.fused_into.as_deref() == Some("mm")), "the matmul is fused");
    drop(first);
    // A second run to fill the pool for every shape that is live at once,
    // then the measured one.
    drop(rt.run(&plan, 3, &inputs, &opts).unwrap());

    BYTES.store(0, Ordering::SeqCst);
    COUNT.store(0, Ordering::SeqCst);
    LARGEST.store(0, Ordering::SeqCst);
    ON.store(true, Ordering::SeqCst);
    let again = rt.run(&plan, 3, &inputs, &opts).unwrap();
    ON.store(false, Ordering::SeqCst);
    let (bytes, count, largest) =
        (BYTES.load(Ordering::SeqCst), COUNT.load(Ordering::SeqCst), LARGEST.load(Ordering::SeqCst));
    eprintln!("second run: {count} allocations, {bytes} bytes, largest {largest} (a block is {block_bytes} bytes)");
    assert_eq!(again.report.fresh_block_bytes, 0, "the pool handed out every block buffer");
    assert!(largest < smallest_block_bytes, "an allocation of {largest} bytes: block memory was allocated");
    // Bookkeeping only: keys, tuple lists, thread start-up.
    assert!(bytes < 4 * block_bytes, "{bytes} bytes allocated in the second run");
    let got = again.erased_outputs().unwrap();
    for (name, rel) in &want {
        let (w, g) = (rel.to_relation(), got[name].to_relation());
        tra_executor::reference::compare(&w, &g, 0.0).unwrap();
    }
    let stats = rt.pool().stats();
    assert!(stats.reuses > 0 && stats.held_bytes > 0);
    let _ = Arc::strong_count(&inputs["X"].tuples[0].1);
}
