//! `Debug` for the gateway's option and handle types, most of which hold handles that are
//! not `Debug` themselves (a runtime, a journal, a session store): one declaration of which
//! fields a type shows, instead of a hand-written `debug_struct` chain per type.

/// Implement `Debug` for `$ty` as its listed fields, each as it is or through a projection
/// (`field: Option::is_some` shows whether a handle is set), then `..` for the rest.
macro_rules! debug_fields {
    ($ty:ident { $($field:ident $(: $show:path)?),* $(,)? }) => {
        impl ::std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.debug_struct(stringify!($ty))
                    $(.field(
                        stringify!($field),
                        &$crate::debug::debug_fields!(@show self.$field $(, $show)?),
                    ))*
                    .finish_non_exhaustive()
            }
        }
    };
    (@show $value:expr) => { $value };
    (@show $value:expr, $show:path) => { $show(&$value) };
}
pub(crate) use debug_fields;
