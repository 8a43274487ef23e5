//! The CGI scripts' process groups a worker reports are the parent's to kill when the
//! worker goes without ending them (decision 0092).

use super::*;

fn script(worker: WorkerId, message: WorkerMessage) -> Event {
    Event::Message { worker, message }
}

#[test]
fn a_gone_workers_script_groups_are_killed_after_it_is_let_go() {
    let (mut p, w) = started(|_| {});
    let t = Instant::ZERO;
    p.handle(t, script(w, WorkerMessage::ScriptStarted { pgid: 4001 }));
    p.handle(t, script(w, WorkerMessage::ScriptStarted { pgid: 4002 }));
    p.handle(t, script(w, WorkerMessage::ScriptEnded { pgid: 4002 }));
    assert_eq!(p.scripts.of(w), 1);
    actions(&mut p);
    p.handle(t, Event::ChannelClosed { worker: w });
    let acts = actions(&mut p);
    let gone = acts
        .iter()
        .position(|a| *a == ParentAction::Supervisor(Action::WorkerGone { worker: w }))
        .expect("the worker is let go");
    let kill = acts
        .iter()
        .position(|a| {
            *a == ParentAction::KillScriptGroups {
                worker: w,
                pgids: vec![4001],
            }
        })
        .unwrap_or_else(|| {
            panic!("the group a gone worker's script left running must be killed: {acts:?}")
        });
    assert!(kill > gone, "killed after WorkerGone: {acts:?}");
    assert_eq!(p.scripts.of(w), 0, "forgotten once killed");
    // Its channel is closed: a late report from it records nothing.
    p.handle(t, script(w, WorkerMessage::ScriptStarted { pgid: 4003 }));
    assert_eq!(p.scripts.of(w), 0, "a gone worker's report is not trusted");
}
