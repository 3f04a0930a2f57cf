//! Plain-text tables for the commands a person reads (`contract diff`, `inspect`): columns
//! padded to their widest cell, two spaces apart, no trailing spaces.

/// How a command prints what it found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A table for people.
    Table,
    /// JSON for programs (a documented, stable shape).
    Json,
}

/// `headers` then `rows`, each column as wide as its widest cell.
pub fn render(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut out = String::new();
        for (i, cell) in cells.enumerate() {
            if i > 0 {
                out.push_str("  ");
            }
            out.push_str(cell);
            let pad = widths.get(i).copied().unwrap_or(0);
            out.extend(std::iter::repeat_n(
                ' ',
                pad.saturating_sub(cell.chars().count()),
            ));
        }
        let mut out = out.trim_end().to_string();
        out.push('\n');
        out
    };
    let mut out = line(&mut headers.iter().copied());
    for row in rows {
        out.push_str(&line(&mut row.iter().map(String::as_str)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_padded_to_the_widest_cell_without_trailing_spaces() {
        let t = render(
            &["ID", "RISK"],
            &[
                vec!["orders.refund".into(), "high".into()],
                vec!["a".into(), "".into()],
            ],
        );
        assert_eq!(t, "ID             RISK\norders.refund  high\na\n");
    }
}
