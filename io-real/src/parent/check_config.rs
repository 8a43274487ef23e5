//! `--check-config`: the settings as `--print-config` shows them, then what was worked
//! out from them — the validated configuration (each core field under its path, with
//! the aggregates) and what preparing the serving options found. The second part names
//! no setting again: a line there is either the core's (`config_text`) or derived here,
//! and a test holds it to that.

use std::fmt::Write as _;
use std::path::Path;

use servery_core::ValidConfig;
use servery_core::config::CpuAffinity;
use servery_core::cpu_affinity::CpuSet;

use super::listeners::{DEFAULT_PORT, PORT_SCAN};
use super::site::PreparedSite;
use super::status::config_text;
use crate::cli::ServeArgs;
use crate::settings::Effective;

/// The whole report, for a configuration that is valid.
pub(super) fn report(
    effective: &[Effective],
    args: &ServeArgs,
    root: &Path,
    config: &ValidConfig,
    site: &PreparedSite,
    cpus: &CpuSet,
) -> String {
    let mut out = String::from("servery: configuration is valid\n");
    out.push_str(crate::settings::print_toml(effective).trim_end());
    out.push_str("\n# Validated, with the aggregates\n");
    for (key, value) in derived(args, root, site) {
        let _ = writeln!(out, "{key} = {value}");
    }
    let _ = writeln!(out, "worker_cpus = {}", cpu_plan(config, cpus));
    out.push_str(&config_text(config));
    out
}

/// Where each worker slot runs (decision 0122), from the core's plan and the CPUs this
/// process may run on: `slot 0: 0-1, slot 1: 2-3`, or why nobody is pinned.
fn cpu_plan(config: &ValidConfig, cpus: &CpuSet) -> String {
    let plan = servery_core::cpu_affinity::plan(config, cpus);
    if plan.iter().all(Option::is_some) {
        let slots: Vec<String> = plan
            .iter()
            .flatten()
            .enumerate()
            .map(|(slot, set)| format!("slot {slot}: {set}"))
            .collect();
        return format!("\"{}\"", slots.join(", "));
    }
    let why = if config.worker_cpu_affinity() == CpuAffinity::Off {
        "worker_cpu_affinity is off".to_owned()
    } else if !config.features().application {
        "file-serving workers are not pinned".to_owned()
    } else {
        "the CPUs this process may run on are unknown".to_owned()
    };
    format!(
        "\"not pinned ({why}); this process may run on {}\"",
        show(cpus)
    )
}

fn show(cpus: &CpuSet) -> String {
    if cpus.is_empty() {
        "any CPU".into()
    } else {
        format!("CPUs {cpus}")
    }
}

/// What preparing the settings worked out, that no setting states (never a secret).
fn derived(args: &ServeArgs, root: &Path, site: &PreparedSite) -> Vec<(&'static str, String)> {
    let s = &args.site;
    // The directory as served: `dir`, resolved.
    let mut lines = vec![("root", root.display().to_string())];
    if args.port.is_none() {
        // What the unset `port` means.
        let last = DEFAULT_PORT + PORT_SCAN - 1;
        let scan = format!("{DEFAULT_PORT} (scanning to {last} while busy)");
        lines.push(("port", scan));
    }
    // Where the certificate comes from: one of three settings, or none.
    let tls = match (&s.tls_cert, s.tls_self_signed) {
        (Some(cert), _) => format!("certificate {}", cert.display()),
        (None, true) => format!("self-signed for {}", site.self_signed_names.join(", ")),
        (None, false) if args.acme.enabled() => format!(
            "ACME for {} from {} (cleartext HTTP-01 on port {})",
            args.acme.acme.join(", "),
            args.acme.acme_directory,
            args.acme.acme_http_port
        ),
        (None, false) => "off".into(),
    };
    lines.push(("site.tls", tls));
    if let Some(fp) = &site.fingerprint {
        lines.push(("site.tls_sha256", fp.clone()));
    }
    // How many users `--auth` admits: its values are secrets, the count is not.
    lines.push(("site.auth_users", site.auth_users.to_string()));
    // Whether the header is sent: `--hsts` does nothing without TLS.
    lines.push(("site.hsts_sent", (s.hsts && s.tls()).to_string()));
    if args.tftp.tftp {
        // The socket the TFTP service binds, from `tftp_bind` and `tftp_port`.
        lines.push(("tftp_socket", format!("udp {}", args.tftp.addr())));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::{Source, by_key, table};

    fn loaded(args: &[&str]) -> crate::settings::Loaded {
        let argv: Vec<std::ffi::OsString> = std::iter::once("servery")
            .chain(args.iter().copied())
            .map(Into::into)
            .collect();
        crate::settings::load(&argv).expect("loads")
    }

    #[test]
    fn the_validated_part_repeats_no_setting_it_was_given() {
        let dir = std::env::temp_dir();
        let dir = dir.to_str().expect("utf-8");
        for args in [
            &[dir][..],
            &[dir, "--port", "0", "--tls-self-signed", "--hsts", "--tftp"],
            &[dir, "--auth", "alice:s3cret-pw", "--cors", "--cache", "60"],
        ] {
            let loaded = loaded(args);
            let serve = &loaded.cli.serve;
            let site = super::super::site::prepare(&serve.site, &serve.bind).expect("site");
            let config = serve.raw_config().validate().expect("valid");
            let root = Path::new(dir);
            let table = table();
            for (key, _) in derived(serve, root, &site) {
                // A derived line may stand for a setting left unset (what it means),
                // never repeat one that has a value.
                if let Some(setting) = by_key(&table, key) {
                    let e = loaded.effective.iter().find(|e| e.setting == *setting);
                    assert!(
                        e.is_some_and(|e| e.source == Source::Unset),
                        "{key} is a setting with a value, already shown above: {args:?}"
                    );
                }
            }
            let cpus = CpuSet::new([0, 1]);
            let report = report(&loaded.effective, serve, root, &config, &site, &cpus);
            let validated = report
                .split_once("# Validated, with the aggregates\n")
                .expect("two parts")
                .1;
            assert!(!report.contains("s3cret-pw"), "a secret shown: {report}");
            for line in validated.lines() {
                let key = line.split(" = ").next().unwrap_or(line);
                assert!(
                    key.strip_prefix("site.")
                        .is_none_or(|k| by_key(&table, k).is_none()),
                    "{line}: a setting rendered by hand ({args:?})"
                );
            }
        }
    }

    #[test]
    fn the_cpu_plan_names_each_slots_cpus_or_why_nobody_is_pinned() {
        let plan = |args: &[&str]| {
            let config = loaded(args)
                .cli
                .serve
                .raw_config()
                .validate()
                .expect("valid");
            cpu_plan(&config, &CpuSet::new([0, 1, 2]))
        };
        assert_eq!(
            plan(&["--wsgi", "app:app", "--workers", "2"]),
            "\"slot 0: 0-1, slot 1: 2\""
        );
        assert_eq!(
            plan(&[
                "--asgi",
                "app:app",
                "--workers",
                "2",
                "--worker-cpu-affinity",
                "off"
            ]),
            "\"not pinned (worker_cpu_affinity is off); this process may run on CPUs 0-2\""
        );
        assert_eq!(
            plan(&["--workers", "2"]),
            "\"not pinned (file-serving workers are not pinned); this process may run on CPUs 0-2\""
        );
    }

    #[test]
    fn every_core_field_is_shown_under_the_path_its_setting_sets() {
        // `workers` 3, uploads on and a port, so counts and features are not all defaults.
        let loaded = loaded(&[
            "--workers",
            "3",
            "--upload",
            "--max-upload-files",
            "7",
            "--port",
            "8123",
            // A probe path and a CA, so the optional core fields are shown with a value.
            "--proxy",
            "/api=http://127.0.0.1:9",
            "--proxy-health",
            "/healthz",
            "--proxy-ca",
            "/etc/servery/upstream-ca.pem",
        ]);
        let config = loaded.cli.serve.raw_config().validate().expect("valid");
        let json = super::super::config_json(&config);
        let text = config_text(&config);
        let fields = crate::knobs::all();
        assert!(fields.len() > 30, "{fields:?}");
        for f in fields {
            let field = f.field();
            let shown = json.pointer(&format!("/{}", f.path.join("/")));
            assert!(
                shown
                    .as_ref()
                    .is_some_and(|v| !v.is_object() && !v.is_null()),
                "{field} (set by {}) is not in the status config: {json}",
                f.flag()
            );
            let line = text
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{field} = ")));
            assert_eq!(
                line.map(str::to_owned),
                shown.map(ToString::to_string),
                "{field} (set by {}) in --check-config:\n{text}",
                f.flag()
            );
        }
        for (path, value) in [("workers", "3"), ("uploads.max_upload_files", "7")] {
            assert!(text.contains(&format!("{path} = {value}\n")), "{text}");
        }
        assert!(text.contains("features.uploads = true\n"), "{text}");
    }
}
