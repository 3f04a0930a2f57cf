//! Claim mapping: which claims of a verified token give the principal's actor id, kind,
//! namespace, roles, surfaces and attributes, each named by an RFC 6901 JSON pointer so
//! nested and namespaced claims (`/realm_access/roles`, `/https:~1~1corp.example~1tenant`)
//! are reachable.

use capgate_core::actor::{ActorKind, Surface};
use std::collections::BTreeMap;

/// An RFC 6901 JSON pointer into a token's claims, checked when it is built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimPointer(String);

/// Why a claim pointer was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClaimPointerError {
    /// A pointer must name a claim: `/` followed by its name.
    #[error(
        "`{0}` is not a JSON pointer: it must start with `/` (e.g. `/sub`, `/realm_access/roles`)"
    )]
    NoLeadingSlash(String),
    /// `~` may only be followed by `0` (`~`) or `1` (`/`).
    #[error("`{0}` has a `~` not followed by 0 or 1 (write `~0` for `~` and `~1` for `/`)")]
    BadEscape(String),
    /// A segment is empty (`//`, or a trailing `/`).
    #[error("`{0}` has an empty segment")]
    EmptySegment(String),
}

impl ClaimPointer {
    /// Check and keep a pointer.
    pub fn parse(pointer: &str) -> Result<ClaimPointer, ClaimPointerError> {
        let Some(rest) = pointer.strip_prefix('/') else {
            return Err(ClaimPointerError::NoLeadingSlash(pointer.to_owned()));
        };
        for segment in rest.split('/') {
            if segment.is_empty() {
                return Err(ClaimPointerError::EmptySegment(pointer.to_owned()));
            }
            let mut chars = segment.chars();
            while let Some(c) = chars.next() {
                if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
                    return Err(ClaimPointerError::BadEscape(pointer.to_owned()));
                }
            }
        }
        Ok(ClaimPointer(pointer.to_owned()))
    }

    /// The pointer of a top-level claim (`name` escaped).
    pub fn claim(name: &str) -> ClaimPointer {
        ClaimPointer(format!("/{}", name.replace('~', "~0").replace('/', "~1")))
    }

    /// The pointer as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn get<'a>(&self, claims: &'a serde_json::Value) -> Option<&'a serde_json::Value> {
        claims.pointer(&self.0).filter(|v| !v.is_null())
    }
}

impl std::fmt::Display for ClaimPointer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where the actor's attributes come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttributeMap {
    /// One claim holding an object: it is the attributes.
    Object(ClaimPointer),
    /// Each attribute from its own claim (absent claims are left out).
    Each(BTreeMap<String, ClaimPointer>),
}

/// How a token's claims map to a principal: one pointer per part. The defaults are the
/// claim names capgate has always read (`sub`, `org`, `roles`, `surfaces`, `attributes`,
/// `requesterDoor`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimMap {
    /// The actor id (a string). Default `/sub`.
    pub actor_id: ClaimPointer,
    /// The actor kind (`user`, `service` or `agent`; never anonymous); without it, or when the claim is absent,
    /// [`ClaimMap::default_kind`].
    pub actor_kind: Option<ClaimPointer>,
    /// The kind of an actor whose token says none. Default `user`.
    pub default_kind: ActorKind,
    /// The tenant namespace (a string). Default `/org`.
    pub namespace: ClaimPointer,
    /// Roles: a list of strings, or one space-separated string (OAuth `scope` style).
    /// Default `/roles`.
    pub roles: ClaimPointer,
    /// Surfaces the token may use (a list of surface names). Default `/surfaces`; a token
    /// without it gets no model surface.
    pub surfaces: ClaimPointer,
    /// Attributes handed to policies. Default: the object at `/attributes`.
    pub attributes: AttributeMap,
    /// Whether the token opens the requester door (a boolean). Default `/requesterDoor`;
    /// absent: exactly when the token names no model surface.
    pub requester_door: ClaimPointer,
}

impl Default for ClaimMap {
    fn default() -> Self {
        ClaimMap {
            actor_id: ClaimPointer::claim("sub"),
            actor_kind: None,
            default_kind: ActorKind::User,
            namespace: ClaimPointer::claim("org"),
            roles: ClaimPointer::claim("roles"),
            surfaces: ClaimPointer::claim("surfaces"),
            attributes: AttributeMap::Object(ClaimPointer::claim("attributes")),
            requester_door: ClaimPointer::claim("requesterDoor"),
        }
    }
}

/// A principal as read from claims, before the door checks it.
#[derive(Debug, Clone, PartialEq)]
pub struct MappedClaims {
    /// Actor id.
    pub actor_id: String,
    /// Actor kind.
    pub kind: ActorKind,
    /// Namespace.
    pub namespace: String,
    /// Roles.
    pub roles: Vec<String>,
    /// Surfaces.
    pub surfaces: Vec<Surface>,
    /// Attributes (an object).
    pub attributes: serde_json::Value,
    /// Whether the requester door opens.
    pub requester_door: bool,
}

/// Why claims did not map to a principal: which part, at which pointer. Never carries a
/// claim's value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClaimError {
    /// A required claim is absent.
    #[error("the {part} claim `{pointer}` is missing")]
    Missing {
        /// Which part of the principal.
        part: &'static str,
        /// Where it was looked for.
        pointer: String,
    },
    /// A claim has the wrong shape.
    #[error("the {part} claim `{pointer}` must be {expected}")]
    Shape {
        /// Which part of the principal.
        part: &'static str,
        /// Where it was read.
        pointer: String,
        /// What it must be.
        expected: &'static str,
    },
}

impl ClaimMap {
    /// Map verified claims to a principal's parts.
    pub fn map(&self, claims: &serde_json::Value) -> Result<MappedClaims, ClaimError> {
        let shape = |part, pointer: &ClaimPointer, expected| ClaimError::Shape {
            part,
            pointer: pointer.to_string(),
            expected,
        };
        let string = |part, pointer: &ClaimPointer| match pointer.get(claims) {
            None => Err(ClaimError::Missing {
                part,
                pointer: pointer.to_string(),
            }),
            Some(serde_json::Value::String(s)) if !s.is_empty() => Ok(s.clone()),
            Some(_) => Err(shape(part, pointer, "a non-empty string")),
        };
        let actor_id = string("actor id", &self.actor_id)?;
        let namespace = string("namespace", &self.namespace)?;
        let kind = match self
            .actor_kind
            .as_ref()
            .and_then(|p| p.get(claims).map(|v| (p, v)))
        {
            None => self.default_kind,
            Some((p, v)) => match v.as_str() {
                Some("user") => ActorKind::User,
                Some("service") => ActorKind::Service,
                Some("agent") => ActorKind::Agent,
                _ => return Err(shape("actor kind", p, "\"user\", \"service\" or \"agent\"")),
            },
        };
        let roles = match self.roles.get(claims) {
            None => Vec::new(),
            Some(serde_json::Value::String(s)) => s.split_whitespace().map(str::to_owned).collect(),
            Some(serde_json::Value::Array(items)) => items
                .iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect::<Option<_>>()
                .ok_or_else(|| shape("roles", &self.roles, "a list of strings"))?,
            Some(_) => return Err(shape("roles", &self.roles, "a list of strings")),
        };
        let surfaces = match self.surfaces.get(claims) {
            None => Vec::new(),
            Some(serde_json::Value::Array(items)) => items
                .iter()
                .map(|v| v.as_str().and_then(|s| s.parse::<Surface>().ok()))
                .collect::<Option<_>>()
                .ok_or_else(|| shape("surfaces", &self.surfaces, "a list of surface names"))?,
            Some(_) => return Err(shape("surfaces", &self.surfaces, "a list of surface names")),
        };
        let attributes = match &self.attributes {
            AttributeMap::Object(p) => match p.get(claims) {
                None => serde_json::json!({}),
                Some(v @ serde_json::Value::Object(_)) => v.clone(),
                Some(_) => return Err(shape("attributes", p, "an object")),
            },
            AttributeMap::Each(each) => serde_json::Value::Object(
                each.iter()
                    .filter_map(|(name, p)| p.get(claims).map(|v| (name.clone(), v.clone())))
                    .collect(),
            ),
        };
        let requester_door = match self.requester_door.get(claims) {
            None => surfaces.is_empty(),
            Some(serde_json::Value::Bool(b)) => *b,
            Some(_) => return Err(shape("requester door", &self.requester_door, "a boolean")),
        };
        Ok(MappedClaims {
            actor_id,
            kind,
            namespace,
            roles,
            surfaces,
            attributes,
            requester_door,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pointers_are_checked() {
        assert!(ClaimPointer::parse("/sub").is_ok());
        assert!(ClaimPointer::parse("/a~1b/c~0d").is_ok());
        assert_eq!(
            ClaimPointer::parse("sub"),
            Err(ClaimPointerError::NoLeadingSlash("sub".into()))
        );
        assert_eq!(
            ClaimPointer::parse("/a~2"),
            Err(ClaimPointerError::BadEscape("/a~2".into()))
        );
        assert_eq!(
            ClaimPointer::parse("/a//b"),
            Err(ClaimPointerError::EmptySegment("/a//b".into()))
        );
        assert_eq!(
            ClaimPointer::claim("https://x/y").as_str(),
            "/https:~1~1x~1y"
        );
    }

    #[test]
    fn nested_claims_map_and_wrong_shapes_are_named() {
        let map = ClaimMap {
            actor_kind: Some(ClaimPointer::parse("/capgate/kind").unwrap()),
            namespace: ClaimPointer::parse("/https:~1~1corp.example~1tenant").unwrap(),
            roles: ClaimPointer::parse("/realm_access/roles").unwrap(),
            surfaces: ClaimPointer::parse("/capgate/surfaces").unwrap(),
            attributes: AttributeMap::Each(BTreeMap::from([
                ("email".into(), ClaimPointer::parse("/email").unwrap()),
                (
                    "dept".into(),
                    ClaimPointer::parse("/org_info/dept").unwrap(),
                ),
            ])),
            ..ClaimMap::default()
        };
        let claims = json!({
            "sub": "u_1", "email": "a@example.com",
            "https://corp.example/tenant": "org_1",
            "realm_access": {"roles": ["approver"]},
            "capgate": {"kind": "service", "surfaces": ["mcp"]},
        });
        let m = map.map(&claims).unwrap();
        assert_eq!(m.namespace, "org_1");
        assert_eq!(m.kind, ActorKind::Service);
        assert_eq!(m.roles, ["approver"]);
        assert_eq!(m.surfaces, [Surface::Mcp]);
        assert_eq!(m.attributes, json!({"email": "a@example.com"}));
        assert!(!m.requester_door);
        let mut bad = claims.clone();
        bad["realm_access"]["roles"] = json!("approver manager");
        assert_eq!(map.map(&bad).unwrap().roles, ["approver", "manager"]);
        bad["capgate"]["surfaces"] = json!(["nope"]);
        assert!(matches!(
            map.map(&bad),
            Err(ClaimError::Shape {
                part: "surfaces",
                ..
            })
        ));
        let mut missing = claims;
        missing
            .as_object_mut()
            .unwrap()
            .remove("https://corp.example/tenant");
        assert!(matches!(
            map.map(&missing),
            Err(ClaimError::Missing {
                part: "namespace",
                ..
            })
        ));
    }
}
