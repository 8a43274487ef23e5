//! What the parent tells its operator on standard output as it runs: the start-up banner
//! (listeners, the served directory, limits), `ready`, and the listeners a reload adds
//! or releases. Logs go to standard error; these lines are the ones scripts and people
//! read to learn where servery listens.
//!
//! As text each is one line, `servery: listening on http://…`. Under `--log-format json`
//! each is one JSON object on one line, shaped like a log record (`timestamp`, `level`,
//! `message` holding the same text, an `event` name and that event's fields at the top
//! level), so a log shipper reading both streams sees one format, and a script finds the
//! port in `url` instead of parsing English.

use std::sync::OnceLock;

use serde_json::{Map, Value};

use crate::parent::ops_args::LogFormat;

/// The process's output format, set once by [`crate::logging::init`].
static FORMAT: OnceLock<LogFormat> = OnceLock::new();

pub(crate) fn set_format(format: LogFormat) {
    let _ = FORMAT.set(format);
}

/// One banner line: `text` as text, or a record of `event` with `fields` as JSON.
pub(crate) fn say(event: &str, text: &str, fields: &[(&str, Value)]) {
    match FORMAT.get() {
        Some(LogFormat::Json) => {
            crate::out::stdout_line(format_args!("{}", record(event, text, fields)));
        }
        _ => crate::out::stdout_line(format_args!("{text}")),
    }
}

/// Several lines (a text block such as the QR code) to write at once: as text the line
/// and the block, as JSON one record with the block in its `block` field.
pub(crate) fn block_text(event: &str, text: &str, block: &str, fields: &[(&str, Value)]) -> String {
    match FORMAT.get() {
        Some(LogFormat::Json) => {
            let mut fields = fields.to_vec();
            fields.push(("block", Value::from(block)));
            format!("{}\n", record(event, text, &fields))
        }
        _ => format!("{text}\n{block}\n"),
    }
}

fn record(event: &str, text: &str, fields: &[(&str, Value)]) -> Value {
    let mut record = Map::new();
    record.insert(
        "timestamp".into(),
        crate::civil_time::rfc3339(std::time::SystemTime::now()).into(),
    );
    record.insert("level".into(), "INFO".into());
    record.insert("event".into(), event.into());
    record.insert("message".into(), text.into());
    for (name, value) in fields {
        record.insert((*name).to_owned(), value.clone());
    }
    Value::Object(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_holds_the_text_the_event_and_its_fields() {
        let r = record(
            "listening",
            "servery: listening on http://127.0.0.1:8000/",
            &[("url", Value::from("http://127.0.0.1:8000/"))],
        );
        assert_eq!(r["event"], "listening");
        assert_eq!(r["message"], "servery: listening on http://127.0.0.1:8000/");
        assert_eq!(r["url"], "http://127.0.0.1:8000/");
        assert_eq!(r["level"], "INFO");
        let line = r.to_string();
        assert!(!line.contains('\n'), "one line: {line}");
    }

    #[test]
    fn a_block_is_one_record_with_its_lines_escaped() {
        // The format is process-wide and unset in unit tests: text.
        let text = block_text("qr", "servery: scan", "██\n██", &[]);
        assert_eq!(text, "servery: scan\n██\n██\n");
        let json = record("qr", "servery: scan", &[("block", Value::from("██\n██"))]).to_string();
        assert_eq!(json.lines().count(), 1, "{json}");
    }
}
