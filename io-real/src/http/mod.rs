//! Static file serving for one worker: hyper 1 over tokio.
//!
//! Every decision that depends on the request (path containment, conditional requests,
//! byte ranges, listing format, content type, content coding, digest algorithm, access
//! policy) is a pure planning function in its own module and is tested without sockets.
//! [`site`] turns those plans into responses, the private `lookup` module does the
//! file-system work they ask for (off the async threads), and [`conn`] drives one accepted
//! connection, including draining.
//!
//! Per-worker state lives in the [`Site`]: the byte-bounded [`encoded_cache`], the
//! byte-bounded cache of small files' contents (`file_cache`), and the [`single_flight`]
//! structures that coalesce same-key encodings and digests.

pub mod acme_challenge;
pub mod body;
mod cached_read;
pub mod compress;
pub mod conditional;
pub mod conn;
pub mod dav;
pub mod digest;
pub mod encoded_cache;
pub mod error;
mod file_cache;
mod head_line;
pub mod host;
mod item_counts;
mod length_overflow;
pub mod listing;
pub mod long_work;
pub(crate) mod lookup;
mod lru;
pub mod meter;
pub mod mime;
pub mod page;
pub mod path;
pub(crate) mod pieces;
pub(crate) mod pipeline;
mod plain_stream;
pub mod policy;
pub mod range;
pub mod single_flight;
pub mod site;
mod sniff;
mod sync;
mod tokens;
pub(crate) use tokens::has_token;
pub mod tunnel;
pub mod upload;
pub mod validate;
pub mod watchdog;

pub use body::Body;
pub use conn::{Transport, serve_connection, serve_connection_over, serve_plain, serve_tls};
pub use error::{HttpError, error_response};
/// How long after its last change a file's bytes may be kept in the per-worker file cache.
pub use file_cache::SETTLE as FILE_CACHE_SETTLE;
pub use plain_stream::{LastResponse, PlainStream};
pub use site::{Site, SiteConfig};
pub use watchdog::{Activity, Deadlines};
