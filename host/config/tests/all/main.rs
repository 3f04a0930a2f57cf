//! capgate-config's integration tests: the key declarations against the files capgate
//! ships and the reference generated from them.

mod keys;
mod ranges;
