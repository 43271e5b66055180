//! The cloud fallback in the SDK, with a cloud that cannot be reached (the answers of a real
//! one are checked against `hanzo-engine serve` in `tests/server/test_cloud.py`): a hot device
//! and a request for the cloud's model are still answered, by the device, with the failure
//! reported and no wait past the timeout.
#![cfg(feature = "cloud")]

#[path = "../../../scripts/fixture_path.rs"]
mod fixture_path;

use hanzo_edge::cloud::Cloud;
use hanzo_edge::{Edge, EdgeConfig, Source};
use hanzo_transformers::{GenerateOptions, Message, SamplingParams};
use std::time::{Duration, Instant};

fn greedy() -> GenerateOptions {
    GenerateOptions {
        max_tokens: 12,
        sampling: SamplingParams {
            temperature: 0.0,
            ..SamplingParams::default()
        },
        ..GenerateOptions::default()
    }
}

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[test]
fn an_unreachable_cloud_leaves_the_answer_to_the_device() {
    let zones = std::env::temp_dir().join(format!("hanzo-cloud-zones-{}", std::process::id()));
    std::fs::create_dir_all(zones.join("thermal_zone0")).unwrap();
    std::fs::write(zones.join("thermal_zone0/temp"), "99000\n").unwrap(); // critical
    let mut cfg = EdgeConfig::new(fixture_path::fixture("smollm2"), 512, 1 << 30);
    cfg.thermal_zones = zones.clone();
    cfg.thermal_limit = None;
    let mut cloud = Cloud::new(format!("http://127.0.0.1:{}", closed_port()), "big");
    cloud.thermal_level = Some(1);
    cloud.timeout = Duration::from_secs(2);
    cfg.cloud = Some(cloud);
    let mut edge = Edge::new(cfg).unwrap();
    let messages = [Message::new("user", "Name three colours.")];

    let t0 = Instant::now();
    let (text, summary) = edge
        .chat(&messages, &greedy())
        .unwrap()
        .collect_text()
        .unwrap();
    assert!(t0.elapsed() < Duration::from_secs(20));
    assert_eq!(summary.source, Source::Local);
    assert_eq!(summary.fallback_reason, Some("thermal"));
    let error = summary.cloud_error.expect("the failure reported");
    assert!(error.contains("127.0.0.1"), "{error}");
    assert!(!text.is_empty() && summary.completion_tokens > 0);

    // The same text as a device with no cloud at all.
    let mut plain = Edge::new(EdgeConfig::new(
        fixture_path::fixture("smollm2"),
        512,
        1 << 30,
    ))
    .unwrap();
    let (want, _) = plain
        .chat(&messages, &greedy())
        .unwrap()
        .collect_text()
        .unwrap();
    assert_eq!(text, want);

    // Asked for the cloud's model by name.
    edge.reset();
    let (text, summary) = edge
        .chat_in_cloud(&messages, &greedy())
        .unwrap()
        .collect_text()
        .unwrap();
    assert_eq!(
        (summary.source, summary.fallback_reason),
        (Source::Local, Some("model"))
    );
    assert!(summary.cloud_error.is_some());
    assert_eq!(text, want);
    std::fs::remove_dir_all(&zones).unwrap();
}
