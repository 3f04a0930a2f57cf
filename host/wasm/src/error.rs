//! Why loading or calling a plugin failed. Loading errors are configuration errors (shown to
//! the operator at startup); call errors are mapped fail-closed by each trait implementation.

use std::time::Duration;

/// Why a plugin could not be loaded or bound. Refused at startup, never on the request path.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The file's digest is not the pinned one.
    #[error(
        "plugin `{file}` is pinned to sha256 {expected} but the file has sha256 {actual}; refusing to load it"
    )]
    DigestMismatch {
        /// The plugin file.
        file: String,
        /// The digest in the binding.
        expected: String,
        /// The digest of the bytes on disk.
        actual: String,
    },
    /// The pin is not a SHA-256 hex digest.
    #[error(
        "plugin `{file}`: `{pin}` is not a SHA-256 digest (64 hex digits, optional `sha256:` prefix)"
    )]
    BadPin {
        /// The plugin file.
        file: String,
        /// What was given.
        pin: String,
    },
    /// The component does not export the interface the binding asks for.
    #[error("plugin `{file}` does not export `{missing}` (it exports: {available})")]
    MissingExport {
        /// The plugin file.
        file: String,
        /// The missing export, e.g. `capgate:plugin/policy@0.1.0`.
        missing: String,
        /// What it does export, comma-separated.
        available: String,
    },
    /// Reading the plugin directory, the file or the cache failed (or a path escaped the
    /// plugin directory).
    #[error("plugin `{file}`: {source}")]
    Io {
        /// The file or directory.
        file: String,
        /// The I/O error, as the operating system reported it.
        #[source]
        source: std::io::Error,
    },
    /// The bytes are not a valid component, or it imports something the host does not give.
    #[error("plugin `{file}` cannot be compiled or linked: {reason}")]
    Invalid {
        /// The plugin file.
        file: String,
        /// Why the component was refused.
        reason: String,
    },
    /// The component's declared config schema (its `capgate:config-schema` custom section)
    /// is not one JSON document of bounded size: the plugin is refused rather than run with
    /// settings nobody can check.
    #[error("plugin `{file}` declares a config schema (custom section `{section}`) that {reason}")]
    BadConfigSchema {
        /// The plugin file.
        file: String,
        /// The custom section's name.
        section: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The compile cache directory is not private to this process's user (owned by another
    /// user, or writable by group or others): whoever can write it could plant native code
    /// under a pinned plugin's key, so it is not used.
    #[error(
        "the compile cache {path} is {reason}; it holds native code, so it must be owned by this user and writable by nobody else (chmod 700 it, or point runtime.compileCache elsewhere)"
    )]
    UntrustedCache {
        /// The compile cache directory.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The engine could not be created (Wasmtime's error).
    #[error("the Wasm engine could not be created: {0}")]
    Engine(#[source] Box<dyn std::error::Error + Send + Sync + 'static>),
}

/// Why one call into a plugin failed. Every variant is a refusal (fail closed).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallError {
    /// The deadline passed (epoch interruption).
    #[error("deadline of {} ms exceeded", .0.as_millis())]
    Deadline(Duration),
    /// The call ran out of fuel.
    #[error("fuel exhausted ({0} units)")]
    FuelExhausted(u64),
    /// The guest tried to grow memory past the binding's cap.
    #[error("memory cap of {0} bytes exceeded")]
    MemoryCap(usize),
    /// The guest overflowed its stack.
    #[error("stack overflow")]
    StackOverflow,
    /// Any other trap (a Rust panic compiles to one); includes the panic message when the
    /// guest logged it.
    #[error("trap: {0}")]
    Trap(String),
    /// The instance could not be created (pool exhausted, limits...).
    #[error("instantiation failed: {0}")]
    Instantiate(String),
    /// The call was cancelled by the caller.
    #[error("cancelled")]
    Cancelled,
    /// The plugin answered something too large.
    #[error("output of {size} bytes exceeds the cap of {cap} bytes")]
    OutputTooLarge {
        /// How many bytes the plugin returned.
        size: usize,
        /// The most it may return.
        cap: usize,
    },
    /// The plugin answered something malformed (not JSON, an invalid decision...).
    #[error("malformed output: {0}")]
    Malformed(String),
    /// The plugin returned its own `err`.
    #[error("plugin error: {0}")]
    Guest(String),
}
