"""Hanzo ML from Python: tensors that share memory with NumPy, autograd, and local language
and embedding models, all in-process (the native code is the same as `hanzo-engine`'s).

>>> import hanzo, numpy as np
>>> a = np.arange(6, dtype=np.float32).reshape(2, 3)
>>> t = hanzo.Tensor(a)          # views `a`, no copy
>>> (t * 2).sum().item()
30.0
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator

from ._native import (
    LLM,
    Embedder,
    Reranker,
    Stream,
    Tensor,
    __version__,
    load_gguf,
    load_safetensors,
    ones,
    save_safetensors,
    tensor,
    zeros,
)

__all__ = [
    "LLM",
    "Embedder",
    "Reranker",
    "Stream",
    "Tensor",
    "astream",
    "from_numpy",
    "load_gguf",
    "load_safetensors",
    "ones",
    "save_safetensors",
    "tensor",
    "zeros",
    "__version__",
]

from_numpy = Tensor.from_numpy

_END = object()


async def astream(llm: LLM, prompt, **kwargs) -> AsyncIterator[str]:
    """`async for piece in hanzo.astream(llm, prompt, ...)`: `LLM.stream`'s pieces, each
    produced on a worker thread so the event loop keeps running."""
    it = llm.stream(prompt, **kwargs)
    loop = asyncio.get_running_loop()
    try:
        while True:
            piece = await loop.run_in_executor(None, next, it, _END)
            if piece is _END:
                return
            yield piece
    finally:
        it.close()
