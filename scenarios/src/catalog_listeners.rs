//! Reloads that move the listeners to another port (decision 0035): the new set is bound
//! before any candidate starts, a port another program holds rejects the reload with
//! nothing started, a failed candidate generation gives its set back, and the parent
//! holds exactly the sets a generation may still start workers on (the simulated host
//! judges that after every step, and that nothing is held once the parent exits).

use servery_core::config::Listen;
use servery_sim::{Behavior, Fault, FaultKind, SimCommand};

use crate::catalog::{at, behave, expect, fault, spec, workers};
use crate::{Ctx, End, Plan, fast_config};

/// The ports reloads choose among (`None`: the default port).
const PORTS: [Option<u16>; 3] = [Some(8001), Some(8002), None];
const RELOADS: u64 = 3;

pub(crate) fn reload_port_change(ctx: &mut Ctx) -> Plan {
    let config = fast_config(workers(ctx, 1, 3));
    let mut spec = spec(ctx, config.clone(), 11.0);
    let busy = PORTS[ctx.rng.range(0, 1) as usize];
    let busy_at = at(ctx, 0.2, 0.8);
    let busy = busy.filter(|&port| fault(ctx.kinds, &mut spec, busy_at, Fault::PortBusy { port }));
    // The reload whose first candidate fails to start, if any: its set must be given back.
    let failing = Some(ctx.rng.range(0, RELOADS))
        .filter(|&i| i < RELOADS && ctx.kinds.has(FaultKind::FailStartup));
    let (mut current, mut generation, mut serving) = (config.listen, 1, config.workers as usize);
    // The failing reload's generation number, and when the next reload (which may start
    // the same number) arrives.
    let mut failing_generation = None;
    let mut times = Vec::new();
    for i in 0..RELOADS {
        let mut next = fast_config(workers(ctx, 1, 3));
        next.listen = Listen {
            port: PORTS[ctx.rng.range(0, 2) as usize],
        };
        // Three seconds apart: each is answered before the next arrives.
        let when = at(ctx, 1.0 + 3.0 * i as f64, 2.0 + 3.0 * i as f64);
        let refused = next.listen != current && next.listen.port.is_some_and(|p| busy == Some(p));
        if refused {
            // Rejected with nothing started.
        } else if failing == Some(i) {
            failing_generation = Some(generation + 1);
        } else {
            generation += 1;
            current = next.listen;
            serving = next.workers as usize;
        }
        times.push(when);
        spec.commands
            .push((when, SimCommand::Reload(Box::new(next))));
    }
    let until = failing
        .and_then(|i| times.get(i as usize + 1).copied())
        .unwrap_or(core::time::Duration::MAX);
    spec.behavior = behave(ctx.kinds, move |info, _| {
        if Some(info.generation.0) == failing_generation && info.slot.0 == 0 && info.now < until {
            Behavior::FailStartup("the new generation cannot start".into())
        } else {
            Behavior::Healthy
        }
    });
    let mut e = expect(&config, End::Ready);
    e.workers = serving;
    e.generation = Some(generation);
    e.zero_failed = true;
    Plan { spec, expect: e }
}
