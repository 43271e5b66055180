"""hanzo.Tensor against NumPy: memory shared both ways where promised, bit-exact values,
broadcasting operators, gradients against finite differences, files, and errors."""

import numpy as np
import pytest

import hanzo

DTYPES = ["float32", "float16", "float64", "int64", "uint32", "uint8"]


def sample(dtype, shape=(3, 5), seed=0):
    rng = np.random.default_rng(seed)
    if dtype.startswith("float"):
        return (rng.standard_normal(shape) * 100).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_numpy_round_trip_is_bit_exact_and_shares_memory(dtype):
    a = sample(dtype)
    t = hanzo.Tensor(a)
    assert t.dtype == dtype and t.shape == a.shape
    b = t.numpy()
    assert b.dtype == a.dtype and b.shape == a.shape
    assert b.tobytes() == a.tobytes()
    # One buffer: the tensor views the array, the array from the tensor views the tensor.
    assert np.shares_memory(a, b)
    a[1, 2] = a[0, 0]
    assert t.numpy()[1, 2] == a[0, 0]


def test_writes_to_the_array_are_seen_by_the_tensor():
    a = np.zeros(4, dtype=np.float32)
    t = hanzo.from_numpy(a)
    a[:] = [1, 2, 3, 4]
    assert (t * 1.0).numpy().tolist() == [1, 2, 3, 4]
    assert t.sum().item() == 10


def test_arrays_a_view_cannot_take_are_copied():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = hanzo.Tensor(a[:, ::2])  # not C-contiguous: copied
    assert t.numpy().tolist() == a[:, ::2].tolist()
    assert not np.shares_memory(t.numpy(), a)
    be = a.astype(">f4")  # big-endian: copied into native order
    assert hanzo.Tensor(be).numpy().tolist() == a.tolist()


def test_tensor_views_reach_numpy_with_their_strides():
    a = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    t = hanzo.Tensor(a)
    assert np.array_equal(t.T.numpy(), a.T)
    assert np.shares_memory(t.T.numpy(), a)
    assert np.array_equal(t[1, :, 1:3].numpy(), a[1, :, 1:3])
    assert np.array_equal(t[:, ::2].numpy(), a[:, ::2])
    assert np.array_equal(t[-1, -1].numpy(), a[-1, -1])
    assert np.array_equal(np.asarray(t.permute(2, 0, 1)), a.transpose(2, 0, 1))


def test_arrays_from_tensors_are_read_only():
    b = hanzo.ones(3).numpy()
    with pytest.raises(ValueError):
        b[0] = 5


def test_bfloat16_comes_back_as_float32_rounded_to_nearest_even():
    a = sample("float32", (64,), seed=3)
    got = hanzo.Tensor(a).to("bfloat16").numpy()
    bits = a.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16).astype(np.uint32)
    assert got.dtype == np.float32
    assert np.array_equal(got.view(np.uint32), rounded)


def test_operators_broadcast_as_numpy():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((4, 1, 3)).astype(np.float32)
    b = rng.standard_normal((5, 3)).astype(np.float32)
    ta, tb = hanzo.Tensor(a), hanzo.Tensor(b)
    for got, want in [
        (ta + tb, a + b),
        (ta - tb, a - b),
        (ta * tb, a * b),
        (ta / (tb * tb + 1), a / (b * b + 1)),
        (2.5 - ta, 2.5 - a),
        (1.0 / (ta * ta + 1), 1.0 / (a * a + 1)),
        (-ta * 3 + 1, -a * 3 + 1),
        (ta ** 2, a ** 2),
    ]:
        assert got.shape == want.shape
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-6)


def test_matmul_reductions_and_functions_match_numpy():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((2, 3, 8)).astype(np.float32)
    w = rng.standard_normal((8, 5)).astype(np.float32)
    ta, tw = hanzo.Tensor(a), hanzo.Tensor(w)
    np.testing.assert_allclose((ta @ tw).numpy(), a @ w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose((ta @ w).numpy(), a @ w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ta.sum(1).numpy(), a.sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ta.mean(-1, keepdim=True).numpy(), a.mean(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ta.max(0).numpy(), a.max(0))
    assert ta.sum().shape == () and abs(ta.sum().item() - float(a.sum())) < 1e-3
    e = np.exp(a - a.max(-1, keepdims=True))
    np.testing.assert_allclose(ta.softmax(-1).numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(ta.tanh().numpy(), np.tanh(a), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ta.exp().log().numpy(), a, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ta.relu().numpy(), np.maximum(a, 0))
    assert ta.reshape(6, -1).shape == (6, 8) and ta.reshape((48,)).shape == (48,)


def loss(x, w, b):
    return ((x @ w + b).tanh() ** 2).mean()


def test_gradients_match_finite_differences():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 4))
    w = rng.standard_normal((4, 2))
    b = rng.standard_normal((2,))
    tw = hanzo.Tensor(w, requires_grad=True)
    tb = hanzo.Tensor(b, requires_grad=True)
    out = loss(hanzo.Tensor(x), tw, tb)
    assert out.requires_grad
    out.backward()

    def numeric(param):
        g = np.zeros_like(param)
        eps = 1e-6
        for i in np.ndindex(param.shape):
            old = param[i]
            param[i] = old + eps
            up = float(np.mean(np.tanh(x @ w + b) ** 2))
            param[i] = old - eps
            down = float(np.mean(np.tanh(x @ w + b) ** 2))
            param[i] = old
            g[i] = (up - down) / (2 * eps)
        return g

    np.testing.assert_allclose(tw.grad.numpy(), numeric(w), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(tb.grad.numpy(), numeric(b), rtol=1e-6, atol=1e-9)


def test_gradients_accumulate_until_cleared():
    x = hanzo.Tensor([1.0, -2.0, 3.0], requires_grad=True)
    assert x.grad is None
    (x * x).sum().backward()
    (x * 3).sum().backward()
    assert x.grad.numpy().tolist() == [5.0, -1.0, 9.0]
    x.grad = None
    assert x.grad is None
    assert not x.detach().requires_grad


def test_safetensors_round_trip_and_the_reference_reader(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    tensors = {d: sample(d, (2, 3), seed=i) for i, d in enumerate(DTYPES)}
    path = str(tmp_path / "t.safetensors")
    hanzo.save_safetensors(tensors, path)
    theirs = safetensors_numpy.load_file(path)
    ours = hanzo.load_safetensors(path)
    for name, a in tensors.items():
        assert theirs[name].tobytes() == a.tobytes() and theirs[name].dtype == a.dtype
        assert ours[name].numpy().tobytes() == a.tobytes()
    # And a file the reference writes.
    path2 = str(tmp_path / "u.safetensors")
    safetensors_numpy.save_file({"w": tensors["float16"]}, path2)
    assert hanzo.load_safetensors(path2)["w"].numpy().tobytes() == tensors["float16"].tobytes()


def test_gguf_tensors_and_metadata_as_the_gguf_package_wrote_them(tmp_path):
    gguf = pytest.importorskip("gguf")
    path = str(tmp_path / "t.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_uint32("test.count", 7)
    w.add_string("test.name", "hanzo")
    w.add_array("test.list", [1, 2, 3])
    a = sample("float32", (4, 32), seed=5)
    h = sample("float16", (2, 32), seed=6)
    w.add_tensor("a", a)
    w.add_tensor("h", h)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tensors, meta = hanzo.load_gguf(path)
    assert meta["test.count"] == 7 and meta["test.name"] == "hanzo"
    assert meta["test.list"] == [1, 2, 3] and meta["general.architecture"] == "llama"
    assert tensors["a"].numpy().tobytes() == a.tobytes()
    np.testing.assert_array_equal(tensors["h"].numpy(), h.astype(np.float32))


def test_bad_input_raises_and_the_interpreter_survives(tmp_path):
    with pytest.raises(ValueError, match="int32"):
        hanzo.Tensor(np.zeros(3, dtype=np.int32))
    with pytest.raises(ValueError):
        hanzo.ones(2, 3) + hanzo.ones(4)
    with pytest.raises(ValueError):
        hanzo.ones(2, 3) @ hanzo.ones(2, 3)
    with pytest.raises(IndexError):
        hanzo.ones(2, 3).sum(4)
    # Mixed dtypes promote as NumPy does.
    assert (hanzo.ones(2, 3) + hanzo.ones(2, 3, dtype="float64")).dtype == "float64"
    with pytest.raises(ValueError):
        hanzo.ones(6).reshape(4, -1)
    with pytest.raises(IndexError):
        hanzo.ones(2, 3)[2]
    with pytest.raises(ValueError, match="dtype"):
        hanzo.ones(2, dtype="complex64")
    with pytest.raises(FileNotFoundError):
        hanzo.load_safetensors(str(tmp_path / "missing.safetensors"))
    with pytest.raises(FileNotFoundError):
        hanzo.load_gguf(str(tmp_path / "missing.gguf"))
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + bytes(range(256)) * 4)
    with pytest.raises(ValueError):
        hanzo.load_gguf(str(bad))
    bad2 = tmp_path / "bad.safetensors"
    bad2.write_bytes((10**9).to_bytes(8, "little") + b"{}")
    with pytest.raises(ValueError):
        hanzo.load_safetensors(str(bad2))
    assert (hanzo.ones(2) * 2).numpy().tolist() == [2.0, 2.0]
