//! GGUF reading and writing: round trips through our writer, the `gguf` Python package reading
//! what we write, the real Gemma 3 file against `gguf.GGUFReader`'s view of it, and malformed
//! files (truncated, corrupted, forged) that must give errors, never panics.

mod common;

use hanzo_ml::quantized::gguf::{Array, GgufContent, GgufFile, Value};
use hanzo_ml::quantized::{GgmlDType, QTensor};

fn sample_metadata() -> Vec<(String, Value)> {
    let kv = |k: &str, v: Value| (k.to_string(), v);
    vec![
        kv("general.architecture", Value::String("test".into())),
        kv("general.name", Value::String("ünïcödé ✓".into())),
        kv("t.u8", Value::U8(200)),
        kv("t.i8", Value::I8(-100)),
        kv("t.u16", Value::U16(60000)),
        kv("t.i16", Value::I16(-30000)),
        kv("t.u32", Value::U32(4_000_000_000)),
        kv("t.i32", Value::I32(-2_000_000_000)),
        kv("t.u64", Value::U64(u64::MAX - 1)),
        kv("t.i64", Value::I64(i64::MIN + 1)),
        kv("t.f32", Value::F32(1.5)),
        kv("t.f64", Value::F64(-2.25e300)),
        kv("t.bool", Value::Bool(true)),
        kv("t.empty_string", Value::String(String::new())),
        kv(
            "t.tokens",
            Value::Array(Array::String(vec![
                "<s>".into(),
                "▁hello".into(),
                "".into(),
            ])),
        ),
        kv("t.scores", Value::Array(Array::F32(vec![0.0, -1.5, 3.25]))),
        kv("t.types", Value::Array(Array::I32(vec![1, 2, 3]))),
        kv("t.flags", Value::Array(Array::Bool(vec![true, false]))),
        kv("t.u8s", Value::Array(Array::U8(vec![1, 2, 255]))),
        kv("t.i64s", Value::Array(Array::I64(vec![-1, 1 << 40]))),
        kv("t.f64s", Value::Array(Array::F64(vec![0.125]))),
        kv("t.empty", Value::Array(Array::U32(vec![]))),
        kv(
            "t.nested",
            Value::Array(Array::Array(vec![
                Array::I16(vec![1, -2]),
                Array::String(vec!["x".into()]),
            ])),
        ),
    ]
}

fn sample_tensors() -> Vec<(String, QTensor)> {
    GgmlDType::ALL
        .iter()
        .enumerate()
        .map(|(i, &dt)| {
            let cols = dt.block_size().max(32) * 2;
            (
                format!("blk.{i}.{}", dt.name().to_lowercase()),
                common::weight_tensor(dt, 3, cols, i as u64 + 1),
            )
        })
        .collect()
}

fn write(meta: &[(String, Value)], tensors: &[(String, QTensor)]) -> Vec<u8> {
    common::gguf_bytes(meta, tensors)
}

#[test]
fn round_trip_through_our_writer_and_reader() {
    let meta = sample_metadata();
    let tensors = sample_tensors();
    let bytes = write(&meta, &tensors);
    let c = GgufContent::parse(&bytes).unwrap();
    assert_eq!(c.version, 3);
    assert_eq!(c.metadata, meta);
    assert_eq!(c.tensors.len(), tensors.len());
    for ((name, t), info) in tensors.iter().zip(&c.tensors) {
        assert_eq!(&info.name, name);
        assert_eq!(info.dtype, t.dtype());
        assert_eq!(info.shape, *t.shape());
        assert_eq!(info.offset % 32, 0);
        let start = info.offset as usize;
        assert_eq!(&bytes[start..start + info.size], t.data(), "{name}");
    }
    // Through a file and the mmap path, too.
    let path = std::env::temp_dir().join(format!("hanzo-gguf-rt-{}.gguf", std::process::id()));
    std::fs::write(&path, &bytes).unwrap();
    let f = GgufFile::open(&path).unwrap();
    for (name, t) in &tensors {
        let got = f.tensor(name).unwrap();
        assert!(got.is_mapped(), "{name} should be zero-copy");
        assert_eq!(got.dequantize_f32().unwrap(), t.dequantize_f32().unwrap());
    }
    drop(f);
    std::fs::remove_file(path).ok();
}

#[test]
fn custom_alignment_is_honoured() {
    let mut meta = sample_metadata();
    meta.push(("general.alignment".into(), Value::U32(64)));
    let bytes = write(&meta, &sample_tensors());
    let c = GgufContent::parse(&bytes).unwrap();
    assert_eq!(c.alignment, 64);
    assert!(c.tensors.iter().all(|t| t.offset % 64 == 0));
}

#[test]
fn the_gguf_python_package_reads_what_we_write() {
    let meta = sample_metadata();
    let tensors = sample_tensors();
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join("ours.gguf");
    std::fs::write(&path, write(&meta, &tensors)).unwrap();
    let json_path = dir.join("ours.json");
    let script = common::crate_dir().join("tests/gguf_ref/gen.py");
    common::python(&[
        script.to_str().unwrap(),
        "read",
        path.to_str().unwrap(),
        json_path.to_str().unwrap(),
    ]);
    let py: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    let m = &py["metadata"];
    assert_eq!(m["general.name"]["value"], "ünïcödé ✓");
    assert_eq!(m["t.u64"]["value"], u64::MAX - 1);
    assert_eq!(m["t.i64"]["value"], i64::MIN + 1);
    assert_eq!(m["t.i8"]["types"][0], "INT8");
    assert_eq!(m["t.f64"]["value"], -2.25e300);
    assert_eq!(m["t.bool"]["value"], true);
    assert_eq!(
        m["t.tokens"]["value"],
        serde_json::json!(["<s>", "▁hello", ""])
    );
    assert_eq!(m["t.scores"]["value"], serde_json::json!([0.0, -1.5, 3.25]));
    assert_eq!(m["t.empty"]["len"], 0);
    assert_eq!(m.as_object().unwrap().len(), meta.len());
    // And dequantizes every tensor to the same values we do.
    let dump = dir.join("ours-dump.json");
    common::python(&[
        script.to_str().unwrap(),
        "dump",
        path.to_str().unwrap(),
        dump.to_str().unwrap(),
    ]);
    let py: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&dump).unwrap()).unwrap();
    for (t, (name, q)) in py["tensors"].as_array().unwrap().iter().zip(&tensors) {
        assert_eq!(t["name"], name.as_str());
        assert_eq!(t["type"], q.dtype().name());
        if t["digest"].is_null() {
            continue; // gguf cannot dequantize Q8_1/Q8_K (activation-only types)
        }
        let ours: f64 = q.dequantize_f32().unwrap().iter().map(|&v| v as f64).sum();
        let theirs = t["digest"]["sum"].as_f64().unwrap();
        assert!(
            (ours - theirs).abs() <= 1e-9 * theirs.abs().max(1.0),
            "{name}: {ours} vs {theirs}"
        );
    }
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = write(&sample_metadata(), &sample_tensors()[..3]);
    // Only the padding after the last tensor may be cut.
    let c = GgufContent::parse(&bytes).unwrap();
    let end = c
        .tensors
        .iter()
        .map(|t| t.offset as usize + t.size)
        .max()
        .unwrap();
    assert!(GgufContent::parse(&bytes[..end]).is_ok());
    for len in 0..end {
        assert!(
            GgufContent::parse(&bytes[..len]).is_err(),
            "prefix of {len} bytes parsed"
        );
    }
}

#[test]
fn random_corruption_never_panics() {
    let bytes = write(&sample_metadata(), &sample_tensors()[..4]);
    let mut s = 0x1234_5678_9abc_def1u64;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let (mut ok, mut err) = (0, 0);
    for _ in 0..3000 {
        let mut b = bytes.clone();
        for _ in 0..1 + next() % 4 {
            let i = (next() as usize) % b.len();
            b[i] = next() as u8;
        }
        match std::panic::catch_unwind(|| GgufContent::parse(&b)) {
            Ok(Ok(_)) => ok += 1,
            Ok(Err(_)) => err += 1,
            Err(_) => panic!("parser panicked on a corrupted file"),
        }
    }
    assert!(err > 0 && ok > 0, "ok {ok}, err {err}");
}

/// Inputs that once crashed the fuzz target (`fuzz/`, `scripts/fuzz.sh`) go through the same
/// steps the target takes: parse, then wrap and dequantize every tensor.
#[test]
fn fuzz_crashers_stay_fixed() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/gguf_crashers");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        seen += 1;
        let result = std::panic::catch_unwind(|| {
            let Ok(content) = GgufContent::parse(&bytes) else {
                return;
            };
            for info in &content.tensors {
                let data = &bytes[info.offset as usize..][..info.size];
                if let Ok(t) = QTensor::from_bytes(info.dtype, info.shape.clone(), data) {
                    let _ = t.dequantize_f32();
                }
            }
        });
        assert!(result.is_ok(), "a recorded crasher panics again");
    }
    assert!(seen > 0);
}

/// A minimal header followed by hand-written fields.
fn header(n_tensors: u64, n_kv: u64) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(n_tensors.to_le_bytes());
    b.extend(n_kv.to_le_bytes());
    b
}

fn string(b: &mut Vec<u8>, s: &str) {
    b.extend((s.len() as u64).to_le_bytes());
    b.extend(s.as_bytes());
}

fn tensor_entry(b: &mut Vec<u8>, name: &str, ne: &[u64], ty: u32, offset: u64) {
    string(b, name);
    b.extend((ne.len() as u32).to_le_bytes());
    for &d in ne {
        b.extend(d.to_le_bytes());
    }
    b.extend(ty.to_le_bytes());
    b.extend(offset.to_le_bytes());
}

fn expect_err(b: &[u8], needle: &str) {
    match GgufContent::parse(b) {
        Ok(_) => panic!("parsed; expected an error mentioning {needle:?}"),
        Err(e) => assert!(
            e.to_string().contains(needle),
            "error {e:?} lacks {needle:?}"
        ),
    }
}

#[test]
fn forged_files_get_precise_errors() {
    expect_err(b"GGML\x03\0\0\0", "not a GGUF file");
    let mut v1 = b"GGUF".to_vec();
    v1.extend(1u32.to_le_bytes());
    expect_err(&v1, "version 1");
    let mut be = b"GGUF".to_vec();
    be.extend(3u32.to_be_bytes());
    expect_err(&be, "big-endian");
    expect_err(&header(u64::MAX, 0), "tensor count");
    expect_err(&header(0, 1 << 40), "metadata count");

    // A string length far past the end of the file.
    let mut b = header(0, 1);
    b.extend((1u64 << 62).to_le_bytes());
    b.extend([0u8; 16]);
    expect_err(&b, "metadata key");

    // An array claiming 2^61 u32 elements.
    let mut b = header(0, 1);
    string(&mut b, "k");
    b.extend(9u32.to_le_bytes());
    b.extend(4u32.to_le_bytes());
    b.extend((1u64 << 61).to_le_bytes());
    expect_err(&b, "array length");

    // Arrays nested 100 deep.
    let mut b = header(0, 1);
    string(&mut b, "deep");
    b.extend(9u32.to_le_bytes());
    for _ in 0..100 {
        b.extend(9u32.to_le_bytes());
        b.extend(1u64.to_le_bytes());
    }
    b.extend([0u8; 64]);
    expect_err(&b, "nested");

    // Unknown value type, bad bool, duplicate key, bad alignment.
    let mut b = header(0, 1);
    string(&mut b, "k");
    b.extend(13u32.to_le_bytes());
    expect_err(&b, "unknown value type 13");
    let mut b = header(0, 1);
    string(&mut b, "k");
    b.extend(7u32.to_le_bytes());
    b.push(2);
    expect_err(&b, "neither 0 nor 1");
    let mut b = header(0, 2);
    for _ in 0..2 {
        string(&mut b, "k");
        b.extend(4u32.to_le_bytes());
        b.extend(1u32.to_le_bytes());
    }
    expect_err(&b, "duplicate metadata key");
    let mut b = header(0, 1);
    string(&mut b, "general.alignment");
    b.extend(4u32.to_le_bytes());
    b.extend(3u32.to_le_bytes());
    expect_err(&b, "power-of-two");
    let mut b = header(0, 1);
    string(&mut b, "general.alignment");
    b.extend(4u32.to_le_bytes());
    b.extend(0u32.to_le_bytes());
    expect_err(&b, "power-of-two");

    // Tensor directory problems (padded with zeros so counts are plausible).
    let pad = |mut b: Vec<u8>| {
        b.extend([0u8; 256]);
        b
    };
    let mut b = header(1, 0);
    tensor_entry(&mut b, "t", &[32, 2, 1, 1, 1], 0, 0);
    expect_err(&pad(b), "5 dims");
    let mut b = header(1, 0);
    tensor_entry(&mut b, "t", &[1 << 40, 1 << 40], 0, 0);
    expect_err(&pad(b), "overflows");
    // A zero dim makes the element count 0, but the other dims' product still overflows
    // (found by `cargo fuzz`; the shape used to reach QTensor and overflow there).
    let mut b = header(1, 0);
    tensor_entry(&mut b, "t", &[0, 1 << 40, 1 << 40], 0, 0);
    expect_err(&pad(b), "overflows");
    let mut b = header(1, 0);
    tensor_entry(&mut b, "t", &[u64::MAX], 0, 0);
    expect_err(&pad(b), "out of range");
    let mut b = header(1, 0);
    tensor_entry(&mut b, "t", &[33], 8, 0);
    expect_err(&pad(b), "block size");
    let mut b = header(1, 0);
    tensor_entry(&mut b, "t", &[32], 4, 0);
    expect_err(&pad(b), "unknown tensor type id 4");
    let mut b = header(1, 0);
    tensor_entry(&mut b, "t", &[32], 16, 0);
    expect_err(&pad(b), "IQ2_XXS");
    let mut b = header(1, 0);
    tensor_entry(&mut b, "t", &[4], 0, 8);
    expect_err(&pad(b), "alignment");
    let mut b = header(1, 0);
    tensor_entry(&mut b, "t", &[1024], 0, 0);
    expect_err(&pad(b), "beyond the end");
    let mut b = header(1, 0);
    tensor_entry(&mut b, "t", &[4], 0, u64::MAX - 31);
    expect_err(&pad(b), "overflows");
    let mut b = header(2, 0);
    tensor_entry(&mut b, "t", &[4], 0, 0);
    tensor_entry(&mut b, "t", &[4], 0, 32);
    expect_err(&pad(b), "duplicate tensor name");
    let mut b = header(2, 0);
    tensor_entry(&mut b, "a", &[16], 0, 0);
    tensor_entry(&mut b, "b", &[16], 0, 32);
    expect_err(&pad(b), "overlap");
}

/// The real Gemma 3 270M Q4_K_M file against `gguf.GGUFReader` (an independent reader): every
/// metadata key and type, scalar values, array lengths and first elements, every tensor's
/// directory entry, and every tensor dequantized (sum, sum of squares and first values).
#[test]
fn gemma3_fixture_matches_the_gguf_package() {
    let path = common::fixture("gemma3");
    let dump = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("gemma3-dump.json");
    if !dump.exists() {
        let script = common::crate_dir().join("tests/gguf_ref/gen.py");
        common::python(&[
            script.to_str().unwrap(),
            "dump",
            path.to_str().unwrap(),
            dump.to_str().unwrap(),
        ]);
    }
    let py: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&dump).unwrap()).unwrap();
    let f = GgufFile::open(&path).unwrap();
    let c = f.content();
    assert_eq!(c.data_offset, py["data_offset"].as_u64().unwrap());
    let pm = py["metadata"].as_object().unwrap();
    assert_eq!(c.metadata.len(), pm.len());
    for (key, v) in &c.metadata {
        let p = &pm[key];
        let ty = p["types"][0].as_str().unwrap();
        match v {
            Value::Array(a) => {
                assert_eq!(ty, "ARRAY", "{key}");
                assert_eq!(a.len() as u64, p["len"].as_u64().unwrap(), "{key}");
                let head: Vec<serde_json::Value> = match a {
                    Array::String(s) => s.iter().take(4).map(|x| serde_json::json!(x)).collect(),
                    Array::F32(x) => x
                        .iter()
                        .take(4)
                        .map(|&x| serde_json::json!(x as f64))
                        .collect(),
                    Array::I32(x) => x.iter().take(4).map(|&x| serde_json::json!(x)).collect(),
                    Array::U32(x) => x.iter().take(4).map(|&x| serde_json::json!(x)).collect(),
                    other => panic!("{key}: unexpected array type {:?}", other.elem_type()),
                };
                assert_eq!(serde_json::Value::Array(head), p["head"], "{key}");
            }
            Value::String(s) => assert_eq!(p["value"], s.as_str(), "{key}"),
            Value::Bool(b) => assert_eq!(p["value"], *b, "{key}"),
            Value::F32(x) => assert_eq!(p["value"].as_f64().unwrap(), *x as f64, "{key}"),
            other => assert_eq!(
                p["value"].as_i64().unwrap(),
                other.to_i64().unwrap(),
                "{key}"
            ),
        }
    }
    assert_eq!(
        f.get("general.architecture").and_then(|v| v.as_str()),
        Some("gemma3")
    );
    let pt = py["tensors"].as_array().unwrap();
    assert_eq!(f.tensor_infos().len(), pt.len());
    let mut types_seen = std::collections::BTreeSet::new();
    for (info, p) in f.tensor_infos().iter().zip(pt) {
        assert_eq!(p["name"], info.name.as_str());
        assert_eq!(p["type"], info.dtype.name());
        let ne: Vec<usize> = info.shape.dims().iter().rev().copied().collect();
        assert_eq!(serde_json::json!(ne), p["ne"], "{}", info.name);
        assert_eq!(info.offset, p["offset"].as_u64().unwrap(), "{}", info.name);
        assert_eq!(
            info.size as u64,
            p["n_bytes"].as_u64().unwrap(),
            "{}",
            info.name
        );
        types_seen.insert(info.dtype.name());
        let t = f.tensor(&info.name).unwrap();
        let vals = t.dequantize_f32().unwrap();
        let d = &p["digest"];
        let (sum, sumsq) = vals.iter().fold((0f64, 0f64), |(s, q), &v| {
            (s + v as f64, q + v as f64 * v as f64)
        });
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
        assert!(
            close(sum, d["sum"].as_f64().unwrap()),
            "{}: sum {sum}",
            info.name
        );
        assert!(
            close(sumsq, d["sumsq"].as_f64().unwrap()),
            "{}: sumsq {sumsq}",
            info.name
        );
        for (i, h) in d["head"].as_array().unwrap().iter().enumerate() {
            // f32 values printed by Python as f64; compare at f32 precision.
            assert_eq!(vals[i], h.as_f64().unwrap() as f32, "{}[{i}]", info.name);
        }
    }
    let want: std::collections::BTreeSet<&str> = ["F32", "Q4_K", "Q5_0", "Q6_K", "Q8_0"].into();
    assert_eq!(types_seen, want);
}

/// Whether this machine gives anonymous memory transparent huge pages on request.
fn huge_pages_on() -> bool {
    cfg!(target_os = "linux")
        && std::env::var("HANZO_HUGE_PAGES").map_or(true, |v| v != "0")
        && std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .is_ok_and(|m| !m.contains("[never]"))
}

/// The `/proc/self/maps` line of the mapping that holds `addr`.
fn mapping_of(addr: usize) -> String {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .find(|l| {
            let range = l.split(' ').next().unwrap();
            let (a, b) = range.split_once('-').unwrap();
            let (a, b) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16));
            (a.unwrap()..b.unwrap()).contains(&addr)
        })
        .unwrap_or_else(|| panic!("no mapping holds {addr:#x}"))
        .to_string()
}

/// Moving the map onto huge pages while a tensor is borrowed and read on another thread: every
/// read sees the file's bytes, the borrowed slice stays valid, and the moved pieces are
/// anonymous memory afterwards (not the file).
#[test]
fn moving_the_map_onto_huge_pages_keeps_every_byte_in_place() {
    let (rows, cols) = (1536, 2048); // 12 MiB of f32: several whole 2 MiB pieces
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    let bytes: Vec<u8> = (0..rows * cols * 4)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s as u8
        })
        .collect();
    let w = QTensor::from_bytes(GgmlDType::F32, (rows, cols), &bytes).unwrap();
    let file = write(&[], &[("w".to_string(), w)]);
    let path = std::env::temp_dir().join(format!("hanzo-gguf-huge-{}.gguf", std::process::id()));
    // Written 4 KiB at a time, so the page cache holds it in small folios (a single large
    // write may get 2 MiB folios, which the kernel maps whole: nothing would be moved).
    let mut out = std::fs::File::create(&path).unwrap();
    for chunk in file.chunks(4096) {
        std::io::Write::write_all(&mut out, chunk).unwrap();
    }
    drop(out);

    let f = GgufFile::open(&path).unwrap();
    let t = f.tensor("w").unwrap();
    let borrowed = t.data();
    assert_eq!(borrowed, &bytes[..]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (t, stop, want) = (t.clone(), stop.clone(), bytes.clone());
        std::thread::spawn(move || {
            let mut passes = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || passes == 0 {
                assert!(
                    t.data() == &want[..],
                    "a read during the move saw other bytes"
                );
                passes += 1;
            }
            passes
        })
    };
    let moved = f.huge_pages().expect("first request").run().unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(reader.join().unwrap() >= 1);
    assert!(f.huge_pages().is_none(), "the move happens once");

    assert_eq!(borrowed, &bytes[..]);
    assert_eq!(f.tensor("w").unwrap().data(), &bytes[..]);
    if huge_pages_on() {
        assert!(moved >= 8 << 20, "moved {moved} bytes of a 12 MiB file");
        // The second whole 2 MiB piece of the map lies inside the tensor data.
        let piece = (borrowed.as_ptr() as usize).next_multiple_of(2 << 20) + (2 << 20);
        let line = mapping_of(piece);
        let inode = line.split_whitespace().nth(4).unwrap();
        assert_eq!(inode, "0", "still file-backed after the move: {line}");
    } else {
        assert_eq!(moved, 0);
    }

    // A request outliving the file and its tensors moves nothing.
    let g = GgufFile::open(&path).unwrap();
    let late = g.huge_pages().unwrap();
    drop(g);
    assert_eq!(late.run().unwrap(), 0);
    std::fs::remove_file(&path).ok();
}

/// The WebAssembly load path on corrupted files: loading with the weights interleaved in
/// place, then reading and multiplying every tensor through that layout, gives values or
/// errors, never a panic.
#[test]
fn corrupted_files_interleaved_in_place_never_panic() {
    use hanzo_ml::cpu::Blob;
    use hanzo_ml::quantized::QMatMul;
    use hanzo_ml::{DType, Device, Tensor};
    let types = [
        GgmlDType::Q8_0,
        GgmlDType::Q4_1,
        GgmlDType::Q5_0,
        GgmlDType::MXFP4,
    ];
    let tensors: Vec<(String, QTensor)> = types
        .iter()
        .enumerate()
        .map(|(i, &dt)| {
            (
                format!("w{i}"),
                common::weight_tensor(dt, 16, 64, i as u64 + 1),
            )
        })
        .collect();
    let bytes = write(&[], &tensors);
    let clean = GgufFile::from_blob_interleaved(Blob::copy_of(&bytes)).unwrap();
    for (name, t) in &tensors {
        let got = clean.tensor(name).unwrap();
        assert!(got.is_interleaved(), "{name}");
        assert_eq!(got.dequantize_f32().unwrap(), t.dequantize_f32().unwrap());
    }
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut loaded = 0;
    for _ in 0..2000 {
        let mut b = bytes.clone();
        for _ in 0..1 + next() % 4 {
            // Half the hits in the header, where shapes, types and offsets live.
            let i = match next() % 2 {
                0 => next() as usize % 256,
                _ => next() as usize % b.len(),
            };
            b[i] = next() as u8;
        }
        let result = std::panic::catch_unwind(|| {
            let Ok(file) = GgufFile::from_blob_interleaved(Blob::copy_of(&b)) else {
                return false;
            };
            for info in file.tensor_infos() {
                let Ok(t) = file.tensor(&info.name) else {
                    continue;
                };
                let _ = t.dequantize_f32();
                let _ = t.dequantize_rows(&[0, 15]);
                let k = t.shape().dims().last().copied().unwrap_or(0);
                if let Ok(w) = QMatMul::from_arc(std::sync::Arc::new(t)) {
                    let x = Tensor::ones((1, k), DType::F32, &Device::Cpu).unwrap();
                    let _ = w.forward(&x);
                }
            }
            true
        });
        loaded += usize::from(result.expect("the interleaved load path panicked"));
    }
    // About a third load (663 of 2,000 when written): the rest fail to parse.
    assert!(loaded > 200, "only {loaded} corrupted files loaded");
}
