//! A deterministic pseudo-random source for tests that drive random sequences of
//! operations against an oracle (state tables, joins, windows, merges): the same seed
//! gives the same sequence on every run and machine, so a failure reproduces.

/// xorshift64: `next(n)` is a value in `0..n`. `seed` must not be zero.
pub fn xorshift(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |n| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    }
}
