//! The key layout under `/servery/<cluster-name>/` (decision 0096).

use super::store::prefix_end;

/// A cluster or host name: `[A-Za-z0-9_.-]{1,64}`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClusterName(String);

/// A name or path the key layout cannot hold, and the rule it breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    #[error("{0:?}: a cluster or host name is 1 to 64 of A-Z a-z 0-9 _ . -")]
    BadName(String),
    #[error("{0:?}: a shared path may not contain `..`")]
    DotDot(String),
}

impl ClusterName {
    pub fn new(name: &str) -> Result<Self, KeyError> {
        let ok = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
        if ok {
            Ok(ClusterName(name.to_owned()))
        } else {
            Err(KeyError::BadName(name.to_owned()))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What a shared name is for: a target lease or a DAV lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NameKind {
    Lease,
    Lock,
}

/// A shared exclusive name: the target's path below the served root, normalised (no
/// `.`, empty or trailing segments). Not the single-host `(device, inode, name)` key:
/// device numbers of a network file system differ between hosts.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SharedName {
    pub kind: NameKind,
    path: String,
}

impl SharedName {
    pub fn new(kind: NameKind, path: &str) -> Result<Self, KeyError> {
        let mut parts = Vec::new();
        for seg in path.split('/') {
            match seg {
                "" | "." => {}
                ".." => return Err(KeyError::DotDot(path.to_owned())),
                s => parts.push(s),
            }
        }
        Ok(SharedName {
            kind,
            path: parts.join("/"),
        })
    }

    pub fn path(&self) -> &str {
        &self.path
    }
}

/// The service's budgets that are shared across hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Budget {
    Uploads,
    Partials,
}

impl Budget {
    pub const ALL: [Budget; 2] = [Budget::Uploads, Budget::Partials];

    pub(super) fn index(self) -> usize {
        match self {
            Budget::Uploads => 0,
            Budget::Partials => 1,
        }
    }

    fn segment(self) -> &'static str {
        match self {
            Budget::Uploads => "uploads",
            Budget::Partials => "partials",
        }
    }
}

/// The keys of one host of one cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyLayout {
    prefix: String,
    host: ClusterName,
}

impl KeyLayout {
    pub fn new(cluster: &ClusterName, host: &ClusterName) -> Self {
        KeyLayout {
            prefix: format!("/servery/{}/", cluster.as_str()),
            host: host.clone(),
        }
    }

    pub fn host(&self) -> &str {
        self.host.as_str()
    }

    /// Every key of the cluster starts with this.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn name(&self, name: &SharedName) -> String {
        let dir = match name.kind {
            NameKind::Lease => "leases",
            NameKind::Lock => "locks",
        };
        format!("{}{dir}/{}", self.prefix, name.path)
    }

    pub fn host_key(&self) -> String {
        format!("{}hosts/{}", self.prefix, self.host.as_str())
    }

    /// The range of every host's share of `budget`: `[start, end)`.
    pub fn budget_range(&self, budget: Budget) -> (String, String) {
        let start = format!("{}budget/{}/", self.prefix, budget.segment());
        let end = prefix_end(&start);
        (start, end)
    }

    pub fn budget_share(&self, budget: Budget) -> String {
        format!(
            "{}budget/{}/{}",
            self.prefix,
            budget.segment(),
            self.host.as_str()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_live_under_the_clusters_prefix() {
        let l = KeyLayout::new(
            &ClusterName::new("office").expect("valid"),
            &ClusterName::new("h1").expect("valid"),
        );
        let n = SharedName::new(NameKind::Lock, "/docs//./a.txt").expect("valid");
        assert_eq!(l.name(&n), "/servery/office/locks/docs/a.txt");
        assert_eq!(
            l.budget_share(Budget::Uploads),
            "/servery/office/budget/uploads/h1"
        );
        assert!(SharedName::new(NameKind::Lease, "a/../b").is_err());
        assert!(ClusterName::new("a b").is_err());
        assert!(ClusterName::new("").is_err());
    }
}
