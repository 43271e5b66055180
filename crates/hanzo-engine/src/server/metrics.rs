//! `/metrics`: Prometheus text exposition. Names follow vLLM's (`vllm:x` is `hanzo_engine_x`,
//! with the same `model_name` label and histogram buckets), so dashboards built for vLLM
//! map one to one; HTTP requests are counted by endpoint and status besides.

use prometheus::{
    Encoder, Gauge, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

pub struct Metrics {
    registry: Registry,
    http_requests: IntCounterVec,
    running: IntGaugeVec,
    waiting: IntGaugeVec,
    kv_blocks_total: IntGaugeVec,
    kv_blocks_used: IntGaugeVec,
    kv_usage: GaugeVec,
    prefix_queries: IntCounterVec,
    prefix_hits: IntCounterVec,
    preemptions: IntCounterVec,
    prompt_tokens: IntCounterVec,
    generation_tokens: IntCounterVec,
    ttft: HistogramVec,
    inter_token: HistogramVec,
    e2e: HistogramVec,
    queue_time: HistogramVec,
    success: IntCounterVec,
    spec_drafts: IntCounterVec,
    spec_accepted: IntCounterVec,
    spec_ratio: GaugeVec,
}

const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
const ITL_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
const REQUEST_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];

fn name(n: &str) -> String {
    format!("hanzo_engine_{n}")
}

impl Metrics {
    pub fn new() -> prometheus::Result<Self> {
        let registry = Registry::new();
        let model = &["model_name"];
        let counter = |n: &str, help: &str, labels: &[&str]| -> prometheus::Result<IntCounterVec> {
            let c = IntCounterVec::new(Opts::new(name(n), help), labels)?;
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        };
        let gauge = |n: &str, help: &str| -> prometheus::Result<IntGaugeVec> {
            let g = IntGaugeVec::new(Opts::new(name(n), help), model)?;
            registry.register(Box::new(g.clone()))?;
            Ok(g)
        };
        let histogram = |n: &str, help: &str, buckets: &[f64]| {
            let h = HistogramVec::new(
                HistogramOpts::new(name(n), help).buckets(buckets.to_vec()),
                model,
            )?;
            registry.register(Box::new(h.clone()))?;
            prometheus::Result::Ok(h)
        };
        let kv_usage = GaugeVec::new(
            Opts::new(
                name("kv_cache_usage_perc"),
                "KV cache usage: 1 means every block is in use",
            ),
            model,
        )?;
        registry.register(Box::new(kv_usage.clone()))?;
        let spec_ratio = GaugeVec::new(
            Opts::new(
                name("spec_decode_draft_acceptance_rate"),
                "Speculative decoding: drafted tokens kept over drafted tokens, so far",
            ),
            model,
        )?;
        registry.register(Box::new(spec_ratio.clone()))?;
        let up_since = Gauge::new(
            name("start_time_seconds"),
            "When the server started, in seconds since the Unix epoch",
        )?;
        registry.register(Box::new(up_since.clone()))?;
        up_since.set(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
        );
        Ok(Self {
            http_requests: counter(
                "http_requests_total",
                "HTTP requests by endpoint and status",
                &["endpoint", "status"],
            )?,
            running: gauge("num_requests_running", "Sequences in the running batch")?,
            waiting: gauge("num_requests_waiting", "Sequences waiting to run")?,
            kv_blocks_total: gauge("kv_blocks_total", "Blocks of the paged KV cache")?,
            kv_blocks_used: gauge(
                "kv_blocks_used",
                "KV blocks held by sequences (cached free blocks not counted)",
            )?,
            kv_usage,
            prefix_queries: counter(
                "prefix_cache_queries_total",
                "Prompt tokens looked up in the prefix cache",
                model,
            )?,
            prefix_hits: counter(
                "prefix_cache_hits_total",
                "Prompt tokens found in the prefix cache",
                model,
            )?,
            preemptions: counter(
                "num_preemptions_total",
                "Sequences preempted (freed, to be recomputed) because the KV cache was full",
                model,
            )?,
            prompt_tokens: counter("prompt_tokens_total", "Prompt tokens computed", model)?,
            generation_tokens: counter("generation_tokens_total", "Tokens generated", model)?,
            ttft: histogram(
                "time_to_first_token_seconds",
                "From a request's arrival to its first token",
                TTFT_BUCKETS,
            )?,
            inter_token: histogram(
                "inter_token_latency_seconds",
                "Between two tokens of one sequence",
                ITL_BUCKETS,
            )?,
            e2e: histogram(
                "e2e_request_latency_seconds",
                "From a request's arrival to its sequence's end",
                REQUEST_BUCKETS,
            )?,
            queue_time: histogram(
                "request_queue_time_seconds",
                "Time a request waited before it first ran",
                REQUEST_BUCKETS,
            )?,
            success: counter(
                "request_success_total",
                "Finished sequences by reason (stop, length; abort when the client left)",
                &["model_name", "finished_reason"],
            )?,
            spec_drafts: counter(
                "spec_decode_num_draft_tokens_total",
                "Speculative decoding: tokens drafted by prompt lookup",
                model,
            )?,
            spec_accepted: counter(
                "spec_decode_num_accepted_tokens_total",
                "Speculative decoding: drafted tokens the model kept",
                model,
            )?,
            spec_ratio,
            registry,
        })
    }

    pub fn http(&self, endpoint: &str, status: u16) {
        self.http_requests
            .with_label_values(&[endpoint, &status.to_string()])
            .inc();
    }

    pub fn queues(&self, model: &str, running: usize, waiting: usize) {
        self.running.with_label_values(&[model]).set(running as i64);
        self.waiting.with_label_values(&[model]).set(waiting as i64);
    }

    pub fn kv(&self, model: &str, total: usize, free: usize, queried: usize, hit: usize) {
        let used = total - free;
        self.kv_blocks_total
            .with_label_values(&[model])
            .set(total as i64);
        self.kv_blocks_used
            .with_label_values(&[model])
            .set(used as i64);
        self.kv_usage
            .with_label_values(&[model])
            .set(used as f64 / total.max(1) as f64);
        self.prefix_queries
            .with_label_values(&[model])
            .inc_by(queried as u64);
        self.prefix_hits
            .with_label_values(&[model])
            .inc_by(hit as u64);
    }

    pub fn preempted(&self, model: &str) {
        self.preemptions.with_label_values(&[model]).inc();
    }

    pub fn cancelled(&self, model: &str) {
        self.success.with_label_values(&[model, "abort"]).inc();
    }

    pub fn prompt_tokens(&self, model: &str, n: usize) {
        self.prompt_tokens
            .with_label_values(&[model])
            .inc_by(n as u64);
    }

    pub fn generated(&self, model: &str, n: usize) {
        self.generation_tokens
            .with_label_values(&[model])
            .inc_by(n as u64);
    }

    /// One speculative check: `drafted` tokens proposed, `accepted` of them kept.
    pub fn speculated(&self, model: &str, drafted: usize, accepted: usize) {
        let (d, a) = (
            self.spec_drafts.with_label_values(&[model]),
            self.spec_accepted.with_label_values(&[model]),
        );
        d.inc_by(drafted as u64);
        a.inc_by(accepted as u64);
        self.spec_ratio
            .with_label_values(&[model])
            .set(a.get() as f64 / d.get().max(1) as f64);
    }

    pub fn ttft(&self, model: &str, s: f64) {
        self.ttft.with_label_values(&[model]).observe(s);
    }

    pub fn inter_token(&self, model: &str, s: f64) {
        self.inter_token.with_label_values(&[model]).observe(s);
    }

    pub fn queue_time(&self, model: &str, s: f64) {
        self.queue_time.with_label_values(&[model]).observe(s);
    }

    pub fn finished(&self, model: &str, reason: &str, e2e: f64) {
        self.success.with_label_values(&[model, reason]).inc();
        self.e2e.with_label_values(&[model]).observe(e2e);
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            tracing::error!("cannot encode metrics: {e}");
        }
        String::from_utf8(out).unwrap_or_default()
    }
}
