//! placeholder: procedure adapters as providers (issue 8).
