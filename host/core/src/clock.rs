//! Time as the runtime sees it: injectable so that expiry and durations are testable.

use chrono::{DateTime, Utc};
use std::sync::Mutex;

/// A source of wall-clock time.
pub trait Clock: Send + Sync + 'static {
    /// The current time, which every expiry and timestamp is computed from.
    fn now(&self) -> DateTime<Utc>;
}

/// A half-open span of time, at or after `since` and strictly before `until`; either end
/// may be open. The audit log's and the approvals list's time filters both mean this, so
/// "at or after, strictly before" is one rule.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimeRange {
    /// The first instant inside the range; `None`: no lower bound.
    pub since: Option<DateTime<Utc>>,
    /// The first instant past the range; `None`: no upper bound.
    pub until: Option<DateTime<Utc>>,
}

impl TimeRange {
    /// Whether `t` lies inside the range.
    pub fn contains(&self, t: DateTime<Utc>) -> bool {
        self.since.is_none_or(|s| t >= s) && self.until.is_none_or(|u| t < u)
    }
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock tests move by hand.
#[derive(Debug)]
pub struct ManualClock(Mutex<DateTime<Utc>>);

impl ManualClock {
    /// Starting at `start`.
    pub fn new(start: DateTime<Utc>) -> Self {
        ManualClock(Mutex::new(start))
    }
    /// Move the clock forward by `by` (expiries then fire without waiting).
    pub fn advance(&self, by: chrono::Duration) {
        let mut t = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *t += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}
