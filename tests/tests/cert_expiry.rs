//! A certificate served expired, or inside its renewal window, is warned about at start and
//! on every reload that loads one: a log line, `ctl status` (`tls.expiry`) and
//! `/metrics` (`servery_certificate_not_after_seconds`,
//! `servery_certificate_renewal_window_start_seconds`). docs/services.md, "TLS".

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, SystemTime};

use servery_tests::serde_json::json;
use servery_tests::*;

const BOUND: Duration = Duration::from_secs(20);
const DAY: i64 = 86_400;

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs() as i64
}

/// The civil date (year, month, day) of a day count since 1970-01-01 (Hinnant's
/// `civil_from_days`): rcgen takes validity dates as days.
fn civil(days: i64) -> (i32, u8, u8) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u8;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u8;
    let year = (yoe + era * 400 + i64::from(month <= 2)) as i32;
    (year, month, day)
}

/// Writes a certificate for localhost valid from `not_before` to `not_after` (Unix
/// seconds, rounded down to the day) and its key over `cert` and `key`.
fn write_certificate(cert: &Path, key: &Path, not_before: i64, not_after: i64) -> i64 {
    let mut params =
        rcgen::CertificateParams::new(vec!["localhost".to_owned()]).expect("certificate params");
    let (y, m, d) = civil(not_before.div_euclid(DAY));
    params.not_before = rcgen::date_time_ymd(y, m, d);
    let (y, m, d) = civil(not_after.div_euclid(DAY));
    params.not_after = rcgen::date_time_ymd(y, m, d);
    let pair = rcgen::KeyPair::generate().expect("key");
    let made = params.self_signed(&pair).expect("self-signed");
    // Replaced as the docs ask: written aside, then moved over.
    for (path, text) in [(key, pair.serialize_pem()), (cert, made.pem())] {
        let aside = path.with_extension("new");
        std::fs::write(&aside, text).expect("write");
        std::fs::rename(&aside, path).expect("rename");
    }
    not_after.div_euclid(DAY) * DAY
}

fn admin_addr(server: &mut Server) -> SocketAddr {
    server.admin_addr(BOUND)
}

fn metrics(admin: SocketAddr) -> String {
    let (status, body) = http_get(admin, "/metrics").expect("GET /metrics");
    assert_eq!(status, 200);
    String::from_utf8(body).expect("metrics are text")
}

fn sample(admin: SocketAddr, series: &str) -> Option<i64> {
    metrics(admin)
        .lines()
        .find_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')?
                .parse::<f64>()
                .ok()
        })
        .map(|v| v as i64)
}

#[test]
fn an_expired_or_expiring_certificate_is_warned_about_at_start_and_on_reload() {
    let tree = Tree::new("cert-expiry");
    let (cert, key) = (tree.dir.join("cert.pem"), tree.dir.join("key.pem"));
    let now = unix_now();
    // Ended a year ago.
    let ended = write_certificate(&cert, &key, now - 800 * DAY, now - 365 * DAY);
    let mut args: Vec<String> = FAST.iter().map(|s| (*s).to_owned()).collect();
    for a in [
        "--tls-cert",
        cert.to_str().expect("utf-8"),
        "--tls-key",
        key.to_str().expect("utf-8"),
        "--admin",
        "127.0.0.1:0",
    ] {
        args.push(a.to_owned());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut server = Server::start(&tree, 1, &args, &[]);
    let admin = admin_addr(&mut server);
    server.wait_ready(1, BOUND);
    let stderr = server.stderr();
    assert!(
        stderr.contains("the TLS certificate being served expired at"),
        "{stderr}"
    );
    let tls = &server.status()["tls"];
    assert_eq!(tls["expiry"], "expired", "{tls}");
    assert_eq!(tls["not_after_unix"], ended, "{tls}");
    assert_eq!(
        sample(admin, "servery_certificate_not_after_seconds"),
        Some(ended)
    );

    // The certificate's gauges are well-formed for Prometheus.
    let text = metrics(admin);
    match promtool_check(&text) {
        None => servery_tests::skipped("the metrics' form: promtool is not installed"),
        Some(verdict) => {
            if let Err(said) = verdict {
                panic!("promtool refused the metrics:\n{said}\n{text}");
            }
        }
    }

    // Ten days left of a ninety-day certificate: inside the 30-day window.
    let soon = write_certificate(&cert, &key, now - 80 * DAY, now + 10 * DAY);
    let answer = server.ctl(&json!({"cmd": "reload"})).expect("reload");
    assert_eq!(answer["ok"], true, "{answer}");
    assert!(
        server
            .stderr()
            .contains("inside its renewal window: renew it and reload"),
        "{}",
        server.stderr()
    );
    let tls = &server.status()["tls"];
    assert_eq!(tls["expiry"], "expiring", "{tls}");
    assert_eq!(tls["not_after_unix"], soon, "{tls}");
    assert_eq!(
        sample(admin, "servery_certificate_renewal_window_start_seconds"),
        Some(soon - 30 * DAY)
    );
    let text = run_servery(
        &[
            "ctl",
            "--socket",
            server.socket.to_str().expect("utf-8"),
            "status",
        ],
        &[],
        BOUND,
    );
    assert!(
        text.stdout
            .contains("tls warning: the certificate expires at"),
        "{text:?}"
    );

    // A fresh one: valid, and no new warning.
    let warnings = server
        .stderr()
        .matches("the TLS certificate being served")
        .count();
    let fresh = write_certificate(&cert, &key, now - DAY, now + 89 * DAY);
    let answer = server.ctl(&json!({"cmd": "reload"})).expect("reload");
    assert_eq!(answer["ok"], true, "{answer}");
    let tls = &server.status()["tls"];
    assert_eq!(tls["expiry"], "valid", "{tls}");
    assert_eq!(tls["not_after_unix"], fresh, "{tls}");
    assert_eq!(
        server
            .stderr()
            .matches("the TLS certificate being served")
            .count(),
        warnings,
        "{}",
        server.stderr()
    );
}
