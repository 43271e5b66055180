"""Regenerate the NumPy / safetensors fixtures read by tests/io.rs.

Run from this directory: `python3 make_npy_fixtures.py` (needs numpy; the safetensors
fixture also needs `pip install safetensors`, and is skipped without it). The outputs are
small and committed so `cargo test` does not need Python.
"""
import numpy as np

np.save("f32_c.npy", np.arange(6, dtype="<f4").reshape(2, 3) * 0.5 - 1)
np.save("f64_fortran.npy", np.asfortranarray(np.arange(12, dtype="<f8").reshape(3, 4) + 0.25))
np.save("u8.npy", np.array([0, 1, 127, 255], dtype=np.uint8))
np.save("i64_scalar.npy", np.array(-1234567890123, dtype="<i8"))
np.save("bool.npy", np.array([[True, False], [False, True]]))
np.save("f16_be.npy", np.array([1.5, -2.0, 65504.0], dtype=">f2"))
# Format versions 2.0 and 3.0 (NumPy picks them only for huge or non-latin-1 headers).
with open("u4_v2.npy", "wb") as f:
    np.lib.format.write_array(f, np.array([1, 2, 4294967295], dtype="<u4"), version=(2, 0))
with open("f8_v3.npy", "wb") as f:
    np.lib.format.write_array(f, np.array([[0.5], [-0.5]], dtype=">f8"), version=(3, 0))
np.savez("two.npz", a=np.array([1, 2, 3], dtype="<u4"), b=np.eye(2, dtype="<f4"))
np.savez_compressed(
    "compressed.npz",
    zeros=np.zeros((16, 16), dtype="<f8"),
    ramp=np.arange(10, dtype="<i8"),
)

try:
    from safetensors.numpy import save_file
except ImportError:
    print("safetensors not installed: skipping py_written.safetensors")
else:
    save_file(
        {
            "w": np.arange(6, dtype="<f4").reshape(3, 2),
            "b": np.array([1.0, -1.0], dtype="<f2"),
            "idx": np.array([5, 7], dtype="<i8"),
            "bytes": np.array([1, 2, 3], dtype=np.uint8),
        },
        "py_written.safetensors",
        metadata={"format": "np"},
    )
