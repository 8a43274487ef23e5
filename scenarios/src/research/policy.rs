//! Recovery policies from files: a `name` and a `[recovery]` table with the real
//! configuration's field names, validated by the same code (`RawConfig::validate`), so a
//! policy the tool accepts is one `servery` would run.

use std::path::Path;

use servery_core::config::{RawConfig, RawRecovery};

use crate::research::error::{ResearchError, parse, read};
use crate::research::jitter::RestartJitter;
use crate::research::published::{Granian, Gunicorn, Published, StartLimit, Systemd, Uvicorn};

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    name: String,
    #[serde(default)]
    recovery: toml::Table,
    gunicorn: Option<Gunicorn>,
    uvicorn: Option<Uvicorn>,
    granian: Option<Granian>,
    systemd: Option<Systemd>,
    restart_jitter: Option<RestartJitter>,
}

/// A validated recovery policy.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Policy {
    pub name: String,
    /// The fields servery's supervisor runs, a published server's section applied.
    pub recovery: RawRecovery,
    /// The published server's section the policy was written with, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub published: Option<Published>,
}

impl Policy {
    /// A policy of servery's own fields alone.
    pub fn new(name: impl Into<String>, recovery: RawRecovery) -> Self {
        Policy {
            name: name.into(),
            recovery,
            published: None,
        }
    }

    /// The configuration a run with `workers` workers uses.
    pub fn config(&self, workers: i64) -> RawConfig {
        RawConfig {
            workers,
            recovery: self.recovery.clone(),
            ..RawConfig::default()
        }
    }

    /// A start limit the tool applies to the supervisor's run (systemd's fixed window).
    pub fn start_limit(&self) -> Option<StartLimit> {
        self.published.as_ref().and_then(Published::start_limit)
    }
}

/// Read and validate a policy file.
pub fn load(path: &Path) -> Result<Policy, ResearchError> {
    from_text(path, &read(path)?)
}

/// Parse and validate policy text (`path` names it in errors).
pub fn from_text(path: &Path, text: &str) -> Result<Policy, ResearchError> {
    build(path, parse(path, text)?)
}

/// Validate a policy given as a TOML table (a sweep's point).
pub(crate) fn from_table(path: &Path, table: toml::Table) -> Result<Policy, ResearchError> {
    let file: PolicyFile = table
        .try_into()
        .map_err(|e: toml::de::Error| ResearchError::Parse {
            path: path.to_owned(),
            message: e.message().to_string(),
        })?;
    build(path, file)
}

fn build(path: &Path, file: PolicyFile) -> Result<Policy, ResearchError> {
    let bad = |message: String| ResearchError::Parse {
        path: path.to_owned(),
        message,
    };
    let given: Vec<String> = file.recovery.keys().cloned().collect();
    let mut recovery: RawRecovery = file
        .recovery
        .try_into()
        .map_err(|e: toml::de::Error| bad(format!("recovery: {}", e.message())))?;
    if let Some(jitter) = &file.restart_jitter {
        jitter.apply(&mut recovery, &given).map_err(bad)?;
    }
    let sections = [
        file.gunicorn.map(Published::Gunicorn),
        file.uvicorn.map(Published::Uvicorn),
        file.granian.map(Published::Granian),
        file.systemd.map(Published::Systemd),
    ];
    let mut published = sections.into_iter().flatten();
    let section = published.next();
    if let Some(second) = published.next() {
        return Err(bad(format!(
            "[{}]: a policy is one server's; this one already has [{}]",
            second.server(),
            section.as_ref().map_or("", Published::server)
        )));
    }
    if let Some(s) = &section {
        s.check()
            .map_err(|(field, rule)| bad(format!("{field}: {rule}")))?;
        s.apply(&mut recovery, &given).map_err(bad)?;
        if s.start_limit().is_some()
            && (recovery.worker_max_age > 0.0
                || recovery.max_requests_per_worker > 0
                || recovery.worker_max_rss > 0)
        {
            return Err(bad(
                "systemd: a unit has no recycling; the start limit counts every start, so \
                 worker_max_age, max_requests_per_worker and worker_max_rss must stay 0"
                    .into(),
            ));
        }
    }
    let policy = Policy {
        name: file.name,
        recovery,
        published: section,
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
