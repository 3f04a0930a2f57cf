//! [`wire_enum!`](crate::wire_enum): one declaration of how a fieldless enum is spelled on
//! the wire (in JSON, stored rows, metric labels, query strings), instead of a hand-written
//! `as_str` match and a second, hand-written parser that can drift from it.

/// Give a fieldless enum its wire spellings, declared once:
///
/// - `ALL`: every variant, in the order listed (list them in declaration order);
/// - `as_str(self) -> &'static str`: the wire spelling;
/// - `parse(&str) -> Option<Self>`: the exact inverse of `as_str` (no aliases, no case
///   folding), for text that comes from outside (stored rows, queries, flags);
/// - with `: Display` after the type name, a `Display` that writes `as_str`.
///
/// Serde stays with the enum's own derive (`rename_all`/`rename`), so its (de)serialized
/// form is whatever it was; the tests of each crate check the two agree. A `FromStr` with
/// its own error type is written beside the macro, on top of `parse`.
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
    (
        $ty:ident $(: $($with:ident),+)? {
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
        $($($crate::wire_enum!(@with $with $ty);)+)?
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
