//! Restart decisions per job: Flink's `none`, `fixed-delay`, `failure-rate` and
//! `exponential-delay` strategies. Pure logic over failure times, so it is unit-tested
//! without a running job.

use super::config::RestartStrategy;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct RestartTracker {
    strategy: RestartStrategy,
    /// Restarts granted so far (for `fixed-delay` and `SHOW JOBS`).
    pub restarts: u32,
    failures: VecDeque<Instant>,
    backoff: Option<Duration>,
    attempts_since_reset: u32,
    last_failure: Option<Instant>,
}

impl RestartTracker {
    pub fn new(strategy: RestartStrategy) -> Self {
        Self {
            strategy,
            restarts: 0,
            failures: VecDeque::new(),
            backoff: None,
            attempts_since_reset: 0,
            last_failure: None,
        }
    }

    /// Records a failure at `now` and returns the delay before restarting, or `None`
    /// when the strategy gives up (the job becomes FAILED).
    pub fn on_failure(&mut self, now: Instant, jitter: f64) -> Option<Duration> {
        let previous = self.last_failure.replace(now);
        let decision = match &self.strategy {
            RestartStrategy::None => None,
            RestartStrategy::FixedDelay { attempts, delay } => {
                (self.restarts < *attempts).then_some(*delay)
            }
            RestartStrategy::FailureRate {
                max_failures_per_interval,
                interval,
                delay,
            } => {
                self.failures.push_back(now);
                while let Some(&f) = self.failures.front() {
                    if now.duration_since(f) > *interval {
                        self.failures.pop_front();
                    } else {
                        break;
                    }
                }
                (self.failures.len() as u32 <= *max_failures_per_interval).then_some(*delay)
            }
            RestartStrategy::ExponentialDelay {
                initial_backoff,
                max_backoff,
                multiplier,
                reset_backoff_threshold,
                jitter_factor,
                attempts_before_reset,
            } => {
                // A job that ran long enough since its last failure starts over.
                if previous.is_some_and(|p| now.duration_since(p) >= *reset_backoff_threshold) {
                    self.backoff = None;
                    self.attempts_since_reset = 0;
                }
                if self.attempts_since_reset >= *attempts_before_reset {
                    None
                } else {
                    let next = match self.backoff {
                        None => *initial_backoff,
                        Some(b) => b.mul_f64(*multiplier).min(*max_backoff),
                    };
                    self.backoff = Some(next);
                    self.attempts_since_reset += 1;
                    // jitter in [-factor, +factor] of the backoff
                    let j = 1.0 + jitter_factor * (2.0 * jitter.clamp(0.0, 1.0) - 1.0);
                    Some(next.mul_f64(j.max(0.0)))
                }
            }
        };
        if decision.is_some() {
            self.restarts += 1;
        }
        decision
    }

    /// A statement resumed the job: start counting afresh.
    pub fn reset(&mut self) {
        self.failures.clear();
        self.backoff = None;
        self.attempts_since_reset = 0;
        self.last_failure = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_delay_gives_up_after_attempts() {
        let mut t = RestartTracker::new(RestartStrategy::FixedDelay {
            attempts: 2,
            delay: Duration::from_millis(10),
        });
        let now = Instant::now();
        assert_eq!(t.on_failure(now, 0.5), Some(Duration::from_millis(10)));
        assert_eq!(t.on_failure(now, 0.5), Some(Duration::from_millis(10)));
        assert_eq!(t.on_failure(now, 0.5), None);
        assert_eq!(t.restarts, 2);
    }

    #[test]
    fn failure_rate_counts_only_failures_inside_the_interval() {
        let mut t = RestartTracker::new(RestartStrategy::FailureRate {
            max_failures_per_interval: 2,
            interval: Duration::from_secs(10),
            delay: Duration::ZERO,
        });
        let t0 = Instant::now();
        assert!(t.on_failure(t0, 0.5).is_some());
        assert!(t.on_failure(t0 + Duration::from_secs(1), 0.5).is_some());
        assert!(t.on_failure(t0 + Duration::from_secs(2), 0.5).is_none());
        let mut t = RestartTracker::new(RestartStrategy::FailureRate {
            max_failures_per_interval: 2,
            interval: Duration::from_secs(10),
            delay: Duration::ZERO,
        });
        assert!(t.on_failure(t0, 0.5).is_some());
        assert!(t.on_failure(t0 + Duration::from_secs(1), 0.5).is_some());
        assert!(t.on_failure(t0 + Duration::from_secs(20), 0.5).is_some());
    }

    #[test]
    fn exponential_delay_grows_caps_and_resets() {
        let mut t = RestartTracker::new(RestartStrategy::ExponentialDelay {
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(3),
            multiplier: 2.0,
            reset_backoff_threshold: Duration::from_secs(100),
            jitter_factor: 0.0,
            attempts_before_reset: u32::MAX,
        });
        let t0 = Instant::now();
        let d: Vec<_> = (0..4)
            .map(|i| {
                t.on_failure(t0 + Duration::from_secs(i), 0.5)
                    .unwrap()
                    .as_secs()
            })
            .collect();
        assert_eq!(d, vec![1, 2, 3, 3]);
        assert_eq!(
            t.on_failure(t0 + Duration::from_secs(500), 0.5),
            Some(Duration::from_secs(1))
        );
    }

    #[test]
    fn exponential_jitter_stays_within_factor() {
        let mut t = RestartTracker::new(RestartStrategy::ExponentialDelay {
            initial_backoff: Duration::from_secs(10),
            max_backoff: Duration::from_secs(60),
            multiplier: 1.5,
            reset_backoff_threshold: Duration::from_secs(3600),
            jitter_factor: 0.1,
            attempts_before_reset: u32::MAX,
        });
        let d = t.on_failure(Instant::now(), 1.0).unwrap();
        assert_eq!(d, Duration::from_secs(11));
    }

    #[test]
    fn none_never_restarts() {
        let mut t = RestartTracker::new(RestartStrategy::None);
        assert_eq!(t.on_failure(Instant::now(), 0.5), None);
    }
}
