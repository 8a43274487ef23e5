//! The connections a simulated worker is serving, in the order they were accepted.
//!
//! A worker serves a handful at a time, and every request adds one and takes one away, so
//! a short vector kept in connection order does what a `BTreeMap` did (same lookups, same
//! order when they are all failed at once) without a tree's node handling per request.

use crate::world::ConnKind;

#[derive(Debug, Clone, Default)]
pub(crate) struct Conns {
    /// Ordered by connection number.
    conns: Vec<(u64, ConnKind)>,
}

impl Conns {
    pub(crate) fn len(&self) -> usize {
        self.conns.len()
    }

    pub(crate) fn insert(&mut self, conn: u64, kind: ConnKind) {
        // Connection numbers only grow, so this is nearly always the end.
        if self.conns.last().is_none_or(|(last, _)| *last < conn) {
            self.conns.push((conn, kind));
            return;
        }
        match self.conns.binary_search_by_key(&conn, |(c, _)| *c) {
            Ok(i) => self.conns[i].1 = kind,
            Err(i) => self.conns.insert(i, (conn, kind)),
        }
    }

    pub(crate) fn remove(&mut self, conn: u64) -> Option<ConnKind> {
        let i = self.conns.binary_search_by_key(&conn, |(c, _)| *c).ok()?;
        // Mostly the only one, or the newest: nothing behind it to move.
        if i + 1 == self.conns.len() {
            return self.conns.pop().map(|(_, kind)| kind);
        }
        Some(self.conns.remove(i).1)
    }

    /// Every connection, oldest first, leaving none.
    pub(crate) fn take_all(&mut self) -> Vec<(u64, ConnKind)> {
        core::mem::take(&mut self.conns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_stay_in_order_whatever_order_they_come_and_go() {
        let mut c = Conns::default();
        c.insert(5, ConnKind::Get { arrived_ns: 0 });
        c.insert(2, ConnKind::Dav { rec: 1 });
        c.insert(9, ConnKind::Get { arrived_ns: 0 });
        assert_eq!(c.len(), 3);
        assert_eq!(c.remove(5), Some(ConnKind::Get { arrived_ns: 0 }));
        assert_eq!(c.remove(5), None, "gone once removed");
        c.insert(7, ConnKind::Get { arrived_ns: 0 });
        let all: Vec<u64> = c.take_all().into_iter().map(|(conn, _)| conn).collect();
        assert_eq!(all, [2, 7, 9]);
        assert_eq!(c.len(), 0);
    }
}
