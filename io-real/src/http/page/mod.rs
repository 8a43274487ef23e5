//! The directory page people browse: its HTML ([`render`]), the embedded stylesheet and
//! script ([`assets`]), and the human-readable forms of sizes, dates and kinds ([`text`]).
//!
//! The JSON listing (see [`super::listing`]) is the interface for scripts; this page is
//! for people, and works with JavaScript off.

pub mod archive;
pub mod args;
pub mod assets;
pub mod csrf;
pub mod download;
pub(crate) mod error_page;
pub mod qr;
pub mod readme;
pub mod render;
pub(crate) mod response;
pub mod row;
pub mod search;
pub mod text;

/// The Content-Security-Policy of the directory page: its own script and stylesheet only
/// (no inline script, style or event handler), images from the site or data URIs (the
/// icons), audio, video and framed documents (the viewer's PDF) from the site only,
/// requests and form posts to the site only, and never framed by another site.
pub const PAGE_CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; media-src 'self'; frame-src 'self'; connect-src 'self'; \
     form-action 'self'; base-uri 'none'; frame-ancestors 'self'";
