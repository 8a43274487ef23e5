//! The certificate manager in `/metrics` and `/readyz` (decision 0057): failed attempts by
//! stage, failures in a row, the last success and the certificate's expiry as Unix
//! seconds; and what `/readyz` says when the certificate is what holds readiness down.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use servery_core::acme::{CertHealth, ManagerStatus, Stage};
use servery_core::supervisor::{Readiness, ServiceState};

use super::metrics::Snapshot;

pub(super) fn register(status: &ManagerStatus, r: &mut Registry) {
    let failures = Family::<Vec<(&'static str, &'static str)>, Counter>::default();
    for (stage, n) in Stage::ALL.iter().zip(status.failures_by_stage) {
        failures
            .get_or_create(&vec![("stage", stage.name())])
            .inc_by(n);
    }
    r.register(
        "acme_failures",
        "Failed ACME attempts, by the stage they failed in (order, validate, store)",
        failures,
    );
    let orders = Counter::<u64>::default();
    orders.inc_by(status.orders);
    r.register("acme_orders", "ACME orders started", orders);
    let gauge = |value: i64| {
        let g = Gauge::<i64>::default();
        g.set(value);
        g
    };
    r.register(
        "acme_consecutive_failures",
        "Failed ACME attempts since the last success",
        gauge(i64::from(status.failures)),
    );
    r.register(
        "acme_last_success_timestamp_seconds",
        "When an order last put a certificate in service (Unix seconds; 0: not since the start)",
        gauge(status.last_success.map_or(0, |t| t.0)),
    );
    r.register(
        "acme_certificate_expiry_timestamp_seconds",
        "When the certificate in service expires (Unix seconds; 0: none issued is in service)",
        gauge(status.not_after.map_or(0, |t| t.0)),
    );
}

/// `/readyz`'s body when the certificate decides it; `None` when the workers do.
pub(super) fn readiness_text(s: &Snapshot) -> Option<String> {
    let (status, health) = s.acme.as_ref()?;
    let last = status.last_error.as_deref().unwrap_or("none");
    match (health, s.readiness) {
        (CertHealth::Expired, Readiness::Unready) if s.state == ServiceState::Ready => {
            Some(format!(
                "not ready: the certificate in service has expired ({} failures in a row; last error: {last})\n",
                status.failures
            ))
        }
        (CertHealth::Issuing, Readiness::Degraded) if s.capacity.ready >= s.capacity.wanted => {
            Some(format!(
                "degraded: the first certificate is not issued yet ({} failures in a row; last error: {last})\n",
                status.failures
            ))
        }
        (CertHealth::Renewing, Readiness::Degraded) if s.capacity.ready >= s.capacity.wanted => {
            Some(format!(
                "degraded: certificate renewal failing ({} failures in a row; last error: {last})\n",
                status.failures
            ))
        }
        _ => None,
    }
}
