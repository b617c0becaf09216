//! The threads that run the service's CPU work (parsing, type checking,
//! optimization, einsum compilation): as many as there are CPU slots
//! ([`super::admission::Slots`]), started once and kept.
//!
//! Why not tokio's blocking pool: it hands each task to whichever idle
//! thread wakes, and keeps every thread it ever started for a while, so
//! under load one optimization after another lands on a thread whose caches
//! and allocator pages another core warmed. On a plain matmul at 32
//! connections on 2 cores, six blocking threads took turns and an uncached
//! `POST /v1/optimize` cost 2.3 ms of CPU; on two kept threads it costs
//! 2.0 ms and the server answers 1.45× as many requests per second
//! (`bench/http-load.sh`). A job is only queued here once it holds a slot,
//! so with one thread per slot it never waits for a thread.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};

type Job = Box<dyn FnOnce() + Send + 'static>;

/// A fixed set of named threads taking jobs from one queue; they stop when
/// the pool is dropped (once the jobs queued before have run).
pub struct CpuPool {
    jobs: Mutex<Sender<Job>>,
}

/// The stack of each thread: what the main thread gets (deep programs are
/// type-checked and lowered recursively in places).
const STACK_BYTES: usize = 8 << 20;

impl CpuPool {
    /// A pool of `threads` threads (at least one) named `{name}-{i}`.
    pub fn new(name: &str, threads: usize) -> CpuPool {
        let (tx, rx) = channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads.max(1) {
            let rx = rx.clone();
            std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .stack_size(STACK_BYTES)
                .spawn(move || work(&rx))
                .unwrap_or_else(|e| panic!("cannot start the {name} threads: {e}"));
        }
        CpuPool { jobs: Mutex::new(tx) }
    }

    /// Run `f` on one of the pool's threads; `Err` with the panic's message
    /// if it panicked (the thread survives and takes the next job).
    pub async fn run<R: Send + 'static>(&self, f: impl FnOnce() -> R + Send + 'static) -> Result<R, String> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let out = catch_unwind(AssertUnwindSafe(f)).map_err(|p| panic_message(p.as_ref()));
            // The request may have gone (its connection closed): nobody to tell.
            let _ = tx.send(out);
        });
        self.jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(job)
            .map_err(|_| "the CPU threads have stopped".to_string())?;
        rx.await.map_err(|_| "the CPU thread dropped the job".to_string())?
    }
}

fn work(rx: &Mutex<Receiver<Job>>) {
    loop {
        // The lock is held while waiting: the other idle threads wait for
        // it, and the thread that finished last takes the next job.
        let job = match rx.lock().unwrap_or_else(|e| e.into_inner()).recv() {
            Ok(job) => job,
            Err(_) => return, // the pool was dropped
        };
        job();
    }
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        format!("panicked: {s}")
    } else if let Some(s) = p.downcast_ref::<String>() {
        format!("panicked: {s}")
    } else {
        "panicked".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_job_leaves_the_thread_serving() {
        let pool = CpuPool::new("test-cpu", 1);
        let err = pool.run(|| -> u32 { panic!("boom") }).await.unwrap_err();
        assert_eq!(err, "panicked: boom");
        assert_eq!(pool.run(|| 7).await.unwrap(), 7);
    }

    #[tokio::test]
    async fn jobs_run_on_the_kept_threads() {
        let pool = CpuPool::new("test-kept", 2);
        let mut names = std::collections::BTreeSet::new();
        for _ in 0..20 {
            names.insert(pool.run(|| std::thread::current().name().unwrap().to_string()).await.unwrap());
        }
        assert!(names.iter().all(|n| n.starts_with("test-kept-")), "{names:?}");
        assert!(names.len() <= 2, "{names:?}");
    }
}
