//! Identifiers shared by the machines and the protocol.

use core::fmt;

/// A worker process as the supervisor knows it. Never reused within one parent's life,
/// so a late message from a dead worker can never be mistaken for its replacement's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkerId(pub u64);

/// A configuration generation. Generation 1 is the first committed one; a reload
/// commits the next.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Generation(pub u64);

/// Names one reload request, chosen by the driver that received it, so the answer
/// ([`crate::supervisor::Action::ReloadRejected`] or the commit of its generation) can be
/// matched to its requester without guessing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReloadId(pub u64);

/// Names one operator request on the control socket, chosen by the driver that received
/// it, so the one answer the core gives ([`crate::parent::ParentAction::Answer`]) finds its
/// requester.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

/// A worker position within a generation (0..N). A crash replacement or a recycle
/// replacement takes the slot of the worker it replaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Slot(pub u32);

/// An unguessable identifier for anything the broker grants (lease, reservation, DAV
/// token). 128 bits drawn from the driver-seeded ChaCha generator.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LeaseId(pub u128);

impl fmt::Display for WorkerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "w{}", self.0)
    }
}

impl fmt::Display for Generation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "g{}", self.0)
    }
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s{}", self.0)
    }
}

impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// Lease IDs are secrets: debug output shows only a prefix.
impl fmt::Debug for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LeaseId({:08x}…)", (self.0 >> 96) as u32)
    }
}
