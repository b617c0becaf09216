//! Inputs of a cluster run: which tuples of an input each site holds, and
//! reading exactly those from a `.npy` file.
//!
//! Placement is the thread runtime's (and the reference's `place`): `hash(D)`
//! puts key `k` on `site_of(k, D, sites)`, `replicated` on every site (read
//! once per process and shared by its workers), `any` follows the layout
//! (round-robin by position in key order, seeded, or one site). Each worker
//! reads from the file only the blocks of its own site: a relation-layout
//! file block by block with positioned reads, a dense file row run by row run
//! from a map of the file (module `mapped`), or with positioned reads of
//! nearby runs together where the file cannot be mapped. The file must hold
//! every key below the input's key bounds (both `.npy` layouts do), and the
//! bytes its header announces (checked when it is opened).

use super::mapped::FileMap;
use super::wire::elem_bytes_mut;
use crate::npy::{self, Layout, NpyHeader};
use crate::semantics::{all_keys, check_input_tuples, AnyLayout, InterpError};
use crate::threads::{Dtype, Elem, Pool, TRelation, Tuple};
use std::fs::File;
use std::io::{BufReader, Seek};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tra_optimizer::keyexpr::Key;
use tra_optimizer::program::InputDecl;

/// Where an input's data comes from.
#[derive(Clone)]
pub enum InputData<T: Elem> {
    /// A `.npy` file in either layout (each process reads its own part).
    File(PathBuf),
    /// A relation in memory (tests, the in-process runner).
    Memory(Arc<TRelation<T>>),
}

pub use crate::semantics::input_sites as sites_of_tuples;

pub use crate::semantics::input_bounds as bounds;

/// Check an in-memory relation against its declaration (the thread runtime's check).
pub fn check_memory<T: Elem>(name: &str, decl: &InputDecl, rel: &TRelation<T>) -> Result<(), InterpError> {
    check_input_tuples(name, decl, rel.tuples.iter().map(|(k, b)| (k, b.shape())))
}

/// Runs of wanted elements at most this far apart in a file are read by one
/// read (the bytes between them are read and dropped): a system call costs
/// about what copying this much from the page cache does.
const READ_GAP_BYTES: u64 = 64 << 10;
/// The most one read takes in.
const READ_SPAN_BYTES: u64 = 8 << 20;

/// An open `.npy` file holding a relation, for positioned block reads.
pub struct NpyRelationFile {
    path: PathBuf,
    file: File,
    header: NpyHeader,
    data_offset: u64,
    layout: Layout,
    key_bounds: Vec<u32>,
    array_bounds: Vec<usize>,
    /// The whole file mapped, for a dense file in C order.
    map: Option<FileMap>,
}

impl NpyRelationFile {
    /// Open a file and recognise its layout from its shape.
    pub fn open(path: &Path, key_bounds: &[u32], array_bounds: &[usize]) -> Result<NpyRelationFile, String> {
        let f = File::open(path).map_err(|e| format!("{}: cannot open: {e}", path.display()))?;
        let mut r = BufReader::new(f);
        let header = npy::read_header(&mut r, path).map_err(|e| e.to_string())?;
        let data_offset = r.stream_position().map_err(|e| format!("{}: {e}", path.display()))?;
        let file = r.into_inner();
        let size = file.metadata().map_err(|e| format!("{}: cannot open: {e}", path.display()))?.len();
        let need = npy::check_data_length(path, &header, data_offset, size).map_err(|e| e.to_string())?;
        if header.dtype.float.is_none() {
            return Err(format!(
                "{}: holds {} values (dtype {:?}); tra reads float32 or float64",
                path.display(),
                header.dtype.numpy_name(),
                header.dtype.descr
            ));
        }
        let rel_shape = npy::layout_shape(Layout::Relation, key_bounds, array_bounds).expect("always");
        let dense_shape = npy::layout_shape(Layout::Dense, key_bounds, array_bounds);
        let layout = if header.shape == rel_shape {
            Layout::Relation
        } else if dense_shape.as_ref() == Some(&header.shape) {
            Layout::Dense
        } else {
            let expected = match &dense_shape {
                Some(d) => format!("{rel_shape:?} (key bounds ++ block shape) or {d:?} (the dense tensor)"),
                None => format!("{rel_shape:?} (key bounds ++ block shape)"),
            };
            return Err(format!("{}: has shape {:?}; expected {expected}", path.display(), header.shape));
        };
        let map = (layout == Layout::Dense && !header.fortran_order)
            .then(|| FileMap::new(&file, data_offset + need, false))
            .flatten();
        Ok(NpyRelationFile {
            path: path.to_path_buf(),
            file,
            header,
            data_offset,
            layout,
            key_bounds: key_bounds.to_vec(),
            array_bounds: array_bounds.to_vec(),
            map,
        })
    }

    /// Bytes of one block in the file.
    pub fn block_bytes(&self) -> usize {
        self.array_bounds.iter().product::<usize>() * self.dtype().size()
    }

    /// Whether reading any block reads the whole file (Fortran order): read
    /// all wanted blocks at once then.
    pub fn reads_whole(&self) -> bool {
        self.header.fortran_order
    }

    /// The layout found.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The file's element type.
    pub fn dtype(&self) -> Dtype {
        self.header.dtype.float.expect("checked at open")
    }

    /// Read the blocks of the keys at these positions (in key order) of the
    /// file; a Fortran-order file is read whole.
    pub fn read_keys<T: Elem>(&self, wanted: &[(usize, Key)], pool: &Pool<T>) -> Result<Vec<Tuple<T>>, String> {
        if wanted.is_empty() {
            return Ok(Vec::new());
        }
        if self.header.fortran_order {
            let (rel, _, _) = npy::read_relation::<T>(&self.path, &self.key_bounds, &self.array_bounds, pool)
                .map_err(|e| e.to_string())?;
            return Ok(wanted.iter().map(|(i, k)| (k.clone(), rel.tuples[*i].1.clone())).collect());
        }
        let esize = self.header.dtype.float.expect("float").size() as u64;
        let native = self.header.dtype.float == Some(T::DTYPE) && !self.header.dtype.big_endian;
        let block_len: usize = self.array_bounds.iter().product();
        let mut blocks: Vec<_> = wanted.iter().map(|_| pool.take(&self.array_bounds)).collect();
        if let (Some(map), Layout::Dense) = (&self.map, self.layout) {
            let mut runs = Vec::new();
            for ((_, key), block) in wanted.iter().zip(&mut blocks) {
                runs.clear();
                dense_runs(&self.key_bounds, &self.array_bounds, key, &mut runs);
                let block = block.as_mut_slice();
                for &(off, len, at) in &runs {
                    let src = map
                        .read(self.data_offset + off * esize, len * esize as usize)
                        .map_err(|e| format!("{}: cannot read block {key:?}: {e}", self.path.display()))?;
                    let dst = &mut block[at..at + len];
                    if native {
                        elem_bytes_mut(dst).copy_from_slice(src);
                    } else {
                        convert(src, self.dtype(), self.header.dtype.big_endian, dst);
                    }
                }
            }
            return Ok(wanted.iter().zip(blocks).map(|((_, key), b)| (key.clone(), Arc::new(b))).collect());
        }
        // Every contiguous run of every wanted block: (file offset in
        // elements, length in elements, block, offset in the block).
        let mut runs: Vec<(u64, usize, usize, usize)> = Vec::new();
        let mut one = Vec::new();
        for (w, (index, key)) in wanted.iter().enumerate() {
            match self.layout {
                Layout::Relation => runs.push((*index as u64 * block_len as u64, block_len, w, 0)),
                Layout::Dense => {
                    one.clear();
                    dense_runs(&self.key_bounds, &self.array_bounds, key, &mut one);
                    runs.extend(one.iter().map(|&(off, len, at)| (off, len, w, at)));
                }
            }
        }
        runs.sort_unstable_by_key(|r| r.0);
        // Runs close together in the file are read by one positioned read
        // (a block of a dense file is one run per row: read row by row, the
        // system calls cost more than the copying).
        let mut scratch: Vec<u8> = Vec::new();
        let mut junk: Vec<u8> = if native { vec![0; READ_GAP_BYTES as usize] } else { Vec::new() };
        let mut next = 0;
        while next < runs.len() {
            let first = next;
            let span_start = runs[first].0;
            let mut span_end = span_start + runs[first].1 as u64;
            next += 1;
            while next < runs.len() {
                let (off, len, ..) = runs[next];
                let gap = off.saturating_sub(span_end) * esize;
                let span = (off + len as u64 - span_start) * esize;
                if gap > READ_GAP_BYTES || span > READ_SPAN_BYTES {
                    break;
                }
                span_end = span_end.max(off + len as u64);
                next += 1;
            }
            let pos = self.data_offset + span_start * esize;
            let read_error = |e: std::io::Error| {
                let (_, key) = &wanted[runs[first].2];
                format!("{}: cannot read block {key:?}: {e}", self.path.display())
            };
            if native {
                // Straight into the blocks, the bytes between runs into `junk`.
                let mut iov = Vec::with_capacity(2 * (next - first));
                let mut at_file = span_start;
                for &(off, len, w, at) in &runs[first..next] {
                    if off > at_file {
                        let gap = ((off - at_file) * esize) as usize;
                        iov.push(libc::iovec { iov_base: junk.as_mut_ptr().cast(), iov_len: gap });
                    }
                    let dst = elem_bytes_mut(&mut blocks[w].as_mut_slice()[at..at + len]);
                    iov.push(libc::iovec { iov_base: dst.as_mut_ptr().cast(), iov_len: dst.len() });
                    at_file = off + len as u64;
                }
                // SAFETY: every piece points into a distinct range of a block
                // (runs of different blocks, or of one block, do not overlap)
                // or into `junk` (gaps are at most READ_GAP_BYTES long), all
                // of which outlive the call and are not otherwise touched
                // until it returns.
                unsafe { read_scattered(&self.file, pos, &mut iov) }.map_err(read_error)?;
            } else {
                let bytes = ((span_end - span_start) * esize) as usize;
                scratch.resize(bytes, 0);
                self.file.read_exact_at(&mut scratch, pos).map_err(read_error)?;
                for &(off, len, w, at) in &runs[first..next] {
                    let from = ((off - span_start) * esize) as usize;
                    let src = &scratch[from..from + len * esize as usize];
                    convert(
                        src,
                        self.dtype(),
                        self.header.dtype.big_endian,
                        &mut blocks[w].as_mut_slice()[at..at + len],
                    );
                }
            }
        }
        let out = wanted.iter().zip(blocks).map(|((_, key), b)| (key.clone(), Arc::new(b))).collect();
        Ok(out)
    }
}

/// Fill the pieces `iov` describes, in order, from `file` at `pos` on
/// (`preadv`, at most `IOV_MAX` pieces a call, short reads resumed).
///
/// # Safety
/// Every piece must be valid for writes of its length, and no two may overlap.
unsafe fn read_scattered(file: &File, mut pos: u64, iov: &mut [libc::iovec]) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    const IOV_MAX: usize = 1024;
    let mut start = 0;
    while start < iov.len() {
        if iov[start].iov_len == 0 {
            start += 1;
            continue;
        }
        let pieces = &iov[start..(start + IOV_MAX).min(iov.len())];
        let offset = libc::off_t::try_from(pos).map_err(|_| std::io::Error::other("offset out of range"))?;
        // SAFETY: the caller vouches for the pieces.
        let n = unsafe { libc::preadv(file.as_raw_fd(), pieces.as_ptr(), pieces.len() as libc::c_int, offset) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the file ends early"));
        }
        pos += n as u64;
        let mut n = n as usize;
        while n > 0 {
            let piece = &mut iov[start];
            if n >= piece.iov_len {
                n -= piece.iov_len;
                start += 1;
            } else {
                // SAFETY: n < iov_len: still inside the piece.
                piece.iov_base = unsafe { piece.iov_base.cast::<u8>().add(n) }.cast();
                piece.iov_len -= n;
                n = 0;
            }
        }
    }
    Ok(())
}

/// The contiguous runs of a block of the dense tensor: one per combination
/// of the outer indices, each `array_bounds[last]` elements long.
pub(crate) fn dense_runs(key_bounds: &[u32], array_bounds: &[usize], key: &[u32], runs: &mut Vec<(u64, usize, usize)>) {
    let r = array_bounds.len();
    if r == 0 {
        runs.push((0, 1, 0));
        return;
    }
    let full: Vec<u64> = key_bounds.iter().zip(array_bounds).map(|(&k, &b)| k as u64 * b as u64).collect();
    let mut strides = vec![1u64; r];
    for d in (0..r - 1).rev() {
        strides[d] = strides[d + 1] * full[d + 1];
    }
    let inner = array_bounds[r - 1];
    let outer: Vec<usize> = array_bounds[..r - 1].to_vec();
    let count: usize = outer.iter().product();
    let mut idx = vec![0usize; r - 1];
    for n in 0..count {
        let mut off = key[r - 1] as u64 * inner as u64;
        for d in 0..r - 1 {
            off += (key[d] as u64 * array_bounds[d] as u64 + idx[d] as u64) * strides[d];
        }
        runs.push((off, inner, n * inner));
        // odometer over the outer indices
        for d in (0..r - 1).rev() {
            idx[d] += 1;
            if idx[d] < outer[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

fn convert<T: Elem>(bytes: &[u8], from: Dtype, big_endian: bool, out: &mut [T]) {
    match from {
        Dtype::F32 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                let a: [u8; 4] = c.try_into().expect("4 bytes");
                let x = if big_endian { f32::from_be_bytes(a) } else { f32::from_le_bytes(a) };
                *o = T::from_f64(x as f64);
            }
        }
        Dtype::F64 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(8)) {
                let a: [u8; 8] = c.try_into().expect("8 bytes");
                let x = if big_endian { f64::from_be_bytes(a) } else { f64::from_le_bytes(a) };
                *o = T::from_f64(x);
            }
        }
    }
}

/// The keys (with their positions in key order) a site holds of an input
/// stored in a file, and the input's bounds.
#[allow(clippy::type_complexity)]
pub fn site_keys(
    name: &str,
    decl: &InputDecl,
    sites: usize,
    layout: AnyLayout,
    site: usize,
) -> Result<(Vec<(usize, Key)>, Vec<u32>, Vec<usize>), InterpError> {
    let (kb, ab) = bounds(name, decl)?;
    let keys = all_keys(&kb);
    let placed = sites_of_tuples(name, &keys, &decl.placement, sites, layout)?;
    let wanted = keys.into_iter().enumerate().zip(placed).filter(|(_, s)| *s == Some(site)).map(|(ik, _)| ik).collect();
    Ok((wanted, kb, ab))
}

/// One site's tuples of an input (or, with `site = None`, the replicated
/// tuples), from a file or a relation in memory.
pub fn load<T: Elem>(
    name: &str,
    decl: &InputDecl,
    data: &InputData<T>,
    sites: usize,
    layout: AnyLayout,
    site: Option<usize>,
    pool: &Pool<T>,
) -> Result<Vec<Tuple<T>>, InterpError> {
    let (kb, ab) = bounds(name, decl)?;
    let err = |message: String| InterpError::BadInput { input: name.to_string(), message };
    match data {
        InputData::Memory(rel) => {
            let keys: Vec<Key> = rel.tuples.iter().map(|t| t.0.clone()).collect();
            let placed = sites_of_tuples(name, &keys, &decl.placement, sites, layout)?;
            Ok(rel.tuples.iter().zip(placed).filter(|(_, s)| *s == site).map(|(t, _)| t.clone()).collect())
        }
        InputData::File(path) => {
            let keys = all_keys(&kb);
            let placed = sites_of_tuples(name, &keys, &decl.placement, sites, layout)?;
            let wanted: Vec<(usize, Key)> =
                keys.into_iter().enumerate().zip(placed).filter(|(_, s)| *s == site).map(|(ik, _)| ik).collect();
            let f = NpyRelationFile::open(path, &kb, &ab).map_err(err)?;
            f.read_keys(&wanted, pool).map_err(err)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl NpyRelationFile {
        /// The file read with positioned reads, as where it cannot be mapped.
        fn unmapped(mut self) -> NpyRelationFile {
            self.map = None;
            self
        }
    }

    /// A dense file's blocks read from its map equal those read with
    /// positioned reads, for every other block (a site of two), in both
    /// element types (f32 blocks from an f64 file are converted).
    #[test]
    fn mapped_reads_equal_positioned_reads() {
        let dir = std::env::temp_dir().join(format!("tra-cluster-mapped-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (kb, ab) = ([4u32, 3], [3usize, 5]);
        let dense: Vec<f64> = (0..12 * 15).map(|i| i as f64 * 0.5).collect();
        let d = dir.join("dense.npy");
        npy::write_array(&d, &[12, 15], &dense).unwrap();
        let wanted: Vec<(usize, Key)> = all_keys(&kb).into_iter().enumerate().filter(|(i, _)| i % 2 == 0).collect();
        let mapped = NpyRelationFile::open(&d, &kb, &ab).unwrap();
        assert!(mapped.map.is_some());
        let unmapped = NpyRelationFile::open(&d, &kb, &ab).unwrap().unmapped();
        let (a, b) = (
            mapped.read_keys(&wanted, &Pool::<f64>::new()).unwrap(),
            unmapped.read_keys(&wanted, &Pool::<f64>::new()).unwrap(),
        );
        assert_eq!(a.len(), wanted.len());
        for (((_, k), (ka, ba)), (kb_, bb)) in wanted.iter().zip(&a).zip(&b) {
            assert_eq!((k, k), (ka, kb_));
            assert_eq!(ba.as_slice(), bb.as_slice(), "block {k:?}");
            // Row 0 of block (i, j) starts at element (3 i, 5 j) of the tensor.
            assert_eq!(ba.as_slice()[0], dense[3 * k[0] as usize * 15 + 5 * k[1] as usize]);
        }
        let (a, b) = (
            mapped.read_keys(&wanted, &Pool::<f32>::new()).unwrap(),
            unmapped.read_keys(&wanted, &Pool::<f32>::new()).unwrap(),
        );
        for ((_, ba), (_, bb)) in a.iter().zip(&b) {
            assert_eq!(ba.as_slice(), bb.as_slice());
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    /// A file shorter than its header says is refused when opened, naming it
    /// and both sizes (nothing of it is mapped).
    #[test]
    fn a_truncated_file_is_refused_when_opened() {
        let dir = std::env::temp_dir().join(format!("tra-cluster-short-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let d = dir.join("short.npy");
        npy::write_array(&d, &[4, 4], &[1.0f32; 16]).unwrap();
        let len = std::fs::metadata(&d).unwrap().len();
        std::fs::OpenOptions::new().write(true).open(&d).unwrap().set_len(len - 8).unwrap();
        let e = NpyRelationFile::open(&d, &[2, 2], &[2, 2]).err().expect("refused");
        assert!(e.contains("short.npy") && e.contains("needs 64 bytes") && e.contains("only 56 bytes"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn partial_reads_match_whole_reads() {
        let dir = std::env::temp_dir().join(format!("tra-cluster-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pool = Pool::<f64>::new();
        let kb = [3u32, 2];
        let ab = [2usize, 3];
        let dense: Vec<f64> = (0..(6 * 6)).map(|i| i as f64).collect();
        let d = dir.join("dense.npy");
        npy::write_array(&d, &[6, 6], &dense).unwrap();
        let (whole, layout, _) = npy::read_relation::<f64>(&d, &kb, &ab, &pool).unwrap();
        assert_eq!(layout, Layout::Dense);
        let f = NpyRelationFile::open(&d, &kb, &ab).unwrap();
        let wanted: Vec<(usize, Key)> = all_keys(&kb).into_iter().enumerate().filter(|(i, _)| i % 2 == 1).collect();
        let got = f.read_keys(&wanted, &pool).unwrap();
        for ((i, k), (gk, gb)) in wanted.iter().zip(&got) {
            assert_eq!(k, gk);
            assert_eq!(**gb, *whole.tuples[*i].1);
        }
        // The relation layout, converted from f64 to f32.
        let r = dir.join("rel.npy");
        npy::write_relation(&r, &whole, &kb, &ab, Layout::Relation).unwrap();
        let f = NpyRelationFile::open(&r, &kb, &ab).unwrap();
        let got = f.read_keys(&wanted, &Pool::<f32>::new()).unwrap();
        for ((i, _), (_, gb)) in wanted.iter().zip(&got) {
            let want: Vec<f32> = whole.tuples[*i].1.as_slice().iter().map(|&x| x as f32).collect();
            assert_eq!(gb.as_slice(), want.as_slice());
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    /// Where the file is not mapped, runs far apart are read separately, and no read spans more than
    /// `READ_SPAN_BYTES`: every block still comes back whole and in place.
    #[test]
    fn reads_split_at_wide_gaps_and_long_spans() {
        let dir = std::env::temp_dir().join(format!("tra-cluster-spans-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pool = Pool::<f64>::new();
        // Rows of 3 blocks of 12,000 f64 (96 KB: wider than the gap limit);
        // the file (4 × 36,000 f64, 1.1 MB) read with blocks 0 and 2 wanted.
        let (kb, ab) = ([2u32, 3], [2usize, 12_000]);
        let dense: Vec<f64> = (0..4 * 36_000).map(|i| i as f64).collect();
        let d = dir.join("wide.npy");
        npy::write_array(&d, &[4, 36_000], &dense).unwrap();
        let (whole, _, _) = npy::read_relation::<f64>(&d, &kb, &ab, &pool).unwrap();
        let f = NpyRelationFile::open(&d, &kb, &ab).unwrap().unmapped();
        let wanted: Vec<(usize, Key)> = all_keys(&kb).into_iter().enumerate().filter(|(i, _)| i % 3 != 1).collect();
        for ((i, k), (gk, gb)) in wanted.iter().zip(&f.read_keys(&wanted, &pool).unwrap()) {
            assert_eq!(k, gk);
            assert_eq!(**gb, *whole.tuples[*i].1, "block {k:?}");
        }
        // Two adjacent 6.4 MB blocks of a relation file: longer together than one read takes.
        let (kb, ab) = ([2u32], [800_000usize]);
        let rel: Vec<f64> = (0..1_600_000).map(|i| (i % 1000) as f64 - 0.5).collect();
        let r = dir.join("long.npy");
        npy::write_array(&r, &[2, 800_000], &rel).unwrap();
        let f = NpyRelationFile::open(&r, &kb, &ab).unwrap();
        let got = f.read_keys(&[(1, vec![1]), (0, vec![0])], &pool).unwrap();
        assert_eq!(got[0].1.as_slice(), &rel[800_000..]);
        assert_eq!(got[1].1.as_slice(), &rel[..800_000]);
        std::fs::remove_dir_all(&dir).ok();
    }
}
