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
    let mut out =
        String::from("| key | type | applies | what it is |\n| --- | --- | --- | --- |\n");
    for k in all() {
        let applies = match k.restart {
            Some(_) => "restart",
            None => "reload",
        };
        out.push_str(&format!(
            "| `{}` | `{}` | {} | {} |\n",
            crate::located::dotted(&k.pointer).replace("\"*\"", "*"),
            k.ty,
            applies,
            k.doc.replace('|', "\\|")
        ));
    }
    out
}
