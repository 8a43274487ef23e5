//! `/metrics` for the reverse proxy's upstreams: the parent's verdict on each
//! (decision 0095), for an alert on `servery_proxy_upstream_up == 0`.

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Each upstream as given (`--proxy PREFIX=URL`) and whether the parent holds it up.
pub(super) fn register(upstreams: &[(String, bool)], r: &mut Registry) {
    if upstreams.is_empty() {
        return;
    }
    let up = Family::<Vec<(&'static str, String)>, Gauge>::default();
    for (given, is_up) in upstreams {
        up.get_or_create(&vec![("upstream", given.clone())])
            .set(i64::from(*is_up));
    }
    r.register(
        "proxy_upstream_up",
        "1 while the parent holds the reverse proxy's upstream up, 0 while it is marked down (passive failures or probes)",
        up,
    );
}
