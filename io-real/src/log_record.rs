//! One JSON object per log line (`--log-format json`): `timestamp` (RFC 3339, UTC, to
//! the microsecond), `level`, `pid`, `message` and the record's own fields at the top
//! level. Written here rather than by tracing-subscriber's JSON layer so every record
//! carries the process id: the parent and its workers share one stream, and a worker's
//! lines before it has an id (or a library's lines, which never name one) are told apart
//! only by it. A worker's records also carry its `worker` id, set once it is known.

use std::fmt;
use std::sync::OnceLock;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// This process's worker id, when it is a worker.
static WORKER: OnceLock<u64> = OnceLock::new();

pub(crate) fn set_worker_id(id: u64) {
    let _ = WORKER.set(id);
}

/// The JSON event format.
pub(crate) struct JsonRecord {
    pid: u32,
}

impl JsonRecord {
    pub(crate) fn new() -> Self {
        JsonRecord {
            pid: std::process::id(),
        }
    }

    fn record(&self, event: &Event<'_>, now: std::time::SystemTime) -> Value {
        let mut record = Map::new();
        record.insert("timestamp".into(), timestamp(now).into());
        record.insert("level".into(), event.metadata().level().as_str().into());
        record.insert("pid".into(), self.pid.into());
        if let Some(worker) = WORKER.get() {
            record.insert("worker".into(), (*worker).into());
        }
        event.record(&mut Fields(&mut record));
        Value::Object(record)
    }
}

impl<S, N> FormatEvent<S, N> for JsonRecord
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        writeln!(
            writer,
            "{}",
            self.record(event, std::time::SystemTime::now())
        )
    }
}

/// `2026-12-05T16:40:00.123456Z`.
fn timestamp(now: std::time::SystemTime) -> String {
    let micros = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_micros());
    let seconds = crate::civil_time::rfc3339(now);
    format!("{}.{micros:06}Z", seconds.trim_end_matches('Z'))
}

/// Copies an event's fields into the record, numbers and booleans as JSON ones.
struct Fields<'a>(&'a mut Map<String, Value>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().into(), format!("{value:?}").into());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    #[test]
    fn the_timestamp_is_rfc3339_to_the_microsecond() {
        let t = UNIX_EPOCH + Duration::new(1_764_952_800, 123_456_789);
        assert_eq!(timestamp(t), "2025-12-05T16:40:00.123456Z");
    }

    /// A writer the test reads back.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_record_has_the_pid_the_message_and_typed_fields() {
        let out = Captured::default();
        let sink = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || sink.clone())
            .event_format(JsonRecord::new())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(
                worker = 3u64,
                reason = "hang",
                ok = false,
                "worker {} lost",
                3
            );
        });
        let text = String::from_utf8(out.0.lock().expect("lock").clone()).expect("utf-8");
        assert_eq!(text.lines().count(), 1, "one line: {text}");
        let r: Value = serde_json::from_str(text.trim()).expect("JSON");
        assert_eq!(r["pid"], std::process::id());
        assert_eq!(r["level"], "WARN");
        assert_eq!(r["message"], "worker 3 lost");
        assert_eq!(r["worker"], 3);
        assert_eq!(r["reason"], "hang");
        assert_eq!(r["ok"], false);
    }
}
