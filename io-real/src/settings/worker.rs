//! What a worker of one generation is started with: every setting, as the parent's
//! [`ServeArgs`] holds it, except that each reloadable one takes the value of the
//! generation the core spawned the worker for (found through the core field it sets, in
//! the configuration `ctl status --json` renders). A fixed setting cannot differ between
//! generations (a reload that changes one is refused), so the started value is the
//! generation's.
//!
//! The settings travel as a whole struct, serialized in the worker's setup preamble: a
//! setting added to any `Args` struct reaches every worker without being named here, and
//! [`tests`](super::tests) fail for one that would not (a reloadable setting without a
//! core field, or an `Args` struct flattened into the command but not into the value).

use serde_json::{Map, Value};

use super::status::lookup;
use crate::cli::ServeArgs;

/// The reloadable settings, each with the core field a reload carries it in.
#[derive(Debug, Clone, Default)]
pub struct LiveFields {
    fields: Vec<(String, String)>,
    /// Reloadable settings that name no core field (a reload could not reach workers).
    unmapped: Vec<String>,
}

impl LiveFields {
    /// From the settings table (every member of [`super::LIVE`]).
    pub fn of_table() -> Self {
        let mut live = LiveFields::default();
        for s in super::table().into_iter().filter(|s| s.reloadable) {
            match crate::knobs::field_for_key(&s.key) {
                Some(field) => live.fields.push((s.key, field)),
                None => live.unmapped.push(s.key),
            }
        }
        live
    }

    /// The settings a worker of the generation whose configuration renders as
    /// `committed` serves with.
    pub fn for_generation(
        &self,
        start: &ServeArgs,
        committed: &Value,
    ) -> Result<ServeArgs, String> {
        if let Some(key) = self.unmapped.first() {
            return Err(format!("{key} is reloadable but sets no core field"));
        }
        let mut values = as_map(start)?;
        for (key, field) in &self.fields {
            let value = lookup(committed, field)
                .ok_or_else(|| format!("{key}: the configuration has no {field}"))?;
            values.insert(key.clone(), value);
        }
        serde_json::from_value(Value::Object(values)).map_err(|e| e.to_string())
    }
}

/// The settings by key (the struct is flat: every group is flattened into it).
pub fn as_map(serve: &ServeArgs) -> Result<Map<String, Value>, String> {
    match serde_json::to_value(serve).map_err(|e| e.to_string())? {
        Value::Object(map) => Ok(map),
        other => Err(format!("the settings serialize as {other}, not a map")),
    }
}
