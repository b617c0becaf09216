//! What flows along the cluster runtime's timely streams, and how it crosses
//! the wire.
//!
//! A stream carries [`Batch`]es of [`Item`]s. An item is one tuple (key and
//! shared block), one process's replicated tuples ([`Body::Every`], an `Arc`
//! shared by the workers of a process), or a small control record
//! ([`Body::Meta`]). Every item names the worker it goes to (`dest`): an
//! exchange routes on it, so all routing decisions (the optimizer's
//! [`site_of`](tra_optimizer::placement::site_of) for a shuffle, the process
//! leaders for a broadcast) are made in one place, by tra, not by timely.
//!
//! **Bytes on the wire.** [`Batch`] implements timely's `ContainerBytes`
//! itself: a block is written as its shape and its raw element bytes (one
//! `memcpy`), not element by element through serde (ndarray's serde, ~2.5×
//! slower). Between the workers of one process batches move as objects
//! (timely's typed intra-process channels): blocks are shared, not copied.
//!
//! **Received blocks are views.** A block's elements start 8-aligned within
//! its message, and a received block is a view of the bytes the message came
//! in ([`Block::viewing`]), not a copy: the only copies of a block's bytes on
//! the way are the one into the message and the socket's. timely's receive
//! buffer is reused once every block viewing it is gone. (Were a message's
//! bytes not aligned, the block would be copied out as before.)
//!
//! **Small batches.** timely's stock containers close a batch by item count,
//! which, with 4 MiB blocks, makes messages of hundreds of MiB. A [`Batch`]
//! is full once it holds [`BATCH_BYTES`] of payload (or [`BATCH_ITEMS`]
//! items), so a message holds at most about one large block.

use crate::threads::{Block, Elem, Pool, SharedBlock, Tuple};
use std::io::Write;
use std::sync::{Arc, OnceLock};
use timely::container::{Accountable, DrainContainer, PushInto, SizableContainer};
use timely::dataflow::channels::ContainerBytes;
use tra_optimizer::keyexpr::Key;

/// A batch is shipped once its payload reaches this many bytes.
pub const BATCH_BYTES: usize = 1 << 20;
/// … or once it holds this many items.
pub const BATCH_ITEMS: usize = 1024;

/// The payload of an [`Item`].
#[derive(Clone)]
pub enum Body<T: Elem> {
    /// One tuple on one site.
    Tuple(Key, SharedBlock<T>),
    /// The replicated tuples of a relation (every site of the process holds
    /// this one shared copy), sorted by key.
    Every(Arc<Vec<Tuple<T>>>),
    /// One replicated tuple, delivered alone (a broadcast streams its output:
    /// the receiver orders them by key and source site, `tag`).
    EveryTuple(Key, SharedBlock<T>),
    /// A small control record (JSON).
    Meta(Vec<u8>),
}

/// One record of a stream.
#[derive(Clone)]
pub struct Item<T: Elem> {
    /// The worker (site) this item goes to when it crosses an exchange.
    pub dest: u32,
    /// The site it comes from (orders tuples with equal keys the way the
    /// thread runtime does); `EVERY_TAG` for tuples taken from a replicated copy.
    pub tag: u32,
    /// What it carries.
    pub body: Body<T>,
}

/// The tag of tuples that come from a replicated copy (ordered after every site's).
pub const EVERY_TAG: u32 = u32::MAX;

impl<T: Elem> Item<T> {
    /// A tuple.
    pub fn tuple(dest: usize, tag: u32, key: Key, block: SharedBlock<T>) -> Item<T> {
        Item { dest: dest as u32, tag, body: Body::Tuple(key, block) }
    }
    /// A replicated list.
    pub fn every(dest: usize, list: Arc<Vec<Tuple<T>>>) -> Item<T> {
        Item { dest: dest as u32, tag: EVERY_TAG, body: Body::Every(list) }
    }
    /// A control record.
    pub fn meta(dest: usize, tag: u32, bytes: Vec<u8>) -> Item<T> {
        Item { dest: dest as u32, tag, body: Body::Meta(bytes) }
    }

    /// Payload bytes (for batching).
    pub(crate) fn payload_bytes(&self) -> usize {
        let e = std::mem::size_of::<T>();
        match &self.body {
            Body::Tuple(k, b) | Body::EveryTuple(k, b) => 16 + 4 * k.len() + b.len() * e,
            Body::Every(list) => list.iter().map(|(k, b)| 16 + 4 * k.len() + b.len() * e).sum::<usize>() + 16,
            Body::Meta(m) => 16 + m.len(),
        }
    }
}

/// A container of items, closed by payload size (see the module docs).
pub struct Batch<T: Elem> {
    /// The items.
    pub items: Vec<Item<T>>,
    bytes: usize,
}

impl<T: Elem> Clone for Batch<T> {
    fn clone(&self) -> Self {
        Batch { items: self.items.clone(), bytes: self.bytes }
    }
}

impl<T: Elem> Default for Batch<T> {
    fn default() -> Self {
        Batch { items: Vec::new(), bytes: 0 }
    }
}

impl<T: Elem> Batch<T> {
    /// Number of items.
    pub fn len(&self) -> usize {
        self.items.len()
    }
    /// True without items.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
    /// Take the items out, leaving the batch empty.
    pub fn take_items(&mut self) -> Vec<Item<T>> {
        self.bytes = 0;
        std::mem::take(&mut self.items)
    }
}

impl<T: Elem> Accountable for Batch<T> {
    fn record_count(&self) -> i64 {
        self.items.len() as i64
    }
    fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

impl<T: Elem> DrainContainer for Batch<T> {
    type Item<'a> = Item<T>;
    type DrainIter<'a> = std::vec::Drain<'a, Item<T>>;
    fn drain(&mut self) -> Self::DrainIter<'_> {
        self.bytes = 0;
        self.items.drain(..)
    }
}

impl<T: Elem> SizableContainer for Batch<T> {
    fn at_capacity(&self) -> bool {
        self.bytes >= BATCH_BYTES || self.items.len() >= BATCH_ITEMS
    }
    fn ensure_capacity(&mut self, stash: &mut Option<Self>) {
        if self.items.capacity() == 0 {
            if let Some(mut s) = stash.take() {
                s.items.clear();
                s.bytes = 0;
                *self = s;
            }
        }
    }
}

impl<T: Elem> PushInto<Item<T>> for Batch<T> {
    fn push_into(&mut self, item: Item<T>) {
        self.bytes += item.payload_bytes();
        self.items.push(item);
    }
}

// ---------------------------------------------------------------------------
// Bytes.

/// The process-wide block pool of the cluster runtime (blocks decoded from the
/// wire, read from files and made by kernels come from it and return to it).
pub fn pool<T: Elem>() -> &'static Pool<T> {
    static POOLS: OnceLock<(Pool<f32>, Pool<f64>)> = OnceLock::new();
    let pools = POOLS.get_or_init(|| (Pool::new(), Pool::new()));
    let any: &dyn std::any::Any = match T::DTYPE {
        crate::threads::Dtype::F32 => &pools.0,
        crate::threads::Dtype::F64 => &pools.1,
    };
    any.downcast_ref::<Pool<T>>().expect("the pool of the element type")
}

/// The elements of a block as bytes (native byte order; f32 and f64 have no
/// padding and every bit pattern is a value).
pub fn elem_bytes<T: Elem>(data: &[T]) -> &[u8] {
    assert_eq!(std::mem::size_of::<T>(), T::DTYPE.size());
    // SAFETY: T is f32 or f64 (Elem's dtype sizes match): plain old data.
    unsafe { std::slice::from_raw_parts(data.as_ptr() as *const u8, std::mem::size_of_val(data)) }
}

/// The elements of a block as writable bytes.
pub fn elem_bytes_mut<T: Elem>(data: &mut [T]) -> &mut [u8] {
    assert_eq!(std::mem::size_of::<T>(), T::DTYPE.size());
    // SAFETY: as above; every byte pattern is a valid f32/f64.
    unsafe { std::slice::from_raw_parts_mut(data.as_mut_ptr() as *mut u8, std::mem::size_of_val(data)) }
}

const KIND_TUPLE: u32 = 0;
const KIND_EVERY: u32 = 1;
const KIND_META: u32 = 2;
const KIND_EVERY_TUPLE: u32 = 3;

fn key_len(k: &Key) -> usize {
    4 + 4 * k.len()
}

/// Zero bytes that bring `at` to a multiple of 8.
fn pad_to_8(at: usize) -> usize {
    ((at + 7) & !7) - at
}

/// The bytes of a block written at offset `at` of a batch: rank, shape, the
/// padding that aligns its elements, the elements.
fn block_len<T: Elem>(at: usize, b: &Block<T>) -> usize {
    let head = 4 + 8 * b.shape().len();
    head + pad_to_8(at + head) + b.len() * std::mem::size_of::<T>()
}

fn encoded_len<T: Elem>(items: &[Item<T>]) -> usize {
    let mut n = 8;
    for it in items {
        n += 12;
        match &it.body {
            Body::Tuple(k, b) | Body::EveryTuple(k, b) => {
                n += key_len(k);
                n += block_len(n, b);
            }
            Body::Every(list) => {
                n += 8;
                for (k, b) in list.iter() {
                    n += key_len(k);
                    n += block_len(n, b);
                }
            }
            Body::Meta(m) => n += 8 + m.len(),
        }
    }
    n + pad_to_8(n)
}

fn put_key<W: Write>(w: &mut W, k: &Key) {
    w.write_all(&(k.len() as u32).to_le_bytes()).expect("write");
    for c in k {
        w.write_all(&c.to_le_bytes()).expect("write");
    }
}

/// Write a block at offset `at` of a batch; answers the bytes written.
fn put_block<T: Elem, W: Write>(w: &mut W, at: usize, b: &Block<T>) -> usize {
    w.write_all(&(b.shape().len() as u32).to_le_bytes()).expect("write");
    for &d in b.shape() {
        w.write_all(&(d as u64).to_le_bytes()).expect("write");
    }
    let head = 4 + 8 * b.shape().len();
    w.write_all(&[0u8; 8][..pad_to_8(at + head)]).expect("write");
    w.write_all(elem_bytes(b.as_slice())).expect("write");
    block_len(at, b)
}

/// Reads a batch from the bytes of its message, peeling off what it reads.
struct Cursor {
    rest: timely::bytes::arc::Bytes,
    /// Bytes read so far (the offset in the batch).
    at: usize,
}

impl Cursor {
    /// The next `n` bytes, as bytes of the same buffer.
    fn advance(&mut self, n: usize) -> timely::bytes::arc::Bytes {
        assert!(self.rest.len() >= n, "cluster wire: truncated batch");
        self.at += n;
        self.rest.extract_to(n)
    }
    fn array<const N: usize>(&mut self) -> [u8; N] {
        self.advance(N)[..].try_into().expect("N bytes")
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.array())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.array())
    }
    fn key(&mut self) -> Key {
        let n = self.u32() as usize;
        (0..n).map(|_| self.u32()).collect()
    }
    /// A block: a view of its bytes in the message (see the module docs), or
    /// a pooled copy of them where they are not aligned for `T`.
    fn block<T: Elem>(&mut self) -> Block<T> {
        let rank = self.u32() as usize;
        let shape: Vec<usize> = (0..rank).map(|_| self.u64() as usize).collect();
        self.advance(pad_to_8(self.at));
        let n = shape.iter().product::<usize>() * std::mem::size_of::<T>();
        let data = self.advance(n);
        Block::viewing(&shape, Box::new(data.clone())).unwrap_or_else(|| {
            let mut b = pool::<T>().take(&shape);
            elem_bytes_mut(b.as_mut_slice()).copy_from_slice(&data);
            b
        })
    }
}

impl<T: Elem> ContainerBytes for Batch<T> {
    fn from_bytes(bytes: timely::bytes::arc::Bytes) -> Self {
        let mut c = Cursor { rest: bytes, at: 0 };
        let n = c.u64() as usize;
        let mut batch = Batch { items: Vec::with_capacity(n), bytes: 0 };
        for _ in 0..n {
            let dest = c.u32();
            let tag = c.u32();
            let body = match c.u32() {
                KIND_TUPLE => {
                    let k = c.key();
                    Body::Tuple(k, Arc::new(c.block()))
                }
                KIND_EVERY_TUPLE => {
                    let k = c.key();
                    Body::EveryTuple(k, Arc::new(c.block()))
                }
                KIND_EVERY => {
                    let m = c.u64() as usize;
                    let mut list = Vec::with_capacity(m);
                    for _ in 0..m {
                        let k = c.key();
                        list.push((k, Arc::new(c.block())));
                    }
                    Body::Every(Arc::new(list))
                }
                KIND_META => {
                    let m = c.u64() as usize;
                    Body::Meta(c.advance(m).to_vec())
                }
                other => panic!("cluster wire: unknown item kind {other}"),
            };
            batch.push_into(Item { dest, tag, body });
        }
        batch
    }

    fn length_in_bytes(&self) -> usize {
        encoded_len(&self.items)
    }

    fn into_bytes<W: Write>(&self, w: &mut W) {
        w.write_all(&(self.items.len() as u64).to_le_bytes()).expect("write");
        let mut written = 8;
        for it in &self.items {
            w.write_all(&it.dest.to_le_bytes()).expect("write");
            w.write_all(&it.tag.to_le_bytes()).expect("write");
            written += 12;
            match &it.body {
                Body::Tuple(k, b) => {
                    w.write_all(&KIND_TUPLE.to_le_bytes()).expect("write");
                    put_key(w, k);
                    written += key_len(k);
                    written += put_block(w, written, b);
                }
                Body::EveryTuple(k, b) => {
                    w.write_all(&KIND_EVERY_TUPLE.to_le_bytes()).expect("write");
                    put_key(w, k);
                    written += key_len(k);
                    written += put_block(w, written, b);
                }
                Body::Every(list) => {
                    w.write_all(&KIND_EVERY.to_le_bytes()).expect("write");
                    w.write_all(&(list.len() as u64).to_le_bytes()).expect("write");
                    written += 8;
                    for (k, b) in list.iter() {
                        put_key(w, k);
                        written += key_len(k);
                        written += put_block(w, written, b);
                    }
                }
                Body::Meta(m) => {
                    w.write_all(&KIND_META.to_le_bytes()).expect("write");
                    w.write_all(&(m.len() as u64).to_le_bytes()).expect("write");
                    w.write_all(m).expect("write");
                    written += 8 + m.len();
                }
            }
        }
        w.write_all(&[0u8; 8][..pad_to_8(written)]).expect("write");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let p = pool::<f32>();
        let b = Arc::new(p.copy_of(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.5]));
        let mut batch = Batch::<f32>::default();
        batch.push_into(Item::tuple(3, 1, vec![1, 2], b.clone()));
        batch.push_into(Item::every(0, Arc::new(vec![(vec![0], b.clone()), (vec![7], b.clone())])));
        batch.push_into(Item::meta(2, 5, b"{\"x\":1}".to_vec()));
        batch.push_into(Item { dest: 1, tag: 2, body: Body::EveryTuple(vec![4], b.clone()) });
        let mut bytes = Vec::new();
        batch.into_bytes(&mut bytes);
        assert_eq!(bytes.len(), batch.length_in_bytes());
        let back = Batch::<f32>::from_bytes(aligned_bytes(&bytes));
        assert_eq!(back.len(), 4);
        for it in &back.items {
            match &it.body {
                Body::Tuple(_, b) | Body::EveryTuple(_, b) => {
                    assert!(b.is_view(), "a received block views its message")
                }
                Body::Every(l) => assert!(l.iter().all(|t| t.1.is_view())),
                Body::Meta(_) => {}
            }
        }
        assert!(matches!(&back.items[3].body, Body::EveryTuple(k, bb) if k == &vec![4] && **bb == *b));
        match (&back.items[0].body, back.items[0].dest, back.items[0].tag) {
            (Body::Tuple(k, bb), 3, 1) => {
                assert_eq!(k, &vec![1, 2]);
                assert_eq!(**bb, *b);
            }
            _ => panic!("tuple"),
        }
        match &back.items[1].body {
            Body::Every(l) => assert_eq!(l.iter().map(|t| t.0.clone()).collect::<Vec<_>>(), vec![vec![0], vec![7]]),
            _ => panic!("every"),
        }
        match &back.items[2].body {
            Body::Meta(m) => assert_eq!(m, b"{\"x\":1}"),
            _ => panic!("meta"),
        }
    }

    /// Message bytes in a buffer aligned like timely's (its slabs start
    /// 8-aligned and hold messages of multiples of 8 bytes).
    fn aligned_bytes(bytes: &[u8]) -> timely::bytes::arc::Bytes {
        let mut buf = vec![0u8; bytes.len() + 8];
        let skip = pad_to_8(buf.as_ptr() as usize);
        buf[skip..skip + bytes.len()].copy_from_slice(bytes);
        let mut all = timely::bytes::arc::BytesMut::from(buf).freeze();
        all.extract_to(skip);
        all.extract_to(bytes.len())
    }

    /// Blocks of either element type, after keys of any length, come back
    /// equal, and as views when the message is aligned; a message that is not
    /// (one byte off) still decodes, by copying.
    #[test]
    fn received_blocks_view_aligned_messages_and_copy_others() {
        let p = pool::<f64>();
        for key_len in 0..4u32 {
            let b = Arc::new(p.copy_of(&[3, 5], &(0..15).map(|i| i as f64 * 0.5 - 2.0).collect::<Vec<_>>()));
            let mut batch = Batch::<f64>::default();
            batch.push_into(Item::tuple(1, 0, (0..key_len).collect(), b.clone()));
            batch.push_into(Item::meta(0, 0, vec![1, 2, 3]));
            batch.push_into(Item::tuple(1, 0, vec![9], Arc::new(p.copy_of(&[1], &[7.0]))));
            let mut bytes = Vec::new();
            batch.into_bytes(&mut bytes);
            assert_eq!(bytes.len(), batch.length_in_bytes());
            assert_eq!(bytes.len() % 8, 0);
            let back = Batch::<f64>::from_bytes(aligned_bytes(&bytes));
            let Body::Tuple(k, got) = &back.items[0].body else { panic!("tuple") };
            assert_eq!((k.len(), &**got), (key_len as usize, &*b));
            assert!(got.is_view());
            let Body::Tuple(_, one) = &back.items[2].body else { panic!("tuple") };
            assert_eq!(one.as_slice(), &[7.0]);
            // One byte off: the elements are not 8-aligned; decoded by copying.
            let mut shifted = vec![0u8; 1];
            shifted.extend_from_slice(&bytes);
            let mut odd = aligned_bytes(&shifted);
            odd.extract_to(1);
            let back = Batch::<f64>::from_bytes(odd);
            let Body::Tuple(_, got) = &back.items[0].body else { panic!("tuple") };
            assert_eq!(&**got, &*b);
            assert!(!got.is_view());
        }
    }

    #[test]
    fn batches_close_by_bytes() {
        let p = pool::<f64>();
        let big = Arc::new(p.zeros(&[256, 1024])); // 2 MiB
        let mut batch = Batch::<f64>::default();
        batch.push_into(Item::tuple(0, 0, vec![0], big));
        assert!(batch.at_capacity());
        let mut small = Batch::<f64>::default();
        small.push_into(Item::tuple(0, 0, vec![0], Arc::new(p.zeros(&[4]))));
        assert!(!small.at_capacity());
    }
}
