//! A cheaper hasher for turmoil's hot internal maps (patched).
//!
//! The maps keyed by addresses (hosts, links, sockets, segments) are looked
//! up for every message and every socket operation, and the default
//! `RandomState` (SipHash-1-3) was about 4% of a busy simulation's time.
//! These keys come from the simulation itself, not from an attacker, so
//! resistance to hash flooding buys nothing here. `IndexMap` iterates in
//! insertion order whatever its hasher, so the simulation is unchanged.

use std::hash::{BuildHasherDefault, Hasher};

/// An `IndexMap` hashed with [`FxHasher`].
pub(crate) type FastMap<K, V> = indexmap::IndexMap<K, V, BuildHasherDefault<FxHasher>>;

/// The multiply-rotate hash of rustc's `FxHasher`: one rotate, one xor and
/// one multiply per word.
#[derive(Default, Clone, Copy)]
pub(crate) struct FxHasher {
    hash: u64,
}

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.add(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}
