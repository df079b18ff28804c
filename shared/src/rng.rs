//! SplitMix64 (Steele, Lea & Flood 2014), the crate's one random-number generator: a fixed
//! output sequence on every platform, wasm included, so seeded splits, perturbations and dropout
//! masks are reproducible everywhere without a dependency.

/// The generator's state advance, the golden-ratio increment.
const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's output function: a well-mixed 64-bit hash of `z`. Counter-based users (the
/// dropout mask, one element per index) call it directly.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The `i`-th output of a generator seeded with `seed`, without stepping through the others.
pub fn nth(seed: u64, i: u64) -> u64 {
    mix(seed.wrapping_add(i.wrapping_mul(GOLDEN_GAMMA)))
}

#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN_GAMMA);
        mix(self.state)
    }

    /// A number in `0..n` (0 when `n` is 0), by multiply-shift: no division, and a bias of at
    /// most `n / 2^64`.
    pub fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_sequence() {
        // First outputs for seed 1234567 from the reference C implementation (Vigna, splitmix64.c).
        let mut rng = SplitMix64::new(1234567);
        let got: Vec<u64> = (0..3).map(|_| rng.next_u64()).collect();
        assert_eq!(got, [6457827717110365317, 3203168211198807973, 9817491932198370423]);
    }

    #[test]
    fn nth_is_the_sequence_without_stepping() {
        let mut rng = SplitMix64::new(99);
        for i in 1..5 {
            assert_eq!(rng.next_u64(), nth(99, i));
        }
    }
}
