//! One master seed derives every other: turmoil's, the server's, each worker's.
//!
//! Each subsystem gets its own stream, so adding a draw in one place never
//! shifts the draws of another (TigerBeetle's VOPR does the same).

/// SplitMix64's finaliser: a fast, well-mixed bijection on `u64`.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The seed of stream `name`, instance `index`, under `master`.
pub fn derive(master: u64, name: &str, index: u64) -> u64 {
    let mut h = mix(master);
    for b in name.bytes() {
        h = mix(h ^ b as u64);
    }
    mix(h ^ index)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_distinct_and_stable() {
        assert_eq!(derive(7, "worker", 0), derive(7, "worker", 0));
        assert_ne!(derive(7, "worker", 0), derive(7, "worker", 1));
        assert_ne!(derive(7, "worker", 0), derive(7, "server", 0));
        assert_ne!(derive(7, "worker", 0), derive(8, "worker", 0));
    }
}
