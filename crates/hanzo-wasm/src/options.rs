//! Generation options from JavaScript (a JSON object in the API's camelCase names).

use hanzo_transformers::{GenerateOptions, SamplingParams};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Options {
    max_tokens: Option<usize>,
    temperature: Option<f32>,
    top_k: Option<usize>,
    top_p: Option<f32>,
    min_p: Option<f32>,
    seed: Option<u64>,
    stop: Option<Vec<String>>,
    repeat_penalty: Option<f32>,
    presence_penalty: Option<f32>,
    frequency_penalty: Option<f32>,
}

/// The options of `json`; unset ones keep the library's defaults (temperature 0.8, top-k 40,
/// top-p 0.95, min-p 0.05, 256 tokens). An unknown or mistyped field is an error naming it.
pub fn parse(json: &str) -> Result<GenerateOptions, String> {
    let o: Options = serde_json::from_str(json).map_err(|e| format!("options: {e}"))?;
    let d = SamplingParams::default();
    let sampling = SamplingParams {
        temperature: o.temperature.unwrap_or(d.temperature),
        top_k: o.top_k.unwrap_or(d.top_k),
        top_p: o.top_p.unwrap_or(d.top_p),
        min_p: o.min_p.unwrap_or(d.min_p),
        seed: o.seed.unwrap_or(d.seed),
        repeat_penalty: o.repeat_penalty.unwrap_or(d.repeat_penalty),
        presence_penalty: o.presence_penalty.unwrap_or(d.presence_penalty),
        frequency_penalty: o.frequency_penalty.unwrap_or(d.frequency_penalty),
        ..d
    };
    sampling.validate()?;
    Ok(GenerateOptions {
        max_tokens: o.max_tokens.unwrap_or(256),
        sampling,
        stop: o.stop.unwrap_or_default(),
        ..GenerateOptions::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_map_and_unknown_ones_are_refused() {
        let o = parse(r#"{"maxTokens": 5, "temperature": 0, "stop": ["\n"], "seed": 7}"#).unwrap();
        assert_eq!(o.max_tokens, 5);
        assert_eq!(o.sampling.temperature, 0.0);
        assert_eq!(o.sampling.seed, 7);
        assert_eq!(o.stop, vec!["\n".to_string()]);
        let e = parse(r#"{"max_tokens": 5}"#).unwrap_err();
        assert!(e.contains("max_tokens"), "{e}");
        assert!(parse(r#"{"temperature": -1}"#).is_err());
        assert!(parse("[").is_err());
    }
}
