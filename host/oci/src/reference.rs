//! `oci://` references: parsed and checked before anything is fetched, so the
//! configuration check refuses a malformed or unpinned plugin path without a network.

use crate::{OciError, SCHEME};

/// A parsed `oci://REGISTRY/REPOSITORY[:TAG][@sha256:HEX]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// `host[:port]`.
    pub registry: String,
    /// `path/to/repo`.
    pub repository: String,
    /// The tag, if any.
    pub tag: Option<String>,
    /// The manifest digest (lowercase hex), if any.
    pub digest: Option<String>,
}

impl Reference {
    /// Parse a reference (with its `oci://` scheme).
    pub fn parse(s: &str) -> Result<Reference, OciError> {
        let bad = |reason: &str| OciError::Reference {
            reference: s.to_string(),
            reason: reason.to_string(),
        };
        let rest = s
            .strip_prefix(SCHEME)
            .ok_or_else(|| bad("must start with oci://"))?;
        let (registry, name) = rest
            .split_once('/')
            .ok_or_else(|| bad("expected oci://REGISTRY/REPOSITORY@sha256:DIGEST"))?;
        if registry.is_empty()
            || !registry
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || ".-:[]".contains(c))
        {
            return Err(bad(
                "the registry must be a host name or address, with an optional :port",
            ));
        }
        let (name, digest) = match name.split_once('@') {
            Some((n, d)) => {
                let hex = d
                    .strip_prefix("sha256:")
                    .filter(|h| capgate_core::digest::Sha256Hex::is_valid(&h.to_ascii_lowercase()))
                    .ok_or_else(|| bad("the digest must be sha256: and 64 hex digits"))?;
                (n, Some(hex.to_ascii_lowercase()))
            }
            None => (name, None),
        };
        let (repository, tag) = match name.rsplit_once(':') {
            Some((r, t)) if !t.contains('/') => (r, Some(t.to_string())),
            _ => (name, None),
        };
        if repository.is_empty()
            || repository.len() > 255
            || repository.split('/').any(|c| {
                let alnum = |ch: char| ch.is_ascii_lowercase() || ch.is_ascii_digit();
                !c.starts_with(alnum)
                    || !c.ends_with(alnum)
                    || !c.chars().all(|ch| alnum(ch) || "._-".contains(ch))
            })
        {
            return Err(bad(
                "the repository must be lowercase letters and digits, joined by `.`, `_`, `-`, separated by `/`",
            ));
        }
        if let Some(t) = &tag
            && (t.is_empty()
                || t.len() > 128
                || t.starts_with(['.', '-'])
                || !t
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)))
        {
            return Err(bad("a tag is letters, digits, `.`, `_`, `-` (at most 128)"));
        }
        Ok(Reference {
            registry: registry.to_string(),
            repository: repository.to_string(),
            tag,
            digest,
        })
    }

    /// `registry/repository` (cosign's docker reference).
    pub fn name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }

    /// `oci://registry/repository@sha256:HEX`.
    pub fn pinned(&self, hex: &str) -> String {
        format!("{SCHEME}{}@sha256:{hex}", self.name())
    }
}

/// Whether a plugin path names a registry artifact.
pub fn is_oci(path: &str) -> bool {
    path.starts_with(SCHEME)
}

/// The reference of a plugin path, as the configuration takes it: a manifest digest is
/// required (a tag can move under a running deployment).
pub fn plugin_reference(path: &str) -> Result<Reference, String> {
    let r = Reference::parse(path).map_err(|e| e.to_string())?;
    if r.digest.is_none() {
        return Err(format!(
            "`{path}` names no digest; a tag can move, so a plugin is pinned by its manifest digest: oci://{}@sha256:… (`capgate plugin push` prints it)",
            r.name()
        ));
    }
    Ok(r)
}
