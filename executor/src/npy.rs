//! Reading and writing `.npy` files (format versions 1, 2 and 3; `float32`
//! and `float64`, either byte order, C or Fortran order), and the two ways a
//! tensor relation is stored in one (docs/API.md, "Files"):
//!
//! - **relation layout**: one array of shape `key_bounds ++ array_bounds`;
//!   the block of key `k` is the sub-array at index `k`;
//! - **dense layout** (key arity = block rank): the tensor of shape
//!   `key_bounds[i] · array_bounds[i]`, cut into blocks.
//!
//! Reading streams: a relation-layout file is read block by block straight
//! into pooled buffers, a dense file one slab of block rows at a time, so
//! loading an input needs its blocks plus one slab, not two copies. Writing
//! streams the same way.
//!
//! A header is a claim, not a fact: before anything is allocated for the
//! data, the shape it states is checked against the file's real size (a
//! 193-byte file claiming 30000 × 30000 floats is refused, not answered
//! with a 7 GB allocation), and only regular files are opened (a FIFO would
//! block forever, a device never ends). Outputs are written to a temporary
//! file beside the target and renamed over it once complete, so a failed
//! write (a full disk) leaves the previous result whole and no truncated
//! `.npy` behind.

use crate::threads::{Block, Dtype, Elem, Pool, TRelation};
use std::fmt;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;
use std::sync::Arc;

/// Why a `.npy` file could not be read or written. The message names the file.
#[derive(Debug)]
pub struct NpyError {
    /// What went wrong, in words.
    pub message: String,
}

impl fmt::Display for NpyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for NpyError {}

fn err(path: &Path, msg: impl fmt::Display) -> NpyError {
    NpyError { message: format!("{}: {msg}", path.display()) }
}

/// The element type of a `.npy` file as its header states it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpyDtype {
    /// The `descr` string, e.g. `<f8`.
    pub descr: String,
    /// `f32` or `f64`, when it is one of those.
    pub float: Option<Dtype>,
    /// Stored big-endian.
    pub big_endian: bool,
}

impl NpyDtype {
    fn parse(descr: &str) -> NpyDtype {
        let (order, kind) = match descr.chars().next() {
            Some(c @ ('<' | '>' | '=' | '|')) => (c, &descr[1..]),
            _ => ('=', descr),
        };
        let big_endian = order == '>' || (order == '=' && cfg!(target_endian = "big"));
        let float = match kind {
            "f4" => Some(Dtype::F32),
            "f8" => Some(Dtype::F64),
            _ => None,
        };
        NpyDtype { descr: descr.to_string(), float, big_endian }
    }

    /// numpy's name for the type, for messages (`int64`, `float16`, …).
    pub fn numpy_name(&self) -> String {
        let kind = self.descr.trim_start_matches(['<', '>', '=', '|']);
        let (c, size) = kind.split_at(kind.len().min(1));
        let bits = size.parse::<usize>().map(|b| b * 8).ok();
        match (c, bits) {
            ("f", Some(b)) => format!("float{b}"),
            ("i", Some(b)) => format!("int{b}"),
            ("u", Some(b)) => format!("uint{b}"),
            ("c", Some(b)) => format!("complex{b}"),
            ("b", _) => "bool".into(),
            ("O", _) => "object".into(),
            ("U" | "S", _) => "string".into(),
            _ => format!("dtype {:?}", self.descr),
        }
    }
}

/// A parsed `.npy` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpyHeader {
    /// Element type.
    pub dtype: NpyDtype,
    /// Column-major data.
    pub fortran_order: bool,
    /// The array's shape.
    pub shape: Vec<usize>,
}

impl NpyHeader {
    /// Number of elements (saturating: a checked header never saturates).
    pub fn len(&self) -> usize {
        self.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).unwrap_or(usize::MAX)
    }

    /// Bytes of data the header announces, if that fits 64 bits.
    pub fn data_bytes(&self) -> Option<u64> {
        let size = match self.dtype.float {
            Some(d) => d.size() as u64,
            None => 1,
        };
        self.shape.iter().try_fold(size, |a, &d| a.checked_mul(d as u64))
    }

    /// True when the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

const MAGIC: &[u8] = b"\x93NUMPY";

/// Read the header; the reader is left at the first data byte.
pub fn read_header(r: &mut impl Read, path: &Path) -> Result<NpyHeader, NpyError> {
    read_header_counted(r, path).map(|(h, _)| h)
}

/// [`read_header`], and the header's length in bytes (where the data starts).
fn read_header_counted(r: &mut impl Read, path: &Path) -> Result<(NpyHeader, u64), NpyError> {
    let mut pre = [0u8; 8];
    r.read_exact(&mut pre).map_err(|_| err(path, "not a .npy file (too short for the magic string)"))?;
    if &pre[..6] != MAGIC {
        return Err(err(path, "not a .npy file (no \\x93NUMPY magic string at the start)"));
    }
    let major = pre[6];
    let len = match major {
        1 => {
            let mut b = [0u8; 2];
            r.read_exact(&mut b).map_err(|e| err(path, format!("truncated header: {e}")))?;
            u16::from_le_bytes(b) as usize
        }
        2 | 3 => {
            let mut b = [0u8; 4];
            r.read_exact(&mut b).map_err(|e| err(path, format!("truncated header: {e}")))?;
            u32::from_le_bytes(b) as usize
        }
        v => return Err(err(path, format!(".npy format version {v}.{} is not supported (1, 2 or 3)", pre[7]))),
    };
    if len > 1 << 24 {
        return Err(err(path, format!("implausible header length {len}")));
    }
    let mut h = vec![0u8; len];
    r.read_exact(&mut h).map_err(|e| err(path, format!("truncated header: {e}")))?;
    let text = String::from_utf8_lossy(&h);
    let header = parse_header_dict(&text).map_err(|m| err(path, format!("bad .npy header {:?}: {m}", text.trim())))?;
    let prefix = if major == 1 { 10 } else { 12 };
    Ok((header, (prefix + len) as u64))
}

fn parse_header_dict(text: &str) -> Result<NpyHeader, String> {
    let value_after = |key: &str| -> Result<&str, String> {
        let at = text
            .find(&format!("'{key}'"))
            .or_else(|| text.find(&format!("\"{key}\"")))
            .ok_or_else(|| format!("no `{key}` entry"))?;
        let rest = &text[at + key.len() + 2..];
        let colon = rest.find(':').ok_or_else(|| format!("no `:` after `{key}`"))?;
        Ok(rest[colon + 1..].trim_start())
    };
    let d = value_after("descr")?;
    let quote = d
        .chars()
        .next()
        .filter(|c| *c == '\'' || *c == '"')
        .ok_or("`descr` is not a string (structured dtypes are not supported)")?;
    let end = d[1..].find(quote).ok_or("unterminated `descr`")?;
    let dtype = NpyDtype::parse(&d[1..1 + end]);
    let f = value_after("fortran_order")?;
    let fortran_order = if f.starts_with("True") {
        true
    } else if f.starts_with("False") {
        false
    } else {
        return Err("`fortran_order` is neither True nor False".into());
    };
    let s = value_after("shape")?;
    if !s.starts_with('(') {
        return Err("`shape` is not a tuple".into());
    }
    let close = s.find(')').ok_or("unterminated `shape`")?;
    let mut shape = Vec::new();
    for part in s[1..close].split(',') {
        let p = part.trim().trim_end_matches('L');
        if p.is_empty() {
            continue;
        }
        shape.push(p.parse::<usize>().map_err(|_| format!("shape entry {p:?} is not a natural number"))?);
    }
    Ok(NpyHeader { dtype, fortran_order, shape })
}

/// The header bytes for an array (format 1.0, or 2.0 when it must be).
pub fn header_bytes(dtype: Dtype, shape: &[usize]) -> Vec<u8> {
    let descr = match dtype {
        Dtype::F32 => "<f4",
        Dtype::F64 => "<f8",
    };
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let tuple = if shape.len() == 1 { format!("({},)", dims[0]) } else { format!("({})", dims.join(", ")) };
    let dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {tuple}, }}");
    let mut out = Vec::new();
    for (major, prefix) in [(1u8, 10usize), (2, 12)] {
        let unpadded = prefix + dict.len() + 1;
        let total = unpadded.div_ceil(64) * 64;
        let hlen = total - prefix;
        if major == 1 && hlen > u16::MAX as usize {
            continue;
        }
        out.extend_from_slice(MAGIC);
        out.push(major);
        out.push(0);
        if major == 1 {
            out.extend_from_slice(&(hlen as u16).to_le_bytes());
        } else {
            out.extend_from_slice(&(hlen as u32).to_le_bytes());
        }
        out.extend_from_slice(dict.as_bytes());
        out.resize(total - 1, b' ');
        out.push(b'\n');
        break;
    }
    out
}

/// Read `out.len()` elements stored as `dtype` into `out`, converting.
fn read_elems<T: Elem>(
    r: &mut impl Read,
    dtype: &NpyDtype,
    out: &mut [T],
    scratch: &mut Vec<u8>,
    path: &Path,
) -> Result<(), NpyError> {
    let src = dtype.float.expect("a float dtype");
    let truncated = |e: std::io::Error| err(path, format!("the data is shorter than the header's shape says ({e})"));
    if src == T::DTYPE && dtype.big_endian == cfg!(target_endian = "big") {
        // SAFETY: f32 and f64 have no invalid bit patterns and no padding;
        // the byte view covers exactly the slice.
        let bytes = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut u8, std::mem::size_of_val(out)) };
        return r.read_exact(bytes).map_err(truncated);
    }
    const STEP: usize = 1 << 14;
    let size = src.size();
    for chunk in out.chunks_mut(STEP) {
        scratch.resize(chunk.len() * size, 0);
        r.read_exact(scratch).map_err(truncated)?;
        for (o, b) in chunk.iter_mut().zip(scratch.chunks_exact(size)) {
            let x = match (src, dtype.big_endian) {
                (Dtype::F32, false) => f32::read_le(b).to_f64(),
                (Dtype::F32, true) => f32::read_be(b).to_f64(),
                (Dtype::F64, false) => f64::read_le(b),
                (Dtype::F64, true) => f64::read_be(b),
            };
            *o = T::from_f64(x);
        }
    }
    Ok(())
}

fn write_elems<T: Elem>(w: &mut impl Write, data: &[T], path: &Path) -> Result<(), NpyError> {
    if cfg!(target_endian = "little") {
        // SAFETY: plain floats, viewed as their bytes.
        let bytes = unsafe { std::slice::from_raw_parts(data.as_ptr() as *const u8, std::mem::size_of_val(data)) };
        return w.write_all(bytes).map_err(|e| err(path, format!("cannot write: {e}")));
    }
    let mut buf = Vec::with_capacity(data.len() * T::DTYPE.size());
    for &x in data {
        x.write_le(&mut buf);
    }
    w.write_all(&buf).map_err(|e| err(path, format!("cannot write: {e}")))
}

/// Refuse what is not a regular file before opening it (opening a FIFO
/// blocks until someone writes to it).
fn regular_file(path: &Path, what: &str) -> Result<Option<std::fs::Metadata>, NpyError> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => Ok(Some(m)),
        Ok(m) => {
            let kind = if m.is_dir() { "a directory" } else { "not a regular file (a FIFO, a socket or a device)" };
            Err(err(path, format!("is {kind}; tra {what} regular .npy files only")))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(err(path, format!("cannot open: {e}"))),
    }
}

/// Open a `.npy` file and read its header, after checking that the file is
/// a regular file holding at least the data the header announces.
fn open(path: &Path) -> Result<(BufReader<File>, NpyHeader), NpyError> {
    let meta = regular_file(path, "reads")?;
    let f = File::open(path).map_err(|e| err(path, format!("cannot open: {e}")))?;
    let size = match meta {
        Some(m) => m.len(),
        None => f.metadata().map_err(|e| err(path, format!("cannot open: {e}")))?.len(),
    };
    let mut r = BufReader::with_capacity(1 << 20, f);
    let (h, header_len) = read_header_counted(&mut r, path)?;
    check_data_length(path, &h, header_len, size)?;
    Ok((r, h))
}

/// Check that a file of `size` bytes whose header (`header_len` bytes long)
/// is `h` holds the data the header announces; the number of data bytes.
pub fn check_data_length(path: &Path, h: &NpyHeader, header_len: u64, size: u64) -> Result<u64, NpyError> {
    let need = h
        .data_bytes()
        .ok_or_else(|| err(path, format!("the header's shape {:?} has more than 2^64 bytes of data", h.shape)))?;
    let have = size.saturating_sub(header_len);
    if have < need {
        return Err(err(
            path,
            format!(
                "the data is shorter than the header says: shape {:?} of {} needs {need} bytes, the file holds only \
                 {have} bytes after its header (truncated, or not what it claims)",
                h.shape,
                h.dtype.numpy_name()
            ),
        ));
    }
    Ok(need)
}

/// The header of a `.npy` file (checked against the file's size).
pub fn read_file_header(path: &Path) -> Result<NpyHeader, NpyError> {
    open(path).map(|(_, h)| h)
}

/// Write a file through a temporary file beside it, renamed over `path`
/// once `write` has written and flushed everything; on any error the
/// temporary file is removed and `path` is untouched.
fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> Result<(), NpyError>,
) -> Result<(), NpyError> {
    // An existing FIFO or device is refused: renaming over it would replace it.
    regular_file(path, "writes")?;
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let name = path.file_name().ok_or_else(|| err(path, "is not a file name"))?.to_string_lossy();
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = path.with_file_name(format!(".{name}.tmp-{}-{n}", std::process::id()));
    struct Remove<'a>(Option<&'a Path>);
    impl Drop for Remove<'_> {
        fn drop(&mut self) {
            if let Some(p) = self.0 {
                let _ = std::fs::remove_file(p);
            }
        }
    }
    let f = File::create(&tmp).map_err(|e| err(path, format!("cannot create (a temporary file beside it): {e}")))?;
    let mut guard = Remove(Some(&tmp));
    let mut w = BufWriter::with_capacity(1 << 20, f);
    write(&mut w)?;
    let f = w.into_inner().map_err(|e| err(path, format!("cannot write: {}", e.error())))?;
    f.sync_all().map_err(|e| err(path, format!("cannot write: {e}")))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(|e| err(path, format!("cannot replace it: {e}")))?;
    guard.0 = None;
    Ok(())
}

fn float_dtype(h: &NpyHeader, path: &Path) -> Result<Dtype, NpyError> {
    h.dtype.float.ok_or_else(|| {
        err(
            path,
            format!("holds {} values (dtype {:?}); tra reads float32 or float64", h.dtype.numpy_name(), h.dtype.descr),
        )
    })
}

/// A whole `.npy` file as a row-major array of `T` (converting from the
/// file's float type if it differs).
pub fn read_array<T: Elem>(path: &Path) -> Result<ndarray::ArrayD<T>, NpyError> {
    let (mut r, h) = open(path)?;
    float_dtype(&h, path)?;
    let mut data = vec![T::ZERO; h.len()];
    read_elems(&mut r, &h.dtype, &mut data, &mut Vec::new(), path)?;
    use ndarray::ShapeBuilder;
    let a = if h.fortran_order {
        ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&h.shape).f(), data)
    } else {
        ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&h.shape), data)
    }
    .map_err(|e| err(path, e))?;
    Ok(if a.is_standard_layout() { a } else { a.as_standard_layout().into_owned() })
}

/// Write a row-major array (through a temporary file, renamed into place).
pub fn write_array<T: Elem>(path: &Path, shape: &[usize], data: &[T]) -> Result<(), NpyError> {
    assert_eq!(shape.iter().product::<usize>(), data.len(), "data does not fit the shape");
    write_atomically(path, |w| {
        w.write_all(&header_bytes(T::DTYPE, shape)).map_err(|e| err(path, format!("cannot write: {e}")))?;
        write_elems(w, data, path)
    })
}

/// How a relation is laid out in a `.npy` file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    /// Shape `key_bounds ++ array_bounds`.
    Relation,
    /// The dense tensor, shape `key_bounds[i] · array_bounds[i]`.
    Dense,
}

/// The shape a relation has in a layout (`None`: dense is impossible
/// because key arity and block rank differ).
pub fn layout_shape(layout: Layout, key_bounds: &[u32], array_bounds: &[usize]) -> Option<Vec<usize>> {
    match layout {
        Layout::Relation => Some(key_bounds.iter().map(|&k| k as usize).chain(array_bounds.iter().copied()).collect()),
        Layout::Dense if key_bounds.len() == array_bounds.len() => {
            Some(key_bounds.iter().zip(array_bounds).map(|(&k, &b)| k as usize * b).collect())
        }
        Layout::Dense => None,
    }
}

/// Every key below `bounds` in lexicographic order.
fn keys_below(bounds: &[u32]) -> Vec<Vec<u32>> {
    crate::semantics::all_keys(bounds)
}

/// Read a relation with the given frontier and block shape from a `.npy`
/// file in either layout (recognised by its shape), into blocks of `pool`.
/// Returns the layout found and the file's element type.
pub fn read_relation<T: Elem>(
    path: &Path,
    key_bounds: &[u32],
    array_bounds: &[usize],
    pool: &Pool<T>,
) -> Result<(TRelation<T>, Layout, Dtype), NpyError> {
    let (mut r, h) = open(path)?;
    let file_dtype = float_dtype(&h, path)?;
    let rel_shape = layout_shape(Layout::Relation, key_bounds, array_bounds).expect("always");
    let dense_shape = layout_shape(Layout::Dense, key_bounds, array_bounds);
    let layout = if h.shape == rel_shape {
        Layout::Relation
    } else if dense_shape.as_ref() == Some(&h.shape) {
        Layout::Dense
    } else {
        let expected = match &dense_shape {
            Some(d) => format!("{rel_shape:?} (key bounds ++ block shape) or {d:?} (the dense tensor)"),
            None => format!("{rel_shape:?} (key bounds ++ block shape)"),
        };
        return Err(err(path, format!("has shape {:?}; expected {expected}", h.shape)));
    };
    let keys = keys_below(key_bounds);
    let block_len: usize = array_bounds.iter().product();
    if h.fortran_order {
        // Rare: read it whole and cut it.
        let a = read_array::<T>(path)?;
        let tuples = keys
            .into_iter()
            .map(|k| {
                let mut view = a.view();
                match layout {
                    Layout::Relation => {
                        for &c in &k {
                            view.index_axis_inplace(ndarray::Axis(0), c as usize);
                        }
                    }
                    Layout::Dense => {
                        for (axis, (&c, &b)) in k.iter().zip(array_bounds).enumerate() {
                            let s = c as usize * b;
                            view.slice_axis_inplace(ndarray::Axis(axis), ndarray::Slice::from(s..s + b));
                        }
                    }
                }
                (k, Arc::new(pool.from_array(&view, |x| x)))
            })
            .collect();
        return Ok((TRelation { tuples }, layout, file_dtype));
    }
    let mut scratch = Vec::new();
    let mut tuples = Vec::with_capacity(keys.len());
    match layout {
        Layout::Relation => {
            for k in keys {
                let mut b = pool.take(array_bounds);
                read_elems(&mut r, &h.dtype, b.as_mut_slice(), &mut scratch, path)?;
                tuples.push((k, Arc::new(b)));
            }
        }
        Layout::Dense => {
            if key_bounds.is_empty() {
                let mut b = pool.take(array_bounds);
                read_elems(&mut r, &h.dtype, b.as_mut_slice(), &mut scratch, path)?;
                return Ok((TRelation { tuples: vec![(vec![], Arc::new(b))] }, layout, file_dtype));
            }
            // One slab of block rows (axis 0) at a time.
            let full = dense_shape.expect("dense");
            let slab_shape: Vec<usize> = std::iter::once(array_bounds[0]).chain(full[1..].iter().copied()).collect();
            let mut slab = vec![T::ZERO; slab_shape.iter().product()];
            let per_slab = keys.len() / key_bounds[0] as usize;
            for (row, chunk) in keys.chunks(per_slab.max(1)).enumerate() {
                let _ = row;
                read_elems(&mut r, &h.dtype, &mut slab, &mut scratch, path)?;
                let sv =
                    ndarray::ArrayViewD::from_shape(ndarray::IxDyn(&slab_shape), &slab).map_err(|e| err(path, e))?;
                for k in chunk {
                    let mut view = sv.view();
                    for (axis, (&c, &b)) in k.iter().zip(array_bounds).enumerate().skip(1) {
                        let s = c as usize * b;
                        view.slice_axis_inplace(ndarray::Axis(axis), ndarray::Slice::from(s..s + b));
                    }
                    let mut b = pool.take(array_bounds);
                    debug_assert_eq!(b.len(), block_len);
                    b.view_mut().assign(&view);
                    tuples.push((k.clone(), Arc::new(b)));
                }
            }
        }
    }
    Ok((TRelation { tuples }, layout, file_dtype))
}

/// Write a relation with frontier `key_bounds` and block shape
/// `array_bounds` in a layout. Keys below the frontier without a tuple (a
/// relation with holes) are written as zeros; their number is returned.
pub fn write_relation<T: Elem>(
    path: &Path,
    rel: &TRelation<T>,
    key_bounds: &[u32],
    array_bounds: &[usize],
    layout: Layout,
) -> Result<u64, NpyError> {
    let shape = layout_shape(layout, key_bounds, array_bounds).ok_or_else(|| {
        err(
            path,
            format!(
                "cannot be written dense: the key has {} dims but blocks have rank {}",
                key_bounds.len(),
                array_bounds.len()
            ),
        )
    })?;
    for (k, b) in &rel.tuples {
        if b.shape() != array_bounds || k.len() != key_bounds.len() || k.iter().zip(key_bounds).any(|(c, f)| c >= f) {
            return Err(err(
                path,
                format!("tuple {k:?} with block {:?} does not fit {key_bounds:?} × {array_bounds:?}", b.shape()),
            ));
        }
    }
    let mut holes = 0u64;
    write_atomically(path, |w| {
        holes = write_relation_to(w, path, rel, key_bounds, array_bounds, layout, &shape)?;
        Ok(())
    })?;
    Ok(holes)
}

fn write_relation_to<T: Elem>(
    w: &mut BufWriter<File>,
    path: &Path,
    rel: &TRelation<T>,
    key_bounds: &[u32],
    array_bounds: &[usize],
    layout: Layout,
    shape: &[usize],
) -> Result<u64, NpyError> {
    w.write_all(&header_bytes(T::DTYPE, shape)).map_err(|e| err(path, format!("cannot write: {e}")))?;
    let keys = keys_below(key_bounds);
    let block_len: usize = array_bounds.iter().product();
    let zeros = vec![T::ZERO; if rel.len() < keys.len() { block_len } else { 0 }];
    let mut holes = 0u64;
    match layout {
        Layout::Relation => {
            for k in &keys {
                match rel.get(k) {
                    Some(b) => write_elems(w, b.as_slice(), path)?,
                    None => {
                        holes += 1;
                        write_elems(w, &zeros, path)?
                    }
                }
            }
        }
        Layout::Dense if key_bounds.is_empty() => match rel.get(&[]) {
            Some(b) => write_elems(w, b.as_slice(), path)?,
            None => {
                holes += 1;
                write_elems(w, &zeros, path)?
            }
        },
        Layout::Dense => {
            let slab_shape: Vec<usize> = std::iter::once(array_bounds[0]).chain(shape[1..].iter().copied()).collect();
            let mut slab = vec![T::ZERO; slab_shape.iter().product()];
            let per_slab = keys.len() / key_bounds[0] as usize;
            for chunk in keys.chunks(per_slab.max(1)) {
                let mut sv = ndarray::ArrayViewMutD::from_shape(ndarray::IxDyn(&slab_shape), &mut slab)
                    .map_err(|e| err(path, e))?;
                for k in chunk {
                    let mut view = sv.view_mut();
                    for (axis, (&c, &b)) in k.iter().zip(array_bounds).enumerate().skip(1) {
                        let s = c as usize * b;
                        view.slice_axis_inplace(ndarray::Axis(axis), ndarray::Slice::from(s..s + b));
                    }
                    match rel.get(k) {
                        Some(b) => view.assign(&b.view()),
                        None => {
                            holes += 1;
                            view.fill(T::ZERO)
                        }
                    }
                }
                write_elems(w, &slab, path)?;
            }
        }
    }
    w.flush().map_err(|e| err(path, format!("cannot write: {e}")))?;
    Ok(holes)
}

/// A block of `pool` from a whole array file (used by tests and tools).
pub fn read_block<T: Elem>(path: &Path, pool: &Pool<T>) -> Result<Block<T>, NpyError> {
    let a = read_array::<T>(path)?;
    Ok(pool.from_array(&a.view(), |x| x))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("tra-npy-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_header_is_checked_against_the_file_size_before_allocating() {
        let d = dir("claims");
        let p = d.join("liar.npy");
        // A 128-byte header claiming 30000 × 30000 float64s, and no data.
        std::fs::write(&p, header_bytes(Dtype::F64, &[30000, 30000])).unwrap();
        let e = read_array::<f64>(&p).unwrap_err().message;
        assert!(e.contains("needs 7200000000 bytes") && e.contains("only 0 bytes"), "{e}");
        let pool = Pool::<f64>::new();
        let e = read_relation::<f64>(&p, &[30000], &[30000], &pool).unwrap_err().message;
        assert!(e.contains("shorter than the header says"), "{e}");
        assert_eq!(pool.stats().fresh_bytes, 0, "nothing was allocated for the data");
        // A shape whose byte count overflows 64 bits.
        std::fs::write(&p, header_bytes(Dtype::F64, &[1 << 40, 1 << 40])).unwrap();
        assert!(read_file_header(&p).unwrap_err().message.contains("more than 2^64"));
        // One float short.
        let mut bytes = header_bytes(Dtype::F32, &[2, 2]);
        bytes.extend_from_slice(&[0u8; 12]);
        std::fs::write(&p, &bytes).unwrap();
        assert!(read_array::<f32>(&p).is_err());
        bytes.extend_from_slice(&[0u8; 4]);
        std::fs::write(&p, &bytes).unwrap();
        assert_eq!(read_array::<f32>(&p).unwrap().len(), 4);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn fifos_directories_and_devices_are_refused_without_blocking() {
        let d = dir("fifo");
        let fifo = d.join("pipe.npy");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().map(|s| s.success()).unwrap_or(false);
        if made {
            let e = read_file_header(&fifo).unwrap_err().message;
            assert!(e.contains("not a regular file"), "{e}");
            let e = write_array::<f32>(&fifo, &[1], &[1.0]).unwrap_err().message;
            assert!(e.contains("not a regular file"), "{e}");
        }
        assert!(read_file_header(&d).unwrap_err().message.contains("a directory"));
        assert!(read_file_header(Path::new("/dev/zero")).unwrap_err().message.contains("not a regular file"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_failed_write_leaves_the_previous_file_whole() {
        let d = dir("atomic");
        let p = d.join("out.npy");
        write_array::<f64>(&p, &[2], &[1.0, 2.0]).unwrap();
        let before = std::fs::read(&p).unwrap();
        let e = write_atomically(&p, |w| {
            w.write_all(b"partial").unwrap();
            Err(err(&p, "cannot write: No space left on device"))
        })
        .unwrap_err();
        assert!(e.message.contains("No space left"), "{}", e.message);
        assert_eq!(std::fs::read(&p).unwrap(), before, "the previous result is untouched");
        let left: Vec<_> = std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left.len(), 1, "no temporary file left behind: {left:?}");
        // A successful write replaces it.
        write_array::<f64>(&p, &[3], &[1.0, 2.0, 3.0]).unwrap();
        assert_eq!(read_array::<f64>(&p).unwrap().len(), 3);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
