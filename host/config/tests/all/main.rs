//! capgate-config's integration tests: the key declarations against the files capgate
//! ships and the reference and JSON Schema generated from them, the configuration
//! snippets of the READMEs and the book, the Kubernetes manifests as kubectl renders them, the ranges declared on keys, and the checks of store URLs.

mod keys;
mod manifests;
mod ranges;
mod schema;
mod secrets;
mod snippets;
mod store_url;
mod typed;
mod upstreams;
