//! The report for people: a title, one row per change, and a summary line.
//!
//! The words are the contract's; laying the rows out in columns is left to the caller (the
//! `capgate` binary pads them as every table it prints), so this crate has no text-layout
//! code of its own.

use super::{Report, Summary};
use std::fmt;

/// The columns of the change table, one row per change.
pub const TABLE_HEADERS: [&str; 5] = ["CAPABILITY", "STATUS", "IMPACT", "FIELD", "CHANGE"];

impl Report {
    /// One row per change under [`TABLE_HEADERS`]: a capability's id and status on its
    /// first change only, then each change's impact, field and detail.
    pub fn table_rows(&self) -> Vec<Vec<String>> {
        let mut rows = Vec::new();
        for c in &self.capabilities {
            for (i, ch) in c.changes.iter().enumerate() {
                let first = i == 0;
                rows.push(vec![
                    if first { c.id.clone() } else { String::new() },
                    if first {
                        c.status.as_str().to_string()
                    } else {
                        String::new()
                    },
                    ch.impact.as_str().to_string(),
                    ch.field.clone(),
                    ch.detail.clone(),
                ]);
            }
        }
        rows
    }

    /// The table for people: a title naming both sides and the surfaces, the rows of
    /// [`Report::table_rows`] laid out by `columns` (given the headers and the rows), then
    /// the [`Summary`] line.
    pub fn render_table(&self, columns: impl FnOnce(&[&str], &[Vec<String>]) -> String) -> String {
        let mut out = format!(
            "contract diff {} → {} (surfaces: {})\n\n",
            self.old,
            self.new,
            self.surfaces.join(", ")
        );
        if self.capabilities.is_empty() {
            out.push_str("no capability changed\n");
        } else {
            out.push_str(&columns(&TABLE_HEADERS, &self.table_rows()));
        }
        out.push_str(&format!("\n{}\n", self.summary));
        out
    }
}

/// The summary line: `1 added, 0 removed, 2 changed, 5 unchanged; 1 breaking change(s),
/// 2 additive`.
impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} added, {} removed, {} changed, {} unchanged; {} breaking change(s), {} additive",
            self.added,
            self.removed,
            self.changed,
            self.unchanged,
            self.breaking_changes,
            self.additive_changes
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::diff::diff;
    use crate::testing::{changed, contract, descriptor};
    use capgate_core::actor::Surface;
    use capgate_core::meta::Risk;

    /// Columns as `|`-joined cells, enough to see which cells the report fills.
    fn bars(headers: &[&str], rows: &[Vec<String>]) -> String {
        let mut out = headers.join("|");
        for row in rows {
            out.push('\n');
            out.push_str(&row.join("|"));
        }
        out.push('\n');
        out
    }

    #[test]
    fn the_table_names_a_capability_on_its_first_change_only_and_ends_with_a_summary() {
        let t = changed(|d| {
            d.risk = Risk::Critical;
            d.description = "x".into();
        })
        .render_table(bars);
        assert_eq!(
            t,
            "contract diff old → new (surfaces: aiSdk)\n\n\
             CAPABILITY|STATUS|IMPACT|FIELD|CHANGE\n\
             orders.refund|changed|additive|description|description changed (what the model reads)\n\
             ||breaking|risk|risk raised: high → critical\n\
             \n0 added, 0 removed, 1 changed, 0 unchanged; 1 breaking change(s), 1 additive\n"
        );
    }

    #[test]
    fn an_empty_diff_says_so_and_lays_out_no_columns() {
        let c = contract(&[(Surface::AiSdk, vec![descriptor("orders.refund")])]);
        let t = diff(&c, &c, "old", "new").render_table(|_, _| unreachable!("no rows"));
        assert_eq!(
            t,
            "contract diff old → new (surfaces: aiSdk)\n\nno capability changed\n\n\
             0 added, 0 removed, 0 changed, 1 unchanged; 0 breaking change(s), 0 additive\n"
        );
    }
}
