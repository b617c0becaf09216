//! The thread executor: IA plans on worker threads, one thread per site,
//! with fast kernels on `f32` or `f64` blocks and a buffer pool.
//!
//! - [`runtime`]: the sites, the exchanges, the operators (same semantics as
//!   the reference interpreter, [`crate::reference`]), per-operator timings
//!   and floats moved.
//! - [`kernels`]: fused elementwise programs, GEMM through the system's
//!   OpenBLAS or the `gemm` crate, the other catalog kernels; a kernel
//!   without a fast implementation (or operand shapes the fast loops are not
//!   written for) runs the reference kernel, so every catalog entry works
//!   and has one definition.
//! - [`pool`]: blocks and the shape-keyed buffer pool.
//! - [`elem`]: the element types.
//!
//! [`eval_ia`] is a drop-in for the reference's `eval_ia` (same arguments,
//! same result type), so that any test written against the reference runs on
//! threads too.
//!
//! ```
//! use std::collections::BTreeMap;
//! use tra_executor::semantics::random_relation;
//! use tra_executor::threads::{RunOptions, TRelation, ThreadRuntime};
//! use tra_optimizer::Plan;
//!
//! let plan = Plan::from_json(r#"{
//!   "inputs": {"X": {"key_bounds": [2, 2], "array_bounds": [3, 3]}},
//!   "nodes": {"b": {"op": "broadcast", "input": "X"},
//!             "r": {"op": "local_map", "input": "b", "kernel": "relu"}},
//!   "outputs": ["r"]}"#).unwrap();
//! let rt = ThreadRuntime::<f32>::new();
//! let x = TRelation::from_relation(&random_relation(&[2, 2], &[3, 3], 1), rt.pool());
//! let run = rt.run(&plan, 4, &BTreeMap::from([("X".to_string(), x)]), &RunOptions::default()).unwrap();
//! assert_eq!(run.floats_moved["b"], 4 * 4 * 9); // 4 tuples of 9 floats to each of 4 sites
//! assert_eq!(run.erased_outputs().unwrap()["r"].len(), 4);
//! ```

pub mod elem;
pub mod kernels;
pub(crate) mod local;
pub mod pool;
pub mod relation;
pub mod runtime;

pub use elem::{Dtype, Elem};
pub use kernels::FastKernel;
pub use pool::{Block, Pool, PoolStats, SharedBlock};
pub use relation::{PhysValue, TRelation, Tuple};
pub use runtime::{NodeStats, Progress, RunOptions, RunReport, ThreadRun, ThreadRuntime};

use crate::semantics::{AnyLayout, Block as RefBlock, IaRun, InterpError, PhysRelation, PhysTuple, Relation, Site};
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use tra_optimizer::program::Plan;

impl<T: Elem> TRelation<T> {
    /// A relation of pooled blocks converted from a reference relation.
    pub fn from_relation(rel: &Relation, pool: &Pool<T>) -> TRelation<T> {
        TRelation {
            tuples: rel
                .tuples
                .iter()
                .map(|(k, b)| (k.clone(), Arc::new(pool.from_array(&b.view(), T::from_f64))))
                .collect(),
        }
    }

    /// The reference relation (blocks converted to `f64`).
    pub fn to_relation(&self) -> Relation {
        Relation { tuples: self.tuples.iter().map(|(k, b)| (k.clone(), to_ref_block(b))).collect() }
    }
}

fn to_ref_block<T: Elem>(b: &Block<T>) -> RefBlock {
    b.view().mapv(|x| x.to_f64())
}

impl<T: Elem> PhysValue<T> {
    /// The reference's physical relation (blocks converted to `f64`), tuples
    /// sorted by (site, key) as the reference sorts them.
    pub fn to_reference(&self) -> PhysRelation {
        let mut tuples = Vec::with_capacity(self.tuples() as usize);
        for (s, list) in self.sites.iter().enumerate() {
            for (k, b) in list.iter() {
                tuples.push(PhysTuple { key: k.clone(), block: to_ref_block(b), site: Site::At(s) });
            }
        }
        for (k, b) in self.everywhere.iter() {
            tuples.push(PhysTuple { key: k.clone(), block: to_ref_block(b), site: Site::Everywhere });
        }
        PhysRelation { tuples }
    }
}

/// The process-wide `f64` runtime behind [`eval_ia`].
pub fn shared_f64_runtime() -> &'static ThreadRuntime<f64> {
    static RT: OnceLock<ThreadRuntime<f64>> = OnceLock::new();
    RT.get_or_init(ThreadRuntime::new)
}

/// The reference's `eval_ia` on the thread runtime: same arguments, same
/// result. `values` holds every input and node except joins fused into an
/// aggregation (see [`runtime`]); `floats_moved` every shuffle and broadcast.
pub fn eval_ia(
    plan: &Plan,
    sites: usize,
    inputs: &BTreeMap<String, Relation>,
    layout: AnyLayout,
) -> Result<IaRun, InterpError> {
    let rt = shared_f64_runtime();
    let converted: BTreeMap<String, TRelation<f64>> =
        inputs.iter().map(|(n, r)| (n.clone(), TRelation::from_relation(r, rt.pool()))).collect();
    let opts = RunOptions { layout, keep_values: true, ..RunOptions::default() };
    let run = rt.run(plan, sites, &converted, &opts)?;
    Ok(IaRun {
        outputs: run.outputs.iter().map(|(n, v)| (n.clone(), v.to_reference())).collect(),
        values: run.values.iter().map(|(n, v)| (n.clone(), v.to_reference())).collect(),
        floats_moved: run.floats_moved.clone(),
    })
}
