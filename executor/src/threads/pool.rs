//! Block buffers and the pool they come from (the BIDMach idea, paper 002:
//! cache containers keyed by their dimensions, so that a computation repeated
//! on data of the same shapes allocates nothing after its first run).
//!
//! A [`Block`] owns a row-major buffer and its shape. When a block made by a
//! [`Pool`] is dropped, its buffer goes back to the pool under its shape, and
//! the next [`Pool::take`] of that shape gets it again. Blocks are shared
//! between sites and operators as `Arc<Block<T>>` (a replicated relation is
//! one copy, whatever the number of sites); the buffer returns to the pool
//! when the last reference goes.
//!
//! A block may also view bytes that something else owns ([`Block::viewing`]):
//! the cluster runtime's blocks received from the network are views of the
//! message they came in, not copies of it. Such a block is read-only; the
//! first write copies its elements into a buffer of its own.

use super::elem::Elem;
use ndarray::{ArrayD, ArrayViewD, ArrayViewMutD, Dimension, IxDyn};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A dense row-major block of `T` with its shape.
pub struct Block<T: Elem> {
    data: Vec<T>,
    /// Bytes this block views instead of `data` (then `data` is empty).
    viewed: Option<ElemBytes>,
    shape: IxDyn,
    home: Option<Arc<PoolInner<T>>>,
}

/// Bytes owned elsewhere that hold a block's elements (native byte order).
pub type ElemBytes = Box<dyn std::ops::Deref<Target = [u8]> + Send + Sync>;

/// `bytes` as `n` elements of `T`, when they are exactly that many and
/// aligned for `T`.
fn elems_of<T: Elem>(bytes: &[u8], n: usize) -> Option<&[T]> {
    let size = std::mem::size_of::<T>();
    if size != T::DTYPE.size()
        || bytes.len() != n * size
        || !(bytes.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>())
    {
        return None;
    }
    // SAFETY: the bytes are checked just above to be exactly `n` elements long
    // and aligned for T; T is f32 or f64 (Elem's dtypes, sizes checked), for
    // which every bit pattern is a value; the slice borrows `bytes`, which are
    // only read while it lives.
    Some(unsafe { std::slice::from_raw_parts(bytes.as_ptr() as *const T, n) })
}

/// A block shared between sites and operators.
pub type SharedBlock<T> = Arc<Block<T>>;

impl<T: Elem> Block<T> {
    /// A block that belongs to no pool (its buffer is freed when dropped).
    pub fn detached(shape: &[usize], data: Vec<T>) -> Block<T> {
        assert_eq!(shape.iter().product::<usize>(), data.len(), "block data does not fit its shape");
        Block { data, viewed: None, shape: IxDyn(shape), home: None }
    }

    /// A block whose elements are `bytes` (native byte order), without copying
    /// them: `None` unless they hold exactly the shape's elements and are
    /// aligned for `T`. The block keeps the bytes until it is dropped or
    /// first written (which copies them into a buffer of its own).
    pub fn viewing(shape: &[usize], bytes: ElemBytes) -> Option<Block<T>> {
        let n = shape.iter().product::<usize>();
        elems_of::<T>(&bytes, n)?;
        Some(Block { data: Vec::new(), viewed: Some(bytes), shape: IxDyn(shape), home: None })
    }

    /// True when the elements are viewed bytes (not yet copied).
    pub fn is_view(&self) -> bool {
        self.viewed.is_some()
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        self.shape.slice()
    }

    /// The elements, row-major.
    pub fn as_slice(&self) -> &[T] {
        match &self.viewed {
            Some(bytes) => elems_of(bytes, self.shape.size()).expect("viewed bytes fit the block (checked when made)"),
            None => &self.data,
        }
    }

    /// The elements, row-major, writable (a block viewing bytes copies them first).
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        if self.viewed.is_some() {
            self.data = self.as_slice().to_vec();
            self.viewed = None;
        }
        &mut self.data
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    /// True for a block without elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// An ndarray view.
    pub fn view(&self) -> ArrayViewD<'_, T> {
        ArrayViewD::from_shape(self.shape.clone(), self.as_slice()).expect("shape fits data")
    }

    /// A writable ndarray view.
    pub fn view_mut(&mut self) -> ArrayViewMutD<'_, T> {
        let shape = self.shape.clone();
        ArrayViewMutD::from_shape(shape, self.as_mut_slice()).expect("shape fits data")
    }

    /// A copy as an owned ndarray array.
    pub fn to_array(&self) -> ArrayD<T> {
        ArrayD::from_shape_vec(self.shape.clone(), self.as_slice().to_vec()).expect("shape fits data")
    }

    /// Give the block a different shape with the same number of elements.
    pub fn reshape(&mut self, shape: &[usize]) {
        assert_eq!(shape.iter().product::<usize>(), self.len(), "reshape changes the element count");
        self.shape = IxDyn(shape);
    }
}

impl<T: Elem> Drop for Block<T> {
    fn drop(&mut self) {
        if let Some(home) = self.home.take() {
            if self.viewed.is_some() {
                return;
            }
            home.give(&self.shape, std::mem::take(&mut self.data));
        }
    }
}

impl<T: Elem> std::fmt::Debug for Block<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.view())
    }
}

impl<T: Elem> PartialEq for Block<T> {
    fn eq(&self, o: &Self) -> bool {
        self.shape == o.shape && self.as_slice() == o.as_slice()
    }
}

struct PoolInner<T: Elem> {
    free: Mutex<HashMap<IxDyn, Vec<Vec<T>>>>,
    limit_bytes: u64,
    held_bytes: AtomicU64,
    fresh: AtomicU64,
    fresh_bytes: AtomicU64,
    reused: AtomicU64,
}

/// Bytes a held buffer costs besides its elements (its `Vec` in the free
/// list, the allocator's header and rounding): counted against the limit, so
/// that a million one-float blocks are not "8 MB".
const BUFFER_OVERHEAD: u64 = 64;

/// The bytes a held buffer is counted for.
fn held_size<T>(v: &Vec<T>) -> u64 {
    (v.capacity() * std::mem::size_of::<T>()) as u64 + BUFFER_OVERHEAD
}

impl<T: Elem> PoolInner<T> {
    fn give(&self, shape: &IxDyn, data: Vec<T>) {
        if data.capacity() == 0 || data.len() != shape.size() {
            return;
        }
        let bytes = held_size(&data);
        if self.held_bytes.load(Ordering::Relaxed) + bytes > self.limit_bytes {
            return; // over the limit: free it
        }
        self.held_bytes.fetch_add(bytes, Ordering::Relaxed);
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        free.entry(shape.clone()).or_default().push(data);
    }
}

/// Counters of a pool, for reports and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct PoolStats {
    /// Buffers allocated fresh (a miss).
    pub fresh_allocations: u64,
    /// Bytes of those buffers.
    pub fresh_bytes: u64,
    /// Buffers handed out again (a hit).
    pub reuses: u64,
    /// Bytes held for reuse right now.
    pub held_bytes: u64,
}

/// A pool of block buffers keyed by shape. Cloning gives another handle to
/// the same pool.
pub struct Pool<T: Elem> {
    inner: Arc<PoolInner<T>>,
}

impl<T: Elem> Clone for Pool<T> {
    fn clone(&self) -> Self {
        Pool { inner: self.inner.clone() }
    }
}

impl<T: Elem> Default for Pool<T> {
    fn default() -> Self {
        Pool::new()
    }
}

impl<T: Elem> Pool<T> {
    /// A pool without a limit on what it holds.
    pub fn new() -> Pool<T> {
        Pool::with_limit(u64::MAX)
    }

    /// A pool that frees returned buffers instead of keeping them once it
    /// holds `limit_bytes`.
    pub fn with_limit(limit_bytes: u64) -> Pool<T> {
        Pool {
            inner: Arc::new(PoolInner {
                free: Mutex::new(HashMap::new()),
                limit_bytes,
                held_bytes: AtomicU64::new(0),
                fresh: AtomicU64::new(0),
                fresh_bytes: AtomicU64::new(0),
                reused: AtomicU64::new(0),
            }),
        }
    }

    /// A block of this shape. Its contents are unspecified (zeros when fresh,
    /// the previous user's values when reused): the caller overwrites them.
    pub fn take(&self, shape: &[usize]) -> Block<T> {
        let key = IxDyn(shape);
        let n = key.size();
        let reused = if n == 0 {
            None
        } else {
            let mut free = self.inner.free.lock().unwrap_or_else(|e| e.into_inner());
            free.get_mut(&key).and_then(|list| list.pop())
        };
        let data = match reused {
            Some(v) => {
                self.inner.reused.fetch_add(1, Ordering::Relaxed);
                self.inner.held_bytes.fetch_sub(held_size(&v), Ordering::Relaxed);
                v
            }
            None => {
                self.inner.fresh.fetch_add(1, Ordering::Relaxed);
                self.inner.fresh_bytes.fetch_add((n * std::mem::size_of::<T>()) as u64, Ordering::Relaxed);
                vec![T::ZERO; n]
            }
        };
        Block { data, viewed: None, shape: key, home: Some(self.inner.clone()) }
    }

    /// A block of zeros.
    pub fn zeros(&self, shape: &[usize]) -> Block<T> {
        let mut b = self.take(shape);
        b.as_mut_slice().fill(T::ZERO);
        b
    }

    /// A pooled copy of a slice with a shape.
    pub fn copy_of(&self, shape: &[usize], data: &[T]) -> Block<T> {
        let mut b = self.take(shape);
        b.as_mut_slice().copy_from_slice(data);
        b
    }

    /// A pooled block from an ndarray array (any layout), converting elements.
    pub fn from_array<S: Copy + 'static>(&self, a: &ndarray::ArrayViewD<'_, S>, convert: impl Fn(S) -> T) -> Block<T> {
        let mut b = self.take(a.shape());
        if let Some(s) = a.as_slice() {
            for (o, &x) in b.as_mut_slice().iter_mut().zip(s) {
                *o = convert(x);
            }
        } else {
            for (o, &x) in b.as_mut_slice().iter_mut().zip(a.iter()) {
                *o = convert(x);
            }
        }
        b
    }

    /// Counters.
    pub fn stats(&self) -> PoolStats {
        PoolStats {
            fresh_allocations: self.inner.fresh.load(Ordering::Relaxed),
            fresh_bytes: self.inner.fresh_bytes.load(Ordering::Relaxed),
            reuses: self.inner.reused.load(Ordering::Relaxed),
            held_bytes: self.inner.held_bytes.load(Ordering::Relaxed),
        }
    }

    /// Free every buffer the pool holds.
    pub fn clear(&self) {
        let mut free = self.inner.free.lock().unwrap_or_else(|e| e.into_inner());
        free.clear();
        self.inner.held_bytes.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::{Block, Pool};

    /// Aligned bytes of the right length in a buffer of 8-byte words.
    fn words(values: &[f64]) -> Vec<u64> {
        values.iter().map(|v| v.to_bits()).collect()
    }

    struct WordBytes(Vec<u64>, usize, usize);
    impl std::ops::Deref for WordBytes {
        type Target = [u8];
        fn deref(&self) -> &[u8] {
            let all = word_bytes(&self.0);
            &all[self.1..self.1 + self.2]
        }
    }

    /// The words' bytes, where they are.
    fn word_bytes(w: &[u64]) -> &[u8] {
        // SAFETY: every u64 is 8 initialized bytes, and u8 has no alignment
        // or validity requirement (`align_to::<u8>` of a `[u64]` is all middle).
        let (head, mid, tail) = unsafe { w.align_to::<u8>() };
        assert!(head.is_empty() && tail.is_empty());
        mid
    }

    #[test]
    fn a_view_reads_its_bytes_and_copies_them_on_the_first_write() {
        let w = words(&[1.0, -2.5, 3.0, 4.0, 5.0, 6.0]);
        let mut b = Block::<f64>::viewing(&[2, 3], Box::new(WordBytes(w.clone(), 0, 48))).expect("aligned");
        assert!(b.is_view());
        assert_eq!(b.as_slice(), &[1.0, -2.5, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(b.len(), 6);
        assert_eq!(b, Pool::<f64>::new().copy_of(&[2, 3], &[1.0, -2.5, 3.0, 4.0, 5.0, 6.0]));
        b.as_mut_slice()[1] = 9.0;
        assert!(!b.is_view());
        assert_eq!(b.as_slice(), &[1.0, 9.0, 3.0, 4.0, 5.0, 6.0]);
        b.reshape(&[3, 2]);
        assert_eq!(b.view().shape(), &[3, 2]);
    }

    #[test]
    fn a_view_needs_aligned_bytes_of_exactly_the_shape() {
        let w = words(&[1.0, 2.0, 3.0]);
        assert!(Block::<f64>::viewing(&[2], Box::new(WordBytes(w.clone(), 4, 16))).is_none(), "misaligned");
        assert!(Block::<f64>::viewing(&[2], Box::new(WordBytes(w.clone(), 0, 24))).is_none(), "too long");
        assert!(Block::<f64>::viewing(&[3], Box::new(WordBytes(w.clone(), 0, 16))).is_none(), "too short");
        // f32 needs 4-byte alignment only.
        let b = Block::<f32>::viewing(&[2], Box::new(WordBytes(w, 4, 8))).expect("4-aligned");
        assert_eq!(b.len(), 2);
    }
}
