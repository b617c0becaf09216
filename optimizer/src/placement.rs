//! The placement function: which site a tuple lives on when a relation is
//! hash-partitioned on key dims `D`. One fixed, deterministic function shared by
//! the optimizer (to count partial aggregates exactly) and every executor (to
//! route tuples), so that a key lands where the optimizer predicted.

/// Mix one 64-bit word (the finaliser of SplitMix64): every input bit affects
/// every output bit, so routing on the low bits (as timely does) is fine.
#[inline]
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The 64-bit hash of the key components at `dims`, in that order.
#[inline]
pub fn hash_dims(key: &[u32], dims: &[usize]) -> u64 {
    let mut h: u64 = 0x9e37_79b9_7f4a_7c15;
    for &d in dims {
        h = mix(h ^ u64::from(key[d]).wrapping_add(0x632b_e59b_d9b4_e019));
    }
    h
}

/// The site of a tuple with key `key` in a relation hashed on `dims` over
/// `sites` sites. With `dims` empty every tuple goes to one site.
#[inline]
pub fn site_of(key: &[u32], dims: &[usize], sites: usize) -> usize {
    debug_assert!(sites > 0);
    (hash_dims(key, dims) % sites as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_spread() {
        let mut counts = [0usize; 7];
        for a in 0..50u32 {
            for b in 0..50u32 {
                let s = site_of(&[a, b], &[0, 1], 7);
                assert_eq!(s, site_of(&[a, b, 9], &[0, 1], 7));
                counts[s] += 1;
            }
        }
        // 2500 keys over 7 sites: each gets a fair share.
        assert!(counts.iter().all(|&c| c > 250 && c < 470), "{counts:?}");
    }

    #[test]
    fn order_of_dims_matters_only_through_values() {
        assert_eq!(site_of(&[3, 5], &[0], 4), site_of(&[3, 9], &[0], 4));
        assert_eq!(site_of(&[3, 5], &[1], 4), site_of(&[5, 3], &[0], 4));
    }
}
