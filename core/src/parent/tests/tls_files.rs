//! The certificate files read again on reload (decision 0093): read only for a reload
//! the supervisor would take, a good read taken before the reload, a bad one refusing it.

use super::*;
use crate::tls_material::{
    CertSummary, STATELESS_RESET_KEY_LEN, TICKET_ENTROPY_LEN, TicketPolicy, TlsInput, TlsState,
};

fn material(cert: &str) -> TlsState {
    TlsState::new(
        Instant::ZERO,
        TicketPolicy::default(),
        cert.into(),
        format!("KEY {cert}"),
        CertSummary::default(),
        [1; TICKET_ENTROPY_LEN],
        [2; STATELESS_RESET_KEY_LEN],
    )
    .expect("fits")
}

fn identity(cert: &str) -> TlsInput {
    TlsInput::Identity {
        cert_pem: cert.into(),
        key_pem: format!("KEY {cert}"),
        summary: CertSummary::default(),
    }
}

/// Serving with an identity read from files (or handed over otherwise, `from_files`
/// false: ACME's).
fn serving(from_files: bool) -> Parent {
    let (p, _) = started_with(
        |_| {},
        |mut p| {
            if from_files {
                p = p.reread_tls_files_on_reload();
            }
            p.start_tls(material("OLD"));
            p
        },
    );
    p
}

fn reload(p: &mut Parent, id: u64, config: RawConfig) -> Vec<ParentAction> {
    p.handle(
        Instant::ZERO,
        Event::Command(Command::Reload {
            id: ReloadId(id),
            config: Box::new(config),
        }),
    );
    actions(p)
}

fn reads(acts: &[ParentAction]) -> Vec<u64> {
    acts.iter()
        .filter_map(|a| match a {
            ParentAction::ReadTlsFiles { reload } => Some(reload.0),
            _ => None,
        })
        .collect()
}

fn started_reload(acts: &[ParentAction]) -> bool {
    acts.iter()
        .any(|a| matches!(a, ParentAction::Supervisor(Action::ReloadStarted { .. })))
}

fn identity_generation(p: &Parent) -> u64 {
    p.tls().expect("tls").status().identity_generation
}

#[test]
fn a_reload_waits_for_the_files_and_a_good_read_is_served_by_the_new_generation() {
    let mut p = serving(true);
    let acts = reload(&mut p, 1, RawConfig::default());
    assert_eq!(
        reads(&acts),
        [1],
        "certificate reread rule: a valid reload reads the files first: {acts:?}"
    );
    assert!(
        !started_reload(&acts),
        "certificate reread rule: the reload started before its files were read: {acts:?}"
    );
    assert_eq!(p.tls_files_reading(), 1);
    p.handle(
        Instant::ZERO,
        Event::TlsFilesRead {
            reload: ReloadId(1),
            read: Ok(identity("NEW")),
        },
    );
    let acts = actions(&mut p);
    assert_eq!(
        identity_generation(&p),
        2,
        "certificate reread rule: a good read is the identity from then on"
    );
    assert!(started_reload(&acts), "{acts:?}");
    let spawn = acts
        .iter()
        .position(|a| matches!(a, ParentAction::Supervisor(Action::Spawn { .. })))
        .expect("the new generation spawns");
    assert_eq!(p.tls_files_reading(), 0);
    assert!(spawn > 0);
    p.check_invariants().expect("invariants");
}

#[test]
fn a_bad_read_refuses_the_reload_with_its_reason_and_keeps_the_identity() {
    let mut p = serving(true);
    reload(&mut p, 4, RawConfig::default());
    let reason = "the certificate files (c.pem, k.pem) were not reloaded and the current certificate stays: no key";
    p.handle(
        Instant::ZERO,
        Event::TlsFilesRead {
            reload: ReloadId(4),
            read: Err(reason.into()),
        },
    );
    let acts = actions(&mut p);
    assert!(
        acts.iter().any(|a| matches!(
            a,
            ParentAction::Supervisor(Action::ReloadRejected { reload: ReloadId(4), message }) if message == reason
        )),
        "certificate reread rule: a bad read refuses its reload with the read's reason: {acts:?}"
    );
    assert!(!started_reload(&acts), "{acts:?}");
    assert_eq!(identity_generation(&p), 1, "the current identity stays");
    assert_eq!(
        p.tls().expect("tls").status().last_refusal.as_deref(),
        Some(reason)
    );
    assert_eq!(p.supervisor().generation(), Generation(1));
}

#[test]
fn nothing_is_read_for_an_invalid_reload_a_resize_or_an_identity_not_from_files() {
    let mut p = serving(true);
    let invalid = RawConfig {
        workers: 0,
        ..RawConfig::default()
    };
    let acts = reload(&mut p, 1, invalid);
    assert!(reads(&acts).is_empty(), "{acts:?}");
    assert!(
        acts.iter()
            .any(|a| matches!(a, ParentAction::Supervisor(Action::ReloadRejected { .. }))),
        "{acts:?}"
    );
    p.handle(
        Instant::ZERO,
        Event::Command(Command::Resize {
            id: ReloadId(2),
            config: Box::new(RawConfig::default()),
            by: 1,
        }),
    );
    assert!(reads(&actions(&mut p)).is_empty());

    let mut acme = serving(false);
    let acts = reload(&mut acme, 1, RawConfig::default());
    assert!(reads(&acts).is_empty(), "{acts:?}");
    assert!(started_reload(&acts), "{acts:?}");
}

#[test]
fn a_read_nobody_waits_for_changes_nothing() {
    let mut p = serving(true);
    p.handle(
        Instant::ZERO,
        Event::TlsFilesRead {
            reload: ReloadId(9),
            read: Ok(identity("STRAY")),
        },
    );
    assert_eq!(identity_generation(&p), 1);
    assert!(actions(&mut p).is_empty());
}
