//! capgate-config's integration tests: the key declarations against the files capgate
//! ships and the reference generated from them, and the checks of store URLs.

mod keys;
mod store_url;
