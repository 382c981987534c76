"""Write a safetensors file one tensor at a time, never holding more than one tensor in memory.

Contract: :class:`StreamWriter` reserves room for the JSON header at the start of the file,
appends each tensor's bytes as it is added, and on :meth:`StreamWriter.close` writes the header
(padded with spaces to the reserved size, as the format allows). If the header outgrew the
reservation, the file is rewritten once with a larger header (correct, just slower). Add tensors
in descending item size (4-byte before 2-byte before 1-byte) to keep every tensor aligned.
The result is an ordinary safetensors file that ``safetensors`` and ``from_pretrained`` read.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path
from typing import Any

DTYPE_CODES = {
    "float32": "F32",
    "float16": "F16",
    "bfloat16": "BF16",
    "uint8": "U8",
    "int8": "I8",
    "int32": "I32",
}
HEADER_BYTES_PER_TENSOR = 256


class StreamWriter:
    """Append tensors to ``path``; ``close(metadata)`` finishes the file. Use as a context."""

    def __init__(self, path: Path, expected_tensors: int) -> None:
        self.path = Path(path)
        self.reserve = _round8(4096 + HEADER_BYTES_PER_TENSOR * max(expected_tensors, 1))
        self.entries: dict[str, dict[str, Any]] = {}
        self.offset = 0
        self._fh = open(self.path, "wb")  # noqa: SIM115 - closed in close()
        self._fh.seek(8 + self.reserve)

    def add(self, name: str, tensor: Any) -> int:
        """Append one torch tensor (F32, F16, BF16, U8, I8 or I32); return the bytes written."""
        import torch

        dtype = str(tensor.dtype).removeprefix("torch.")
        if name in self.entries:
            raise ValueError(f"duplicate tensor {name}")
        if dtype not in DTYPE_CODES:
            raise ValueError(f"cannot store {name} as {dtype}")
        data = tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()
        self._fh.write(memoryview(data))
        size = int(data.nbytes)
        self.entries[name] = {
            "dtype": DTYPE_CODES[dtype],
            "shape": list(tensor.shape),
            "data_offsets": [self.offset, self.offset + size],
        }
        self.offset += size
        return size

    def close(self, metadata: dict[str, str] | None = None) -> None:
        """Write the header; the file is complete after this returns."""
        header = dict(self.entries)
        header["__metadata__"] = {"format": "pt", **(metadata or {})}
        text = json.dumps(header, separators=(",", ":")).encode()
        if len(text) <= self.reserve:
            self._fh.seek(0)
            self._fh.write(struct.pack("<Q", self.reserve) + text.ljust(self.reserve, b" "))
            self._fh.close()
            return
        self._fh.close()
        self._rewrite(text)

    def _rewrite(self, text: bytes) -> None:
        """The rare slow path: the header did not fit, so copy the data behind a bigger one."""
        size = _round8(len(text))
        tmp = self.path.with_name(self.path.name + ".rewrite")
        with open(self.path, "rb") as src, open(tmp, "wb") as dst:
            dst.write(struct.pack("<Q", size) + text.ljust(size, b" "))
            src.seek(8 + self.reserve)
            shutil.copyfileobj(src, dst, 16 << 20)
        os.replace(tmp, self.path)

    def abort(self) -> None:
        """Close without finishing (the caller removes the file)."""
        if not self._fh.closed:
            self._fh.close()


def _round8(n: int) -> int:
    return (n + 7) // 8 * 8
