//! What this binary is: its version, the commit it was built from and its build features
//! (set by build.rs), for `servery --version` and the `servery_build_info` metric.

/// The package version (`0.1.0`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The short commit hash, or `unknown` when the build had no git checkout.
pub const COMMIT: &str = env!("SERVERY_BUILD_COMMIT");

/// The package's enabled features, comma-separated (`python`), or empty.
pub const FEATURES: &str = env!("SERVERY_BUILD_FEATURES");

/// The target triple it was built for.
pub const TARGET: &str = env!("SERVERY_BUILD_TARGET");

/// `servery -V`: one line.
pub const SHORT: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("SERVERY_BUILD_COMMIT"),
    ")"
);

/// `servery --version`: one field a line, for people and scripts alike.
pub const LONG: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    "\ncommit: ",
    env!("SERVERY_BUILD_COMMIT"),
    "\nfeatures: ",
    env!("SERVERY_BUILD_FEATURES_SHOWN"),
    "\ntarget: ",
    env!("SERVERY_BUILD_TARGET"),
);
