//! The listener sets the simulated parent holds, opened and closed only by the core's
//! actions: the starting configuration's set is bound before the core starts (as the real
//! parent binds it before anything else), `BindListeners` opens one unless another
//! program holds its port ([`crate::Fault::PortBusy`]), `ReleaseListeners` closes one and
//! `CloseListeners` closes them all. The host judges every use against them.

use servery_core::config::Listen;
use servery_core::{Instant, ReloadId};

#[derive(Debug)]
pub(crate) struct ListenSets {
    open: Vec<Listen>,
    /// Every set was closed (a stop or a failure): nothing is held from then on.
    pub(crate) all_closed: bool,
    /// Ports other programs hold.
    pub(crate) busy: Vec<u16>,
    /// Reloads whose set could not be bound.
    refused: Vec<ReloadId>,
    /// When a set was last released (a commit in the same step moved the listeners).
    pub(crate) released_at: Option<Instant>,
}

impl ListenSets {
    pub(crate) fn bound_at_start(listen: Listen) -> Self {
        ListenSets {
            open: vec![listen],
            all_closed: false,
            busy: Vec::new(),
            refused: Vec::new(),
            released_at: None,
        }
    }

    pub(crate) fn is_open(&self, listen: Listen) -> bool {
        self.open.contains(&listen)
    }

    pub(crate) fn open(&self) -> &[Listen] {
        &self.open
    }

    /// Bind `listen` for `reload`, as the OS would: a port another program holds fails.
    pub(crate) fn bind(&mut self, reload: ReloadId, listen: Listen) -> Result<(), String> {
        if listen
            .port
            .is_some_and(|p| p != 0 && self.busy.contains(&p))
        {
            self.refused.push(reload);
            return Err("address in use".into());
        }
        self.open.push(listen);
        Ok(())
    }

    /// Close the parent's copy of `listen`; false when it held none.
    pub(crate) fn release(&mut self, listen: Listen, now: Instant) -> bool {
        let Some(i) = self.open.iter().position(|l| *l == listen) else {
            return false;
        };
        self.open.swap_remove(i);
        self.released_at = Some(now);
        true
    }

    pub(crate) fn close_all(&mut self) {
        self.open.clear();
        self.all_closed = true;
    }

    pub(crate) fn was_refused(&self, reload: ReloadId) -> bool {
        self.refused.contains(&reload)
    }
}
