//! Every key of the file, declared once on its field: its doc comment, its type, and
//! whether a running `capgate serve` takes a new value on reload or only on restart
//! (`#[derive(Keys)]`, with `#[key(live)]`, `#[key(restart = "why")]` or `#[key(skip)]`
//! on each field or as its table's default; a field with neither does not compile).
//!
//! The reload check reads the restart keys from here ([`restart_keys`]), a test checks
//! that every key the file accepts is listed, [`reference()`] writes the configuration
//! reference (docs/configuration.md) and [`crate::schema::json_schema`] the file's JSON
//! Schema (docs/capgate.schema.json) from the same declarations.

pub use capgate_config_derive::Keys;

/// One key of the configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    /// Where it is, as a JSON pointer over the file (`/gateway/listen`); `*` stands for
    /// any entry of an array or a map of tables (`/capabilities/*/id`).
    pub pointer: String,
    /// Its doc comment, as one line.
    pub doc: &'static str,
    /// Its Rust type (`u64`, `Option<String>`).
    pub ty: &'static str,
    /// The JSON Schema of its type ([`crate::schema::Schema`]), before its own doc, range
    /// and default are added: what the reference's type column and the file's schema read.
    pub schema: serde_json::Value,
    /// What it is when the file leaves it out.
    pub default: KeyDefault,
    /// The values it accepts, when it declares a range (`between 1 and 64`).
    pub range: Option<String>,
    /// The lower end of its declared range, if any.
    pub minimum: Option<Bound>,
    /// The upper end of its declared range, if any.
    pub maximum: Option<Bound>,
    /// `Some(why)` when only a restart applies a new value; `None` when a reload does.
    pub restart: Option<&'static str>,
    /// Whether the class comes from an enclosing table (`/store/url` from `/store`).
    pub inherited: bool,
    /// Whether the file may give it as `{ env = "VAR" }` or `{ file = "path" }` (a secret
    /// kept out of the file), resolved when the file is loaded.
    pub secret: bool,
}

/// What a key is when the file leaves it out, read from the same serde attributes that
/// make it so (see the derive).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyDefault {
    /// The key must be written.
    Required,
    /// Left out, the key is absent; its doc says what that means (often the default of
    /// the library that reads it).
    Absent,
    /// A table whose own keys carry their defaults.
    Table,
    /// Left out, the key has this value.
    Value(serde_json::Value),
}

impl KeyDefault {
    /// The default a value stands for: `null` (an `Option`'s `None`) is [`KeyDefault::Absent`].
    pub fn of<T: serde::Serialize>(value: &T) -> KeyDefault {
        match serde_json::to_value(value) {
            Ok(serde_json::Value::Null) | Err(_) => KeyDefault::Absent,
            Ok(v) => KeyDefault::Value(v),
        }
    }
}

/// One end of a declared range, as a JSON number (the schema's `minimum` / `maximum`, or
/// their `exclusive` forms).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    /// The number.
    pub value: serde_json::Number,
    /// Whether the number itself is accepted.
    pub inclusive: bool,
}

/// The ends of a range as JSON numbers (`None` for an open end): what the derive puts in
/// [`Key::minimum`] and [`Key::maximum`] for a key with `#[key(range = …)]`.
pub fn bounds<T, R>(range: &R) -> (Option<Bound>, Option<Bound>)
where
    T: std::fmt::Display,
    R: std::ops::RangeBounds<T>,
{
    use std::ops::Bound::{Excluded, Included, Unbounded};
    let end = |b: std::ops::Bound<&T>| {
        let (v, inclusive) = match b {
            Included(v) => (v, true),
            Excluded(v) => (v, false),
            Unbounded => return None,
        };
        let value = v.to_string().parse::<serde_json::Number>().ok()?;
        Some(Bound { value, inclusive })
    };
    (end(range.start_bound()), end(range.end_bound()))
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
    // "At most" from zero only for the unsigned integers the keys use: a float (a ratio)
    // can be negative, so its range is said in full.
    let signed = matches!(std::any::type_name::<T>(), "f64" | "f32");
    match (range.start_bound(), range.end_bound()) {
        (Included(lo), Included(hi)) if *lo == zero && !signed => format!("at most {hi}{unit}"),
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

/// The configuration reference (Markdown): one row per key with its type, its default,
/// the values it accepts, when a new value applies and its doc, generated from the
/// declarations so it cannot drift from them (docs/configuration.md is this, with an
/// introduction).
pub fn reference() -> String {
    let mut out = String::from(
        "| key | type | default | values | applies | what it is |\n| --- | --- | --- | --- | --- | --- |\n",
    );
    for k in all() {
        let applies = match k.restart {
            Some(_) => "restart",
            None => "reload",
        };
        let default = match &k.default {
            KeyDefault::Required => "required".to_string(),
            KeyDefault::Absent => "absent".to_string(),
            KeyDefault::Table => String::new(),
            KeyDefault::Value(v) => format!("`{v}`"),
        };
        let values = match (&k.range, crate::schema::values(&k.schema)) {
            (Some(range), _) => range.clone(),
            (None, Some(values)) => values,
            (None, None) => String::new(),
        };
        let cell = |s: &str| s.replace('|', "\\|");
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} | {} |\n",
            crate::located::dotted(&k.pointer).replace("\"*\"", "*"),
            cell(&crate::schema::kind(&k.schema)),
            cell(&default),
            cell(&values),
            applies,
            cell(&if k.secret {
                format!(
                    "{} Secret: may be given as `{{ env = \"VAR\" }}` or `{{ file = \"path\" }}` instead.",
                    k.doc
                )
            } else {
                k.doc.to_string()
            })
        ));
    }
    out
}

/// docs/configuration.md: an introduction, then [`reference()`].
pub fn reference_document() -> String {
    format!(
        "# Configuration reference\n\n\
         Every key of `capgate.toml`, generated from the key declarations in `host/config/src` \
         (`capgate_config::keys::reference`); do not edit by hand: after changing a key, run \
         `CAPGATE_BLESS=1 cargo test -p capgate-config --test all` to rewrite this file and \
         [capgate.schema.json](capgate.schema.json), the file's JSON Schema generated from the same \
         declarations. A test fails when either is not what the declarations generate.\n\n\
         - `key`: where it is written; `*` is any name of a map of tables (`[plugins.NAME]`) \
         or any entry of an array of tables (`[[capabilities]]`).\n\
         - `type`: as TOML writes it; a `table` is a `[section]` or an inline `{{ … }}`, \
         `tables` a map of tables by name.\n\
         - `default`: the value when the key is left out; `required`: it must be written; \
         `absent`: left out, it is not set, and its description says what that means.\n\
         - `values`: the values a number's declared range or an enumeration accepts \
         (`capgate check` reports any other at its line).\n\
         - `applies`: `reload` when a configuration reload (SIGHUP, `POST /admin/reload`) takes \
         a new value; `restart` when only a restart does (a reload that changes it is refused \
         and the running configuration keeps serving).\n\n\
         Editors validate and complete the file with the schema: with Taplo (the Even Better \
         TOML extension of VS Code, and the TOML language server of other editors), make the \
         first line of `capgate.toml` a schema directive with the schema's path relative to \
         that file, or its URL: `#:schema ./docs/capgate.schema.json` for a file at the root \
         of this repository (the example's template has one). The schema checks names, types, enumerations and ranges; what it \
         cannot (a policy's plugin exists, pins, paths) is `capgate check`'s.\n\n{}",
        reference()
    )
}
