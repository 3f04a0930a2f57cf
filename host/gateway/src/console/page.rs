//! The page: three static files embedded in the binary (no framework, no build step, no
//! CDN), the document naming its prefix.

/// The one document; it routes on its path.
pub(super) const INDEX_HTML: &str = include_str!("assets/index.html");
/// Its script (renders every value with `textContent`, never as HTML).
pub(super) const CONSOLE_JS: &str = include_str!("assets/console.js");
/// Its stylesheet.
pub(super) const CONSOLE_CSS: &str = include_str!("assets/console.css");
/// What index.html says where the prefix goes.
pub(super) const PREFIX_PLACEHOLDER: &str = "__CONSOLE_PREFIX__";
/// What index.html says where the single sign-on button goes (empty without one).
pub(super) const SIGN_ON_PLACEHOLDER: &str = "__CONSOLE_SIGN_ON__";
