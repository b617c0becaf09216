//! Writing outputs where they are: every site writes its own tuples of an
//! output straight into the output's temporary `.npy` file (see
//! [`super::job`]), at their place (positioned writes;
//! a dense file row run by row run), so that outputs are not gathered on one
//! process first. Every process opens the same file (a shared file system
//! across machines, as for inputs); all of them give it its final length and
//! process 0 writes the header, so keys without a tuple read as zeros.
//!
//! A dense output whose file could be preallocated is written through a
//! shared map of the file (module `mapped`): a 4096² `f32` output in 256²
//! blocks took 190–250 ms written run by run, 50–90 ms copied into the map.
//! Where the file system cannot preallocate (some network file systems) runs
//! are written one by one, so a full disk is an error and never a fault on a
//! mapped page.

use super::input::dense_runs;
use super::mapped::FileMap;
use super::wire::elem_bytes;
use crate::npy::{self, Layout};
use crate::threads::{Block, Elem};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use tra_optimizer::keyexpr::Key;

/// Where and how one output is written.
#[derive(Debug, Clone)]
pub struct OutputFile {
    /// The file (a temporary name while the job runs, see [`super::job`]).
    pub path: PathBuf,
    /// Relation or dense layout.
    pub layout: Layout,
    /// The output's key bounds (frontier).
    pub key_bounds: Vec<u32>,
    /// Its block shape.
    pub array_bounds: Vec<usize>,
}

/// An open output file.
pub struct OutWriter {
    path: PathBuf,
    file: File,
    header_len: u64,
    layout: Layout,
    key_bounds: Vec<u32>,
    array_bounds: Vec<usize>,
    esize: u64,
    /// The whole file mapped shared, for a dense output whose space is
    /// reserved.
    map: Option<FileMap>,
}

impl OutputFile {
    /// Open (creating it if needed) and give it its final length; with
    /// `header`, write the `.npy` header.
    pub fn open<T: Elem>(&self, header: bool) -> Result<OutWriter, String> {
        let shape = npy::layout_shape(self.layout, &self.key_bounds, &self.array_bounds).ok_or_else(|| {
            format!(
                "{}: cannot be written dense: the key has {} dims but blocks have rank {}",
                self.path.display(),
                self.key_bounds.len(),
                self.array_bounds.len()
            )
        })?;
        let head = npy::header_bytes(T::DTYPE, &shape);
        let esize = T::DTYPE.size() as u64;
        let total = head.len() as u64 + shape.iter().product::<usize>() as u64 * esize;
        // Never through a symbolic link planted at the temporary name.
        let file = super::supervise::creating_output(|| {
            OpenOptions::new()
                .create(true)
                .truncate(false)
                .read(true)
                .write(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&self.path)
        })
        .map_err(|e| format!("{}: cannot create: {e}", self.path.display()))?;
        file.set_len(total).map_err(|e| format!("{}: cannot size: {e}", self.path.display()))?;
        let reserved =
            reserve(&file, total).map_err(|e| format!("{}: cannot reserve {total} bytes: {e}", self.path.display()))?;
        let map = (reserved && self.layout == Layout::Dense).then(|| FileMap::new(&file, total, true)).flatten();
        if header {
            file.write_all_at(&head, 0).map_err(|e| format!("{}: cannot write: {e}", self.path.display()))?;
        }
        Ok(OutWriter {
            path: self.path.clone(),
            file,
            header_len: head.len() as u64,
            layout: self.layout,
            key_bounds: self.key_bounds.clone(),
            array_bounds: self.array_bounds.clone(),
            esize,
            map,
        })
    }
}

/// Allocate the file's blocks at once (`fallocate`), before the blocks are
/// written: without it the file system reserves and maps space page by page
/// as the writes arrive, on the thread that receives them (on ext4 about a
/// quarter of the cost of writing an output). A full disk is reported here,
/// before anything is written; a file system that cannot preallocate (some
/// network file systems) is written as before. Whether the space is reserved
/// is the answer.
fn reserve(file: &File, len: u64) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    let Ok(len) = libc::off_t::try_from(len) else { return Ok(false) };
    // SAFETY: fallocate on a file descriptor this `File` owns, with no pointers.
    let r = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) };
    if r == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EFBIG) | Some(libc::EDQUOT) => Err(e),
        _ => Ok(false),
    }
}

impl OutWriter {
    /// Write one tuple at its place.
    pub fn write<T: Elem>(&self, key: &Key, block: &Block<T>) -> Result<(), String> {
        if block.shape() != self.array_bounds.as_slice()
            || key.len() != self.key_bounds.len()
            || key.iter().zip(&self.key_bounds).any(|(c, f)| c >= f)
        {
            return Err(format!(
                "{}: tuple {key:?} with block {:?} does not fit {:?} × {:?}",
                self.path.display(),
                block.shape(),
                self.key_bounds,
                self.array_bounds
            ));
        }
        let data = block.as_slice();
        let io = |e: std::io::Error| format!("{}: cannot write: {e}", self.path.display());
        match self.layout {
            Layout::Relation => {
                let mut index = 0u64;
                for (&c, &b) in key.iter().zip(&self.key_bounds) {
                    index = index * u64::from(b) + u64::from(c);
                }
                let pos = self.header_len + index * data.len() as u64 * self.esize;
                self.file.write_all_at(elem_bytes(data), pos).map_err(io)
            }
            Layout::Dense => {
                let mut runs = Vec::new();
                dense_runs(&self.key_bounds, &self.array_bounds, key, &mut runs);
                for (off, len, at) in runs {
                    let (bytes, pos) = (elem_bytes(&data[at..at + len]), self.header_len + off * self.esize);
                    match &self.map {
                        Some(map) => map.write_at(bytes, pos).map_err(|e| format!("{}: {e}", self.path.display()))?,
                        None => self.file.write_all_at(bytes, pos).map_err(io)?,
                    }
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{reserve, Layout, OutputFile};
    use crate::npy;
    use crate::threads::Block;
    use std::os::unix::fs::MetadataExt;

    /// A dense output written by two sites through the shared map holds every
    /// block at its place, as the same output written run by run (no map)
    /// does: the element at (i, j) of the 6×10 tensor is `10 i + j`.
    #[test]
    fn a_dense_output_through_the_map_equals_one_written_run_by_run() {
        let dir = std::env::temp_dir().join(format!("tra-mapped-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (keys, shape) = ([3u32, 2], [2usize, 5]);
        let block = |k: [u32; 2]| {
            let data = (0..10).map(|n| (10 * (2 * k[0] as usize + n / 5) + 5 * k[1] as usize + n % 5) as f32).collect();
            Block::detached(&shape, data)
        };
        let mut read = Vec::new();
        for mapped in [true, false] {
            let out = OutputFile {
                path: dir.join(format!("out-{mapped}.npy")),
                layout: Layout::Dense,
                key_bounds: keys.to_vec(),
                array_bounds: shape.to_vec(),
            };
            let sites = [out.open::<f32>(true).unwrap(), out.open::<f32>(false).unwrap()];
            let sites = sites.map(|mut w| {
                if !mapped {
                    w.map = None;
                }
                w
            });
            assert_eq!(sites[0].map.is_some(), mapped, "the temporary directory preallocates");
            for (n, k) in [[0, 0], [0, 1], [1, 0], [1, 1], [2, 0], [2, 1]].into_iter().enumerate() {
                sites[n % 2].write(&k.to_vec(), &block(k)).unwrap();
            }
            drop(sites);
            let a = npy::read_array::<f32>(&out.path).unwrap();
            assert_eq!(a.shape(), [6, 10]);
            read.push(a.iter().copied().collect::<Vec<f32>>());
        }
        assert_eq!(read[0], (0..60).map(|v| v as f32).collect::<Vec<_>>());
        assert_eq!(read[0], read[1]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The file's blocks are allocated before anything is written (on file
    /// systems that preallocate; the test's temporary directory does), and its
    /// length and contents are unchanged.
    #[test]
    fn reserving_allocates_the_whole_file_up_front() {
        let dir = std::env::temp_dir().join(format!("tra-reserve-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("out.npy");
        let file = std::fs::File::create(&path).unwrap();
        let len = 3 << 20;
        file.set_len(len).unwrap();
        let sparse = file.metadata().unwrap().blocks() * 512;
        assert!(reserve(&file, len).unwrap());
        let meta = file.metadata().unwrap();
        assert_eq!(meta.len(), len);
        assert!(sparse < len && meta.blocks() * 512 >= len, "allocated {} of {len} bytes", meta.blocks() * 512);
        assert!(std::fs::read(&path).unwrap().iter().all(|&b| b == 0));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
