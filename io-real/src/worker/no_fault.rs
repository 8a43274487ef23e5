//! Without the `test-hooks` feature (release builds) there is no fault injection: this
//! stands in for `fault.rs`, every answer "no". Nothing reads `SERVERY_TEST_FAULT`, and
//! the worker's fault branches that only decide are constant-false code the compiler
//! drops. The branches that wait (hang or slow boot, crash after PREPARED, wedged drain)
//! are compiled only with the feature, at their sites in `serve.rs`: an `.await` inside
//! a branch leaves a resume point in the task's state machine, and the code after it,
//! that no optimisation removes even when the branch is never taken.

/// No fault: the only value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TestFault;

impl TestFault {
    #[inline(always)]
    pub fn from_env(_index: u64, _slot: u64, _generation: u64) -> Result<TestFault, String> {
        Ok(TestFault)
    }

    #[inline(always)]
    pub fn exit_at_start(&self) -> bool {
        false
    }

    #[inline(always)]
    pub fn fail_startup(&self) -> Option<&str> {
        None
    }

    #[inline(always)]
    pub fn crash_after_requests(&self) -> Option<u64> {
        None
    }

    #[inline(always)]
    pub fn wedged_drain(&self) -> bool {
        false
    }

    #[inline(always)]
    pub fn exit_during_drain(&self) -> bool {
        false
    }

    #[inline(always)]
    pub fn kill_after_lock_grant(&self) -> bool {
        false
    }

    #[inline(always)]
    pub fn kill_before_tree_step(&self) -> Option<crate::http::dav::TreeKill> {
        None
    }
}
