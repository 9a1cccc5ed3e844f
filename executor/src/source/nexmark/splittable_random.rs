//! `java.util.SplittableRandom`, bit-exact (OpenJDK 17: SplitMix64 with the golden
//! gamma). The Flink Nexmark harness seeds one per event from (seed, event index), so
//! Weir's `splittable-random` events equal the harness's on any machine.

const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

pub struct SplittableRandom {
    seed: u64,
}

impl SplittableRandom {
    pub fn new(seed: i64) -> Self {
        Self { seed: seed as u64 }
    }

    fn next_seed(&mut self) -> u64 {
        self.seed = self.seed.wrapping_add(GOLDEN_GAMMA);
        self.seed
    }

    fn mix64(mut z: u64) -> u64 {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn mix32(mut z: u64) -> i32 {
        z = (z ^ (z >> 33)).wrapping_mul(0x62a9_d9ed_7997_05f5);
        ((z ^ (z >> 28)).wrapping_mul(0xcb24_d0a5_c88c_35b3) >> 32) as u32 as i32
    }

    pub fn next_int(&mut self) -> i32 {
        Self::mix32(self.next_seed())
    }

    pub fn next_long(&mut self) -> i64 {
        Self::mix64(self.next_seed()) as i64
    }

    /// Uniform in `0..bound` (`bound > 0`), by Java's rejection loop.
    pub fn next_int_bounded(&mut self, bound: i32) -> i32 {
        let m = bound - 1;
        let r = self.next_int();
        if bound & m == 0 {
            return r & m;
        }
        let mut u = ((r as u32) >> 1) as i32;
        loop {
            let r = u % bound;
            // Java: `u + m - r < 0` in 32-bit arithmetic rejects the over-represented tail.
            if u.wrapping_add(m).wrapping_sub(r) >= 0 {
                return r;
            }
            u = ((self.next_int() as u32) >> 1) as i32;
        }
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    pub fn next_double(&mut self) -> f64 {
        ((self.next_long() as u64) >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values printed by OpenJDK 17's `SplittableRandom` (seeds 42 and 7).
    #[test]
    fn matches_java() {
        let mut r = SplittableRandom::new(42);
        assert_eq!(r.next_long(), -4767286540954276203);
        assert_eq!(r.next_int(), 909395113);
        assert_eq!(r.next_int_bounded(10), 1);
        assert_eq!(r.next_int_bounded(16), 8);
        assert_eq!(r.next_double(), 0.03803016854024621);
        // Many bounds, so that the rejection loop runs too.
        let mut s = SplittableRandom::new(7);
        let mut h: i64 = 0;
        for i in 0..100_000 {
            h = h
                .wrapping_mul(31)
                .wrapping_add(s.next_int_bounded(1 + (i % 1000)) as i64);
        }
        assert_eq!(h, 1354585595460206502);
    }
}
