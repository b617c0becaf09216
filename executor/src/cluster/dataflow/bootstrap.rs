//! How the processes of a run find each other: [`Comm`] says who they are,
//! [`connect`] opens and authenticates the TCP connections between every
//! pair (data and heartbeats), [`communication`] turns them into timely's
//! allocators.

use super::{plain, ClusterError};
use crate::cluster::auth::{self, Secret};
use crate::cluster::heartbeat::{Heartbeats, SilenceHandler};
use std::collections::HashMap;
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// How this process talks to the others.
#[derive(Debug, Clone)]
pub enum Comm {
    /// Every site in this process (`workers` timely worker threads). With
    /// `serialize`, exchanges between workers go through bytes (timely's
    /// `ProcessBinary`), as they would between processes.
    Local {
        /// Worker threads (= sites).
        workers: usize,
        /// Serialize every exchange.
        serialize: bool,
    },
    /// One process of a cluster: timely's cluster mode over TCP.
    Cluster {
        /// This process's index.
        process: usize,
        /// `host:port` of every process, in order (timely's host file).
        addresses: Vec<String>,
        /// Worker threads per process.
        workers: usize,
        /// The job's key ([`Secret::job_key`]): every connection proves it,
        /// so a connection from another job or from outside is refused.
        key: Secret,
        /// The job's token (part of what connections prove).
        token: u64,
        /// How long to wait for the other processes to connect.
        connect_timeout: Duration,
        /// Listen here instead of at `addresses[process]` (`--bind`).
        listen: Option<String>,
        /// Heartbeats with the other processes, and what to do when one is silent.
        watch: Option<PeerWatch>,
    },
}

/// Heartbeats between job processes (see [`crate::cluster::heartbeat`]).
#[derive(Clone)]
pub struct PeerWatch {
    /// A peer silent this long has stopped responding.
    pub silence: Duration,
    /// Called (from a heartbeat thread) with the silent peer's index.
    pub on_silent: SilenceHandler,
}

impl std::fmt::Debug for PeerWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PeerWatch {{ silence: {:?} }}", self.silence)
    }
}

impl Comm {
    /// (this process, processes, workers per process).
    pub(super) fn shape(&self) -> (usize, usize, usize) {
        match self {
            Comm::Local { workers, .. } => (0, 1, *workers),
            Comm::Cluster { process, addresses, workers, .. } => (*process, addresses.len(), *workers),
        }
    }
}

/// timely's communication for this process: its workers' allocators, what
/// must live as long as they do, and the heartbeats with the other
/// processes when they are watched.
#[allow(clippy::type_complexity)]
pub(super) fn communication(
    comm: &Comm,
) -> Result<
    (Vec<timely::communication::AllocatorBuilder>, Box<dyn std::any::Any + Send>, Option<Heartbeats>),
    ClusterError,
> {
    let mut heartbeats: Option<Heartbeats> = None;
    let (builders, others) = match comm {
        Comm::Local { workers, serialize } => {
            let c = if *serialize {
                timely::CommunicationConfig::ProcessBinary(*workers)
            } else {
                timely::CommunicationConfig::Process(*workers)
            };
            c.try_build().map_err(plain)?
        }
        Comm::Cluster { process, addresses, workers, key, token, connect_timeout, listen, watch } => {
            let (sockets, beats) =
                connect(addresses, *process, listen.as_deref(), key, *token, *connect_timeout, watch.is_some())
                    .map_err(plain)?;
            heartbeats = watch.as_ref().map(|w| Heartbeats::start(beats, w.silence, w.on_silent.clone()));
            use timely::communication::allocator::zero_copy::initialize::initialize_networking_from_sockets;
            use timely::communication::allocator::ProcessBuilder;
            let hooks = timely::communication::Hooks { refill: net_buffers(), ..Default::default() };
            let locals = ProcessBuilder::new_typed_vector(*workers, hooks.refill.clone(), hooks.spill.clone());
            let (builders, guard) = initialize_networking_from_sockets(locals, sockets, *process, *workers, hooks)
                .map_err(|e| plain(format!("cannot start timely's networking: {e}")))?;
            let builders = builders.into_iter().map(timely::communication::AllocatorBuilder::Tcp).collect();
            (builders, Box::new(guard) as Box<dyn std::any::Any + Send>)
        }
    };
    Ok((builders, others, heartbeats))
}

/// Byte buffers held for timely's network slabs at most (per process).
const NET_BUFFERS_HELD: usize = 256 << 20;

/// The least size of a network slab. timely asks for 1 MiB slabs (more when
/// one message needs it), and its receive thread, whenever a slab runs out
/// in the middle of a message, copies that message's first part into the
/// next slab: with messages of about a batch (1 MiB, [`BATCH_BYTES`]) in
/// slabs of 2 MiB, that copied a third to a half of every byte received
/// again. In slabs of 8 MiB the part copied is a few percent, and a receive
/// reads up to 8 MiB per system call. (timely only needs a slab to be at
/// least the size it asks for.)
///
/// [`BATCH_BYTES`]: crate::cluster::wire::BATCH_BYTES
pub(crate) const NET_SLAB_MIN: usize = 8 << 20;

/// The byte buffers of timely's network slabs (what a worker serializes
/// into, what a receive thread reads into), taken from a process-wide free
/// list and given back to it when timely drops them: a warm job process
/// reuses the last job's buffers instead of faulting in fresh zeroed pages
/// for every job (timely's default allocates each one anew).
fn net_buffers() -> timely::communication::allocator::zero_copy::bytes_slab::BytesRefill {
    use std::ops::{Deref, DerefMut};
    use std::sync::Mutex;
    static FREE: Mutex<(Vec<Vec<u8>>, usize)> = Mutex::new((Vec::new(), 0));
    struct Pooled(Vec<u8>);
    impl Deref for Pooled {
        type Target = [u8];
        fn deref(&self) -> &[u8] {
            &self.0
        }
    }
    impl DerefMut for Pooled {
        fn deref_mut(&mut self) -> &mut [u8] {
            &mut self.0
        }
    }
    impl Drop for Pooled {
        fn drop(&mut self) {
            let buf = std::mem::take(&mut self.0);
            let mut free = FREE.lock().unwrap_or_else(|e| e.into_inner());
            if free.1 + buf.len() <= NET_BUFFERS_HELD {
                free.1 += buf.len();
                free.0.push(buf);
            }
        }
    }
    let logic = move |asked: usize| -> Box<dyn DerefMut<Target = [u8]> + Send> {
        let size = asked.max(NET_SLAB_MIN);
        let reused = {
            let mut free = FREE.lock().unwrap_or_else(|e| e.into_inner());
            let found = free.0.iter().position(|b| b.len() == size).map(|i| free.0.swap_remove(i));
            if found.is_some() {
                free.1 -= size;
            }
            found
        };
        // Timely reads only what it wrote: a reused buffer's old bytes are never seen.
        Box::new(Pooled(reused.unwrap_or_else(|| vec![0u8; size])))
    };
    timely::communication::allocator::zero_copy::bytes_slab::BytesRefill {
        logic: std::sync::Arc::new(logic),
        limit: None,
    }
}

/// Connect to every other process, each connection authenticated with the
/// job's key (see [`crate::cluster::auth`]); the claim is the connecting process's
/// index and the channel (0: timely's data, 1: heartbeats). Answers
/// `sockets[j]`, the data connection to process `j`, and the heartbeat
/// connections when `heartbeats`.
#[allow(clippy::type_complexity)]
fn connect(
    addresses: &[String],
    me: usize,
    listen: Option<&str>,
    key: &Secret,
    token: u64,
    timeout: Duration,
    heartbeats: bool,
) -> Result<(Vec<Option<TcpStream>>, Vec<(usize, TcpStream)>), String> {
    let deadline = Instant::now() + timeout;
    let n = addresses.len();
    let channels: u8 = if heartbeats { 2 } else { 1 };
    let context = [b"tra peer".as_slice(), &token.to_le_bytes()].concat();
    let listen = listen.unwrap_or(addresses[me].as_str());
    let listener = bind_patiently(listen, deadline.min(Instant::now() + Duration::from_secs(5)))
        .map_err(|e| format!("process {me}: cannot listen on {listen}: {e}"))?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let mut sockets: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    let mut beats: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    let mut pending_lower: Vec<(usize, u8)> = (0..me).flat_map(|j| (0..channels).map(move |c| (j, c))).collect();
    let mut missing_upper = (n - me - 1) * channels as usize;
    let mut last_err: HashMap<usize, String> = HashMap::new();
    let claim = |index: usize, channel: u8| -> Vec<u8> {
        let mut c = (index as u32).to_le_bytes().to_vec();
        c.push(channel);
        c
    };
    while !pending_lower.is_empty() || missing_upper > 0 {
        if Instant::now() > deadline {
            let mut waiting: Vec<String> = pending_lower
                .iter()
                .filter(|(_, c)| *c == 0)
                .map(|(j, _)| {
                    format!("process {j} at {} ({})", addresses[*j], last_err.get(j).cloned().unwrap_or_default())
                })
                .collect();
            if missing_upper > 0 {
                waiting.push(format!(
                    "{} connection(s) from processes with a higher index to {}",
                    missing_upper, addresses[me]
                ));
            }
            return Err(format!(
                "process {me}: the other processes did not all connect within {:.0} s: waiting for {}",
                timeout.as_secs_f64(),
                waiting.join("; ")
            ));
        }
        let mut progress = false;
        // Connect to the processes below us.
        pending_lower.retain(|&(j, channel)| {
            let attempt = (|| -> Result<TcpStream, String> {
                let addr = addresses[j].to_socket_addrs_first().map_err(|e| e.to_string())?;
                let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).map_err(|e| e.to_string())?;
                s.set_nodelay(true).map_err(|e| e.to_string())?;
                s.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
                auth::connect(&mut s, key, &context, &claim(me, channel)).map_err(|e| e.to_string())?;
                s.set_read_timeout(None).map_err(|e| e.to_string())?;
                Ok(s)
            })();
            match attempt {
                Ok(s) => {
                    if channel == 0 {
                        sockets[j] = Some(s);
                    } else {
                        beats[j] = Some(s);
                    }
                    progress = true;
                    false
                }
                Err(e) => {
                    last_err.insert(j, e);
                    true
                }
            }
        });
        // Accept the processes above us.
        loop {
            match listener.accept() {
                Ok((mut s, from)) => {
                    progress = true;
                    let ok = (|| -> Result<(usize, u8), String> {
                        s.set_nonblocking(false).map_err(|e| e.to_string())?;
                        s.set_nodelay(true).map_err(|e| e.to_string())?;
                        s.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
                        let (c, _) = auth::accept(&mut s, key, &context, 5).map_err(|e| e.to_string())?;
                        let idx = u32::from_le_bytes(c[0..4].try_into().expect("4")) as usize;
                        let channel = c[4];
                        if idx <= me || idx >= n || channel >= channels {
                            return Err(format!("claims to be process {idx}, channel {channel}"));
                        }
                        s.set_read_timeout(None).map_err(|e| e.to_string())?;
                        Ok((idx, channel))
                    })();
                    match ok {
                        Ok((idx, channel)) => {
                            let slot = if channel == 0 { &mut sockets[idx] } else { &mut beats[idx] };
                            if slot.is_none() {
                                missing_upper -= 1;
                            }
                            *slot = Some(s);
                        }
                        Err(e) => tracing::warn!(
                            process = me,
                            %from,
                            "refused a connection to the job's data port {}: {e}",
                            addresses[me]
                        ),
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(format!("process {me}: accepting connections on {}: {e}", addresses[me])),
            }
        }
        if !progress {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let beats = beats.into_iter().enumerate().filter_map(|(j, s)| s.map(|s| (j, s))).collect();
    Ok((sockets, beats))
}

trait FirstAddr {
    fn to_socket_addrs_first(&self) -> std::io::Result<std::net::SocketAddr>;
}

impl FirstAddr for String {
    fn to_socket_addrs_first(&self) -> std::io::Result<std::net::SocketAddr> {
        use std::net::ToSocketAddrs;
        self.as_str().to_socket_addrs()?.next().ok_or_else(|| std::io::Error::other(format!("{self}: no address")))
    }
}

/// Bind `listen`, retrying while the port is in use until `until`: a port
/// probed free a moment ago can be held briefly by another probe.
fn bind_patiently(listen: &str, until: Instant) -> std::io::Result<TcpListener> {
    loop {
        match TcpListener::bind(listen) {
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(50));
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{net_buffers, NET_SLAB_MIN};
    use timely::communication::allocator::zero_copy::bytes_slab::BytesSlab;

    #[test]
    fn network_buffers_are_reused_once_dropped() {
        let refill = net_buffers();
        // A size no other test asks for, so that the free list holds only ours.
        let size = NET_SLAB_MIN + 4096 + 17;
        let mut a = (refill.logic)(size);
        assert_eq!(a.len(), size);
        a[size - 1] = 7;
        let first = a.as_ptr();
        drop(a);
        let b = (refill.logic)(size);
        assert_eq!(b.len(), size);
        assert_eq!(b.as_ptr(), first, "the dropped buffer is taken again");
        let c = (refill.logic)(size);
        assert_ne!(c.as_ptr(), first, "a buffer in use is not handed out twice");
        assert_eq!(c.len(), size);
    }

    #[test]
    fn small_slabs_are_given_the_least_size() {
        let b = (net_buffers().logic)(1 << 20);
        assert_eq!(b.len(), NET_SLAB_MIN);
    }

    /// timely's receive loop on our buffers: a byte stream of messages of many
    /// sizes (some larger than a slab), read in pieces of arbitrary lengths,
    /// comes out message by message, byte for byte.
    #[test]
    fn a_slab_of_larger_buffers_keeps_every_message_whole() {
        let sizes = [24usize, 1 << 20, (1 << 20) + 48, 3 << 20, NET_SLAB_MIN + 1000, 5, 7 << 20, 2 * NET_SLAB_MIN];
        let messages: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(m, &n)| (0..n).map(|i| (i.wrapping_mul(31) ^ m.wrapping_mul(7)) as u8).collect())
            .collect();
        let stream: Vec<u8> =
            messages.iter().flat_map(|m| (m.len() as u64).to_le_bytes().into_iter().chain(m.iter().copied())).collect();
        let mut slab = BytesSlab::new(20, net_buffers());
        let (mut at, mut out, mut step) = (0usize, Vec::new(), 0usize);
        let mut held = Vec::new();
        while at < stream.len() {
            slab.ensure_capacity(1);
            step += 1;
            let want = (step * 700_001) % (3 << 20) + 1;
            let n = want.min(slab.empty().len()).min(stream.len() - at);
            slab.empty()[..n].copy_from_slice(&stream[at..at + n]);
            slab.make_valid(n);
            at += n;
            loop {
                let valid = slab.valid();
                if valid.len() < 8 {
                    break;
                }
                let len = u64::from_le_bytes(valid[..8].try_into().unwrap()) as usize;
                if valid.len() < 8 + len {
                    break;
                }
                let bytes = slab.extract(8 + len);
                out.push(bytes[8..].to_vec());
                held.push(bytes); // held like a block that still uses it
            }
        }
        assert_eq!(out.len(), messages.len());
        for (m, (got, want)) in out.iter().zip(&messages).enumerate() {
            assert!(got == want, "message {m} ({} bytes) differs", want.len());
        }
    }
}
