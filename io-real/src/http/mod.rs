//! Static file serving for one worker: hyper 1 over tokio.
//!
//! Every decision that depends on the request (path containment, conditional requests,
//! byte ranges, listing format, content type) is a pure planning function in its own module
//! and is tested without sockets. [`site`] performs the file-system work those plans ask for
//! (off the async threads) and [`conn`] drives one accepted connection, including draining.

pub mod body;
pub mod conditional;
pub mod conn;
pub mod error;
pub mod listing;
pub mod mime;
pub mod path;
pub mod range;
pub mod site;

pub use body::Body;
pub use conn::serve_connection;
pub use error::{HttpError, error_response};
pub use site::{Site, SiteConfig};
