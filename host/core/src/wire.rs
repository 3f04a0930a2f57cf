//! [`wire_enum!`](crate::wire_enum): one declaration of how a fieldless enum is spelled on
//! the wire (in JSON, stored rows, metric labels, query strings), instead of a hand-written
//! `as_str` match and a second, hand-written parser that can drift from it; and
//! `checked_string!`: the conversions every checked string type ([`BoundedId`](crate::id::BoundedId),
//! [`Sha256Hex`](crate::digest::Sha256Hex)) offers, all through its one checking constructor.

/// Give a fieldless enum its wire spellings, declared once:
///
/// - `ALL`: every variant, in the order listed (list them in declaration order);
/// - `as_str(self) -> &'static str`: the wire spelling;
/// - `parse(&str) -> Option<Self>`: the exact inverse of `as_str` (no aliases, no case
///   folding), for text that comes from outside (stored rows, queries, flags);
/// - with `: Display` after the type name, a `Display` that writes `as_str`;
/// - with `: FromStr("what")`, a `FromStr` on top of `parse` whose `String` error names
///   the field and every spelling: "unknown what `x` (expected a, b or c)".
///
/// Serde stays with the enum's own derive (`rename_all`/`rename`), so its (de)serialized
/// form is whatever it was; the tests of each crate check the two agree. A `FromStr` with
/// another error type is written beside the macro, on top of `parse`.
///
/// ```
/// #[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// pub enum Color {
///     /// Red.
///     Red,
///     /// Dark blue.
///     DarkBlue,
/// }
/// capgate_core::wire_enum! {
///     Color: Display {
///         Red => "red",
///         DarkBlue => "dark-blue",
///     }
/// }
/// assert_eq!(Color::DarkBlue.as_str(), "dark-blue");
/// assert_eq!(Color::parse("red"), Some(Color::Red));
/// assert_eq!(Color::parse("Red"), None);
/// assert_eq!(Color::ALL, [Color::Red, Color::DarkBlue]);
/// assert_eq!(Color::Red.to_string(), "red");
///
/// #[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// pub enum Size {
///     /// Small.
///     Small,
///     /// Large.
///     Large,
/// }
/// capgate_core::wire_enum! {
///     Size: FromStr("size") {
///         Small => "small",
///         Large => "large",
///     }
/// }
/// assert_eq!("large".parse::<Size>(), Ok(Size::Large));
/// assert_eq!(
///     "huge".parse::<Size>(),
///     Err("unknown size `huge` (expected small or large)".to_string())
/// );
/// ```
#[macro_export]
macro_rules! wire_enum {
    (@with Display $ty:ident) => {
        impl ::core::fmt::Display for $ty {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
    (@with FromStr ($what:literal) $ty:ident) => {
        impl ::core::str::FromStr for $ty {
            type Err = ::std::string::String;
            fn from_str(s: &str) -> ::core::result::Result<Self, Self::Err> {
                $ty::parse(s).ok_or_else(|| {
                    $crate::__unknown_spelling($what, s, &$ty::ALL.map($ty::as_str))
                })
            }
        }
    };
    (
        $ty:ident $(: $($with:ident $(($arg:literal))?),+)? {
            $($variant:ident => $wire:literal),+ $(,)?
        }
    ) => {
        impl $ty {
            // `ALL` and `parse` are generated for every enum; a private one may use neither.
            #[doc = concat!("Every `", stringify!($ty), "`, in declaration order.")]
            #[allow(dead_code)]
            pub const ALL: [$ty; [$($wire),+].len()] = [$($ty::$variant),+];

            #[doc = concat!("The wire spelling, one of" $(, " `", $wire, "`")+, ".")]
            pub fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $wire,)+
                }
            }

            /// The variant spelled exactly `s` on the wire (the inverse of `as_str`), or
            /// `None`: text read back from outside is untrusted.
            #[allow(dead_code)]
            pub fn parse(s: &str) -> ::core::option::Option<Self> {
                match s {
                    $($wire => ::core::option::Option::Some($ty::$variant),)+
                    _ => ::core::option::Option::None,
                }
            }
        }
        $($($crate::wire_enum!(@with $with $(($arg))? $ty);)+)?
    };
}

/// The error of a `wire_enum!` `FromStr`: "unknown `what` `s` (expected a, b or c)".
/// Public only for the macro's expansion in other crates.
#[doc(hidden)]
pub fn unknown_spelling(what: &str, s: &str, spellings: &[&str]) -> String {
    let expected = match spellings.split_last() {
        Some((last, [])) => (*last).to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    };
    format!("unknown {what} `{s}` (expected {expected})")
}

/// The conversions of a checked string type: a newtype over `String` whose only way in is
/// `$ty::new(value) -> Result<$ty, $err>` (which checks the rule), so every parse,
/// `try_from` and deserialization (`#[serde(try_from = "String", into = "String")]` on the
/// type) is checked the same way, and the value reads as the `str` it holds.
macro_rules! checked_string {
    ($ty:ident, $err:ty) => {
        impl $ty {
            /// The value as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The value's text, owned.
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl TryFrom<String> for $ty {
            type Error = $err;
            fn try_from(value: String) -> Result<Self, $err> {
                $ty::new(value)
            }
        }

        impl TryFrom<&str> for $ty {
            type Error = $err;
            fn try_from(value: &str) -> Result<Self, $err> {
                $ty::new(value)
            }
        }

        impl ::std::str::FromStr for $ty {
            type Err = $err;
            fn from_str(value: &str) -> Result<Self, $err> {
                $ty::new(value)
            }
        }

        impl From<$ty> for String {
            fn from(value: $ty) -> String {
                value.0
            }
        }

        impl ::std::ops::Deref for $ty {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $ty {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl ::std::borrow::Borrow<str> for $ty {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl ::std::fmt::Display for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl PartialEq<str> for $ty {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $ty {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $ty {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }

        impl PartialEq<$ty> for String {
            fn eq(&self, other: &$ty) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<$ty> for str {
            fn eq(&self, other: &$ty) -> bool {
                self == other.0
            }
        }
    };
}
pub(crate) use checked_string;

/// Builder setters, one line each: `name => field: Type;` becomes
/// `pub fn name(mut self, value: Type) -> Self`, which stores `value` in `self.field`. The
/// library builders (errors, Wasm limits and bindings, the gateway's application) write
/// their plain setters through it, so a setter is declared, not written out again.
///
/// ```
/// #[derive(Default)]
/// struct Options {
///     retries: u32,
/// }
/// impl Options {
///     capgate_core::setters! {
///         /// How many times to retry.
///         with_retries => retries: u32;
///     }
/// }
/// assert_eq!(Options::default().with_retries(3).retries, 3);
/// ```
#[macro_export]
macro_rules! setters {
    ($($(#[doc = $doc:literal])* $name:ident => $field:ident: $ty:ty;)+) => {
        $(
            $(#[doc = $doc])*
            pub fn $name(mut self, value: $ty) -> Self {
                self.$field = value;
                self
            }
        )+
    };
}

#[cfg(test)]
mod tests {
    use crate::actor::{ActorKind, Surface};
    use crate::approval::{ApprovalStatus, DecidedVia, DecisionStatus};
    use crate::authz::Operation;
    use crate::error::{ErrorCode, Stage};
    use crate::journal::InvocationState;
    use crate::meta::{Discovery, Risk, SideEffect};
    use crate::policy::Phase;
    use serde::Serialize;
    use serde::de::DeserializeOwned;

    /// Serde (the enum's own derive) and the macro's spellings must agree both ways.
    fn agree<T>(all: &[T], as_str: fn(T) -> &'static str, parse: fn(&str) -> Option<T>)
    where
        T: Copy + PartialEq + std::fmt::Debug + Serialize + DeserializeOwned,
    {
        for &v in all {
            let wire = as_str(v);
            assert_eq!(serde_json::to_value(v).unwrap(), serde_json::json!(wire));
            assert_eq!(
                serde_json::from_value::<T>(serde_json::json!(wire)).unwrap(),
                v
            );
            assert_eq!(parse(wire), Some(v));
        }
        assert_eq!(parse("no such spelling"), None);
    }

    #[test]
    fn the_wire_spellings_are_the_serde_spellings() {
        agree(&ErrorCode::ALL, ErrorCode::as_str, ErrorCode::parse);
        agree(&Stage::ALL, Stage::as_str, Stage::parse);
        agree(&ActorKind::ALL, ActorKind::as_str, ActorKind::parse);
        agree(&Surface::ALL, Surface::as_str, Surface::parse);
        agree(&Operation::ALL, Operation::as_str, Operation::parse);
        agree(&SideEffect::ALL, SideEffect::as_str, SideEffect::parse);
        agree(&Risk::ALL, Risk::as_str, Risk::parse);
        agree(&Discovery::ALL, Discovery::as_str, Discovery::parse);
        agree(&Phase::ALL, Phase::as_str, Phase::parse);
        agree(
            &ApprovalStatus::ALL,
            ApprovalStatus::as_str,
            ApprovalStatus::parse,
        );
        agree(&DecidedVia::ALL, DecidedVia::as_str, DecidedVia::parse);
        agree(
            &DecisionStatus::ALL,
            DecisionStatus::as_str,
            DecisionStatus::parse,
        );
        agree(
            &InvocationState::ALL,
            InvocationState::as_str,
            InvocationState::parse,
        );
    }

    #[test]
    fn display_writes_the_wire_spelling() {
        for c in ErrorCode::ALL {
            assert_eq!(c.to_string(), c.as_str());
        }
        for s in Surface::ALL {
            assert_eq!(s.to_string(), s.as_str());
        }
    }
}
