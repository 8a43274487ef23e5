//! Recovery policies from files: a `name` and a `[recovery]` table with the real
//! configuration's field names, validated by the same code (`RawConfig::validate`), so a
//! policy the tool accepts is one `servery` would run.

use std::path::Path;

use servery_core::config::{RawConfig, RawRecovery};

use crate::research::error::{ResearchError, parse, read};

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    name: String,
    #[serde(default)]
    recovery: RawRecovery,
}

/// A validated recovery policy.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub name: String,
    pub recovery: RawRecovery,
}

impl Policy {
    /// The configuration a run with `workers` workers uses.
    pub fn config(&self, workers: i64) -> RawConfig {
        RawConfig {
            workers,
            recovery: self.recovery.clone(),
            ..RawConfig::default()
        }
    }
}

/// Read and validate a policy file.
pub fn load(path: &Path) -> Result<Policy, ResearchError> {
    from_text(path, &read(path)?)
}

/// Parse and validate policy text (`path` names it in errors).
pub fn from_text(path: &Path, text: &str) -> Result<Policy, ResearchError> {
    let file: PolicyFile = parse(path, text)?;
    let policy = Policy {
        name: file.name,
        recovery: file.recovery,
    };
    policy
        .config(1)
        .validate()
        .map_err(|source| ResearchError::InvalidPolicy {
            path: path.to_owned(),
            source,
        })?;
    Ok(policy)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_is_held_to_the_real_configurations_rules() {
        let p = Path::new("p.toml");
        let ok = from_text(p, "name = \"x\"\n[recovery]\nworker_restart_limit = 3\n");
        assert_eq!(ok.map(|p| p.recovery.worker_restart_limit).ok(), Some(3));
        let inverted =
            "name = \"x\"\n[recovery]\nrestart_backoff_initial = 10.0\nrestart_backoff_max = 1.0\n";
        let e = from_text(p, inverted)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("recovery.restart_backoff_max") && e.contains("inverted"),
            "{e}"
        );
        let unknown = from_text(p, "name = \"x\"\n[recovery]\nrestart_backof = 1.0\n");
        let e = unknown.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("restart_backof"), "{e}");
        assert!(
            from_text(p, "[recovery]\n").is_err(),
            "a policy needs a name"
        );
    }
}
