//! File I/O: safetensors and NumPy round trips for every dtype, zero-copy loading, malformed
//! inputs (must be `Error::Format`, never a panic), and interop with files written by real
//! NumPy / Python safetensors (fixtures in tests/data, made by make_npy_fixtures.py).

use hanzo_ml::io::{npy, safetensors as st};
use hanzo_ml::{CpuStorage, DType, Device, Error, Storage, Tensor};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const CPU: Device = Device::Cpu;

fn tmp(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("io_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// A tensor of `dtype` with small exactly-representable values (valid for every dtype).
fn sample(dtype: DType, dims: &[usize]) -> Tensor {
    let n: usize = dims.iter().product();
    let vals = (0..n).map(|i| (i % 13) as f64 * if dtype.is_float() { 0.5 } else { 1.0 });
    Tensor::from_cpu_storage(CpuStorage::from_f64_iter(dtype, vals), dims.to_vec()).unwrap()
}

fn values(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64)
        .unwrap()
        .to_vec_flat::<f64>()
        .unwrap()
}

fn assert_same(a: &Tensor, b: &Tensor, what: &str) {
    assert_eq!(a.dtype(), b.dtype(), "{what}");
    assert_eq!(a.dims(), b.dims(), "{what}");
    assert_eq!(values(a), values(b), "{what}");
}

fn is_format(r: &hanzo_ml::Result<impl std::fmt::Debug>) -> bool {
    matches!(r, Err(Error::Format { .. }))
}

fn is_mapped(t: &Tensor) -> bool {
    let Storage::Cpu(s) = t.storage();
    match s {
        CpuStorage::U8(b) => b.is_mapped(),
        CpuStorage::U32(b) => b.is_mapped(),
        CpuStorage::I64(b) => b.is_mapped(),
        CpuStorage::BF16(b) => b.is_mapped(),
        CpuStorage::F16(b) => b.is_mapped(),
        CpuStorage::F32(b) => b.is_mapped(),
        CpuStorage::F64(b) => b.is_mapped(),
        CpuStorage::F8E4M3(b) => b.is_mapped(),
    }
}

/// A safetensors image from a raw JSON header and data section.
fn st_image(header: &str, data: &[u8]) -> Vec<u8> {
    let mut v = (header.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(header.as_bytes());
    v.extend_from_slice(data);
    v
}

fn load_bytes(name: &str, bytes: &[u8]) -> hanzo_ml::Result<HashMap<String, Tensor>> {
    let p = tmp(name);
    std::fs::write(&p, bytes).unwrap();
    st::load(&p)
}

fn python_has(module: &str) -> bool {
    let ok = Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        println!("note: python3 with `{module}` not available, skipping the Python check");
    }
    ok
}

fn run_python(script: &str) {
    let out = Command::new("python3")
        .args(["-c", script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn safetensors_round_trip_all_dtypes() {
    let mut tensors = HashMap::new();
    for dtype in DType::ALL {
        tensors.insert(format!("{dtype}"), sample(dtype, &[3, 5]));
        tensors.insert(format!("{dtype}_scalar"), sample(dtype, &[]));
        tensors.insert(format!("{dtype}_empty"), sample(dtype, &[0, 4]));
        // Non-contiguous input is written in logical order.
        tensors.insert(format!("{dtype}_t"), sample(dtype, &[4, 2]).t().unwrap());
    }
    let p = tmp("all.safetensors");
    st::save(&tensors, &p).unwrap();
    let back = st::load(&p).unwrap();
    assert_eq!(back.len(), tensors.len());
    for (name, t) in &tensors {
        assert_same(t, &back[name], name);
    }
    // Single-tensor convenience method and iterator input.
    let t = sample(DType::F32, &[2, 2]);
    // (Fresh paths: rewriting a file that live tensors still map is not allowed.)
    let p = tmp("one.safetensors");
    t.save_safetensors("only", &p).unwrap();
    assert_same(&t, &st::load(&p).unwrap()["only"], "save_safetensors");
    let p = tmp("two.safetensors");
    st::save([("x", &t), ("y", &t)], &p).unwrap();
    assert_eq!(st::load(&p).unwrap().len(), 2);
    assert!(st::save([("x", &t), ("x", &t)], tmp("dup.safetensors")).is_err());
}

#[test]
fn safetensors_zero_copy_when_aligned() {
    let p = tmp("aligned.safetensors");
    let w = Tensor::arange(0f32, 24., &CPU)
        .unwrap()
        .reshape((4, 6))
        .unwrap();
    let tensors = HashMap::from([
        ("w".to_string(), w.clone()),
        ("b".to_string(), sample(DType::BF16, &[7])),
        ("i".to_string(), sample(DType::I64, &[3])),
    ]);
    st::save(&tensors, &p).unwrap();
    let back = st::load(&p).unwrap();
    match back["w"].storage() {
        Storage::Cpu(CpuStorage::F32(b)) => assert!(b.is_mapped()),
        s => panic!("unexpected storage {s:?}"),
    }
    // The writer pads the header to 8 and orders by alignment, so every tensor maps.
    assert!(back.values().all(is_mapped));
    assert_same(&w, &back["w"], "w");
    // Ops on a mapped tensor work and produce owned results.
    let s = back["w"].sum_all().unwrap().to_scalar::<f32>().unwrap();
    assert_eq!(s, 276.0);
}

#[test]
fn safetensors_unaligned_data_is_copied() {
    // Header length 9 puts the f32 data at byte 17: readable, but not aligned for a view.
    let header = r#"{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
    let pad = (1 + 4 - header.len() % 4) % 4;
    let header = format!("{header}{}", " ".repeat(pad));
    assert_eq!((8 + header.len()) % 4, 1);
    let data: Vec<u8> = [1.5f32, -2.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let back = load_bytes("unaligned.safetensors", &st_image(&header, &data)).unwrap();
    assert!(!is_mapped(&back["x"]));
    assert_eq!(back["x"].to_vec1::<f32>().unwrap(), [1.5, -2.0]);
}

#[test]
fn safetensors_lazy_get_and_names() {
    let p = tmp("lazy.safetensors");
    let a = sample(DType::F16, &[2, 3]);
    let b = sample(DType::U8, &[5]);
    st::save([("b", &b), ("a", &a)], &p).unwrap();
    let file = st::MmapedSafetensors::new(&p).unwrap();
    assert_eq!(file.names(), ["a", "b"]);
    let got_b = file.get("b").unwrap();
    drop(file); // tensors keep the map alive
    assert_same(&b, &got_b, "b");
    let file = st::MmapedSafetensors::new(&p).unwrap();
    assert_same(&a, &file.get("a").unwrap(), "a");
    assert!(is_format(&file.get("missing")));
    assert!(file.metadata().is_none());
}

#[test]
fn safetensors_malformed_inputs_are_format_errors() {
    let good = {
        let p = tmp("good.safetensors");
        st::save([("x", &sample(DType::F32, &[4]))], &p).unwrap();
        std::fs::read(&p).unwrap()
    };
    let f32x2 = |offsets: &str| {
        format!(r#"{{"x":{{"dtype":"F32","shape":[2],"data_offsets":{offsets}}}}}"#)
    };
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", vec![]),
        ("short", vec![1, 0, 0]),
        ("truncated", good[..good.len() - 1].to_vec()),
        ("extra byte", [&good[..], &[0]].concat()),
        (
            "header length past end",
            st_image("{}", &[]).splice(..8, [255; 8]).collect(),
        ),
        ("bad json", st_image(r#"{"x": {"dtype": "F32", "#, &[0; 8])),
        ("offsets past end", st_image(&f32x2("[0,8]"), &[0; 4])),
        (
            "offsets mismatch shape",
            st_image(&f32x2("[0,12]"), &[0; 12]),
        ),
        ("offsets reversed", st_image(&f32x2("[8,0]"), &[0; 8])),
        (
            "offset near usize::MAX",
            st_image(
                r#"{"x":{"dtype":"U8","shape":[18446744073709551612],"data_offsets":[0,18446744073709551612]}}"#,
                &[],
            ),
        ),
        (
            "shape product overflows",
            st_image(
                r#"{"x":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}}"#,
                &[],
            ),
        ),
    ];
    for (what, bytes) in &cases {
        let r = load_bytes("bad.safetensors", bytes);
        assert!(is_format(&r), "{what}: {r:?}");
    }
    // A dtype we do not have names the tensor and the dtype.
    let i32_file = st_image(
        r#"{"ints":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}}"#,
        &[0; 4],
    );
    let err = load_bytes("i32.safetensors", &i32_file).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, Error::Format { .. }) && msg.contains("ints") && msg.contains("I32"),
        "{msg}"
    );
    // Arbitrary corruption of a valid file never panics.
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    for i in 0..300 {
        let mut b = good.clone();
        for _ in 0..1 + i % 4 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let at = (rng % b.len() as u64) as usize;
            b[at] = (rng >> 32) as u8;
        }
        let _ = load_bytes("fuzz.safetensors", &b);
    }
}

#[test]
fn safetensors_written_by_python() {
    let file = st::MmapedSafetensors::new(data("py_written.safetensors")).unwrap();
    assert_eq!(file.names(), ["b", "bytes", "idx", "w"]);
    assert_eq!(file.metadata().unwrap()["format"], "np");
    let w = file.get("w").unwrap();
    assert!(is_mapped(&w));
    assert_eq!(w.to_vec2::<f32>().unwrap(), [[0., 1.], [2., 3.], [4., 5.]]);
    assert_eq!(values(&file.get("b").unwrap()), [1.0, -1.0]);
    assert_eq!(file.get("b").unwrap().dtype(), DType::F16);
    assert_eq!(file.get("idx").unwrap().to_vec1::<i64>().unwrap(), [5, 7]);
    assert_eq!(
        file.get("bytes").unwrap().to_vec1::<u8>().unwrap(),
        [1, 2, 3]
    );
}

#[test]
fn python_safetensors_reads_what_we_write() {
    if !python_has("safetensors.numpy") {
        return;
    }
    let p = tmp("for_python.safetensors");
    let w = Tensor::new([[1f32, 2., 3.], [4., 5., 6.]], &CPU).unwrap();
    let i = Tensor::new([-3i64, 9], &CPU).unwrap();
    st::save([("w", &w), ("i", &i)], &p).unwrap();
    run_python(&format!(
        "from safetensors.numpy import load_file\nimport numpy as np\n\
         d = load_file({p:?})\n\
         assert d['w'].dtype == np.float32 and d['w'].tolist() == [[1,2,3],[4,5,6]], d\n\
         assert d['i'].dtype == np.int64 and d['i'].tolist() == [-3, 9], d\n"
    ));
}

#[test]
fn npy_round_trip_all_dtypes() {
    for dtype in [
        DType::U8,
        DType::U32,
        DType::I64,
        DType::F16,
        DType::F32,
        DType::F64,
    ] {
        for dims in [&[][..], &[0], &[5], &[2, 3, 4]] {
            let t = sample(dtype, dims);
            let what = format!("{dtype} {dims:?}");
            let p = tmp(&format!("rt_{dtype}_{}.npy", dims.len()));
            t.write_npy(&p).unwrap();
            assert_same(&t, &Tensor::read_npy(&p).unwrap(), &what);
            let bytes = npy::to_npy_bytes(&t).unwrap();
            assert_eq!(bytes, std::fs::read(&p).unwrap(), "{what}");
            assert_same(&t, &npy::read_npy_bytes(&bytes).unwrap(), &what);
        }
    }
    // Non-contiguous tensors are written in logical order.
    let t = sample(DType::F32, &[3, 4]).t().unwrap();
    assert_same(
        &t,
        &npy::read_npy_bytes(&npy::to_npy_bytes(&t).unwrap()).unwrap(),
        "t",
    );
    for dtype in [DType::BF16, DType::F8E4M3] {
        let r = npy::to_npy_bytes(&sample(dtype, &[2]));
        assert!(matches!(r, Err(Error::UnsupportedDType { .. })), "{dtype}");
    }
}

#[test]
fn npz_round_trip_stored_and_deflated() {
    let a = sample(DType::F32, &[3, 4]);
    let b = sample(DType::I64, &[]);
    let c = sample(DType::U8, &[100]);
    let entries = [("a", &a), ("b", &b), ("c", &c)];
    for (file, compressed) in [("s.npz", false), ("d.npz", true)] {
        let p = tmp(file);
        if compressed {
            npy::write_npz_compressed(&p, &entries).unwrap();
        } else {
            npy::write_npz(&p, &entries).unwrap();
        }
        let back = npy::read_npz(&p).unwrap();
        let names: Vec<&str> = back.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        for ((_, t), (_, u)) in entries.iter().zip(&back) {
            assert_same(t, u, file);
        }
    }
    assert!(npy::write_npz(tmp("dup.npz"), &[("a", &a), ("a", &b)]).is_err());
}

#[test]
fn numpy_fixtures_read_exactly() {
    let t = npy::read_npy(data("f32_c.npy")).unwrap();
    assert_eq!(
        t.to_vec2::<f32>().unwrap(),
        [[-1., -0.5, 0.], [0.5, 1., 1.5]]
    );

    // Fortran order: logical values equal the C-order arange, and the result is contiguous.
    let t = npy::read_npy(data("f64_fortran.npy")).unwrap();
    assert!(t.is_contiguous());
    let want: Vec<Vec<f64>> = (0..3)
        .map(|r| (0..4).map(|c| (r * 4 + c) as f64 + 0.25).collect())
        .collect();
    assert_eq!(t.to_vec2::<f64>().unwrap(), want);

    let t = npy::read_npy(data("u8.npy")).unwrap();
    assert_eq!(t.to_vec1::<u8>().unwrap(), [0, 1, 127, 255]);

    let t = npy::read_npy(data("i64_scalar.npy")).unwrap();
    assert_eq!(
        (t.rank(), t.to_scalar::<i64>().unwrap()),
        (0, -1234567890123)
    );

    let t = npy::read_npy(data("bool.npy")).unwrap();
    assert_eq!(t.to_vec2::<u8>().unwrap(), [[1, 0], [0, 1]]);

    // Big-endian half floats are byte-swapped.
    let t = npy::read_npy(data("f16_be.npy")).unwrap();
    assert_eq!(
        (t.dtype(), values(&t)),
        (DType::F16, vec![1.5, -2.0, 65504.0])
    );

    let t = npy::read_npy(data("u4_v2.npy")).unwrap();
    assert_eq!(t.to_vec1::<u32>().unwrap(), [1, 2, u32::MAX]);
    let t = npy::read_npy(data("f8_v3.npy")).unwrap();
    assert_eq!(t.to_vec2::<f64>().unwrap(), [[0.5], [-0.5]]);

    let two = npy::read_npz(data("two.npz")).unwrap();
    assert_eq!((two[0].0.as_str(), two[1].0.as_str()), ("a", "b"));
    assert_eq!(two[0].1.to_vec1::<u32>().unwrap(), [1, 2, 3]);
    assert_eq!(two[1].1.to_vec2::<f32>().unwrap(), [[1., 0.], [0., 1.]]);

    let z = npy::read_npz(data("compressed.npz")).unwrap();
    let z: HashMap<_, _> = z.into_iter().collect();
    assert_eq!(z["zeros"].dims(), [16, 16]);
    assert!(values(&z["zeros"]).iter().all(|&v| v == 0.0));
    assert_eq!(
        z["ramp"].to_vec1::<i64>().unwrap(),
        (0..10).collect::<Vec<i64>>()
    );
}

#[test]
fn numpy_reads_what_we_write() {
    if !python_has("numpy") {
        return;
    }
    let f = tmp("for_numpy.npy");
    let z = tmp("for_numpy.npz");
    let zc = tmp("for_numpy_c.npz");
    let a = Tensor::new([[1f32, 2., 3.], [4., 5., 6.]], &CPU).unwrap();
    let s = Tensor::new(7i64, &CPU).unwrap();
    let h = Tensor::new([0.5f32, -1.0], &CPU)
        .unwrap()
        .to_dtype(DType::F16)
        .unwrap();
    a.t().unwrap().write_npy(&f).unwrap();
    npy::write_npz(&z, &[("a", &a), ("s", &s)]).unwrap();
    npy::write_npz_compressed(&zc, &[("h", &h)]).unwrap();
    run_python(&format!(
        "import numpy as np\n\
         t = np.load({f:?})\n\
         assert t.dtype == np.float32 and t.tolist() == [[1,4],[2,5],[3,6]], t\n\
         d = np.load({z:?})\n\
         assert sorted(d.files) == ['a', 's'] and d['a'].tolist() == [[1,2,3],[4,5,6]]\n\
         assert d['s'].shape == () and d['s'].dtype == np.int64 and d['s'] == 7\n\
         c = np.load({zc:?})\n\
         assert c['h'].dtype == np.float16 and c['h'].tolist() == [0.5, -1.0]\n"
    ));
}

#[test]
fn npy_malformed_inputs_are_format_errors() {
    let good = npy::to_npy_bytes(&sample(DType::F32, &[2, 3])).unwrap();
    let with_header = |dict: &str| {
        let mut v = b"\x93NUMPY\x01\x00".to_vec();
        v.extend_from_slice(&(dict.len() as u16).to_le_bytes());
        v.extend_from_slice(dict.as_bytes());
        v
    };
    let dict = |descr: &str, shape: &str| {
        format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}\n")
    };
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", vec![]),
        ("bad magic", [b"\x93NUMPX", &good[6..]].concat()),
        ("bad version", [&good[..6], &[4, 0], &good[8..]].concat()),
        (
            "header length past end",
            [&good[..8], &[0xff, 0xff], &good[10..]].concat(),
        ),
        ("truncated data", good[..good.len() - 1].to_vec()),
        ("trailing bytes", [&good[..], &[0]].concat()),
        (
            "huge shape",
            with_header(&dict("<f4", "(99999999999, 99999999999)")),
        ),
        (
            "shape overflow",
            with_header(&dict("<f4", "(4294967296, 4294967296, 4294967296)")),
        ),
        (
            "dim overflow",
            with_header(&dict("<f4", "(123456789012345678901234567890,)")),
        ),
        (
            "unsupported dtype",
            [with_header(&dict("<i4", "(1,)")), vec![0; 4]].concat(),
        ),
        (
            "structured dtype",
            with_header("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (), }"),
        ),
        ("object dtype", with_header(&dict("|O", "()"))),
        ("not a dict", with_header("['descr', '<f4']")),
    ];
    for (what, bytes) in &cases {
        let r = npy::read_npy_bytes(bytes);
        assert!(is_format(&r), "{what}: {r:?}");
    }
    let msg = npy::read_npy_bytes(&cases[9].1).unwrap_err().to_string();
    assert!(msg.contains("<i4"), "{msg}");
    // Every truncation and random corruption errors without panicking.
    for n in 0..good.len() {
        assert!(
            is_format(&npy::read_npy_bytes(&good[..n])),
            "truncated to {n}"
        );
    }
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..2000 {
        let mut b = good.clone();
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let at = (rng % b.len() as u64) as usize;
        b[at] = (rng >> 40) as u8;
        let _ = npy::read_npy_bytes(&b);
    }
}

#[test]
fn npz_malformed_inputs_are_format_errors() {
    let p = tmp("good.npz");
    npy::write_npz(&p, &[("a", &sample(DType::F64, &[8]))]).unwrap();
    let good = std::fs::read(&p).unwrap();
    let bad = tmp("bad.npz");
    for n in [0, 10, good.len() / 2, good.len() - 1] {
        std::fs::write(&bad, &good[..n]).unwrap();
        let r = npy::read_npz(&bad);
        assert!(is_format(&r), "truncated to {n}: {r:?}");
    }
    let mut rng = 0x1234_5678_9abc_def1u64;
    for _ in 0..300 {
        let mut b = good.clone();
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let at = (rng % b.len() as u64) as usize;
        b[at] = (rng >> 40) as u8;
        std::fs::write(&bad, &b).unwrap();
        let _ = npy::read_npz(&bad);
    }
}
