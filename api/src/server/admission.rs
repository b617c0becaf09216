//! Admission of work by its real cost, before any of it is done.
//!
//! Counting floats is not enough: a relation of 16 million one-float tuples
//! is "16.8 M floats" but half a dozen gigabytes of keys, block headers,
//! `Arc`s and map nodes. An execution is therefore estimated in bytes, per
//! relation, as `tuples × (per-tuple overhead + block bytes)`, plus what its
//! sites cost, and admitted only if it fits a global memory budget shared by
//! the executions in flight; those that do not fit now wait in a bounded
//! queue until their deadline, then get 503 with `Retry-After`. One request
//! larger than the whole budget is refused at once with 413, naming the
//! relation that weighs most and the budget.
//!
//! The per-tuple figures were measured on the thread executor (see the abuse
//! tests, which execute a million-tuple relation and compare the server's
//! resident memory with the estimate) and rounded up.
//!
//! The same module holds the slots of CPU work ([`Slots`]): a bounded number
//! of requests computing at once, a bounded queue behind them, and a wait
//! bounded by the request's deadline.

use super::ApiError;
use axum::http::StatusCode;
use indexmap::IndexMap;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tra_optimizer::check::TypedPlan;
use tra_optimizer::deadline::Deadline;
use tra_optimizer::program::IaOp;
use tra_optimizer::types::RelType;
use tra_optimizer::Plan;

/// Bytes of one tuple of a reference relation besides its block's floats:
/// the key (`Vec<u32>` and its allocation), the `ArrayD` header (shape and
/// strides), the B-tree slot, and the key list the input was enumerated from.
pub const REFERENCE_TUPLE_BYTES: u64 = 320;

/// Bytes of one tuple of the thread executor besides its block's floats: the
/// key, the `Arc<Block>` with its shape, the list slot, and the routing
/// entry of an exchange.
pub const THREAD_TUPLE_BYTES: u64 = 256;

/// Bytes of one block allocation besides its floats (allocator header and rounding).
pub const BLOCK_ALLOCATION_BYTES: u64 = 32;

/// Bytes per site and plan node: the node's per-site slots, timings, and
/// their entries in the answer (`operators[].site_ms`).
pub const SITE_NODE_BYTES: u64 = 256;

/// Bytes of one site thread (its stack), at most one per core.
pub const SITE_THREAD_BYTES: u64 = 1 << 20;

/// The bytes of `tuples` blocks of `block_floats` `f64`s.
fn blocks(tuples: u64, block_floats: u64) -> u64 {
    tuples.saturating_mul(block_floats.saturating_mul(8).saturating_add(BLOCK_ALLOCATION_BYTES))
}

/// An execution's estimated memory, with the part that weighs most.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Estimate {
    /// Bytes in all.
    pub bytes: u64,
    /// The input, node or `cluster.sites` that weighs most, and its bytes.
    pub heaviest: (String, u64),
    /// How the heaviest part was counted, in words.
    pub why: String,
}

impl Estimate {
    fn new() -> Estimate {
        Estimate { bytes: 0, heaviest: (String::new(), 0), why: String::new() }
    }

    fn add(&mut self, at: &str, bytes: u64, why: impl FnOnce() -> String) {
        self.bytes = self.bytes.saturating_add(bytes);
        if bytes > self.heaviest.1 {
            self.heaviest = (at.to_string(), bytes);
            self.why = why();
        }
    }

    /// A relation held as reference data and converted for the executor
    /// (the inputs, and the outputs summarized).
    fn relation(&mut self, at: &str, t: &RelType) {
        let (n, f) = (t.tuples(), t.block_floats());
        let bytes =
            n.saturating_mul(REFERENCE_TUPLE_BYTES + THREAD_TUPLE_BYTES).saturating_add(blocks(n, f).saturating_mul(2));
        self.add(at, bytes, || {
            format!(
                "{n} tuples × ({REFERENCE_TUPLE_BYTES} + {THREAD_TUPLE_BYTES} bytes per tuple + 2 × {f} floats of 8 bytes), \
                 held as given and as the executor's blocks"
            )
        });
    }

    /// An output returned as a base64 `.npy` (`POST /v1/execute` with
    /// `"return": {"format": "npy"}`) of `floats` floats (its dense or
    /// relation array, holes zero-filled) of `bytes_per_float` bytes: the
    /// `f64` array it is staged in, and its base64 text (4/3 of its bytes)
    /// twice, in the answer and in the body sent.
    pub fn returned(&mut self, output: &str, floats: u64, bytes_per_float: u64) {
        let text = floats.saturating_mul(bytes_per_float).saturating_mul(4).div_ceil(3);
        let bytes = floats.saturating_mul(8).saturating_add(text.saturating_mul(2));
        self.add(&format!("outputs.{output}"), bytes, || {
            format!(
                "{floats} floats returned as a .npy of {bytes_per_float} bytes per float: 8 bytes each as staged, and \
                 its base64 text (4/3 of its bytes) in the answer and in the body sent"
            )
        });
    }

    fn sites(&mut self, sites: usize, nodes: usize) {
        let threads = tra_executor::threads::runtime::site_threads(sites) as u64;
        let bytes = (sites as u64)
            .saturating_mul(nodes as u64)
            .saturating_mul(SITE_NODE_BYTES)
            .saturating_add(threads * SITE_THREAD_BYTES);
        self.add("cluster.sites", bytes, || {
            format!("{sites} sites × {nodes} nodes × {SITE_NODE_BYTES} bytes, and {threads} site threads")
        });
    }
}

/// The estimate of a checked TRA program before optimization: its inputs and
/// outputs as reference data and executor blocks, every node's value once
/// but those of `fusable` (joins whose products a plan can sum as it makes
/// them: `tra_executor::fusion`), and the sites. A lower bound of the
/// plan's estimate, used to refuse a request before optimizing it.
pub fn estimate_program(
    inputs: &[&str],
    types: &IndexMap<String, RelType>,
    outputs: &[String],
    sites: usize,
    fusable: &BTreeSet<String>,
) -> Estimate {
    let mut e = Estimate::new();
    for (name, t) in types {
        if fusable.contains(name) {
            continue;
        }
        if inputs.contains(&name.as_str()) {
            e.relation(name, t);
        } else {
            let n = t.tuples();
            e.add(name, n.saturating_mul(THREAD_TUPLE_BYTES).saturating_add(blocks(n, t.block_floats())), || {
                format!("{n} tuples × ({THREAD_TUPLE_BYTES} bytes per tuple + {} floats of 8 bytes)", t.block_floats())
            });
        }
    }
    for o in outputs {
        if let Some(t) = types.get(o) {
            e.relation(&format!("outputs.{o}"), t);
        }
    }
    e.sites(sites, types.len());
    e
}

/// The estimate of running an optimized plan: inputs and outputs as in
/// [`estimate_program`], and every plan node's value (every partial copy
/// counted): new blocks for the operators that compute them, tuple overhead
/// alone for those that share their operand's blocks (exchanges, filters,
/// key-only maps; an exchange twice, for its routing). The joins run fused
/// into their aggregation (`fused`, by aggregation: the executor's
/// [`tra_executor::fusion::fused_joins`]) hold nothing: each product is
/// added into the aggregation's output block as it is made.
pub fn estimate_plan(plan: &Plan, typed: &TypedPlan, sites: usize, fused: &BTreeMap<String, String>) -> Estimate {
    let mut e = Estimate::new();
    for name in plan.inputs.keys() {
        e.relation(name, &typed.types[name].rel);
    }
    for (name, op) in &plan.nodes {
        if fused.values().any(|join| join == name) {
            continue;
        }
        let t = &typed.types[name];
        let n = t.tuples;
        let (per_tuple, new_blocks) = match op {
            IaOp::Shuffle { .. } | IaOp::Broadcast { .. } => (2 * THREAD_TUPLE_BYTES, false),
            IaOp::LocalFilter { .. } | IaOp::LocalMap { kernel: None, .. } => (THREAD_TUPLE_BYTES, false),
            _ => (THREAD_TUPLE_BYTES, true),
        };
        let f = t.rel.block_floats();
        let bytes = n.saturating_mul(per_tuple).saturating_add(if new_blocks { blocks(n, f) } else { 0 });
        e.add(name, bytes, || {
            if new_blocks {
                format!("{n} tuples × ({per_tuple} bytes per tuple + {f} floats of 8 bytes)")
            } else {
                format!("{n} tuples × {per_tuple} bytes per tuple (blocks shared with its operand)")
            }
        });
    }
    for o in &plan.outputs {
        e.relation(&format!("outputs.{o}"), &typed.types[o].rel);
    }
    e.sites(sites, plan.inputs.len() + plan.nodes.len());
    e
}

/// Return the memory freed by a large request to the operating system. The
/// allocator keeps freed small blocks (an execution's millions of keys and
/// block headers) for reuse, so the resident size would stay at the peak of
/// the largest request ever served; trimming after each execution keeps it
/// near what is in use.
pub fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory of the allocator's own heaps.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Bytes in words (`1.5 GiB`).
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} bytes")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// 413 `data_too_large` for an execution that can never fit the budget,
/// naming its heaviest part.
pub fn too_much_memory(e: &Estimate, budget: u64) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "data_too_large",
        e.heaviest.0.clone(),
        format!(
            "executing this program needs about {} of memory, more than this server's execution memory budget of {} \
             (--execute-memory-bytes); the largest part is {} at {}: {}",
            human(e.bytes),
            human(budget),
            human(e.heaviest.1),
            e.heaviest.0,
            e.why
        ),
    )
}

/// 503 `overloaded` with a `Retry-After`.
pub fn overloaded(message: String, retry_after: Duration) -> ApiError {
    let mut e = ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "overloaded", "", message);
    e.retry_after = Some(retry_after.as_secs().clamp(1, 30));
    e
}

/// The memory budget of the executions in flight.
pub struct MemoryBudget {
    total: u64,
    max_waiting: usize,
    state: Mutex<BudgetState>,
    freed: Notify,
}

#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
/// What the budget holds now (for `/healthz`).
pub struct BudgetStats {
    /// The budget, in bytes.
    pub budget_bytes: u64,
    /// Bytes reserved by the executions admitted.
    pub reserved_bytes: u64,
    /// Executions admitted and not finished.
    pub running: usize,
    /// Executions waiting for room.
    pub waiting: usize,
}

#[derive(Debug, Default)]
struct BudgetState {
    reserved: u64,
    running: usize,
    waiting: usize,
}

/// Room reserved in a [`MemoryBudget`], given back when dropped.
pub struct Reservation {
    budget: Arc<MemoryBudget>,
    bytes: u64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        {
            let mut s = self.budget.lock();
            s.reserved -= self.bytes;
            s.running -= 1;
        }
        self.budget.freed.notify_waiters();
    }
}

impl MemoryBudget {
    /// A budget of `total` bytes with at most `max_waiting` executions queued.
    pub fn new(total: u64, max_waiting: usize) -> MemoryBudget {
        MemoryBudget { total, max_waiting, state: Mutex::new(BudgetState::default()), freed: Notify::new() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BudgetState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Current figures.
    pub fn stats(&self) -> BudgetStats {
        let s = self.lock();
        BudgetStats { budget_bytes: self.total, reserved_bytes: s.reserved, running: s.running, waiting: s.waiting }
    }

    /// Reserve room for an execution estimated at `e`: at once if it fits,
    /// else after waiting (in a queue of bounded length) until it fits or the
    /// deadline passes. 413 when it can never fit, 503 with `Retry-After`
    /// when the queue is full or the wait reaches the deadline.
    pub async fn reserve(self: &Arc<Self>, e: &Estimate, deadline: &Deadline) -> Result<Reservation, ApiError> {
        if e.bytes > self.total {
            return Err(too_much_memory(e, self.total));
        }
        struct Waiting<'a>(&'a MemoryBudget);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.lock().waiting -= 1;
            }
        }
        let mut queued: Option<Waiting<'_>> = None;
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let mut s = self.lock();
                if s.reserved + e.bytes <= self.total {
                    s.reserved += e.bytes;
                    s.running += 1;
                    return Ok(Reservation { budget: self.clone(), bytes: e.bytes });
                }
                if queued.is_none() {
                    if s.waiting >= self.max_waiting {
                        return Err(overloaded(
                            format!(
                                "the execution memory budget of {} is in use ({} reserved by {} executions) and {} more \
                                 executions are already waiting; try again later",
                                human(self.total),
                                human(s.reserved),
                                s.running,
                                s.waiting
                            ),
                            Duration::from_secs(2),
                        ));
                    }
                    s.waiting += 1;
                    queued = Some(Waiting(self));
                }
            }
            if tokio::time::timeout_at(deadline.instant().into(), freed).await.is_err() || deadline.passed() {
                return Err(overloaded(
                    format!(
                        "this execution ({}) waited for room in the execution memory budget of {} until {}",
                        human(e.bytes),
                        human(self.total),
                        deadline.reason()
                    ),
                    Duration::from_secs(2),
                ));
            }
        }
    }
}

/// A bounded number of requests doing one kind of work at once, and a
/// bounded queue behind them.
pub struct Slots {
    what: &'static str,
    semaphore: Arc<Semaphore>,
    size: usize,
    waiting: AtomicUsize,
    max_waiting: usize,
}

impl Slots {
    /// `size` slots for `what` (e.g. "optimization"), `max_waiting` in the queue.
    pub fn new(what: &'static str, size: usize, max_waiting: usize) -> Slots {
        let size = size.max(1);
        Slots { what, semaphore: Arc::new(Semaphore::new(size)), size, waiting: AtomicUsize::new(0), max_waiting }
    }

    /// Slots in use and requests waiting.
    pub fn stats(&self) -> (usize, usize) {
        (self.size - self.semaphore.available_permits(), self.waiting.load(Ordering::Relaxed))
    }

    /// A slot, waiting at most until the deadline (503 with `Retry-After`
    /// past it, or at once when the queue is full).
    pub async fn acquire(&self, deadline: &Deadline) -> Result<OwnedSemaphorePermit, ApiError> {
        if let Ok(p) = self.semaphore.clone().try_acquire_owned() {
            return Ok(p);
        }
        let queued = self.waiting.fetch_add(1, Ordering::SeqCst);
        struct Leave<'a>(&'a AtomicUsize);
        impl Drop for Leave<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let _leave = Leave(&self.waiting);
        if queued >= self.max_waiting {
            return Err(overloaded(
                format!(
                    "all {} {} slots are busy and {queued} requests are already waiting; try again later",
                    self.size, self.what
                ),
                Duration::from_secs(1),
            ));
        }
        match tokio::time::timeout_at(deadline.instant().into(), self.semaphore.clone().acquire_owned()).await {
            Ok(Ok(p)) if !deadline.passed() => Ok(p),
            Ok(Err(_)) => Err(ApiError::internal(format!("the {} queue is closed", self.what))),
            _ => Err(overloaded(
                format!("all {} {} slots stayed busy until {}", self.size, self.what, deadline.reason()),
                Duration::from_secs(2),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn est(bytes: u64) -> Estimate {
        Estimate { bytes, heaviest: ("X".into(), bytes), why: "test".into() }
    }

    fn later(ms: u64) -> Deadline {
        Deadline::after(Duration::from_millis(ms), "a test limit")
    }

    #[tokio::test]
    async fn the_budget_queues_then_refuses() {
        let b = Arc::new(MemoryBudget::new(100, 1));
        let e = b.reserve(&est(101), &later(1000)).await.err().expect("larger than the budget");
        assert_eq!((e.status.as_u16(), e.code.as_str(), e.at.as_str()), (413, "data_too_large", "X"));
        assert!(e.message.contains("--execute-memory-bytes"), "{}", e.message);

        let a = b.reserve(&est(60), &later(1000)).await.unwrap();
        // The second waits for the first; a third finds the queue full.
        let b2 = b.clone();
        let waiting = tokio::spawn(async move { b2.reserve(&est(60), &later(5000)).await.map(|r| r.bytes) });
        while b.stats().waiting == 0 {
            tokio::task::yield_now().await;
        }
        let e = b.reserve(&est(60), &later(1000)).await.err().expect("the queue is full");
        assert_eq!((e.status.as_u16(), e.code.as_str()), (503, "overloaded"));
        assert!(e.retry_after.is_some());
        assert_eq!(b.stats().reserved_bytes, 60);
        drop(a);
        assert_eq!(waiting.await.unwrap().unwrap(), 60, "admitted once the first finished");
        assert_eq!((b.stats().reserved_bytes, b.stats().running, b.stats().waiting), (0, 0, 0));

        // Waiting ends at the deadline.
        let _full = b.reserve(&est(100), &later(1000)).await.unwrap();
        let t = std::time::Instant::now();
        let e = b.reserve(&est(1), &later(100)).await.err().expect("no room before the deadline");
        assert!(t.elapsed() < Duration::from_secs(2));
        assert!(e.message.contains("a test limit passed"), "{}", e.message);
        assert_eq!(b.stats().waiting, 0);
    }

    #[tokio::test]
    async fn slots_wait_until_the_deadline() {
        let s = Slots::new("optimization", 1, 1);
        let held = s.acquire(&later(1000)).await.unwrap();
        let e = s.acquire(&later(50)).await.expect_err("the slot stays busy");
        assert_eq!(e.code, "overloaded");
        assert!(e.message.contains("all 1 optimization slots stayed busy until a test limit passed"), "{}", e.message);
        drop(held);
        assert!(s.acquire(&later(50)).await.is_ok());
    }

    #[test]
    fn a_million_small_tuples_weigh_what_they_cost() {
        use tra_optimizer::check::check_program;
        let p = tra_optimizer::Program::from_json(
            r#"{"inputs": {"X": {"key_bounds": [16384, 1024], "array_bounds": [1, 1]}},
                "nodes": {"S": {"op": "aggregate", "input": "X", "group_by": [0], "kernel": "matAdd"}},
                "outputs": ["S"]}"#,
        )
        .unwrap();
        let t = check_program(&p).unwrap();
        let e = estimate_program(&["X"], &t.types, &p.outputs, 4, &BTreeSet::new());
        // 16.8 M floats, but ~600 bytes a tuple: about 10 GB, not 134 MB.
        assert!(e.bytes > 9 << 30, "{}", human(e.bytes));
        assert_eq!(e.heaviest.0, "X");
    }
}
