//! A file mapped into memory (`MAP_SHARED`), for reading the rows of a dense
//! input's blocks and writing those of a dense output without a system call
//! per row.
//!
//! A block of a dense tensor is one short run per row in the file (1 KiB for
//! 256 `f32` columns). Read or written one positioned call per run, the calls
//! cost more than the copying (about 3 µs a call on ext4); read as spans with
//! the bytes between a site's runs dropped, a site of two copies as many
//! bytes as it keeps. Through a map each run is one copy of its own bytes.
//!
//! The map is only made over bytes the file is known to hold (checked
//! against its length, or reserved with `fallocate`), so bad input is an
//! error before anything is mapped; a file truncated by someone else *while*
//! a job runs makes the job's process fault (`SIGBUS`), which fails the job
//! like any process that dies.

use std::fs::File;

/// A file's first `len` bytes mapped shared, unmapped when dropped.
pub(crate) struct FileMap {
    ptr: *mut u8,
    len: usize,
    writable: bool,
}

// SAFETY: the map is plain memory shared with the file. Readers only read;
// writers copy disjoint runs into it (every key of an output is written once,
// by one site); it is unmapped only on drop, when no user is left.
unsafe impl Send for FileMap {}
// SAFETY: as above; `write_at` takes `&self` and touches only the caller's run.
unsafe impl Sync for FileMap {}

impl FileMap {
    /// Map `len` bytes of `file`, which must hold at least that many (the
    /// caller checks), for reading or also for writing; `None` when the map
    /// cannot be made (the caller reads or writes run by run instead).
    pub(crate) fn new(file: &File, len: u64, writable: bool) -> Option<FileMap> {
        use std::os::fd::AsRawFd;
        let len = usize::try_from(len).ok().filter(|&l| l > 0)?;
        let prot = if writable { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_READ };
        // SAFETY: a fresh shared mapping of a file this `File` owns; the
        // kernel picks the address; the result is checked for MAP_FAILED.
        let ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, file.as_raw_fd(), 0) };
        (ptr != libc::MAP_FAILED).then(|| FileMap { ptr: ptr.cast(), len, writable })
    }

    /// The bytes `pos..pos + n` of the file.
    pub(crate) fn read(&self, pos: u64, n: usize) -> Result<&[u8], String> {
        self.check(pos, n)?;
        // SAFETY: the range lies inside the map (checked above), which lives
        // as long as `self`; the file's bytes are only written through other
        // runs than the ones read (inputs are not outputs of the same job).
        Ok(unsafe { std::slice::from_raw_parts(self.ptr.add(pos as usize), n) })
    }

    /// Copy `bytes` to offset `pos` of the file.
    pub(crate) fn write_at(&self, bytes: &[u8], pos: u64) -> Result<(), String> {
        assert!(self.writable, "a file mapped for reading is written");
        self.check(pos, bytes.len())?;
        // SAFETY: `pos + bytes.len() <= len` (checked above), so the run lies
        // inside the map; `bytes` is ordinary memory, not the map; no other
        // writer touches this run.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.add(pos as usize), bytes.len()) };
        Ok(())
    }

    fn check(&self, pos: u64, n: usize) -> Result<(), String> {
        match pos.checked_add(n as u64) {
            Some(end) if end <= self.len as u64 => Ok(()),
            _ => Err(format!("{n} bytes at {pos} fall outside the file's {} bytes", self.len)),
        }
    }
}

impl Drop for FileMap {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are the mapping `new` made, unmapped only here.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}
