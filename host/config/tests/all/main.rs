//! capgate-config's integration tests: the key declarations against the files capgate
//! ships and the reference generated from them, the ranges declared on keys, and the
//! checks of store URLs.

mod keys;
mod ranges;
mod store_url;
