//! The connection loop of the service: HTTP/1.1 on hyper with a header read
//! timeout, a body read timeout, a cap on open connections, and a shutdown
//! bounded in time.
//!
//! - **Header read timeout.** A client has `header_timeout` to send a
//!   request's headers (hyper's timer; it also closes a keep-alive
//!   connection idle that long), so trickled headers cannot hold a
//!   connection open.
//! - **Body read timeout.** Every read of the body must progress within
//!   `body_timeout` (`tower_http`'s `TimeoutBody`); the whole body is read
//!   under the same limit again in [`super::JsonBody`].
//! - **Connection cap.** At most `max_connections` are open. A new one past
//!   the cap closes the oldest connection that is not serving a request
//!   (half-open or idle), so that a flood of idle sockets cannot lock out a
//!   real client; when every open connection is serving a request, the new
//!   one gets a 503 and is closed. File handles stay bounded either way.
//! - **Shutdown.** On the signal the loop stops accepting, connections
//!   finish the request they serve and close; after `grace` the work still
//!   running is cancelled (its deadlines pass at once, its requests answer
//!   503) and the loop returns shortly after, whatever is left.

use axum::body::Body;
use axum::extract::Request;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};
use tower::ServiceExt;
use tower_http::timeout::TimeoutBody;

/// The limits of the connection loop.
#[derive(Debug, Clone)]
pub struct ConnLimits {
    /// Most connections open at once.
    pub max_connections: usize,
    /// Time to send a request's headers (and most idle time between requests).
    pub header_timeout: Duration,
    /// Most time between two reads of a request body.
    pub body_timeout: Duration,
    /// Time requests in flight get to finish after the shutdown signal.
    pub grace: Duration,
}

/// How long a new connection is safe from eviction.
const EVICTION_GRACE: Duration = Duration::from_millis(50);

/// One open connection.
struct Conn {
    opened: Instant,
    /// Requests being served on it.
    active: AtomicUsize,
    /// Told to close (evicted).
    evict: Notify,
}

/// The open connections (for the cap and `/healthz`).
#[derive(Default)]
pub struct Connections {
    next: AtomicUsize,
    open: Mutex<HashMap<usize, Arc<Conn>>>,
    evicted: AtomicUsize,
    refused: AtomicUsize,
    all_closed: Notify,
}

/// Connection figures for `/healthz`.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct ConnStats {
    /// Open now.
    pub open: usize,
    /// The cap.
    pub max: usize,
    /// Idle or half-open connections closed to make room for a new one.
    pub evicted: usize,
    /// New connections refused with 503 because every open one was busy.
    pub refused: usize,
}

impl Connections {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<usize, Arc<Conn>>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Current figures.
    pub fn stats(&self, max: usize) -> ConnStats {
        ConnStats {
            open: self.lock().len(),
            max,
            evicted: self.evicted.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
        }
    }

    /// Make room for one more connection under `max`: true if there is room
    /// (possibly after evicting the oldest connection serving nothing). A
    /// connection younger than [`EVICTION_GRACE`] is not evicted: a real
    /// client sends its request right after connecting.
    fn make_room(&self, max: usize) -> bool {
        let mut open = self.lock();
        if open.len() < max {
            return true;
        }
        let oldest = open
            .iter()
            .filter(|(_, c)| c.active.load(Ordering::SeqCst) == 0 && c.opened.elapsed() >= EVICTION_GRACE)
            .min_by_key(|(_, c)| c.opened)
            .map(|(id, _)| *id);
        match oldest.and_then(|id| open.remove(&id)) {
            Some(c) => {
                // Out of the count at once; its task drops the socket.
                c.evict.notify_one();
                self.evicted.fetch_add(1, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    fn add(&self) -> (usize, Arc<Conn>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let c = Arc::new(Conn { opened: Instant::now(), active: AtomicUsize::new(0), evict: Notify::new() });
        self.lock().insert(id, c.clone());
        (id, c)
    }

    fn remove(&self, id: usize) {
        let mut open = self.lock();
        open.remove(&id);
        if open.is_empty() {
            self.all_closed.notify_waiters();
        }
    }
}

/// The answer to a connection past the cap when no open one can be closed.
fn busy_response() -> Vec<u8> {
    let body = r#"{"error":{"code":"overloaded","message":"every connection this server allows is serving a request; try again later","at":""}}"#;
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Serve `app` on `listener` until `shutdown` completes, then shut down as
/// the module doc says; `cancel` is set when the grace period ends.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnLimits,
    conns: Arc<Connections>,
    cancel: Arc<AtomicBool>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => break,
            a = listener.accept() => a,
        };
        let (stream, _peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                // Out of file handles (or a connection reset before accept):
                // back off briefly instead of spinning.
                tracing::warn!(target: "tra::http", "accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if !conns.make_room(limits.max_connections) {
            conns.refused.fetch_add(1, Ordering::Relaxed);
            let _ = stream.try_write(&busy_response());
            continue;
        }
        let _ = stream.set_nodelay(true);
        let (id, conn) = conns.add();
        let app = app.clone();
        let limits = limits.clone();
        let conns = conns.clone();
        let mut stop_rx = stop_rx.clone();
        tokio::spawn(async move {
            let service = {
                let conn = conn.clone();
                hyper::service::service_fn(move |req: Request<Incoming>| {
                    struct Active(Arc<Conn>);
                    impl Drop for Active {
                        fn drop(&mut self) {
                            self.0.active.fetch_sub(1, Ordering::SeqCst);
                        }
                    }
                    conn.active.fetch_add(1, Ordering::SeqCst);
                    let active = Active(conn.clone());
                    let req = req.map(|b| Body::new(TimeoutBody::new(limits.body_timeout, b)));
                    let app = app.clone();
                    async move {
                        let res = app.oneshot(req).await;
                        drop(active);
                        res
                    }
                })
            };
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout).max_buf_size(64 * 1024);
            let served = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(served);
            let stopping = async {
                if !*stop_rx.borrow() {
                    let _ = stop_rx.changed().await;
                }
            };
            tokio::select! {
                _ = served.as_mut() => {}
                _ = conn.evict.notified() => {} // dropped: the socket closes
                _ = stopping => {
                    served.as_mut().graceful_shutdown();
                    let _ = served.await;
                }
            }
            conns.remove(id);
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    // Requests in flight get the grace period; then their work is cancelled
    // and they have a moment to answer.
    let all_closed = || async {
        loop {
            let notified = conns.all_closed.notified();
            if conns.lock().is_empty() {
                return;
            }
            notified.await;
        }
    };
    if tokio::time::timeout(limits.grace, all_closed()).await.is_err() {
        tracing::warn!(
            target: "tra::http",
            "{} connections still open after the shutdown grace of {} s: cancelling their work",
            conns.lock().len(),
            limits.grace.as_secs_f64()
        );
        cancel.store(true, Ordering::SeqCst);
        let _ = tokio::time::timeout(Duration::from_secs(1), all_closed()).await;
    }
    Ok(())
}
