//! The exchanges: a shuffle routes each tuple to the site the optimizer's
//! placement function gives it, a broadcast sends one copy to each process's
//! leader, which shares it with the workers of its process, and a concat
//! aggregation's piece counts go to every worker. Floats moved and bytes on
//! the wire are counted where items are sent.

use super::{exchange, record_error, stage, wall_ns, Proc, Report, CB, S};
use crate::cluster::ops::{concat_count, concat_kernel, project};
use crate::cluster::wire::{Body, Item, EVERY_TAG};
use crate::threads::Elem;
use std::sync::Arc;
use std::time::Instant;
use timely::dataflow::channels::pact::Pipeline;
use timely::dataflow::operators::generic::Operator;
use tra_optimizer::placement::site_of;
use tra_optimizer::program::IaOp;

/// The sending side of an exchange: every item of `input` goes on as `send`
/// says (it gives the items to send and returns the floats that counts as
/// moved); the step's moved floats and busy time are noted batch by batch.
fn send_on<'s, T: Elem>(
    p: &Arc<Proc<T>>,
    me: usize,
    input: S<'s, T>,
    i: usize,
    report: Report,
    mut send: impl FnMut(Item<T>, &mut dyn FnMut(Item<T>)) -> u64 + 'static,
) -> S<'s, T> {
    let name = p.prep.steps[i].name.clone();
    let workers = p.workers;
    input.unary::<CB<T>, _, _, _>(Pipeline, &format!("{name}: route"), move |_, _| {
        move |input, output| {
            input.for_each(|cap, data| {
                let t0 = Instant::now();
                let first = wall_ns();
                let mut session = output.session(&cap);
                let mut moved = 0u64;
                let mut wire = 0u64;
                for it in data.take_items() {
                    moved += send(it, &mut |item| {
                        if item.dest as usize / workers != me / workers {
                            wire += item.payload_bytes() as u64;
                        }
                        session.give(item)
                    });
                }
                let mut r = report.borrow_mut();
                r.steps[i].moved += moved;
                r.steps[i].wire_bytes += wire;
                if r.steps[i].first_ns == 0 {
                    r.steps[i].first_ns = first.max(1);
                }
                r.steps[i].busy_ns += t0.elapsed().as_nanos() as u64;
            });
        }
    })
}

pub(super) fn shuffle<'s, T: Elem>(
    p: &Arc<Proc<T>>,
    me: usize,
    i: usize,
    input: S<'s, T>,
    dims: Vec<usize>,
    report: &Report,
) -> S<'s, T> {
    let sites = p.sites;
    let (r1, r2) = (report.clone(), report.clone());
    let p2 = p.clone();
    let name = p.prep.steps[i].name.clone();
    let mut failed = false;
    let routed = send_on(p, me, input, i, report.clone(), move |it, give| {
        let mut moved = 0u64;
        match it.body {
            Body::Tuple(k, b) => {
                if let Err(e) = project(&name, &k, &dims) {
                    if !failed {
                        record_error(&r1, stage(i), me, &e);
                        failed = true;
                    }
                    return 0;
                }
                moved += b.len() as u64;
                give(Item::tuple(site_of(&k, &dims, sites), me as u32, k, b));
            }
            Body::Every(list) => {
                for (k, b) in list.iter() {
                    if let Err(e) = project(&name, k, &dims) {
                        if !failed {
                            record_error(&r1, stage(i), me, &e);
                            failed = true;
                        }
                        break;
                    }
                    if site_of(k, &dims, sites) == me {
                        moved += b.len() as u64;
                        give(Item::tuple(me, EVERY_TAG, k.clone(), b.clone()));
                    }
                }
            }
            Body::EveryTuple(k, b) => match project(&name, &k, &dims) {
                Err(e) => {
                    if !failed {
                        record_error(&r1, stage(i), me, &e);
                        failed = true;
                    }
                }
                Ok(_) => {
                    if site_of(&k, &dims, sites) == me {
                        moved += b.len() as u64;
                        give(Item::tuple(me, EVERY_TAG, k, b));
                    }
                }
            },
            Body::Meta(_) => {}
        }
        moved
    });
    arrive_sorted(p2, me, i, routed, r2)
}

/// The receiving side of a shuffle: tuples are passed on as they arrive,
/// each with the site it came from (`tag`): every consumer orders a site's
/// tuples by (key, source site), the order of the thread runtime's site lists,
/// which the folds of later aggregations follow. The time of the last arrival
/// ends the exchange's wire window (the input is complete only later, once
/// every process has said so, after whatever else the worker had to do).
fn arrive_sorted<'s, T: Elem>(p: Arc<Proc<T>>, _me: usize, i: usize, routed: S<'s, T>, report: Report) -> S<'s, T> {
    let name = format!("{}: arrive", p.prep.steps[i].name);
    routed.unary_frontier::<CB<T>, _, _, _>(exchange::<T>(), &name, move |_, _| {
        let mut noted = false;
        let mut tuples = 0u64;
        let mut last = 0u64;
        move |(input, frontier), output| {
            input.for_each(|cap, data| {
                last = wall_ns();
                tuples += data.items.iter().filter(|it| matches!(it.body, Body::Tuple(..))).count() as u64;
                output.session(&cap).give_container(data);
            });
            if frontier.is_empty() && !noted {
                noted = true;
                let mut r = report.borrow_mut();
                r.steps[i].done_ns = p.now_ns();
                r.steps[i].last_ns = last;
                r.steps[i].tuples += tuples;
            }
        }
    })
}

/// The receiving side of a broadcast's second exchange: passes the shared
/// list on, and notes when its last item arrived and when the input is complete.
pub(super) fn arrive<'s, T: Elem>(p: Arc<Proc<T>>, i: usize, routed: S<'s, T>, report: Report) -> S<'s, T> {
    let name = format!("{}: arrive", p.prep.steps[i].name);
    routed.unary_frontier::<CB<T>, _, _, _>(exchange::<T>(), &name, move |_, _| {
        let mut noted = false;
        let mut last = 0u64;
        move |(input, frontier), output| {
            input.for_each(|cap, data| {
                last = wall_ns();
                output.session(&cap).give_container(data);
            });
            if frontier.is_empty() && !noted {
                noted = true;
                let mut r = report.borrow_mut();
                r.steps[i].done_ns = p.now_ns();
                r.steps[i].last_ns = last;
            }
        }
    })
}

pub(super) fn broadcast<'s, T: Elem>(
    p: &Arc<Proc<T>>,
    me: usize,
    i: usize,
    input: S<'s, T>,
    report: &Report,
) -> S<'s, T> {
    let (sites, workers, processes) = (p.sites, p.workers, p.processes);
    let name = p.prep.steps[i].name.clone();
    let routed = send_on(p, me, input, i, report.clone(), move |it, give| match it.body {
        Body::Tuple(k, b) => {
            for q in 0..processes {
                give(Item::tuple(q * workers, me as u32, k.clone(), b.clone()));
            }
            sites as u64 * b.len() as u64
        }
        Body::Every(list) => {
            let moved = if me == 0 { sites as u64 * list.iter().map(|t| t.1.len() as u64).sum::<u64>() } else { 0 };
            if me.is_multiple_of(workers) {
                give(Item::every(me, list));
            }
            moved
        }
        Body::EveryTuple(k, b) => {
            let moved = if me == 0 { sites as u64 * b.len() as u64 } else { 0 };
            if me.is_multiple_of(workers) {
                give(Item { dest: me as u32, tag: EVERY_TAG, body: Body::EveryTuple(k, b) });
            }
            moved
        }
        Body::Meta(_) => 0,
    });
    // The leader of each process passes every tuple on to the workers of its
    // process as it comes (one copy per process: the workers share the
    // block); each worker orders them by key and source site itself.
    let r2 = report.clone();
    let shared = routed.unary::<CB<T>, _, _, _>(exchange::<T>(), &format!("{name}: leader"), move |_, _| {
        move |input, output| {
            input.for_each(|cap, data| {
                let t0 = Instant::now();
                let mut session = output.session(&cap);
                let mut tuples = 0u64;
                for it in data.take_items() {
                    match it.body {
                        Body::Tuple(k, b) => {
                            tuples += 1;
                            for w in 0..workers {
                                session.give(Item {
                                    dest: (me + w) as u32,
                                    tag: it.tag,
                                    body: Body::EveryTuple(k.clone(), b.clone()),
                                });
                            }
                        }
                        Body::EveryTuple(k, b) => {
                            tuples += 1;
                            for w in 0..workers {
                                session.give(Item {
                                    dest: (me + w) as u32,
                                    tag: EVERY_TAG,
                                    body: Body::EveryTuple(k.clone(), b.clone()),
                                });
                            }
                        }
                        Body::Every(list) => {
                            tuples += list.len() as u64;
                            for w in 0..workers {
                                session.give(Item::every(me + w, list.clone()));
                            }
                        }
                        Body::Meta(_) => {}
                    }
                }
                let mut r = r2.borrow_mut();
                if me == 0 {
                    r.steps[i].tuples += tuples;
                }
                r.steps[i].busy_ns += t0.elapsed().as_nanos() as u64;
            });
        }
    });
    arrive(p.clone(), i, shared, report.clone())
}

/// Each worker's piece count of a concat aggregation, sent to every worker.
pub(super) fn concat_counts<'s, T: Elem>(
    p: &Arc<Proc<T>>,
    me: usize,
    i: usize,
    input: S<'s, T>,
    report: &Report,
) -> S<'s, T> {
    let (p1, r1) = (p.clone(), report.clone());
    let name = p.prep.steps[i].name.clone();
    input.unary_frontier::<CB<T>, _, _, _>(Pipeline, &format!("{name}: piece count"), move |cap, _| {
        let mut cap = Some(cap);
        let mut count = 0u32;
        let mut failed = false;
        move |(input, frontier), output| {
            let step = &p1.prep.steps[i];
            let IaOp::LocalAggregate { kernel, .. } = &step.op else { unreachable!() };
            let key_dim = concat_kernel(&step.name, kernel).ok().flatten().map(|c| c.0).unwrap_or(0);
            input.for_each(|_, data| {
                for it in data.take_items() {
                    let keys: Vec<tra_optimizer::keyexpr::Key> = match &it.body {
                        Body::Tuple(k, _) | Body::EveryTuple(k, _) => vec![k.clone()],
                        Body::Every(list) => list.iter().map(|t| t.0.clone()).collect(),
                        Body::Meta(_) => vec![],
                    };
                    match concat_count(&step.name, keys.iter(), key_dim) {
                        Ok(c) => count = count.max(c),
                        Err(e) => {
                            if !failed {
                                record_error(&r1, stage(i), me, &e);
                                failed = true;
                            }
                        }
                    }
                }
            });
            if frontier.is_empty() {
                if let Some(c) = cap.take() {
                    let mut session = output.session(&c);
                    for w in 0..p1.sites {
                        session.give(Item::meta(w, me as u32, count.to_le_bytes().to_vec()));
                    }
                }
            }
        }
    })
}
