//! The `settings` of `ctl status --json`'s `config`: every setting by its file key. A
//! reloadable setting shows the value of the generation the core committed (found through
//! the core field it sets); any other is fixed for the life of the parent, so the value
//! it was started with is the current one.

use serde_json::{Map, Value};

use super::file::Given;
use super::load::Effective;

/// `committed` is the committed configuration as `status::config_json` renders it.
pub fn settings_json(started: &[Effective], committed: &Value) -> Value {
    let mut out = Map::new();
    for e in started {
        let live = e
            .setting
            .reloadable
            .then(|| crate::knobs::field_for_key(&e.setting.key))
            .flatten()
            .and_then(|field| lookup(committed, &field));
        let value = live.unwrap_or_else(|| started_value(e));
        out.insert(e.setting.key.clone(), value);
    }
    Value::Object(out)
}

/// `recovery.drain_timeout` in the rendered configuration.
pub(super) fn lookup(config: &Value, field: &str) -> Option<Value> {
    field
        .split('.')
        .try_fold(config, |v, part| v.get(part))
        .cloned()
}

fn started_value(e: &Effective) -> Value {
    match &e.value {
        Given::Switch(on) => Value::Bool(*on),
        Given::Values(v) if v.is_empty() => Value::Null,
        Given::Values(v) if e.setting.secret => {
            Value::String(format!("<{} value(s) not shown>", v.len()))
        }
        Given::Values(v) if e.setting.shape == super::Shape::Many => {
            Value::Array(v.iter().map(|s| Value::String(s.clone())).collect())
        }
        Given::Values(v) => Value::String(v.join(",")),
    }
}
