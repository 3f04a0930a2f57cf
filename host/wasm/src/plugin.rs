//! Loading: a component file opened through cap-std from the plugin directory, checked
//! against its SHA-256 pin, compiled once (or loaded from the on-disk cache keyed by digest
//! and engine compatibility hash), pre-linked into an `InstancePre`.
//!
//! **The compile cache is bound to the pin.** It holds native code, which the pin of the
//! `.wasm` does not cover. So: the cache directory must be owned by this process's user and
//! writable by nobody else (capgate creates it `0700`; otherwise [`PluginDir::with_cache`]
//! refuses it). Each artifact capgate compiles is stored with an index entry,
//! `<key>.sha256`, holding the artifact's key and the SHA-256 of its bytes. Before
//! `deserialize` the artifact and its entry are read (once, into memory), both must be
//! regular files private to this user, the entry must name this key and the bytes' digest:
//! anything else (no entry, another key's entry, other bytes, a file writable by others) is
//! refused and the plugin is compiled from the pinned `.wasm` again, which rewrites both.
//! What this does not stop: a process running as the same user (it could rewrite the
//! index, or the capgate binary); SECURITY.md says why no keyed MAC is added.

use crate::binding::Binding;
use crate::error::LoadError;
use crate::host::WasmHost;
use crate::sandbox::{Exports, Sandbox};
use crate::store_data::StoreData;
use cap_std::ambient_authority;
use cap_std::fs::Dir;
use capgate_core::digest::Sha256Hex;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasmtime::component::{Component, InstancePre};

/// A directory plugins are loaded from, opened as a capability: paths are resolved inside it
/// and cannot escape it (`..`, absolute paths and symlinks out are refused by cap-std).
pub struct PluginDir {
    dir: Dir,
    display: PathBuf,
    cache: Option<Dir>,
}

impl std::fmt::Debug for PluginDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginDir")
            .field("path", &self.display)
            .field("cache", &self.cache.is_some())
            .finish()
    }
}

impl PluginDir {
    /// Open the plugin directory.
    pub fn open(path: impl AsRef<Path>) -> Result<PluginDir, LoadError> {
        let path = path.as_ref();
        let dir =
            Dir::open_ambient_dir(path, ambient_authority()).map_err(|source| LoadError::Io {
                file: path.display().to_string(),
                source,
            })?;
        Ok(PluginDir {
            dir,
            display: path.to_path_buf(),
            cache: None,
        })
    }

    /// Cache compiled code in `path` (created `0700` if missing) so a restart does not
    /// recompile. The cache holds native code: a directory owned by another user or writable
    /// by group or others is refused ([`LoadError::UntrustedCache`]), and each artifact is
    /// checked against the index capgate keeps before it is used (module docs).
    pub fn with_cache(mut self, path: impl AsRef<Path>) -> Result<PluginDir, LoadError> {
        let path = path.as_ref();
        let io = |source| LoadError::Io {
            file: path.display().to_string(),
            source,
        };
        create_private_dir(path).map_err(io)?;
        let dir = Dir::open_ambient_dir(path, ambient_authority()).map_err(io)?;
        let meta = dir.dir_metadata().map_err(io)?;
        private_to_me(&meta).map_err(|reason| LoadError::UntrustedCache {
            path: path.display().to_string(),
            reason,
        })?;
        self.cache = Some(dir);
        Ok(self)
    }

    /// The directory, for messages.
    pub fn path(&self) -> &Path {
        &self.display
    }
}

/// Where a plugin came from and how long loading took (the CLI and benches report it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadSource {
    /// Compiled now (nothing was cached for it, or there is no cache).
    Compiled,
    /// Deserialized from the compiled cache, its artifact matching the index.
    Cache,
    /// Compiled now because the cached artifact was refused: not bound to this pin by the
    /// index, or not private to this user (a warning names the reason).
    CacheRefused,
}

/// The most bytes of one cached artifact read (a JavaScript or Python component compiles
/// to tens of megabytes).
const MAX_ARTIFACT_BYTES: u64 = 1 << 30;

/// The most bytes of one index entry read (`<key> <64 hex>\n`).
const MAX_INDEX_ENTRY_BYTES: u64 = 512;

/// Create `path` (and its parents) for the compile cache: `0700` on Unix.
fn create_private_dir(path: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path)
    }
    #[cfg(not(unix))]
    {
        std::fs::create_dir_all(path)
    }
}

/// Whether a cache file or directory is this user's alone: owned by the effective user and
/// writable by neither group nor others. `Err` says what is wrong.
#[cfg(unix)]
fn private_to_me(meta: &cap_std::fs::Metadata) -> Result<(), String> {
    use cap_std::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(format!(
            "owned by uid {}, not by this process's user (uid {me})",
            meta.uid()
        ));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(format!("writable by group or others (mode {mode:o})"));
    }
    Ok(())
}

/// No ownership model to check off Unix: the cache is as trusted as its directory's ACL.
#[cfg(not(unix))]
fn private_to_me(_meta: &cap_std::fs::Metadata) -> Result<(), String> {
    Ok(())
}

/// The index entry of an artifact: its key and the SHA-256 of its bytes.
fn index_entry(key: &str, artifact: &[u8]) -> String {
    format!("{key} {}\n", sha256_hex(artifact))
}

/// The index entry's file name of an artifact.
fn index_name(key: &str) -> String {
    format!("{key}.sha256")
}

/// Read one cache file through an open handle: a regular file private to this user, at most
/// `limit` bytes. `Ok(None)` when there is no such file.
fn read_private(cache: &Dir, name: &str, limit: u64) -> Result<Option<Vec<u8>>, String> {
    use std::io::Read;
    let file = match cache.open(name) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("`{name}` cannot be opened: {e}")),
    };
    let meta = file
        .metadata()
        .map_err(|e| format!("`{name}` cannot be inspected: {e}"))?;
    if !meta.is_file() {
        return Err(format!("`{name}` is not a regular file"));
    }
    private_to_me(&meta).map_err(|r| format!("`{name}` is {r}"))?;
    if meta.len() > limit {
        return Err(format!("`{name}` is larger than {limit} bytes"));
    }
    let mut bytes = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("`{name}` cannot be read: {e}"))?;
    if bytes.len() as u64 > limit {
        return Err(format!("`{name}` is larger than {limit} bytes"));
    }
    Ok(Some(bytes))
}

/// The cached artifact of `key`, if capgate stored it and it is intact: `Ok(None)` when
/// nothing is cached, `Err` (why) when something is but may not be used.
fn cached_artifact(cache: &Dir, key: &str) -> Result<Option<Vec<u8>>, String> {
    let Some(artifact) = read_private(cache, key, MAX_ARTIFACT_BYTES)? else {
        return Ok(None);
    };
    let Some(entry) = read_private(cache, &index_name(key), MAX_INDEX_ENTRY_BYTES)? else {
        return Err("it has no index entry (capgate did not store it)".into());
    };
    if entry != index_entry(key, &artifact).as_bytes() {
        return Err(
            "its bytes are not the ones the index recorded for this key (another artifact?)".into(),
        );
    }
    Ok(Some(artifact))
}

/// Write `bytes` to `name` in the cache: a fresh private temporary file, synced, renamed
/// over `name`.
fn write_private(cache: &Dir, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    // Unique per process and per write: processes and threads sharing a cache never write
    // one temporary file together.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = format!("{name}.tmp{}-{n}", std::process::id());
    let mut options = cap_std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use cap_std::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let _ = cache.remove_file(&tmp);
    let written = cache
        .open_with(&tmp, &options)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_all()))
        .and_then(|()| cache.rename(&tmp, cache, name));
    if written.is_err() {
        let _ = cache.remove_file(&tmp);
    }
    written
}

/// A loaded, pre-linked plugin component. Bind it to one or more interfaces with
/// [`Plugin::policy`], [`Plugin::redactor`], [`Plugin::procedure`] and
/// [`Plugin::authorizer`]. Cheap to share.
pub struct Plugin {
    pub(crate) host: WasmHost,
    pub(crate) file: String,
    pub(crate) digest: String,
    pub(crate) pre: InstancePre<StoreData>,
    pub(crate) exports: Vec<String>,
    /// The names it imports.
    pub(crate) imports: Vec<String>,
    /// Whether it imports `capgate:plugin/request@0.3.0` (reads the request lazily).
    pub(crate) reads_lazily: bool,
    pub(crate) source: LoadSource,
    pub(crate) load_time: Duration,
    /// The JSON Schema of the `config` its bindings take, when it declares one.
    pub(crate) config_schema: Option<Arc<serde_json::Value>>,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("file", &self.file)
            .field("digest", &self.digest)
            .field("exports", &self.exports)
            .finish_non_exhaustive()
    }
}

/// Normalise a pin: lowercase hex, `sha256:` prefix allowed.
fn parse_pin(file: &str, pin: &str) -> Result<String, LoadError> {
    let hexpart = pin
        .strip_prefix("sha256:")
        .unwrap_or(pin)
        .to_ascii_lowercase();
    Sha256Hex::new(hexpart)
        .map(Sha256Hex::into_string)
        .map_err(|_| LoadError::BadPin {
            file: file.to_string(),
            pin: pin.to_string(),
        })
}

/// Lowercase hex SHA-256 of bytes (what a binding pins): capgate-core's one digest writer.
pub use capgate_core::digest::sha256_hex;

impl WasmHost {
    /// Load `file` (relative to `dir`) pinned to `sha256`. Compiles or loads from the cache;
    /// never call it on a request path.
    pub fn load(
        &self,
        dir: &PluginDir,
        file: &str,
        sha256: &str,
    ) -> Result<Arc<Plugin>, LoadError> {
        let expected = parse_pin(file, sha256)?;
        let started = Instant::now();
        let bytes = dir.dir.read(file).map_err(|source| LoadError::Io {
            file: file.to_string(),
            source,
        })?;
        let actual = sha256_hex(&bytes);
        if actual != expected {
            return Err(LoadError::DigestMismatch {
                file: file.to_string(),
                expected,
                actual,
            });
        }
        self.load_verified(file, &bytes, actual, dir.cache.as_ref(), started)
    }

    /// Load a component that ships inside capgate (`capgate-builtin`): its bytes checked
    /// against the SHA-256 its build computed, compiled code cached in `dir`'s cache like
    /// any plugin's.
    pub fn load_shipped(
        &self,
        dir: Option<&PluginDir>,
        name: &str,
        bytes: &[u8],
        sha256: &str,
    ) -> Result<Arc<Plugin>, LoadError> {
        let expected = parse_pin(name, sha256)?;
        let started = Instant::now();
        let actual = sha256_hex(bytes);
        if actual != expected {
            return Err(LoadError::DigestMismatch {
                file: name.to_string(),
                expected,
                actual,
            });
        }
        let cache = dir.and_then(|d| d.cache.as_ref());
        self.load_verified(name, bytes, actual, cache, started)
    }

    /// Load a component from bytes without a pin (the `capgate plugin test` inner loop,
    /// where the author is iterating on the file). Never use it for deployments.
    pub fn load_unpinned(&self, name: &str, bytes: &[u8]) -> Result<Arc<Plugin>, LoadError> {
        let digest = sha256_hex(bytes);
        self.load_verified(name, bytes, digest, None, Instant::now())
    }

    fn load_verified(
        &self,
        file: &str,
        bytes: &[u8],
        digest: String,
        cache: Option<&Dir>,
        started: Instant,
    ) -> Result<Arc<Plugin>, LoadError> {
        let engine = self.engine();
        let invalid = |e: wasmtime::Error| LoadError::Invalid {
            file: file.to_string(),
            reason: format!("{e:#}"),
        };
        let key = format!("{digest}-{}.cwasm", &self.compatibility_hash()[..16]);
        let mut source = LoadSource::Compiled;
        let mut component = None;
        if let Some(cache) = cache {
            match cached_artifact(cache, &key) {
                Ok(None) => {}
                Ok(Some(compiled)) => {
                    // SAFETY: these bytes are the artifact capgate itself compiled from the
                    // pinned `.wasm` and stored under this key: the index entry, kept in a
                    // directory and files only this user can write, records their digest,
                    // checked on exactly these bytes (read once). The key binds the source
                    // digest and the engine's compatibility hash; wasmtime re-checks the
                    // engine settings.
                    match unsafe { Component::deserialize(engine, &compiled) } {
                        Ok(c) => {
                            component = Some(c);
                            source = LoadSource::Cache;
                        }
                        Err(_) => source = LoadSource::CacheRefused,
                    }
                }
                Err(reason) => {
                    tracing::warn!(
                        target: "capgate::plugin",
                        plugin = file,
                        artifact = %key,
                        "the compiled cache's artifact is not used, {reason}; compiling the pinned plugin again"
                    );
                    source = LoadSource::CacheRefused;
                }
            }
        }
        let component = match component {
            Some(c) => c,
            None => {
                let c = Component::new(engine, bytes).map_err(invalid)?;
                if let Some(cache) = cache {
                    // Best effort: a cache that cannot be written only costs a recompile.
                    // The artifact first, then its index entry: an artifact without its
                    // entry (a crash between the two) is refused and recompiled.
                    if let Ok(serialized) = c.serialize() {
                        let _ = write_private(cache, &key, &serialized).and_then(|()| {
                            write_private(
                                cache,
                                &index_name(&key),
                                index_entry(&key, &serialized).as_bytes(),
                            )
                        });
                    }
                }
                c
            }
        };
        let exports = component
            .component_type()
            .exports(engine)
            .map(|(name, _)| name.to_string())
            .collect();
        let imports: Vec<String> = component
            .component_type()
            .imports(engine)
            .map(|(name, _)| name.to_string())
            .collect();
        let reads_lazily = imports
            .iter()
            .any(|name| name == crate::wit::names::REQUEST);
        let pre = self
            .inner
            .linker
            .instantiate_pre(&component)
            .map_err(invalid)?;
        let config_schema = declared_config_schema(file, bytes)?.map(Arc::new);
        Ok(Arc::new(Plugin {
            host: self.clone(),
            file: file.to_string(),
            digest,
            pre,
            exports,
            imports,
            reads_lazily,
            source,
            load_time: started.elapsed(),
            config_schema,
        }))
    }
}

/// The custom section a plugin declares its config's JSON Schema in: the SDKs write it
/// (`capgate_sdk::config_schema!`, `export const configSchema` in JavaScript,
/// `CONFIG_SCHEMA` in Python), at the component's top level or in its core module.
pub const CONFIG_SCHEMA_SECTION: &str = "capgate:config-schema";

/// A declared schema larger than this is refused (a schema, not a payload).
pub const MAX_CONFIG_SCHEMA_BYTES: usize = 256 * 1024;

/// The JSON Schema in a component's `capgate:config-schema` custom section, if it has
/// one. Bytes that are not one JSON object or boolean of bounded size, or two sections
/// that disagree, refuse the plugin: a schema nobody can read checks nothing.
pub fn declared_config_schema(
    file: &str,
    bytes: &[u8],
) -> Result<Option<serde_json::Value>, LoadError> {
    let bad = |reason: String| LoadError::BadConfigSchema {
        file: file.to_string(),
        section: CONFIG_SCHEMA_SECTION,
        reason,
    };
    let mut found: Option<serde_json::Value> = None;
    // Nested modules' payloads come in line: a section a core module carries (the Rust
    // SDK's link section) is found as one at the top (the JS and Python builds').
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        // The engine already accepted these bytes; a parse error here ends the scan.
        let Ok(payload) = payload else { break };
        let wasmparser::Payload::CustomSection(section) = payload else {
            continue;
        };
        if section.name() != CONFIG_SCHEMA_SECTION {
            continue;
        }
        let data = section.data();
        if data.len() > MAX_CONFIG_SCHEMA_BYTES {
            return Err(bad(format!(
                "is {} bytes, over the {MAX_CONFIG_SCHEMA_BYTES}-byte limit",
                data.len()
            )));
        }
        let schema: serde_json::Value = serde_json::from_slice(data)
            .map_err(|e| bad(format!("is not one JSON document: {e}")))?;
        if !(schema.is_object() || schema.is_boolean()) {
            return Err(bad("is not a JSON Schema (an object or a boolean)".into()));
        }
        match &found {
            Some(earlier) if *earlier != schema => {
                return Err(bad("appears twice with different contents".into()));
            }
            _ => found = Some(schema),
        }
    }
    Ok(found)
}

impl Plugin {
    /// The file name it was loaded from.
    pub fn file(&self) -> &str {
        &self.file
    }
    /// Its SHA-256 (lowercase hex).
    pub fn digest(&self) -> &str {
        &self.digest
    }
    /// The names it exports, e.g. `capgate:plugin/policy@0.1.0`.
    pub fn exports(&self) -> &[String] {
        &self.exports
    }
    /// The names it imports, e.g. `capgate:plugin/request@0.3.0` for a guest that reads the
    /// request lazily, or the WASI interfaces its toolchain left in.
    pub fn imports(&self) -> &[String] {
        &self.imports
    }
    /// The JSON Schema its bindings' `config` must match, when the plugin declares one
    /// (custom section [`CONFIG_SCHEMA_SECTION`]); `check`, `serve` and reload refuse a
    /// config that does not, before any call. `None`: the plugin checks its config itself,
    /// on every call.
    pub fn config_schema(&self) -> Option<&serde_json::Value> {
        self.config_schema.as_deref()
    }
    /// Whether it was compiled now or read from the cache.
    pub fn load_source(&self) -> LoadSource {
        self.source
    }
    /// How long loading took.
    pub fn load_time(&self) -> Duration {
        self.load_time
    }
    /// The host it was loaded into.
    pub fn host(&self) -> &WasmHost {
        &self.host
    }

    /// Bind `binding` to the interface (or interfaces) `I` stands for: the one
    /// constructor every kind of binding goes through, refused when the component does not
    /// export the interface or exports it malformed.
    pub(crate) fn bind<I: Exports>(
        self: &Arc<Self>,
        binding: &Binding,
    ) -> Result<Arc<Sandbox<I>>, LoadError> {
        let indices = I::resolve(self)?;
        Ok(Sandbox::new(self.clone(), binding, indices))
    }

    /// The component exports an interface in a shape the host cannot call.
    pub(crate) fn invalid(&self, e: wasmtime::Error) -> LoadError {
        LoadError::Invalid {
            file: self.file.clone(),
            reason: format!("{e:#}"),
        }
    }

    pub(crate) fn require(&self, export: &str) -> Result<(), LoadError> {
        if self.exports.iter().any(|e| e == export) {
            return Ok(());
        }
        Err(LoadError::MissingExport {
            file: self.file.clone(),
            missing: export.to_string(),
            available: if self.exports.is_empty() {
                "nothing".to_string()
            } else {
                self.exports.join(", ")
            },
        })
    }
}
