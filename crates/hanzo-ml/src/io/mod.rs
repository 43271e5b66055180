//! File formats: safetensors (mmap, zero-copy where aligned) and NumPy `.npy` / `.npz`.
