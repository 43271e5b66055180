//! GGUF-embedded tokenizers against llama.cpp's `llama-tokenize` on the real fixtures.

mod common;

use hanzo_ml::quantized::gguf::GgufFile;
use hanzo_transformers::tokenizer::StreamDecoder;
use hanzo_transformers::Tokenizer;

fn gemma() -> Tokenizer {
    Tokenizer::from_gguf(&GgufFile::open(common::fixture("gemma3")).unwrap()).unwrap()
}

#[test]
fn gemma3_ids_equal_llama_cpp() {
    let tok = gemma();
    let r = common::reference("gemma3-270m-tokenize-llamacpp.json");
    for item in r["items"].as_array().unwrap() {
        let text = item["text"].as_str().unwrap();
        assert_eq!(
            tok.encode(text, true, true),
            common::ids(&item["ids"]),
            "{text:?}"
        );
        assert_eq!(
            tok.encode(text, false, true),
            common::ids(&item["ids_no_bos"]),
            "{text:?} without BOS"
        );
        if let Some(np) = item.get("no_parse_special") {
            assert_eq!(
                tok.encode(text, true, false),
                common::ids(&np["ids"]),
                "{text:?} raw"
            );
        }
        // Pieces decode to the recorded strings.
        let pieces: Vec<String> = item["pieces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap().to_string())
            .collect();
        let ours: Vec<String> = common::ids(&item["ids"])
            .iter()
            .map(|&i| tok.piece(i))
            .collect();
        assert_eq!(ours, pieces, "{text:?} pieces");
    }
}

/// Decoding inverts encoding on mixed text: whitespace runs, newlines, tabs, HTML-like
/// user-defined tokens, emoji and CJK (byte-fallback territory).
#[test]
fn gemma3_round_trips_text() {
    let tok = gemma();
    let texts = [
        "  leading spaces and\n\n\nnewlines\ttabs\t\tend  ",
        "<div>html <b>bold</b></div> [multimodal]",
        "emoji 🦀🚀 and CJK 你好，世界 and accents café naïve",
        "x = [1, 2, 3]; // code",
        "",
    ];
    for t in texts {
        let ids = tok.encode(t, false, false);
        assert_eq!(tok.decode(&ids, false), t, "{t:?} -> {ids:?}");
    }
    // Whitespace runs are single user-defined tokens, as in llama.cpp.
    assert_eq!(tok.encode("\n\n\n", false, false), vec![109]);
    assert_eq!(tok.encode("    ", false, false), vec![140]);
}

/// Streaming never emits half a character: feed a text's tokens one at a time.
#[test]
fn stream_decoder_emits_whole_characters() {
    let tok = gemma();
    let text = "日本語のテキスト 🦀 mixed with ASCII and ünïcödé";
    let ids = tok.encode(text, false, false);
    let mut dec = StreamDecoder::new();
    let mut out = String::new();
    for &id in &ids {
        let piece = dec.push(&tok, id);
        assert!(!piece.contains('\u{FFFD}'), "{piece:?}");
        out.push_str(&piece);
    }
    out.push_str(&dec.finish());
    assert_eq!(out, text);
    // A lone lead byte is held back, then completed.
    let b = |x: u8| tok.vocab().id(&format!("<0x{x:02X}>")).unwrap();
    let mut dec = StreamDecoder::new();
    assert_eq!(dec.push(&tok, b(0xE2)), "");
    assert_eq!(dec.push(&tok, b(0x82)), "");
    assert_eq!(dec.push(&tok, b(0xAC)), "€");
}

#[test]
fn smollm2_and_qwen2_bpe_ids_equal_llama_cpp() {
    let r = common::reference("bpe-tokenize-llamacpp.json");
    for model in ["smollm2", "qwen2"] {
        let path = common::fixture(model);
        let tok = Tokenizer::from_gguf(&GgufFile::open(&path).unwrap()).unwrap();
        for item in r["items"][model].as_array().unwrap() {
            let text = item["text"].as_str().unwrap();
            let ids = tok.encode(text, true, true);
            assert_eq!(ids, common::ids(&item["ids"]), "{model}: {text:?}");
            assert_eq!(tok.decode(&ids, true), text, "{model}: decode");
        }
    }
}

/// Qwen2.5's tokenizer as a tokenizer.json (a `Split` regex pre-tokenizer, written by
/// scripts/gguf_to_hf.py): our reader, the tokenizers crate and llama.cpp agree.
#[test]
fn qwen2_tokenizer_json_gives_llama_cpp_ids() {
    let dir = common::convert_fixture(
        "gguf_to_hf.py",
        &["--tokenizer-only"],
        "qwen2",
        "qwen2-tokenizer",
    );
    let ours = Tokenizer::from_hf_dir(&dir).unwrap();
    let hf = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
    let r = common::reference("bpe-tokenize-llamacpp.json");
    let cases = r["items"]["qwen2"].as_array().unwrap();
    assert!(!cases.is_empty());
    for case in cases {
        let text = case["text"].as_str().unwrap();
        let want = common::ids(&case["ids"]);
        assert_eq!(ours.encode(text, false, true), want, "{text:?}");
        assert_eq!(
            hf.encode(text, false).unwrap().get_ids(),
            want,
            "tokenizers on {text:?}"
        );
    }
    let text = "I'm sure they'll say \"it's fine\" — won't they? 12345 🦀\n\n\tdone";
    let want = hf.encode(text, false).unwrap().get_ids().to_vec();
    assert_eq!(ours.encode(text, false, true), want);
}
