//! A reply that may come from the cloud: the states it goes through and the events it
//! gives, on top of the device's own reply ([`Reply::next_local`]).

use super::cache::Answer;
use super::client::{CloudEvent, CloudStream};
use super::{Cloud, CloudRequest, Reason};
use crate::stream::{Event, Reply, Source, Summary};
use crate::{Edge, EdgeError};
use hanzo_transformers::{Finish, GenerateOptions};
use web_time::Instant;

/// Where a reply stands.
enum State {
    /// The device answers; with `Some`, the text of its first tokens is held back until the
    /// entropy over them has been judged.
    Local {
        held: Option<String>,
    },
    /// To the cloud at the next event, nothing started on the device.
    ToCloud,
    Cloud(CloudStream),
    /// The summary is the next and last event.
    Finishing,
    Done,
}

/// What answers when the cloud cannot.
enum Fallback {
    /// The device's prompt, nothing computed on the device yet: it is read now.
    Start(Vec<u32>, usize, GenerateOptions),
    /// The device refused the conversation (it does not fit): this error.
    Refuse(String),
    /// The local draft the entropy turned down, and whether the device's reply had ended
    /// with it: it stands after all, and goes on.
    Draft { text: String, finished: bool },
}

/// The cloud fallback's part of a [`Reply`].
pub(crate) struct Route {
    cloud: Cloud,
    request: CloudRequest,
    state: State,
    /// Why the reply went (or was meant to go) to the cloud.
    reason: Option<Reason>,
    error: Option<String>,
    /// Taken when the cloud fails (once a reply at most: it is not asked again).
    fallback: Option<Fallback>,
    // The cloud's answer so far.
    text: String,
    finish: Option<String>,
    tokens: usize,
    cached: bool,
    started: Instant,
    first: Option<f64>,
}

impl Route {
    /// A reply the cloud is asked for first, for `reason`; the device reads `prompt`
    /// (`keep` of it pinned) if the cloud cannot answer.
    pub fn to_cloud(
        cloud: Cloud,
        request: CloudRequest,
        reason: Reason,
        (prompt, keep, opts): (Vec<u32>, usize, GenerateOptions),
    ) -> Self {
        let start = Fallback::Start(prompt, keep, opts);
        Self::new(cloud, request, State::ToCloud, Some(reason), start)
    }

    /// As `to_cloud` for a conversation the device refused (`message`), which is the answer
    /// if the cloud fails too.
    pub fn refused(cloud: Cloud, request: CloudRequest, message: String) -> Self {
        let refuse = Fallback::Refuse(message);
        Self::new(
            cloud,
            request,
            State::ToCloud,
            Some(Reason::Context),
            refuse,
        )
    }

    /// A local reply whose first `cloud.entropy_window` tokens are judged before they are
    /// given. `started`: when the reply began (its prompt's pass is part of its time to the
    /// first token, wherever that comes from).
    pub fn judged(cloud: Cloud, request: CloudRequest, started: Instant) -> Self {
        let held = State::Local {
            held: Some(String::new()),
        };
        let draft = Fallback::Draft {
            text: String::new(),
            finished: false,
        };
        let mut r = Self::new(cloud, request, held, None, draft);
        r.started = started;
        r
    }

    fn new(
        cloud: Cloud,
        request: CloudRequest,
        state: State,
        reason: Option<Reason>,
        fallback: Fallback,
    ) -> Self {
        Self {
            cloud,
            request,
            state,
            reason,
            error: None,
            fallback: Some(fallback),
            text: String::new(),
            finish: None,
            tokens: 0,
            cached: false,
            started: Instant::now(),
            first: None,
        }
    }

    /// The cloud's part of the summary.
    pub fn annotate(&self, s: &mut Summary) {
        s.fallback_reason = self.reason.map(Reason::as_str);
        s.cloud_error = self.error.clone();
        if self.finish.is_some() {
            let total = self.started.elapsed().as_secs_f64();
            let ttft = self.first.unwrap_or(total);
            s.source = Source::Cloud;
            s.cached = self.cached;
            s.finish = match self.finish.as_deref() {
                Some("length") => Finish::Length,
                Some("cancelled") => Finish::Cancelled,
                _ => Finish::EndOfText,
            };
            s.completion_tokens = self.tokens;
            s.computed_prompt_tokens = 0;
            s.evicted_tokens = 0;
            s.evictions = 0;
            s.time_to_first_token_s = ttft;
            s.generate_seconds = total;
            // A cached answer comes at once: no speed to speak of.
            s.tokens_per_second = match !self.cached && total > ttft && self.tokens > 1 {
                true => (self.tokens - 1) as f64 / (total - ttft),
                false => 0.0,
            };
        }
    }
}

/// The next event of a reply with a route (see [`Reply::next_event`]).
pub(crate) fn next_event(reply: &mut Reply, edge: &mut Edge) -> Option<Result<Event, EdgeError>> {
    loop {
        let route = reply.route.as_mut().expect("a routed reply");
        match &mut route.state {
            State::Done => return None,
            State::Finishing => {
                route.state = State::Done;
                reply.done = true;
                return Some(Ok(Event::Done(reply.summary(edge))));
            }
            State::Local { held: None } => {
                let event = reply.next_local(edge);
                if matches!(event, Some(Ok(Event::Done(_))) | None) {
                    route_of(reply).state = State::Done;
                }
                return event;
            }
            State::Local { held: Some(held) } => {
                let mut held = std::mem::take(held);
                let event = reply.next_local(edge);
                let finished = match event {
                    Some(Ok(Event::Text(t))) => {
                        held.push_str(&t);
                        false
                    }
                    Some(Ok(Event::Done(_))) | None => true,
                    Some(Err(e)) => return Some(Err(e)),
                };
                let judged_now = reply.generated >= route_of(reply).cloud.entropy_window;
                if !judged_now && !finished {
                    route_of(reply).state = State::Local { held: Some(held) };
                    continue;
                }
                let entropies = reply.entropies.take().unwrap_or_default();
                let route = route_of(reply);
                let mean = match entropies.is_empty() {
                    true => 0.0,
                    false => entropies.iter().sum::<f32>() / entropies.len() as f32,
                };
                let threshold = route.cloud.fallback_entropy.unwrap_or(f32::INFINITY);
                tracing::debug!(
                    "local draft: mean entropy {mean:.3} nats over {} tokens (threshold {threshold})",
                    entropies.len()
                );
                if mean > threshold {
                    route.reason = Some(Reason::Entropy);
                    route.fallback = Some(Fallback::Draft {
                        text: held,
                        finished,
                    });
                    route.state = State::ToCloud;
                    continue;
                }
                // Confident enough: the draft stands and the rest streams as it comes.
                route.state = match finished {
                    true => State::Finishing,
                    false => State::Local { held: None },
                };
                if !held.is_empty() {
                    return Some(Ok(Event::Text(held)));
                }
            }
            State::ToCloud => {
                let cache = edge.cloud_cache();
                if let Some(answer) = cache
                    .filter(|_| route.request.deterministic)
                    .and_then(|c| c.get(&route.request.body))
                {
                    route.first = Some(route.started.elapsed().as_secs_f64());
                    route.cached = true;
                    route.tokens = answer.completion_tokens;
                    route.finish = Some(answer.finish);
                    route.state = State::Finishing;
                    if !answer.text.is_empty() {
                        return Some(Ok(Event::Text(answer.text)));
                    }
                    continue;
                }
                tracing::info!(
                    "asking the cloud ({}): {}",
                    route.reason.map_or("", Reason::as_str),
                    route.cloud.endpoint()
                );
                route.state = State::Cloud(CloudStream::start(&route.cloud, &route.request));
            }
            State::Cloud(stream) => match stream.next() {
                Some(CloudEvent::Text(t)) => {
                    route
                        .first
                        .get_or_insert_with(|| route.started.elapsed().as_secs_f64());
                    route.text.push_str(&t);
                    return Some(Ok(Event::Text(t)));
                }
                Some(CloudEvent::Done {
                    finish,
                    completion_tokens,
                }) => {
                    route.tokens = completion_tokens;
                    if route.request.deterministic {
                        let answer = Answer {
                            text: route.text.clone(),
                            finish: finish.clone(),
                            completion_tokens,
                        };
                        if let Some(c) = edge.cloud_cache() {
                            if let Err(e) = c.put(&route.request.body, &answer) {
                                tracing::warn!("the cloud cache: {e}");
                            }
                        }
                    }
                    route.finish = Some(finish);
                    route.state = State::Finishing;
                }
                Some(CloudEvent::Error(e)) => return fall_back(reply, edge, e),
                None => return fall_back(reply, edge, "the answer ended".into()),
            },
        }
    }
}

/// The cloud did not answer (`why`): what came of it stands, cut short, or the device
/// answers after all.
fn fall_back(reply: &mut Reply, edge: &mut Edge, why: String) -> Option<Result<Event, EdgeError>> {
    tracing::warn!("the cloud did not answer: {why}");
    let route = route_of(reply);
    route.error = Some(why);
    if !route.text.is_empty() {
        route.finish = Some("cancelled".into());
        route.state = State::Finishing;
        return next_event(reply, edge);
    }
    match route.fallback.take().expect("the cloud fails once a reply") {
        Fallback::Refuse(message) => {
            route.state = State::Done;
            reply.done = true;
            Some(Err(EdgeError::ContextFull(message)))
        }
        Fallback::Start(prompt, keep, opts) => {
            // Nothing was started on the device: start it now, the route kept for the
            // summary.
            let mut route = reply.route.take().expect("a routed reply");
            route.state = State::Local { held: None };
            match edge.begin(prompt, keep, &opts) {
                Ok(mut local) => {
                    local.route = Some(route);
                    *reply = local;
                    next_event(reply, edge)
                }
                Err(e) => {
                    reply.done = true;
                    Some(Err(e))
                }
            }
        }
        Fallback::Draft { text, finished } => {
            route.state = match finished {
                true => State::Finishing,
                false => State::Local { held: None },
            };
            match text.is_empty() {
                true => next_event(reply, edge),
                false => Some(Ok(Event::Text(text))),
            }
        }
    }
}

fn route_of(reply: &mut Reply) -> &mut Route {
    reply.route.as_mut().expect("a routed reply")
}
