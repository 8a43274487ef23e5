//! Test-only: `SERVERY_TEST_STALL_SERVICE=KIND` (a singleton's name as `ctl status` shows
//! it, e.g. `mdns`) makes that service hang before each of its actions, as a service whose
//! daemon or system call never answers would, so the black-box tests can show that the
//! supervisor stays on time meanwhile. Read only with the `test-hooks` feature, which
//! release builds do not enable; without it nothing stalls and the variable is not read.

use std::time::Duration;

use servery_core::singletons::SingletonKind;

/// How long a stalled service hangs: longer than any test runs.
const STALL: Duration = Duration::from_secs(3600);

#[derive(Debug, Default)]
pub(super) struct Stalls(Option<String>);

impl Stalls {
    #[cfg(feature = "test-hooks")]
    pub(super) fn from_env() -> Stalls {
        Stalls(std::env::var("SERVERY_TEST_STALL_SERVICE").ok())
    }

    #[cfg(not(feature = "test-hooks"))]
    pub(super) fn from_env() -> Stalls {
        Stalls(None)
    }

    pub(super) fn for_kind(&self, kind: SingletonKind) -> Option<Duration> {
        (self.0.as_deref() == Some(kind.name())).then_some(STALL)
    }
}

/// Hang as a blocking call that never returns would, moved off the runtime's thread as
/// every blocking call of a service must be.
pub(super) async fn stall(kind: SingletonKind, how_long: Duration) {
    tracing::warn!(
        kind = kind.name(),
        "test hook: this service is stalled on purpose"
    );
    let _ = tokio::task::spawn_blocking(move || std::thread::sleep(how_long)).await;
}
