//! The cluster secret, and how a connection proves it knows the secret.
//!
//! Every process of a cluster (the `tra worker`s, whoever submits jobs, the
//! job processes) shares a 256-bit secret. It never crosses the network: a
//! connection is accepted only after a challenge-response —
//!
//! 1. the accepting side sends a fresh random challenge (32 bytes);
//! 2. the connecting side answers its claim (who it is, fixed length), its
//!    own random challenge, and HMAC-SHA256(secret, "client" ‖ context ‖
//!    claim ‖ both challenges);
//! 3. the accepting side checks that (in constant time) and answers
//!    HMAC(secret, "server" ‖ …), which the connecting side checks: both
//!    ends know the other holds the secret.
//!
//! Both sides then share a session key (HMAC of both challenges), and every
//! line of the job protocol carries the HMAC of its direction, its sequence
//! number and its text under that key ([`Session`]): a line cannot be
//! forged, replayed or reordered on the way. The job protocol is
//! authenticated, not encrypted; job processes connect to each other with a
//! key of their job ([`Secret::job_key`]), so a connection from another job
//! or from outside the cluster is refused. The data connections themselves
//! carry tensors as they are (no per-byte MAC: that would cost the
//! throughput), so keep the cluster's network private from untrusted
//! machines, as for any HPC interconnect.

use hmac::{Hmac, Mac};
use rand::TryRngCore;
use sha2::Sha256;
use std::io::{BufRead, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

type HmacSha256 = Hmac<Sha256>;

/// The environment variable that may carry the secret (64 hex digits).
pub const ENV_SECRET: &str = "TRA_CLUSTER_SECRET";

/// Bytes of the secret, of challenges and of MACs.
pub const LEN: usize = 32;

const MAGIC: &[u8; 8] = b"TRA-AUTH";
const VERSION: u8 = 1;

/// Why authentication (or reading the secret) failed.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The secret file cannot be used.
    #[error("secret file {path}: {message}")]
    SecretFile {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A secret given as text is not 64 hex digits.
    #[error("{origin}: the cluster secret must be 64 hex digits ({message})")]
    BadSecret {
        /// Where it came from.
        origin: String,
        /// What is wrong.
        message: String,
    },
    /// The other side does not speak this protocol.
    #[error("not a tra cluster peer: {0}")]
    Protocol(String),
    /// The other side does not know the secret.
    #[error("authentication failed: {0}")]
    Refused(String),
    /// The connection broke.
    #[error("connection error during authentication: {0}")]
    Io(#[from] std::io::Error),
}

/// A 256-bit key: the cluster secret, or a key derived from it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret([u8; LEN]);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

fn random_bytes() -> [u8; LEN] {
    let mut b = [0u8; LEN];
    rand::rngs::OsRng.try_fill_bytes(&mut b).expect("the operating system's random source");
    b
}

impl Secret {
    /// A fresh secret from the operating system's random source.
    pub fn generate() -> Secret {
        Secret(random_bytes())
    }

    /// As 64 lowercase hex digits.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// From 64 hex digits (surrounding white space ignored); `origin` names
    /// where the text came from, for the error.
    pub fn from_hex(text: &str, origin: &str) -> Result<Secret, AuthError> {
        let t = text.trim();
        let bad = |m: String| AuthError::BadSecret { origin: origin.to_string(), message: m };
        if t.len() != 2 * LEN {
            return Err(bad(format!("it has {} characters", t.len())));
        }
        let mut out = [0u8; LEN];
        for (i, o) in out.iter_mut().enumerate() {
            *o = u8::from_str_radix(&t[2 * i..2 * i + 2], 16)
                .map_err(|_| bad(format!("{:?} at offset {} is not hex", &t[2 * i..2 * i + 2], 2 * i)))?;
        }
        Ok(Secret(out))
    }

    /// Read a secret file. Like ssh with its keys, a file that other users
    /// may read (or write) is refused.
    pub fn read_file(path: &Path) -> Result<Secret, AuthError> {
        let err = |m: String| AuthError::SecretFile { path: path.display().to_string(), message: m };
        let meta = std::fs::metadata(path).map_err(|e| err(format!("cannot read: {e}")))?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(err(format!(
                "other users may access it (mode {mode:03o}); run `chmod 600 {}`",
                path.display()
            )));
        }
        let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read: {e}")))?;
        Secret::from_hex(&text, &format!("secret file {}", path.display()))
    }

    /// Create a new secret file (mode 0600; an existing file is not replaced).
    pub fn write_new_file(path: &Path) -> Result<Secret, AuthError> {
        let err = |m: String| AuthError::SecretFile { path: path.display().to_string(), message: m };
        let secret = Secret::generate();
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| err(format!("cannot create: {e}")))?;
        f.write_all(format!("{}\n", secret.to_hex()).as_bytes()).map_err(|e| err(format!("cannot write: {e}")))?;
        f.sync_all().map_err(|e| err(format!("cannot write: {e}")))?;
        Ok(secret)
    }

    /// HMAC-SHA256 of the concatenated parts under this key.
    pub fn mac(&self, parts: &[&[u8]]) -> [u8; LEN] {
        let mut m = HmacSha256::new_from_slice(&self.0).expect("HMAC takes any key length");
        for p in parts {
            m.update(&(p.len() as u64).to_le_bytes());
            m.update(p);
        }
        m.finalize().into_bytes().into()
    }

    /// Whether `tag` is the MAC of `parts` (compared in constant time).
    pub fn verify(&self, parts: &[&[u8]], tag: &[u8]) -> bool {
        let mut m = HmacSha256::new_from_slice(&self.0).expect("HMAC takes any key length");
        for p in parts {
            m.update(&(p.len() as u64).to_le_bytes());
            m.update(p);
        }
        m.verify_slice(tag).is_ok()
    }

    /// The key the processes of job `token` authenticate each other with.
    pub fn job_key(&self, token: u64) -> Secret {
        Secret(self.mac(&[b"tra job key", &token.to_le_bytes()]))
    }
}

/// Accept a connection: challenge it, check its answer to the claim of
/// `claim_len` bytes, prove the secret back. Answers the claim and the
/// session. On failure nothing but the challenge has been sent.
pub fn accept<S: Read + Write>(
    stream: &mut S,
    secret: &Secret,
    context: &[u8],
    claim_len: usize,
) -> Result<(Vec<u8>, Session), AuthError> {
    let challenge = random_bytes();
    let mut hello = Vec::with_capacity(MAGIC.len() + 1 + LEN);
    hello.extend_from_slice(MAGIC);
    hello.push(VERSION);
    hello.extend_from_slice(&challenge);
    stream.write_all(&hello)?;
    let mut answer = vec![0u8; claim_len + 2 * LEN];
    stream.read_exact(&mut answer).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => AuthError::Protocol("the connection closed before answering".into()),
        _ => AuthError::Io(e),
    })?;
    let (claim, rest) = answer.split_at(claim_len);
    let (theirs, tag) = rest.split_at(LEN);
    if !secret.verify(&[b"client", context, claim, &challenge, theirs], tag) {
        return Err(AuthError::Refused("the peer does not know the cluster secret".into()));
    }
    let proof = secret.mac(&[b"server", context, claim, &challenge, theirs]);
    stream.write_all(&proof)?;
    stream.flush()?;
    let key = Secret(secret.mac(&[b"session", context, claim, &challenge, theirs]));
    Ok((claim.to_vec(), Session::new(key, false)))
}

/// Connect: answer the challenge with `claim`, check the other side's proof.
pub fn connect<S: Read + Write>(
    stream: &mut S,
    secret: &Secret,
    context: &[u8],
    claim: &[u8],
) -> Result<Session, AuthError> {
    let mut hello = [0u8; 8 + 1 + LEN];
    stream.read_exact(&mut hello).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => AuthError::Protocol("the connection closed before the challenge".into()),
        _ => AuthError::Io(e),
    })?;
    if &hello[..8] != MAGIC {
        return Err(AuthError::Protocol("it sent no tra challenge".into()));
    }
    if hello[8] != VERSION {
        return Err(AuthError::Protocol(format!("protocol version {} (this one speaks {VERSION})", hello[8])));
    }
    let challenge = &hello[9..];
    let mine = random_bytes();
    let tag = secret.mac(&[b"client", context, claim, challenge, &mine]);
    let mut answer = Vec::with_capacity(claim.len() + 2 * LEN);
    answer.extend_from_slice(claim);
    answer.extend_from_slice(&mine);
    answer.extend_from_slice(&tag);
    stream.write_all(&answer)?;
    stream.flush()?;
    let mut proof = [0u8; LEN];
    stream.read_exact(&mut proof).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => {
            AuthError::Refused("the other side closed the connection: it does not accept this cluster secret".into())
        }
        _ => AuthError::Io(e),
    })?;
    if !secret.verify(&[b"server", context, claim, challenge, &mine], &proof) {
        return Err(AuthError::Refused("the other side does not know the cluster secret".into()));
    }
    let key = Secret(secret.mac(&[b"session", context, claim, challenge, &mine]));
    Ok(Session::new(key, true))
}

/// An authenticated connection's message integrity: every line carries the
/// HMAC of (direction, sequence number, text).
#[derive(Debug)]
pub struct Session {
    key: Secret,
    client: bool,
    sent: u64,
    received: u64,
}

impl Session {
    fn new(key: Secret, client: bool) -> Session {
        Session { key, client, sent: 0, received: 0 }
    }

    fn direction(&self, sending: bool) -> &'static [u8] {
        if self.client == sending {
            b"to server"
        } else {
            b"to client"
        }
    }

    /// Encode one line (`text` holds no newline): `MAC-hex SPACE text NEWLINE`.
    pub fn seal(&mut self, text: &str) -> Vec<u8> {
        debug_assert!(!text.contains('\n'));
        let tag = self.key.mac(&[self.direction(true), &self.sent.to_le_bytes(), text.as_bytes()]);
        self.sent += 1;
        let mut line = Vec::with_capacity(2 * LEN + 2 + text.len());
        for b in tag {
            line.extend_from_slice(format!("{b:02x}").as_bytes());
        }
        line.push(b' ');
        line.extend_from_slice(text.as_bytes());
        line.push(b'\n');
        line
    }

    /// Write one sealed line.
    pub fn send<W: Write>(&mut self, w: &mut W, text: &str) -> std::io::Result<()> {
        let line = self.seal(text);
        w.write_all(&line)?;
        w.flush()
    }

    /// Check one received line (as read, newline included or not); answers its text.
    pub fn open(&mut self, line: &str) -> Result<String, AuthError> {
        let line = line.trim_end_matches(['\n', '\r']);
        let (hex, text) =
            line.split_once(' ').ok_or_else(|| AuthError::Protocol("a message without its authentication".into()))?;
        let tag = Secret::from_hex(hex, "message")
            .map_err(|_| AuthError::Protocol("a message with a malformed authentication".into()))?;
        if !self.key.verify(&[self.direction(false), &self.received.to_le_bytes(), text.as_bytes()], &tag.0) {
            return Err(AuthError::Refused(format!(
                "message {} does not carry the session's authentication (forged, replayed or reordered)",
                self.received
            )));
        }
        self.received += 1;
        Ok(text.to_string())
    }

    /// Read and check one line; `Ok(None)` at end of stream.
    pub fn receive<R: BufRead>(&mut self, r: &mut R) -> Result<Option<String>, AuthError> {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            return Ok(None);
        }
        self.open(&line).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    fn pair(server_secret: Secret, client_secret: Secret) -> (Result<Session, String>, Result<Session, String>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let h = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            accept(&mut s, &server_secret, b"test", 3).map(|(c, s)| {
                assert_eq!(c, b"abc");
                s
            })
        });
        let mut c = TcpStream::connect(addr).unwrap();
        let client = connect(&mut c, &client_secret, b"test", b"abc").map_err(|e| e.to_string());
        drop(c);
        (h.join().unwrap().map_err(|e| e.to_string()), client)
    }

    #[test]
    fn the_same_secret_authenticates_both_ways_and_seals_lines() {
        let s = Secret::generate();
        let (server, client) = pair(s.clone(), s);
        let (mut server, mut client) = (server.unwrap(), client.unwrap());
        let a = client.seal("{\"job\":1}");
        assert_eq!(server.open(std::str::from_utf8(&a).unwrap()).unwrap(), "{\"job\":1}");
        // Replayed, tampered with, or sent back the other way: refused.
        assert!(server.open(std::str::from_utf8(&a).unwrap()).is_err());
        let mut b = client.seal("{\"job\":2}");
        let n = b.len();
        b[n - 3] = b'3';
        assert!(server.open(std::str::from_utf8(&b).unwrap()).is_err());
        let back = server.seal("x");
        assert_eq!(client.open(std::str::from_utf8(&back).unwrap()).unwrap(), "x");
    }

    #[test]
    fn a_wrong_secret_is_refused_on_both_sides() {
        let (server, client) = pair(Secret::generate(), Secret::generate());
        assert!(server.unwrap_err().contains("does not know the cluster secret"));
        assert!(client.is_err());
    }

    #[test]
    fn hex_and_files() {
        let s = Secret::generate();
        assert_eq!(Secret::from_hex(&s.to_hex(), "t").unwrap(), s);
        assert!(Secret::from_hex("abc", "t").is_err());
        assert!(Secret::from_hex(&"zz".repeat(32), "t").is_err());
        let dir = std::env::temp_dir().join(format!("tra-auth-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("secret");
        let s = Secret::write_new_file(&f).unwrap();
        assert_eq!(std::fs::metadata(&f).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(Secret::read_file(&f).unwrap(), s);
        assert!(Secret::write_new_file(&f).is_err(), "an existing secret is not replaced");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(Secret::read_file(&f).unwrap_err().to_string().contains("chmod 600"));
        assert_ne!(s.job_key(1), s.job_key(2));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
