//! capgate-builtin's integration tests, one binary (link once): the shipped components in
//! the real sandbox.

mod cedar;
mod sandbox;
