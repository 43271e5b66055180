//! A reply the guard watches: refused before it starts, held back until judged, or passed
//! through, with the guard's report in its summary.

use super::{GuardReport, Stage};
use crate::stream::{Event, Reply, Summary};
use crate::{Edge, EdgeError};

/// The guard's part of a [`Reply`].
pub(crate) struct Guarding {
    report: GuardReport,
    state: State,
    /// The reply is held back until judged.
    hold: bool,
}

enum State {
    /// The user's turn was flagged: this refusal is the reply (the `Reply` is a placeholder
    /// that computes nothing).
    Refuse(String),
    /// The reply is collected here until it ends, then judged.
    Hold(String),
    /// The reply goes through as it comes (only the prompt was checked).
    Pass,
    /// The judged reply (or the refusal in its place), then its summary.
    Release(String, Box<Summary>),
    /// The summary is the next and last event.
    Finishing,
    Done,
}

impl Guarding {
    /// The reply to a turn the guard flagged: `refusal`, and no model text.
    pub fn refusing(report: GuardReport, refusal: String) -> Self {
        Self {
            report,
            state: State::Refuse(refusal),
            hold: false,
        }
    }

    /// A reply held until judged (`hold`) or passed through.
    pub fn watching(report: GuardReport, hold: bool) -> Self {
        let state = match hold {
            true => State::Hold(String::new()),
            false => State::Pass,
        };
        Self {
            report,
            state,
            hold,
        }
    }

    /// The guard's part of the summary: its report, and its time in the reply's (the
    /// caller waited for the checks; a held reply's first piece came with its last).
    pub fn annotate(&self, s: &mut Summary) {
        s.generate_seconds += self.report.seconds;
        s.time_to_first_token_s = match self.hold {
            true => s.generate_seconds,
            false => s.time_to_first_token_s + self.report.first_token_seconds,
        };
        s.guard = Some(self.report.clone());
    }
}

/// The next event of a guarded reply (see [`Reply::next_event`]).
pub(crate) fn next_event(reply: &mut Reply, edge: &mut Edge) -> Option<Result<Event, EdgeError>> {
    loop {
        let guarding = guarding_of(reply);
        match &mut guarding.state {
            State::Done => return None,
            State::Finishing => {
                guarding.state = State::Done;
                return Some(Ok(Event::Done(reply.summary(edge))));
            }
            State::Refuse(text) => {
                let text = std::mem::take(text);
                guarding.state = State::Finishing;
                return Some(Ok(Event::Text(text)));
            }
            State::Release(text, _) if !text.is_empty() => {
                return Some(Ok(Event::Text(std::mem::take(text))));
            }
            State::Release(..) => {
                let State::Release(_, summary) =
                    std::mem::replace(&mut guarding.state, State::Done)
                else {
                    unreachable!("matched above")
                };
                return Some(Ok(Event::Done(*summary)));
            }
            State::Pass => {
                let event = reply.next_inner(edge);
                if !matches!(event, Some(Ok(Event::Text(_)))) {
                    guarding_of(reply).state = State::Done;
                }
                return event;
            }
            State::Hold(_) => match reply.next_inner(edge) {
                Some(Ok(Event::Text(t))) => {
                    if let State::Hold(held) = &mut guarding_of(reply).state {
                        held.push_str(&t);
                    }
                }
                Some(Ok(Event::Done(summary))) => {
                    let State::Hold(held) =
                        std::mem::replace(&mut guarding_of(reply).state, State::Done)
                    else {
                        unreachable!("held above")
                    };
                    let verdict = match edge.moderate(Stage::Reply, &held) {
                        Ok(v) => v,
                        Err(e) => return Some(Err(e)),
                    };
                    let text = match &verdict.flagged {
                        Some(c) => edge.guard().expect("a guarded edge").refusal_for(c),
                        None => held,
                    };
                    let guarding = guarding_of(reply);
                    guarding.report.add(Stage::Reply, &verdict);
                    guarding.report.first_token_seconds += verdict.seconds;
                    let mut summary = Box::new(summary);
                    summary.generate_seconds += verdict.seconds;
                    summary.time_to_first_token_s = summary.generate_seconds;
                    summary.guard = Some(guarding.report.clone());
                    guarding.state = State::Release(text, summary);
                }
                other => {
                    guarding_of(reply).state = State::Done;
                    return other;
                }
            },
        }
    }
}

fn guarding_of(reply: &mut Reply) -> &mut Guarding {
    reply.guard.as_mut().expect("a guarded reply")
}
