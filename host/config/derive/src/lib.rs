//! `#[derive(Keys)]` for capgate's configuration sections: every field declares, once and
//! on itself, how a running server takes a new value of it, next to its doc comment and
//! type, so the reload check, the key reference and the test that every key is classified
//! all read one declaration (see `capgate_config::keys`).
//!
//! A table (the struct) may declare the class its fields have unless they say otherwise
//! (`#[key(live)]` on the struct); each field then takes at most one of:
//! - `#[key(live)]`: a reload applies the new value;
//! - `#[key(restart = "why")]`: only a restart does; a reload that changes it is refused
//!   with `why`;
//! - `#[key(skip)]`: not a key of the file (derived state such as the file's own path).
//!
//! and may add `table` (a nested table, `T` or `Option<T>`) or `tables` (an array or a map
//! of tables, `Vec<T>` or `BTreeMap<String, T>`, whose keys are listed under `*`). A field
//! with no class of its own on a table without a default is a compile error, so no key
//! goes unclassified.
//!
//! A table whose type belongs to another crate (capgate-core's `RetryConfig`, which its own
//! crate deserializes and checks) cannot carry `#[key]` on its fields: `#[key(table,
//! declared = "RetryKeys")]` (or `tables`) takes its keys and schema from a type declared
//! field for field in this crate instead; its values are that crate's to check, so the
//! field reports no range problems of its own.
//!
//! A number may declare its range there too: `#[key(range = 1..=MAX_MS, unit =
//! "milliseconds")]` (any range expression of the field's type; on an `Option<T>` it
//! applies when the key is set). The reference lists it, and `Keys::range_problems`
//! reports every value outside its range, in nested tables too, so `capgate check` names
//! each one with the others.
//!
//! A string that may hold a secret says `#[key(secret)]`: the file may then give it as
//! `{ env = "VAR" }` or `{ file = "path" }` instead of writing it, and the loader puts the
//! variable's value or the file's contents in its place before anything reads it (a missing
//! one is a problem located at the key).
//!
//! The default of each key is read from the serde attributes serde itself obeys: a field's
//! `#[serde(default)]` / `#[serde(default = "f")]`, else the table's `#[serde(default)]`
//! (the value in the table's `Default`), else `Option`'s absence; a key with none of these
//! is required. A table that serde does not deserialize whole (the file's top level) says
//! `#[key(default)]` for the same. The derive also implements
//! `capgate_config::schema::Schema` for the table, from the same keys, so the JSON Schema
//! of the file is generated from these declarations too.
//!
//! A choice ("exactly one of") is a sum type in the model, read from the table as written:
//! `#[key(file = "RawTable")]` on a struct or an enum that serde reads with
//! `#[serde(try_from = "RawTable")]` takes its keys, ranges and schema from `RawTable`
//! (whose own `#[derive(Keys)]` declares them) and checks its ranges through
//! `RawTable::from(&self)`. The conversion says "exactly one of" once, and serde locates
//! its error at the table like any other.

use heck::ToLowerCamelCase;
use proc_macro::TokenStream;
use quote::quote;
use syn::{
    Data, DeriveInput, Fields, GenericArgument, LitStr, PathArguments, Type, parse_macro_input,
};

/// Implements `capgate_config::keys::Keys` from the `#[key(...)]` attribute of every field.
#[proc_macro_derive(Keys, attributes(key))]
pub fn derive_keys(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(&input) {
        Ok(ts) => ts.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

#[derive(Clone)]
enum Class {
    Live,
    Restart(LitStr),
    Skip,
}

enum Nesting {
    None,
    Table,
    Tables,
}

/// Where a key's value comes from when the file leaves it out (serde's own attributes).
enum SerdeDefault {
    None,
    /// `#[serde(default)]`: the type's `Default`.
    Trait,
    /// `#[serde(default = "path")]`.
    Path(syn::ExprPath),
}

/// Reads `default` / `default = "path"` out of one `#[serde(...)]` attribute, skipping
/// serde's other settings; `rename = "x"` goes to `rename`.
fn serde_settings(
    attr: &syn::Attribute,
    default: &mut SerdeDefault,
    mut rename: Option<&mut Option<String>>,
) -> syn::Result<()> {
    attr.parse_nested_meta(|meta| {
        if meta.path.is_ident("rename") && rename.is_some() {
            let name = meta.value()?.parse::<LitStr>()?.value();
            if let Some(r) = rename.as_mut() {
                **r = Some(name);
            }
        } else if meta.path.is_ident("default") {
            if meta.input.peek(syn::Token![=]) {
                let path: LitStr = meta.value()?.parse()?;
                *default = SerdeDefault::Path(path.parse()?);
            } else {
                *default = SerdeDefault::Trait;
            }
        } else if meta.input.peek(syn::Token![=]) {
            let _: syn::Expr = meta.value()?.parse()?;
        } else if meta.input.peek(syn::token::Paren) {
            let _content;
            syn::parenthesized!(_content in meta.input);
        }
        Ok(())
    })
}

/// `#[key(file = "Raw")]` on the item, if it has one.
fn file_form(input: &DeriveInput) -> syn::Result<Option<syn::Path>> {
    let mut file = None;
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("key")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("file") {
                let raw: LitStr = meta.value()?.parse()?;
                file = Some(raw.parse::<syn::Path>()?);
            } else if meta.input.peek(syn::Token![=]) {
                let _: syn::Expr = meta.value()?.parse()?;
            }
            Ok(())
        })?;
    }
    Ok(file)
}

fn expand(input: &DeriveInput) -> syn::Result<proc_macro2::TokenStream> {
    let name = &input.ident;
    if let Some(raw) = file_form(input)? {
        return Ok(quote! {
            impl crate::keys::Keys for #name {
                fn keys(
                    prefix: &str,
                    inherited: ::core::option::Option<&'static str>,
                    out: &mut ::std::vec::Vec<crate::keys::Key>,
                ) {
                    <#raw as crate::keys::Keys>::keys(prefix, inherited, out)
                }

                fn range_problems(
                    &self,
                    prefix: &str,
                    out: &mut ::std::vec::Vec<(::std::string::String, ::std::string::String)>,
                ) {
                    crate::keys::Keys::range_problems(&<#raw as ::core::convert::From<&Self>>::from(self), prefix, out)
                }
            }

            impl crate::schema::Schema for #name {
                fn schema() -> ::serde_json::Value {
                    <#raw as crate::schema::Schema>::schema()
                }
            }
        });
    }
    let Data::Struct(data) = &input.data else {
        return Err(syn::Error::new_spanned(
            input,
            "Keys is derived for structs",
        ));
    };
    let Fields::Named(fields) = &data.fields else {
        return Err(syn::Error::new_spanned(input, "Keys needs named fields"));
    };
    // `#[key(live)]` / `#[key(restart = "why")]` on the struct: the class of every field
    // that does not say otherwise.
    let mut default_class = None;
    // The table's own default (serde's container `default`, or `#[key(default)]`).
    let mut table_default = SerdeDefault::None;
    for attr in &input.attrs {
        if attr.path().is_ident("serde") {
            serde_settings(attr, &mut table_default, None)?;
        }
    }
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("key")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("live") {
                default_class = Some(Class::Live);
                Ok(())
            } else if meta.path.is_ident("restart") {
                default_class = Some(Class::Restart(meta.value()?.parse()?));
                Ok(())
            } else if meta.path.is_ident("default") {
                table_default = SerdeDefault::Trait;
                Ok(())
            } else if meta.path.is_ident("file") {
                let _: LitStr = meta.value()?.parse()?;
                Ok(())
            } else {
                Err(meta.error(
                    "a table takes live or restart = \"why\" (its keys' default class) and default",
                ))
            }
        })?;
    }
    let defaults = match &table_default {
        SerdeDefault::None => quote!(),
        SerdeDefault::Trait => {
            quote!(let __defaults = <Self as ::core::default::Default>::default();)
        }
        SerdeDefault::Path(p) => quote!(let __defaults: Self = #p();),
    };
    let has_table_default = !matches!(table_default, SerdeDefault::None);
    let mut entries = Vec::new();
    let mut ranges = Vec::new();
    for field in &fields.named {
        let Some(ident) = &field.ident else { continue };
        let mut class = None;
        let mut nesting = Nesting::None;
        let mut docs = Vec::new();
        let mut rename = None;
        let mut field_default = SerdeDefault::None;
        let mut range: Option<syn::Expr> = None;
        let mut unit: Option<LitStr> = None;
        let mut secret = false;
        let mut declared: Option<syn::Type> = None;
        for attr in &field.attrs {
            if attr.path().is_ident("doc") {
                if let syn::Meta::NameValue(nv) = &attr.meta
                    && let syn::Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Str(s),
                        ..
                    }) = &nv.value
                {
                    docs.push(s.value().trim().to_string());
                }
            } else if attr.path().is_ident("serde") {
                // `#[serde(rename = "x")]` names the key and `default` gives its default;
                // other serde settings are serde's.
                serde_settings(attr, &mut field_default, Some(&mut rename))?;
            } else if attr.path().is_ident("key") {
                attr.parse_nested_meta(|meta| {
                    let set = |class: &mut Option<Class>, c: Class| {
                        if class.is_some() {
                            return Err(meta.error("a key has one class: live, restart or skip"));
                        }
                        *class = Some(c);
                        Ok(())
                    };
                    if meta.path.is_ident("live") {
                        set(&mut class, Class::Live)
                    } else if meta.path.is_ident("skip") {
                        set(&mut class, Class::Skip)
                    } else if meta.path.is_ident("restart") {
                        let why: LitStr = meta.value()?.parse()?;
                        set(&mut class, Class::Restart(why))
                    } else if meta.path.is_ident("table") {
                        nesting = Nesting::Table;
                        Ok(())
                    } else if meta.path.is_ident("tables") {
                        nesting = Nesting::Tables;
                        Ok(())
                    } else if meta.path.is_ident("range") {
                        range = Some(meta.value()?.parse()?);
                        Ok(())
                    } else if meta.path.is_ident("unit") {
                        unit = Some(meta.value()?.parse()?);
                        Ok(())
                    } else if meta.path.is_ident("secret") {
                        secret = true;
                        Ok(())
                    } else if meta.path.is_ident("declared") {
                        let ty: LitStr = meta.value()?.parse()?;
                        declared = Some(ty.parse()?);
                        Ok(())
                    } else {
                        Err(meta.error(
                            "expected live, restart = \"why\", skip, table, tables, declared = \"Type\", range = A..=B, unit = \"…\" or secret",
                        ))
                    }
                })?;
            }
        }
        let Some(class) = class.or_else(|| default_class.clone()) else {
            return Err(syn::Error::new_spanned(
                ident,
                "classify this key: #[key(live)], #[key(restart = \"why\")] or #[key(skip)] on it, or a default class on its table",
            ));
        };
        if unit.is_some() && range.is_none() {
            return Err(syn::Error::new_spanned(
                ident,
                "`unit` names the unit of a `range`",
            ));
        }
        let reload = match class {
            Class::Skip => continue,
            Class::Live => quote!(::core::option::Option::None),
            Class::Restart(why) => quote!(::core::option::Option::Some(#why)),
        };
        let key = rename.unwrap_or_else(|| ident.to_string().to_lower_camel_case());
        let doc = docs.join(" ");
        let ty = &field.ty;
        let ty_name = type_name(ty);
        let optional = unwrap_generic(ty, &["Option"]).is_some();
        let (nested, nested_ranges) = match nesting {
            Nesting::None => (quote!(), quote!()),
            Nesting::Table | Nesting::Tables if declared.is_some() => {
                // The table's keys are declared on another type (a type of another crate,
                // whose fields cannot carry `#[key]`); its values are that crate's to check.
                let pointer = if matches!(nesting, Nesting::Tables) {
                    quote!(&::std::format!("{pointer}/*"))
                } else {
                    quote!(&pointer)
                };
                (
                    quote!(<#declared as crate::keys::Keys>::keys(#pointer, restart, out);),
                    quote!(),
                )
            }
            Nesting::Table => {
                let inner = unwrap_generic(ty, &["Option"]).unwrap_or(ty);
                let ranges = if optional {
                    quote!(if let ::core::option::Option::Some(t) = &self.#ident {
                        crate::keys::Keys::range_problems(t, &pointer, out);
                    })
                } else {
                    quote!(crate::keys::Keys::range_problems(&self.#ident, &pointer, out);)
                };
                (
                    quote!(<#inner as crate::keys::Keys>::keys(&pointer, restart, out);),
                    ranges,
                )
            }
            Nesting::Tables => {
                let Some(inner) = unwrap_generic(ty, &["Vec", "BTreeMap"]) else {
                    return Err(syn::Error::new_spanned(
                        ty,
                        "`tables` is a Vec<T> or a BTreeMap<String, T>",
                    ));
                };
                let ranges = if unwrap_generic(ty, &["Vec"]).is_some() {
                    quote!(for (i, t) in self.#ident.iter().enumerate() {
                        crate::keys::Keys::range_problems(t, &::std::format!("{pointer}/{i}"), out);
                    })
                } else {
                    quote!(for (name, t) in &self.#ident {
                        let at = ::std::format!("{pointer}/{}", crate::located::seg(name));
                        crate::keys::Keys::range_problems(t, &at, out);
                    })
                };
                (
                    quote!(<#inner as crate::keys::Keys>::keys(&::std::format!("{pointer}/*"), restart, out);),
                    ranges,
                )
            }
        };
        let unit = unit.map_or_else(String::new, |u| u.value());
        let (range_text, own_range) = match &range {
            None => (quote!(::core::option::Option::None), quote!()),
            Some(r) => {
                let check = if optional {
                    quote!(if let ::core::option::Option::Some(v) = &self.#ident {
                        crate::keys::check_range(&pointer, v, &(#r), #unit, out);
                    })
                } else {
                    quote!(crate::keys::check_range(&pointer, &self.#ident, &(#r), #unit, out);)
                };
                (
                    quote!(::core::option::Option::Some(crate::keys::describe(&(#r), #unit))),
                    check,
                )
            }
        };
        if !own_range.is_empty() || !nested_ranges.is_empty() {
            ranges.push(quote! {
                {
                    let pointer = ::std::format!("{}/{}", prefix, #key);
                    #own_range
                    #nested_ranges
                }
            });
        }
        // A table whose keys are declared on another type takes its schema from it too.
        let schema_ty = match &declared {
            None => quote!(#ty),
            Some(d) if unwrap_generic(ty, &["BTreeMap"]).is_some() => {
                quote!(::std::collections::BTreeMap<::std::string::String, #d>)
            }
            Some(d) if unwrap_generic(ty, &["Vec"]).is_some() => quote!(::std::vec::Vec<#d>),
            Some(d) if optional => quote!(::core::option::Option<#d>),
            Some(d) => quote!(#d),
        };
        let bounds = match &range {
            None => quote!((::core::option::Option::None, ::core::option::Option::None)),
            Some(r) => quote!(crate::keys::bounds(&(#r))),
        };
        let is_tables = matches!(nesting, Nesting::Tables);
        // An empty array or map of tables, without asking its tables to serialize.
        let no_tables = if unwrap_generic(ty, &["Vec"]).is_some() {
            quote!(crate::keys::KeyDefault::Value(::serde_json::Value::Array(
                ::std::vec::Vec::new()
            )))
        } else {
            quote!(crate::keys::KeyDefault::Value(::serde_json::Value::Object(
                ::serde_json::Map::new()
            )))
        };
        let default = match (&field_default, has_table_default) {
            (SerdeDefault::Path(p), _) => quote!(crate::keys::KeyDefault::of(&#p())),
            (SerdeDefault::Trait, _) if is_tables => no_tables,
            (SerdeDefault::Trait, _) if !matches!(nesting, Nesting::None) => {
                quote!(crate::keys::KeyDefault::Table)
            }
            (SerdeDefault::Trait, _) => {
                quote!(crate::keys::KeyDefault::of(&<#ty as ::core::default::Default>::default()))
            }
            (SerdeDefault::None, true) if is_tables => quote!(
                if __defaults.#ident.is_empty() {
                    #no_tables
                } else {
                    crate::keys::KeyDefault::Table
                }
            ),
            (SerdeDefault::None, true) if matches!(nesting, Nesting::Table) => {
                if optional {
                    quote!(crate::keys::KeyDefault::Absent)
                } else {
                    quote!(crate::keys::KeyDefault::Table)
                }
            }
            (SerdeDefault::None, true) => quote!(crate::keys::KeyDefault::of(&__defaults.#ident)),
            (SerdeDefault::None, false) if optional => quote!(crate::keys::KeyDefault::Absent),
            (SerdeDefault::None, false) => quote!(crate::keys::KeyDefault::Required),
        };
        entries.push(quote! {
            {
                let pointer = ::std::format!("{}/{}", prefix, #key);
                let own: ::core::option::Option<&'static str> = #reload;
                let restart = inherited.or(own);
                let (minimum, maximum) = #bounds;
                out.push(crate::keys::Key {
                    pointer: pointer.clone(),
                    doc: #doc,
                    ty: #ty_name,
                    schema: crate::schema::secret_or(<#schema_ty as crate::schema::Schema>::schema(), #secret),
                    default: #default,
                    range: #range_text,
                    minimum,
                    maximum,
                    restart,
                    inherited: inherited.is_some(),
                    secret: #secret,
                });
                #nested
            }
        });
    }
    Ok(quote! {
        impl crate::keys::Keys for #name {
            fn keys(
                prefix: &str,
                inherited: ::core::option::Option<&'static str>,
                out: &mut ::std::vec::Vec<crate::keys::Key>,
            ) {
                #defaults
                #(#entries)*
            }

            fn range_problems(
                &self,
                prefix: &str,
                out: &mut ::std::vec::Vec<(::std::string::String, ::std::string::String)>,
            ) {
                #(#ranges)*
            }
        }

        impl crate::schema::Schema for #name {
            fn schema() -> ::serde_json::Value {
                let mut keys = ::std::vec::Vec::new();
                <Self as crate::keys::Keys>::keys("", ::core::option::Option::None, &mut keys);
                crate::schema::table(&keys)
            }
        }
    })
}

/// The generic argument of `Option<T>` / `Vec<T>` / `BTreeMap<K, T>` (the last one).
fn unwrap_generic<'a>(ty: &'a Type, outer: &[&str]) -> Option<&'a Type> {
    let Type::Path(p) = ty else { return None };
    let seg = p.path.segments.last()?;
    if !outer.iter().any(|o| seg.ident == o) {
        return None;
    }
    let PathArguments::AngleBracketed(args) = &seg.arguments else {
        return None;
    };
    args.args.iter().rev().find_map(|a| match a {
        GenericArgument::Type(t) => Some(t),
        _ => None,
    })
}

/// The type as a reader of the reference writes it (`Option<String>`, not `Option < String >`).
fn type_name(ty: &Type) -> String {
    let raw = quote!(#ty).to_string();
    raw.replace(" < ", "<")
        .replace(" <", "<")
        .replace("< ", "<")
        .replace(" >", ">")
        .replace(" , ", ", ")
        .replace(" :: ", "::")
}
