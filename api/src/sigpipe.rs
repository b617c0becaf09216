//! Ending quietly when standard output is a pipe that closed early.
//!
//! Rust ignores `SIGPIPE`, so a write to a closed pipe is an error, and
//! `println!` panics on it: `tra optimize big.json | head` printed a panic
//! message once `head` had its lines. The commands that only write to
//! standard output (no sockets of their own, where the error must be
//! handled instead) restore the default disposition, so the process ends
//! at once and silently, with status 141 (128 + SIGPIPE) as `cat` would.

/// Restore the default `SIGPIPE` disposition for this process (Unix only).
pub fn restore_default() {
    #[cfg(unix)]
    // SAFETY: `signal` with SIG_DFL has no preconditions; it is called at
    // start-up, before any other thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
