"""Megatron's indexed dataset (``.bin`` + ``.idx``, header ``MMIDIDX``, version 1), written.

One format for both engines: megatron-core 0.19's ``IndexedDataset`` and Megatron-DeepSpeed's
``MMapIndexedDataset`` read the same files (``--data-path`` is the common prefix). ``.bin`` holds
the token ids of every sequence back to back; ``.idx`` holds the header, the dtype code, the
sequence and document counts, each sequence's length (int32) and byte offset (int64), and the
document boundaries (int64, sequence indices starting at 0). Here every document is one sequence.
"""

from __future__ import annotations

import struct
from typing import BinaryIO

import numpy as np

INDEX_HEADER = b"MMIDIDX\x00\x00"
INDEX_VERSION = 1
# Both readers' dtype codes (megatron.core.datasets.indexed_dataset.DType).
DTYPE_CODES = {np.uint8: 1, np.int8: 2, np.int16: 3, np.int32: 4, np.int64: 5, np.uint16: 8}


def token_dtype(vocab_size: int) -> type[np.integer]:
    """uint16 where every id fits (GPT-2's 50257), else int32, as Megatron's tools choose."""
    return np.uint16 if vocab_size < 65500 else np.int32


class IndexedWriter:
    """Append documents to an open ``.bin``; ``write_index`` then writes the ``.idx``."""

    def __init__(self, bin_file: BinaryIO, dtype: type[np.integer]):
        self.bin_file = bin_file
        self.dtype = dtype
        self.lengths: list[int] = []
        self.tokens = 0

    def add_documents(self, documents: list[np.ndarray], end_of_document: int) -> None:
        """Write each document's ids followed by ``end_of_document`` (Megatron's --append-eod)."""
        if not documents:
            return
        eod = np.array([end_of_document], dtype=self.dtype)
        flat = np.concatenate([part for ids in documents for part in (ids.astype(self.dtype), eod)])
        self.bin_file.write(flat.tobytes(order="C"))
        self.lengths.extend(len(ids) + 1 for ids in documents)
        self.tokens += flat.size

    def write_index(self, idx_file: BinaryIO) -> None:
        lengths = np.asarray(self.lengths, dtype=np.int32)
        pointers = np.zeros(len(lengths), dtype=np.int64)
        np.cumsum(lengths[:-1].astype(np.int64) * np.dtype(self.dtype).itemsize, out=pointers[1:])
        documents = np.arange(len(lengths) + 1, dtype=np.int64)
        idx_file.write(INDEX_HEADER)
        idx_file.write(struct.pack("<Q", INDEX_VERSION))
        idx_file.write(struct.pack("<B", DTYPE_CODES[self.dtype]))
        idx_file.write(struct.pack("<Q", len(lengths)))
        idx_file.write(struct.pack("<Q", len(documents)))
        idx_file.write(lengths.tobytes(order="C"))
        idx_file.write(pointers.tobytes(order="C"))
        idx_file.write(documents.tobytes(order="C"))
