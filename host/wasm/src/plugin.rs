//! Loading: a component file opened through cap-std from the plugin directory, checked
//! against its SHA-256 pin, compiled once (or loaded from the on-disk cache keyed by digest
//! and engine compatibility hash), pre-linked into an `InstancePre`.

use crate::error::LoadError;
use crate::host::WasmHost;
use crate::store_data::StoreData;
use cap_std::ambient_authority;
use cap_std::fs::Dir;
use sha2::{Digest, Sha256};
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

    /// Cache compiled code in `path` (created if missing) so a restart does not recompile.
    /// The cache holds native code: it must be as trusted as the binary itself.
    pub fn with_cache(mut self, path: impl AsRef<Path>) -> Result<PluginDir, LoadError> {
        let path = path.as_ref();
        let io = |source| LoadError::Io {
            file: path.display().to_string(),
            source,
        };
        std::fs::create_dir_all(path).map_err(io)?;
        self.cache = Some(Dir::open_ambient_dir(path, ambient_authority()).map_err(io)?);
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
    /// Compiled now.
    Compiled,
    /// Deserialized from the compiled cache.
    Cache,
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
    pub(crate) source: LoadSource,
    pub(crate) load_time: Duration,
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
    if hexpart.len() == 64 && hexpart.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(hexpart)
    } else {
        Err(LoadError::BadPin {
            file: file.to_string(),
            pin: pin.to_string(),
        })
    }
}

/// Lowercase hex SHA-256 of bytes (what a binding pins).
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

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
        if let Some(cache) = cache
            && let Ok(compiled) = cache.read(&key)
        {
            // SAFETY: the cache directory is trusted configuration (it holds native code
            // produced by this engine); the key binds the source digest and the engine's
            // compatibility hash, and wasmtime re-checks the engine settings.
            if let Ok(c) = unsafe { Component::deserialize(engine, &compiled) } {
                component = Some(c);
                source = LoadSource::Cache;
            }
        }
        let component = match component {
            Some(c) => c,
            None => {
                let c = Component::new(engine, bytes).map_err(invalid)?;
                if let Some(cache) = cache {
                    // Best effort: a cache that cannot be written only costs a recompile.
                    if let Ok(serialized) = c.serialize() {
                        let tmp = format!("{key}.tmp{}", std::process::id());
                        let written = cache
                            .create(&tmp)
                            .and_then(|mut f| f.write_all(&serialized).and_then(|()| f.sync_all()))
                            .and_then(|()| cache.rename(&tmp, cache, &key));
                        if written.is_err() {
                            let _ = cache.remove_file(&tmp);
                        }
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
        let pre = self
            .inner
            .linker
            .instantiate_pre(&component)
            .map_err(invalid)?;
        Ok(Arc::new(Plugin {
            host: self.clone(),
            file: file.to_string(),
            digest,
            pre,
            exports,
            source,
            load_time: started.elapsed(),
        }))
    }
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
