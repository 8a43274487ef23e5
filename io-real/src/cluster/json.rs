//! The cluster machine's store calls as etcd's JSON gateway spells them (`/v3/kv/txn`,
//! `/v3/lease/grant`, `/v3/lease/keepalive`: the gRPC messages in proto3 JSON, keys and
//! values base64, 64-bit numbers as strings), and its answers back. Pure: the mapping
//! the conformance test checked against a real etcd, in one place.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use servery_core::cluster::{CompareTarget, KeyValue, StoreCall, StoreReply, TxnOp};

/// One gateway request: its path and JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub path: &'static str,
    pub body: Value,
}

fn b64(s: &str) -> String {
    STANDARD.encode(s.as_bytes())
}

fn unb64(v: &Value) -> String {
    let bytes = STANDARD
        .decode(v.as_str().unwrap_or_default())
        .unwrap_or_default();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// An int64 of proto3 JSON: a string, or a number from a lenient encoder; absent is 0.
fn num(v: &Value) -> i64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

fn op(op: &TxnOp) -> Value {
    match op {
        TxnOp::Put { key, value, lease } => {
            json!({"request_put": {"key": b64(key), "value": b64(value), "lease": lease.to_string()}})
        }
        TxnOp::Delete { key } => json!({"request_delete_range": {"key": b64(key)}}),
        TxnOp::Get { key, range_end } => {
            let mut r = json!({ "key": b64(key) });
            if let Some(end) = range_end {
                r["range_end"] = json!(b64(end));
            }
            json!({ "request_range": r })
        }
    }
}

/// The request for `call`.
pub fn request(call: &StoreCall) -> Option<Request> {
    Some(match call {
        StoreCall::LeaseGrant { ttl_secs } => Request {
            path: "/v3/lease/grant",
            body: json!({ "TTL": ttl_secs.to_string() }),
        },
        StoreCall::KeepAlive { lease } => Request {
            path: "/v3/lease/keepalive",
            body: json!({ "ID": lease.to_string() }),
        },
        StoreCall::Txn(t) => {
            let compare: Vec<Value> = t
                .compare
                .iter()
                .map(|c| {
                    let mut v = match &c.target {
                        CompareTarget::CreateRevisionIs(r) => json!({
                            "target": "CREATE", "result": "EQUAL", "create_revision": r.to_string()
                        }),
                        // "at most R" is etcd's "less than R + 1".
                        CompareTarget::ModRevisionAtMost(r) => json!({
                            "target": "MOD", "result": "LESS", "mod_revision": (r + 1).to_string()
                        }),
                        CompareTarget::ValueIs(s) => json!({
                            "target": "VALUE", "result": "EQUAL", "value": b64(s)
                        }),
                    };
                    v["key"] = json!(b64(&c.key));
                    if let Some(end) = &c.range_end {
                        v["range_end"] = json!(b64(end));
                    }
                    v
                })
                .collect();
            Request {
                path: "/v3/kv/txn",
                body: json!({
                    "compare": compare,
                    "success": t.success.iter().map(op).collect::<Vec<_>>(),
                    "failure": t.failure.iter().map(op).collect::<Vec<_>>(),
                }),
            }
        }
        _ => return None,
    })
}

/// What an answer with an error means for `call`: `Some` when etcd refused it having
/// written nothing (a lease it no longer has, a permission it does not give), `None`
/// when the outcome is unknown (no leader, a time-out inside etcd: the write may have
/// happened), which the cluster machine treats as a lost answer.
fn refusal(call: &StoreCall, message: &str) -> Option<StoreReply> {
    let lease_gone = message.contains("lease not found");
    let denied = message.contains("permission denied") || message.contains("user name is empty");
    match call {
        StoreCall::KeepAlive { .. } if lease_gone => Some(StoreReply::LeaseNotFound),
        StoreCall::Txn(_) if lease_gone || denied => Some(StoreReply::Failed),
        StoreCall::LeaseGrant { .. } if denied => Some(StoreReply::Failed),
        _ => None,
    }
}

/// Whether an error answer says the auth token is no longer good (etcd's simple tokens
/// expire): authenticate again and repeat the call.
pub(super) fn token_expired(body: &Value) -> bool {
    error_message(body).is_some_and(|m| m.contains("invalid auth token"))
}

fn error_message(body: &Value) -> Option<&str> {
    body.get("error")
        .or_else(|| body.get("message"))
        .and_then(Value::as_str)
        .or_else(|| body.get("error").and_then(|e| e.get("message")?.as_str()))
}

/// The reply to `call` from the gateway's answer `body`; `None` when the outcome is
/// unknown (see [`refusal`]).
pub fn reply(call: &StoreCall, body: &Value) -> Option<StoreReply> {
    if let Some(message) = error_message(body) {
        return refusal(call, message);
    }
    Some(match call {
        StoreCall::LeaseGrant { .. } => StoreReply::LeaseGranted {
            lease: num(&body["ID"]),
        },
        StoreCall::KeepAlive { .. } => {
            // A keep-alive stream's one answer comes as `{"result": …}`.
            let result = body.get("result").unwrap_or(body);
            if num(&result["TTL"]) > 0 {
                StoreReply::KeptAlive
            } else {
                StoreReply::LeaseNotFound
            }
        }
        StoreCall::Txn(_) => {
            let read = body["responses"]
                .as_array()
                .map(|rs| {
                    rs.iter()
                        .filter_map(|r| r["response_range"]["kvs"].as_array())
                        .flatten()
                        .map(|kv| KeyValue {
                            key: unb64(&kv["key"]),
                            value: unb64(&kv["value"]),
                            create_revision: num(&kv["create_revision"]),
                            mod_revision: num(&kv["mod_revision"]),
                        })
                        .collect()
                })
                .unwrap_or_default();
            StoreReply::Txn {
                succeeded: body["succeeded"].as_bool().unwrap_or(false),
                revision: num(&body["header"]["revision"]),
                read,
            }
        }
        _ => return None,
    })
}

/// The first JSON value of a gateway answer (a streaming call's answer is one object a
/// line).
pub(super) fn first_value(bytes: &[u8]) -> Option<Value> {
    serde_json::Deserializer::from_slice(bytes)
        .into_iter::<Value>()
        .next()?
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use servery_core::cluster::{Compare, Txn};

    fn put_if_absent() -> StoreCall {
        StoreCall::Txn(Txn {
            compare: vec![Compare {
                key: "/servery/a/locks/x".into(),
                range_end: None,
                target: CompareTarget::CreateRevisionIs(0),
            }],
            success: vec![TxnOp::Put {
                key: "/servery/a/locks/x".into(),
                value: "h 1".into(),
                lease: 7,
            }],
            failure: vec![],
        })
    }

    #[test]
    fn a_put_if_absent_is_a_create_revision_compare() {
        let r = request(&put_if_absent()).expect("a request");
        assert_eq!(r.path, "/v3/kv/txn");
        assert_eq!(r.body["compare"][0]["target"], "CREATE");
        assert_eq!(r.body["compare"][0]["create_revision"], "0");
        assert_eq!(r.body["compare"][0]["key"], b64("/servery/a/locks/x"));
        assert_eq!(r.body["success"][0]["request_put"]["lease"], "7");
    }

    #[test]
    fn a_txn_answer_gives_its_revision_and_reads() {
        let body = json!({
            "header": {"revision": "12"},
            "succeeded": true,
            "responses": [{"response_range": {"kvs": [
                {"key": b64("k"), "value": b64("v"), "create_revision": "3", "mod_revision": "9"}
            ]}}]
        });
        assert_eq!(
            reply(&put_if_absent(), &body),
            Some(StoreReply::Txn {
                succeeded: true,
                revision: 12,
                read: vec![KeyValue {
                    key: "k".into(),
                    value: "v".into(),
                    create_revision: 3,
                    mod_revision: 9
                }]
            })
        );
    }

    #[test]
    fn errors_are_refusals_only_when_nothing_was_written() {
        let gone = json!({"error": "etcdserver: requested lease not found", "code": 5});
        assert_eq!(reply(&put_if_absent(), &gone), Some(StoreReply::Failed));
        assert_eq!(
            reply(&StoreCall::KeepAlive { lease: 7 }, &gone),
            Some(StoreReply::LeaseNotFound)
        );
        let unknown = json!({"error": "etcdserver: request timed out", "code": 14});
        assert_eq!(reply(&put_if_absent(), &unknown), None);
        assert!(token_expired(
            &json!({"error": "etcdserver: invalid auth token", "code": 16})
        ));
    }

    #[test]
    fn a_keepalive_of_an_expired_lease_answers_ttl_zero() {
        let call = StoreCall::KeepAlive { lease: 7 };
        let alive = first_value(b"{\"result\":{\"ID\":\"7\",\"TTL\":\"15\"}}\n").expect("json");
        assert_eq!(reply(&call, &alive), Some(StoreReply::KeptAlive));
        let expired = first_value(b"{\"result\":{\"ID\":\"7\"}}\n").expect("json");
        assert_eq!(reply(&call, &expired), Some(StoreReply::LeaseNotFound));
    }
}
