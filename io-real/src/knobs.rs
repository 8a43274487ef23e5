//! The numeric settings by name: one table that maps the names a user writes (`--set
//! restart_backoff_initial=0.5`, `recovery.restart_backoff_initial`, the flag) onto
//! [`RawConfig`] fields. `ctl reload` overrides go through it, and configuration errors use
//! it to name the flag next to the core's field name.

use serde_json::{Map, Value};
use servery_core::RawConfig;

#[derive(Clone, Copy)]
enum Slot {
    Real(fn(&mut RawConfig) -> &mut f64),
    Count(fn(&mut RawConfig) -> &mut i64),
}

/// One setting.
#[derive(Clone, Copy)]
pub struct Knob {
    /// The short name (`restart_backoff_initial`).
    pub key: &'static str,
    /// The core's field name, as validation reports it (`recovery.restart_backoff_initial`).
    pub field: &'static str,
    slot: Slot,
}

impl core::fmt::Debug for Knob {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.field)
    }
}

impl Knob {
    /// The command-line flag that sets it.
    pub fn flag(&self) -> String {
        format!("--{}", self.key.replace('_', "-"))
    }

    fn apply(&self, raw: &mut RawConfig, value: &Value) -> Result<(), String> {
        match self.slot {
            Slot::Real(get) => match value.as_f64() {
                Some(v) => *get(raw) = v,
                None => return Err(format!("{}: expected a number, got {value}", self.key)),
            },
            Slot::Count(get) => match (value.as_i64(), value.as_str()) {
                (Some(v), _) => *get(raw) = v,
                (None, Some(s)) if self.key == "workers" && s.eq_ignore_ascii_case("auto") => {
                    *get(raw) = crate::cli::Workers::Auto.count();
                }
                _ => return Err(format!("{}: expected an integer, got {value}", self.key)),
            },
        }
        Ok(())
    }
}

macro_rules! knobs {
    ($( $kind:ident($ty:ty) $key:ident => $field:literal, |$c:ident| $place:expr; )*) => {
        /// Every numeric setting a reload may override.
        pub const KNOBS: &[Knob] = &[
            $( Knob { key: stringify!($key), field: $field, slot: Slot::$kind({
                fn get($c: &mut RawConfig) -> &mut $ty { &mut $place }
                get
            }) }, )*
        ];
    };
}

knobs! {
    Count(i64) workers => "workers", |c| c.workers;
    Real(f64) restart_backoff_initial => "recovery.restart_backoff_initial", |c| c.recovery.restart_backoff_initial;
    Real(f64) restart_backoff_max => "recovery.restart_backoff_max", |c| c.recovery.restart_backoff_max;
    Real(f64) restart_stable_period => "recovery.restart_stable_period", |c| c.recovery.restart_stable_period;
    Count(i64) worker_restart_limit => "recovery.worker_restart_limit", |c| c.recovery.worker_restart_limit;
    Real(f64) worker_restart_window => "recovery.worker_restart_window", |c| c.recovery.worker_restart_window;
    Real(f64) worker_max_age => "recovery.worker_max_age", |c| c.recovery.worker_max_age;
    Real(f64) worker_max_age_jitter => "recovery.worker_max_age_jitter", |c| c.recovery.worker_max_age_jitter;
    Count(i64) max_requests_per_worker => "recovery.max_requests_per_worker", |c| c.recovery.max_requests_per_worker;
    Real(f64) max_requests_jitter => "recovery.max_requests_jitter", |c| c.recovery.max_requests_jitter;
    Count(i64) recycle_retry_limit => "recovery.recycle_retry_limit", |c| c.recovery.recycle_retry_limit;
    Real(f64) heartbeat_interval => "recovery.heartbeat_interval", |c| c.recovery.heartbeat_interval;
    Real(f64) heartbeat_timeout => "recovery.heartbeat_timeout", |c| c.recovery.heartbeat_timeout;
    Real(f64) worker_start_timeout => "recovery.worker_start_timeout", |c| c.recovery.worker_start_timeout;
    Real(f64) drain_timeout => "recovery.drain_timeout", |c| c.recovery.drain_timeout;
    Real(f64) force_timeout => "recovery.force_timeout", |c| c.recovery.force_timeout;
    Count(i64) max_connections => "budgets.max_connections", |c| c.budgets.max_connections;
    Count(i64) max_blocking_threads => "budgets.max_blocking_threads", |c| c.budgets.max_blocking_threads;
    Count(i64) compression_cache_size => "budgets.compression_cache_size", |c| c.budgets.compression_cache_size;
    Count(i64) file_cache_size => "budgets.file_cache_size", |c| c.budgets.file_cache_size;
    Count(i64) max_active_uploads => "broker.max_active_uploads", |c| c.broker.max_active_uploads;
    Count(i64) max_upload_bytes => "broker.max_upload_bytes", |c| c.broker.max_upload_bytes;
    Count(i64) max_partial_uploads => "broker.max_partial_uploads", |c| c.broker.max_partial_uploads;
    Real(f64) broker_reply_timeout => "broker.reply_timeout", |c| c.broker.reply_timeout;
    Count(i64) broker_queue_capacity => "broker.queue_capacity", |c| c.broker.queue_capacity;
    Count(i64) dav_max_locks => "broker.max_dav_locks", |c| c.broker.max_dav_locks;
    Count(i64) access_log_queue => "broker.log_queue_capacity", |c| c.broker.log_queue_capacity;
    Real(f64) dav_lock_timeout_max => "broker.max_dav_lock_timeout", |c| c.broker.max_dav_lock_timeout;
    Real(f64) request_head_timeout => "connections.request_head_timeout", |c| c.connections.request_head_timeout;
    Real(f64) keep_alive_timeout => "connections.keep_alive_timeout", |c| c.connections.keep_alive_timeout;
    Real(f64) tls_handshake_timeout => "connections.tls_handshake_timeout", |c| c.connections.tls_handshake_timeout;
    Real(f64) send_timeout => "connections.send_timeout", |c| c.connections.send_timeout;
    Real(f64) body_timeout => "connections.body_timeout", |c| c.connections.body_timeout;
    Count(i64) max_upload_files => "uploads.max_upload_files", |c| c.uploads.max_upload_files;
    Real(f64) write_lock_timeout => "uploads.write_lock_timeout", |c| c.uploads.write_lock_timeout;
}

/// The setting a user means by `name`: the short name, the core's field name or the flag.
pub fn find(name: &str) -> Option<&'static Knob> {
    let name = name.trim_start_matches("--").replace('-', "_");
    KNOBS.iter().find(|k| k.key == name || k.field == name)
}

/// Settings with a flag that a reload cannot override (they are not plain numbers).
const FLAG_ONLY: &[(&str, &str)] = &[
    ("uploads.max_upload_size", "--max-upload-size"),
    ("features.webdav", "--dav"),
    ("features.dav_persistent_locks", "--state-dir"),
    ("features.tftp_write", "--tftp-write"),
    ("tftp.max_transfers", "--tftp-max-transfers"),
    ("tftp.max_transfer_size", "--tftp-max-size"),
    ("tftp.retries", "--tftp-retries"),
    ("tftp.timeout", "--tftp-timeout"),
];

/// The flag for a field named in a validation error.
pub fn flag_for_field(field: &str) -> Option<String> {
    KNOBS
        .iter()
        .find(|k| k.field == field)
        .map(Knob::flag)
        .or_else(|| {
            FLAG_ONLY
                .iter()
                .find(|(f, _)| *f == field)
                .map(|(_, flag)| (*flag).to_owned())
        })
}

/// The core field a setting's file key sets, when it sets one that a reload carries
/// (`drain_timeout` → `recovery.drain_timeout`).
pub fn field_for_key(key: &str) -> Option<&'static str> {
    KNOBS
        .iter()
        .find(|k| k.key == key)
        .map(|k| k.field)
        .or_else(|| {
            FLAG_ONLY
                .iter()
                .find(|(_, flag)| flag.trim_start_matches("--").replace('-', "_") == key)
                .map(|(field, _)| *field)
        })
}

/// Apply `set` (a JSON object of name → value) to `raw`, reporting every bad entry.
pub fn apply_overrides(raw: &mut RawConfig, set: &Map<String, Value>) -> Result<(), Vec<String>> {
    let mut errors = Vec::new();
    for (name, value) in set {
        match find(name) {
            Some(knob) => {
                if let Err(e) = knob.apply(raw, value) {
                    errors.push(e);
                }
            }
            None => errors.push(format!("{name}: no such setting")),
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// `KEY=VALUE` pairs from the command line as a JSON object; values are read as JSON
/// (so numbers are numbers) and fall back to strings.
pub fn parse_pairs(pairs: &[String]) -> Result<Map<String, Value>, String> {
    let mut map = Map::new();
    for pair in pairs {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(format!("`{pair}`: expected KEY=VALUE"));
        };
        let value = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.into()));
        map.insert(key.trim().to_owned(), value);
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_knob_names_a_field_validation_knows() {
        // Setting each knob to an absurd value must produce an issue for exactly that
        // field, so the table and the core cannot drift apart silently.
        for knob in KNOBS {
            let mut raw = RawConfig::default();
            let bad = if knob.key.ends_with("jitter") {
                7.0
            } else {
                -5.0
            };
            knob.apply(&mut raw, &serde_json::json!(bad)).ok();
            if matches!(knob.slot, Slot::Count(_)) {
                knob.apply(&mut raw, &serde_json::json!(-5))
                    .expect("integer");
            }
            let err = raw.validate().expect_err(knob.key);
            assert!(
                err.issues().iter().any(|i| i.field == knob.field),
                "{}: {err}",
                knob.key
            );
        }
    }

    #[test]
    fn overrides_apply_by_any_name_and_report_every_bad_entry() {
        let mut raw = RawConfig::default();
        let set = parse_pairs(&[
            "--drain-timeout=3".into(),
            "recovery.force_timeout=0.5".into(),
            "workers=3".into(),
        ])
        .expect("pairs");
        apply_overrides(&mut raw, &set).expect("valid names");
        assert_eq!(raw.recovery.drain_timeout, 3.0);
        assert_eq!(raw.recovery.force_timeout, 0.5);
        assert_eq!(raw.workers, 3);

        let set = parse_pairs(&[
            "nope=1".into(),
            "workers=1.5".into(),
            "drain_timeout=x".into(),
        ])
        .expect("pairs");
        let errors = apply_overrides(&mut raw, &set).expect_err("bad");
        assert_eq!(errors.len(), 3, "{errors:?}");
    }
}
