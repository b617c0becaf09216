//! Where a worker's jobs may read and write: the directories it was started
//! with (`tra worker --data-dir DIR`, repeatable).
//!
//! Every input and output path of a job is checked before the job starts,
//! and the job runs on the resolved paths:
//!
//! - a path must be absolute and must not contain `..`;
//! - an input is resolved (every symbolic link followed) and must lie in a
//!   data directory;
//! - an output's directory is resolved the same way and must lie in a data
//!   directory; the output itself must not be a symbolic link or anything
//!   but a regular file if it exists (its temporary file is opened with
//!   `O_NOFOLLOW`).
//!
//! A path that fails is refused with the rule it breaks; nothing is read
//! or written.

use super::job::JobSpec;
use std::path::{Component, Path, PathBuf};

/// The resolved data directories of a worker.
#[derive(Debug, Clone)]
pub struct DataDirs {
    dirs: Vec<PathBuf>,
}

impl DataDirs {
    /// Resolve the directories (each must exist).
    pub fn new(dirs: &[PathBuf]) -> Result<DataDirs, String> {
        if dirs.is_empty() {
            return Err("no data directory".into());
        }
        let mut out = Vec::with_capacity(dirs.len());
        for d in dirs {
            let c = d.canonicalize().map_err(|e| format!("--data-dir {}: {e}", d.display()))?;
            if !c.is_dir() {
                return Err(format!("--data-dir {}: not a directory", d.display()));
            }
            out.push(c);
        }
        Ok(DataDirs { dirs: out })
    }

    /// The resolved directories.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    fn describe(&self) -> String {
        self.dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
    }

    fn inside(&self, p: &Path) -> bool {
        self.dirs.iter().any(|d| p.starts_with(d))
    }

    fn lexical(what: &str, path: &Path) -> Result<(), String> {
        if !path.is_absolute() {
            return Err(format!("{what} {}: the path must be absolute", path.display()));
        }
        if path.components().any(|c| c == Component::ParentDir) {
            return Err(format!("{what} {}: the path must not contain `..`", path.display()));
        }
        Ok(())
    }

    /// An input's resolved path, if it lies in a data directory.
    pub fn input(&self, name: &str, path: &Path) -> Result<PathBuf, String> {
        let what = format!("input `{name}`:");
        Self::lexical(&what, path)?;
        let real = path.canonicalize().map_err(|e| format!("{what} {}: {e}", path.display()))?;
        if !self.inside(&real) {
            return Err(format!(
                "{what} {} resolves to {}, outside this worker's data directories ({})",
                path.display(),
                real.display(),
                self.describe()
            ));
        }
        Ok(real)
    }

    /// An output's resolved path, if its directory lies in a data directory
    /// and it is not a link.
    pub fn output(&self, name: &str, path: &Path) -> Result<PathBuf, String> {
        let what = format!("output `{name}`:");
        Self::lexical(&what, path)?;
        let (Some(parent), Some(file)) = (path.parent(), path.file_name()) else {
            return Err(format!("{what} {}: not a file path", path.display()));
        };
        let dir = parent.canonicalize().map_err(|e| format!("{what} {}: {e}", parent.display()))?;
        if !self.inside(&dir) {
            return Err(format!(
                "{what} {} is in {}, outside this worker's data directories ({})",
                path.display(),
                dir.display(),
                self.describe()
            ));
        }
        let real = dir.join(file);
        if let Ok(meta) = std::fs::symlink_metadata(&real) {
            if meta.file_type().is_symlink() {
                return Err(format!(
                    "{what} {} is a symbolic link; a job does not write through links",
                    path.display()
                ));
            }
            if !meta.is_file() {
                return Err(format!("{what} {} exists and is not a regular file", path.display()));
            }
        }
        Ok(real)
    }

    /// The job with every path checked and resolved.
    pub fn confine(&self, spec: &JobSpec) -> Result<JobSpec, String> {
        let mut out = spec.clone();
        for (name, p) in out.inputs.iter_mut() {
            *p = self.input(name, p)?;
        }
        for (name, p) in out.outputs.iter_mut() {
            *p = self.output(name, p)?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_outside_or_through_links_are_refused() {
        let root = std::env::temp_dir().join(format!("tra-confine-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let (data, other) = (root.join("data"), root.join("other"));
        std::fs::create_dir_all(data.join("sub")).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(data.join("x.npy"), b"x").unwrap();
        std::fs::write(other.join("secret.npy"), b"s").unwrap();
        std::os::unix::fs::symlink(other.join("secret.npy"), data.join("link.npy")).unwrap();
        std::os::unix::fs::symlink(&other, data.join("out")).unwrap();
        let d = DataDirs::new(std::slice::from_ref(&data)).unwrap();
        let real = data.canonicalize().unwrap();
        assert_eq!(d.input("X", &data.join("x.npy")).unwrap(), real.join("x.npy"));
        assert_eq!(d.output("Z", &data.join("sub/z.npy")).unwrap(), real.join("sub/z.npy"));
        let refused = [
            d.input("X", &other.join("secret.npy")).unwrap_err(),
            d.input("X", &data.join("link.npy")).unwrap_err(),
            d.input("X", &data.join("sub/../x.npy")).unwrap_err(),
            d.input("X", Path::new("x.npy")).unwrap_err(),
            d.output("Z", &data.join("out/z.npy")).unwrap_err(),
            d.output("Z", &data.join("link.npy")).unwrap_err(),
            d.output("Z", &data.join("sub")).unwrap_err(),
            d.output("Z", &other.join("z.npy")).unwrap_err(),
        ];
        for (e, word) in refused.iter().zip([
            "outside",
            "outside",
            "`..`",
            "absolute",
            "outside",
            "symbolic link",
            "not a regular file",
            "outside",
        ]) {
            assert!(e.contains(word), "{e} (expected {word:?})");
        }
        let _ = std::fs::remove_dir_all(&root);
    }
}
