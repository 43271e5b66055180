//! `describe_gguf` (metadata only) says what `load_gguf` builds, for every decoder fixture.

mod common;

use hanzo_ml::quantized::gguf::GgufFile;
use hanzo_transformers::{describe_gguf, load_gguf};

#[test]
fn the_description_matches_the_loaded_model() {
    for fixture in ["gemma3", "qwen2", "smollm2"] {
        let file = GgufFile::open(common::fixture(fixture)).unwrap();
        let (info, layout) = describe_gguf(&file).unwrap();
        let model = load_gguf(&file).unwrap();
        let loaded = model.info();
        assert_eq!(
            (
                info.architecture.as_str(),
                info.vocab_size,
                info.context_length
            ),
            (
                loaded.architecture.as_str(),
                loaded.vocab_size,
                loaded.context_length
            ),
            "{fixture}"
        );
        assert_eq!(
            (
                info.hidden_size,
                info.layers,
                info.kv_row,
                info.q_row,
                info.ffn_size
            ),
            (
                loaded.hidden_size,
                loaded.layers,
                loaded.kv_row,
                loaded.q_row,
                loaded.ffn_size
            ),
            "{fixture}"
        );
        assert_eq!(layout, model.kv_layout(), "{fixture}");
    }
    // Gemma 3's local layers, every sixth one global.
    let file = GgufFile::open(common::fixture("gemma3")).unwrap();
    let (_, layout) = describe_gguf(&file).unwrap();
    assert_eq!(layout.windows[0], Some(512));
    assert_eq!(layout.windows[5], None);
}
