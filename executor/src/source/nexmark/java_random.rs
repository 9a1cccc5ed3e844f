//! `java.util.Random`, bit-exact (OpenJDK's 48-bit linear congruential generator).
//! The Nexmark generator seeds one per event with the event id, so the same event
//! index always yields the same event, on any machine and after any restart.

const MULT: u64 = 0x5_DEEC_E66D;
const ADD: u64 = 0xB;
const MASK: u64 = (1 << 48) - 1;

pub struct JavaRandom {
    state: u64,
}

impl JavaRandom {
    pub fn new(seed: i64) -> Self {
        Self {
            state: (seed as u64 ^ MULT) & MASK,
        }
    }

    fn next(&mut self, bits: u32) -> i32 {
        self.state = (self.state.wrapping_mul(MULT).wrapping_add(ADD)) & MASK;
        (self.state >> (48 - bits)) as u32 as i32
    }

    pub fn next_int(&mut self) -> i32 {
        self.next(32)
    }

    /// Uniform in `0..bound` (`bound > 0`).
    pub fn next_int_bounded(&mut self, bound: i32) -> i32 {
        let mut r = self.next(31);
        let m = bound - 1;
        if bound & m == 0 {
            return ((bound as i64 * r as i64) >> 31) as i32;
        }
        let mut u = r;
        loop {
            r = u % bound;
            if u.wrapping_sub(r).wrapping_add(m) >= 0 {
                return r;
            }
            u = self.next(31);
        }
    }

    pub fn next_long(&mut self) -> i64 {
        ((self.next(32) as i64) << 32).wrapping_add(self.next(32) as i64)
    }

    pub fn next_double(&mut self) -> f64 {
        (((self.next(26) as i64) << 27) + self.next(27) as i64) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::JavaRandom;

    /// Values printed by a JVM.
    #[test]
    fn matches_java() {
        assert_eq!(JavaRandom::new(0).next_int(), -1155484576);
        assert_eq!(JavaRandom::new(42).next_int(), -1170105035);
        assert_eq!(JavaRandom::new(42).next_int_bounded(10), 0);
        assert_eq!(JavaRandom::new(0).next_long(), -4962768465676381896);
        assert_eq!(JavaRandom::new(0).next_double(), 0.730967787376657);
    }
}
