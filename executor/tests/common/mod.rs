//! Fixtures the executor's integration tests share.

#![allow(dead_code)] // each test binary uses its own part

use std::path::{Path, PathBuf};

/// A directory of its own under the system's temporary directory, removed
/// with everything in it when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    /// A fresh, empty directory; `tag` tells whose it is (unique within a
    /// test binary).
    pub fn new(tag: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("tra-executor-test-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// A path inside the directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
