//! A reload reads the configuration again: the command line and the environment as the
//! parent was started, the `--config` file as it is now. A setting outside [`super::LIVE`]
//! is read once at start by something a new generation of workers does not replace (a
//! listener, the TLS identity, a parent-owned service), so a reload that changes one is
//! rejected, naming it, and the running generation keeps serving.

use servery_core::RawConfig;

use super::file::Given;
use super::load::{Effective, Loaded, load};

impl Loaded {
    /// The configuration for a reload of a parent started with `self`, or why the reload
    /// is rejected (every reason at once).
    pub fn reload(&self) -> Result<RawConfig, String> {
        let now = load(&self.argv).map_err(|e| e.to_string())?;
        let mut problems: Vec<String> = now.file_errors().to_vec();
        problems.extend(fixed_changes(&self.effective, &now.effective));
        let raw = now.cli.serve.raw_config();
        problems.extend(worker_problems(&raw));
        if problems.is_empty() {
            Ok(raw)
        } else {
            Err(problems.join("; "))
        }
    }
}

/// Every setting a reload may not change that `now` changes from `started`.
pub(super) fn fixed_changes(started: &[Effective], now: &[Effective]) -> Vec<String> {
    started
        .iter()
        .filter(|s| !s.setting.reloadable)
        .filter_map(|s| {
            let n = now.iter().find(|n| n.setting.id == s.setting.id)?;
            (n.value != s.value).then(|| {
                format!(
                    "{} cannot change on reload (it is fixed while servery runs; restart to change it): {} -> {}",
                    s.setting.key,
                    shown(s),
                    shown(n)
                )
            })
        })
        .collect()
}

fn shown(e: &Effective) -> String {
    match &e.value {
        Given::Switch(on) => on.to_string(),
        Given::Values(_) if e.setting.secret => "<not shown>".into(),
        Given::Values(v) if v.is_empty() => "unset".into(),
        Given::Values(v) => v.join(","),
    }
}

/// What the new generation's workers would fail to start with although the core's
/// validation let it through: a route the `http` crate cannot read, a CA file that does
/// not parse. A reload with one is refused naming the field, and the running generation
/// keeps serving. Also checked after `ctl reload --set` overrides.
pub fn worker_problems(raw: &RawConfig) -> Vec<String> {
    let mut problems = route_problems(raw);
    problems.extend(ca_problems(raw));
    problems
}

/// The CA file a reload names, read as a worker reads it at start (decision 0118,
/// addendum): one that does not parse is refused here rather than failing every worker
/// of the new generation.
fn ca_problems(raw: &RawConfig) -> Option<String> {
    let ca = raw.proxy.ca.as_deref()?;
    let e = crate::proxy::args::ca_problem(ca)?;
    Some(format!("proxy.ca (--proxy-ca): {e}"))
}

/// What the workers' own reading of the routes refuses that the core's validation let
/// through (a host the `http` crate cannot read): a reload the new generation could not
/// start with is refused here, naming the field, and the old routes keep serving.
fn route_problems(raw: &RawConfig) -> Vec<String> {
    const FIELD: &str = "proxy.routes";
    let core_named = raw
        .validate()
        .err()
        .is_some_and(|e| e.issues().iter().any(|i| i.field == FIELD));
    match crate::proxy::route::Routes::parse(&raw.proxy.routes) {
        Err(errors) if !core_named => errors
            .iter()
            .map(|e| format!("{FIELD} (--proxy): {e}"))
            .collect(),
        _ => Vec::new(),
    }
}
