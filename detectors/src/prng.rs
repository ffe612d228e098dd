//! The workspace's one seeded generator and its two small hashes.
//!
//! - [`SplitMix64`]: a seeded pseudo-random generator (Steele, Lea and Flood's splitmix64).
//!   Scenario traces, the demo, the load generator, benchmarks and statistical tests draw from
//!   it, so a seed gives the same sequence on every platform and in every crate.
//! - [`mix`]: the splitmix64 output function on its own, a bijective 64-bit mix used as a hash
//!   of integers (a key id to a shard, say).
//! - [`fnv1a64`]: 64-bit FNV-1a over bytes, the hash Alertmanager uses for label-set
//!   fingerprints.
//!
//! None of them is cryptographic. They live in this crate because the agent and the end-to-end
//! tests both depend on it; the sequences are part of what makes traces and golden outputs
//! reproducible, so changing any constant here changes every seeded trace.

/// The splitmix64 increment: 2^64 divided by the golden ratio, rounded to an odd number.
pub const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// FNV-1a 64-bit offset basis.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a 64-bit prime.
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// splitmix64: adds [`GOLDEN_GAMMA`] to its state at each step and returns [`mix`] of the new
/// state. Small, fast, passes BigCrush, and identical on every platform.
///
/// Deliberately not `Copy`: a silent copy would replay the same numbers twice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose state is `state`; the first output is `mix(state + GOLDEN_GAMMA)`.
    pub const fn new(state: u64) -> Self {
        SplitMix64 { state }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN_GAMMA);
        mix(self.state)
    }

    /// Uniform in [0, 1): the top 53 bits of [`Self::next_u64`], so every value is a multiple
    /// of 2⁻⁵³ and exactly representable.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0..n` for `n > 0` (0 for `n == 0`), by multiplying the top 32 bits with `n`:
    /// no division, and bias below 2⁻³² · n for the small ranges it is meant for.
    pub fn below(&mut self, n: usize) -> usize {
        (((self.next_u64() >> 32) * n as u64) >> 32) as usize
    }
}

/// The splitmix64 output function: a bijection on `u64` whose output bits each depend on every
/// input bit. Used as a fast, stable hash of integers.
pub const fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// 64-bit FNV-1a of `bytes`. Callers that hash several fields feed each one (and a separator)
/// through [`fnv1a64_extend`] to avoid building a buffer.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    fnv1a64_extend(FNV_OFFSET, bytes)
}

/// Continues an FNV-1a hash `h` (an earlier result, or the hash of nothing, `fnv1a64(&[])`)
/// over `bytes`: `fnv1a64_extend(fnv1a64(a), b) == fnv1a64(a ++ b)`.
pub fn fnv1a64_extend(h: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(h, |h, &b| (h ^ u64::from(b)).wrapping_mul(FNV_PRIME))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_matches_the_reference_sequence() {
        // Reference outputs of splitmix64 seeded with 0 (Vigna's splitmix64.c).
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(r.next_u64(), 0x06c4_5d18_8009_454f);
    }

    #[test]
    fn next_f64_is_in_the_unit_interval_and_below_is_in_range() {
        let mut r = SplitMix64::new(42);
        for _ in 0..10_000 {
            let u = r.next_f64();
            assert!((0.0..1.0).contains(&u), "{u}");
            assert!(r.below(7) < 7);
        }
        assert_eq!(r.below(0), 0);
    }

    #[test]
    fn the_first_output_is_the_mix_of_the_first_state() {
        let mut r = SplitMix64::new(5);
        assert_eq!(r.next_u64(), mix(5u64.wrapping_add(GOLDEN_GAMMA)));
    }

    #[test]
    fn fnv1a64_matches_published_vectors_and_extends() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x85944171f73967e8);
        assert_eq!(fnv1a64_extend(fnv1a64(b"foo"), b"bar"), fnv1a64(b"foobar"));
    }
}
