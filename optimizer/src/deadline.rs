//! One deadline for the CPU work of a request, checked cooperatively.
//!
//! Saturation is bounded by egg's own time limit, but the work around it is
//! not: type checking and the e-graph analysis enumerate key spaces (a chain
//! of filters over a million keys), extraction walks every e-node, and the
//! executor runs kernels. A caller that must answer in bounded time (the HTTP
//! service) installs a [`Deadline`] for the current thread with [`within`];
//! the loops that can be long call [`expired`] (or a [`Ticker`]) and stop
//! with a `limit_exceeded` error when it has passed. Without a deadline
//! installed (the command line, the tests) nothing changes.
//!
//! The deadline is per thread because the checks sit deep in code that has
//! no request to pass around (the type functions, called by the e-graph
//! analysis, called by egg, called by the rules). A deadline also carries an
//! optional cancellation flag, so that a server shutting down stops the work
//! in flight at once instead of waiting for every deadline.
//!
//! A deadline may also bound the **memory of key sets** the request's
//! analysis holds: filters and key maps leave relations with holes whose
//! keys are kept explicitly (up to a million keys, tens of megabytes each),
//! and a chain of a hundred filters would hold a hundred of them. Under a
//! deadline every explicit key set is shared with any equal set made before
//! ([`share_keys`]) and the distinct ones are counted; past the budget the
//! deadline counts as passed, with that reason.

use crate::keyexpr::Key;
use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// When the work of one request must stop, and why.
#[derive(Debug, Clone)]
pub struct Deadline {
    at: Instant,
    /// The limit as the user set it, for messages (`10 s of optimization`).
    what: Arc<str>,
    cancel: Option<Arc<AtomicBool>>,
    /// Most bytes of distinct explicit key sets, and the limit in words.
    key_bytes: Option<(u64, Arc<str>)>,
}

impl Deadline {
    /// A deadline `budget` from now; `what` names the limit in messages
    /// (e.g. "this server's optimize limit of 10 s").
    pub fn after(budget: Duration, what: impl Into<Arc<str>>) -> Deadline {
        Deadline::at(Instant::now() + budget, what)
    }

    /// A deadline at an instant.
    pub fn at(at: Instant, what: impl Into<Arc<str>>) -> Deadline {
        Deadline { at, what: what.into(), cancel: None, key_bytes: None }
    }

    /// The same deadline, also passed once the request's distinct explicit
    /// key sets hold more than `bytes` (`what` names the limit in messages).
    pub fn with_key_budget(mut self, bytes: u64, what: impl Into<Arc<str>>) -> Deadline {
        self.key_bytes = Some((bytes, what.into()));
        self
    }

    /// The same deadline, also passed as soon as `flag` is set (shutdown).
    pub fn with_cancel(mut self, flag: Arc<AtomicBool>) -> Deadline {
        self.cancel = Some(flag);
        self
    }

    /// The same cancellation, an earlier instant (never a later one).
    pub fn no_later_than(&self, at: Instant, what: impl Into<Arc<str>>) -> Deadline {
        if at < self.at {
            Deadline { at, what: what.into(), cancel: self.cancel.clone(), key_bytes: self.key_bytes.clone() }
        } else {
            self.clone()
        }
    }

    /// The instant.
    pub fn instant(&self) -> Instant {
        self.at
    }

    /// Whether the work was cancelled (shutdown), as opposed to timed out.
    pub fn cancelled(&self) -> bool {
        self.cancel.as_ref().is_some_and(|c| c.load(Ordering::Relaxed))
    }

    /// Whether the deadline has passed or the work was cancelled.
    pub fn passed(&self) -> bool {
        self.cancelled() || Instant::now() >= self.at
    }

    /// Time left (zero once passed).
    pub fn remaining(&self) -> Duration {
        if self.cancelled() {
            return Duration::ZERO;
        }
        self.at.saturating_duration_since(Instant::now())
    }

    /// Why the work stopped, in words: the limit, or the shutdown.
    pub fn reason(&self) -> String {
        if self.cancelled() {
            "the server is shutting down".to_string()
        } else {
            format!("{} passed", self.what)
        }
    }
}

/// The deadline of this thread and the key sets its request made.
struct Scope {
    deadline: Deadline,
    /// Distinct explicit key sets, by hash.
    keys: HashMap<u64, Vec<Arc<Vec<Key>>>>,
    key_bytes: u64,
    /// Set once the key budget is spent (its words, for the reason).
    over_key_budget: bool,
}

thread_local! {
    static CURRENT: RefCell<Option<Scope>> = const { RefCell::new(None) };
}

/// Run `f` with `deadline` installed for this thread (the previous one is
/// restored afterwards, also when `f` unwinds).
pub fn within<R>(deadline: Deadline, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Scope>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let prev = self.0.take();
            CURRENT.with(|c| *c.borrow_mut() = prev);
        }
    }
    let scope = Scope { deadline, keys: HashMap::new(), key_bytes: 0, over_key_budget: false };
    let prev = CURRENT.with(|c| c.borrow_mut().replace(scope));
    let _restore = Restore(prev);
    f()
}

/// The deadline installed for this thread, if any.
pub fn current() -> Option<Deadline> {
    CURRENT.with(|c| c.borrow().as_ref().map(|s| s.deadline.clone()))
}

/// Whether this thread's deadline (if any) has passed, or its key budget is spent.
pub fn expired() -> bool {
    CURRENT.with(|c| c.borrow().as_ref().is_some_and(|s| s.over_key_budget || s.deadline.passed()))
}

/// Why this thread's work stopped (for messages); a generic phrase when no
/// deadline is installed.
pub fn reason() -> String {
    CURRENT.with(|c| match c.borrow().as_ref() {
        Some(s) if s.over_key_budget && !s.deadline.cancelled() => {
            let what = s.deadline.key_bytes.as_ref().map(|k| k.1.to_string()).unwrap_or_default();
            format!("the key sets of this program's filters, key maps and joins, with the per-site layouts of its plans, exceed {what}")
        }
        Some(s) => s.deadline.reason(),
        None => "the time limit passed".to_string(),
    })
}

/// Bytes one key of `arity` dims costs in an explicit key set (the `Vec`
/// and its allocation).
fn key_cost(arity: usize) -> u64 {
    (std::mem::size_of::<Key>() + (arity * 4 + 16).max(32)) as u64
}

/// An explicit key set (sorted and unique) for a type: under a deadline with
/// a key budget, the set made before if an equal one was, else a new one,
/// counted against the budget (spending it makes [`expired`] true). Without
/// one, simply the set.
pub fn share_keys(keys: Vec<Key>) -> Arc<Vec<Key>> {
    CURRENT.with(|c| {
        let mut c = c.borrow_mut();
        let Some(scope) = c.as_mut() else { return Arc::new(keys) };
        let Some((budget, _)) = scope.deadline.key_bytes.clone() else { return Arc::new(keys) };
        let mut h = rustc_hash::FxHasher::default();
        keys.hash(&mut h);
        let bucket = scope.keys.entry(h.finish()).or_default();
        if let Some(same) = bucket.iter().find(|k| ***k == keys) {
            return same.clone();
        }
        let arity = keys.first().map_or(0, Vec::len);
        let bytes = keys.len() as u64 * key_cost(arity);
        let shared = Arc::new(keys);
        bucket.push(shared.clone());
        scope.charge(bytes, budget);
        shared
    })
}

impl Scope {
    /// Count `bytes` against the key budget `budget`; past it, [`expired`].
    fn charge(&mut self, bytes: u64, budget: u64) {
        self.key_bytes = self.key_bytes.saturating_add(bytes);
        if self.key_bytes > budget {
            self.over_key_budget = true;
        }
    }
}

/// Count `bytes` of per-site layouts ([`crate::loads`]: a key's site for
/// every tuple of a relation) against this thread's key budget, as
/// [`share_keys`] counts key sets: spending it makes [`expired`] true.
/// Without a key budget, nothing.
pub fn charge_layout_bytes(bytes: u64) {
    CURRENT.with(|c| {
        let mut c = c.borrow_mut();
        let Some(scope) = c.as_mut() else { return };
        let Some((budget, _)) = scope.deadline.key_bytes.clone() else { return };
        scope.charge(bytes, budget);
    })
}

/// Bytes this thread's request may still charge against its key budget
/// (`None` without one): what may be allocated ahead of charging it.
pub fn key_bytes_left() -> Option<u64> {
    CURRENT.with(|c| {
        let c = c.borrow();
        let scope = c.as_ref()?;
        let (budget, _) = scope.deadline.key_bytes.as_ref()?;
        Some(budget.saturating_sub(scope.key_bytes))
    })
}

/// Bytes of key sets and layouts this thread's request has charged so far
/// against its key budget (0 without one).
pub fn charged_bytes() -> u64 {
    CURRENT.with(|c| c.borrow().as_ref().map_or(0, |s| s.key_bytes))
}

/// The time saturation may take under `limit` and this thread's deadline:
/// `limit`, or three quarters of what is left before the deadline if that is
/// less (the last quarter is for extraction and the reports).
pub fn saturation_budget(limit: Duration) -> Duration {
    match current() {
        Some(d) => limit.min(d.remaining().mul_f64(0.75)),
        None => limit,
    }
}

/// The payload of an unwind out of code that cannot return an error (egg's
/// analysis `make`) once the deadline has passed. [`std::panic::resume_unwind`]
/// carries it without running the panic hook (nothing is printed); the
/// optimizer catches it and answers `limit_exceeded`.
#[derive(Debug, Clone, Copy)]
pub struct Expired;

/// Unwind with [`Expired`] if this thread's deadline has passed.
pub fn unwind_if_expired() {
    if expired() {
        std::panic::resume_unwind(Box::new(Expired));
    }
}

/// Whether a caught unwind payload is an [`Expired`].
pub fn is_expired_payload(payload: &(dyn std::any::Any + Send)) -> bool {
    payload.is::<Expired>()
}

/// Checks the deadline once every `every` calls of [`Ticker::tick`], so that
/// loops over millions of keys pay for a clock read only now and then.
#[derive(Debug)]
pub struct Ticker {
    n: u32,
    every: u32,
}

impl Default for Ticker {
    fn default() -> Self {
        // The first tick checks, so that even a short loop notices a
        // deadline that passed before it started.
        Ticker { n: 4095, every: 4096 }
    }
}

impl Ticker {
    /// True when the deadline has passed (checked at the first tick and every 4096th after).
    #[inline]
    pub fn tick(&mut self) -> bool {
        self.n += 1;
        if self.n < self.every {
            return false;
        }
        self.n = 0;
        expired()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installed_for_the_call_only_and_restored_after_an_unwind() {
        assert!(current().is_none() && !expired());
        let past = Deadline::at(Instant::now() - Duration::from_millis(1), "a test limit of 0 s");
        within(past.clone(), || {
            assert!(expired());
            assert_eq!(reason(), "a test limit of 0 s passed");
            let future = Deadline::after(Duration::from_secs(60), "later");
            within(future, || assert!(!expired()));
            assert!(expired(), "the outer deadline is back");
        });
        assert!(current().is_none());
        let r = std::panic::catch_unwind(|| within(past, unwind_if_expired));
        assert!(is_expired_payload(&*r.unwrap_err()));
        assert!(current().is_none(), "restored after the unwind");
    }

    #[test]
    fn cancellation_passes_the_deadline_at_once() {
        let flag = Arc::new(AtomicBool::new(false));
        let d = Deadline::after(Duration::from_secs(60), "later").with_cancel(flag.clone());
        assert!(!d.passed() && d.remaining() > Duration::from_secs(50));
        flag.store(true, Ordering::Relaxed);
        assert!(d.passed() && d.remaining() == Duration::ZERO);
        assert_eq!(d.reason(), "the server is shutting down");
        let earlier = d.no_later_than(Instant::now(), "sooner");
        assert!(earlier.cancelled(), "an earlier deadline keeps the cancellation");
    }

    #[test]
    fn equal_key_sets_are_shared_and_distinct_ones_counted() {
        let keys = |n: u32| -> Vec<Key> { (0..n).map(|i| vec![i, 0]).collect() };
        // Without a key budget: plain sets.
        let a = share_keys(keys(10));
        assert!(!Arc::ptr_eq(&a, &share_keys(keys(10))));
        let d = Deadline::after(Duration::from_secs(60), "t").with_key_budget(20 * key_cost(2), "a budget of 20 keys");
        within(d, || {
            let a = share_keys(keys(10));
            assert!(Arc::ptr_eq(&a, &share_keys(keys(10))), "an equal set is the same set");
            assert!(!expired());
            let _b = share_keys(keys(11));
            assert!(expired(), "21 distinct keys: the budget is spent");
            assert!(reason().contains("exceed a budget of 20 keys"), "{}", reason());
        });
        assert!(!expired());
    }

    #[test]
    fn a_ticker_reads_the_clock_now_and_then() {
        let past = Deadline::at(Instant::now() - Duration::from_millis(1), "x");
        within(past, || {
            let mut t = Ticker::default();
            let fired = (0..10_000).filter(|_| t.tick()).count();
            assert_eq!(fired, 3, "the first tick, then every 4096th");
        });
    }
}
