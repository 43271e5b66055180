//! `GET /metrics`: Prometheus metrics in the `hanzo_edge_` namespace.

use prometheus::{
    Counter, CounterVec, Encoder, Gauge, Histogram, HistogramOpts, Opts, Registry, TextEncoder,
};

pub struct Metrics {
    registry: Registry,
    tokens_generated: Counter,
    inference_duration: Histogram,
    ttft: Histogram,
    tokens_per_second: Gauge,
    memory_used: Gauge,
    load_duration: Histogram,
    thermal_state: Option<Gauge>,
    evictions: Counter,
    evicted_tokens: Counter,
    context_tokens: Gauge,
    threads: Gauge,
    cloud_fallback: CounterVec,
    cloud_errors: Counter,
    guard_flagged: CounterVec,
    guard_seconds: Counter,
    guard_tokens: Counter,
    draft_tokens: Counter,
    accepted_tokens: Counter,
    acceptance: Gauge,
}

impl Metrics {
    pub fn new() -> prometheus::Result<Self> {
        let registry = Registry::new();
        let seconds =
            |name: &str, help: &str, buckets: Vec<f64>| -> prometheus::Result<Histogram> {
                let h = Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets))?;
                registry.register(Box::new(h.clone()))?;
                Ok(h)
            };
        let counter = |name: &str, help: &str| -> prometheus::Result<Counter> {
            let c = Counter::new(name, help)?;
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        };
        let gauge = |name: &str, help: &str| -> prometheus::Result<Gauge> {
            let g = Gauge::new(name, help)?;
            registry.register(Box::new(g.clone()))?;
            Ok(g)
        };
        let latency = vec![0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];
        let long = vec![0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0];
        let cloud_fallback = CounterVec::new(
            Opts::new(
                "hanzo_edge_cloud_fallback_total",
                "Requests answered by the cloud instead of the device, by reason.",
            ),
            &["reason"],
        )?;
        registry.register(Box::new(cloud_fallback.clone()))?;
        // Every reason's series from the start, so dashboards find them at zero.
        for r in hanzo_edge::cloud::Reason::ALL {
            cloud_fallback.with_label_values(&[r.as_str()]);
        }
        let cloud_errors = counter(
            "hanzo_edge_cloud_errors_total",
            "Requests the cloud was asked and did not answer (the device answered instead).",
        )?;
        let guard_flagged = CounterVec::new(
            Opts::new(
                "hanzo_edge_guard_flagged_total",
                "Turns the safety guard flagged (answered with a refusal), by category and by \
                 what was judged (prompt or reply).",
            ),
            &["category", "stage"],
        )?;
        registry.register(Box::new(guard_flagged.clone()))?;
        let guard_seconds = counter(
            "hanzo_edge_guard_seconds_total",
            "Time the safety guard's model spent judging.",
        )?;
        let guard_tokens = counter(
            "hanzo_edge_guard_tokens_total",
            "Tokens the safety guard's model read.",
        )?;
        let thermal_state = match hanzo_edge::thermal::state() {
            Some(_) => Some(gauge(
                "hanzo_edge_thermal_state",
                "Thermal state of the device: 0 nominal, 1 fair, 2 serious, 3 critical.",
            )?),
            None => None,
        };
        Ok(Self {
            tokens_generated: counter("hanzo_edge_tokens_generated_total", "Tokens generated.")?,
            inference_duration: seconds(
                "hanzo_edge_inference_duration_seconds",
                "Time from a request's start to its last token.",
                long,
            )?,
            ttft: seconds(
                "hanzo_edge_time_to_first_token_seconds",
                "Time from a request's start to its first token (the prompt's pass included).",
                latency.clone(),
            )?,
            tokens_per_second: gauge(
                "hanzo_edge_tokens_per_second",
                "Generation speed of the last request, after its first token.",
            )?,
            memory_used: gauge(
                "hanzo_edge_memory_used_bytes",
                "Resident memory of the process now (measured, not the budget).",
            )?,
            load_duration: seconds(
                "hanzo_edge_model_load_duration_seconds",
                "Time to check the budget and load the model.",
                latency,
            )?,
            thermal_state,
            evictions: counter(
                "hanzo_edge_evictions_total",
                "Evictions of old tokens from the KV cache (the conversation outgrew the context).",
            )?,
            evicted_tokens: counter(
                "hanzo_edge_evicted_tokens_total",
                "Tokens evicted from the KV cache.",
            )?,
            context_tokens: gauge(
                "hanzo_edge_context_tokens",
                "Positions of the context the conversation holds now.",
            )?,
            threads: gauge(
                "hanzo_edge_threads",
                "Threads generation runs on now (halved while the device is too hot).",
            )?,
            cloud_fallback,
            cloud_errors,
            guard_flagged,
            guard_seconds,
            guard_tokens,
            // vLLM's names, as `hanzo-engine serve` has them.
            draft_tokens: counter(
                "hanzo_edge_spec_decode_num_draft_tokens_total",
                "Tokens a prompt lookup drafted (--lookup).",
            )?,
            accepted_tokens: counter(
                "hanzo_edge_spec_decode_num_accepted_tokens_total",
                "Drafted tokens the model kept.",
            )?,
            acceptance: gauge(
                "hanzo_edge_spec_decode_draft_acceptance_rate",
                "Kept drafted tokens over drafted ones, since start.",
            )?,
            registry,
        })
    }

    pub fn loaded(&self, seconds: f64) {
        self.load_duration.observe(seconds);
    }

    /// The thread count generation runs on (lowered or restored by the thermal state).
    pub fn threads(&self, threads: usize) {
        self.threads.set(threads as f64);
    }

    pub fn finished(&self, s: &hanzo_edge::Summary) {
        self.tokens_generated.inc_by(s.completion_tokens as f64);
        self.inference_duration.observe(s.generate_seconds);
        self.ttft.observe(s.time_to_first_token_s);
        if s.completion_tokens > 1 {
            self.tokens_per_second.set(s.tokens_per_second);
        }
        self.evictions.inc_by(s.evictions as f64);
        self.evicted_tokens.inc_by(s.evicted_tokens as f64);
        self.context_tokens.set(s.context_tokens as f64);
        if let Some(reason) = s.fallback_reason {
            self.cloud_fallback.with_label_values(&[reason]).inc();
        }
        if s.cloud_error.is_some() {
            self.cloud_errors.inc();
        }
        if s.drafted_tokens > 0 {
            self.draft_tokens.inc_by(s.drafted_tokens as f64);
            self.accepted_tokens.inc_by(s.accepted_tokens as f64);
            self.acceptance
                .set(self.accepted_tokens.get() / self.draft_tokens.get());
        }
        if let Some(g) = &s.guard {
            self.guard_seconds.inc_by(g.seconds);
            self.guard_tokens.inc_by(g.tokens as f64);
            if let Some((category, stage)) = &g.flagged {
                self.guard_flagged
                    .with_label_values(&[category.as_str(), stage.as_str()])
                    .inc();
            }
        }
    }

    /// The text exposition, with the measured gauges read now.
    pub fn render(&self) -> String {
        if let Some(m) = hanzo_ml::memory::process_memory() {
            self.memory_used.set(m.resident as f64);
        }
        if let (Some(g), Some(t)) = (&self.thermal_state, hanzo_edge::thermal::state()) {
            g.set(t as f64);
        }
        let mut out = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}
