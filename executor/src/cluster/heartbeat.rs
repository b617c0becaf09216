//! Heartbeats between the processes of a job: a peer that is alive but
//! silent (stopped with SIGSTOP, frozen, cut off by the network without its
//! connections closing) fails the job within seconds instead of leaving the
//! others waiting for its data until the job's timeout.
//!
//! Every pair of job processes has a heartbeat connection beside timely's
//! data connection (set up and authenticated with it). Each side writes one
//! byte every `silence / 5` and reads with a timeout of `silence`: a read
//! that times out calls the silence handler with the peer's index (a job
//! process reports `worker N stopped responding` and stops; see
//! [`super::supervise`]). These threads do nothing else, so a long kernel or
//! a large transfer never delays them. A peer that closes its heartbeat
//! connection has finished (or died, which its data connection reports):
//! it is no longer watched.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// What to do when peer `process` has been silent for the given time.
pub type SilenceHandler = Arc<dyn Fn(usize, Duration) + Send + Sync>;

/// The heartbeats of one job process; dropping it stops them and closes
/// the connections.
pub struct Heartbeats {
    stopping: Arc<AtomicBool>,
    wake: Vec<mpsc::Sender<()>>,
    sockets: Vec<TcpStream>,
    threads: Vec<JoinHandle<()>>,
}

impl Heartbeats {
    /// Start beating to and listening for each `(peer index, connection)`.
    pub fn start(peers: Vec<(usize, TcpStream)>, silence: Duration, on_silent: SilenceHandler) -> Heartbeats {
        let silence = silence.max(Duration::from_millis(100));
        let interval = (silence / 5).clamp(Duration::from_millis(20), Duration::from_secs(1));
        let stopping = Arc::new(AtomicBool::new(false));
        let mut hb =
            Heartbeats { stopping: stopping.clone(), wake: Vec::new(), sockets: Vec::new(), threads: Vec::new() };
        for (peer, socket) in peers {
            let (Ok(mut reader), Ok(mut writer)) = (socket.try_clone(), socket.try_clone()) else { continue };
            let _ = socket.set_nodelay(true);
            hb.sockets.push(socket);
            let (tx, rx) = mpsc::channel::<()>();
            hb.wake.push(tx);
            let spawn = |name: String, f: Box<dyn FnOnce() + Send>| std::thread::Builder::new().name(name).spawn(f);
            if let Ok(t) = spawn(
                format!("tra-heartbeat-send-{peer}"),
                Box::new(move || loop {
                    if writer.write_all(&[1]).is_err() {
                        return;
                    }
                    match rx.recv_timeout(interval) {
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                        _ => return,
                    }
                }),
            ) {
                hb.threads.push(t);
            }
            let (stopping, on_silent) = (stopping.clone(), on_silent.clone());
            if let Ok(t) = spawn(
                format!("tra-heartbeat-recv-{peer}"),
                Box::new(move || {
                    if reader.set_read_timeout(Some(silence)).is_err() {
                        return;
                    }
                    let mut buf = [0u8; 64];
                    loop {
                        match reader.read(&mut buf) {
                            Ok(0) => return,
                            Ok(_) => {}
                            Err(e)
                                if matches!(
                                    e.kind(),
                                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                                ) =>
                            {
                                if !stopping.load(Ordering::SeqCst) {
                                    on_silent(peer, silence);
                                }
                                return;
                            }
                            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                            Err(_) => return,
                        }
                    }
                }),
            ) {
                hb.threads.push(t);
            }
        }
        hb
    }
}

impl Drop for Heartbeats {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.wake.clear();
        for s in &self.sockets {
            let _ = s.shutdown(Shutdown::Both);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::sync::Mutex;
    use std::time::Instant;

    fn socket_pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    #[test]
    fn a_silent_peer_is_reported_and_a_live_one_is_not() {
        let silent: Arc<Mutex<Vec<usize>>> = Arc::default();
        let s2 = silent.clone();
        let handler: SilenceHandler = Arc::new(move |p, _| s2.lock().unwrap().push(p));
        // Peer 1 beats back; peer 2 never writes.
        let (a1, b1) = socket_pair();
        let (a2, _b2) = socket_pair();
        let t = Instant::now();
        let hb = Heartbeats::start(vec![(1, a1), (2, a2)], Duration::from_millis(300), handler);
        let other = Heartbeats::start(vec![(0, b1)], Duration::from_millis(300), Arc::new(|_, _| {}));
        while silent.lock().unwrap().is_empty() {
            assert!(t.elapsed() < Duration::from_secs(5), "the silent peer was not reported");
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(400));
        assert_eq!(*silent.lock().unwrap(), vec![2]);
        let t = Instant::now();
        drop(other);
        drop(hb);
        assert!(t.elapsed() < Duration::from_millis(500), "stopping the heartbeats took {:?}", t.elapsed());
        assert_eq!(*silent.lock().unwrap(), vec![2], "a peer that stops beating after the end is not reported");
    }
}
