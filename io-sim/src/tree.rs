//! A tiny simulated file tree for WebDAV's tree operations: collections with members,
//! files with content, private names (staging copies, trash) that nothing serves, the
//! atomic `rename(2)` of a whole subtree, and the parent's cleanup of a dead worker's
//! private names by the rule the real parent applies (`io-real/src/parent/cleanup.rs`):
//! every name that starts with the worker's temporary prefix goes, with all below it.
//!
//! Paths are absolute and canonical (`/a`, `/a/sub/c`); the root is implicit.

use std::collections::BTreeMap;

use servery_core::WorkerId;
use servery_core::write_flow::Existing;

/// What a path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Node {
    Collection,
    /// A file and its content (an opaque value: equal content, equal value).
    File(u64),
}

/// What a path names, as a GET or PROPFIND would show it: `None` for a collection, the
/// content for a file.
pub type Visible = BTreeMap<String, Option<u64>>;

/// The prefix of `worker`'s private names, as the real worker's (`write::temp`).
pub fn private_prefix(worker: WorkerId) -> String {
    format!(".servery-tmp-{}-", worker.0)
}

/// Whether any component of `path` is a private name (of any worker).
pub fn is_private(path: &str) -> bool {
    path.split('/').any(|c| c.starts_with(".servery-tmp-"))
}

/// The worker a private name belongs to: the first private component's owner.
pub fn private_owner(path: &str) -> Option<WorkerId> {
    let c = path.split('/').find(|c| c.starts_with(".servery-tmp-"))?;
    let rest = c.strip_prefix(".servery-tmp-")?;
    rest.split('-').next()?.parse().ok().map(WorkerId)
}

/// Whether `path` is `root` or below it.
fn within(root: &str, path: &str) -> bool {
    path == root || (path.starts_with(root) && path.as_bytes().get(root.len()) == Some(&b'/'))
}

/// Why a rename failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenameError {
    /// Nothing at the source (ENOENT).
    NotFound,
    /// The destination is a collection with members (ENOTEMPTY), or the kinds differ
    /// (EISDIR / ENOTDIR).
    Occupied,
}

#[derive(Debug, Clone, Default)]
pub struct SimTree {
    nodes: BTreeMap<String, Node>,
    /// Private names made so far (they only need to be unique).
    minted: u64,
}

impl SimTree {
    pub fn insert(&mut self, path: &str, node: Node) {
        self.nodes.insert(path.to_owned(), node);
    }

    pub fn existing(&self, path: &str) -> Existing {
        match self.nodes.get(path) {
            None => Existing::Nothing,
            Some(Node::Collection) => Existing::Directory,
            Some(Node::File(_)) => Existing::File,
        }
    }

    /// A new private name for `worker` in `path`'s directory.
    pub fn private_name(&mut self, worker: WorkerId, what: &str, beside: &str) -> String {
        self.minted += 1;
        let dir = match beside.rfind('/') {
            Some(i) => &beside[..i],
            None => "",
        };
        format!("{dir}/{}{what}-{}", private_prefix(worker), self.minted)
    }

    /// The paths at or below `root`, in order.
    pub fn subtree(&self, root: &str) -> Vec<(String, Node)> {
        self.nodes
            .range(root.to_owned()..)
            .take_while(|(p, _)| p.starts_with(root))
            .filter(|(p, _)| within(root, p))
            .map(|(p, n)| (p.clone(), *n))
            .collect()
    }

    /// Creates `to` empty, of `from`'s kind (a file with no content yet: value 0).
    pub fn create_like(&mut self, from: &str, to: &str) -> bool {
        let node = match self.nodes.get(from) {
            Some(Node::Collection) => Node::Collection,
            Some(Node::File(_)) => Node::File(0),
            None => return false,
        };
        self.nodes.insert(to.to_owned(), node);
        true
    }

    /// Fills `to` (made by [`SimTree::create_like`]) with `from`'s content and, when
    /// `infinity`, all its members.
    pub fn fill(&mut self, from: &str, to: &str, infinity: bool) -> bool {
        let Some(&node) = self.nodes.get(from) else {
            return false;
        };
        if let Node::File(_) = node {
            self.nodes.insert(to.to_owned(), node);
            return true;
        }
        if infinity {
            for (path, node) in self.subtree(from) {
                if path != from {
                    self.nodes
                        .insert(format!("{to}{}", &path[from.len()..]), node);
                }
            }
        }
        true
    }

    /// `rename(2)`: everything at and below `from` is at `to` in one step. A file
    /// replaces a file, a collection an empty collection.
    pub fn rename(&mut self, from: &str, to: &str) -> Result<(), RenameError> {
        let Some(&node) = self.nodes.get(from) else {
            return Err(RenameError::NotFound);
        };
        match (node, self.nodes.get(to)) {
            (_, None) | (Node::File(_), Some(Node::File(_))) => {}
            (Node::Collection, Some(Node::Collection)) if self.subtree(to).len() == 1 => {}
            _ => return Err(RenameError::Occupied),
        }
        self.remove(to);
        for (path, node) in self.subtree(from) {
            self.nodes.remove(&path);
            self.nodes
                .insert(format!("{to}{}", &path[from.len()..]), node);
        }
        Ok(())
    }

    /// Removes `path` and everything below it.
    pub fn remove(&mut self, path: &str) {
        for (p, _) in self.subtree(path) {
            self.nodes.remove(&p);
        }
    }

    /// What clients see: every path with no private component.
    pub fn visible(&self) -> Visible {
        self.nodes
            .iter()
            .filter(|(p, _)| !is_private(p))
            .map(|(p, n)| {
                let content = match n {
                    Node::Collection => None,
                    Node::File(c) => Some(*c),
                };
                (p.clone(), content)
            })
            .collect()
    }

    /// Every private name that heads a private subtree, with its owner.
    pub fn private_roots(&self) -> Vec<(String, Option<WorkerId>)> {
        self.nodes
            .keys()
            .filter(|p| {
                p.rsplit('/')
                    .next()
                    .is_some_and(|c| c.starts_with(".servery-tmp-"))
                    && !is_private(parent(p))
            })
            .map(|p| (p.clone(), private_owner(p)))
            .collect()
    }

    /// The parent's cleanup of a worker it has let go: every name with the worker's
    /// private prefix goes, with everything below it. Returns how many such names.
    pub fn remove_private_of(&mut self, worker: WorkerId) -> usize {
        let prefix = private_prefix(worker);
        let ours: Vec<String> = self
            .nodes
            .keys()
            .filter(|p| {
                p.rsplit('/').next().is_some_and(|c| c.starts_with(&prefix))
                    && !is_private(parent(p))
            })
            .cloned()
            .collect();
        for p in &ours {
            self.remove(p);
        }
        ours.len()
    }
}

fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(i) => &path[..i],
        None => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> SimTree {
        let mut t = SimTree::default();
        t.insert("/a", Node::Collection);
        t.insert("/a/x", Node::File(1));
        t.insert("/a/sub", Node::Collection);
        t.insert("/a/sub/y", Node::File(2));
        t.insert("/ab", Node::File(3));
        t
    }

    #[test]
    fn a_rename_moves_the_whole_subtree_and_nothing_beside_it() {
        let mut t = tree();
        assert_eq!(t.rename("/a", "/b"), Ok(()));
        let v = t.visible();
        let paths: Vec<&str> = v.keys().map(String::as_str).collect();
        assert_eq!(paths, ["/ab", "/b", "/b/sub", "/b/sub/y", "/b/x"]);
        // A collection only replaces an empty one; a file replaces a file.
        t.insert("/c", Node::Collection);
        t.insert("/c/z", Node::File(9));
        assert_eq!(t.rename("/b", "/c"), Err(RenameError::Occupied));
        assert_eq!(t.rename("/ab", "/b/x"), Ok(()));
        assert_eq!(t.visible().get("/b/x"), Some(&Some(3)));
    }

    #[test]
    fn private_names_are_unseen_and_go_with_their_worker_only() {
        let mut t = tree();
        let w7 = t.private_name(WorkerId(7), "copy", "/b");
        assert!(t.create_like("/a", &w7) && t.fill("/a", &w7, true));
        let w71 = t.private_name(WorkerId(71), "trash", "/a");
        assert_eq!(t.rename("/ab", &w71), Ok(()));
        assert_eq!(t.visible().len(), 4);
        assert_eq!(private_owner(&format!("{w7}/sub/y")), Some(WorkerId(7)));
        assert_eq!(t.private_roots().len(), 2);
        assert_eq!(t.remove_private_of(WorkerId(7)), 1);
        assert_eq!(t.private_roots(), [(w71, Some(WorkerId(71)))]);
    }
}
