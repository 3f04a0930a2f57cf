//! Typed command-line values: what clap parses before a command runs, so a bad `--since`,
//! `--actor` or `--status` is refused with clap's usage error (exit status 2) naming the
//! flag, and the commands receive values that are already right.

use capgate_core::actor::{ActorKind, ActorRef};
use capgate_core::approval::ApprovalStatus;
use chrono::{DateTime, Utc};
use std::fmt;
use std::str::FromStr;

/// `--since`, `--until`: an RFC 3339 time, kept in UTC.
pub fn rfc3339(value: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(value)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| format!("`{value}` is not an RFC 3339 time (e.g. 2026-11-29T08:00:00Z)"))
}

/// `replay --since`, `--until`: a duration back from now (`7d`, `36h`, `90m`, `30s`, `2w`)
/// or an RFC 3339 time.
pub fn since(value: &str) -> Result<DateTime<Utc>, String> {
    if let Ok(t) = rfc3339(value) {
        return Ok(t);
    }
    let bad = || {
        format!(
            "`{value}` is neither a duration back from now (7d, 36h, 90m) nor an RFC 3339 time (2026-11-29T08:00:00Z)"
        )
    };
    let split = value.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (n, unit) = value.split_at(split);
    let n: i64 = n.parse().map_err(|_| bad())?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        "w" => 604_800,
        _ => return Err(bad()),
    };
    n.checked_mul(seconds)
        .and_then(chrono::TimeDelta::try_seconds)
        .and_then(|d| Utc::now().checked_sub_signed(d))
        .ok_or_else(bad)
}

/// `--actor KIND:ID`: the actor a journal record belongs to.
pub fn actor_ref(value: &str) -> Result<ActorRef, String> {
    let (kind, id) = value
        .split_once(':')
        .ok_or_else(|| format!("`{value}` is not KIND:ID, e.g. user:u_dana"))?;
    let kind = ActorKind::from_str(kind)?;
    if id.is_empty() {
        return Err(format!(
            "`{value}` has no actor id after `{}:`",
            kind.as_str()
        ));
    }
    Ok(ActorRef {
        id: id.to_string(),
        kind,
    })
}

/// `approvals list --status`: one status, or `all`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusFilter(pub Option<ApprovalStatus>);

impl FromStr for StatusFilter {
    type Err = String;
    fn from_str(value: &str) -> Result<Self, String> {
        if value == "all" {
            return Ok(StatusFilter(None));
        }
        ApprovalStatus::parse(value).map(|s| StatusFilter(Some(s))).ok_or_else(|| {
            format!(
                "unknown status `{value}` (pending, approved, rejected, expired, consumed or all)"
            )
        })
    }
}

impl fmt::Display for StatusFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.map_or("all", ApprovalStatus::as_str))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn since_takes_a_duration_back_from_now_or_a_time() {
        let week = super::since("7d").expect("7d");
        let back = chrono::Utc::now() - week;
        assert!(
            back >= chrono::TimeDelta::days(7)
                && back < chrono::TimeDelta::days(7) + chrono::TimeDelta::minutes(1)
        );
        assert_eq!(
            super::since("2026-11-29T08:00:00Z")
                .expect("a time")
                .to_rfc3339(),
            "2026-11-29T08:00:00+00:00"
        );
        for bad in ["7", "d", "7y", "-7d", "", "99999999999999999999d"] {
            assert!(super::since(bad).is_err(), "{bad}");
        }
    }

    use super::*;

    #[test]
    fn times_are_rfc3339_and_kept_in_utc() {
        let t = rfc3339("2026-11-29T09:00:00+01:00").unwrap();
        assert_eq!(t.to_rfc3339(), "2026-11-29T08:00:00+00:00");
        let e = rfc3339("yesterday").unwrap_err();
        assert!(e.contains("is not an RFC 3339 time"), "{e}");
    }

    #[test]
    fn an_actor_is_a_known_kind_and_a_non_empty_id() {
        let a = actor_ref("user:u_dana").unwrap();
        assert_eq!((a.kind, a.id.as_str()), (ActorKind::User, "u_dana"));
        assert!(actor_ref("u_dana").unwrap_err().contains("KIND:ID"));
        assert!(
            actor_ref("robot:r1")
                .unwrap_err()
                .contains("unknown actor kind")
        );
        assert!(actor_ref("user:").is_err());
    }

    #[test]
    fn a_status_filter_is_one_status_or_all() {
        assert_eq!("all".parse(), Ok(StatusFilter(None)));
        let pending: StatusFilter = "pending".parse().unwrap();
        assert_eq!(pending, StatusFilter(Some(ApprovalStatus::Pending)));
        assert_eq!(pending.to_string(), "pending");
        assert!("later".parse::<StatusFilter>().is_err());
    }
}
