//! The WebAssembly build against this native binary: `crates/hanzo-wasm/tests/*.test.mjs`
//! under Node's test runner (token ids, greedy text, embeddings, errors, the Edge SDK against
//! the native `hanzo-edge`) and the chat page and the Edge SDK in headless Chromium.
//! `scripts/test_wasm.sh` builds the packages and installs what these need.

mod common;

use common::fixture;
use std::path::Path;
use std::process::Command;

#[test]
fn the_webassembly_build_computes_what_the_native_one_does() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../hanzo-wasm");
    for build in ["relaxed", "simd", "scalar"] {
        assert!(
            dir.join("pkg")
                .join(build)
                .join("hanzo_wasm_bg.wasm")
                .exists(),
            "no WebAssembly package in crates/hanzo-wasm/pkg/{build}: run scripts/test_wasm.sh \
             (scripts/test.sh does)"
        );
    }
    assert!(
        dir.join("node_modules/playwright-core").exists(),
        "playwright-core is not installed: run scripts/test_wasm.sh (scripts/test.sh does)"
    );
    // The native `hanzo-edge` the Edge SDK's tests compare with: the workspace's build of it,
    // beside this binary.
    let edge = Path::new(env!("CARGO_BIN_EXE_hanzo-engine")).with_file_name("hanzo-edge");
    assert!(
        edge.exists(),
        "no {}: build the workspace's binaries (cargo test --workspace does)",
        edge.display()
    );
    // Every file with the SIMD128 build; the scalar build's greedy and embedding checks again.
    for (build, files) in [
        ("simd", &["tests/"][..]),
        (
            "scalar",
            &["tests/model.test.mjs", "tests/embed.test.mjs"][..],
        ),
    ] {
        let status = Command::new("node")
            .arg("--test")
            .args(files)
            .current_dir(&dir)
            .env("HANZO_WASM_BUILD", build)
            .env("HANZO_ENGINE_BIN", env!("CARGO_BIN_EXE_hanzo-engine"))
            .env("HANZO_EDGE_BIN", &edge)
            .env("HANZO_SMOLLM2", fixture("smollm2"))
            .env("HANZO_GEMMA3", fixture("gemma3"))
            .env("HANZO_MINILM", fixture("minilm"))
            .status()
            .expect("run node (Node.js 20 or later)");
        assert!(
            status.success(),
            "the {build} WebAssembly tests failed (output above)"
        );
    }
}
