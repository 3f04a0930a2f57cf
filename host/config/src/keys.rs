//! Every key of the file, declared once on its field: its doc comment, its type, and
//! whether a running `capgate serve` takes a new value on reload or only on restart
//! (`#[derive(Keys)]`, with `#[key(live)]`, `#[key(restart = "why")]` or `#[key(skip)]`
//! on each field or as its table's default; a field with neither does not compile).
//!
//! The reload check reads the restart keys from here ([`restart_keys`]), a test checks
//! that every key the file accepts is listed, and [`reference()`] writes the key reference
//! from the same declarations.

pub use capgate_config_derive::Keys;

/// One key of the configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    /// Where it is, as a JSON pointer over the file (`/gateway/listen`); `*` stands for
    /// any entry of an array or a map of tables (`/capabilities/*/id`).
    pub pointer: String,
    /// Its doc comment, as one line.
    pub doc: &'static str,
    /// Its Rust type (`u64`, `Option<String>`), for the reference.
    pub ty: &'static str,
    /// The values it accepts, when it declares a range (`between 1 and 64`).
    pub range: Option<String>,
    /// `Some(why)` when only a restart applies a new value; `None` when a reload does.
    pub restart: Option<&'static str>,
    /// Whether the class comes from an enclosing table (`/store/url` from `/store`).
    pub inherited: bool,
}

/// A table of the configuration whose keys are declared on its fields.
pub trait Keys {
    /// Append each key of the table under `prefix` (a JSON pointer), a nested table's
    /// keys right after its own entry; `inherited` is the restart reason of an enclosing
    /// table, which every key inside it shares.
    fn keys(prefix: &str, inherited: Option<&'static str>, out: &mut Vec<Key>);

    /// Append `(pointer, message)` for each value of this table (and of the tables inside
    /// it) outside the range its key declares; `prefix` is the table's own pointer.
    fn range_problems(&self, prefix: &str, out: &mut Vec<(String, String)>);
}

/// The values a range accepts, in words: `between 1 and 64 milliseconds`, `at most 64`
/// (from the type's zero), `at least 1`.
pub fn describe<T, R>(range: &R, unit: &str) -> String
where
    T: std::fmt::Display + Default + PartialEq,
    R: std::ops::RangeBounds<T>,
{
    use std::ops::Bound::{Excluded, Included, Unbounded};
    let unit = if unit.is_empty() {
        String::new()
    } else {
        format!(" {unit}")
    };
    let zero = T::default();
    match (range.start_bound(), range.end_bound()) {
        (Included(lo), Included(hi)) if *lo == zero => format!("at most {hi}{unit}"),
        (Included(lo), Included(hi)) => format!("between {lo} and {hi}{unit}"),
        (Included(lo), Excluded(hi)) => format!("at least {lo} and below {hi}{unit}"),
        (Included(lo), Unbounded) => format!("at least {lo}{unit}"),
        (Excluded(lo), _) => format!("above {lo}{unit}"),
        (Unbounded, Included(hi)) => format!("at most {hi}{unit}"),
        (Unbounded, Excluded(hi)) => format!("below {hi}{unit}"),
        (Unbounded, Unbounded) => "any value".to_string(),
    }
}

/// The problem of a value outside its declared range, if it is: what
/// [`Keys::range_problems`] runs for each key with a `range`.
pub fn check_range<T, R>(
    pointer: &str,
    value: &T,
    range: &R,
    unit: &str,
    out: &mut Vec<(String, String)>,
) where
    T: std::fmt::Display + Default + PartialOrd,
    R: std::ops::RangeBounds<T>,
{
    if !range.contains(value) {
        out.push((
            pointer.to_string(),
            format!("must be {}, got {value}", describe(range, unit)),
        ));
    }
}

/// Every key of the file, in declaration order.
pub fn all() -> Vec<Key> {
    let mut out = Vec::new();
    crate::Config::keys("", None, &mut out);
    out
}

/// The keys a reload may not change, each with why: the outermost ones (a table whose
/// whole content is fixed is one entry), compared as written.
pub fn restart_keys() -> Vec<(String, &'static str)> {
    all()
        .into_iter()
        .filter_map(|k| match (k.restart, k.inherited) {
            (Some(why), false) => Some((k.pointer, why)),
            _ => None,
        })
        .collect()
}

/// The key reference (Markdown): one row per key with its type, when it applies and its
/// doc, generated from the declarations so it cannot drift from them.
pub fn reference() -> String {
    let mut out = String::from(
        "| key | type | values | applies | what it is |\n| --- | --- | --- | --- | --- |\n",
    );
    for k in all() {
        let applies = match k.restart {
            Some(_) => "restart",
            None => "reload",
        };
        out.push_str(&format!(
            "| `{}` | `{}` | {} | {} | {} |\n",
            crate::located::dotted(&k.pointer).replace("\"*\"", "*"),
            k.ty,
            k.range.as_deref().unwrap_or(""),
            applies,
            k.doc.replace('|', "\\|")
        ));
    }
    out
}
