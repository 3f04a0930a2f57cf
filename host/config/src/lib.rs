//! capgate's deployment file, `capgate.toml`: its model, read with every problem located
//! and reported together before anything starts.
//!
//! This crate is the schema layer (cargo's `cargo-util-schemas`, ripgrep's `LowArgs`): it
//! knows what the file may say and where each thing was said, never what it means at
//! run time. Assembling a deployment from it is `capgate-server`'s job.
//!
//! ```
//! let (config, doc) = capgate_config::Config::parse(
//!     std::path::Path::new("capgate.toml"),
//!     "revision = \"r1\"\n[gateway]\nlisten = \"127.0.0.1:9000\"\n".into(),
//! )
//! .expect("a sound file");
//! assert_eq!(config.gateway.listen, "127.0.0.1:9000");
//! assert_eq!(doc.json["revision"], "r1");
//!
//! // A problem names its place: file, line, column and key.
//! let Err(problems) = capgate_config::Config::parse(
//!     std::path::Path::new("capgate.toml"),
//!     "[gateway]\nlisten = 8080\n".into(),
//! ) else {
//!     panic!("a listen address must be a string");
//! };
//! assert_eq!((problems[0].line, problems[0].key.as_str()), (2, "gateway.listen"));
//! ```
//!
//! The parts:
//! - [`model`]: one typed section per table ([`Config`]).
//! - [`load`]: reading a file or a text into the model, locating every problem.
//! - [`located`]: the parsed document with each value's place, and [`Problem`].
//! - [`values`] and the cross-reference checks: what no one section's type expresses.
//! - [`keys`]: every key declared once on its field — doc, type, default, range, and
//!   whether a reload applies it — read by the reload check and the configuration
//!   reference (docs/configuration.md).
//! - [`schema`]: the file's JSON Schema (docs/capgate.schema.json), from the same
//!   declarations, for editors.
//! - [`telemetry`], [`store_url`]: the `[telemetry]` tables and store URLs.
//!
//! Adding a key is one declaration and its use: a field with its doc comment and its
//! `#[key(live)]` or `#[key(restart = "why")]` on the section struct (and its default in
//! the section's `Default`), then reading it where the deployment is assembled.

pub mod keys;
pub mod load;
pub mod located;
pub mod model;
mod references;
pub mod schema;
pub mod store_url;
pub mod telemetry;
pub mod values;

pub use load::{Read, Secrets};
pub use located::{Located, Problem};
pub use model::*;

/// The plugins that ship inside capgate (`capgate-builtin`), which a binding names without
/// a `[plugins.NAME]` section (`plugin = "cel"`, `"cedar"`, `"redact"`). The file is read without loading them, so
/// the names live here; the binary checks they are the ones it embeds.
pub const SHIPPED_PLUGINS: &[&str] = &["cel", "cedar", "redact"];
