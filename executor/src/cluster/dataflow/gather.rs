//! The end of a run: each output written in place by every site or
//! gathered on worker 0, and on process 0 the outputs and every worker's
//! figures put together into a [`ClusterRun`].

use super::{
    exchange, lock, plain, record_error, ClusterError, ClusterRun, Collected, ErrorRecord, Proc, Report, Stash,
    WireStat, Written, CB, S,
};
use crate::cluster::output::OutputFile;
use crate::cluster::wire::{Body, Item};
use crate::semantics::InterpError;
use crate::threads::{Dtype, Elem, NodeStats, PhysValue, Tuple};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use timely::dataflow::channels::pact::Pipeline;
use timely::dataflow::operators::generic::Operator;
use tra_optimizer::program::{IaOp, Operator as _};

/// Tuples queued for an output's writing thread before the worker waits.
const WRITE_QUEUE: usize = 64;

/// Write this site's tuples of an output into its file as they come (worker
/// 0 writes the replicated ones and the header); the answer completes once
/// everything is written.
///
/// The writes (and their checksums) run on a thread of their own, fed
/// through a bounded queue: a positioned write waits for the file's lock
/// (every process writes the same file) and for the kernel's copy, and
/// meanwhile the worker thread goes on receiving and sending.
pub(super) fn write_out<'s, T: Elem>(
    me: usize,
    name: &str,
    file: OutputFile,
    s: S<'s, T>,
    report: &Report,
) -> S<'s, T> {
    let r1 = report.clone();
    let name = name.to_string();
    s.unary_frontier::<CB<T>, _, _, _>(Pipeline, &format!("write {name}"), move |cap, _| {
        let mut cap = Some(cap);
        let mut queue: Option<std::sync::mpsc::SyncSender<Tuple<T>>> = None;
        let mut thread: Option<std::thread::JoinHandle<(Written, Option<String>)>> = None;
        let mut file = Some(file);
        let mut spawn_failed: Option<String> = None;
        move |(input, frontier), _output| {
            if queue.is_none() && spawn_failed.is_none() {
                if let Some(file) = file.take() {
                    let (tx, rx) = std::sync::mpsc::sync_channel::<Tuple<T>>(WRITE_QUEUE);
                    match std::thread::Builder::new()
                        .name(format!("write {name}"))
                        .spawn(move || write_all(file, me == 0, rx))
                    {
                        Ok(h) => {
                            queue = Some(tx);
                            thread = Some(h);
                        }
                        Err(e) => spawn_failed = Some(format!("cannot start its writing thread: {e}")),
                    }
                }
            }
            input.for_each(|_, data| {
                for it in data.take_items() {
                    let tuples: Vec<Tuple<T>> = match it.body {
                        Body::Tuple(k, b) => vec![(k, b)],
                        Body::EveryTuple(k, b) if me == 0 => vec![(k, b)],
                        Body::Every(list) if me == 0 => list.iter().cloned().collect(),
                        _ => Vec::new(),
                    };
                    if let Some(q) = &queue {
                        for t in tuples {
                            // The thread ends early only by a panic, seen at the join.
                            let _ = q.send(t);
                        }
                    }
                }
            });
            if frontier.is_empty() && cap.take().is_some() {
                queue = None; // the thread ends once the queue is empty
                let (stat, error) = match (thread.take().map(|h| h.join()), spawn_failed.take()) {
                    (_, Some(e)) => (Written::default(), Some(e)),
                    (Some(Ok(done)), None) => done,
                    (Some(Err(_)), None) => (Written::default(), Some("its writing thread panicked".to_string())),
                    (None, None) => (Written::default(), None),
                };
                if let Some(e) = error {
                    let e = InterpError::BadNode { node: name.clone(), message: format!("writing the output: {e}") };
                    record_error(&r1, usize::MAX, me, &e);
                }
                r1.borrow_mut().written.insert(name.clone(), stat);
            }
        }
    })
}

/// The writing thread of [`write_out`]: open the file (`header`: write the
/// `.npy` header), write every tuple the queue brings at its place, and sum
/// them; the first error stops the writing (the rest are taken and dropped).
fn write_all<T: Elem>(
    file: OutputFile,
    header: bool,
    queue: std::sync::mpsc::Receiver<Tuple<T>>,
) -> (Written, Option<String>) {
    let mut stat = Written::default();
    let opening = std::time::Instant::now();
    let writer = match file.open::<T>(header) {
        Ok(w) => w,
        Err(e) => {
            queue.iter().for_each(drop);
            return (stat, Some(e));
        }
    };
    stat.busy_ns = opening.elapsed().as_nanos() as u64;
    let mut error = None;
    for (k, b) in queue.iter() {
        if error.is_some() {
            continue;
        }
        let started = std::time::Instant::now();
        match writer.write(&k, &b) {
            Ok(()) => {
                let data = b.as_slice();
                let (sum, abs_sum) = checksum(data);
                stat.tuples += 1;
                stat.sum += sum;
                stat.abs_sum += abs_sum;
                stat.bytes += std::mem::size_of_val(data) as u64;
            }
            Err(e) => error = Some(e),
        }
        stat.busy_ns += started.elapsed().as_nanos() as u64;
    }
    (stat, error)
}

/// The sum of a block's elements and of their absolute values, in f64.
///
/// Eight independent partial sums (lane `l` adds the elements at `l`, `l +
/// 8`, …, in order), so that the additions need not wait on one another:
/// summed one by one, this checksum cost more than writing the block. On
/// x86-64 CPUs with AVX2 (checked at run time) the lanes are two vector
/// registers of four f64 each, the elements converted four at a time: the
/// same additions in the same order (so the same sums, bit for bit) as the
/// portable loop, which the compiler left scalar for `f32` (a conversion per
/// element: 12% of a 2-process shuffle's worker time).
fn checksum<T: Elem>(data: &[T]) -> (f64, f64) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { checksum_avx2(data) };
    }
    checksum_lanes(data)
}

/// [`checksum_lanes`] with AVX2 instructions.
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn checksum_avx2<T: Elem>(data: &[T]) -> (f64, f64) {
    use std::arch::x86_64::*;
    const LANES: usize = 8;
    let whole = data.len() / LANES * LANES;
    let (mut s0, mut s1, mut a0, mut a1) =
        (_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd());
    // Clears the sign bit: |x|.
    let magnitude = _mm256_castsi256_pd(_mm256_set1_epi64x(i64::MAX));
    let p = data.as_ptr();
    let mut i = 0;
    while i < whole {
        // SAFETY: `i + 8 <= whole <= data.len()`, and `T` is exactly the
        // element type read (its dtype says which).
        let (lo, hi) = unsafe {
            match T::DTYPE {
                Dtype::F32 => {
                    let x = _mm256_loadu_ps(p.add(i) as *const f32);
                    (_mm256_cvtps_pd(_mm256_castps256_ps128(x)), _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(x)))
                }
                Dtype::F64 => (_mm256_loadu_pd(p.add(i) as *const f64), _mm256_loadu_pd(p.add(i + 4) as *const f64)),
            }
        };
        s0 = _mm256_add_pd(s0, lo);
        s1 = _mm256_add_pd(s1, hi);
        a0 = _mm256_add_pd(a0, _mm256_and_pd(lo, magnitude));
        a1 = _mm256_add_pd(a1, _mm256_and_pd(hi, magnitude));
        i += LANES;
    }
    let (mut sum, mut abs) = ([0f64; LANES], [0f64; LANES]);
    // SAFETY: each array holds 8 f64, two stores of 4 each.
    unsafe {
        _mm256_storeu_pd(sum.as_mut_ptr(), s0);
        _mm256_storeu_pd(sum.as_mut_ptr().add(4), s1);
        _mm256_storeu_pd(abs.as_mut_ptr(), a0);
        _mm256_storeu_pd(abs.as_mut_ptr().add(4), a1);
    }
    finish_lanes(sum, abs, &data[whole..])
}

fn checksum_lanes<T: Elem>(data: &[T]) -> (f64, f64) {
    const LANES: usize = 8;
    let mut sum = [0f64; LANES];
    let mut abs = [0f64; LANES];
    let mut chunks = data.chunks_exact(LANES);
    for c in &mut chunks {
        for l in 0..LANES {
            let x = c[l].to_f64();
            sum[l] += x;
            abs[l] += x.abs();
        }
    }
    finish_lanes(sum, abs, chunks.remainder())
}

/// The last (fewer than 8) elements added to the first lanes, then the
/// lanes summed in order.
#[inline(always)]
fn finish_lanes<T: Elem>(mut sum: [f64; 8], mut abs: [f64; 8], rest: &[T]) -> (f64, f64) {
    for (l, &x) in rest.iter().enumerate() {
        let x = x.to_f64();
        sum[l] += x;
        abs[l] += x.abs();
    }
    (sum.iter().sum(), abs.iter().sum())
}

/// Send an output's tuples (sorted, with their site) to worker 0, which keeps them.
pub(super) fn gather<'s, T: Elem>(p: &Arc<Proc<T>>, me: usize, name: &str, s: S<'s, T>) {
    let routed = s.unary_frontier::<CB<T>, _, _, _>(Pipeline, &format!("gather {name}"), move |cap, _| {
        let mut cap = Some(cap);
        let mut stash = Stash::<T>::default();
        move |(input, frontier), output| {
            input.for_each(|_, data| stash.absorb(data));
            if frontier.is_empty() {
                if let Some(c) = cap.take() {
                    let (own, every) = stash.parts();
                    let mut session = output.session(&c);
                    for (k, b) in own {
                        session.give(Item::tuple(0, me as u32, k, b));
                    }
                    if me == 0 && !every.is_empty() {
                        session.give(Item::every(0, every));
                    }
                }
            }
        }
    });
    let p2 = p.clone();
    let name = name.to_string();
    routed.sink(exchange::<T>(), &format!("collect {name}"), move |(input, frontier)| {
        input.for_each(|_, data| {
            let mut c = lock(&p2.collected);
            let entry = c.outputs.entry(name.clone()).or_insert_with(|| (vec![Vec::new(); p2.sites], Vec::new()));
            for it in data.take_items() {
                match it.body {
                    Body::Tuple(k, b) => entry.0[it.tag as usize].push((k, b)),
                    Body::Every(list) => entry.1.extend(list.iter().cloned()),
                    Body::EveryTuple(k, b) => entry.1.push((k, b)),
                    Body::Meta(_) => {}
                }
            }
        });
        if frontier.is_empty() && me == 0 {
            lock(&p2.collected).outputs.entry(name.clone()).or_insert_with(|| (vec![Vec::new(); p2.sites], Vec::new()));
        }
    });
}

/// Process 0: the outputs and the figures of every worker.
pub(super) fn finish<T: Elem>(p: &Proc<T>, c: Collected<T>, wall_ms: f64) -> Result<ClusterRun<T>, ClusterError> {
    let mut errors: Vec<ErrorRecord> = c.reports.iter().flat_map(|r| r.errors.iter().cloned()).collect();
    errors.sort_by_key(|e| (e.stage, e.site));
    if let Some(e) = errors.into_iter().next() {
        return Err(ClusterError { node: e.node, message: e.message });
    }
    if c.reports.len() != p.sites {
        return Err(plain(format!("only {} of {} sites reported", c.reports.len(), p.sites)));
    }
    let mut outputs = BTreeMap::new();
    for o in p.prep.plan.outputs.iter().filter(|o| !p.cfg.files.contains_key(*o)) {
        let (sites, every) = c.outputs.get(o).cloned().unwrap_or_else(|| (vec![Vec::new(); p.sites], Vec::new()));
        let mut every = every;
        every.sort_by(|a, b| a.0.cmp(&b.0));
        outputs.insert(
            o.clone(),
            PhysValue { sites: sites.into_iter().map(Arc::new).collect(), everywhere: Arc::new(every) },
        );
    }
    let n = p.prep.steps.len();
    let mut done = vec![0u64; n];
    let mut busy = vec![vec![0f64; p.sites]; n];
    let mut moved = vec![0u64; n];
    let mut tuples = vec![0u64; n];
    let mut load_ns = 0u64;
    let mut first = vec![u64::MAX; n];
    let mut last = vec![0u64; n];
    let mut wire_bytes = vec![0u64; n];
    // Every worker of a process reads the same process clock: its latest.
    let mut cpu_ns = vec![0u64; p.processes];
    let mut machines = vec![None; p.processes];
    for r in &c.reports {
        load_ns = load_ns.max(r.load_ns);
        if let Some(c) = cpu_ns.get_mut(r.site / p.workers.max(1)) {
            *c = (*c).max(r.cpu_ns);
        }
        if let Some(m @ None) = machines.get_mut(r.site / p.workers.max(1)) {
            m.clone_from(&r.machine);
        }
        for (i, st) in r.steps.iter().enumerate().take(n) {
            done[i] = done[i].max(st.done_ns);
            if st.first_ns > 0 {
                first[i] = first[i].min(st.first_ns);
            }
            last[i] = last[i].max(st.last_ns);
            wire_bytes[i] += st.wire_bytes;
            if r.site < p.sites {
                busy[i][r.site] = st.busy_ns as f64 / 1e6;
            }
            moved[i] += st.moved;
            tuples[i] += st.tuples;
        }
    }
    let index: HashMap<&str, usize> = p.prep.steps.iter().enumerate().map(|(i, s)| (s.name.as_str(), i)).collect();
    let mut floats_moved = BTreeMap::new();
    let mut wire = BTreeMap::new();
    let mut nodes = Vec::with_capacity(n);
    for (i, step) in p.prep.steps.iter().enumerate() {
        let exchange = matches!(step.op, IaOp::Shuffle { .. } | IaOp::Broadcast { .. });
        if exchange {
            floats_moved.insert(step.name.clone(), moved[i]);
            // From the first item sent to the last one received, on the
            // system clock (no item arrived: nothing was on the wire).
            let ms =
                if first[i] == u64::MAX || last[i] == 0 { 0.0 } else { last[i].saturating_sub(first[i]) as f64 / 1e6 };
            wire.insert(step.name.clone(), WireStat { bytes: wire_bytes[i], ms });
        }
        let operands: Vec<&str> = match &step.fused {
            Some(j) => p.prep.plan.nodes[j].operands(),
            None => step.op.operands(),
        };
        let start = operands.iter().filter_map(|o| index.get(o).map(|&j| done[j])).max().unwrap_or(load_ns);
        let wall = if step.skip.is_some() { 0.0 } else { done[i].saturating_sub(start) as f64 / 1e6 };
        nodes.push(NodeStats {
            name: step.name.clone(),
            op: step.op.op_name(),
            wall_ms: wall,
            site_ms: busy[i].clone(),
            floats_moved: exchange.then_some(moved[i]),
            tuples: step.skip.is_none().then_some(tuples[i]),
            fused_into: step.skip.clone(),
            streamed: !c.reports.is_empty() && c.reports.iter().all(|r| r.steps.get(i).is_some_and(|s| s.streamed)),
        });
    }
    let mut written_by_site: BTreeMap<String, Vec<Written>> = BTreeMap::new();
    for r in &c.reports {
        for (o, w) in &r.written {
            let sites = written_by_site.entry(o.clone()).or_insert_with(|| vec![Written::default(); p.sites]);
            if let Some(at) = sites.get_mut(r.site) {
                *at = *w;
            }
        }
    }
    // Each output's totals, summed over its sites.
    let written: BTreeMap<String, Written> = written_by_site
        .iter()
        .map(|(o, sites)| {
            let total = sites.iter().fold(Written::default(), |t, w| Written {
                tuples: t.tuples + w.tuples,
                sum: t.sum + w.sum,
                abs_sum: t.abs_sum + w.abs_sum,
                bytes: t.bytes + w.bytes,
                busy_ns: t.busy_ns + w.busy_ns,
            });
            (o.clone(), total)
        })
        .collect();
    Ok(ClusterRun {
        sites: p.sites,
        processes: p.processes,
        workers: p.workers,
        outputs,
        written,
        written_by_site,
        floats_moved,
        nodes,
        wall_ms,
        load_ms: load_ns as f64 / 1e6,
        wire,
        cpu_ms: cpu_ns.iter().map(|&c| c as f64 / 1e6).collect(),
        machines,
    })
}

#[cfg(test)]
mod tests {
    use super::{checksum, checksum_lanes, write_all};
    use crate::cluster::output::OutputFile;
    use crate::npy::Layout;
    use crate::threads::Block;
    use std::sync::Arc;

    /// The writing thread's loop writes and sums what the queue brings; a
    /// file it cannot open, or a tuple that does not fit, is its error, and
    /// the rest of the queue is taken (the worker never waits on a full
    /// queue nobody reads).
    #[test]
    fn the_writing_thread_writes_sums_and_names_its_first_error() {
        let dir = std::env::temp_dir().join(format!("tra-write-all-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = |path: std::path::PathBuf| OutputFile {
            path,
            layout: Layout::Relation,
            key_bounds: vec![2],
            array_bounds: vec![3],
        };
        let queue = |tuples: Vec<(Vec<u32>, Vec<f32>)>| {
            let (tx, rx) = std::sync::mpsc::sync_channel(1);
            let feeder = std::thread::spawn(move || {
                for (k, v) in tuples {
                    tx.send((k, Arc::new(Block::detached(&[v.len()], v)))).unwrap();
                }
            });
            (rx, feeder)
        };
        let tuples = vec![(vec![1], vec![1.0, -2.0, 3.0]), (vec![0], vec![4.0, 5.0, 6.0])];
        let (rx, feeder) = queue(tuples.clone());
        let (stat, error) = write_all::<f32>(out(dir.join("ok.npy")), true, rx);
        feeder.join().unwrap();
        assert_eq!((stat.tuples, stat.sum, stat.abs_sum, error), (2, 17.0, 21.0, None));
        let a = crate::npy::read_array::<f32>(&dir.join("ok.npy")).unwrap();
        assert_eq!(a.iter().copied().collect::<Vec<f32>>(), [4.0, 5.0, 6.0, 1.0, -2.0, 3.0]);
        // No such directory: every tuple is still taken.
        let (rx, feeder) = queue(tuples.clone());
        let (stat, error) = write_all::<f32>(out(dir.join("absent").join("x.npy")), true, rx);
        feeder.join().unwrap();
        assert_eq!(stat.tuples, 0);
        assert!(error.is_some_and(|e| e.contains("cannot create")));
        // A key outside the output's bounds: the tuple before it is written.
        let mut bad = tuples;
        bad.insert(1, (vec![7], vec![0.0; 3]));
        let (rx, feeder) = queue(bad);
        let (stat, error) = write_all::<f32>(out(dir.join("bad.npy")), true, rx);
        feeder.join().unwrap();
        assert_eq!(stat.tuples, 1);
        assert!(error.is_some_and(|e| e.contains("does not fit")));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The AVX2 build of the loop (where the CPU has it) sums exactly as the
    /// portable one: the same bits for data whose sums round differently in
    /// other orders.
    #[test]
    fn checksum_is_the_same_on_every_code_path() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let data: Vec<f32> = (0..100_003)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ((x >> 40) as f32 / 1024.0 - 8192.0) * if x & 1 == 0 { 1e-3 } else { 1e3 }
            })
            .collect();
        for n in [0, 1, 7, 8, 9, 1000, data.len()] {
            let (a, b) = checksum(&data[..n]);
            let (c, d) = checksum_lanes(&data[..n]);
            assert_eq!((a.to_bits(), b.to_bits()), (c.to_bits(), d.to_bits()), "{n} elements");
        }
        let wide: Vec<f64> = data.iter().map(|&v| f64::from(v) * 1.1).collect();
        let (a, b) = checksum(&wide);
        let (c, d) = checksum_lanes(&wide);
        assert_eq!((a.to_bits(), b.to_bits()), (c.to_bits(), d.to_bits()));
    }

    #[test]
    fn checksum_sums_every_element_and_its_magnitude() {
        // 21 elements: two full lanes' worth and a remainder of 5.
        let data: Vec<f32> = (0..21).map(|i| if i % 3 == 0 { -(i as f32) } else { i as f32 * 0.5 }).collect();
        let sum: f64 = data.iter().map(|&x| f64::from(x)).sum();
        let abs: f64 = data.iter().map(|&x| f64::from(x).abs()).sum();
        assert_eq!(checksum(&data), (sum, abs));
        assert_eq!(checksum::<f64>(&[]), (0.0, 0.0));
        assert_eq!(checksum(&[-2.5f64]), (-2.5, 2.5));
    }
}
