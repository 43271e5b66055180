//! Any byte string fed to the GGUF reader must give `Ok` or an error: never a panic, an
//! out-of-bounds read or a runaway allocation. Tensors of a parsed file are also handed to
//! `QTensor` and dequantized, so the directory's checks are exercised end to end; and the
//! file is loaded once more with its weights interleaved in place (the WebAssembly load
//! path), whose tensors are dequantized through that layout.
#![no_main]

use hanzo_ml::cpu::Blob;
use hanzo_ml::quantized::gguf::{GgufContent, GgufFile};
use hanzo_ml::quantized::QTensor;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(content) = GgufContent::parse(data) else {
        return;
    };
    for (key, _) in &content.metadata {
        let _ = content.get(key);
    }
    for info in &content.tensors {
        // The parser vouched for this span lying inside the buffer.
        let start = info.offset as usize;
        let bytes = &data[start..start + info.size];
        if let Ok(t) = QTensor::from_bytes(info.dtype, info.shape.clone(), bytes) {
            if info.shape.elem_count() <= 1 << 16 {
                let _ = t.dequantize_f32();
            }
        }
    }
    let Ok(file) = GgufFile::from_blob_interleaved(Blob::copy_of(data)) else {
        return;
    };
    for info in &content.tensors {
        if info.shape.elem_count() <= 1 << 16 {
            if let Ok(t) = file.tensor(&info.name) {
                let _ = t.dequantize_f32();
                let _ = t.dequantize_rows(&[0]);
            }
        }
    }
});
